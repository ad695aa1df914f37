//! The `loops` and `sandbox` scenarios (docs/performance-loops.md).
//!
//! - `loops`: the loop engine's own cost per phase transition. An instant agent (a bash
//!   script) appends `start <ns> <role>` to a timing file as its first line and
//!   `end <ns> <role>` right before it exits (`date +%s%N`); in between it hands off with
//!   `forge-lsp call loop-handoff`. A 24-section plan runs end to end with the sandbox off;
//!   the overhead of a transition is the next turn's `start` minus the previous turn's
//!   `end`: the engine's reaping of the agent, persistence, the checkpoint commit of a clean
//!   section, prompt building and starting the next agent process (including bash's own
//!   start-up and the `date` fork, which the "agent process floor" figure measures alone).
//! - `sandbox`: bubblewrap start-up (`true` directly vs through the command line
//!   `Sandbox::command` builds) and the `forge.shell` round trip over the LSP connection of
//!   a loop session, with the loop's `sandbox = 1` and `sandbox = 0`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use forge_lsp::engine::sandbox::{probe, Sandbox};
use forge_lsp::store::loops::hash_token;
use serde_json::{json, Value};

use super::client::{file_uri, Server, Target};
use super::fixture::{plan_text, World};
use super::report::{ms, Latency, Report, Target as Goal};

const EXEC: &str = "workspace/executeCommand";

/// Wall-clock nanoseconds (the clock `date +%s%N` reads).
fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

fn dur_ns(ns: i128) -> Duration {
    Duration::from_nanos(ns.max(0) as u64)
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod +x");
}

/// Single-quotes a word for sh/bash.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The last lines of the server's stderr log (for failure messages).
fn stderr_tail(t: &Target) -> String {
    let log = std::fs::read_to_string(&t.stderr_log).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// loops
// ---------------------------------------------------------------------------------------------

/// The instant agent: timing lines around one `forge-lsp call` (host-side: `#!/bin/bash`).
fn agent_script(timing: &Path) -> String {
    let t = sh_quote(&timing.display().to_string());
    let errors = sh_quote(&format!("{}.errors", timing.display()));
    format!(
        r#"#!/bin/bash
echo "start $(date +%s%N) $FORGE_ROLE" >> {t}
# Instant forge-bench agent: one turn, hands off at once (the prompt is drained, not read).
cat > /dev/null
case "$FORGE_ROLE" in
  coder)
    echo "turn by $FORGE_SESSION_ID" >> work.txt
    forge-lsp call loop-handoff '{{"changes":[{{"summary":"appended to work.txt","reason":"the section asks for it"}}],"verification":[{{"command":"cat work.txt","cwd":".","outcome":"pass","changedAfter":false}}]}}' > /dev/null 2>> {errors} || echo "coder handoff failed ($?)" >> {errors}
    ;;
  auditor)
    forge-lsp call loop-handoff '{{"summary":{{"done":["work.txt updated"]}}}}' > /dev/null 2>> {errors} || echo "auditor handoff failed ($?)" >> {errors}
    ;;
  *)
    forge-lsp call loop-complete '{{"outcome":"completed","steps":[{{"name":"check","status":"done"}}]}}' > /dev/null 2>> {errors} || echo "loop-complete failed ($?)" >> {errors}
    ;;
esac
echo "done"
echo "end $(date +%s%N) $FORGE_ROLE" >> {t}
"#
    )
}

/// A directory whose `forge-lsp` is `bin`: its own directory when it is named `forge-lsp`,
/// else a symlink in `scratch`.
fn forge_lsp_dir(bin: &Path, scratch: &Path) -> PathBuf {
    if bin.file_name().is_some_and(|n| n == "forge-lsp") {
        if let Some(d) = bin.parent() {
            return d.to_path_buf();
        }
    }
    let d = scratch.join("bin");
    std::fs::create_dir_all(&d).expect("bin dir");
    std::os::unix::fs::symlink(bin, d.join("forge-lsp")).expect("symlink forge-lsp");
    d
}

/// One timing line of the agent.
struct Mark {
    start: bool,
    ns: i128,
    role: String,
}

fn read_marks(timing: &Path) -> Vec<Mark> {
    std::fs::read_to_string(timing)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ns = f.get(1)?.parse().ok()?;
            Some(Mark { start: f[0] == "start", ns, role: f.get(2).unwrap_or(&"").to_string() })
        })
        .collect()
}

/// `(spawn → first date reading, last date reading → exit observed)` of a bash script that
/// only reads the clock twice, as the instant agent does at its first and last line.
fn process_floor(scratch: &Path, n: usize) -> (Vec<Duration>, Vec<Duration>) {
    let script = scratch.join("floor.sh");
    write_executable(&script, "#!/bin/bash\na=$(date +%s%N)\nb=$(date +%s%N)\necho \"$a $b\"\n");
    let (mut start, mut exit) = (vec![], vec![]);
    for i in 0..n + 3 {
        let t0 = now_ns();
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        let t1 = now_ns();
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<i128> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if i >= 3 && v.len() == 2 {
            start.push(dur_ns(v[0] - t0));
            exit.push(dur_ns(t1 - v[1]));
        }
    }
    (start, exit)
}

/// The loop engine's overhead per phase transition with an instant agent.
pub fn scenario_loops(bin: &Path, quick: bool, r: &mut Report) {
    let sections = if quick { 4 } else { 24 };
    let lines = if quick { 400 } else { 2000 };
    eprintln!("[loops] engine overhead per phase transition: {sections}-section plan, instant agent, sandbox off");
    let w = World::new("loops", bin, 0, 0);
    let scratch = w.target.root.parent().expect("scratch dir").to_path_buf();
    let timing = scratch.join("agent-timing.log");
    let script = scratch.join("instant-agent.sh");
    write_executable(&script, &agent_script(&timing));

    // The server's PATH starts with the directory of `bin`, so the agent's `forge-lsp call`
    // is the same (release) binary: a wrapper sets it and execs the server.
    let path_dir = forge_lsp_dir(bin, &scratch);
    let wrapper = scratch.join("forge-lsp-server.sh");
    write_executable(
        &wrapper,
        &format!(
            "#!/bin/sh\nPATH={}:\"$PATH\"\nexport PATH\nexec {} \"$@\"\n",
            sh_quote(&path_dir.display().to_string()),
            sh_quote(&bin.display().to_string())
        ),
    );
    let target = Target { bin: wrapper, ..w.target.clone() };
    let forge = target.root.join(".forge");
    std::fs::create_dir_all(&forge).expect(".forge");
    std::fs::write(
        forge.join("config.toml"),
        format!(
            "[agent]\ncommand = [{}, \"{{session}}\"]\n\n[sandbox]\nenabled = false\n",
            Value::String(script.display().to_string())
        ),
    )
    .expect("project config");

    let (mut s, _) = Server::connect(&target);
    s.settle(Duration::from_millis(300));
    let db = w.open_db();
    let plan = plan_text(lines, sections, 0);
    let t0 = Instant::now();
    let t0_ns = now_ns();
    let out = s.call("execute-plan", json!({ "title": "bench loop", "plan": plan }));
    let responded = t0.elapsed();
    let name = out["data"]["loopName"].as_str().unwrap_or_else(|| panic!("execute-plan: {out}")).to_string();

    // Wait for the loop's row to leave `running` (polled every 2 ms); drain the server's
    // notifications now and then so its output pipe never fills.
    let deadline = Instant::now() + Duration::from_secs(if quick { 120 } else { 600 });
    let mut polls = 0u64;
    let (status, reason) = loop {
        std::thread::sleep(Duration::from_millis(2));
        let row: Option<(String, String)> = db
            .query_row(
                "SELECT status, coalesce(termination_reason, '') FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                rusqlite::params![w.project_id, name],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .ok();
        if let Some((st, why)) = row.filter(|(st, _)| st != "running") {
            break (st, why);
        }
        polls += 1;
        if polls.is_multiple_of(25) {
            s.settle(Duration::ZERO);
        }
        assert!(
            Instant::now() < deadline,
            "loop {name} did not finish; agent timing {}; server log tail:\n{}",
            timing.display(),
            stderr_tail(&target)
        );
    };
    let wall = t0.elapsed();
    let done_ns = now_ns();
    let completed: i64 = db
        .query_row(
            "SELECT count(*) FROM section_plans WHERE project_id = ?1 AND loop_name = ?2 AND status = 'completed'
                 AND checkpoint_commit IS NOT NULL",
            rusqlite::params![w.project_id, name],
            |row| row.get(0),
        )
        .unwrap_or(-1);
    // When the engine decided each transition (`loop_transitions.created_at`, epoch ms, taken
    // as the transition starts: after the agent was reaped and its handoff read).
    let decided: Vec<i128> = {
        let mut st = db
            .prepare("SELECT created_at FROM loop_transitions WHERE project_id = ?1 AND loop_name = ?2 ORDER BY id")
            .expect("prepare");
        let rows =
            st.query_map(rusqlite::params![w.project_id, name], |row| row.get::<_, i64>(0)).expect("query transitions");
        rows.filter_map(Result::ok).map(|at| i128::from(at) * 1_000_000).collect()
    };
    s.stop();
    let errors = std::fs::read_to_string(format!("{}.errors", timing.display())).unwrap_or_default();
    assert!(
        status == "completed" && completed == sections as i64 && errors.trim().is_empty(),
        "loop {name} ended {status} ({reason}), {completed}/{sections} sections completed with a checkpoint; agent errors: {errors}\nserver log tail:\n{}",
        stderr_tail(&target)
    );

    // Turns: start/end pairs in order, coder and auditor alternating.
    let marks = read_marks(&timing);
    let turns: Vec<(i128, i128, String)> = marks
        .chunks(2)
        .filter(|p| p.len() == 2 && p[0].start && !p[1].start)
        .map(|p| (p[0].ns, p[1].ns, p[0].role.clone()))
        .collect();
    let roles: Vec<&str> = turns.iter().map(|t| t.2.as_str()).collect();
    let expected: Vec<&str> = (0..2 * sections).map(|i| if i % 2 == 0 { "coder" } else { "auditor" }).collect();
    assert!(
        turns.len() * 2 == marks.len() && roles == expected,
        "expected {} alternating coder/auditor turns, got {} marks, roles {roles:?}",
        2 * sections,
        marks.len()
    );
    let (mut all, mut to_audit, mut to_next) = (vec![], vec![], vec![]);
    for pair in turns.windows(2) {
        let d = dur_ns(pair[1].0 - pair[0].1);
        all.push(d);
        if pair[0].2 == "coder" {
            to_audit.push(d)
        } else {
            to_next.push(d)
        }
    }
    // The split at the transition's decision (1 ms resolution): only when every turn end
    // has its logged transition.
    let split = (decided.len() == turns.len()).then(|| {
        let before: Vec<Duration> =
            turns.iter().zip(&decided).take(turns.len() - 1).map(|(t, d)| dur_ns(d - t.1)).collect();
        let after: Vec<Duration> = turns.iter().skip(1).zip(&decided).map(|(t, d)| dur_ns(t.0 - d)).collect();
        (before, after)
    });
    let own: Vec<Duration> = turns.iter().map(|t| dur_ns(t.1 - t.0)).collect();
    let agent_total: Duration = own.iter().sum();
    let engine_total: Duration = all.iter().sum();
    let first_start = dur_ns(turns[0].0 - t0_ns);
    let after_last = dur_ns(done_ns - turns[turns.len() - 1].1);

    let n = all.len();
    let overall = Latency::new(format!("loop transition overhead, all ({n}; next start − previous end)"), all);
    let (p50, p99, mean) = (overall.p50(), overall.p99(), overall.mean());
    r.latency(overall);
    let n = to_audit.len();
    r.latency(Latency::new(format!("loop transition overhead: coder → auditor ({n})"), to_audit));
    let n = to_next.len();
    r.latency(Latency::new(
        format!("loop transition overhead: auditor → next section, incl. checkpoint ({n})"),
        to_next,
    ));
    match split {
        Some((before, after)) => {
            r.latency(Latency::new("  of which agent end → transition decided (reap, read; 1 ms resolution)", before));
            r.latency(Latency::new(
                "  of which transition decided → next agent start (git, store, prompt, spawn)",
                after,
            ));
        }
        None => eprintln!("  note: {} logged transitions for {} turns: no split", decided.len(), turns.len()),
    }
    r.latency(Latency::new(format!("instant agent's own turn, end − start ({})", own.len()), own));
    let (floor_start, floor_exit) = process_floor(&scratch, if quick { 10 } else { 50 });
    r.latency(Latency::new("agent process floor: spawn → first `date +%s%N` (bash, from the bench)", floor_start));
    r.latency(Latency::new("agent process floor: last `date +%s%N` → exit seen (bash, from the bench)", floor_exit));
    r.figure(
        format!("loop wall time: execute-plan sent → row completed ({sections} sections, {} turns)", 2 * sections),
        format!(
            "{} ms (agent turns {} ms, transitions {} ms, start {} ms, end {} ms)",
            ms(wall),
            ms(agent_total),
            ms(engine_total),
            ms(first_start),
            ms(after_last)
        ),
    );
    r.figure("loop start: execute-plan response (worktree, rows, first turn spawned)", format!("{} ms", ms(responded)));
    r.figure("loop start: execute-plan sent → first agent `start`", format!("{} ms", ms(first_start)));
    r.figure(
        "loop end: last agent `end` → row completed seen (checkpoint, teardown commit; polled every 2 ms)",
        format!("{} ms", ms(after_last)),
    );
    for (what, d) in [("p50", p50), ("p99", p99), ("mean", mean)] {
        r.targets.push(Goal {
            what: format!("loop engine overhead per phase transition, {what}"),
            measured: format!("{} ms", ms(d)),
            limit: "< 20 ms".into(),
            met: d < Duration::from_millis(20),
        });
    }
}

// ---------------------------------------------------------------------------------------------
// sandbox
// ---------------------------------------------------------------------------------------------

/// Spawn → exit of a command with no input or output.
fn run_once(program: &OsString, args: &[OsString]) -> Duration {
    let t0 = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("run {program:?}: {e}"));
    let took = t0.elapsed();
    assert!(status.success(), "{program:?} {args:?} failed: {status}");
    took
}

/// Connects to a fresh server process as a loop session (its token proves the claim).
fn connect_as(t: &Target, session: &str, token: &str) -> Server {
    let mut s = Server::spawn(t);
    let root_uri = file_uri(&t.root);
    let params = json!({
        "processId": std::process::id(),
        "rootUri": root_uri,
        "workspaceFolders": [{ "uri": root_uri, "name": "bench" }],
        "capabilities": {
            "general": { "positionEncodings": ["utf-16"] },
            "workspace": { "textDocumentContent": { "dynamicRegistration": false }, "workspaceFolders": true },
            "window": { "workDoneProgress": false }
        },
        "initializationOptions": { "forge": { "session": session, "token": token } }
    });
    let reply = s.request("initialize", params);
    reply.result.unwrap_or_else(|e| panic!("initialize as loop session {session} failed: {e}"));
    s.session_id = session.to_string();
    s.notify("initialized", json!({}));
    s
}

/// A running loop row (`sandbox` as given) whose worktree is `wt`, and its coder session
/// with `token` (sha-256 hex stored).
fn insert_loop(w: &World, name: &str, session: &str, token: &str, wt: &Path, sandbox: bool) {
    let db = w.open_db();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    db.execute(
        "INSERT INTO loops (project_id, loop_name, title, status, phase, current_session_id, project_dir, worktree_dir,
            total_sections, started_at, sandbox, sandbox_network)
         VALUES (?1, ?2, ?2, 'running', 'coding', ?3, ?4, ?5, 0, ?6, ?7, 0)",
        rusqlite::params![
            w.project_id,
            name,
            session,
            w.target.root.display().to_string(),
            wt.display().to_string(),
            now,
            i64::from(sandbox)
        ],
    )
    .expect("insert loop");
    db.execute(
        "INSERT INTO loop_sessions (session_id, project_id, loop_name, role, token_hash, created_at)
         VALUES (?1, ?2, ?3, 'coder', ?4, ?5)",
        rusqlite::params![session, w.project_id, name, hash_token(token), now],
    )
    .expect("insert loop session");
}

/// bubblewrap start-up and the `forge.shell` round trip with and without the sandbox.
pub fn scenario_sandbox(bin: &Path, quick: bool, r: &mut Report) {
    let bwrap = match probe() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("[sandbox] SKIPPED: bubblewrap is not usable here: {e}");
            r.figure("sandbox scenario", format!("skipped: bubblewrap is not usable here ({e})"));
            return;
        }
    };
    let (warm, n) = if quick { (3, 30) } else { (10, 200) };
    eprintln!(
        "[sandbox] `true` directly vs in bubblewrap ({}), forge.shell round trip; {n} runs each",
        bwrap.display()
    );
    let w = World::new("sandbox", bin, 0, 0);
    let scratch = w.target.root.parent().expect("scratch dir").to_path_buf();

    // The same command line `Sandbox::command` builds for a loop: its worktree, and the
    // server's private socket directory bound read-only.
    let wt = scratch.join("worktree");
    std::fs::create_dir_all(&wt).expect("worktree dir");
    let socket_dir = w.target.xdg_runtime.join("forge-lsp");
    std::fs::create_dir_all(&socket_dir).expect("socket dir");
    let sandbox = Sandbox { socket_dir: Some(socket_dir), ..Sandbox::for_loop(&wt, false, None) };
    let cmd = sandbox.command(&bwrap, &["true".to_string()], &wt);
    let (b_prog, b_args) = (
        cmd.as_std().get_program().to_os_string(),
        cmd.as_std().get_args().map(|a| a.to_os_string()).collect::<Vec<_>>(),
    );
    let (t_prog, t_args) = (OsString::from("true"), vec![]);
    // A loop's shim (what an agent's shell goes through): the variable scrub and the
    // secrets' checks in sh, then the same bwrap start. `sh -c true` through it, against
    // `sh -c true` through the Sandbox::command line.
    let data = scratch.join("data");
    let shims = sandbox.clone().with_shims(&data).write_shim(&bwrap, &data).expect("write the shims");
    let (s_prog, s_args) = (shims.join("sh").into_os_string(), vec![OsString::from("-c"), OsString::from("true")]);
    let sh_cmd = sandbox.command(&bwrap, &["/bin/sh".to_string(), "-c".to_string(), "true".to_string()], &wt);
    let (bs_prog, bs_args) = (
        sh_cmd.as_std().get_program().to_os_string(),
        sh_cmd.as_std().get_args().map(|a| a.to_os_string()).collect::<Vec<_>>(),
    );
    // Interleaved, so drifting machine load hits all alike.
    let (mut direct, mut boxed, mut boxed_sh, mut shimmed) = (vec![], vec![], vec![], vec![]);
    for i in 0..warm + n {
        let d = run_once(&t_prog, &t_args);
        let b = run_once(&b_prog, &b_args);
        let bs = run_once(&bs_prog, &bs_args);
        let sh = run_once(&s_prog, &s_args);
        if i >= warm {
            direct.push(d);
            boxed.push(b);
            boxed_sh.push(bs);
            shimmed.push(sh);
        }
    }
    let direct = Latency::new(format!("`true` run directly, spawn → exit ({n})"), direct);
    let boxed = Latency::new(format!("`true` through bwrap (Sandbox::command line), spawn → exit ({n})"), boxed);
    let boxed_sh =
        Latency::new(format!("`sh -c true` through bwrap (Sandbox::command line), spawn → exit ({n})"), boxed_sh);
    let shimmed = Latency::new(
        format!("`sh -c true` through a loop's shim (scrub, secrets' checks, bwrap), spawn → exit ({n})"),
        shimmed,
    );
    let cost = boxed.p50().saturating_sub(direct.p50());
    let shim_cost = shimmed.p50().saturating_sub(boxed_sh.p50());
    r.latency(direct);
    r.latency(boxed);
    r.latency(boxed_sh);
    r.latency(shimmed);
    r.figure("bubblewrap start-up cost (p50 sandboxed − p50 direct)", format!("{} ms", ms(cost)));
    r.figure(
        "shim cost before bwrap (p50 shim − p50 Sandbox::command line, both `sh -c true`)",
        format!("{} ms", ms(shim_cost)),
    );

    // forge.shell over the LSP connection of a loop session.
    let (mut s, _) = Server::connect(&w.target);
    s.settle(Duration::from_millis(50));
    s.stop();
    let mut p50s = vec![];
    for sandboxed in [true, false] {
        let label = if sandboxed { "sandbox = 1" } else { "sandbox = 0" };
        let name = if sandboxed { "bench-shell-sandboxed" } else { "bench-shell-plain" };
        let session = forge_lsp::core::fresh_session();
        let token = forge_lsp::engine::host::new_token();
        insert_loop(&w, name, &session, &token, &wt, sandboxed);
        let mut s = connect_as(&w.target, &session, &token);
        s.settle(Duration::from_millis(200));
        let check = s.call("shell", json!({ "command": "echo \"inside=${FORGE_SANDBOX:-0}\"; pwd" }));
        let stdout = check["data"]["stdout"].as_str().unwrap_or("");
        let want = format!("inside={}\n{}\n", u8::from(sandboxed), wt.display());
        assert_eq!(stdout, want, "forge.shell ({label}) ran somewhere unexpected: {check}");
        let call = Server::command("shell", json!({ "command": "true" }));
        let v: Vec<Duration> = (0..warm + n)
            .map(|_| {
                let (d, out) = s.timed(EXEC, &call);
                debug_assert_eq!(out["data"]["exitCode"], 0);
                d
            })
            .skip(warm)
            .collect();
        let l = Latency::new(format!("forge.shell {{\"command\":\"true\"}} round trip, loop {label} ({n})"), v);
        p50s.push(l.p50());
        r.latency(l);
        s.stop();
    }
    r.figure(
        "forge.shell sandbox cost (p50 sandbox = 1 − p50 sandbox = 0)",
        format!("{} ms", ms(p50s[0].saturating_sub(p50s[1]))),
    );
}
