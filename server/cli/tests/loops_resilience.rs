//! Loop resilience end to end (docs/agents.md "Stalls", "Sessions and `{resume}`", "Usage",
//! "Models"): the stall watchdog and restarting a stalled loop, standby session reuse and
//! its release, usage reporting, and the model chain with the auditor's provider-limit
//! fallback. The agent is `tests/agents/resilience.sh`, which logs the `{session}`,
//! `{resume}` and `{model}` it was started with.

mod common;
mod loop_support;
mod resilience_support;

use common::assert_contains;
use loop_support::*;
use resilience_support::*;
use serde_json::json;

/// The watchdog settings of the stall tests.
const STALLS: &str = "[loop]\nbusyStallTimeoutMs = 300\nmaxConsecutiveStalls = 5\n";

/// A turn that hands off and then stays busy is stopped and its handoff discarded (a turn
/// ends after its handoff); its nudge says so (review YU: the plain continue nudge made the
/// agent answer that it had handed off already, and the loop end as handoff_missing).
#[test]
fn a_turn_busy_after_its_handoff_is_told_the_handoff_was_discarded() {
    let t = resilience_support::start("handhang", STALLS, &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let prompts = prompt_files(&t, &name);
    assert_eq!(prompts[1].2, DISCARDED_HANDOFF_NUDGE, "{}", t.report());
    assert_eq!(t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1 AND status = 'discarded'", &name), 1);
}

/// Starts a non-sectioned loop whose agent hangs, and waits until the watchdog ends it.
fn stalled_loop() -> (LoopTest, String) {
    let t = resilience_support::start("hang", STALLS, &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("stalled"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("stall_timeout"), "{end}");
    (t, name)
}

/// A turn that prints nothing and calls no tool for `busyStallTimeoutMs` is killed and its
/// session nudged to continue (the same session, resumed, with the one-line continue
/// prompt); the 5th consecutive stall ends the loop with `stall_timeout`.
#[test]
fn a_hanging_turn_is_aborted_and_nudged_until_the_fifth_stall_ends_the_loop() {
    let (t, name) = stalled_loop();
    let row = resilience_row(&t, &name);
    assert_eq!(
        (&row["status"], &row["terminationReason"], &row["stallCount"], &row["phase"], &row["iteration"]),
        (&json!("stalled"), &json!("stall_timeout"), &json!(5), &json!("coding"), &json!(1)),
        "{row}{}",
        t.report()
    );
    assert!(row["standby"].is_null(), "{row}");
    t.assert_transitions(&name, &["terminate stall_timeout coding->- it=1 status=stalled reason=stall_timeout"]);
    t.assert_notifications_match(&name);

    // The server started 5 turns of the one session: the phase prompt, then 4 nudges.
    let session = t.loop_row(&name)["sessionId"].as_str().unwrap().to_string();
    let prompts = prompt_files(&t, &name);
    let turns: Vec<(String, u32)> = prompts.iter().map(|p| (p.0.clone(), p.1)).collect();
    assert_eq!(turns, (1..=5).map(|k| (session.clone(), k)).collect::<Vec<_>>(), "{}", t.report());
    assert_contains(&prompts[0].2, "Append a line to work.txt.");
    for p in &prompts[1..] {
        assert_eq!(p.2, CONTINUE_NUDGE, "turn {} of {}", p.1, p.0);
    }
    // ... and the agent ran each of them: the same {session}, resumed from the 2nd turn on.
    let args = arg_turns(&t);
    assert_eq!(
        labelled(&args),
        ["coder S1 - -", "coder S1 S1 -", "coder S1 S1 -", "coder S1 S1 -", "coder S1 S1 -"],
        "{}",
        t.report()
    );
    assert_eq!(args[0].session, session);
    for k in 2..=5 {
        assert_eq!(t.wait_state_file(&format!("prompt-{k}")), CONTINUE_NUDGE, "the agent's prompt of turn {k}");
    }
    // Every hanging process (the agent and its sleep) was killed.
    let mut pids: Vec<u32> = t.turns().iter().map(|x| x.2).collect();
    pids.extend(t.wait_state_file("sleepers").lines().map(|l| l.trim().parse::<u32>().expect("sleeper pid")));
    assert!(pids.len() >= 6, "agent and sleep pids: {pids:?}");
    assert_all_dead(&t, &pids);
    // Nothing was handed off; the stalled loop keeps its worktree and can be restarted.
    assert_eq!(t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1", &name), 0);
    assert!(std::path::Path::new(t.loop_row(&name)["worktreeDir"].as_str().unwrap()).is_dir());
    let status = t.client.tool_ok("loop-status", json!({ "name": name }));
    assert_contains(&status.text, &format!("Restart: available with loop-status name={name} restart=true"));
}

/// A stalled loop's `Files changed:` counts what its hung turns left: no turn of it ever
/// ended, so before, the loop ended with no count at all.
#[test]
fn a_stalled_loop_counts_what_its_hung_turns_left() {
    let t = resilience_support::start("hang", STALLS, &[]);
    t.signal("hang-writes");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("stalled"), "{end}{}", t.report());
    let r = common::wait_for(LOOP_WAIT, || {
        let r = t.client.tool_ok("loop-status", json!({ "name": name }));
        r.data["filesChanged"].is_object().then_some(r)
    })
    .unwrap_or_else(|| panic!("no count of the stalled loop{}", t.report()));
    assert_eq!(r.data["filesChanged"], json!({ "files": 5, "added": 5, "deleted": 0 }), "{}", r.data);
    assert_contains(&r.text, "  Files changed: 5 (+5/-0 lines)");
}

/// Output at a turn's start is not progress: a coder that prints a line at once (as agent
/// CLIs print their start events) and then hangs is nudged, and the 5th consecutive stall
/// still ends the loop (output later in a turn, the model working, does reset the count). Before, each nudged turn's first line reset the count, and the loop
/// was nudged forever.
#[test]
fn a_turn_that_prints_at_its_start_and_hangs_still_ends_stalled() {
    // A busy timeout long enough that the line printed at once falls in the turn's start
    // grace (half of it) on a loaded machine too.
    let t =
        resilience_support::start("starthang", "[loop]\nbusyStallTimeoutMs = 2000\nmaxConsecutiveStalls = 5\n", &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("stalled"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("stall_timeout"), "{end}");
    assert_eq!(resilience_row(&t, &name)["stallCount"], json!(5), "{}", t.report());
    assert_eq!(prompt_files(&t, &name).len(), 5, "the phase prompt and 4 nudges{}", t.report());
}

/// Listing the tools is not progress: an agent CLI's MCP server asks for them as the CLI
/// starts, whether or not its model ever answers; a turn that does only that and hangs is
/// nudged, and the 5th consecutive stall ends the loop. Before, the listing counted as a
/// tool call of the session and every preset's hung loop was nudged for ever (a review).
#[test]
fn a_turn_that_only_lists_the_tools_and_hangs_still_ends_stalled() {
    let t = resilience_support::start("listhang", "[loop]\nbusyStallTimeoutMs = 2000\nmaxConsecutiveStalls = 3\n", &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("stalled"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("stall_timeout"), "{end}");
    assert_eq!(resilience_row(&t, &name)["stallCount"], json!(3), "{}", t.report());
}

/// Output resets the busy watchdog: a coder that prints a line every 100 ms for ~1.5 s (1.5
/// times `busyStallTimeoutMs`) before it hands off is never stalled. (The timeout leaves 10
/// missed lines of slack: a loaded machine may delay a line, and a stall here would be
/// the machine, not the watchdog.)
#[test]
fn a_turn_that_keeps_printing_is_not_stalled() {
    let t = resilience_support::start("chatty", "[loop]\nbusyStallTimeoutMs = 1000\nmaxConsecutiveStalls = 5\n", &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(resilience_row(&t, &name)["stallCount"], json!(0), "{}", t.report());
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
    // One turn per role, no continue nudge.
    assert_eq!(labelled(&arg_turns(&t)), ["coder S1 - -", "auditor S2 - -"], "{}", t.report());
    assert!(prompt_files(&t, &name).iter().all(|p| p.2 != CONTINUE_NUDGE));
    let ms = |f: &str| t.wait_state_file(f).trim().parse::<i64>().expect("epoch ms");
    let worked = ms("chatty-end") - ms("chatty-start");
    assert!(worked >= 1400, "the coder worked {worked} ms, longer than the 500 ms timeout");
}

/// `loop-status {name, restart: true}` of the stalled loop starts a fresh session at
/// iteration 1 with the stall count reset; with the agent behaving, the loop completes.
#[test]
fn restarting_a_stalled_loop_resumes_it_in_a_fresh_session() {
    let (t, name) = stalled_loop();
    let stalled_session = t.loop_row(&name)["sessionId"].as_str().unwrap().to_string();
    t.signal("behave");
    // A roomier watchdog for the restarted runner (the behaving agent also prints while it
    // works, so either setting keeps it alive).
    change_config(&t, json!({ "loop": { "busyStallTimeoutMs": 10000 } }));
    t.client.tool_ok("loop-status", json!({}));

    let mark = t.client.mark();
    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    assert_contains(&out.text, &format!("Restarted loop \"{name}\""));
    assert_contains(&out.text, "Continuing from iteration: 1");
    assert_eq!((&out.data["iteration"], &out.data["phase"]), (&json!(1), &json!("coding")), "{}", out.text);
    let session = out.data["sessionId"].as_str().unwrap().to_string();
    assert_ne!(session, stalled_session, "a restart starts a fresh session");
    let resumed = t.wait_status_since(mark, &name, "the restart's session", |p| p["sessionId"] == json!(session));
    assert_eq!((&resumed["status"], &resumed["iteration"]), (&json!("running"), &json!(1)), "{resumed}");
    assert!(resumed["terminationReason"].is_null() && resumed["completedAt"].is_null(), "{resumed}");

    let end = t.wait_status_since(mark, &name, "a final status", |p| p["status"] != json!("running"));
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    // A restart in the same phase logs no transition of its own.
    t.assert_transitions(
        &name,
        &[
            "terminate stall_timeout coding->- it=1 status=stalled reason=stall_timeout",
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
    let row = resilience_row(&t, &name);
    assert_eq!(row["stallCount"], json!(0), "the restart reset the stall count: {row}{}", t.report());
    // The 5 stalled turns, then a fresh coder (the restart's session, the full prompt) and a
    // fresh auditor.
    let args = arg_turns(&t);
    assert_eq!(
        labelled(&args),
        [
            "coder S1 - -",
            "coder S1 S1 -",
            "coder S1 S1 -",
            "coder S1 S1 -",
            "coder S1 S1 -",
            "coder S2 - -",
            "auditor S3 - -"
        ],
        "{}",
        t.report()
    );
    assert_eq!(args[5].session, session);
    assert_contains(&t.wait_state_file("prompt-6"), "Append a line to work.txt.");
}

/// Within a section the loop resumes its standby: the coder after a dirty audit (same
/// `{session}`, `{resume}` set, the short follow-up prompt) and the auditor for the next
/// audit. A clean section audit releases the standby: the next section starts with fresh
/// sessions of both roles and `standby_session_id` is NULL right after advancing.
#[test]
fn a_dirty_audit_resumes_the_coder_and_a_clean_section_audit_releases_the_standby() {
    let t = resilience_support::start("fixonce", "", &[]);
    t.signal("hold-s1");
    let name = t.execute("Two halves", TWO_SECTIONS);

    // Section 2's first coder turn waits: look at the row right after the advance.
    let coder2 = t.wait_state_file("coder-s1-waiting").trim().to_string();
    let row = resilience_row(&t, &name);
    assert_eq!(row["session"], json!(coder2), "{row}");
    assert!(row["standby"].is_null(), "a clean section audit released the standby: {row}{}", t.report());
    assert_eq!((&row["phase"], &row["iteration"]), (&json!("coding"), &json!(3)), "{row}");
    let before = arg_turns(&t);
    assert_eq!(
        labelled(&before),
        ["coder S1 - -", "auditor S2 - -", "coder S1 S1 -", "auditor S2 S2 -", "coder S3 - -"],
        "{}",
        t.report()
    );
    assert_eq!(before[2].resume, before[0].session, "the resumed coder's {{resume}} is its own session");
    assert_eq!(before[4].session, coder2);
    // Only the current session is left (the section's coder and auditor are gone).
    assert_eq!(
        t.strings("SELECT session_id FROM loop_sessions WHERE loop_name = ?1 AND status != 'deleted'", &name),
        std::slice::from_ref(&coder2)
    );
    t.signal("go-s1");

    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(
        labelled(&arg_turns(&t)),
        [
            "coder S1 - -",
            "auditor S2 - -",
            "coder S1 S1 -",
            "auditor S2 S2 -",
            "coder S3 - -",
            "auditor S4 - -",
            "coder S3 S3 -",
            "auditor S4 S4 -"
        ],
        "{}",
        t.report()
    );
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1 s=0",
            "rotate auditor-handoff auditing->coding it=1 s=0",
            "rotate coder-handoff coding->auditing it=2 s=0",
            "advance-section auditor-handoff auditing->coding it=2 s=0",
            "rotate coder-handoff coding->auditing it=3 s=1",
            "rotate auditor-handoff auditing->coding it=3 s=1",
            "rotate coder-handoff coding->auditing it=4 s=1",
            "terminate completed auditing->- it=4 s=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
    // Resumed sessions get the follow-up prompts; fresh ones the full prompts.
    let prompt = |k: u32| t.wait_state_file(&format!("prompt-{k}"));
    const CODER_FOLLOW_UP: &str = "The auditor reviewed your last handoff";
    const AUDIT_FOLLOW_UP: &str = "The coder has worked on the findings you left open";
    for (k, follow_up, section) in [(1, false, "First half"), (5, false, "Second half")] {
        let p = prompt(k);
        assert_eq!(p.contains(CODER_FOLLOW_UP), follow_up, "prompt {k}: {p}");
        assert_contains(&p, section);
    }
    for k in [3, 7] {
        assert_contains(&prompt(k), CODER_FOLLOW_UP);
        assert_contains(&prompt(k), "work.txt is still wrong");
    }
    for (k, follow_up) in [(2, false), (4, true), (6, false), (8, true)] {
        assert_eq!(prompt(k).contains(AUDIT_FOLLOW_UP), follow_up, "prompt {k}: {}", prompt(k));
    }
    assert!(resilience_row(&t, &name)["standby"].is_null());
}

/// Recurrence escalation: a bug still open after 3 consecutive dirty audits means the next
/// coder session is fresh (and so is the auditor after it), with the recurring findings in
/// its prompt.
#[test]
fn a_bug_open_after_three_dirty_audits_forces_fresh_sessions() {
    let t = resilience_support::start("recur", "[loop]\ndefaultMaxIterations = 4\n", &[]);
    let name = t.execute("One step", ONE_SECTION);
    let end = t.wait_end(&name);
    assert_eq!(end["terminationReason"], json!("max_iterations"), "{end}{}", t.report());
    assert_eq!(
        labelled(&arg_turns(&t)),
        [
            "coder S1 - -",
            "auditor S2 - -",
            "coder S1 S1 -",
            "auditor S2 S2 -",
            "coder S1 S1 -",
            "auditor S2 S2 -",
            "coder S3 - -",
            "auditor S4 - -"
        ],
        "{}",
        t.report()
    );
    let p7 = t.wait_state_file("prompt-7");
    assert!(!p7.contains("The auditor reviewed your last handoff"), "a fresh coder gets the full prompt: {p7}");
    assert_contains(&p7, "## Recurring findings");
    assert_contains(&p7, "work.txt is still wrong");
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1 s=0",
            "rotate auditor-handoff auditing->coding it=1 s=0",
            "rotate coder-handoff coding->auditing it=2 s=0",
            "rotate auditor-handoff auditing->coding it=2 s=0",
            "rotate coder-handoff coding->auditing it=3 s=0",
            "rotate auditor-handoff auditing->coding it=3 s=0",
            "rotate coder-handoff coding->auditing it=4 s=0",
            "terminate max_iterations auditing->- it=4 s=0 status=errored reason=max_iterations",
        ],
    );
}

/// `loop.sessionReuse.coderContextPercent = 0` disables coder reuse: after a dirty audit the
/// coder is a fresh session, while the auditor is still resumed.
#[test]
fn coder_context_percent_zero_disables_coder_reuse() {
    let t = resilience_support::start("fixonce", "[loop.sessionReuse]\ncoderContextPercent = 0\n", &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(
        labelled(&arg_turns(&t)),
        ["coder S1 - -", "auditor S2 - -", "coder S3 - -", "auditor S2 S2 -"],
        "{}",
        t.report()
    );
    assert!(!t.wait_state_file("prompt-3").contains("The auditor reviewed your last handoff"));
}

/// Usage of one model (the tests' sums) in the `loop-status` format.
#[derive(Debug, Clone, Copy, Default)]
struct Use {
    cost: f64,
    /// input, output, reasoning, cache read, cache write
    tokens: [u64; 5],
    messages: u64,
}

impl Use {
    fn times(self, k: u64) -> Use {
        Use { cost: self.cost * k as f64, tokens: self.tokens.map(|x| x * k), messages: self.messages * k }
    }
    fn plus(self, o: Use) -> Use {
        let mut tokens = self.tokens;
        for (a, b) in tokens.iter_mut().zip(o.tokens) {
            *a += b;
        }
        Use { cost: self.cost + o.cost, tokens, messages: self.messages + o.messages }
    }
    /// `$0.0350 | Tokens: 3.0k in / 600 out / 100 reasoning / 600 cache read / 200 cache write`
    fn line(&self) -> String {
        let k = |n: u64| if n < 1000 { n.to_string() } else { format!("{:.1}k", n as f64 / 1000.0) };
        let t = self.tokens;
        format!(
            "${:.4} | Tokens: {} in / {} out / {} reasoning / {} cache read / {} cache write",
            self.cost,
            k(t[0]),
            k(t[1]),
            k(t[2]),
            k(t[3]),
            k(t[4])
        )
    }
}

/// The agent reports usage to `FORGE_USAGE_FILE` (resilience.sh, FORGE_TEST_USAGE=1); the
/// totals per session and model land in `loop_session_usage` (a resumed session's file is
/// counted once), and `loop-status <name>` shows the total, per model and per role.
#[test]
fn reported_usage_is_stored_per_session_and_model_and_shown_by_loop_status() {
    let models = "executionModel = \"a/x\"\nauditorModel = \"b/y\"\n";
    let t = resilience_support::start("fixonce", models, &[("FORGE_TEST_USAGE", "1")]);
    let name = t.execute("One step", ONE_SECTION);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    // Two turns per session: coder, dirty audit, resumed coder, resumed clean audit.
    let args = arg_turns(&t);
    assert_eq!(
        labelled(&args),
        ["coder S1 - a/x", "auditor S2 - b/y", "coder S1 S1 a/x", "auditor S2 S2 b/y"],
        "{}",
        t.report()
    );
    let (coder, auditor) = (args[0].session.clone(), args[1].session.clone());

    // What resilience.sh reports per turn.
    let coder_ax = Use { cost: 0.0125, tokens: [1000, 200, 50, 300, 100], messages: 1 };
    let coder_by = Use { cost: 0.005, tokens: [500, 100, 0, 0, 0], messages: 1 };
    let auditor_by = Use { cost: 0.02, tokens: [2000, 40, 0, 1000, 0], messages: 1 }.plus(Use {
        cost: 0.001,
        tokens: [10, 5, 0, 0, 0],
        messages: 1,
    }); // no model: the auditor's
    let (c_ax, c_by, a_by) = (coder_ax.times(2), coder_by.times(2), auditor_by.times(2));

    let rows = usage_rows(&t, &name);
    let got: Vec<(String, String, String, Vec<i64>)> =
        rows.iter().map(|r| (r.session.clone(), r.model.clone(), r.role.clone(), r.counts.to_vec())).collect();
    let want_counts = |u: Use| {
        let mut v: Vec<i64> = u.tokens.iter().map(|&x| x as i64).collect();
        v.push(u.messages as i64);
        v
    };
    assert_eq!(
        got,
        [
            (auditor.clone(), "b/y".to_string(), "auditor".to_string(), want_counts(a_by)),
            (coder.clone(), "a/x".to_string(), "code".to_string(), want_counts(c_ax)),
            (coder.clone(), "b/y".to_string(), "code".to_string(), want_counts(c_by)),
        ],
        "{}",
        t.report()
    );
    for (r, u) in rows.iter().zip([a_by, c_ax, c_by]) {
        assert!((r.cost - u.cost).abs() < 1e-9, "cost of {r:?}: want {}", u.cost);
    }
    // The session usage files the server keeps are private: 0600 in a 0700 directory.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let usage_dir = t.sb.data_dir.join("usage");
    assert_eq!(mode(&usage_dir), 0o700, "{}", usage_dir.display());
    let files: Vec<_> = std::fs::read_dir(&usage_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(!files.is_empty(), "no usage file in {}", usage_dir.display());
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }

    let text = t.client.tool_ok("loop-status", json!({ "name": name })).text;
    let total = c_ax.plus(c_by).plus(a_by);
    let expected = format!(
        "Cumulative Usage:\n  Total Cost: {}\n  Per-model usage:\n    a/x: {}\n    b/y: {}\n  Per-role usage:\n    code: {}\n    auditor: {}",
        total.line(),
        c_ax.line(),
        c_by.plus(a_by).line(),
        c_ax.plus(c_by).line(),
        a_by.line()
    );
    assert_contains(&text, &expected);
    // The hand-computed anchors of the same numbers.
    assert_contains(
        &text,
        "Total Cost: $0.0770 | Tokens: 7.0k in / 690 out / 100 reasoning / 2.6k cache read / 200 cache write",
    );
    assert_contains(
        &text,
        "    code: $0.0350 | Tokens: 3.0k in / 600 out / 100 reasoning / 600 cache read / 200 cache write",
    );
    assert_contains(
        &text,
        "    auditor: $0.0420 | Tokens: 4.0k in / 90 out / 0 reasoning / 2.0k cache read / 0 cache write",
    );
}

/// The model settings of the model tests.
const MODELS: &str = "executionModel = \"a/x\"\nauditorModel = \"b/y\"\nauditorFallbackModels = [\"c/z\"]\n";

/// `{model}` is `executionModel` for the coder and `auditorModel` for the auditor; an
/// auditor turn failing with a provider limit moves the auditor to the next model of the
/// chain (`auditorFallbackModels`) and resends the audit prompt in the same session.
#[test]
fn a_provider_limit_moves_the_auditor_to_its_fallback_model() {
    let t = resilience_support::start("limit", MODELS, &[]);
    std::fs::write(t.state.join("limited"), "b/y\n").expect("write limited");
    t.signal("hold-audit");
    let name = t.execute("Plain plan", UNSECTIONED);
    // While the audit runs again on the fallback model: the chain index moved on, the
    // session is the same.
    assert_eq!(t.wait_state_file("auditor-waiting").trim(), "c/z");
    let row = resilience_row(&t, &name);
    assert_eq!((&row["fallbackIndex"], &row["phase"]), (&json!(1), &json!("auditing")), "{row}{}", t.report());
    assert_eq!(row["session"], json!(arg_turns(&t)[1].session), "{row}");
    t.signal("go-audit");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(labelled(&arg_turns(&t)), ["coder S1 - a/x", "auditor S2 - b/y", "auditor S2 S2 c/z"], "{}", t.report());
    // The same audit prompt, sent again.
    assert_eq!(t.wait_state_file("prompt-3"), t.wait_state_file("prompt-2"));
    let row = resilience_row(&t, &name);
    assert_eq!(row["fallbackIndex"], json!(1), "{row}");
    assert_eq!(t.loop_row(&name)["errorCount"], json!(0), "a provider limit is not an assistant error");
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
}

/// With no fallback model left the provider limit ends the loop (`provider_limit: ...`).
#[test]
fn a_provider_limit_without_a_fallback_left_ends_the_loop() {
    let t = resilience_support::start("limit", MODELS, &[]);
    std::fs::write(t.state.join("limited"), "b/y\nc/z\n").expect("write limited");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("errored"), "{end}{}", t.report());
    let reason = end["terminationReason"].as_str().unwrap_or_default().to_string();
    assert!(reason.starts_with("provider_limit"), "{end}");
    assert_contains(&reason, "usage limit reached for c/z");
    assert_eq!(labelled(&arg_turns(&t)), ["coder S1 - a/x", "auditor S2 - b/y", "auditor S2 S2 c/z"], "{}", t.report());
    assert_eq!(resilience_row(&t, &name)["fallbackIndex"], json!(1));
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate provider_limit auditing->- it=1 status=errored reason=provider_limit",
        ],
    );
    t.assert_notifications_match(&name);
}

/// The coder has no fallback chain: a provider limit in coding ends the loop at once.
#[test]
fn a_provider_limit_of_the_coder_ends_the_loop() {
    let t = resilience_support::start("coderlimit", MODELS, &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("errored"), "{end}{}", t.report());
    let reason = end["terminationReason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("provider_limit"), "{end}");
    assert_contains(reason, "usage limit reached for a/x");
    assert_eq!(labelled(&arg_turns(&t)), ["coder S1 - a/x"], "{}", t.report());
    assert_eq!(resilience_row(&t, &name)["fallbackIndex"], json!(0));
    t.assert_transitions(&name, &["terminate provider_limit coding->- it=1 status=errored reason=provider_limit"]);
}

/// After a model error (an assistant error whose message names the model) later turns get
/// an empty `{model}` (the agent's default) until a successful pass clears the mark.
#[test]
fn after_a_model_error_later_turns_get_the_default_model() {
    let t = resilience_support::start("modelerr", MODELS, &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    // The failed coder turn still rotates to audit (with the model marked failed); the
    // auditor's handoff is a successful pass, so the next turns use the configured models.
    assert_eq!(
        labelled(&arg_turns(&t)),
        ["coder S1 - a/x", "auditor S2 - -", "coder S1 S1 a/x", "auditor S2 S2 b/y"],
        "{}",
        t.report()
    );
    assert_eq!(resilience_row(&t, &name)["modelFailed"], json!(0));
    t.assert_transitions(
        &name,
        &[
            "rotate coder-error coding->auditing it=1 reason=assistant error",
            "continue auditor-handoff auditing->coding it=1",
            "rotate coder-handoff coding->auditing it=2",
            "terminate completed auditing->- it=2 status=completed reason=completed",
        ],
    );
}

/// A stalled turn that was killed has what its CLI printed recorded before the nudge starts
/// the next turn: a Claude Code session's next turn resumes the conversation by the id the
/// killed turn printed (`--resume <id>`) instead of starting it again under the same
/// `--session-id`, which Claude Code refuses ("already in use"). Before, a killed turn
/// recorded nothing. The agent is a stand-in for `claude` that prints its session id and
/// hangs.
#[test]
fn a_killed_turns_cli_session_is_resumed_by_the_nudge() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("claude");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"$*\" >> \"$FORGE_TEST_STATE/claude-args\"\ncat > /dev/null\n\
         echo '{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"11111111-2222-4333-8444-555555555555\"}'\n\
         exec sleep 60\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = format!(
        "{STALLS}\n[agent]\npreset = \"claude\"\ncommand = [{:?}]\n\n{}",
        fake.display().to_string(),
        common::sandbox_toml()
    );
    let t = LoopTest::launch(&config, "none", &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let lines = loop {
        let text = t.state_file("claude-args").unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= 2 {
            break lines;
        }
        assert!(std::time::Instant::now() < deadline, "no second turn: {lines:?}{}", t.report());
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!lines[0].contains("--resume"), "{lines:?}");
    assert!(lines[1].contains("--resume 11111111-2222-4333-8444-555555555555"), "{lines:?}");
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
}
