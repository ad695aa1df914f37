//! Loops that end without completing: a coder that never hands off, an agent that crashes
//! on every turn, and the iteration cap.

mod common;
mod loop_support;

use loop_support::*;
use serde_json::json;

/// The nudge the runner sends after a turn without a handoff.
const NUDGE: &str = "You ended your turn without calling loop-handoff/loop-complete. Finish the work, then call it.";

/// A coder that replies without ever calling loop-handoff gets 3 nudges in the same session,
/// then the loop ends `errored` with `handoff_missing`.
#[test]
fn a_coder_that_never_hands_off_is_nudged_three_times_then_terminated() {
    let t = LoopTest::start("silent", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("errored"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("handoff_missing"));
    assert_eq!(end["phase"], json!("coding"));
    // Nudges are not logged: the only row is the termination.
    t.assert_transitions(&name, &["terminate handoff_missing coding->- it=1 status=errored reason=handoff_missing"]);
    t.assert_notifications_match(&name);

    // Four turns of one coder session: the plan prompt, then the nudge three times.
    let turns = t.turns();
    assert_eq!(turns.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(), ["coder"; 4]);
    assert!(turns.iter().all(|x| x.1 == turns[0].1), "one session: {turns:?}");
    let first = t.state_file("prompt-1").unwrap();
    assert!(first.contains("work.txt") && !first.contains(NUDGE), "{first}");
    for n in 2..=4 {
        assert_eq!(t.state_file(&format!("prompt-{n}")).unwrap().trim(), NUDGE, "prompt of turn {n}");
    }
    assert_eq!(t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1", &name), 0);
    // The worktree and branch stay for a restart.
    let row = t.loop_row(&name);
    assert!(std::path::Path::new(row["worktreeDir"].as_str().unwrap()).is_dir());
    assert!(t.has_branch(&format!("forge/{name}")));
}

/// A turn with no reply at all is re-sent the full phase prompt (seeds, "Turn-end
/// sequence"), also when the turn before it was nudged: the nudge never becomes the prompt
/// that is re-sent.
#[test]
fn a_turn_with_no_reply_after_a_nudge_gets_the_phase_prompt_again() {
    let t = LoopTest::start("mute", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let first = t.state_file("prompt-1").unwrap();
    assert!(first.contains("work.txt"), "{first}");
    assert_eq!(t.state_file("prompt-2").unwrap().trim(), NUDGE, "a reply without a handoff is nudged");
    assert_eq!(t.state_file("prompt-3").unwrap(), first, "no reply: the phase prompt again, not the nudge");
}

/// An agent that exits 1 on every turn: the coder error still rotates to audit, the audit
/// error recovers to coding, and the third consecutive error ends the loop
/// (`error_max_retries`, errored).
#[test]
fn a_crashing_agent_ends_the_loop_with_error_max_retries() {
    let t = LoopTest::start("crash", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("errored"), "{end}{}", t.report());
    let reason = end["terminationReason"].as_str().unwrap_or_default().to_string();
    assert!(reason.starts_with("error_max_retries"), "{reason}");
    assert!(
        reason.contains("boom: the test agent crashed on purpose"),
        "the reason carries the agent's stderr: {reason}"
    );
    assert_eq!(end["errorCount"], json!(3), "{end}");
    t.assert_transitions(
        &name,
        &[
            "rotate coder-error coding->auditing it=1 reason=assistant error",
            "error-recovery audit-error auditing->coding it=1 reason=assistant error",
            "terminate error_max_retries coding->- it=2 status=errored reason=error_max_retries",
        ],
    );
    // The errors' messages are kept on their rows (before, only their count: a review).
    let reasons = t.strings("SELECT reason FROM loop_transitions WHERE loop_name = ?1 ORDER BY id", &name);
    assert!(reasons[0].starts_with("assistant error: ") && reasons[0].contains("boom"), "{reasons:?}");
    t.assert_notifications_match(&name);
    assert_eq!(t.roles(), ["coder", "auditor", "coder"]);
    // The errored coding turn was recorded as an attempt without decisions.
    let fallback = t.strings("SELECT fallback_reason FROM loop_attempts WHERE loop_name = ?1 ORDER BY id", &name);
    assert_eq!(fallback, ["coder turn ended on an assistant error"]);
    assert_eq!(t.strings("SELECT coder_decisions FROM loop_attempts WHERE loop_name = ?1", &name), ["NULL"]);
}

/// An auditor that fails on every turn, whether it exits 1 or is killed, while the coder
/// works: each coder handoff clears the error budget (a clean pass), so the budget alone
/// would send the loop round without bound, a real coder turn each time. The third failed
/// audit in a row ends it `errored` (`error_max_retries`), and the reason says why.
#[test]
fn an_auditor_that_fails_every_turn_ends_the_loop_on_its_third_failure() {
    for (scenario, cause, last) in [
        ("auditcrash", "audit-error", "the last: assistant error: agent exit status 1: boom: audit"),
        ("auditkill", "audit-session-aborted", "the last: the auditor's session was aborted"),
    ] {
        let t = LoopTest::start(scenario, "");
        let name = t.execute("Plain plan", UNSECTIONED);
        let end = t.wait_end(&name);
        assert_eq!(end["status"], json!("errored"), "{scenario}: {end}{}", t.report());
        let reason = end["terminationReason"].as_str().unwrap_or_default().to_string();
        assert!(reason.starts_with("error_max_retries: 3 audit turns in a row failed; "), "{scenario}: {reason}");
        assert!(reason.contains(last), "{scenario}: {reason}");
        let mut rows = vec![];
        for it in 1..=3 {
            rows.push(format!("rotate coder-handoff coding->auditing it={it}"));
            if it < 3 {
                // An assistant error keeps its message on the row.
                let reason = if cause == "audit-error" { " reason=assistant error" } else { "" };
                rows.push(format!("error-recovery {cause} auditing->coding it={it}{reason}"));
            }
        }
        rows.push("terminate error_max_retries auditing->- it=3 status=errored reason=error_max_retries".into());
        t.assert_transitions(&name, &rows.iter().map(String::as_str).collect::<Vec<_>>());
        t.assert_notifications_match(&name);
        assert_eq!(t.roles(), ["coder", "auditor", "coder", "auditor", "coder", "auditor"], "{scenario}");
        // The streak is on the row; loop-status shows it.
        assert_eq!(t.count("SELECT failed_audit_turns FROM loops WHERE loop_name = ?1", &name), 3);
        let status = t.client.tool_ok("loop-status", json!({ "name": name })).text;
        assert!(status.contains("Failed audit turns in a row: 3 (the loop ends at 3)"), "{status}");
    }
}

/// A clean section audit that would start an iteration past the cap ends the loop
/// `max_iterations` with that section completed and the next one current, so a restart
/// resumes there (seeds: restart preserves section progress) instead of redoing the
/// finished section.
#[test]
fn the_cap_at_a_clean_section_audit_leaves_the_next_section_for_a_restart() {
    let t = LoopTest::start("clean", "[loop]\ndefaultMaxIterations = 1\n");
    let name = t.execute("Three steps", THREE_SECTIONS);
    let end = t.wait_end(&name);
    assert_eq!(end["terminationReason"], json!("max_iterations"), "{end}{}", t.report());
    let row = t.loop_row(&name);
    assert_eq!(row["sectionIndex"], json!(1), "the next section is current: {row}");
    assert_eq!(
        t.strings("SELECT status FROM section_plans WHERE loop_name = ?1 ORDER BY section_index", &name),
        ["completed", "pending", "pending"]
    );
    t.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    let prompt = t.wait_state_file("prompt-3");
    common::assert_contains(&prompt, "Step two");
    assert!(!prompt.contains("## Step one"), "the finished section is not sent again: {prompt}");
}

/// `loop.defaultMaxIterations = 2` with an auditor that always finds a bug: the second dirty
/// audit would start iteration 3, so the loop ends `max_iterations` (errored).
#[test]
fn the_iteration_cap_ends_a_loop_whose_audits_stay_dirty() {
    let t = LoopTest::start("alwaysbug", "[loop]\ndefaultMaxIterations = 2\n");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("errored"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("max_iterations"));
    assert_eq!((end["iteration"].clone(), end["maxIterations"].clone()), (json!(2), json!(2)), "{end}");
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "continue auditor-handoff auditing->coding it=1",
            "rotate coder-handoff coding->auditing it=2",
            "terminate max_iterations auditing->- it=2 status=errored reason=max_iterations",
        ],
    );
    t.assert_notifications_match(&name);
    assert_eq!(t.roles(), ["coder", "auditor", "coder", "auditor"]);
    // The finding stays (the loop did not complete); nothing is left pending.
    assert_eq!(t.count("SELECT count(*) FROM review_findings WHERE loop_name = ?1 AND severity = 'bug'", &name), 1);
    assert_eq!(t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1 AND status = 'pending'", &name), 0);
    let branch = format!("forge/{name}");
    assert_eq!(t.log(&branch)[0], format!("loop: {name} max_iterations after 2 iterations"));
}

/// A worktree removed under a running loop ends the loop at the turn's end,
/// `missing_worktree_dir`, without another turn (before, each turn failed to start in the
/// missing folder and used up the error budget, blaming the agent program); a restart
/// re-attaches the worktree from the loop's branch and the loop completes.
#[test]
fn a_worktree_removed_under_the_loop_ends_it_naming_that() {
    let t = LoopTest::start("block", "");
    t.signal("hold-coder");
    let name = t.execute("Plain plan", UNSECTIONED);
    common::wait_for(LOOP_WAIT, || t.state_file("turns").filter(|s| s.contains("coder")))
        .expect("the coder is working");
    let row = t.loop_row(&name);
    let worktree = std::path::PathBuf::from(row["worktreeDir"].as_str().unwrap());
    std::fs::remove_dir_all(&worktree).unwrap();
    t.signal("coder-release");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("errored"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("missing_worktree_dir"), "{end}");
    assert_eq!(t.turns().len(), 1, "no turn after the worktree was gone: {:?}", t.turns());
    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    assert!(out.text.starts_with("Restarted loop"), "{}", out.text);
    assert!(worktree.is_dir(), "re-attached from the branch");
    t.signal("release");
    let end = t.wait_status(&name, "completed", |p| p["status"] == json!("completed"));
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
}
