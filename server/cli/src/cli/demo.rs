//! `forge-lsp demo`: shows the product working in a few seconds, with nothing to set up.
//!
//! In a fresh temporary directory it makes a git repository with one commit and a data
//! directory, serves LSP in this process on a Unix socket (`serve::listen_with`, the code
//! of `forge-lsp serve --listen`) and drives it as an LSP client would: `execute-plan` with
//! a sample two-section plan, whose loop runs this binary's scripted agent
//! (`forge-lsp demo-agent`, `cli/demo_agent.rs`) in the loop's worktree, sandboxed where
//! bubblewrap works. It follows the loop to its end, then prints the finding the auditor
//! wrote (from the audit history), the loop's status and transitions, the plan document as
//! an editor gets it (`workspace/textDocumentContent`), the checkpoint commits, and the
//! commands to look again. `--keep` keeps the directory; otherwise it is removed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use forge_engine::hub::Hub;
use forge_lsp_server::serve;
use forge_tools::route::lsp_client::LspClient;

/// Options of `forge-lsp demo`.
pub struct DemoArgs {
    /// Keep the temporary repository and data directory.
    pub keep: bool,
}

/// The loop's name (the plan's `Loop Name:` line).
pub const LOOP_NAME: &str = "greet-demo";

/// How long the loop may take before the demo gives up.
const LOOP_TIMEOUT: Duration = Duration::from_secs(60);

/// The sample plan: two sections, each with the headings a plan should have.
pub const PLAN: &str = "# Greet the world

Loop Name: greet-demo

## Objective
A script that prints a greeting, and a note that says how to run it.

<!-- forge-section -->
## Phase 1: The greeting script

### Files
- greet.sh

### Edits
- Create greet.sh, a POSIX shell script that prints `Hello, world`.

### Acceptance Criteria
- `sh greet.sh` prints exactly `Hello, world`.

### Verification
- sh greet.sh

<!-- forge-section -->
## Phase 2: The note

### Files
- NOTES.md

### Edits
- Create NOTES.md saying how to run greet.sh.

### Acceptance Criteria
- NOTES.md names the command `sh greet.sh`.

### Verification
- cat NOTES.md

## Decisions
- A shell script: nothing to install.

## Conventions
- POSIX sh, no bashisms.

## Key Context
- This plan is the sample of `forge-lsp demo`; its agent is scripted.
";

/// Runs the demo; the process exit status.
pub fn run(args: DemoArgs) -> i32 {
    let started = Instant::now();
    let dir = match TempDir::new(args.keep) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("forge-lsp demo: {e}");
            return 1;
        }
    };
    let code = match demo(&dir.path, args.keep, started) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("\nforge-lsp demo: {e}");
            1
        }
    };
    if args.keep {
        println!("\nKept: {} (remove it with `rm -rf {}`)", dir.path.display(), dir.path.display());
    } else {
        println!(
            "\nThe demo's directory is removed; run `forge-lsp demo --keep` to keep it and try the commands above."
        );
    }
    println!("Demo time: {:.1} s", started.elapsed().as_secs_f64());
    code
}

/// A directory of our own under the system's temporary directory, removed on drop unless
/// kept.
struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    fn new(keep: bool) -> Result<TempDir, String> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = String::new();
        for _ in 0..8 {
            let token = forge_engine::host::new_token();
            let path = base.join(format!("forge-demo-{}", &token[..10]));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // Canonical, so the paths printed are the ones the server stores.
                    let path = path.canonicalize().unwrap_or(path);
                    return Ok(TempDir { path, keep });
                }
                Err(e) => last = format!("cannot create a directory in {}: {e}", base.display()),
            }
        }
        Err(last)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn heading(title: &str) {
    println!("\n== {title} ==");
}

/// Indents a block of text for the terminal.
fn indented(text: &str) -> String {
    text.lines().map(|l| if l.is_empty() { String::new() } else { format!("  {l}") }).collect::<Vec<_>>().join("\n")
}

fn demo(root: &Path, keep: bool, started: Instant) -> Result<(), String> {
    let project = root.join("project");
    let data_dir = root.join("data");
    let socket = root.join("forge.sock");
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program's own path: {e}"))?;
    let bin = shown_bin(&exe);

    println!("forge-lsp demo: a two-section coding/auditing loop with a scripted agent (no model, no network).");
    // The demo shows forge-lsp as it ships: the user's configuration file (an agent preset,
    // a lower iteration limit, loops off) and plugins are not read by this process or its
    // agent. Set while this process has no other thread.
    let config_home = root.join("config");
    std::fs::create_dir_all(&config_home).map_err(|e| format!("cannot create {}: {e}", config_home.display()))?;
    std::env::set_var("XDG_CONFIG_HOME", &config_home);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let hub = Hub::new(Some(data_dir.clone()));
    rt.spawn(on_interrupt(hub.clone(), socket.clone(), root.to_path_buf(), keep));
    make_repository(&project)?;
    let sandbox = match forge_engine::sandbox::probe() {
        Ok(bwrap) => format!("on ({}: each shell the agent runs is in its own sandbox)", bwrap.display()),
        Err(e) => {
            format!("off: {e}\n            (the demo runs without it; loops in your projects use `sandbox.enabled`)")
        }
    };
    let sandbox_on = sandbox.starts_with("on");
    write_config(&project, &exe, sandbox_on)?;
    println!("\nRepository: {} (a new git repository with one commit)", project.display());
    println!("Data:       {} (the database and the loop's worktree)", data_dir.display());
    println!(
        "Server:     this process serves LSP on unix:{} (the code of `forge-lsp serve --listen`)",
        socket.display()
    );
    println!("Agent:      {} demo-agent (scripted: it calls the tools the way `forge-lsp call` does)", exe.display());
    println!("Sandbox:    {sandbox}");

    let server = rt.spawn(serve::listen_with(hub.clone(), serve::ListenAddr::Unix(socket.clone()), false));
    // The same settings as the project's file, as initialization options: they win over a
    // user configuration file that could turn loops off or add a post-action phase.
    let config = json!({
        "agent": { "command": [exe.display().to_string(), "demo-agent"] },
        "sandbox": { "enabled": sandbox_on },
        "loop": { "enabled": true, "postAction": { "enabled": false } }
    });
    let result = drive(&socket, &project, &data_dir, &config, started);
    // Stop serving: end the listener and this process's loops, remove the sockets.
    server.abort();
    rt.block_on(hub.shutdown());
    serve::remove_private_socket(&hub);
    serve::remove_listen_socket(&socket);
    rt.shutdown_timeout(Duration::from_secs(2));
    let report = result?;

    heading("Look again");
    let cd = format!("cd {}", project.display());
    let with_data = format!("{bin} --data-dir {}", data_dir.display());
    println!("  {cd}");
    println!("  {with_data} call loop-status '{}'", json!({ "name": report.loop_name }));
    println!("  {with_data} call review-read '{}'", json!({ "loopName": report.loop_name, "attempts": true }));
    println!("  {with_data} call plan-read '{}'", json!({ "recent": true }));
    println!("  git log --oneline --stat {}", report.branch);
    println!(
        "Open it in an editor: start your editor in {} with FORGE_DATA_DIR={}",
        project.display(),
        data_dir.display()
    );
    println!(
        "  (hook forge-lsp up first: editors/<your editor>/README.md), then open forge://loop/{}/status.md",
        report.loop_name
    );
    println!("  or, in editors without virtual documents, .forge/view/ once the server has started.");
    Ok(())
}

/// Ctrl-C (SIGINT) or SIGTERM during the demo: its loop is stopped, its sockets and (unless
/// `--keep`) its directory removed, as at its end (before, all of it was left behind: a
/// review). Exits 130 or 143, as a shell reports a process ended by the signal.
async fn on_interrupt(hub: std::sync::Arc<Hub>, socket: PathBuf, root: PathBuf, keep: bool) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        return;
    };
    let code = tokio::select! {
        _ = int.recv() => 130,
        _ = term.recv() => 143,
    };
    eprintln!("\nforge-lsp demo: interrupted; stopping the loop");
    hub.shutdown().await;
    serve::remove_private_socket(&hub);
    serve::remove_listen_socket(&socket);
    if keep {
        eprintln!("Kept: {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    std::process::exit(code);
}

/// What the demo found, for the closing commands.
struct Report {
    loop_name: String,
    branch: String,
}

/// `forge-lsp` when it is this binary on PATH, else this binary's full path.
fn shown_bin(exe: &Path) -> String {
    let on_path = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("forge-lsp")).find(|p| p.is_file()))
        .and_then(|p| p.canonicalize().ok());
    match (on_path, exe.canonicalize().ok()) {
        (Some(a), Some(b)) if a == b => "forge-lsp".to_string(),
        _ => exe.display().to_string(),
    }
}

/// A git repository with one commit (author `forge-lsp demo`, whatever git's configuration).
fn make_repository(dir: &Path) -> Result<(), String> {
    let fail = |what: &str, e: git2::Error| format!("cannot {what} in {}: {}", dir.display(), e.message());
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::write(dir.join("README.md"), "# Demo project\n\nMade by `forge-lsp demo`.\n")
        .map_err(|e| format!("cannot write {}: {e}", dir.join("README.md").display()))?;
    let mut opts = git2::RepositoryInitOptions::new();
    opts.initial_head("main");
    let repo = git2::Repository::init_opts(dir, &opts).map_err(|e| fail("create a git repository", e))?;
    let mut index = repo.index().map_err(|e| fail("open the index", e))?;
    index.add_path(Path::new("README.md")).map_err(|e| fail("add README.md", e))?;
    index.write().map_err(|e| fail("write the index", e))?;
    let tree_id = index.write_tree().map_err(|e| fail("write the tree", e))?;
    let tree = repo.find_tree(tree_id).map_err(|e| fail("read the tree", e))?;
    let sig = git2::Signature::now("forge-lsp demo", "demo@forge-lsp.invalid").map_err(|e| fail("sign", e))?;
    repo.commit(Some("HEAD"), &sig, &sig, "Initial commit", &tree, &[]).map_err(|e| fail("commit", e))?;
    // The project's own configuration is not part of the project's history.
    let exclude = dir.join(".git/info/exclude");
    let mut text = std::fs::read_to_string(&exclude).unwrap_or_default();
    text.push_str(".forge/\n");
    std::fs::write(&exclude, text).map_err(|e| format!("cannot write {}: {e}", exclude.display()))?;
    Ok(())
}

/// `.forge/config.toml`: this binary's `demo-agent` as the agent, the sandbox on or off.
fn write_config(project: &Path, exe: &Path, sandbox: bool) -> Result<(), String> {
    let dir = project.join(".forge");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let exe = exe.to_str().ok_or_else(|| format!("this program's path {} is not UTF-8", exe.display()))?;
    let config = format!(
        "# Written by `forge-lsp demo`.\n[agent]\ncommand = [{}, \"demo-agent\"]\n\n[sandbox]\nenabled = {sandbox}\n",
        toml::Value::String(exe.to_string())
    );
    let file = dir.join("config.toml");
    std::fs::write(&file, config).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// Connects to the socket the server is binding (it may not be there yet).
fn connect(socket: &Path) -> Result<LspClient, String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match LspClient::connect(socket) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("cannot connect to the demo's server at {}: {e}", socket.display()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// One `workspace/executeCommand`: the tool's `{ text, data }`.
fn tool(c: &mut LspClient, name: &str, input: Value) -> Result<(String, Value), String> {
    let r = c
        .request(
            "workspace/executeCommand",
            json!({ "command": forge_protocol::command_name(name), "arguments": [input] }),
        )
        .map_err(|e| format!("the connection to the server failed during forge.{name}: {e}"))?
        .map_err(|e| {
            format!("forge.{name} failed: {}", e.get("message").and_then(Value::as_str).unwrap_or("unknown error"))
        })?;
    let text = r.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
    Ok((text, r.get("data").cloned().unwrap_or(Value::Null)))
}

/// A `forge:` document as an editor reads it.
fn document(c: &mut LspClient, uri: &str) -> Result<String, String> {
    let r = c
        .request("workspace/textDocumentContent", json!({ "uri": uri }))
        .map_err(|e| format!("the connection to the server failed reading {uri}: {e}"))?
        .map_err(|e| {
            format!("cannot read {uri}: {}", e.get("message").and_then(Value::as_str).unwrap_or("unknown error"))
        })?;
    Ok(r.get("text").and_then(Value::as_str).unwrap_or_default().to_string())
}

/// Drives the server like an editor: starts the loop, follows it, shows what it did.
fn drive(socket: &Path, project: &Path, data_dir: &Path, config: &Value, started: Instant) -> Result<Report, String> {
    let mut c = connect(socket)?;
    c.keep_notifications();
    let root = format!("file://{}", project.display());
    let init = c
        .request(
            "initialize",
            json!({
                "processId": std::process::id(), "rootUri": root,
                "workspaceFolders": [{ "uri": root, "name": "demo" }],
                "capabilities": { "workspace": { "textDocumentContent": {} } },
                "initializationOptions": { "forge": { "dataDir": data_dir.display().to_string(), "config": config } }
            }),
        )
        .map_err(|e| format!("the connection to the server failed during initialize: {e}"))?;
    if let Err(e) = init {
        return Err(format!(
            "initialize failed: {}",
            e.get("message").and_then(Value::as_str).unwrap_or("unknown error")
        ));
    }
    c.notify("initialized", json!({})).map_err(|e| format!("cannot send initialized: {e}"))?;

    heading("1. Start the loop (forge.execute-plan with the sample plan)");
    let (text, data) =
        tool(&mut c, "execute-plan", json!({ "title": "Greet the world", "plan": PLAN, "loopName": LOOP_NAME }))?;
    println!("{}", indented(&text));
    let name = data.get("loopName").and_then(Value::as_str).unwrap_or(LOOP_NAME).to_string();
    let branch = data.get("branch").and_then(Value::as_str).unwrap_or_default().to_string();

    heading("2. The loop runs (polling forge.loop-status)");
    let loop_started = Instant::now();
    let mut last = String::new();
    let status = loop {
        let (_, d) = tool(&mut c, "loop-status", json!({ "name": name }))?;
        let status = d.get("status").and_then(Value::as_str).unwrap_or("?").to_string();
        let phase = d.get("phase").and_then(Value::as_str).unwrap_or("?");
        let section = d.get("sectionIndex").and_then(Value::as_i64).map(|k| k + 1).unwrap_or(0);
        let total = d.get("totalSections").and_then(Value::as_i64).unwrap_or(0);
        let iteration = d.get("iteration").and_then(Value::as_i64).unwrap_or(0);
        let now = if status == "running" {
            format!("{status} · section {section}/{total} · {phase} · iteration {iteration}")
        } else {
            format!("{status} (iteration {iteration})")
        };
        if now != last {
            println!("  {:>5.1} s  {now}", started.elapsed().as_secs_f64());
            last = now;
        }
        if status != "running" {
            break status;
        }
        if loop_started.elapsed() > LOOP_TIMEOUT {
            return Err(format!(
                "the loop did not finish within {} s (last: {last}); see `forge.loop-status` of {name}",
                LOOP_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };

    // The server announces the end (forge/loopStatus) right after the row changes: wait
    // for it, so the transitions below are complete.
    let mut notes = c.take_notifications();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !notes.iter().any(|n| is_final_status(n, &name)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        tool(&mut c, "loop-status", json!({ "name": name }))?;
        notes.extend(c.take_notifications());
    }

    heading("3. Findings the auditor wrote (forge.review-read with attempts: the audit history)");
    let (_, data) = tool(&mut c, "review-read", json!({ "loopName": name, "attempts": true }))?;
    println!("{}", indented(&audit_history(&data)));
    let (text, _) = tool(&mut c, "review-read", json!({ "loopName": name, "allSections": true }))?;
    println!("  Open findings now: {}", text.lines().next().unwrap_or_default());

    heading(&format!("4. Loop status (forge://loop/{name}/status.md, as an editor shows it)"));
    println!("{}", indented(&document(&mut c, &format!("forge://loop/{name}/status.md"))?));
    println!("\n  Transitions (from the forge/loopStatus notifications the server sent this client):");
    println!("{}", indented(&transitions(&notes, &name)));

    heading(&format!("5. The plan document (forge://plan/loop/{name}.md, as an editor shows it)"));
    println!("{}", indented(&document(&mut c, &format!("forge://plan/loop/{name}.md"))?));

    let _ = c.request("shutdown", Value::Null);
    let _ = c.notify("exit", Value::Null);

    heading(&format!("6. Checkpoint commits on {branch}"));
    println!("{}", indented(&checkpoints(project, &branch)?));

    if status != "completed" {
        return Err(format!("the loop ended `{status}`, not `completed`; its status above says why"));
    }
    Ok(Report { loop_name: name, branch })
}

/// A `forge/loopStatus` notification of `name` saying the loop is no longer running.
fn is_final_status(n: &Value, name: &str) -> bool {
    n.get("method").and_then(Value::as_str) == Some("forge/loopStatus")
        && n.pointer("/params/loopName").and_then(Value::as_str) == Some(name)
        && n.pointer("/params/status").and_then(Value::as_str).is_some_and(|s| s != "running")
}

/// One line per distinct `lastTransition` of the loop's status notifications.
fn transitions(notes: &[Value], name: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut seen: Vec<Value> = Vec::new();
    let mut first_at: Option<i64> = None;
    for n in notes {
        if n.get("method").and_then(Value::as_str) != Some("forge/loopStatus")
            || n.pointer("/params/loopName").and_then(Value::as_str) != Some(name)
        {
            continue;
        }
        let Some(t) = n.pointer("/params/lastTransition").filter(|t| !t.is_null()) else { continue };
        if seen.contains(t) {
            continue;
        }
        seen.push(t.clone());
        let s = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
        let at = t.get("at").and_then(Value::as_i64).unwrap_or(0);
        let t0 = *first_at.get_or_insert(at);
        let p = &n["params"];
        let section = p.get("sectionIndex").and_then(Value::as_i64).map(|k| format!("section {}", k + 1));
        let iteration = p.get("iteration").and_then(Value::as_i64).map(|i| format!("iteration {i}"));
        let place = [section, iteration].into_iter().flatten().collect::<Vec<_>>().join(", ");
        let to = t
            .get("to")
            .and_then(Value::as_str)
            .unwrap_or_else(|| p.get("status").and_then(Value::as_str).unwrap_or("-"));
        lines.push(format!(
            "+{:>4} ms  {:<15} {:<16} {} -> {}  (now: {place})",
            at - t0,
            s("kind"),
            s("event"),
            s("from"),
            to
        ));
    }
    if lines.is_empty() {
        lines.push("(no transition was announced)".into());
    }
    lines.join("\n")
}

/// The audit history of `review-read` with `attempts: true`: every finding the auditor
/// wrote, then each audit with its outcome.
fn audit_history(data: &Value) -> String {
    let attempts = data.get("attempts").and_then(Value::as_array).cloned().unwrap_or_default();
    let finding = |f: &Value| {
        let s = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        format!(
            "{} {}:{}: {}",
            s("severity"),
            s("file"),
            f.get("line").and_then(Value::as_i64).unwrap_or(0),
            s("description")
        )
    };
    let mut written: Vec<(i64, String)> = Vec::new();
    let mut audits = Vec::new();
    // Oldest first.
    let mut ordered = attempts.clone();
    ordered.sort_by_key(|a| a.get("id").and_then(Value::as_i64).unwrap_or(0));
    for a in &ordered {
        for f in a.get("findingsAfter").and_then(Value::as_array).into_iter().flatten() {
            let id = f.get("id").and_then(Value::as_i64).unwrap_or(0);
            if !written.iter().any(|(i, _)| *i == id) {
                written.push((id, finding(f)));
            }
        }
        let section =
            a.get("sectionIndex").and_then(Value::as_i64).map(|k| format!("section {}", k + 1)).unwrap_or_default();
        let before = a.get("findingsBefore").and_then(Value::as_array).map(Vec::len).unwrap_or(0);
        let after = a.get("findingsAfter").and_then(Value::as_array).map(Vec::len).unwrap_or(0);
        audits.push(format!(
            "{section}, audit {} (iteration {}): {} — findings before {before}, after {after}",
            a.get("attemptNumber").and_then(Value::as_i64).unwrap_or(0),
            a.get("iteration").and_then(Value::as_i64).unwrap_or(0),
            a.get("outcome").and_then(Value::as_str).unwrap_or("?"),
        ));
    }
    let mut out = vec![format!("The auditor wrote {} finding(s):", written.len())];
    out.extend(written.into_iter().map(|(_, f)| format!("  - {f}")));
    out.push("Audits:".into());
    out.extend(audits.into_iter().map(|a| format!("  - {a}")));
    out.join("\n")
}

/// `git log --oneline` of the loop's branch since the base commit, with each commit's files.
fn checkpoints(project: &Path, branch: &str) -> Result<String, String> {
    let fail = |what: &str, e: git2::Error| format!("cannot {what} in {}: {}", project.display(), e.message());
    let repo = git2::Repository::open(project).map_err(|e| fail("open the repository", e))?;
    let tip = repo
        .revparse_single(&format!("refs/heads/{branch}"))
        .map_err(|e| fail(&format!("find the branch {branch}"), e))?;
    let base = repo.revparse_single("refs/heads/main").map_err(|e| fail("find main", e))?;
    let mut walk = repo.revwalk().map_err(|e| fail("walk the history", e))?;
    walk.push(tip.id()).map_err(|e| fail("walk the history", e))?;
    walk.hide(base.id()).map_err(|e| fail("walk the history", e))?;
    let mut lines = Vec::new();
    for id in walk {
        let id = id.map_err(|e| fail("walk the history", e))?;
        let commit = repo.find_commit(id).map_err(|e| fail("read a commit", e))?;
        let short = id.to_string()[..8].to_string();
        let files = changed_files(&repo, &commit).unwrap_or_default();
        lines.push(format!("{short} {}  [{}]", commit.summary().unwrap_or_default(), files.join(", ")));
    }
    if lines.is_empty() {
        lines.push("(none)".into());
    }
    Ok(lines.join("\n"))
}

fn changed_files(repo: &git2::Repository, commit: &git2::Commit) -> Result<Vec<String>, git2::Error> {
    let tree = commit.tree()?;
    let parent = commit.parent(0).ok().map(|p| p.tree()).transpose()?;
    let diff = repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), None)?;
    Ok(diff.deltas().filter_map(|d| d.new_file().path().map(|p| p.display().to_string())).collect())
}

#[cfg(test)]
mod tests {
    /// The sample a newcomer sees first passes the plan check it is later held to (before,
    /// its `## Section 1:` headings drew a warning per section: a review).
    #[test]
    fn the_sample_plan_has_no_structure_warnings() {
        let warnings = forge_domain::plan::structure::warnings(super::PLAN);
        assert!(warnings.is_empty(), "{warnings:?}");
    }
}
