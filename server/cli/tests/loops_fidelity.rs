//! Seed rules of issue 16 over the real binary: attempt checkpoint references, the history
//! document, loop-status details, handoff revalidation, caller-chosen branches, variants,
//! aborted turns, busy sessions and the paths nothing else exercised.

mod common;
mod loop_support;

use common::{assert_contains, git};
use loop_support::*;
use serde_json::{json, Value};

/// Every attempt records a snapshot commit kept by a ref, the previous checkpoint of its
/// scope (base commit, then the previous section's checkpoint, then the previous attempt's
/// snapshot) and a diff summary with +/- counts; review-read attempts returns them; the
/// branch itself gets no snapshot commits.
#[test]
fn attempts_carry_snapshot_refs_previous_checkpoint_and_diff_summary() {
    let t = LoopTest::start("finding", "");
    let name = t.execute("Two halves", TWO_SECTIONS);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let out = t.client.tool_ok("review-read", json!({ "attempts": true, "loopName": name, "limit": 100 }));
    let attempts: Vec<Value> = out.data["attempts"].as_array().expect("attempts").clone();
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    let base = t.strings("SELECT base_commit FROM loops WHERE loop_name = ?1", &name)[0].clone();
    let cp0 = t
        .strings("SELECT checkpoint_commit FROM section_plans WHERE loop_name = ?1 AND section_index = 0", &name)[0]
        .clone();
    let expected_prev = [base.clone(), cp0, attempts[1]["snapshotCommit"].as_str().unwrap_or("?").to_string()];
    let expected_ref = [
        format!("refs/forge/{name}/attempts/section-0-1"),
        format!("refs/forge/{name}/attempts/section-1-1"),
        format!("refs/forge/{name}/attempts/section-1-2"),
    ];
    for (i, a) in attempts.iter().enumerate() {
        let commit = a["snapshotCommit"].as_str().unwrap_or_else(|| panic!("snapshotCommit of {a}"));
        assert_eq!(a["snapshotRef"], json!(expected_ref[i]), "{a}");
        assert_eq!(git(&t.repo.path, &["rev-parse", &expected_ref[i]]).trim(), commit, "the ref keeps the snapshot");
        assert_eq!(a["previousCommit"], json!(expected_prev[i]), "attempt {i}: {a}");
        let diff = a["diffSummary"].as_str().unwrap_or_else(|| panic!("diffSummary of {a}"));
        let line = if i == 0 { "A work.txt +1 -0" } else { "M work.txt +1 -0" };
        assert_eq!(diff, format!("1 file changed, +1 -0\n{line}"), "attempt {i}");
        // The snapshot holds what the coder wrote, on top of the worktree's HEAD.
        let text = git(&t.repo.path, &["show", &format!("{commit}:work.txt")]);
        assert_eq!(text.lines().count(), i + 1, "{text}");
    }
    assert_contains(&out.text, "\"snapshotRef\"");
    let log = t.log(&format!("forge/{name}")).join("\n");
    assert!(!log.contains("forge attempt"), "snapshots never land on the branch: {log}");
}

/// `forge://loop/<name>/history.md` shows every transition (event, from → to, time) and
/// the plan amendment (rationale, sections before and after), in time order; the status
/// document links to it; an unknown loop is 1002.
#[test]
fn the_history_document_shows_transitions_and_amendments() {
    let t = LoopTest::start("adjust", "");
    let name = t.execute("One step", ONE_SECTION);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let uri = format!("forge://loop/{name}/history.md");
    let doc = t.client.content(&uri).expect("history document");
    assert!(doc.starts_with(&format!("# History of loop {name}\n\n")), "{doc}");
    let rows = t.transitions(&name);
    assert_contains(&doc, &format!("{} transitions, 1 plan amendment.", rows.len()));
    let mut last = 0;
    for r in &rows {
        let head = format!("{} · {}: {} → {}", forge_time(r.at), r.event, r.from, r.to.as_deref().unwrap_or("end"));
        let at = doc.find(&head).unwrap_or_else(|| panic!("{head:?} missing in\n{doc}"));
        assert!(at > last, "transitions in order: {head}");
        last = at;
    }
    assert_contains(&doc, "plan amendment during the audit of section 1\n\nRationale: the plan forgot a step\n");
    assert_contains(&doc, "**Before** (0 sections):\n\n- (none)\n");
    assert_contains(
        &doc,
        "**After** (1 section):\n\n- 2. Appended section\n  > Append the word appended to work.txt.\n",
    );
    // The amendment was made during the first audit: after the first transition, before the second.
    let amend = doc.find("plan amendment during").unwrap();
    let first = doc.find("coder-handoff: coding → auditing").unwrap();
    let second = doc.find("auditor-handoff: auditing → coding").unwrap();
    assert!(first < amend && amend < second, "{doc}");
    let status = t.client.content(&format!("forge://loop/{name}/status.md")).expect("status document");
    assert_contains(&status, &format!("loop/{name}/history.md)"));
    let e = t.client.content("forge://loop/no-such-loop/history.md").expect_err("unknown loop");
    assert_eq!(e.code, 1002, "{e}");
}

/// `iso_millis` as the documents print it (UTC, milliseconds).
fn forge_time(ms: i64) -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{}", ms / 1000), "+%Y-%m-%dT%H:%M:%S"])
        .output()
        .expect("date");
    format!("{}.{:03}Z", String::from_utf8_lossy(&out.stdout).trim(), ms % 1000)
}

/// The `.forge/config.toml` of [`LoopTest::start`] with `extra` appended.
fn config(extra: &str) -> String {
    format!(
        "[agent]\ncommand = [{:?}, \"{{session}}\"]\n\n[sandbox]\nenabled = false\n\n{extra}\n",
        agent_script().display().to_string()
    )
}

/// loop-status: while the auditor's turn runs, the detail counts the stored coder usage
/// and the live auditor usage once each; after the loop ends, `Last Audit:` renders the
/// auditor's record with the verdict, and the list shows the completed loop's usage.
#[test]
fn loop_status_renders_the_last_audit_and_usage_merged_without_double_counting() {
    let t = LoopTest::launch(&config(""), "block", &[("FORGE_TEST_USAGE", "1")]);
    let name = t.execute("One step", ONE_SECTION);
    t.wait_state_file("auditor.pid");
    // `Session Output:` (FORGE-REFERENCE §6): the coder's reply, and its one line in work.txt
    // (counted beside the loop after the coder's turn).
    let live = common::wait_for(LOOP_WAIT, || {
        let r = t.client.tool_ok("loop-status", json!({ "name": name }));
        (!r.data["filesChanged"].is_null()).then_some(r)
    })
    .unwrap_or_else(|| panic!("no count of changed files{}", t.report()));
    assert_eq!(live.data["filesChanged"], json!({ "files": 1, "added": 1, "deleted": 0 }), "{}", live.data);
    assert_eq!(
        live.data["recentReplies"],
        json!([{ "role": "coder", "text": "Handoff recorded — end your turn now; make no further changes. turn 1 done" }]),
        "{}",
        live.data
    );
    let live = live.text;
    assert_contains(
        &live,
        "Branch: forge/one-step\n\nSession Output:\n  Recent Activity:\n  [assistant] Handoff recorded — end your turn now; make no further changes. turn 1 done\n  Files changed: 1 (+1/-0 lines)\n\nRestart: available with force=true",
    );
    assert_contains(&live, "Total Cost: $0.0200 | Tokens: 2.0k in / 20 out");
    assert_contains(&live, "    code: $0.0100");
    assert_contains(&live, "    auditor: $0.0100");
    let list = t.client.tool_ok("loop-status", json!({})).text;
    assert_contains(&list, "   Usage: $0.0200 | Tokens: 2.0k in / 20 out");
    // The status document has the detail's lines, with no time relative to now.
    let status_uri = format!("forge://loop/{name}/status.md");
    let doc = t.client.content(&status_uri).expect("status document");
    assert!(doc.starts_with(&format!("# Loop {name}\n\nName: {name}\n")), "{doc}");
    assert_contains(
        &doc,
        "Branch: forge/one-step\n\nSession Output:\n  Recent Activity:\n  [assistant] Handoff recorded",
    );
    // The usage stored: the coder's turn (the auditor's, running, is counted from its end).
    assert_contains(&doc, "Total Cost: $0.0100 | Tokens: 1.0k in / 10 out");
    assert!(!doc.contains(" ago\n") && !doc.contains("Duration:"), "{doc}");
    assert_contains(
        &doc,
        &format!("[History: transitions and plan amendments](forge://loop/{name}/history.md)\n\n- [section 1]("),
    );
    t.signal("release");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let detail = t.client.tool_ok("loop-status", json!({ "name": name })).text;
    assert_contains(&detail, "Total Cost: $0.0200 | Tokens: 2.0k in / 20 out");
    assert_contains(&detail, "Last Audit: **Audit verdict:** clean — no blocking findings remain.");
    assert_contains(&detail, "work.txt updated");
    // Both turns' replies, after the last audit; the worktree is gone with its work on the
    // branch: the count is the one taken at the last turn's end.
    assert_eq!(detail.matches("\n  [assistant] ").count(), 2, "{detail}");
    assert_contains(&detail, "\n\nSession Output:\n  Recent Activity:\n  [assistant] Handoff recorded");
    assert_contains(&detail, "\n  Files changed: 1 (+1/-0 lines)\n\nRestart: not available (completed)");
    // The document has the detail's lines, its blocks fenced (both read again until the
    // loop's end has settled: its worktree goes, and its last count comes, after its status).
    let same = common::wait_for(LOOP_WAIT, || {
        let detail = t.client.tool_ok("loop-status", json!({ "name": name })).text;
        let doc = t.client.content(&status_uri).expect("status document");
        let body = detail.strip_prefix("Loop Status (Inactive)\n\n").expect("a stopped loop's detail");
        let (head, _) = body.split_once("\n\nLast Audit: ").unwrap_or_else(|| panic!("{body}"));
        let (_, tail) = body.split_once("\n\nSession Output:\n").expect("session output");
        let fenced = "\n\nLast Audit:\n```text\n**Audit verdict:** clean — no blocking findings remain.\n\n**Done**\n- work.txt updated\n\n**Follow-ups**\n- none\n```\n\nSession Output:\n";
        (doc.starts_with(&format!("# Loop {name}\n\n{head}{fenced}{tail}\n\n[History: "))).then_some(())
    });
    assert!(same.is_some(), "the document is not the detail: {}", t.client.content(&status_uri).unwrap());
    let list = t.client.tool_ok("loop-status", json!({})).text;
    assert!(list.starts_with("Recent Loops"), "{list}");
    assert_contains(&list, &format!("1. {name}\n   Status: completed"));
    assert_contains(&list, "   Usage: $0.0200 | Tokens: 2.0k in / 20 out");
}

/// A reply that changes nothing else of the loop (a coder that did not hand off, about to
/// be nudged) refreshes the loop's status document, which shows it (before, the document
/// was refreshed only with the loop's state, and showed the replies late).
#[test]
fn a_reply_alone_refreshes_the_status_document() {
    let t = LoopTest::start("silent", "");
    t.signal("hold-silent");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_state_file("silent-waiting");
    // What the loop's start announced has been announced.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let uri = format!("forge://loop/{name}/status.md");
    let mut mark = t.client.mark();
    t.signal("silent-go");
    let deadline = std::time::Instant::now() + LOOP_WAIT;
    let doc = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Some(_) = t.client.wait_refresh(mark, &uri, left) else {
            panic!("no refresh of {uri} showing the reply: {:?}{}", t.client.refreshed_uris(), t.report());
        };
        mark = t.client.mark();
        let doc = t.client.content(&uri).expect("status document");
        if doc.contains("[assistant] I looked at the plan") {
            break doc;
        }
    };
    // Still running: the next turn waits.
    assert!(doc.contains("\nStatus: ") && !doc.contains("\nCompleted: "), "{doc}");
    t.signal("silent-release");
    t.wait_end(&name);
}

/// The caller's title is echoed on one line without terminal escapes (review XE: it set
/// the terminal's title).
#[test]
fn the_title_is_echoed_without_escapes() {
    let t = LoopTest::start("block", "");
    let out = t
        .client
        .tool_ok("execute-plan", json!({ "title": "Ti\u{1b}]0;X\u{7}tle\u{202e} two\nlines", "plan": ONE_SECTION }));
    assert_contains(&out.text, "\nTitle: Loop: Title two lines\n");
    assert!(!out.text.contains('\u{1b}') && !out.text.contains('\u{202e}'), "{}", out.text);
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
    t.signal("release");
}

/// A cancelled loop's `Files changed:` is counted as it ends: what the stopped turn left in
/// the worktree (before, the count of its last finished turn stayed), or, with
/// `loop.cleanupWorktree`, on the branch its work was committed to as the worktree went
/// (before, that count raced the removal and was lost: review XB).
#[test]
fn a_cancelled_loop_counts_what_its_stopped_turn_left() {
    // The cleanup, and a cancel through another server process (this one's runner sees it
    // on the change feed).
    let cases = [("", false), ("[loop]\ncleanupWorktree = true\n", false), ("", true)];
    for (extra, elsewhere) in cases {
        let t = LoopTest::launch(&config(extra), "block", &[]);
        let name = t.execute("One step", ONE_SECTION);
        t.wait_state_file("auditor.pid");
        let counted = |files: u64| {
            common::wait_for(LOOP_WAIT, || {
                let r = t.client.tool_ok("loop-status", json!({ "name": name }));
                (r.data["filesChanged"]["files"] == json!(files)).then_some(r)
            })
        };
        let live = counted(1).unwrap_or_else(|| panic!("no count of the coder's turn{}", t.report()));
        // What the auditor's turn writes before it is stopped: many files, so that a count
        // of the worktree takes long enough to meet its removal.
        let wt = std::path::PathBuf::from(live.data["worktreeDir"].as_str().expect("worktreeDir"));
        for k in 0..300 {
            std::fs::write(wt.join(format!("left-{k}.txt")), "one\ntwo\n").unwrap();
        }
        if elsewhere {
            t.other_server("block", &[]).tool_ok("loop-cancel", json!({ "name": name }));
        } else {
            t.client.tool_ok("loop-cancel", json!({ "name": name }));
        }
        let end = t.wait_end(&name);
        assert_eq!(end["status"], json!("cancelled"), "{end}{}", t.report());
        let r = counted(301).unwrap_or_else(|| {
            panic!(
                "{extra:?} (elsewhere: {elsewhere}): the cancelled loop's count: {}{}",
                t.client.tool_ok("loop-status", json!({ "name": name })).data,
                t.report()
            )
        });
        assert_eq!(r.data["filesChanged"], json!({ "files": 301, "added": 601, "deleted": 0 }), "{}", r.data);
        assert_contains(&r.text, "  Files changed: 301 (+601/-0 lines)");
        assert_eq!(wt.is_dir(), extra.is_empty(), "{extra:?}: the worktree kept or removed");
        t.signal("release");
    }
}

/// A writable connection to the test's database (to plant rows the server must handle).
fn rw(t: &LoopTest) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(t.sb.db_path()).expect("open forge.db");
    c.busy_timeout(std::time::Duration::from_secs(10)).expect("busy_timeout");
    c
}

/// A pending handoff is re-validated against its role schema when the turn ends: a record
/// that no longer validates is discarded, never applied, and the turn ends as one without
/// a handoff (nudged).
#[test]
fn an_invalid_pending_handoff_is_discarded_not_applied() {
    let t = LoopTest::start("holdafter", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    common::wait_for(LOOP_WAIT, || {
        (t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1 AND status = 'pending'", &name) == 1)
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no pending handoff{}", t.report()));
    let changed = rw(&t)
        .execute(
            "UPDATE loop_handoffs SET payload = '{\"changes\":[],\"verification\":[]}' WHERE loop_name = ?1 AND status = 'pending'",
            [&name],
        )
        .expect("corrupt the record");
    assert_eq!(changed, 1);
    t.signal("coder-release");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(t.roles(), ["coder", "coder", "auditor"], "{}", t.report());
    assert_eq!(
        t.state_file("prompt-2").unwrap(),
        "You ended your turn without calling loop-handoff/loop-complete. Finish the work, then call it."
    );
    let rows = t.strings("SELECT status || ' ' || payload FROM loop_handoffs WHERE loop_name = ?1 ORDER BY id", &name);
    assert_eq!(rows[0], "discarded {\"changes\":[],\"verification\":[]}", "{rows:?}");
    assert!(rows[1].starts_with("applied ") && rows[2].starts_with("applied "), "{rows:?}");
}

/// A restart into section coding uses the continuation prompt only for bugs of the current
/// section itself: a cross-section bug (which blocks the audit) does not make it one.
#[test]
fn a_restart_counts_only_the_current_sections_bugs_for_the_continuation_prompt() {
    let t = LoopTest::start("block", "");
    let name = t.execute("Two halves", TWO_SECTIONS);
    t.wait_state_file("auditor.pid");
    t.signal("hold-coder");
    t.signal("release");
    t.wait_status(&name, "section 2 coding", |p| p["sectionIndex"] == json!(1) && p["phase"] == json!("coding"));
    t.wait_state_file("prompt-3");
    rw(&t)
        .execute(
            "INSERT INTO review_findings (project_id, loop_name, file, line, section_index, severity, description, created_at)
             SELECT project_id, loop_name, 'work.txt', 1, -1, 'bug', 'CROSS-SECTION bug', 0 FROM loops WHERE loop_name = ?1",
            [&name],
        )
        .expect("plant a cross-section bug");
    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true, "force": true }));
    assert_contains(&out.text, &format!("Restarted loop \"{name}\""));
    let prompt = t.wait_state_file("prompt-4");
    assert_contains(&prompt, "Your task: ");
    assert!(
        !prompt.contains("left the findings below open"),
        "the initial section prompt, not a continuation:\n{prompt}"
    );
    // A force restart of a loop this process runs takes the loop over: it does not end it
    // first (no shutdown row, no teardown commit, no cancelled status for the editors).
    let briefs = t.briefs(&name);
    assert!(!briefs.iter().any(|b| b.contains("shutdown")), "{briefs:?}");
    let log = t.log(&format!("forge/{name}"));
    assert!(!log.iter().any(|l| l.contains("shutdown")), "{log:?}");
    let statuses = t.statuses(&name);
    assert!(!statuses.iter().any(|s| s["status"] != json!("running")), "{statuses:?}");
    t.signal("coder-release");
}

/// execute-plan `branch`: the loop's worktree is on the caller's branch instead of
/// forge/<name> while the name is still reserved against forge/<name>; a restart reuses
/// the branch. Bad branches are refused before anything is created.
#[test]
fn a_caller_chosen_branch_replaces_forge_name_and_survives_a_restart() {
    let t = LoopTest::start("block", "");
    // forge/two-halves is taken: the name becomes two-halves-1 even though the loop will
    // not use a forge/ branch.
    t.repo.git(&["branch", "forge/two-halves"]);
    let e = t
        .client
        .tool_err("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS, "branch": "bad..name" }));
    assert_eq!(e.code, 1006, "{e}");
    assert_contains(&e.message, "`bad..name` is not a valid git branch name");
    // A full ref name, and a part too long for a file name, are refused as bad input
    // (before: `refs/heads/refs/heads/x`, and 1004 from the file system).
    for (branch, says) in [
        ("refs/heads/x", "`refs/heads/x` is a full ref name (branch); pass the branch's own name, `x`"),
        ("refs/tags/x", "names a ref outside refs/heads"),
        (&format!("a/{}", "b".repeat(300)), "has a part of 300 bytes (branch)"),
    ] {
        let e =
            t.client.tool_err("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS, "branch": branch }));
        assert_eq!(e.code, 1006, "{branch}: {e}");
        assert_contains(&e.message, says);
        assert!(e.message.len() < 600, "the long name is quoted by its start: {e}");
    }
    assert!(!t.has_branch("refs/heads/x"), "no nested ref was made");
    let e = t.client.tool_err("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS, "branch": "main" }));
    assert_eq!(e.code, 1003, "{e}");
    assert_contains(&e.message, "branch `main` already exists");
    // A branch git cannot keep beside an existing one (before: git's raw error, 1004).
    for (branch, beside) in [("main/x", "main"), ("feature", "feature/old")] {
        t.repo.git(&["branch", "-f", "feature/old"]);
        let e =
            t.client.tool_err("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS, "branch": branch }));
        assert_eq!(e.code, 1003, "{branch}: {e}");
        assert_contains(
            &e.message,
            &format!("branch `{branch}` cannot be created beside the existing branch `{beside}`"),
        );
    }
    let e = t.client.tool_err(
        "execute-plan",
        json!({ "title": "Two halves", "plan": TWO_SECTIONS, "branch": "x/y", "mode": "new-session" }),
    );
    assert_eq!(e.code, -32602, "{e}");
    assert_contains(&e.message, "`branch`");
    assert_eq!(t.count("SELECT count(*) FROM loops WHERE ?1 = ?1", ""), 0, "refusals create nothing");

    let out = t
        .client
        .tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS, "branch": "feature/halves" }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    assert_eq!(name, "two-halves-1");
    assert_eq!(out.data["branch"], json!("feature/halves"));
    assert_contains(&out.text, "Branch: feature/halves");
    assert_eq!(t.loop_row(&name)["branch"], json!("feature/halves"));
    assert!(!t.has_branch("forge/two-halves-1"), "no forge/ branch is created");
    t.wait_state_file("auditor.pid");
    let wt = t.loop_row(&name)["worktreeDir"].as_str().unwrap().to_string();
    assert_eq!(git(std::path::Path::new(&wt), &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), "feature/halves");

    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true, "force": true }));
    assert_contains(&out.text, "Branch: feature/halves");
    t.signal("release");
    let end = t.wait_status(&name, "completed", |p| p["status"] == json!("completed"));
    assert_eq!(end["branch"], json!("feature/halves"), "{end}");
    assert!(t.has_branch("feature/halves"));
    let log = t.log("feature/halves");
    assert_eq!(log[0], "section 2: Second half", "{log:?}");
    assert!(!t.has_branch("forge/two-halves-1"));
}

/// A config whose agent command passes `{model}` and `{variant}` to the scripted agent;
/// `top` holds top-level keys, `extra` tables.
fn variant_config(top: &str, extra: &str) -> String {
    format!(
        "{top}\n[agent]\ncommand = [{:?}, \"{{session}}\", \"m={{model}}\", \"v={{variant}}\"]\n\n[sandbox]\nenabled = false\n\n{extra}\n",
        agent_script().display().to_string()
    )
}

/// `{variant}`: the coder gets executionVariant, the auditor auditorVariant; the
/// post-action session gets loop.postAction.model without a variant, and when that model
/// fails, the auditor model with the auditor's variant. The loop row keeps the variants.
#[test]
fn variants_reach_each_role_and_post_action_falls_back_to_the_auditor_model() {
    let cfg = variant_config(
        "executionModel = \"exec/m\"\nexecutionVariant = \"high\"\nauditorModel = \"aud/m\"\nauditorVariant = \"low\"\n",
        "[loop.postAction]\nenabled = true\nprompt = \"Run the checks.\"\nmodel = \"post/broken\"\n",
    );
    let t = LoopTest::launch(&cfg, "clean", &[("FORGE_TEST_FAIL_MODEL", "m=post/broken")]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let args: Vec<String> = (1..=4).map(|k| t.state_file(&format!("args-{k}")).unwrap_or_default()).collect();
    let tail = |s: &str| s.split_once(' ').map(|x| x.1.trim().to_string()).unwrap_or_default();
    assert_eq!(
        args.iter().map(|a| tail(a)).collect::<Vec<_>>(),
        ["m=exec/m v=high", "m=aud/m v=low", "m=post/broken v=", "m=aud/m v=low"],
        "{}",
        t.report()
    );
    assert_eq!(t.roles(), ["coder", "auditor", "post_action", "post_action"]);
    let report = t.client.tool_ok("loop-status", json!({ "name": name })).text;
    assert_contains(&report, "Post-Action Report:");
    let v = t.strings("SELECT coalesce(execution_variant, '-') || ' ' || coalesce(auditor_variant, '-') FROM loops WHERE loop_name = ?1", &name);
    assert_eq!(v, ["high low"]);
}

/// The auditor variant never inherits the execution variant, and a loop started without
/// configured variants uses the last-used ones of the project.
#[test]
fn the_auditor_variant_does_not_inherit_and_last_used_variants_apply() {
    let t = LoopTest::launch(&variant_config("executionVariant = \"high\"\n", ""), "clean", &[]);
    let first = t.execute("Plain plan", UNSECTIONED);
    assert_eq!(t.wait_end(&first)["status"], json!("completed"), "{}", t.report());
    let tail = |k: usize| {
        t.state_file(&format!("args-{k}"))
            .unwrap_or_default()
            .split_once(' ')
            .map(|x| x.1.trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(tail(1), "m= v=", "no model configured: no variant is sent either");
    // With a model the variant is sent; the auditor gets none.
    t.client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "forge": { "executionModel": "exec/m", "auditorVariant": "low" } } }),
    );
    t.client.tool_ok("loop-status", json!({}));
    let second = t.execute("Plain plan", UNSECTIONED);
    assert_eq!(t.wait_end(&second)["status"], json!("completed"), "{}", t.report());
    assert_eq!((tail(3), tail(4)), ("m=exec/m v=high".to_string(), "m=exec/m v=low".to_string()));
    // Variants set to "" count as unset: the last-used values apply.
    t.client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "forge": { "executionVariant": "", "auditorVariant": "" } } }),
    );
    t.client.tool_ok("loop-status", json!({}));
    let third = t.execute("Plain plan", UNSECTIONED);
    assert_eq!(t.wait_end(&third)["status"], json!("completed"), "{}", t.report());
    assert_eq!((tail(5), tail(6)), ("m=exec/m v=high".to_string(), "m=exec/m v=low".to_string()));
}

/// An audit turn killed by a signal after it recorded its handoff is not an assistant
/// error: the record is processed as the handoff (the loop completes on it).
#[test]
fn an_aborted_audit_turn_with_a_record_is_processed_as_the_handoff() {
    let t = LoopTest::start("abortaudit", "");
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
    assert_eq!(t.roles(), ["coder", "auditor"]);
    assert_eq!(t.loop_row(&name)["errorCount"], json!(0));
    assert_eq!(
        t.strings("SELECT role || ' ' || status FROM loop_handoffs WHERE loop_name = ?1 ORDER BY id", &name),
        ["coder applied", "auditor applied"]
    );
}

/// A coder turn killed by a signal without a record is a session abort (the loop stops as
/// cancelled and stays restartable), not an assistant error that rotates to audit.
#[test]
fn an_aborted_coder_turn_without_a_record_cancels_the_loop() {
    let t = LoopTest::start("abortcoder", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("cancelled"), "{end}{}", t.report());
    t.assert_transitions(&name, &["terminate cancelled coding->- it=1 status=cancelled reason=cancelled"]);
    assert_eq!(t.roles(), ["coder"]);
    assert_eq!(t.loop_row(&name)["errorCount"], json!(0));
    let status = t.client.tool_ok("loop-status", json!({ "name": name })).text;
    assert_contains(&status, &format!("Restart: available with loop-status name={name} restart=true"));
}

/// Busy and retrying loop sessions (a subagent session registered to the loop): a handoff
/// is refused with 1005 naming it, and the turn end waits until it settled.
#[test]
fn a_busy_subagent_blocks_the_handoff_and_defers_the_turn_end() {
    let t = LoopTest::start("subagent", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_state_file("prompt-1");
    let db = rw(&t);
    let set = |status: &str| {
        db.execute(
            "INSERT INTO loop_sessions (session_id, project_id, loop_name, role, token_hash, status, created_at)
             SELECT 'ses_subagent', project_id, loop_name, 'coder', 'x', ?2, 0 FROM loops WHERE loop_name = ?1
             ON CONFLICT (session_id) DO UPDATE SET status = excluded.status",
            rusqlite::params![name, status],
        )
        .expect("subagent session row");
    };
    set("retry");
    t.signal("coder-go");
    assert_eq!(t.wait_state_file("first-handoff.code").trim(), "1");
    let err = t.state_file("first-handoff.err").unwrap();
    // ToolError::busy: error 1005.
    assert_contains(&err, "forge.loop-handoff refused: other sessions of loop");
    assert_contains(&err, "are busy (ses_subagent). Retry after they finish.");
    set("idle");
    t.signal("coder-go2");
    common::wait_for(LOOP_WAIT, || {
        (t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1 AND status = 'pending'", &name) == 1)
            .then_some(())
    })
    .unwrap_or_else(|| panic!("no pending handoff{}", t.report()));
    set("busy");
    t.signal("coder-go3");
    // The coder's process ends; the turn end waits for the subagent.
    let pid = t.turns()[0].2;
    common::wait_for(LOOP_WAIT, || (!pid_alive(pid)).then_some(())).expect("the coder turn ended");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(t.loop_row(&name)["phase"], json!("coding"), "deferred while the subagent is busy{}", t.report());
    assert_eq!(t.roles(), ["coder"]);
    set("idle");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
}

/// The loop's name is free of every clash, not only of loops and exact branches: a
/// branch under `forge/<name>/…` and a directory left in the worktrees directory each
/// move the name on; a branch named `forge`, which clashes with every loop branch, is
/// refused with its name (before: git's raw error, 1004).
#[test]
fn a_loop_name_clashing_with_a_branch_path_or_a_left_directory_moves_on() {
    let t = LoopTest::start("block", "");
    // `forge` can only exist while no forge/ branch does.
    t.repo.git(&["branch", "forge"]);
    let e = t.client.tool_err("execute-plan", json!({ "title": "Other", "plan": TWO_SECTIONS }));
    assert_eq!(e.code, 1003, "{e}");
    assert_contains(&e.message, "the branch `forge` keeps loops' branches (forge/<name>) from being created");
    assert_eq!(t.count("SELECT count(*) FROM loops WHERE ?1 = ?1", ""), 0, "the refusal creates nothing");
    // With a branch of the caller's the loop starts (before, the name search spun forever:
    // every `forge/<name>` clashed with `forge`).
    let out =
        t.client.tool_ok("execute-plan", json!({ "title": "Other", "plan": TWO_SECTIONS, "branch": "work/other" }));
    let other = out.data["loopName"].as_str().expect("loopName").to_string();
    assert_eq!(other, "other");
    t.client.tool_ok("loop-cancel", json!({ "name": other }));
    t.repo.git(&["branch", "-D", "forge"]);

    t.repo.git(&["branch", "forge/two-halves/old"]);
    std::fs::create_dir_all(t.sb.data_dir.join("worktrees").join("two-halves-1").join("left")).expect("mkdir");
    let name = t.execute("Two halves", TWO_SECTIONS);
    assert_eq!(name, "two-halves-2");
    assert!(t.has_branch("forge/two-halves-2"));
    assert!(t.sb.data_dir.join("worktrees").join("two-halves-1").join("left").exists(), "the left directory is kept");
    t.signal("release");
    t.wait_end(&name);
}

/// Two servers on one data directory starting loops of the same name at once: the one
/// that chose the name first but creates its worktree second finds the name taken and
/// chooses again (before: git's raw "branch exists" as 1004). Made deterministic by
/// holding the first server between choosing the name and creating the worktree.
#[test]
fn a_loop_name_taken_by_another_server_meanwhile_is_chosen_again() {
    let t = LoopTest::start("block", "");
    let other = t.other_server("block", &[]);
    t.hold("start.named");
    let first = t.client.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.execute-plan", "arguments": [{ "title": "Two halves", "plan": TWO_SECTIONS }] }),
    );
    t.wait_held("start.named");
    let won = other.tool_ok("execute-plan", json!({ "title": "Two halves", "plan": TWO_SECTIONS }));
    assert_eq!(won.data["loopName"], json!("two-halves"));
    t.unhold("start.named");
    let out = t.client.wait_response(first, std::time::Duration::from_secs(60));
    assert_eq!(out["result"]["data"]["loopName"], json!("two-halves-1"), "{out}");
    assert!(t.has_branch("forge/two-halves") && t.has_branch("forge/two-halves-1"));
    t.signal("release");
    t.wait_end("two-halves-1");
}

/// A name that matches no loop, or two, is said as each Forge tool says it: `loop-status`
/// as FORGE-REFERENCE §6, `loop-cancel` as §2.11, a restart as §2.12 (it lists the loops
/// there are). Before, the cancel and the restart used §6's words (review HH).
#[test]
fn an_unknown_or_ambiguous_loop_name_is_said_as_forge_says_it() {
    let t = LoopTest::start("clean", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    assert_eq!(t.wait_end(&name)["status"], json!("completed"), "{}", t.report());
    let e = t.client.tool_err("loop-status", json!({ "name": "zzz" }));
    assert_eq!(e.message, "No loop found for loop \"zzz\".");
    let e = t.client.tool_err("loop-cancel", json!({ "name": "zzz" }));
    assert_eq!(e.message, "No active loop found for loop \"zzz\".");
    let e = t.client.tool_err("loop-status", json!({ "name": "zzz", "restart": true }));
    assert_eq!(e.message, format!("No loop found for \"zzz\".\n\nAvailable loops:\n- {name}"));

    let second = t.execute("Plain plan", UNSECTIONED);
    assert_eq!(t.wait_end(&second)["status"], json!("completed"), "{}", t.report());
    let names = format!("- {second}\n- {name}");
    let e = t.client.tool_err("loop-status", json!({ "name": "plain" }));
    assert_eq!(e.message, format!("Multiple loops match \"plain\":\n{names}\n\nBe more specific."));
    let e = t.client.tool_err("loop-cancel", json!({ "name": "plain" }));
    assert_eq!(e.message, format!("Multiple loops match \"plain\". Be more specific.\n{names}"));
    let e = t.client.tool_err("loop-status", json!({ "name": "plain", "restart": true }));
    assert_eq!(e.message, format!("Multiple loops match \"plain\". Be more specific.\n\nMatches:\n{names}"));
}

/// Attempt snapshots (`refs/forge/<name>/…`) outlive a loop whose row the sweep removed; a
/// new loop of that name would find them as its own (review YU), so the name is taken.
#[test]
fn a_name_whose_snapshot_refs_remain_is_not_reused() {
    let t = LoopTest::start("clean", "");
    let head = t.repo.git(&["rev-parse", "HEAD"]);
    t.repo.git(&["update-ref", "refs/forge/plain-plan/attempts/section-0-1", head.trim()]);
    let name = t.execute("Plain plan", UNSECTIONED);
    assert_eq!(name, "plain-plan-1");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
}
