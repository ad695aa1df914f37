//! The per-loop sandbox (bubblewrap) end to end: a loop start without bubblewrap fails with
//! 1004 and leaves nothing behind; `forge.shell` from a loop session runs in the loop's
//! sandbox; the shell shims put the agent's shells in the sandbox; a restart recreates the
//! shims from the loop's saved settings, not the current configuration; a loop without a
//! sandbox runs `forge.shell` directly in its worktree.
//!
//! Real bwrap, real processes: these tests need bubblewrap (`apt-get install bubblewrap`;
//! `scripts/test-all` installs it). The agent is `tests/agents/sandbox.sh`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{assert_contains, wait_for, Client, GitRepo, Init, Sandbox, BIN};
use serde_json::{json, Value};

const PLAN: &str = "# Sandbox check

## Objective
Run commands in the loop's sandbox.

<!-- forge-section -->
## Only step
Run pwd.

## Verification
- pwd
";

/// How long a loop's first turn may take on a loaded machine.
const TURN_WAIT: Duration = Duration::from_secs(90);

fn agent_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/agents/sandbox.sh").canonicalize().expect("sandbox.sh")
}

/// `PATH` with the directory of the binary under test first (agents call `forge-lsp`).
fn path_with_bin() -> std::ffi::OsString {
    let bin_dir = Path::new(BIN).parent().expect("bin dir").to_path_buf();
    std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH")
}

/// An executable file at `path` with `text`.
fn write_program(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn require_bwrap() {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).any(|d| d.join("bwrap").is_file());
    assert!(found, "these tests need bubblewrap: apt-get install bubblewrap (scripts/test-all installs it)");
}

/// A project whose agent is `sandbox.sh`, with `sandbox.enabled = <sandbox>`, and a stdio
/// server with a connected client; `configure` adds to the server's command.
struct Fixture {
    client: Client,
    repo: GitRepo,
    sb: Sandbox,
    state: PathBuf,
}

impl Fixture {
    fn start(sandbox: bool, configure: impl FnOnce(&mut std::process::Command)) -> Fixture {
        Fixture::start_with(sandbox, "", "", configure)
    }

    /// [`Fixture::start`] with a user configuration file and more of the project's
    /// `[sandbox]` table, both written before the server starts.
    fn start_with(
        sandbox: bool,
        user_config: &str,
        project_sandbox: &str,
        configure: impl FnOnce(&mut std::process::Command),
    ) -> Fixture {
        let sb = Sandbox::new();
        let repo = GitRepo::new();
        let state = sb.mkdir("agent-state");
        if !user_config.is_empty() {
            sb.write_user_config(user_config);
        }
        repo.write_project_config(&format!(
            "[agent]\ncommand = [{:?}]\n\n[sandbox]\nenabled = {sandbox}\n{project_sandbox}",
            agent_script().display().to_string()
        ));
        let mut client = sb.stdio_with(|c| {
            c.arg("--data-dir").arg(&sb.data_dir).env("PATH", path_with_bin()).env("FORGE_TEST_STATE", &state);
            configure(c);
        });
        client.init(&Init::new(&repo.path));
        Fixture { client, repo, sb, state }
    }

    /// Waits for the agent's first coder turn of `session` to finish its checks.
    fn wait_turn(&self, session: &str) -> PathBuf {
        let d = self.state.join(session);
        wait_for(TURN_WAIT, || d.join("done").exists().then_some(()))
            .unwrap_or_else(|| panic!("the agent's turn of {session} did not finish{}", self.client.diagnostics()));
        d
    }

    /// Turns the sandbox off in the project's configuration file (not committed, so it
    /// may) and has the server read it again. (Not in the editor's settings: they cannot
    /// loosen the sandbox.)
    fn disable_sandbox(&self) {
        let cfg = self.repo.path.join(".forge/config.toml");
        let text = std::fs::read_to_string(&cfg).unwrap().replacen("enabled = true", "enabled = false", 1);
        std::fs::write(&cfg, text).unwrap();
        self.client.notify("workspace/didChangeConfiguration", json!({ "settings": { "forge": {} } }));
    }

    fn loop_columns(&self, name: &str) -> (i64, i64) {
        self.sb
            .db()
            .conn
            .query_row("SELECT sandbox, sandbox_network FROM loops WHERE loop_name = ?1", [name], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("loop row")
    }
}

/// A user plugin tool `box__<name>` (`$XDG_CONFIG_HOME/forge-lsp/plugins/box/tools`): its
/// program `script` and its description.
fn user_tool(sb: &Sandbox, name: &str, script: &str, description: &str) {
    use std::os::unix::fs::PermissionsExt;
    let tools = sb.config_home.join("forge-lsp/plugins/box/tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(tools.join(name), script).unwrap();
    std::fs::set_permissions(tools.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    let meta = json!({ "description": description, "inputSchema": { "type": "object" } });
    std::fs::write(tools.join(format!("{name}.json")), meta.to_string()).unwrap();
}

fn read(d: &Path, file: &str) -> String {
    std::fs::read_to_string(d.join(file)).unwrap_or_else(|e| panic!("{}: {e}", d.join(file).display()))
}

/// A `forge-lsp call shell --json` result the agent saved: exit code 0 and the result.
fn result(d: &Path, name: &str) -> Value {
    assert_eq!(read(d, &format!("{name}.code")).trim(), "0", "{name}: {}", read(d, &format!("{name}.err")));
    serde_json::from_str(&read(d, &format!("{name}.json"))).unwrap_or_else(|e| panic!("{name}.json: {e}"))
}

/// A failed `forge-lsp call shell`: its exit code and error text.
fn failure(d: &Path, name: &str) -> (String, String) {
    (read(d, &format!("{name}.code")).trim().to_string(), read(d, &format!("{name}.err")))
}

#[test]
fn a_loop_start_without_bubblewrap_fails_with_1004_and_leaves_nothing() {
    // Two ways a host lacks bubblewrap: FORGE_BWRAP names a missing file, and a PATH
    // without bwrap (only what the server and the agent need).
    let bare = tempfile::tempdir().expect("tempdir");
    for name in ["sh", "bash", "git", "kill", "cat", "sleep", "mkdir", "touch", "env"] {
        if let Some(prog) = ["/bin", "/usr/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists()) {
            std::os::unix::fs::symlink(prog, bare.path().join(name)).expect("symlink");
        }
    }
    let bin_dir = Path::new(BIN).parent().expect("bin dir").to_path_buf();
    let bare_path = std::env::join_paths([bin_dir, bare.path().to_path_buf()]).expect("PATH");
    type Setup = Box<dyn Fn(&mut std::process::Command)>;
    let cases: Vec<(&str, Setup)> = vec![
        (
            "FORGE_BWRAP",
            Box::new(|c| {
                c.env("FORGE_BWRAP", "/nonexistent/bwrap");
            }),
        ),
        (
            "PATH",
            Box::new(move |c| {
                c.env("PATH", &bare_path).env_remove("FORGE_BWRAP");
            }),
        ),
    ];
    for (case, setup) in cases {
        let f = Fixture::start(true, |c| setup(c));
        let e = f.client.tool_err("execute-plan", json!({ "title": "Sandbox check", "plan": PLAN, "loopName": "sbx" }));
        assert_eq!(e.code, 1004, "{case}: {e}");
        assert_eq!(e.kind(), Some("precondition"), "{case}: {e}");
        assert_contains(&e.message, "Failed to start loop");
        assert_contains(&e.message, "apt-get install bubblewrap");
        assert_contains(&e.message, "sandbox.enabled = false");
        if case == "FORGE_BWRAP" {
            assert_contains(&e.message, "FORGE_BWRAP=/nonexistent/bwrap");
        }
        // Nothing left: no loop row, no plan row, no worktree, no branch.
        let db = f.sb.db();
        assert_eq!(db.count("SELECT count(*) FROM loops"), 0, "{case}");
        assert_eq!(db.count("SELECT count(*) FROM plans WHERE loop_name IS NOT NULL"), 0, "{case}");
        let wt = f.sb.data_dir.join("worktrees");
        let left: Vec<_> = std::fs::read_dir(&wt).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        assert!(left.is_empty(), "{case}: worktrees left: {left:?}");
        assert_eq!(f.repo.git(&["branch", "--list", "forge/*"]), "", "{case}");
        assert_eq!(f.repo.git(&["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1, "{case}");
        // With the sandbox disabled the same start works (and proves the message's advice).
        f.disable_sandbox();
        let ok = wait_for(Duration::from_secs(10), || {
            f.client.tool("execute-plan", json!({ "title": "Sandbox check", "plan": PLAN, "loopName": "sbx" })).ok()
        })
        .unwrap_or_else(|| panic!("{case}: the start with sandbox.enabled = false failed{}", f.client.diagnostics()));
        let name = ok.data["loopName"].as_str().expect("loopName").to_string();
        assert_eq!(f.loop_columns(&name), (0, 0), "{case}");
        f.client.tool_ok("loop-cancel", json!({ "name": name }));
    }
}

#[test]
fn forge_shell_runs_in_the_loop_sandbox_and_a_restart_keeps_the_loop_settings() {
    require_bwrap();
    // A runtime directory outside /tmp (the sandbox's /tmp is private anyway), holding a
    // socket like the session bus's: visible to the agent on the host, hidden in the sandbox.
    let runtime = tempfile::Builder::new().prefix("runtime-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let bus = runtime.path().join("bus");
    let _bus = std::os::unix::net::UnixListener::bind(&bus).unwrap();
    // fnm's `PATH` folder: a link in the runtime directory to the install in the home
    // directory (a folder outside here), whose programs the loop's shells must find.
    let install = tempfile::Builder::new().prefix("fnm-install-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::create_dir_all(install.path().join("bin")).unwrap();
    write_program(&install.path().join("bin/fakenode"), "#!/bin/sh\necho node-ran\n");
    std::fs::create_dir_all(runtime.path().join("fnm_multishells")).unwrap();
    std::os::unix::fs::symlink(install.path(), runtime.path().join("fnm_multishells/1_2")).unwrap();
    let path = std::env::join_paths(
        std::iter::once(runtime.path().join("fnm_multishells/1_2/bin")).chain(std::env::split_paths(&path_with_bin())),
    )
    .unwrap();
    // A plugin's own `PATH` (its variables) through another such link.
    std::os::unix::fs::symlink(install.path(), runtime.path().join("fnm_multishells/3_4")).unwrap();
    let plugin_path = format!("{}:/usr/bin:/bin", runtime.path().join("fnm_multishells/3_4/bin").display());
    let user_config = format!("[plugins.box.variables]\nPATH = {plugin_path:?}\n");
    let f = Fixture::start_with(true, &user_config, "", |c| {
        c.env("XDG_RUNTIME_DIR", runtime.path())
            .env("FORGE_TEST_RUNTIME_SOCKET", &bus)
            .env("PATH", &path)
            .env("FORGE_TEST_PATH_TOOL", "fakenode");
    });
    // A user plugin tool the agent calls: it reports where it ran and tries to write outside.
    user_tool(
        &f.sb,
        "Probe",
        "#!/bin/sh\ncat > /dev/null\npwd\necho ${FORGE_SANDBOX:-host}\n(touch \"$FORGE_TEST_STATE/plugin-escaped\") 2>/dev/null && echo escaped || echo blocked\ntouch plugin-made && echo inside\n",
        "Where am I?",
    );
    user_tool(&f.sb, "Node", "#!/bin/sh\ncat > /dev/null\nfakenode\n", "Node here?");
    // The repository commits a `forge-lsp` under `.forge/bin` (where the shims used to be,
    // first on the agent's PATH): it must never run, on the host or anywhere.
    f.repo.write(".forge/bin/forge-lsp", "#!/bin/sh\ntouch \"$FORGE_TEST_STATE/hijacked\"\nexit 1\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f.repo.path.join(".forge/bin/forge-lsp"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    f.repo.git(&["add", "-f", ".forge/bin/forge-lsp"]);
    f.repo.git(&["commit", "-q", "-m", "a forge-lsp of the repository's own"]);
    let out = f.client.tool_ok("execute-plan", json!({ "title": "Sandbox check", "plan": PLAN }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    let wt = PathBuf::from(out.data["worktreeDir"].as_str().expect("worktreeDir"));
    assert!(wt.join(".forge/bin/forge-lsp").is_file(), "the committed file is in the worktree");
    // The shims are the server's, in its data directory, not in the worktree.
    let shims: Vec<PathBuf> =
        std::fs::read_dir(f.sb.data_dir.join("shims")).expect("shims dir").map(|e| e.unwrap().path()).collect();
    assert_eq!(shims.len(), 1, "{shims:?}");
    let shims = shims[0].clone();
    assert_eq!(f.loop_columns(&name), (1, 0), "sandbox on, network off");
    assert!(shims.join("sh").is_file() && shims.join("bash").is_file(), "shims in {}", shims.display());
    assert_eq!(
        f.repo.git(&["-C", wt.to_str().unwrap(), "status", "--porcelain", "--", ".forge"]),
        "",
        ".forge/ is excluded"
    );

    let d = f.wait_turn(&session);
    // forge.shell: the worktree at its host path, exit code 0.
    let pwd = result(&d, "pwd");
    assert_eq!(pwd["data"]["stdout"].as_str().unwrap().trim(), wt.to_str().unwrap(), "{pwd}");
    assert_eq!(pwd["data"]["exitCode"], json!(0));
    assert_eq!(pwd["data"]["timedOut"], json!(false));
    // git works inside on the repository, which lives under /tmp here (the sandbox's /tmp
    // is its own: the repository's git directory is bound back, read-only).
    let gitlog = result(&d, "gitlog");
    assert_eq!(gitlog["data"]["exitCode"], json!(0), "{gitlog}");
    assert!(gitlog["data"]["stdout"].as_str().unwrap().contains("a forge-lsp of the repository's own"), "{gitlog}");
    assert_eq!(pwd["data"]["stdoutTruncated"], json!(false));
    assert!(pwd["text"].as_str().unwrap().starts_with("Exit code: 0"), "{pwd}");
    let sub = wt.join("sub/dir");
    assert_eq!(result(&d, "subdir")["data"]["stdout"].as_str().unwrap().trim(), sub.to_str().unwrap());
    assert_eq!(result(&d, "incwd")["data"]["stdout"].as_str().unwrap().trim(), sub.to_str().unwrap());
    // The plugin tool ran in the loop's worktree, inside the sandbox.
    assert_eq!(read(&d, "plugin.code").trim(), "0", "{}", read(&d, "plugin.err"));
    let probe: Vec<String> = read(&d, "plugin.out").lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    assert_eq!(probe, [wt.to_str().unwrap(), "1", "blocked", "inside"], "{probe:?}");
    assert!(!f.state.join("plugin-escaped").exists(), "a sandboxed plugin tool wrote outside the worktree");
    // A sandboxed process without its loop identity is refused at initialize (1001).
    assert_eq!(read(&d, "untokened.code").trim(), "1", "{}", read(&d, "untokened.out"));
    assert_contains(&read(&d, "untokened.err"), "inside a loop's sandbox");
    assert_eq!(read(&d, "fromtmp.code").trim(), "0", "{}", read(&d, "fromtmp.err"));
    assert!(wt.join("plugin-made").exists());
    // Nothing outside the worktree is writable.
    let escape = result(&d, "escape");
    assert_ne!(escape["data"]["exitCode"], json!(0), "{escape}");
    assert!(!f.state.join("escaped").exists(), "a sandboxed command wrote outside the worktree");
    // Timeout: the process group is killed.
    let t = result(&d, "timeout");
    assert_eq!(t["data"]["timedOut"], json!(true), "{t}");
    assert_eq!(t["data"]["exitCode"], Value::Null);
    assert_eq!(t["data"]["stdout"], json!("start\n"));
    assert_contains(t["text"].as_str().unwrap(), "Timed out after 300 ms");
    // Bad input: -32602 (exit 2) naming the field.
    let (code, err) = failure(&d, "toolong");
    assert_eq!(code, "2", "{err}");
    assert_contains(&err, "timeoutMs");
    // What `sh -c` cannot be given is bad input too (review YI: 1007 from the spawn).
    let (code, err) = failure(&d, "nulbyte");
    assert_eq!(code, "2", "{err}");
    assert_contains(&err, "must not contain a NUL byte");
    let (code, err) = failure(&d, "huge");
    assert_eq!(code, "2", "{err}");
    assert_contains(&err, "140005 bytes, over the 131071 bytes");
    for bad in ["dotdot", "absolute"] {
        let (code, err) = failure(&d, bad);
        assert_eq!(code, "2", "{bad}: {err}");
        assert_contains(&err, "cwd");
    }
    // The agent's shells go through the shims into the sandbox (pid 2 of a fresh pid
    // namespace, FORGE_SANDBOX=1), whether started as $SHELL or as `sh` through PATH.
    assert_eq!(read(&d, "path-head").trim(), shims.to_str().unwrap());
    assert_eq!(read(&d, "shell-var").trim(), shims.join("sh").to_str().unwrap());
    assert_eq!(read(&d, "shim.txt").trim(), "2 1");
    assert_eq!(read(&d, "path-sh.txt").trim(), "2 1");
    assert!(wt.join("shim-made").exists(), "the sandboxed shell writes into the worktree");
    // git reads the repository (under /tmp here) in the agent's shells as in forge.shell
    // (before: `fatal: not a git repository`, the git directory not bound back).
    let git = read(&d, "shim-git.txt");
    assert!(git.contains("a forge-lsp of the repository's own") && git.trim_end().ends_with("exit 0"), "{git}");
    // The user's runtime directory is hidden inside (its private socket still works: the
    // calls above went through it).
    assert_eq!(read(&d, "runtime.txt").lines().collect::<Vec<_>>(), ["host-sees", "sandbox-misses"]);
    // fnm's programs are found in the loop's shells, through its link made again inside
    // (before: `fakenode: not found`, the runtime directory hidden).
    let pathtool = result(&d, "pathtool");
    assert_eq!(pathtool["data"]["stdout"], json!("node-ran\n"), "forge.shell: {pathtool}");
    assert_eq!(read(&d, "shim-pathtool.txt"), "node-ran\n", "the agent's shell");
    assert_eq!(read(&d, "plugin-pathtool.txt").trim(), "node-ran", "a plugin tool, by its own PATH");
    // The socket's directory is read-only inside (before: read-write, so a sandboxed
    // process could move the socket and listen on its path in the server's place).
    assert_eq!(read(&d, "socketdir.txt").lines().collect::<Vec<_>>(), ["kept", "refused"]);

    // Not for sessions outside a loop.
    let e = f.client.tool_err("shell", json!({ "command": "pwd" }));
    assert_eq!(e.code, 1001, "{e}");

    // Restart with the sandbox now disabled in the configuration: the loop keeps its own
    // settings and its shims are recreated.
    f.client.tool_ok("loop-cancel", json!({ "name": name }));
    std::fs::remove_dir_all(&shims).expect("remove shims");
    f.disable_sandbox();
    std::thread::sleep(Duration::from_millis(300));
    // The configuration is in effect: a new loop starts without a sandbox.
    let other = f.client.tool_ok("execute-plan", json!({ "title": "Other", "plan": PLAN }));
    let other_session = other.data["sessionId"].as_str().expect("sessionId").to_string();
    let other = other.data["loopName"].as_str().expect("loopName").to_string();
    assert_eq!(f.loop_columns(&other), (0, 0));
    // Without the sandbox, what a timed-out command started in a session of its own
    // (`setsid`) is killed with it, by the call's mark (review YI: it ran on).
    let d3 = f.wait_turn(&other_session);
    assert_eq!(result(&d3, "escaped")["data"]["timedOut"], json!(true));
    // And when its caller goes away (`forge-lsp call` killed) while it runs (review YJ).
    for (file, when) in [("escaped.pid", "its timeout"), ("dropped.pid", "its caller")] {
        let escaped = read(&d3, file).trim().to_string();
        assert!(
            wait_for(Duration::from_secs(5), || {
                // Gone, or a zombie nobody reaped yet.
                let stat = std::fs::read_to_string(format!("/proc/{escaped}/stat")).unwrap_or_default();
                let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
                matches!(state, None | Some('Z')).then_some(())
            })
            .is_some(),
            "the command's setsid child {escaped} outlived {when}"
        );
    }
    f.client.tool_ok("loop-cancel", json!({ "name": other }));
    let r = f.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    assert!(shims.join("sh").is_file(), "restart recreates the shims");
    assert_eq!(f.loop_columns(&name), (1, 0));
    let session2 = r.data["sessionId"].as_str().expect("sessionId").to_string();
    let d2 = f.wait_turn(&session2);
    assert_eq!(read(&d2, "shim.txt").trim(), "2 1", "still sandboxed after the restart");
    assert_eq!(result(&d2, "pwd")["data"]["stdout"].as_str().unwrap().trim(), wt.to_str().unwrap());
    f.client.tool_ok("loop-cancel", json!({ "name": name }));
    assert!(!f.state.join("hijacked").exists(), "the repository's .forge/bin/forge-lsp ran");
}

/// A `PATH` folder that is a link loop, or one under /tmp with a `true`, before the
/// system's folders, does not fail the sandbox's start check (before: 1004, "bwrap: execvp
/// true: Too many levels of symbolic links", said as missing user namespaces).
#[test]
fn a_link_loop_on_path_does_not_fail_the_sandbox_check() {
    require_bwrap();
    let base = tempfile::Builder::new().prefix("pathloop-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let looped = base.path().join("loop");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    // And a `true` under /tmp, which the check's sandbox hides (review XB).
    let tmp_bin = tempfile::Builder::new().prefix("fl-tbin").tempdir().unwrap();
    write_program(&tmp_bin.path().join("true"), "#!/bin/sh\nexit 0\n");
    // And a link in /tmp to the system's folder: its `true` is run where it resolves
    // (review XC).
    let bin_link = tmp_bin.path().join("binlink");
    std::os::unix::fs::symlink("/usr/bin", &bin_link).unwrap();
    // And first a `true` that links to a multi-call program, which goes by the name it is
    // started with (coreutils built as one: review XD).
    let multi = base.path().join("multi");
    std::fs::create_dir(&multi).unwrap();
    write_program(&multi.join("coreutils"), "#!/bin/sh\n[ \"${0##*/}\" = true ] && exit 0\nexit 1\n");
    std::os::unix::fs::symlink("coreutils", multi.join("true")).unwrap();
    // Before it, a `true` whose link goes through /tmp (review XE).
    let hop = base.path().join("hop");
    std::fs::create_dir(&hop).unwrap();
    std::os::unix::fs::symlink("/usr/bin/true", tmp_bin.path().join("hop-true")).unwrap();
    std::os::unix::fs::symlink(tmp_bin.path().join("hop-true"), hop.join("true")).unwrap();
    // And one whose target passes through a plain folder in /tmp (review XF).
    let dots = base.path().join("dots");
    std::fs::create_dir(&dots).unwrap();
    let up = "../".repeat(tmp_bin.path().components().count());
    std::os::unix::fs::symlink(format!("{}/{up}usr/bin/true", tmp_bin.path().display()), dots.join("true")).unwrap();
    let path = std::env::join_paths(
        [looped.clone(), dots, hop, multi, bin_link, tmp_bin.path().to_path_buf()]
            .into_iter()
            .chain(std::env::split_paths(&path_with_bin())),
    )
    .unwrap();
    let f = Fixture::start(true, |c| {
        c.env("PATH", &path);
    });
    let out = f.client.tool_ok("execute-plan", json!({ "title": "Path loop", "plan": PLAN }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    f.client.tool_ok("loop-cancel", json!({ "name": name }));
}

/// A runtime directory spelled through a link (`XDG_RUNTIME_DIR=/tmp/…/rtlink`, a link to
/// a folder elsewhere): the sandbox starts (before, bubblewrap could not mount its tmpfs on
/// the link, nor bind the socket's folder through it, and every sandboxed command failed),
/// the folder is hidden where it resolves, and the agent's calls reach the server's socket,
/// whose path the server resolved (the link is in the sandbox's own empty `/tmp`).
#[test]
fn a_runtime_directory_reached_through_a_link_is_hidden_and_the_sandbox_starts() {
    require_bwrap();
    let base = tempfile::Builder::new().prefix("rtlink-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let real = base.path().join("rt");
    std::fs::create_dir(&real).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // The link in /tmp, which the sandbox hides: the socket's path handed in must not
    // lead through it (review XB: "nothing is there" for every call from inside).
    let links = tempfile::Builder::new().prefix("fl-rtlink").tempdir().unwrap();
    let link = links.path().join("rtlink");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let bus = real.join("bus");
    let _bus = std::os::unix::net::UnixListener::bind(&bus).unwrap();
    let f = Fixture::start(true, |c| {
        c.env("XDG_RUNTIME_DIR", &link).env("FORGE_TEST_RUNTIME_SOCKET", link.join("bus"));
    });
    let out = f.client.tool_ok("execute-plan", json!({ "title": "Runtime link", "plan": PLAN }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    let d = f.wait_turn(&session);
    let pwd = result(&d, "pwd");
    assert_eq!(pwd["data"]["exitCode"], json!(0), "forge.shell: {pwd}");
    assert_eq!(read(&d, "shim.txt").trim(), "2 1", "the agent's shell");
    // Its socket, hidden inside; the server's, reached (a call from the agent's shell).
    assert_eq!(read(&d, "runtime.txt").lines().collect::<Vec<_>>(), ["host-sees", "sandbox-misses"]);
    assert_eq!(read(&d, "fromtmp.code").trim(), "0", "{}", read(&d, "fromtmp.err"));
    f.client.tool_ok("loop-cancel", json!({ "name": name }));
}

/// The user's credential files and secret-named variables stay outside the sandbox
/// (docs/sandbox.md, "Secrets"), whichever way a command gets in: a shell of the agent
/// through the shims, `forge.shell`, a plugin tool. What the user exposes stays visible; a
/// repository may hide more but not expose anything.
#[test]
fn secrets_stay_outside_the_loop_sandbox() {
    require_bwrap();
    // A home outside /tmp (the sandbox's /tmp is private: a home there would hide all).
    let home = tempfile::Builder::new().prefix("home-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path();
    for (file, text) in [
        (".ssh/id_test", "SSH-KEY"),
        (".aws/credentials", "AWS-KEY"),
        (".npmrc", "NPM-RC"),
        (".netrc", "NETRC"),
        ("private/p.txt", "PRIVATE"),
        ("notes.txt", "NOTES"),
        // An OpenCode login where XDG_DATA_HOME puts it, away from ~/.local/share.
        ("xdg/opencode/auth.json", "OC-AUTH"),
    ] {
        std::fs::create_dir_all(h.join(file).parent().unwrap()).unwrap();
        std::fs::write(h.join(file), text).unwrap();
    }
    // The account's own home (the password database's, which HOME does not name here):
    // its keys are hidden too.
    let pw = tempfile::Builder::new().prefix("pwhome-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::create_dir_all(pw.path().join(".ssh")).unwrap();
    std::fs::write(pw.path().join(".ssh/id_test"), "PW-KEY").unwrap();
    // The user exposes one file and one variable; the repository's file hides one more
    // folder and tries to expose two defaults and a variable.
    let f = Fixture::start_with(
        true,
        "[sandbox]\nexposePaths = [\"~/.npmrc\"]\nexposeEnv = [\"NPM_TOKEN\"]\n",
        "hidePaths = [\"~/private\"]\nexposePaths = [\"~/.ssh\", \"~/.netrc\"]\nexposeEnv = [\"GITHUB_TOKEN\"]\n",
        |c| {
            c.env("HOME", h)
                .env("FORGE_TEST_PASSWD_HOME", pw.path())
                .env("PWHOME", pw.path())
                .env("XDG_DATA_HOME", h.join("xdg"))
                .env("FORGE_TEST_SECRETS", "1")
                .env("OPENAI_API_KEY", "sk-e2e")
                .env("GITHUB_TOKEN", "gh-e2e")
                .env("NPM_TOKEN", "npm-e2e")
                .env("FORGE_API_TOKEN", "forge-e2e")
                .env("MY-API-KEY", "odd-e2e");
        },
    );
    f.repo.write(
        "probe.sh",
        "for f in .ssh/id_test .aws/credentials .netrc .npmrc private/p.txt notes.txt xdg/opencode/auth.json; do\n  if [ -s \"$HOME/$f\" ]; then echo \"$f=$(cat \"$HOME/$f\")\"; else echo \"$f=hidden\"; fi\ndone\nif [ -s \"$PWHOME/.ssh/id_test\" ]; then echo \"pw/.ssh/id_test=$(cat \"$PWHOME/.ssh/id_test\")\"; else echo pw/.ssh/id_test=hidden; fi\necho \"OPENAI_API_KEY=${OPENAI_API_KEY:-unset} GITHUB_TOKEN=${GITHUB_TOKEN:-unset} NPM_TOKEN=${NPM_TOKEN:-unset} FORGE_API_TOKEN=${FORGE_API_TOKEN:-unset}\"\necho \"FORGE_SESSION_TOKEN=${FORGE_SESSION_TOKEN:+set}\"\n",
    );
    f.repo.git(&["add", "probe.sh"]);
    f.repo.git(&["commit", "-q", "-m", "probe"]);
    user_tool(&f.sb, "Secrets", "#!/bin/sh\ncat > /dev/null\nsh probe.sh\n", "What can I see?");
    let out = f.client.tool_ok("execute-plan", json!({ "title": "Secrets", "plan": PLAN }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    let d = f.wait_turn(&session);
    let lines = |text: &str| text.lines().map(str::to_string).collect::<Vec<_>>();
    // The control: on the host the agent sees everything.
    assert_eq!(
        lines(&read(&d, "secrets-host.txt")),
        [
            ".ssh/id_test=SSH-KEY",
            ".aws/credentials=AWS-KEY",
            ".netrc=NETRC",
            ".npmrc=NPM-RC",
            "private/p.txt=PRIVATE",
            "notes.txt=NOTES",
            "xdg/opencode/auth.json=OC-AUTH",
            "pw/.ssh/id_test=PW-KEY",
            "OPENAI_API_KEY=sk-e2e GITHUB_TOKEN=gh-e2e NPM_TOKEN=npm-e2e FORGE_API_TOKEN=forge-e2e",
            "FORGE_SESSION_TOKEN=set",
        ]
    );
    let inside = [
        ".ssh/id_test=hidden",
        ".aws/credentials=hidden",
        ".netrc=hidden",
        ".npmrc=NPM-RC",
        "private/p.txt=hidden",
        "notes.txt=NOTES",
        "xdg/opencode/auth.json=hidden",
        "pw/.ssh/id_test=hidden",
        "OPENAI_API_KEY=unset GITHUB_TOKEN=unset NPM_TOKEN=npm-e2e FORGE_API_TOKEN=unset",
    ];
    // The agent on the host does not get a secret-named variable whose name is no shell
    // name (where /bin/sh is bash, the shims would pass it on unseen).
    assert_eq!(read(&d, "secrets-odd-name.txt").trim(), "absent");
    // The agent's shells keep its loop identity (`FORGE_*`), which `forge-lsp call` needs.
    let shim = lines(&read(&d, "secrets-shim.txt"));
    assert_eq!(shim[..9], inside, "the agent's shell");
    assert_eq!(shim[9..], ["FORGE_SESSION_TOKEN=set"], "the agent's shell");
    let shell: Value = serde_json::from_str(&read(&d, "secrets-shell.json"))
        .unwrap_or_else(|e| panic!("forge.shell: {e}: {}", read(&d, "secrets-shell.err")));
    assert_eq!(lines(shell["data"]["stdout"].as_str().unwrap())[..9], inside, "forge.shell: {shell}");
    let plugin = read(&d, "secrets-plugin.txt");
    for line in inside {
        assert_contains(&plugin, line);
    }
    f.client.tool_ok("loop-cancel", json!({ "name": name }));
}

#[test]
fn without_a_sandbox_forge_shell_runs_directly_in_the_worktree() {
    let f = Fixture::start(false, |_| {});
    let out = f.client.tool_ok("execute-plan", json!({ "title": "No sandbox", "plan": PLAN }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    let wt = PathBuf::from(out.data["worktreeDir"].as_str().expect("worktreeDir"));
    assert_eq!(f.loop_columns(&name), (0, 0));
    assert!(!f.sb.data_dir.join("shims").exists(), "no shims without a sandbox");
    let d = f.wait_turn(&session);
    let pwd = result(&d, "pwd");
    assert_eq!(pwd["data"]["stdout"].as_str().unwrap().trim(), wt.to_str().unwrap(), "{pwd}");
    assert_contains(pwd["text"].as_str().unwrap(), "without a sandbox");
    assert_eq!(result(&d, "timeout")["data"]["timedOut"], json!(true));
    // The agent's shells run on the host.
    assert!(read(&d, "shim.txt").trim().ends_with(" host"), "{}", read(&d, "shim.txt"));
    f.client.tool_ok("loop-cancel", json!({ "name": name }));
}
