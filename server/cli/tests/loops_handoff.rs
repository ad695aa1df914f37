//! Who may record a handoff, and what a second handoff in one turn does.

mod common;
mod loop_support;

use common::{assert_contains, Client, Init};
use loop_support::*;
use serde_json::json;

/// The coder payload the tests send themselves.
fn coder_payload(summary: &str) -> serde_json::Value {
    json!({
        "changes": [{ "summary": summary, "reason": "test" }],
        "verification": [{ "command": "true", "cwd": ".", "outcome": "pass", "changedAfter": false }]
    })
}

/// Handoffs from the wrong session, the wrong phase's tool and a forged token are refused
/// (error 1001), and none of them changes the loop: it completes normally.
#[test]
fn only_the_current_session_with_its_token_may_hand_off() {
    let t = LoopTest::start("identity", "");
    let name = t.execute("Plain plan", UNSECTIONED);

    // The coder saved its credentials; a test connection claims the coder session while it
    // is current (on the server's private socket, like an agent).
    let cred = t.wait_state_file("coder.cred");
    let (cid, ctok) = cred.trim().split_once(' ').expect("session and token");
    let socket = t.client.private_socket().expect("private socket");
    let mut held = Client::connect_unix(&socket).expect("connect to the private socket");
    held.init(&Init::new(&t.repo.path).session(cid).token(ctok));
    // A wrong token for the same session fails initialize with 1001 naming the session.
    let forged = Client::connect_unix(&socket).expect("connect");
    let e = forged.initialize(&Init::new(&t.repo.path).session(cid).token("garbage")).expect_err("forged token");
    assert_eq!(e.code, 1001, "{e}");
    assert_contains(&e.message, cid);
    assert!(!e.message.contains(ctok));
    // The same session through another server on the data directory: forge.shell runs only
    // in the server that runs the loop (before, the other server ran it for no turn of its
    // own; a probe found it).
    let other = t.other_server("identity", &[]);
    let other_socket = other.private_socket().expect("the other server's private socket");
    let mut elsewhere = Client::connect_unix(&other_socket).expect("connect to the other server");
    elsewhere.init(&Init::new(&t.repo.path).session(cid).token(ctok));
    let e = elsewhere.tool_err("shell", json!({ "command": "touch elsewhere-ran" }));
    assert_eq!(e.code, 1004, "{e}");
    assert_contains(&e.message, "is run by another forge-lsp server");
    // An empty list the schema requires entries in (`minItems: 1`) does not match the
    // schema: -32602 naming the list (it was 1006), and nothing is recorded.
    for field in ["changes", "verification"] {
        let mut payload = coder_payload("empty list");
        payload[field] = json!([]);
        let e = held.tool_err("loop-handoff", payload);
        assert_eq!(e.code, -32602, "{field}: {e}");
        assert_contains(&e.message, &format!("{field} needs at least one"));
    }
    assert_eq!(t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1", &name), 0);
    t.signal("coder-go");

    // In auditing, the held coder connection is no longer the loop's current session.
    let auditing = t.wait_status(&name, "phase auditing", |p| p["phase"] == json!("auditing"));
    let auditor = auditing["sessionId"].as_str().unwrap().to_string();
    let e = held.tool_err("loop-handoff", coder_payload("late coder handoff"));
    assert_eq!(e.code, 1001, "{e}");
    assert_contains(&e.message, &format!("only the current session of loop \"{name}\" may call it"));
    assert_contains(&e.message, cid);
    // The auditor's own attempts (written before it waits for auditor-go).
    t.wait_state_file("forged.code");
    t.signal("auditor-go");

    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);

    // loop-complete during coding: the wrong tool for the phase.
    assert_eq!(t.state_file("coder-complete.code").unwrap().trim(), "1");
    assert_contains(
        &t.state_file("coder-complete.err").unwrap(),
        &format!("forge.loop-complete is only valid in the post_action phase (loop \"{name}\" is coding)"),
    );
    // The auditor calling loop-handoff as the previous coder session (kept as the standby
    // session, so its token still identifies it): only the current session may call it.
    assert_eq!(t.state_file("stale-handoff.code").unwrap().trim(), "1");
    let stale = t.state_file("stale-handoff.err").unwrap();
    assert_contains(
        &stale,
        &format!("forge.loop-handoff is not available to session {cid}: only the current session of loop \"{name}\" may call it."),
    );
    assert_contains(&stale, "\"code\":1001");
    assert_eq!(t.state_file("stale-handoff.out").unwrap(), "");
    // forge.shell as that session, whose turn has ended: nothing runs (before, the command
    // ran, unmarked, with no turn to end it).
    assert_eq!(t.state_file("stale-shell.code").unwrap().trim(), "1");
    assert_contains(
        &t.state_file("stale-shell.err").unwrap(),
        &format!("no turn of session {cid} is running in this server"),
    );
    let wt = t.loop_row(&name)["worktreeDir"].as_str().expect("worktreeDir").to_string();
    assert!(!std::path::Path::new(&wt).join("stale-shell-ran").exists(), "the stale session's command ran");
    assert!(!std::path::Path::new(&wt).join("elsewhere-ran").exists(), "the other server ran the command");
    // A forged token: error 1001 at initialize, naming the auditor's session.
    assert_eq!(t.state_file("forged.code").unwrap().trim(), "1");
    let forged_err = t.state_file("forged.err").unwrap();
    assert_contains(&forged_err, &format!("session {auditor} cannot be claimed"));
    assert_contains(&forged_err, "\"code\":1001");
    assert_eq!(t.state_file("forged.out").unwrap(), "");

    // Only the two real handoffs were recorded, each by the session current at the time.
    let c = t.ro();
    let mut st =
        c.prepare("SELECT session_id, role, status FROM loop_handoffs WHERE loop_name = ?1 ORDER BY id").unwrap();
    let rows: Vec<(String, String, String)> =
        st.query_map([&name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        rows,
        [
            (cid.to_string(), "coder".to_string(), "applied".to_string()),
            (auditor.clone(), "auditor".to_string(), "applied".to_string()),
        ]
    );
    assert_eq!(t.roles(), ["coder", "auditor"]);
}

/// Two loop-handoff calls in one coder turn: the second replaces the first, and only the
/// second is applied and recorded as the coder's decisions.
#[test]
fn a_second_handoff_in_the_same_turn_replaces_the_first() {
    let t = LoopTest::start("double", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);

    assert_eq!(t.state_file("first.code").unwrap().trim(), "0");
    assert_eq!(
        t.state_file("first.out").unwrap().trim(),
        "Handoff recorded — end your turn now; make no further changes."
    );
    assert_eq!(t.state_file("second.code").unwrap().trim(), "0");
    let second = t.state_file("second.out").unwrap();
    assert_contains(&second, "it replaces the record you made earlier in this turn");

    // One coder record, applied, with the second call's content only.
    let coder =
        t.strings("SELECT status || ' ' || payload FROM loop_handoffs WHERE loop_name = ?1 AND role = 'coder'", &name);
    assert_eq!(coder.len(), 1, "{coder:?}");
    assert!(coder[0].starts_with("applied "), "{coder:?}");
    assert_contains(&coder[0], "SECOND-CALL summary");
    assert_eq!(
        t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1 AND payload LIKE '%FIRST-CALL%'", &name),
        0
    );

    // The attempt's coder decisions are the second call's.
    let decisions = t.strings("SELECT coder_decisions FROM loop_attempts WHERE loop_name = ?1", &name);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_contains(&decisions[0], "SECOND-CALL summary");
    assert!(!decisions[0].contains("FIRST-CALL"), "{}", decisions[0]);
    // The auditor was told the second call's decisions too.
    let audit_prompt = t.state_file("prompt-2").unwrap();
    assert_contains(&audit_prompt, "SECOND-CALL summary");
    assert!(!audit_prompt.contains("FIRST-CALL"));
}
