//! Task control over a loop's agent sessions (PROTOCOL.md 10.3: `forge.task-status`,
//! `-message`, `-cancel`, `-revive`) with the scripted agent over the real binary: status
//! shows the running turn and its last activity with its source; a queued message starts
//! no turn and reaches the next prompt once; cancel kills the turn's process group while
//! the loop keeps running and the session is kept; revive resumes the same session with
//! the instruction; each control is a logged `control` transition; callers that do not own
//! the loop are refused.

mod common;
mod loop_support;

use std::time::Duration;

use common::*;
use loop_support::*;
use serde_json::json;

/// At most 32 messages wait for one session: all of them go into its next prompt.
#[test]
fn a_sessions_queue_of_messages_is_bounded() {
    let t = LoopTest::start("task", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_status(&name, "running", |p| p["status"] == json!("running"));
    for i in 1..=32 {
        let m = t.client.tool_ok("task-message", json!({ "name": name, "message": format!("note {i}") }));
        assert_eq!(m.data["queuedMessages"], json!(i), "{}", m.text);
    }
    let e = t.client.tool_err("task-message", json!({ "name": name, "message": "one too many" }));
    assert_eq!(e.code, 1003, "{e}");
    assert_contains(&e.message, "already has 32 messages waiting (at most 32)");
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
}

/// Two servers on one project (two editors): a task control sent to the one that does not
/// run the loop answers 1004 with `data.runBy`, and `forge-lsp call` sends it on to the
/// loop's server itself (review YI's case; before, it printed the command to do so).
#[test]
fn a_task_control_through_another_server_is_sent_on_to_the_loops_server() {
    let t = LoopTest::start("task", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_status(&name, "running", |p| p["status"] == json!("running"));
    let other = t.other_server("task", &[]);
    let e = other.tool_err("task-message", json!({ "name": name, "message": "through the other one" }));
    assert_eq!(e.code, 1004, "{e}");
    assert_contains(&e.message, "is run by another forge-lsp server");
    let by = e.data.as_ref().map(|d| d["runBy"].clone()).unwrap_or_default();
    assert_eq!(by["pid"], json!(t.client.pid().expect("pid")), "{e:?}");
    let socket = by["socket"].as_str().unwrap_or_else(|| panic!("no runBy.socket: {e:?}")).to_string();
    // The call reaches the other server first (the project's most recently started), and
    // is sent on to the loop's.
    let out =
        t.sb.call("task-message")
            .arg("--verbose")
            .input(json!({ "name": name, "message": "sent on" }))
            .cwd(&t.repo.path)
            .run();
    assert_eq!(out.code, 0, "{out:?}");
    assert_contains(&out.stdout, "Message queued for session");
    assert_contains(&out.stderr, &format!("the loop is run by the server at {socket}: sent on there"));
    let st = t.client.tool_ok("task-status", json!({ "name": name }));
    assert_eq!(st.data["queuedMessages"], json!(1), "{}", st.text);
    drop(other);
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
}

#[test]
fn status_message_cancel_and_revive_a_loop_session() {
    let t = LoopTest::start("task", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    let pid: u32 = t.wait_state_file("coder.pid").trim().parse().expect("coder pid");
    let running = t.wait_status(&name, "running", |p| p["status"] == json!("running"));
    let coder = running["sessionId"].as_str().unwrap().to_string();
    assert!(pid_alive(pid));

    // Status: the current turn runs; its last activity is its tool call (after its output).
    t.wait_state_file("task-self.code");
    let st = wait_for(Duration::from_secs(10), || {
        let st = t.client.tool_ok("task-status", json!({ "name": name }));
        (st.data["lastActivitySource"] == json!("tool-call")).then_some(st)
    })
    .unwrap_or_else(|| panic!("no tool-call activity seen{}", t.report()));
    assert_eq!(st.data["sessionId"], json!(coder), "{}", st.text);
    assert_eq!(st.data["running"], json!(true));
    assert_contains(&st.text, "running a turn");
    assert_contains(&st.text, "(tool-call, ");

    // A message is queued without starting a turn.
    let m = t.client.tool_ok("task-message", json!({ "message": "Remember: keep work.txt short." }));
    assert_contains(&m.text, "without launching or resuming it");
    assert_eq!(m.data["queuedMessages"], json!(1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(t.turns().len(), 1, "a message must not start a turn");

    // Cancel: the turn's process is killed, the loop keeps running, the session is kept.
    let c = t.client.tool_ok("task-cancel", json!({ "name": name }));
    assert_eq!(c.data["interrupted"], json!(true), "{}", c.text);
    assert_contains(&c.text, "the session is kept");
    assert!(wait_for(Duration::from_secs(5), || (!pid_alive(pid)).then_some(())).is_some(), "the coder was not killed");
    std::thread::sleep(Duration::from_millis(500));
    let row = t.loop_row(&name);
    assert_eq!(row["status"], json!("running"), "task-cancel must not end the loop{}", t.report());
    let st = t.client.tool_ok("task-status", json!({}));
    assert_eq!(st.data["stopped"], json!(true), "{}", st.text);
    assert_eq!(st.data["queuedMessages"], json!(1));
    assert_contains(&st.text, "stopped");
    // A second cancel has nothing to stop.
    let again = t.client.tool_ok("task-cancel", json!({}));
    assert_eq!(again.data["interrupted"], json!(false), "{}", again.text);

    // Revive: the same session, a new turn whose prompt carries the queued message first,
    // then the instruction; the loop then runs to the end.
    let r = t.client.tool_ok("task-revive", json!({ "instruction": "Go on: append your line and hand off." }));
    assert_contains(&r.text, "resumed with your instruction");
    let prompt =
        wait_for(LOOP_WAIT, || t.state_file("prompt-2")).unwrap_or_else(|| panic!("no second turn{}", t.report()));
    let msg = prompt.find("Remember: keep work.txt short.").expect("the queued message is in the prompt");
    let instr = prompt.find("Go on: append your line and hand off.").expect("the instruction is the prompt");
    assert!(msg < instr, "{prompt}");
    let turns = t.turns();
    assert_eq!(
        (turns[1].0.as_str(), turns[1].1.as_str()),
        ("coder", coder.as_str()),
        "revive resumes the same session"
    );
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    // Delivered once: no later prompt repeats it.
    for (i, _) in turns.iter().enumerate().skip(2) {
        let p = t.state_file(&format!("prompt-{}", i + 1)).unwrap_or_default();
        assert!(!p.contains("Remember: keep work.txt short."), "prompt {} repeats the message", i + 1);
    }
    let briefs = t.briefs(&name);
    let controls: Vec<&String> = briefs.iter().filter(|b| b.starts_with("control")).collect();
    assert_eq!(
        controls.iter().map(|b| b.split_whitespace().nth(1).unwrap_or("")).collect::<Vec<_>>(),
        ["task-message", "task-cancel", "task-revive"],
        "{briefs:?}"
    );
    assert!(controls.iter().all(|b| b.contains("coding->coding")), "{briefs:?}");
    t.assert_notifications_match(&name);
}

#[test]
fn task_controls_are_for_the_loop_owner_and_check_their_input() {
    let t = LoopTest::start("task", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_state_file("coder.pid");

    // Another agent's session (own server process, same project): refused, naming the rule.
    let mut other = t.sb.stdio();
    other.init(&Init::new(&t.repo.path).agent("code").session("ses_someone_else"));
    for tool in ["task-status", "task-message", "task-cancel", "task-revive"] {
        let input = match tool {
            "task-message" => json!({ "name": name, "message": "hi" }),
            "task-revive" => json!({ "name": name, "instruction": "go" }),
            _ => json!({ "name": name }),
        };
        let e = other.tool_err(tool, input);
        assert_eq!(e.code, 1001, "{tool}: {e}");
        assert!(e.message.contains(&format!("forge.{tool}")) && e.message.contains("ses_someone_else"), "{e}");
    }
    // Without a name the same: a loop runs, it is not theirs (it said "No active loops.").
    let e = other.tool_err("task-status", json!({}));
    assert_eq!(e.code, 1001, "{e}");
    assert!(e.message.contains("forge.task-status") && e.message.contains(&name), "{e}");

    // Bad input.
    let e = t.client.tool_err("task-message", json!({ "message": "  " }));
    assert_eq!(e.code, -32602, "{e}");
    assert_contains(&e.message, "`message`");
    let e = t.client.tool_err("task-revive", json!({ "instruction": "x".repeat(70_000) }));
    assert_eq!(e.code, -32602, "{e}");
    let e = t.client.tool_err("task-status", json!({ "sessionId": "ses_nope" }));
    assert_eq!(e.code, 1002, "{e}");
    assert_contains(&e.message, "is not a session of loop");
    // Revive while the turn runs is refused.
    let e = t.client.tool_err("task-revive", json!({ "instruction": "go" }));
    assert_contains(&e.message, "is running a turn");

    // The loop's own session may not control it (its call went through the loop's socket).
    assert_eq!(t.state_file("task-self.code").as_deref(), Some("1\n"), "{}", t.report());
    let err = t.state_file("task-self.err").unwrap_or_default();
    assert!(err.contains("forge.task-status is not available to the coder session"), "{err}");
    t.signal("coder-release");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let e = t.client.tool_err("task-status", json!({ "name": name }));
    assert_contains(&e.message, "is not running");
}

/// Without a running server, a task control's bad input is named first (-32602, exit 2), as
/// a server would; a good one is then told it needs a server. Before, every input got the
/// "needs a running forge-lsp server" answer.
#[test]
fn without_a_server_a_task_controls_input_is_checked_first() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for (tool, input, field) in [
        ("task-status", json!({ "bogus": 1 }), "bogus"),
        ("task-message", json!({}), "message"),
        ("task-revive", json!({ "instruction": 5 }), "instruction"),
    ] {
        let out = sb.call(tool).input(input).cwd(&repo.path).run();
        assert_eq!(out.code, 2, "{tool}: {out:?}");
        assert!(out.stderr.contains(field), "{tool}: {}", out.stderr);
    }
    let out = sb.call("task-status").input(json!({})).cwd(&repo.path).run();
    assert_eq!(out.code, 1, "{out:?}");
    assert_contains(&out.stderr, "needs a running forge-lsp server");
}
