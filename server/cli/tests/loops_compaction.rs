//! Standby reuse with the context-window check (seeds: "Session Rotation"): a standby over
//! its role's threshold is compacted with `agent.compactCommand` before it is resumed, or
//! replaced by a fresh session when the host cannot compact; and the loop's models follow
//! the seeds' priority (configuration, else last used).

mod common;
mod loop_support;
mod resilience_support;

use common::*;
use loop_support::*;
use resilience_support::*;
use serde_json::json;

const REUSE_50: &str = "[loop.sessionReuse]\ncoderContextPercent = 50\n";

fn compact_script(t: &LoopTest) -> String {
    let p = t.state.join("compact.sh");
    // It takes a second, so a test can look at the session while it compacts.
    std::fs::write(
        &p,
        "#!/bin/sh\necho \"compact $FORGE_SESSION_ID $FORGE_ROLE\" >> \"$FORGE_TEST_STATE/compacted\"\nsleep 1\necho compacted\n",
    )
    .unwrap();
    let _ = std::process::Command::new("chmod").arg("+x").arg(&p).status();
    p.display().to_string()
}

#[test]
fn a_standby_over_its_threshold_is_compacted_then_resumed() {
    // The coder reports 900 of 1000 tokens: over 50 %.
    let t = resilience_support::start("fixonce", REUSE_50, &[("FORGE_TEST_CONTEXT", "900")]);
    set_compact_command(&t, &compact_script(&t));
    let name = t.execute("One step", ONE_SECTION);
    // While it compacts, the standby session is busy (other sessions of the loop see it).
    let compacting = t.wait_state_file("compacted");
    let sid = compacting.split_whitespace().nth(1).expect("session").to_string();
    let status = t.strings("SELECT status FROM loop_sessions WHERE session_id = ?1", &sid);
    assert_eq!(status, ["busy"], "the compacting standby is busy{}", t.report());
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let turns = labelled(&arg_turns(&t));
    assert_eq!(turns[..3], ["coder S1 - -", "auditor S2 - -", "coder S1 S1 -"], "{turns:?}{}", t.report());
    let coder = &arg_turns(&t)[0].session;
    let compacted = t.state_file("compacted").unwrap_or_default();
    assert_eq!(compacted.trim(), format!("compact {coder} coder"), "compacted once, before the resume");
}

#[test]
fn a_standby_over_its_threshold_is_replaced_when_the_host_cannot_compact() {
    let t = resilience_support::start("fixonce", REUSE_50, &[("FORGE_TEST_CONTEXT", "900")]);
    let name = t.execute("One step", ONE_SECTION);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let turns = labelled(&arg_turns(&t));
    assert_eq!(turns[2], "coder S3 - -", "a fresh coder: {turns:?}{}", t.report());
    // Under the threshold the same loop resumes its coder.
    let t = resilience_support::start("fixonce", REUSE_50, &[("FORGE_TEST_CONTEXT", "100")]);
    let name = t.execute("One step", ONE_SECTION);
    t.wait_end(&name);
    assert_eq!(labelled(&arg_turns(&t))[2], "coder S1 S1 -");
}

#[test]
fn a_loop_uses_the_last_used_model_when_none_is_configured() {
    let t = resilience_support::start("clean", "executionModel = \"a/x\"\n", &[]);
    let first = t.execute("First", UNSECTIONED);
    t.wait_end(&first);
    // The project no longer configures a model: the next loop uses the last used one.
    let cfg = t.repo.path.join(".forge/config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("executionModel = \"a/x\"\n", "");
    std::fs::write(&cfg, text).unwrap();
    change_config(&t, json!({}));
    std::thread::sleep(QUIET);
    let second = t.execute("Second", UNSECTIONED);
    t.wait_end(&second);
    let models: Vec<String> = arg_turns(&t).iter().filter(|a| a.role == "coder").map(|a| a.model.clone()).collect();
    assert_eq!(models, ["a/x", "a/x"], "{}", t.report());
}

/// A cancel sent while a standby compacts is handled at once: the compaction is stopped
/// (its process killed), no turn starts, and the loop ends cancelled, instead of waiting for
/// the compaction (up to 10 minutes).
#[test]
fn a_cancel_during_a_compaction_stops_it() {
    let t = resilience_support::start("fixonce", REUSE_50, &[("FORGE_TEST_CONTEXT", "900")]);
    hang_compactions(&t);
    let name = t.execute("One step", ONE_SECTION);
    let pid: u32 = t.wait_state_file("compact.pid").trim().parse().expect("compaction pid");
    let turns_before = arg_turns(&t).len();
    // A task control waits a bounded time for the compacting runner, and does nothing when
    // it gave up (review YI: it answered after the whole compaction).
    let asked = std::time::Instant::now();
    let e = t.client.tool_err("task-message", json!({ "name": name, "message": "never queued" }));
    assert_eq!(e.code, 1005, "{e}");
    assert_contains(&e.message, "is busy (compacting a standby session, or ending a turn)");
    assert!(asked.elapsed() < std::time::Duration::from_secs(20), "the task control waited {:?}", asked.elapsed());
    // One its caller cancels while it waits is answered cancelled at once, and never acted
    // on (review YJ: shielded as writes are, it waited on and was queued).
    let id = t.client.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.task-message", "arguments": [{ "name": name, "message": "called off" }] }),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.client.notify("$/cancelRequest", json!({ "id": id }));
    let answer = t.client.wait_response(id, std::time::Duration::from_secs(4));
    assert_eq!(answer["error"]["code"], json!(-32800), "{answer}");
    assert_eq!(t.count("SELECT count(*) FROM task_messages WHERE loop_name = ?1", &name), 0);
    let asked = std::time::Instant::now();
    let out = t.client.tool_ok("loop-cancel", json!({ "name": name }));
    assert_contains(&out.text, &format!("Cancelled loop \"{name}\""));
    assert!(asked.elapsed() < std::time::Duration::from_secs(10), "the cancel waited {:?}", asked.elapsed());
    assert!(
        wait_for(std::time::Duration::from_secs(10), || (!pid_alive(pid)).then_some(())).is_some(),
        "the compaction {pid} still runs"
    );
    assert_eq!(t.wait_end(&name)["status"], json!("cancelled"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(arg_turns(&t).len(), turns_before, "no turn started after the cancel{}", t.report());
    assert_eq!(t.count("SELECT count(*) FROM task_messages WHERE loop_name = ?1", &name), 0, "nothing queued");
}

/// Another process force-restarts the loop while this one compacts its standby: the
/// compaction is stopped within seconds (this process looks at the loop's row while it
/// compacts), and this process writes nothing over the restarted loop, which the other
/// process then runs to its end.
#[test]
fn a_restart_elsewhere_during_a_compaction_stops_it_and_writes_nothing() {
    let t = resilience_support::start("fixonce", REUSE_50, &[("FORGE_TEST_CONTEXT", "900")]);
    hang_compactions(&t);
    let name = t.execute("One step", ONE_SECTION);
    let pid: u32 = t.wait_state_file("compact.pid").trim().parse().expect("compaction pid");
    let other = t.other_server("fixonce", &[("FORGE_TEST_CONTEXT", "900")]);
    let out = other.tool_ok("loop-status", json!({ "name": name, "restart": true, "force": true }));
    let session = out.data["sessionId"].as_str().unwrap().to_string();
    assert!(
        wait_for(std::time::Duration::from_secs(10), || (!pid_alive(pid)).then_some(())).is_some(),
        "the compaction {pid} still runs after the restart elsewhere"
    );
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    // The restart's session ran the loop on; the first process wrote no rotation over it.
    assert!(arg_turns(&t).iter().any(|a| a.session == session), "{}", t.report());
    let briefs = t.briefs(&name);
    assert!(!briefs.iter().any(|b| b.contains("shutdown") || b.contains("cancelled")), "{briefs:?}");
}

/// Another process cancels the loop while this one compacts (`loop.cleanupWorktree` on):
/// the canceller leaves the worktree to this process, whose runner sees within seconds that
/// the loop is no longer its own, stops the compaction and removes the worktree.
#[test]
fn a_cancel_elsewhere_during_a_compaction_leaves_no_worktree_behind() {
    let top = format!("[loop]\ncleanupWorktree = true\n\n{REUSE_50}");
    let t = resilience_support::start("fixonce", &top, &[("FORGE_TEST_CONTEXT", "900")]);
    hang_compactions(&t);
    let name = t.execute("One step", ONE_SECTION);
    let pid: u32 = t.wait_state_file("compact.pid").trim().parse().expect("compaction pid");
    let wt = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap());
    let other = t.other_server("fixonce", &[]);
    other.tool_ok("loop-cancel", json!({ "name": name }));
    assert!(wt.exists() || !pid_alive(pid), "the canceller removed the worktree while the compaction ran in it");
    assert!(
        wait_for(std::time::Duration::from_secs(10), || (!pid_alive(pid)).then_some(())).is_some(),
        "the compaction {pid} still runs after the cancel elsewhere"
    );
    assert!(
        wait_for(std::time::Duration::from_secs(10), || (!wt.exists()).then_some(())).is_some(),
        "the worktree {} was left behind",
        wt.display()
    );
    assert_eq!(t.loop_row(&name)["status"], json!("cancelled"));
}

/// Makes every compaction of the test's loops hang: `agent.compactCommand` is a script that
/// writes its pid to `compact.pid` and waits two minutes.
fn hang_compactions(t: &LoopTest) {
    let p = t.state.join("compact-hang.sh");
    std::fs::write(&p, "#!/bin/sh\necho $$ > \"$FORGE_TEST_STATE/compact.pid\"\nsleep 120 &\nwait\necho compacted\n")
        .unwrap();
    let _ = std::process::Command::new("chmod").arg("+x").arg(&p).status();
    set_compact_command(t, &p.display().to_string());
}

/// Sets `agent.compactCommand` to `script {session}` in the project's configuration file
/// (not committed, so it may) and has the server read it again. (Not in the editor's
/// settings: they cannot choose a program forge-lsp runs.)
fn set_compact_command(t: &LoopTest, script: &str) {
    let cfg = t.repo.path.join(".forge/config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("[agent]\n"), "{text}");
    let text = text.replacen("[agent]\n", &format!("[agent]\ncompactCommand = [{script:?}, \"{{session}}\"]\n"), 1);
    std::fs::write(&cfg, text).unwrap();
    change_config(t, json!({}));
    std::thread::sleep(QUIET);
}
