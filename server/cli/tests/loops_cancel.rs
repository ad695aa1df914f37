//! Cancelling a loop in the middle of an audit, and restarting the cancelled loop.

mod common;
mod loop_support;

use std::time::Duration;

use common::{wait_for, Client, ToolOutput};
use loop_support::*;
use serde_json::{json, Value};

/// What [`cancel_mid_audit`] leaves behind.
struct Cancelled {
    t: LoopTest,
    name: String,
    /// The auditor process that was running when the loop was cancelled.
    auditor_pid: u32,
    auditor_session: String,
}

/// Starts a two-section loop whose first auditor records a clean handoff and then waits;
/// cancels the loop while that auditor runs (phase auditing, record pending).
fn cancel_mid_audit() -> Cancelled {
    let t = LoopTest::start("block", "");
    let name = t.execute("Two halves", TWO_SECTIONS);
    let pid: u32 = t.wait_state_file("auditor.pid").trim().parse().expect("auditor pid");
    let auditing = t.wait_status(&name, "phase auditing", |p| p["phase"] == json!("auditing"));
    assert_eq!(auditing["status"], json!("running"));
    let auditor_session = auditing["sessionId"].as_str().unwrap().to_string();
    assert!(pid_alive(pid), "the auditor waits for the release file");
    // The auditor's record is pending while its turn runs.
    assert_eq!(
        t.strings("SELECT role || ' ' || status FROM loop_handoffs WHERE loop_name = ?1 ORDER BY id", &name),
        ["coder applied", "auditor pending"]
    );

    let out = t.client.tool_ok("loop-cancel", json!({ "name": name }));
    common::assert_contains(&out.text, &format!("Cancelled loop \"{name}\" (was at iteration 1)."));
    common::assert_contains(&out.text, &format!("Branch: forge/{name}"));
    Cancelled { t, name, auditor_pid: pid, auditor_session }
}

/// `loop-cancel` while the auditor runs: status and reason `cancelled`, the auditor's
/// pending record discarded, its process killed, the worktree and branch kept.
#[test]
fn cancelling_mid_audit_discards_the_pending_handoff_and_kills_the_agent() {
    let Cancelled { t, name, auditor_pid, auditor_session } = cancel_mid_audit();
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("cancelled"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("cancelled"));
    assert_eq!(end["phase"], json!("auditing"));
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1 s=0",
            "terminate cancelled auditing->- it=1 s=0 status=cancelled reason=cancelled",
        ],
    );
    t.assert_notifications_match(&name);
    assert!(
        wait_for(Duration::from_secs(30), || (!pid_alive(auditor_pid)).then_some(())).is_some(),
        "the auditor process {auditor_pid} is still alive after the cancel"
    );
    assert_eq!(
        t.strings("SELECT role || ' ' || status FROM loop_handoffs WHERE loop_name = ?1 ORDER BY id", &name),
        ["coder applied", "auditor discarded"]
    );
    // The auditor's session is retired; its turn never finished.
    assert_eq!(t.roles(), ["coder", "auditor"]);
    assert_eq!(t.strings("SELECT status FROM loop_sessions WHERE session_id = ?1", &auditor_session), ["deleted"]);
    // A cancelled loop cannot be cancelled again.
    let e = t.client.tool_err("loop-cancel", json!({ "name": name }));
    assert_eq!(e.code, 1003, "{e}");
    // The section is not completed; the work is kept on the branch and in the worktree.
    assert_eq!(
        t.strings("SELECT status FROM section_plans WHERE loop_name = ?1 ORDER BY section_index", &name),
        ["in_progress", "pending"]
    );
    let row = t.loop_row(&name);
    assert!(std::path::Path::new(row["worktreeDir"].as_str().unwrap()).join("work.txt").is_file());
    assert_eq!(t.log(&format!("forge/{name}"))[0], format!("loop: {name} cancelled after 1 iteration"));
}

/// `loop-status restart` of the cancelled loop: it resumes at its section in coding with
/// iteration 1 and a fresh session, then completes.
#[test]
fn restarting_a_cancelled_loop_resumes_its_section_and_completes() {
    let Cancelled { t, name, auditor_session, .. } = cancel_mid_audit();
    t.wait_end(&name);
    let before: Vec<String> = t.turns().into_iter().map(|x| x.1).collect();
    t.signal("release"); // later auditors do not wait
    t.signal("hold-coder"); // the restarted coder waits for coder-release

    let mark = t.client.mark();
    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    common::assert_contains(&out.text, &format!("Restarted loop \"{name}\""));
    common::assert_contains(&out.text, "Continuing from iteration: 1");
    assert_eq!(out.data["iteration"], json!(1));
    assert_eq!(out.data["phase"], json!("coding"));
    let session = out.data["sessionId"].as_str().unwrap().to_string();
    assert!(!before.contains(&session) && session != auditor_session, "a fresh session: {session}");

    let resumed = t.wait_status_since(mark, &name, "the restart's session", |p| p["sessionId"] == json!(session));
    assert_eq!(resumed["status"], json!("running"), "{resumed}");
    assert_eq!(resumed["phase"], json!("coding"), "{resumed}");
    assert_eq!(resumed["sectionIndex"], json!(0), "{resumed}");
    assert_eq!(resumed["iteration"], json!(1), "{resumed}");
    assert!(resumed["terminationReason"].is_null() && resumed["completedAt"].is_null(), "{resumed}");
    assert_eq!(resumed["lastTransition"]["event"], json!("restart"), "{resumed}");
    t.signal("coder-release");

    let end = t.wait_status_since(mark, &name, "a final status", |p| p["status"] != json!("running"));
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1 s=0",
            "terminate cancelled auditing->- it=1 s=0 status=cancelled reason=cancelled",
            "phase restart auditing->coding it=1 s=0",
            "rotate coder-handoff coding->auditing it=1 s=0",
            "advance-section auditor-handoff auditing->coding it=1 s=0",
            "rotate coder-handoff coding->auditing it=2 s=1",
            "terminate completed auditing->- it=2 s=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
    // The first turn after the restart is a coder in the restart's session.
    let turns = t.turns();
    assert_eq!(
        turns.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
        ["coder", "auditor", "coder", "auditor", "coder", "auditor"]
    );
    assert_eq!(turns[2].1, session);
    // Section 1 was not audited clean before the cancel: the restart used its initial prompt.
    assert!(t.state_file("prompt-3").unwrap().contains("First half"));
    assert_eq!(
        t.strings("SELECT role || ' ' || status FROM loop_handoffs WHERE loop_name = ?1 ORDER BY id", &name),
        ["coder applied", "auditor discarded", "coder applied", "auditor applied", "coder applied", "auditor applied"]
    );
    let log = t.log(&format!("forge/{name}"));
    assert_eq!(log[..2], ["section 2: Second half".to_string(), "section 1: First half".to_string()], "{log:?}");
    assert!(log.contains(&format!("loop: {name} cancelled after 1 iteration")), "{log:?}");
}

/// A loop cancelled through another server process (same database): the process that runs
/// it sees the cancel in the change feed, kills its agent's turn and starts no other.
#[test]
fn a_cancel_from_another_process_stops_the_running_agent() {
    let t = LoopTest::start("block", "[loop]\ncleanupWorktree = true\n");
    let name = t.execute("Two halves", TWO_SECTIONS);
    let pid: u32 = t.wait_state_file("auditor.pid").trim().parse().expect("auditor pid");
    let wt = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap());
    // Work in the worktree not committed yet: the running process commits it before it
    // removes the worktree (it removed it with the work).
    std::fs::write(wt.join("wip.txt"), "not committed yet\n").unwrap();
    let other = t.other_server("block", &[]);
    other.tool_ok("loop-cancel", json!({ "name": name }));
    // The canceller left the worktree to the process whose agent works in it.
    assert!(wt.exists() || !pid_alive(pid), "the worktree was removed under the running auditor");
    assert!(
        wait_for(Duration::from_secs(10), || (!pid_alive(pid)).then_some(())).is_some(),
        "the auditor {pid} still runs after the cancel from another process"
    );
    // The running process removed the worktree (loop.cleanupWorktree), not the canceller
    // while the agent still worked in it; nothing more ran.
    assert!(wait_for(Duration::from_secs(10), || (!wt.exists()).then_some(())).is_some(), "{}", wt.display());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(t.roles(), ["coder", "auditor"]);
    assert_eq!(t.loop_row(&name)["status"], json!("cancelled"));
    assert_branch_file(&t, &name, "wip.txt", "not committed yet\n");
}

/// A force restart through another process: the first process's runner stops (its agent's
/// turn killed, nothing written) and the other process runs the loop.
#[test]
fn a_force_restart_from_another_process_takes_the_loop_over() {
    let t = LoopTest::start("block", "");
    let name = t.execute("Two halves", TWO_SECTIONS);
    let pid: u32 = t.wait_state_file("auditor.pid").trim().parse().expect("auditor pid");
    // Each later turn notes whether this auditor still ran when it started.
    std::fs::write(t.state.join("watch.pid"), pid.to_string()).expect("watch.pid");
    let other = t.other_server("block", &[]);
    // A loop whose server is alive shows its sessions' state in the other server.
    let status = other.tool_ok("loop-status", json!({ "name": name })).text;
    assert!(status.contains("Status: busy\n") && !status.contains("Server:"), "{status}");
    let out = other.tool_ok("loop-status", json!({ "name": name, "restart": true, "force": true }));
    let session = out.data["sessionId"].as_str().unwrap().to_string();
    assert!(
        wait_for(Duration::from_secs(10), || (!pid_alive(pid)).then_some(())).is_some(),
        "the first process's auditor {pid} still runs after the restart elsewhere"
    );
    t.signal("release"); // the restarted loop's auditors do not wait
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    // No shutdown or cancel was recorded by the first process.
    let briefs = t.briefs(&name);
    assert!(!briefs.iter().any(|b| b.contains("shutdown") || b.contains("cancelled")), "{briefs:?}");
    assert!(t.turns().iter().any(|x| x.1 == session), "the restart's session ran: {:?}", t.turns());
    // The restart's first agent started only once the first process's agent was gone
    // (before, it could start up to ~30 ms before the old one was killed).
    let watch = t.state_file("watch.log").unwrap_or_default();
    assert!(watch.contains(&format!("{session} dead")), "{watch}");
    assert!(!watch.contains("alive"), "{watch}");
}

/// A force restart through another process while this process's runner is in the middle of
/// a step (it checked the loop is its own and is about to commit the clean section's
/// checkpoint): the restart waits for the step (the loop lock), so the checkpoint is
/// committed and recorded once, and the restart takes the loop over from the next section.
/// Before the lock, the restart read the loop as still auditing section 1 and restarted
/// it, and the runner's checkpoint commit landed on the branch after all.
#[test]
fn a_restart_from_another_process_waits_for_the_runners_step() {
    let t = LoopTest::start("block", "");
    let name = t.execute("Two halves", TWO_SECTIONS);
    t.wait_state_file("auditor.pid"); // the first audit has handed off clean and waits
    t.hold("runner.step");
    t.signal("release");
    t.wait_held("runner.step");
    let other = t.other_server("block", &[]);
    let restart = force_restart_that_waits(other, &name, "the runner's step");
    t.unhold("runner.step");
    let (_other, out) = restart.join().expect("the restart's thread");
    assert_eq!(out.data["phase"], json!("coding"), "{:?}", out);
    let session = out.data["sessionId"].as_str().unwrap().to_string();
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    // Section 1 was checkpointed once, by the step the restart waited for; the restart went
    // on with section 2.
    let log = t.log(&format!("forge/{name}"));
    assert_eq!(log.iter().filter(|s| *s == "section 1: First half").count(), 1, "{log:?}");
    let coder_turns: Vec<_> = t.turns().into_iter().filter(|x| x.0 == "coder").collect();
    assert_eq!(coder_turns.last().map(|x| x.1.clone()), Some(session), "{:?}", t.turns());
    let sections = t.strings(
        "SELECT group_concat(x, ',') FROM (SELECT section_index || ':' || status AS x FROM section_plans
         WHERE loop_name = ?1 ORDER BY section_index)",
        &name,
    );
    assert_eq!(sections, ["0:completed,1:completed"], "{}", t.report());
}

/// The turn ends when the agent exits (PROTOCOL.md 7), whatever it left running: a coder
/// that leaves `sleep 600` in the background holding its output has its turn end at once
/// (the handoff applied, the loop going on to the audit), and the sleep is killed with the
/// rest of the turn's process group. Before, the turn waited for the output to end, the
/// watchdog took it for a stall and threw the handoff away, turn after turn.
#[test]
fn a_turn_ends_when_its_agent_exits_and_what_it_left_running_is_killed() {
    let t = LoopTest::start("bgchild", "[loop]\nbusyStallTimeoutMs = 60000\n");
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let bg: u32 = t.wait_state_file("bg.pid").trim().parse().expect("bg pid");
    let gone = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        !pid_alive(bg)
    });
    assert!(gone, "the background sleep {bg} outlived its turn");
    // The one that left the group (a daemon) outlives a turn that ended by itself.
    let esc: u32 = t.wait_state_file("esc.pid").trim().parse().expect("esc pid");
    assert!(pid_alive(esc), "the setsid sleep {esc} of a turn that ended by itself was killed");
    // SAFETY: a signal to the sleep this test's agent started.
    unsafe { libc::kill(esc as i32, libc::SIGKILL) };
    // One coder turn: nothing was taken for a stall.
    assert_eq!(t.roles().iter().filter(|r| *r == "coder").count(), 1, "{:?}", t.roles());
}

/// A loop cancelled while its coder's turn runs loses what the turn started outside its
/// process group too (`setsid`), found by the turn's mark (`FORGE_TURN_ID`). Before, it
/// kept running after the cancel.
#[test]
fn a_cancelled_turn_takes_what_left_its_group_with_it() {
    let t = LoopTest::start("orphan", "");
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let coder: u32 = t.wait_state_file("coder.pid").trim().parse().expect("coder pid");
    let bg: u32 = t.wait_state_file("bg.pid").trim().parse().expect("bg pid");
    let esc: u32 = t.wait_state_file("esc.pid").trim().parse().expect("esc pid");
    assert!(pid_alive(esc));
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
    for (what, pid) in [("coder", coder), ("background sleep", bg), ("setsid sleep", esc)] {
        assert!(
            wait_for(Duration::from_secs(10), || (!pid_alive(pid)).then_some(())).is_some(),
            "the cancelled turn's {what} {pid} still runs"
        );
    }
}

/// A `forge.shell` command of a turn that is cancelled dies with the turn: it is its own
/// process group and no child of the agent, so before it ran on (to its 10-minute limit)
/// and wrote into the worktree of the loop restarted after. (Without the sandbox, so that
/// the command's pid is this test's to see.)
#[test]
fn a_cancelled_turn_takes_its_shell_command_with_it() {
    let config = format!(
        "[agent]\ncommand = [{:?}, \"{{session}}\"]\n\n[sandbox]\nenabled = false\n",
        agent_script().display().to_string()
    );
    let t = LoopTest::launch(&config, "orphan", &[("FORGE_TEST_ORPHAN_SHELL", "1")]);
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let sh = wait_for(Duration::from_secs(30), || t.state_file("shell.pid").filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| panic!("no shell.pid; the call said: {:?}{}", t.state_file("shell.out"), t.report()));
    let sh: u32 = sh.trim().parse().expect("shell pid");
    t.wait_state_file("coder.pid");
    assert!(pid_alive(sh));
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
    assert!(
        wait_for(Duration::from_secs(10), || (!pid_alive(sh)).then_some(())).is_some(),
        "the cancelled turn's shell command {sh} still runs"
    );
}

/// A loop whose server was killed outright (SIGKILL) while its coder's first turn runs, and
/// whose coder had started `sleep 600` in the background. Returns the test, the loop, and
/// the pid of that sleep.
fn server_killed_mid_turn() -> (LoopTest, String, u32, u32) {
    server_killed_mid_turn_with("")
}

/// [`server_killed_mid_turn`] with `extra_toml` in the project's configuration.
fn server_killed_mid_turn_with(extra_toml: &str) -> (LoopTest, String, u32, u32) {
    let mut t = LoopTest::start("orphan", extra_toml);
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let coder: u32 = t.wait_state_file("coder.pid").trim().parse().expect("coder pid");
    let bg: u32 = t.wait_state_file("bg.pid").trim().parse().expect("bg pid");
    kill_server(&mut t);
    // The agent died with its server: nothing could end its turn any more.
    assert!(
        wait_for(Duration::from_secs(10), || (!pid_alive(coder)).then_some(())).is_some(),
        "the coder {coder} outlived its server"
    );
    // What it started in its process group lives on until a restart or cancel.
    assert!(pid_alive(bg), "the background sleep died with the server");
    let esc: u32 = t.wait_state_file("esc.pid").trim().parse().expect("esc pid");
    assert!(pid_alive(esc), "the setsid sleep died with the server");
    (t, name, bg, esc)
}

/// `cleanup loop --force` of a running loop whose server was killed stops what its turns
/// left running, as a cancel from a running server does (review YM: both sleeps outlived
/// the cleanup, and the records that find them were gone with the loop's rows).
#[test]
fn a_forced_cleanup_of_a_loop_whose_server_died_ends_what_its_turn_left_running() {
    let (t, name, bg, esc) = server_killed_mid_turn_with("");
    // Without --force: refused, saying the server has ended.
    let mut cmd = t.sb.command();
    cmd.arg("--data-dir").arg(&t.sb.data_dir).args(["cleanup", "loop", &name]).current_dir(&t.repo.path);
    let out = common::run_process(cmd, None, Duration::from_secs(60));
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("has ended"), "{out:?}");
    let mut cmd = t.sb.command();
    cmd.arg("--data-dir").arg(&t.sb.data_dir).args(["cleanup", "loop", &name, "--force"]).current_dir(&t.repo.path);
    let out = common::run_process(cmd, None, Duration::from_secs(60));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("process(es) the loop's turns left running"), "{out:?}");
    for pid in [bg, esc] {
        assert!(
            wait_for(Duration::from_secs(10), || (!pid_alive(pid)).then_some(())).is_some(),
            "{pid} outlived the forced cleanup"
        );
    }
}

/// SIGKILLs the test's first server and waits until it is gone.
fn kill_server(t: &mut LoopTest) {
    let server = t.client.pid().expect("a stdio server");
    let killed = std::process::Command::new("kill").args(["-KILL", &server.to_string()]).status().expect("kill");
    assert!(killed.success());
    assert!(wait_for(Duration::from_secs(10), || (!t.client.is_alive()).then_some(())).is_some());
}

/// A `forge.shell` command dies with its server: nobody would enforce its time limit. (In
/// a loop without the sandbox, so that the command's pid is this test's to see.)
#[test]
fn a_shell_command_dies_with_its_killed_server() {
    let config = format!(
        "[agent]\ncommand = [{:?}, \"{{session}}\"]\n\n[sandbox]\nenabled = false\n",
        agent_script().display().to_string()
    );
    let mut t = LoopTest::launch(&config, "orphan", &[("FORGE_TEST_ORPHAN_SHELL", "1")]);
    t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let sh = wait_for(Duration::from_secs(30), || t.state_file("shell.pid").filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| panic!("no shell.pid; the call said: {:?}{}", t.state_file("shell.out"), t.report()));
    let sh: u32 = sh.trim().parse().expect("shell pid");
    t.wait_state_file("coder.pid");
    assert!(pid_alive(sh));
    kill_server(&mut t);
    assert!(
        wait_for(Duration::from_secs(10), || (!pid_alive(sh)).then_some(())).is_some(),
        "the forge.shell command {sh} outlived its server"
    );
    // What the dead server's turn left running is the test's to end (no restart or cancel
    // comes here to do it).
    for f in ["bg.pid", "esc.pid"] {
        if let Some(pid) = t.state_file(f).and_then(|p| p.trim().parse::<i32>().ok()) {
            // SAFETY: a signal to a sleep this test's agent started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A restart by another server after the first was killed ends what the dead server's turn
/// left running, and then runs the loop to its end with one new agent. Before, the old
/// agent (and what it started) kept working in the worktree beside the new one.
#[test]
fn a_restart_after_the_server_was_killed_ends_what_its_turn_left_running() {
    let (t, name, bg, esc) = server_killed_mid_turn();
    let other = t.other_server("orphan", &[]);
    // Before the restart, the other server's loop-status says the loop's server has
    // stopped (its session was busy when it died; that mark is stale).
    let status = other.tool_ok("loop-status", json!({ "name": name })).text;
    assert!(
        status.contains("Status: server stopped\n") && status.contains("which ran this loop, has ended"),
        "{status}"
    );
    let list = other.tool_ok("loop-status", json!({}));
    assert!(list.text.contains("| Status: server stopped"), "{}", list.text);
    // The data says it too (`serverGone`: the dead server's process id).
    assert!(list.data["loops"][0]["serverGone"].is_i64(), "{}", list.data);
    let detail = other.tool_ok("loop-status", json!({ "name": name }));
    assert!(detail.data["serverGone"].is_i64(), "{}", detail.data);
    // A restart without force says why the loop only looks active.
    let e = other.tool_err("loop-status", json!({ "name": name, "restart": true }));
    assert!(
        e.message
            .contains("is currently active. Use force=true to restart it (it only looks active: its server, process")
            && e.message.ends_with("has ended and nothing runs it)."),
        "{e:?}"
    );
    // An editor that connects now is told, and is not given a progress that nothing would
    // end (before: a spinner for good).
    let sock = other.private_socket().expect("private socket");
    let mut editor = Client::connect_unix(&sock).expect("connect");
    editor.init(&common::Init::new(&t.repo.path).data_dir(&t.sb.data_dir).work_done_progress(true));
    editor
        .wait_notification(common::WAIT, |r| {
            r.method() == "window/showMessage"
                && r.params()["message"].as_str().is_some_and(|m| {
                    m.contains(&format!("loop {name} is recorded as running, but the server that ran it"))
                })
        })
        .unwrap_or_else(|| panic!("not told: {:?}", editor.notifications_of("window/showMessage")));
    std::thread::sleep(common::QUIET);
    // Its status notification says nothing runs it (an editor showed it running for good).
    let statuses = editor.notifications_of("forge/loopStatus");
    assert!(
        statuses
            .iter()
            .map(|s| &s["params"])
            .any(|s| s["loopName"] == json!(name) && s["status"] == json!("running") && s["serverGone"].is_i64()),
        "{statuses:?}"
    );
    assert_eq!(editor.notifications_of("$/progress"), Vec::<Value>::new());
    assert!(editor.server_requests().iter().all(|r| r.method() != "window/workDoneProgress/create"));
    let out = other.tool_ok("loop-status", json!({ "name": name, "restart": true, "force": true }));
    assert!(!pid_alive(bg), "the restart left the dead server's background sleep {bg} running");
    assert!(!pid_alive(esc), "the restart left the dead server's setsid sleep {esc} running");
    let session = out.data["sessionId"].as_str().unwrap().to_string();
    let end = wait_not_running(&t, &name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert!(t.turns().iter().any(|x| x.1 == session), "the restart's session ran: {:?}", t.turns());
    // Nothing recorded is left for the ended turns.
    let left = t.count("SELECT count(*) FROM loop_sessions WHERE loop_name = ?1 AND agent_process IS NOT NULL", &name);
    assert_eq!(left, 0);
}

/// A cancel by another server after the first was killed ends what its turn left running.
#[test]
fn a_cancel_after_the_server_was_killed_ends_what_its_turn_left_running() {
    let (t, name, bg, esc) = server_killed_mid_turn();
    let other = t.other_server("orphan", &[]);
    let wt = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap().to_string());
    std::fs::write(wt.join("wip.txt"), "one\ntwo\n").unwrap();
    other.tool_ok("loop-cancel", json!({ "name": name }));
    assert!(!pid_alive(bg), "the cancel left the dead server's background sleep {bg} running");
    assert!(!pid_alive(esc), "the cancel left the dead server's setsid sleep {esc} running");
    assert_eq!(t.loop_row(&name)["status"], json!("cancelled"));
    // Its last count, of the worktree it keeps (review XC: none was taken).
    let files = ended_count(&other, &name);
    assert!(
        files["files"].as_u64().is_some_and(|n| n >= 1) && files["added"].as_u64().is_some_and(|n| n >= 2),
        "{files}"
    );
}

/// The count of changed files of a loop cancelled after its server died, once taken.
fn ended_count(c: &common::Client, name: &str) -> serde_json::Value {
    wait_for(Duration::from_secs(30), || {
        let d = c.tool_ok("loop-status", json!({ "name": name })).data;
        (!d["filesChanged"].is_null()).then(|| d["filesChanged"].clone())
    })
    .unwrap_or_else(|| panic!("no count of the cancelled loop's changed files"))
}

/// The same cancel with `loop.cleanupWorktree`: what the dead server's agent wrote is
/// committed to the loop's branch before its worktree goes, as a live loop's cancel
/// commits it. Before, the worktree was removed with that work (review W).
#[test]
fn a_cancel_after_the_server_was_killed_commits_the_work_before_removing_the_worktree() {
    let (t, name, _, _) = server_killed_mid_turn_with("[loop]\ncleanupWorktree = true\n");
    let wt = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap().to_string());
    std::fs::write(wt.join("wip.txt"), "written before the crash\n").unwrap();
    let other = t.other_server("orphan", &[]);
    other.tool_ok("loop-cancel", json!({ "name": name }));
    assert!(!wt.exists(), "loop.cleanupWorktree removes it once the work is on the branch");
    assert_branch_file(&t, &name, "wip.txt", "written before the crash\n");
    // Its last count, of the branch the work went to.
    let files = ended_count(&other, &name);
    assert!(files["files"].as_u64().is_some_and(|n| n >= 1), "{files}");
}

/// `git show forge/<name>:<file>` is `want`, committed by the cancel's teardown.
fn assert_branch_file(t: &LoopTest, name: &str, file: &str, want: &str) {
    let shown = std::process::Command::new("git")
        .args(["show", &format!("forge/{name}:{file}")])
        .current_dir(&t.repo.path)
        .output()
        .expect("git show");
    assert_eq!(String::from_utf8_lossy(&shown.stdout), want, "{}", String::from_utf8_lossy(&shown.stderr));
    let log = t.log(&format!("forge/{name}"));
    assert!(log[0].contains("cancelled"), "{log:?}");
}

/// A server shut down (SIGTERM) while its loop's coder turn runs kills, before it exits,
/// what the turn started outside its process group (`setsid`, found by the turn's mark):
/// nothing of the turn outlives the server's clean exit. Before, the server could exit
/// before the turn's end reached that step (seen with SIGHUP to a `--listen` server).
#[test]
fn a_server_shut_down_mid_turn_takes_what_left_the_group_before_it_exits() {
    let mut t = LoopTest::start("orphan", "");
    t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let coder: u32 = t.wait_state_file("coder.pid").trim().parse().expect("coder pid");
    let bg: u32 = t.wait_state_file("bg.pid").trim().parse().expect("bg pid");
    let esc: u32 = t.wait_state_file("esc.pid").trim().parse().expect("esc pid");
    assert!(pid_alive(esc));
    let server = t.client.pid().expect("a stdio server");
    let sent = std::process::Command::new("kill").args(["-TERM", &server.to_string()]).status().expect("kill");
    assert!(sent.success());
    assert!(wait_for(Duration::from_secs(20), || (!t.client.is_alive()).then_some(())).is_some(), "no exit");
    // At its exit, not later: nobody is left to kill them after it.
    for (what, pid) in [("coder", coder), ("background sleep", bg), ("setsid sleep", esc)] {
        assert!(!pid_alive(pid), "the {what} {pid} of the shut-down server's turn still runs");
    }
}

/// A force restart from another process while this process's turn has started its agent
/// but not yet recorded the agent's process (held there): the restart sees the turn by its
/// claim, taken before the agent started, and waits for its end, so the restart's first
/// agent starts only once this process's agent is gone. Before, a turn was recorded only
/// once its agent ran: the restart found none and started its own agent beside it.
#[test]
fn a_restart_from_another_process_sees_a_turn_whose_agent_is_not_recorded_yet() {
    let t = LoopTest::start("orphan", "");
    t.hold("host.record");
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    t.wait_held("host.record");
    let coder: u32 = t.wait_state_file("coder.pid").trim().parse().expect("coder pid");
    let esc: u32 = t.wait_state_file("esc.pid").trim().parse().expect("esc pid");
    // Each later turn notes whether this coder still ran when it started.
    std::fs::write(t.state.join("watch.pid"), coder.to_string()).expect("watch.pid");
    let other = t.other_server("orphan", &[]);
    let restart = force_restart_that_waits(other, &name, "the unrecorded turn");
    t.unhold("host.record");
    let (_other, out) = restart.join().expect("the restart's thread");
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    let end = wait_not_running(&t, &name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let watch = t.state_file("watch.log").unwrap_or_default();
    assert!(watch.contains(&format!("{session} dead")), "{watch}");
    assert!(!watch.contains("alive"), "{watch}");
    assert!(!pid_alive(coder) && !pid_alive(esc), "the first process's turn left processes running");
    let left = t.count("SELECT count(*) FROM loop_sessions WHERE loop_name = ?1 AND agent_process IS NOT NULL", &name);
    assert_eq!(left, 0, "a claim or record was left");
}

/// A server killed outright after it claimed a turn and started its agent, before it
/// recorded the agent's process (held there): a restart from another server finds the
/// claim and ends every process carrying the turn's session, what the agent started in its
/// group and outside it. Before the claims, nothing of that turn was recorded.
#[test]
fn a_restart_after_the_server_died_between_claim_and_record_ends_the_turns_processes() {
    let mut t = LoopTest::start("orphan", "");
    t.hold("host.record");
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    t.wait_held("host.record");
    let coder: u32 = t.wait_state_file("coder.pid").trim().parse().expect("coder pid");
    let bg: u32 = t.wait_state_file("bg.pid").trim().parse().expect("bg pid");
    let esc: u32 = t.wait_state_file("esc.pid").trim().parse().expect("esc pid");
    kill_server(&mut t);
    t.unhold("host.record");
    assert!(
        wait_for(Duration::from_secs(10), || (!pid_alive(coder)).then_some(())).is_some(),
        "the coder {coder} outlived its server"
    );
    assert!(pid_alive(bg) && pid_alive(esc), "what the coder started died with the server");
    let records =
        t.strings("SELECT agent_process FROM loop_sessions WHERE loop_name = ?1 AND agent_process IS NOT NULL", &name);
    assert!(records.len() == 1 && records[0].starts_with("starting:"), "{records:?}");
    let other = t.other_server("orphan", &[]);
    let out = other.tool_ok("loop-status", json!({ "name": name, "restart": true, "force": true }));
    assert!(!pid_alive(bg), "the restart left the dead server's background sleep {bg} running");
    assert!(!pid_alive(esc), "the restart left the dead server's setsid sleep {esc} running");
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    let end = wait_not_running(&t, &name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert!(t.turns().iter().any(|x| x.1 == session), "the restart's session ran: {:?}", t.turns());
}

/// A force restart (B) waiting for the turn of the loop's first server (A, stopped with
/// SIGSTOP, so its coder runs on) is taken over by a newer force restart (C) from a third
/// server. B stops waiting and ends nothing: C's coder, started once A was let go and
/// ended its turn, still runs past B's 10 s bound, and the loop then completes with C's
/// session and no turn of B's. B is held in its wait (the pause `restart.awaiting`) until
/// C's coder runs, so that it does not see the moment between A's turn and C's with no
/// turn recorded (which also ends its wait). Before, B went on waiting for C's turn and at
/// its bound ended it.
#[test]
fn a_restart_taken_over_while_it_waits_leaves_the_newer_restarts_turn_alone() {
    let t = LoopTest::start("block", "");
    t.signal("hold-coder"); // every coder waits for coder-release (at most ~20 s)
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let first =
        wait_for(LOOP_WAIT, || t.turns().first().cloned()).unwrap_or_else(|| panic!("no first turn{}", t.report()));
    let a = t.client.pid().expect("a stdio server");
    stop_or_continue(a, libc::SIGSTOP);
    // A failed assertion before the SIGCONT below still lets A go (its shutdown, and its
    // coder's end, need it running).
    let _resume_a = Resume(a);
    let session_now = |t: &LoopTest| t.loop_row(&name)["sessionId"].as_str().unwrap_or_default().to_string();

    let pauses = t.sb.mkdir("pauses-b");
    std::fs::write(pauses.join("restart.awaiting"), "").unwrap();
    let b = t.other_server("block", &[("FORGE_TEST_PAUSE_DIR", pauses.to_str().unwrap())]);
    let (b_restart, _) = force_restart_on_a_thread(b, &name);
    wait_for(Duration::from_secs(20), || pauses.join("restart.awaiting.reached").exists().then_some(()))
        .unwrap_or_else(|| {
            panic!("the first restart did not come to wait for the stopped server's turn{}", t.report())
        });
    let b_bound = std::time::Instant::now() + Duration::from_secs(10);
    let b_session = session_now(&t);
    assert_ne!(b_session, first.1);

    let c = t.other_server("block", &[]);
    let (c_restart, _) = force_restart_on_a_thread(c, &name);
    wait_for(Duration::from_secs(20), || Some(session_now(&t)).filter(|s| *s != b_session))
        .unwrap_or_else(|| panic!("the second restart wrote no row{}", t.report()));
    std::thread::sleep(Duration::from_millis(300));
    stop_or_continue(a, libc::SIGCONT);
    // A sees the loop taken over and ends its turn; C's coder starts after that.
    let (_c, c_out) = c_restart.join().expect("the second restart's thread");
    let c_session = c_out.data["sessionId"].as_str().expect("sessionId").to_string();
    let c_turn = wait_for(Duration::from_secs(20), || t.turns().into_iter().find(|x| x.1 == c_session))
        .unwrap_or_else(|| panic!("the second restart's coder did not start{}", t.report()));
    assert!(!pid_alive(first.2), "the first server's coder {} runs beside the second restart's", first.2);
    std::fs::remove_file(pauses.join("restart.awaiting")).unwrap();
    let (_b, b_out) = b_restart.join().expect("the first restart's thread");
    assert_eq!(b_out.data["sessionId"].as_str(), Some(b_session.as_str()), "{}", b_out.text);
    // Past the first restart's bound, the newer restart's coder runs on.
    std::thread::sleep(b_bound.saturating_duration_since(std::time::Instant::now()) + Duration::from_secs(1));
    assert!(pid_alive(c_turn.2), "the newer restart's coder {} was ended{}", c_turn.2, t.report());
    t.signal("coder-release");
    t.signal("release"); // the auditor's
    let end = wait_not_running(&t, &name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let turns = t.turns();
    assert!(turns.iter().all(|x| x.1 != b_session), "a turn of the superseded restart ran: {turns:?}");
    let c_coders = turns.iter().filter(|x| x.0 == "coder" && x.1 == c_session).count();
    assert_eq!(c_coders, 1, "the newer restart's coder ran more than once: {turns:?}");
}

/// Sends SIGCONT to a server of the test when dropped.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: a signal to a server process this test started (a second SIGCONT is harmless).
        unsafe { libc::kill(self.0 as i32, libc::SIGCONT) };
    }
}

/// Sends SIGSTOP or SIGCONT to a server of the test.
fn stop_or_continue(pid: u32, sig: i32) {
    // SAFETY: a signal to a server process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill({pid}, {sig})");
}

/// A cancel from another process that comes while a restart holds the loop (held after it
/// took the loop lock): the cancel waits for the restart, then cancels the restarted loop.
/// The loop ends cancelled, and nothing of the restart's session is left running or
/// recorded (its runner either never starts an agent, its turn's claim finding the loop
/// cancelled, or sees the cancel and kills it). Before, the cancel read the loop as ended
/// before taking the lock and was refused ("has already completed"): it never reached the
/// lock (the pause `cancel.locking` in front of it).
#[test]
fn a_cancel_racing_a_restart_waits_for_it_and_leaves_nothing_running() {
    let Cancelled { t, name, .. } = cancel_mid_audit();
    t.wait_end(&name);
    t.signal("release");
    t.signal("hold-coder"); // a restarted coder would wait for coder-release
    t.hold("restart.locked");
    let pauses = t.sb.mkdir("pauses-other");
    let other = t.other_server("block", &[("FORGE_TEST_PAUSE_DIR", pauses.to_str().unwrap())]);
    std::fs::write(pauses.join("cancel.locking"), "").unwrap();
    let (restart_held, cancel_at_lock) =
        (t.pauses.join("restart.locked.reached"), pauses.join("cancel.locking.reached"));
    let (hold_restart, hold_cancel) = (t.pauses.join("restart.locked"), pauses.join("cancel.locking"));
    let n2 = name.clone();
    let cancel = std::thread::spawn(move || {
        wait_for(Duration::from_secs(30), || restart_held.exists().then_some(())).expect("the restart took the lock");
        let out = other.tool_ok("loop-cancel", json!({ "name": n2 }));
        (other, out)
    });
    let release = release_after_the_cancel(cancel_at_lock, hold_cancel, hold_restart);
    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    assert!(release.join().expect("the release thread"), "the cancel never came to the loop lock");
    let (_other, cancelled) = cancel.join().expect("the cancel thread");
    common::assert_contains(&cancelled.text, &format!("Cancelled loop \"{name}\""));
    assert_eq!(t.loop_row(&name)["status"], json!("cancelled"));
    // Whatever the restart's session started is gone, and nothing of it stays recorded.
    assert_no_agent_of(&t, &session);
    let left = wait_for(Duration::from_secs(10), || {
        (t.count("SELECT count(*) FROM loop_sessions WHERE loop_name = ?1 AND agent_process IS NOT NULL", &name) == 0)
            .then_some(())
    });
    assert!(left.is_some(), "a claim or record was left");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(t.loop_row(&name)["status"], json!("cancelled"), "the restart's runner revived the loop");
}

/// A cancel through the same server while that server restarts the loop (held after it
/// took the loop lock): the cancel waits for the restart to register its runner and goes
/// through it, so the restarted runner ends the loop itself (its teardown commit on the
/// branch) instead of having its turn ended and its loop written from outside.
#[test]
fn a_cancel_during_a_restart_in_the_same_server_goes_through_the_restarted_runner() {
    let Cancelled { t, name, .. } = cancel_mid_audit();
    t.wait_end(&name);
    t.signal("release");
    t.signal("hold-coder"); // the restarted coder waits for coder-release
    let teardowns = |t: &LoopTest| {
        t.log(&format!("forge/{name}")).iter().filter(|s| s.starts_with(&format!("loop: {name} cancelled"))).count()
    };
    assert_eq!(teardowns(&t), 1, "the first cancel's");
    // Something for the next teardown commit to keep (a runner ending the loop commits it;
    // a cancel from outside the runner commits nothing).
    let wt = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap());
    std::fs::write(wt.join("left-by-the-user.txt"), "kept\n").unwrap();
    t.hold("restart.locked");
    t.hold("cancel.locking");
    // `forge-lsp call` from the project finds this server by its socket file.
    let call = t.sb.call("loop-cancel").input(json!({ "name": name })).cwd(&t.repo.path);
    let (restart_held, cancel_reached) =
        (t.pauses.join("restart.locked.reached"), t.pauses.join("cancel.locking.reached"));
    let (hold_restart, hold_cancel) = (t.pauses.join("restart.locked"), t.pauses.join("cancel.locking"));
    let cancel = std::thread::spawn(move || {
        wait_for(Duration::from_secs(30), || restart_held.exists().then_some(())).expect("the restart took the lock");
        call.run()
    });
    let release = release_after_the_cancel(cancel_reached, hold_cancel, hold_restart);
    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    assert!(release.join().expect("the release thread"), "the cancel never came");
    let cancelled = cancel.join().expect("the cancel thread");
    assert_eq!(cancelled.code, 0, "{cancelled:?}");
    common::assert_contains(&cancelled.stdout, &format!("Cancelled loop \"{name}\""));
    assert_eq!(wait_not_running(&t, &name)["status"], json!("cancelled"));
    assert_no_agent_of(&t, &session);
    assert_eq!(
        teardowns(&t),
        2,
        "the restarted runner did not end the loop itself: {:?}",
        t.log(&format!("forge/{name}"))
    );
}

/// A force restart answering on its thread: the client it went through, and its answer.
type RestartThread = std::thread::JoinHandle<(Client, ToolOutput)>;

/// A force restart of `name` through `other`, on a thread of its own: the thread and
/// whether the restart has answered yet.
fn force_restart_on_a_thread(
    other: Client,
    name: &str,
) -> (RestartThread, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let (name, done) = (name.to_string(), std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let answered = done.clone();
    let restart = std::thread::spawn(move || {
        let out = other.tool_ok("loop-status", json!({ "name": name, "restart": true, "force": true }));
        answered.store(true, std::sync::atomic::Ordering::SeqCst);
        (other, out)
    });
    (restart, done)
}

/// A force restart of `name` through `other` on its thread ([`force_restart_on_a_thread`])
/// that has not answered 1.5 s later: it waits for `what`.
fn force_restart_that_waits(other: Client, name: &str, what: &str) -> RestartThread {
    let (restart, done) = force_restart_on_a_thread(other, name);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!done.load(std::sync::atomic::Ordering::SeqCst), "the restart did not wait for {what}");
    restart
}

/// The loop's row once it no longer runs (at most a minute).
fn wait_not_running(t: &LoopTest, name: &str) -> Value {
    wait_for(Duration::from_secs(60), || {
        let row = t.loop_row(name);
        (row["status"] != json!("running")).then_some(row)
    })
    .unwrap_or_else(|| panic!("the restarted loop did not end{}", t.report()))
}

/// A thread that waits until the cancel reached its pause `cancel.locking` (`reached`),
/// lets it go on (`hold_cancel`), and half a second later lets the restart held at
/// `restart.locked` go on (`hold_restart`); it gives whether the cancel came.
fn release_after_the_cancel(
    reached: std::path::PathBuf,
    hold_cancel: std::path::PathBuf,
    hold_restart: std::path::PathBuf,
) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let came = wait_for(Duration::from_secs(30), || reached.exists().then_some(())).is_some();
        let _ = std::fs::remove_file(&hold_cancel);
        std::thread::sleep(Duration::from_millis(500));
        std::fs::remove_file(hold_restart).expect("remove the pause file");
        came
    })
}

/// Waits (at most 10 s) until no agent turn of `session` runs.
fn assert_no_agent_of(t: &LoopTest, session: &str) {
    let gone = wait_for(Duration::from_secs(10), || {
        let running: Vec<u32> =
            t.turns().into_iter().filter(|x| x.1 == session).map(|x| x.2).filter(|p| pid_alive(*p)).collect();
        running.is_empty().then_some(())
    });
    assert!(gone.is_some(), "an agent of the restart's session still runs: {:?}", t.turns());
}

/// A server killed while it starts a loop, after creating the loop's branch and worktree and
/// before writing the loop's rows: the next loop start (here through another server, of the
/// same name) removes both, and gets the name. Before (FF 8), the branch and the worktree
/// stayed, known to no tool, and the next loop of that name got a suffix.
#[test]
fn a_loop_start_killed_before_its_rows_is_undone_by_the_next_start() {
    let mut t = LoopTest::start("block", "");
    let wt = killed_start(&mut t);
    assert!(t.has_branch("forge/two-halves") && wt.is_dir(), "left by the killed start");

    let other = t.other_server("block", &[]);
    let out = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(out.data["loopName"], json!("two-halves"), "{}", out.text);
    assert_eq!(out.data["worktreeDir"], json!(wt), "{}", out.text);
    assert!(!t.has_branch("forge/two-halves-1"));
    assert_eq!(t.count("SELECT count(*) FROM loop_starts WHERE loop_name LIKE ?1", "two-halves%"), 0);
    t.signal("release");
    other.tool_ok("loop-cancel", json!({ "name": "two-halves" }));
    drop(other);

    // A killed start whose worktree someone worked in since is kept (review YD): the next
    // loop of that name gets a suffix, and the record goes.
    let mut t = LoopTest::start("block", "");
    let wt = killed_start(&mut t);
    std::fs::write(wt.join("mine.txt"), "my work\n").unwrap();
    let other = t.other_server("block", &[]);
    let out = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(out.data["loopName"], json!("two-halves-1"), "{}", out.text);
    assert_eq!(std::fs::read_to_string(wt.join("mine.txt")).unwrap(), "my work\n");
    assert!(t.has_branch("forge/two-halves"), "kept with its worktree");
    assert_eq!(t.count("SELECT count(*) FROM loop_starts WHERE loop_name LIKE ?1", "two-halves%"), 0);
    t.signal("release");
    other.tool_ok("loop-cancel", json!({ "name": "two-halves-1" }));
}

/// A start killed after making its branch and before making its worktree: the next start
/// deletes the branch, still at the commit recorded before it was made, and takes the name
/// again. Before, the branch stayed and the next loop of that name got a suffix. A branch
/// someone committed on since is kept.
#[test]
fn a_start_killed_before_its_worktree_has_its_branch_undone() {
    let mut t = LoopTest::start("block", "");
    let wt = killed_start_at(&mut t, "start.branch");
    let other = t.other_server("block", &[]);
    let out = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(out.data["loopName"], json!("two-halves"), "{}", out.text);
    assert_eq!(out.data["worktreeDir"], json!(wt), "{}", out.text);
    assert_eq!(t.count("SELECT count(*) FROM loop_starts WHERE loop_name LIKE ?1", "two-halves%"), 0);
    t.signal("release");
    other.tool_ok("loop-cancel", json!({ "name": "two-halves" }));
    drop(other);

    let mut t = LoopTest::start("block", "");
    killed_start_at(&mut t, "start.branch");
    let tree = t.repo.git(&["rev-parse", "forge/two-halves^{tree}"]);
    let work = t.repo.git(&["commit-tree", tree.trim(), "-p", "forge/two-halves", "-m", "user work"]);
    t.repo.git(&["update-ref", "refs/heads/forge/two-halves", work.trim()]);
    let other = t.other_server("block", &[]);
    let out = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(out.data["loopName"], json!("two-halves-1"), "{}", out.text);
    assert!(t.repo.git(&["log", "--format=%s", "forge/two-halves"]).contains("user work"), "kept");
    t.signal("release");
    other.tool_ok("loop-cancel", json!({ "name": "two-halves-1" }));
}

/// Two loop starts undoing one killed start: the one that read it as dead first, held
/// there (a slow or descheduled process), finds it undone and taken by the other's new
/// loop, and leaves that loop alone. Before, it removed the running loop's worktree and
/// deleted its branch (review YD).
#[test]
fn an_undo_of_a_killed_start_never_removes_a_loop_started_since() {
    let t = LoopTest::start("block", "");
    // The killed start: a server held after creating the worktree, then killed.
    let pauses = t.sb.mkdir("pauses-killed");
    std::fs::write(pauses.join("start.created"), "").unwrap();
    let mut killed = t.other_server("block", &[("FORGE_TEST_PAUSE_DIR", pauses.to_str().unwrap())]);
    let _held = killed.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.execute-plan", "arguments": [{ "title": "Two halves", "plan": TWO_SECTIONS }] }),
    );
    wait_for(LOOP_WAIT, || pauses.join("start.created.reached").exists().then_some(()))
        .unwrap_or_else(|| panic!("the start was not held{}", t.report()));
    let pid = killed.pid().expect("a stdio server");
    assert!(std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    assert!(wait_for(Duration::from_secs(10), || (!killed.is_alive()).then_some(())).is_some());
    // This test's server reads the killed start as dead, and is held there.
    t.hold("start.undo");
    let slow = t.client.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.execute-plan", "arguments": [{ "title": "Other", "plan": TWO_SECTIONS }] }),
    );
    t.wait_held("start.undo");
    // Meanwhile another server undoes it and starts its loop in that folder.
    let quick = t.other_server("block", &[]);
    let out = quick.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(out.data["loopName"], json!("two-halves"), "{}", out.text);
    t.unhold("start.undo");
    let done = t.client.wait_response(slow, Duration::from_secs(60));
    assert_eq!(done["result"]["data"]["loopName"], json!("other"), "{done}");
    let wt = t.sb.data_dir.join("worktrees").join("two-halves");
    assert!(wt.is_dir() && t.has_branch("forge/two-halves"), "the running loop keeps its worktree and branch");
    let status = quick.tool_ok("loop-status", json!({ "name": "two-halves" }));
    assert!(!status.text.contains("(missing)"), "{}", status.text);
    t.signal("release");
    quick.tool_ok("loop-cancel", json!({ "name": "two-halves" }));
    t.client.tool_ok("loop-cancel", json!({ "name": "other" }));
}

/// Holds the test's first server after a loop start ("Two halves") made its branch,
/// worktree and record, kills it, and returns the worktree.
fn killed_start(t: &mut LoopTest) -> std::path::PathBuf {
    killed_start_at(t, "start.created")
}

/// A loop start of "Two halves" held at the test pause `pause`, then its server killed.
fn killed_start_at(t: &mut LoopTest, pause: &str) -> std::path::PathBuf {
    t.hold(pause);
    let _first = t.client.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.execute-plan", "arguments": [{ "title": "Two halves", "plan": TWO_SECTIONS }] }),
    );
    t.wait_held(pause);
    let wt = t.sb.data_dir.join("worktrees").join("two-halves");
    assert!(t.has_branch("forge/two-halves"), "the start made its branch");
    assert_eq!(wt.is_dir(), pause == "start.created", "the start made its worktree at {pause} only");
    assert_eq!(t.count("SELECT count(*) FROM loop_starts WHERE loop_name = ?1", "two-halves"), 1);
    kill_server(t);
    wt
}

/// A killed start is undone by its branch and worktree as they were made, not by its
/// branch's reflog (review YF): commits made there after the reflog expired keep both,
/// and a repository that keeps no reflog (`core.logAllRefUpdates = false`) still has its
/// untouched leftovers undone.
#[test]
fn a_killed_start_is_undone_only_when_nobody_worked_there() {
    // Commits, then the reflog expired, then one more: one reflog entry, not the creation.
    let mut t = LoopTest::start("block", "");
    let wt = killed_start(&mut t);
    common::git(&wt, &["commit", "-q", "--allow-empty", "-m", "user work 1"]);
    t.repo.git(&["reflog", "expire", "--expire=now", "--all"]);
    common::git(&wt, &["commit", "-q", "--allow-empty", "-m", "user work 2"]);
    let other = t.other_server("block", &[]);
    let out = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(out.data["loopName"], json!("two-halves-1"), "{}", out.text);
    assert!(t.has_branch("forge/two-halves") && wt.is_dir(), "the user's commits are kept");
    assert!(t.repo.git(&["log", "--format=%s", "forge/two-halves"]).contains("user work 2"));
    t.signal("release");
    other.tool_ok("loop-cancel", json!({ "name": "two-halves-1" }));
    drop(other);

    // Files git ignores, and a change hidden from `git status` (skip-worktree), are work
    // too (review YG: both went with the worktree).
    for (round, work) in ["ignored", "skip-worktree"].into_iter().enumerate() {
        let mut t = LoopTest::start("block", "");
        let wt = killed_start(&mut t);
        if work == "ignored" {
            std::fs::write(t.repo.path.join(".git/info/exclude"), "*.log\n").unwrap();
            std::fs::write(wt.join("notes.log"), "precious\n").unwrap();
        } else {
            common::git(&wt, &["update-index", "--skip-worktree", "README.md"]);
            std::fs::write(wt.join("README.md"), "my edit\n").unwrap();
        }
        let other = t.other_server("block", &[]);
        let out = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
        assert_eq!(out.data["loopName"], json!("two-halves-1"), "round {round} ({work}): {}", out.text);
        assert!(wt.is_dir() && t.has_branch("forge/two-halves"), "{work}: kept");
        t.signal("release");
        other.tool_ok("loop-cancel", json!({ "name": "two-halves-1" }));
    }

    // No reflog at all: untouched, so undone.
    let mut t = LoopTest::start("block", "");
    t.repo.git(&["config", "core.logAllRefUpdates", "false"]);
    let wt = killed_start(&mut t);
    assert!(wt.is_dir());
    let other = t.other_server("block", &[]);
    let out = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(out.data["loopName"], json!("two-halves"), "{}", out.text);
    t.signal("release");
    other.tool_ok("loop-cancel", json!({ "name": "two-halves" }));
}
