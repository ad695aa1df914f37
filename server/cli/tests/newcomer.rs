//! The first five minutes, over the real binary: `forge-lsp demo` (with and without
//! `--keep`), `forge-lsp call` finding a `serve --listen` server by itself (and saying so
//! with `--verbose`), the port line of `--listen tcp:127.0.0.1:0`, the stdio server's hint
//! on a terminal, the shell-aware `execute-plan` reply, `plan-edit`'s section list, and
//! agents that call `forge-lsp` without it being on `PATH`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// A loop of the demo agent may take this long on a loaded machine.
const LOOP_WAIT: Duration = Duration::from_secs(90);

/// `forge-lsp demo [args]` from the sandbox, with its temporary directory inside it.
fn demo(sb: &Sandbox, args: &[&str]) -> CallOutput {
    let mut cmd = sb.command();
    cmd.arg("demo").args(args).env("TMPDIR", sb.mkdir("tmp"));
    run_process(cmd, None, Duration::from_secs(120))
}

/// The lines of the demo's section whose heading starts with `== {n}.`.
fn section<'a>(out: &'a str, n: &str) -> Vec<&'a str> {
    let head = format!("== {n}.");
    out.lines().skip_while(|l| !l.starts_with(&head)).skip(1).take_while(|l| !l.starts_with("== ")).collect()
}

#[test]
fn demo_runs_a_two_section_loop_with_a_finding_and_two_checkpoints() {
    let sb = Sandbox::new();
    let out = demo(&sb, &[]);
    println!("{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, 0, "demo failed: {}{}", out.stdout, out.stderr);
    let s = &out.stdout;
    // The loop ran both sections to completion.
    let progress = section(s, "2").join("\n");
    assert!(progress.contains("section 1/2"), "{progress}");
    assert!(progress.contains("section 2/2"), "{progress}");
    assert!(progress.contains("completed (iteration 3)"), "{progress}");
    // The auditor's finding, from the audit history: one bug, then fixed.
    let findings = section(s, "3").join("\n");
    assert!(findings.contains("The auditor wrote 1 finding(s):"), "{findings}");
    assert!(findings.contains("bug greet.sh:2: The greeting is misspelled"), "{findings}");
    assert!(findings.contains("section 1, audit 1 (iteration 1): dirty"), "{findings}");
    assert!(findings.contains("section 1, audit 2 (iteration 2): clean"), "{findings}");
    // Status and transitions as an editor gets them.
    let status = section(s, "4").join("\n");
    assert!(status.contains("Status: completed"), "{status}");
    assert!(status.contains("advance-section"), "{status}");
    assert!(status.contains("terminate"), "{status}");
    // The plan document and both checkpoint commits.
    assert!(section(s, "5").join("\n").contains("## Phase 2: The note"), "{s}");
    let commits: Vec<&str> = section(s, "6").into_iter().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(commits.len(), 2, "{commits:?}");
    assert!(commits[0].contains("section 2:") && commits[0].contains("[NOTES.md]"), "{commits:?}");
    assert!(commits[1].contains("section 1:") && commits[1].contains("[greet.sh]"), "{commits:?}");
    assert!(s.contains("== Look again =="), "{s}");
    assert!(s.contains("call loop-status '{\"name\":\"greet-demo\"}'"), "{s}");
    // Sandbox: on where bwrap works, else a note saying why.
    assert!(s.contains("Sandbox:    on") || s.contains("Sandbox:    off:"), "{s}");
    // Nothing is left behind without --keep.
    let left: Vec<_> = std::fs::read_dir(sb.root.join("tmp")).expect("tmp").collect();
    assert!(left.is_empty(), "the demo left {left:?}");
    let secs: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("Demo time: "))
        .and_then(|t| t.trim_end_matches(" s").parse().ok())
        .expect("a Demo time line");
    println!("demo wall time {secs} s (process {:?})", out.elapsed);
    // Under 10 s on an idle machine; loosely here (debug build, shared cores).
    assert!(secs < 30.0, "the demo took {secs} s");
}

#[test]
fn demo_without_bubblewrap_runs_unsandboxed_and_says_why() {
    let sb = Sandbox::new();
    let mut cmd = sb.command();
    cmd.arg("demo").env("TMPDIR", sb.mkdir("tmp")).env("FORGE_BWRAP", sb.root.join("no-bwrap"));
    // A user configuration that would stop the demo's loop is not read: loops off, a
    // post-action phase, a preset that wraps the agent in another CLI's arguments, fewer
    // iterations than the demo needs (the last two made the demo fail before).
    sb.write_user_config(
        "[agent]\npreset = \"claude\"\n\n[loop]\nenabled = false\ndefaultMaxIterations = 2\n\n[loop.postAction]\nenabled = true\n",
    );
    let out = run_process(cmd, None, Duration::from_secs(120));
    assert_eq!(out.code, 0, "demo failed: {}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Sandbox:    off: bubblewrap is not available"), "{}", out.stdout);
    assert!(out.stdout.contains("completed (iteration 3)"), "{}", out.stdout);
}

#[test]
fn demo_keep_leaves_a_repository_to_look_at_again() {
    let sb = Sandbox::new();
    let out = demo(&sb, &["--keep"]);
    assert_eq!(out.code, 0, "demo failed: {}{}", out.stdout, out.stderr);
    let kept = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Kept: "))
        .and_then(|l| l.split(" (").next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no Kept: line in {}", out.stdout));
    let project = kept.join("project");
    assert!(project.join(".git").is_dir(), "{}", project.display());
    assert_eq!(git(&project, &["show", "forge/greet-demo:greet.sh"]), "#!/bin/sh\necho \"Hello, world\"");
    // One of the printed commands: loop-status from the kept directory (in-process now).
    let st = sb
        .call("loop-status")
        .data_dir(&kept.join("data"))
        .input(json!({ "name": "greet-demo" }))
        .cwd(&project)
        .json()
        .arg("--verbose")
        .run();
    assert_eq!(st.code, 0, "{st:?}");
    assert!(st.stderr.contains("in-process"), "{}", st.stderr);
    let v: Value = serde_json::from_str(&st.stdout).expect("json");
    assert_eq!(v["data"]["status"], json!("completed"), "{v}");
    std::fs::remove_dir_all(&kept).expect("remove the kept directory");
}

/// A demo ended by SIGTERM or Ctrl-C (SIGINT) stops its loop and removes its directory
/// and sockets, as at its end (before, all of it stayed behind: a review).
#[test]
fn an_interrupted_demo_leaves_nothing_behind() {
    for (signal, code) in [("TERM", 143), ("INT", 130)] {
        let sb = Sandbox::new();
        let tmp = sb.mkdir("tmp");
        // The loop is held at its first step, so that the signal comes while it runs.
        let pauses = sb.mkdir("pauses");
        std::fs::write(pauses.join("runner.step"), "").unwrap();
        let mut cmd = sb.command();
        cmd.arg("demo")
            .env("TMPDIR", &tmp)
            .env("FORGE_TEST_PAUSE_DIR", &pauses)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn the demo");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        // Interrupted once its loop runs.
        let mut seen = String::new();
        for line in lines.by_ref() {
            let line = line.expect("a line");
            seen.push_str(&line);
            seen.push('\n');
            if line.starts_with("== 2.") {
                break;
            }
        }
        assert!(seen.contains("== 2."), "{seen}");
        wait_for(Duration::from_secs(30), || pauses.join("runner.step.reached").exists().then_some(()))
            .expect("the loop never reached its first step");
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        // The loop goes on, as one not held would, and meets the shutdown.
        std::fs::remove_file(pauses.join("runner.step")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let exit = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            assert!(Instant::now() < deadline, "the demo did not end after SIG{signal}");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(exit.code(), Some(code), "SIG{signal}: {exit:?}");
        let left: Vec<_> = std::fs::read_dir(&tmp).expect("tmp").flatten().map(|e| e.path()).collect();
        assert!(left.is_empty(), "SIG{signal} left {left:?}");
    }
}

/// A `serve --listen` that finds the database locked by another process past the busy
/// timeout when it starts registers itself once the lock is gone, so `forge-lsp call`
/// finds it (before, it tried once and `call` never found it: a review).
#[test]
fn a_listening_server_registers_once_a_lock_held_at_its_start_is_gone() {
    let sb = Sandbox::new();
    let repo = demo_project();
    // The database exists, and another process holds its write lock for longer than the
    // busy timeout (10 s).
    let first = sb.call("review-read").input(json!({})).cwd(&repo.path).run();
    assert_eq!(first.code, 0, "{first:?}");
    let db = sb.db();
    db.conn.execute_batch("BEGIN EXCLUSIVE; DELETE FROM servers;").expect("lock");
    let sock = sb.root.join("sockdir/forge.sock");
    let server = sb.listen_unix(&sock);
    wait_for(Duration::from_secs(30), || server.stderr().contains("trying again in the background").then_some(()))
        .unwrap_or_else(|| panic!("no failed registration: {}", server.stderr()));
    db.conn.execute_batch("ROLLBACK").expect("unlock");
    let found = wait_for(Duration::from_secs(30), || {
        let out = sb.call("loop-status").input(json!({})).cwd(&repo.path).arg("--verbose").run();
        out.stderr.contains("through the running server at").then_some(out)
    });
    assert!(found.is_some(), "call never found the server: {}", server.stderr());
}

/// `forge-lsp call ... | head`: when the reader stops reading, the call ends without an
/// error line (exit 141, as a process ended by SIGPIPE), as other command-line tools do.
#[test]
fn a_reader_that_stops_reading_gets_no_error_line() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let plan = format!("# Big\n\n{}", (0..5000).map(|i| format!("line {i} of the plan\n")).collect::<String>());
    let w = sb.call("plan-write").input(json!({ "content": plan, "session_id": "ses_pipe" })).cwd(&repo.path).run();
    assert_eq!(w.code, 0, "{w:?}");
    let mut cmd = sb.command();
    cmd.arg("--data-dir")
        .arg(&sb.data_dir)
        .args(["call", "plan-read", r#"{"session_id":"ses_pipe","limit":5000}"#])
        .current_dir(&repo.path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(141), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{out:?}");
}

/// A project whose agent is the demo's scripted agent (sandbox off: these tests are about
/// the command line, the sandbox has its own).
fn demo_project() -> GitRepo {
    let repo = GitRepo::new();
    repo.write_project_config(&format!(
        "[agent]\ncommand = [{:?}, \"demo-agent\"]\n\n[sandbox]\nenabled = false\n",
        BIN
    ));
    repo
}

/// Waits for a line of a server's stderr log that starts with `prefix`.
fn wait_stderr_line(server: &ListenServer, prefix: &str) -> String {
    wait_for(WAIT, || server.stderr().lines().find(|l| l.starts_with(prefix)).map(str::to_string))
        .unwrap_or_else(|| panic!("no `{prefix}` line on stderr: {}", server.stderr()))
}

/// Polls `loop-status` with `call` until the loop is no longer running.
fn wait_loop_end(sb: &Sandbox, project: &Path, name: &str) -> Value {
    wait_for(LOOP_WAIT, || {
        let out = sb.call("loop-status").input(json!({ "name": name })).cwd(project).json().run();
        let v: Value = serde_json::from_str(&out.stdout).ok()?;
        (v["data"]["status"] != json!("running")).then_some(v)
    })
    .unwrap_or_else(|| panic!("loop {name} did not end"))
}

#[test]
fn call_finds_a_serve_listen_server_by_itself_and_says_so() {
    let sb = Sandbox::new();
    let repo = demo_project();
    let sock = sb.root.join("sockdir/forge.sock");
    let server = sb.listen_unix(&sock);
    let line = wait_stderr_line(&server, "listening on ");
    assert_eq!(line, format!("listening on unix:{}", sock.display()));

    // No FORGE_LSP_SOCKET (the harness scrubs it): execute-plan still reaches the server.
    let out = sb
        .call("execute-plan")
        .input(json!({ "title": "Greet", "plan": forge_lsp::cli::demo::PLAN, "loopName": "cli-greet" }))
        .cwd(&repo.path)
        .arg("--verbose")
        .run();
    assert_eq!(out.code, 0, "{out:?}\n{}", server.stderr());
    assert!(out.stderr.contains("forge-lsp call: through the running server at"), "{}", out.stderr);
    assert!(out.stdout.contains("Loop activated!"), "{}", out.stdout);
    // From a shell, the reply says how to watch it from a shell.
    assert!(
        out.stdout.contains("watch it with `forge-lsp call loop-status '{\"name\":\"cli-greet\"}'`"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("watch it in the editor"), "{}", out.stdout);
    let end = wait_loop_end(&sb, &repo.path, "cli-greet");
    assert_eq!(end["data"]["status"], json!("completed"), "{end}");
}

#[test]
fn call_forgets_a_server_killed_without_shutting_down() {
    let sb = Sandbox::new();
    let repo = demo_project();
    let sock = sb.root.join("sockdir/forge.sock");
    let mut server = sb.listen_unix(&sock);
    wait_stderr_line(&server, "listening on ");
    assert_eq!(sb.db().count("SELECT COUNT(*) FROM servers"), 1);
    server.kill_hard();

    // The first call finds the dead registration, says so, forgets it and runs in-process.
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).arg("--verbose").run();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("does not answer"), "{}", out.stderr);
    assert!(out.stderr.contains("forgot the registration of the dead server at"), "{}", out.stderr);
    assert!(out.stderr.contains("in-process"), "{}", out.stderr);
    assert_eq!(sb.db().count("SELECT COUNT(*) FROM servers"), 0);

    // The next call no longer tries it.
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).arg("--verbose").run();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stderr.contains("does not answer"), "{}", out.stderr);
}

/// A plan that holds a line like Forge's loop hints is read back as written: the shell
/// forms are for the loop tools' own texts (a review found plan-read rewriting it).
#[test]
fn call_gives_a_plans_text_as_written() {
    let sb = Sandbox::new();
    let repo = demo_project();
    let plan =
        "# P\nUse loop-status name=<name> for details.\nRestart: available with loop-status name=x restart=true\n";
    let out = sb.call("plan-write").input(json!({ "content": plan })).session("ses_hints").cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    let out = sb.call("plan-read").input(json!({})).session("ses_hints").cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("2: Use loop-status name=<name> for details."), "{}", out.stdout);
    assert!(out.stdout.contains("3: Restart: available with loop-status name=x restart=true"), "{}", out.stdout);
    // loop-status's own list says the command to type.
    let out = sb.call("loop-status").input(json!({})).cwd(&repo.path).run();
    assert!(!out.stdout.contains("loop-status name=<name>"), "{out:?}");
}

#[test]
fn call_without_a_server_says_it_runs_in_process_and_refuses_loop_control() {
    let sb = Sandbox::new();
    let repo = demo_project();
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).arg("--verbose").run();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("forge-lsp call: in-process (no running server of this project in"), "{}", out.stderr);
    let out = sb.call("execute-plan").input(json!({ "title": "x", "plan": "# x\nstep" })).cwd(&repo.path).run();
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("serve --listen unix:PATH"), "{}", out.stderr);
}

#[test]
fn listen_on_tcp_port_zero_reports_the_chosen_port() {
    let sb = Sandbox::new();
    let mut cmd = sb.command();
    cmd.arg("--data-dir")
        .arg(&sb.data_dir)
        .args(["serve", "--listen", "tcp:127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut first = String::new();
        let _ = BufReader::new(stderr).read_line(&mut first);
        let _ = tx.send(first);
    });
    let line = rx.recv_timeout(WAIT).expect("a line on stderr");
    let port: u16 = line
        .trim_end()
        .strip_prefix("listening on tcp:127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not a port line: {line:?}"));
    assert_ne!(port, 0);
    let mut c = Client::connect_tcp(&format!("127.0.0.1:{port}")).expect("connect to the reported port");
    let repo = GitRepo::new();
    c.init(&Init::new(&repo.path));
    drop(c);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// A pseudo-terminal: (master, slave). The slave is a terminal for `isatty`.
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on a descriptor we own; results are checked.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt failed");
        // Not inherited by the server.
        assert_eq!(libc::fcntl(m, libc::F_SETFD, libc::FD_CLOEXEC), 0, "FD_CLOEXEC");
        assert_eq!(libc::grantpt(m), 0, "grantpt");
        assert_eq!(libc::unlockpt(m), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0, "ptsname_r");
        let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
        let slave = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open the pty slave");
        (std::fs::File::from_raw_fd(m), slave)
    }
}

#[test]
fn stdio_server_hints_on_a_terminal_and_is_silent_otherwise() {
    let sb = Sandbox::new();
    let (_master, slave) = pty();
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).stdin(Stdio::from(slave)).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn stdio server");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The first line, then drain the rest (a closed stderr is a case of its own).
        let mut r = BufReader::new(stderr);
        let mut first = String::new();
        let _ = r.read_line(&mut first);
        let _ = tx.send(first);
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    });
    let line = rx.recv_timeout(WAIT).expect("a hint on stderr");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(line.starts_with("forge-lsp: waiting for an LSP client on stdin/stdout"), "{line:?}");
    assert!(line.contains("forge-lsp demo"), "{line:?}");

    // Started by an editor (a pipe), it says nothing.
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir);
    let out = run_process(cmd, Some(Vec::new()), Duration::from_secs(30));
    assert!(!out.stderr.contains("waiting for an LSP client"), "{}", out.stderr);
}

#[test]
fn plan_edit_reply_never_lists_an_empty_section_list() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let plan = "# P\n\n## Objective\nold goal\n\n<!-- forge-section -->\n## Only\nwork\n";
    let w = sb.call("plan-write").input(json!({ "content": plan })).session("ses_edit").cwd(&repo.path).run();
    assert_eq!(w.code, 0, "{w:?}");
    let e = sb
        .call("plan-edit")
        .input(json!({ "oldString": "old goal", "newString": "new goal" }))
        .session("ses_edit")
        .cwd(&repo.path)
        .run();
    assert_eq!(e.code, 0, "{e:?}");
    assert!(e.stdout.contains("Sections (1): none changed by this edit"), "{}", e.stdout);
    let lines: Vec<&str> = e.stdout.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("Sections (") && l.ends_with("):") {
            assert!(lines.get(i + 1).is_some_and(|n| n.starts_with("  ")), "an empty list: {}", e.stdout);
        }
    }
}

#[test]
fn agents_without_forge_lsp_on_path_still_call_it() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let state = sb.mkdir("agent-state");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/agents/scenario.sh");
    let scenario = scenario.canonicalize().expect("tests/agents/scenario.sh");
    // The agent records what it was given, then plays the clean scenario, which calls bare
    // `forge-lsp call ...`.
    let agent = sb.executable(
        "agent.sh",
        &format!(
            "#!/bin/sh\necho \"$FORGE_LSP_BIN\" > \"$FORGE_TEST_STATE/bin\"\ncommand -v forge-lsp > \"$FORGE_TEST_STATE/which\"\nexec {:?} \"$@\"\n",
            scenario.display().to_string()
        ),
    );
    repo.write_project_config(&format!(
        "[agent]\ncommand = [{:?}, \"{{session}}\"]\n\n[sandbox]\nenabled = false\n",
        agent.display().to_string()
    ));
    // A PATH without the binary's directory (the system's, as after `cargo build` without
    // installing).
    let path = "/usr/local/bin:/usr/bin:/bin";
    let bin_dir = Path::new(BIN).parent().expect("bin dir");
    assert!(!std::env::split_paths(path).any(|d| d == bin_dir));
    let mut client = sb.stdio_with(|c| {
        c.arg("--data-dir")
            .arg(&sb.data_dir)
            .env("PATH", path)
            .env("FORGE_TEST_STATE", &state)
            .env("FORGE_TEST_SCENARIO", "clean");
    });
    client.init(&Init::new(&repo.path));
    let plan = "# One\n\n## Objective\nA line.\n\n<!-- forge-section -->\n## Only step\nAppend a line to work.txt.\n";
    let out = client.tool_ok("execute-plan", json!({ "title": "One", "plan": plan }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    let started = Instant::now();
    let status = wait_for(LOOP_WAIT, || {
        let v = client.tool_ok("loop-status", json!({ "name": name })).data;
        (v["status"] != json!("running")).then_some(v)
    })
    .unwrap_or_else(|| panic!("the loop did not end in {:?}", started.elapsed()));
    assert_eq!(
        status["status"],
        json!("completed"),
        "{status}\nturns: {:?}",
        std::fs::read_to_string(state.join("turns"))
    );
    let given = std::fs::read_to_string(state.join("bin")).expect("the agent ran");
    let bin = Path::new(BIN).canonicalize().expect("canonical BIN");
    assert_eq!(Path::new(given.trim()).canonicalize().expect("FORGE_LSP_BIN exists"), bin);
    let which = std::fs::read_to_string(state.join("which")).expect("which");
    assert_eq!(Path::new(which.trim()).canonicalize().expect("forge-lsp on the agent's PATH"), bin);
}

#[test]
fn stdio_server_stops_on_sigterm_even_when_its_stderr_is_closed() {
    // Found while testing the hint: the shutdown log line failed on the closed stderr, the
    // logger reported that on stderr, panicked, and the process hung on its stdin reader.
    let sb = Sandbox::new();
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn stdio server");
    drop(child.stderr.take());
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let ended = wait_for(WAIT, || child.try_wait().ok().flatten());
    if ended.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(ended.is_some(), "the server did not stop within {WAIT:?} after SIGTERM");
}
