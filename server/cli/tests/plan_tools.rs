//! `forge.plan-write`, `forge.plan-read`, `forge.plan-edit` and `forge.tools` over stdio:
//! success and failure paths with the exact texts and error codes of PROTOCOL.md §3 and
//! FORGE-REFERENCE.md §2.1–2.3, §3.6.

mod common;

use common::*;
use serde_json::{json, Value};

/// A stdio server on a fresh repository, initialized as `agent`.
fn connect(sb: &Sandbox, repo: &GitRepo, agent: &str) -> Client {
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path).agent(agent));
    c
}

fn setup() -> (Sandbox, GitRepo, Client) {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = connect(&sb, &repo, "user");
    (sb, repo, c)
}

#[track_caller]
fn assert_error(e: &RpcError, code: i64, kind: &str) {
    assert_eq!(e.code, code, "{e}");
    assert_eq!(e.kind(), Some(kind), "{e}");
}

// --- plan-write ---------------------------------------------------------------------------------

#[test]
fn plan_write_reports_lines_chars_loop_name_and_sections() {
    let (_sb, _repo, c) = setup();
    let out = c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    let expected = format!(
        "{}\nLoop Name: add-oauth\nSections (2):\n  1. Phase 1: token storage\n  2. Phase 2: login flow",
        stored_line(GOOD_PLAN)
    );
    assert_eq!(out.text, expected);
    let session = c.session_id();
    assert_eq!(out.data["sessionId"], json!(session));
    assert_eq!(out.data["uri"], json!(session_plan_uri(&session)));
    assert_eq!(out.data["written"], json!(true));
    assert_eq!(out.data["loopName"], json!("add-oauth"));
    assert_eq!(out.data["sectionCount"], json!(2));
    assert_eq!(out.data["warnings"], json!([]));

    // The stored text reads back line by line.
    let read = c.tool_ok("plan-read", json!({}));
    let lines: Vec<&str> = GOOD_PLAN.split('\n').collect();
    let mut expected = format!("({} lines total)", lines.len());
    for (i, l) in lines.iter().enumerate() {
        expected.push_str(&format!("\n{}: {l}", i + 1));
    }
    assert_eq!(read.text, expected);
}

#[test]
fn plan_write_counts_chars_in_utf16_code_units() {
    let (_sb, _repo, c) = setup();
    let content = "# Plan 🚀 café\nline two";
    let out = c.tool_ok("plan-write", json!({ "content": content }));
    // 🚀 is two UTF-16 code units; é is one.
    assert!(out.text.starts_with("Plan stored: 2 lines, 23 chars.\n"), "{:?}", out.text);
}

#[test]
fn plan_write_lists_structure_warnings() {
    let (_sb, _repo, c) = setup();
    let content = "## Objective\nDo the thing.\n\nLoop Name: quick-fix\n\n<!-- forge-section -->\n## Phase 1: patch\nJust patch it.\n\n## Decisions\n- none\n\n## Conventions\n- none\n\n## Key Context\n- none";
    let out = c.tool_ok("plan-write", json!({ "content": content }));
    let expected = format!(
        "{}\nLoop Name: quick-fix\nSections (1):\n  1. Phase 1: patch\nWarnings:\n  - Section 1 is missing required headings: Files, Edits, Acceptance Criteria, Verification.",
        stored_line(content)
    );
    assert_eq!(out.text, expected);
    assert_eq!(out.data["warnings"].as_array().map(Vec::len), Some(1), "{}", out.data);
}

/// The warnings of a plan with no structure at all, in the order of FORGE-REFERENCE §3.5.
const NO_STRUCTURE_WARNINGS: &str = "Sections (0): none detected
Warnings:
  - No <!-- forge-section --> markers found: the whole plan will run as a single section.
  - No \"Loop Name:\" line found: the loop name will be derived from the plan title.
  - No Objective heading found before the first executable phase.
  - Plan is missing trailing headings: Decisions, Conventions, Key Context.";

#[test]
fn plan_write_without_structure_says_so() {
    let (_sb, _repo, c) = setup();
    let content = "# Quick idea\n\nJust do it.";
    let out = c.tool_ok("plan-write", json!({ "content": content }));
    assert_eq!(out.text, format!("Plan stored: 3 lines, 25 chars.\n{NO_STRUCTURE_WARNINGS}"));
    assert_eq!(out.data["loopName"], Value::Null);
    assert_eq!(out.data["sectionCount"], json!(0));
    assert_eq!(out.data["warnings"].as_array().map(Vec::len), Some(4), "{}", out.data);
}

#[test]
fn plan_write_keeps_only_the_text_between_plan_markers() {
    let (_sb, _repo, c) = setup();
    let content =
        "Here is the plan:\n<!-- forge-plan:start -->\n\n# Marked plan\nstep one\n\n  <!-- forge-plan:end -->  \nThanks!";
    let out = c.tool_ok("plan-write", json!({ "content": content }));
    assert_eq!(out.text, format!("Plan stored: 2 lines, 22 chars.\n{NO_STRUCTURE_WARNINGS}"));
    let read = c.tool_ok("plan-read", json!({}));
    assert_eq!(read.text, "(2 lines total)\n1: # Marked plan\n2: step one");
}

#[test]
fn plan_write_trims_surrounding_whitespace() {
    let (_sb, _repo, c) = setup();
    c.tool_ok("plan-write", json!({ "content": "\n\n   # Plan\nbody\n\n\n" }));
    let read = c.tool_ok("plan-read", json!({}));
    assert_eq!(read.text, "(2 lines total)\n1: # Plan\n2: body");
}

#[test]
fn plan_write_removes_the_project_directory_from_paths() {
    let (_sb, repo, c) = setup();
    let content = format!("# Plan\nEdit {}/src/main.rs and {}/README.md", repo.path.display(), repo.path.display());
    c.tool_ok("plan-write", json!({ "content": content }));
    let read = c.tool_ok("plan-read", json!({}));
    assert_eq!(read.text, "(2 lines total)\n1: # Plan\n2: Edit src/main.rs and README.md");
}

#[test]
fn plan_write_rejects_empty_content() {
    let (_sb, _repo, c) = setup();
    for content in ["", "   \n\t\n", "<!-- forge-plan:start -->\n   \n<!-- forge-plan:end -->"] {
        let e = c.tool_err("plan-write", json!({ "content": content }));
        assert_error(&e, 1006, "invalid");
        assert_eq!(e.message, "plan-write failed: content is empty.", "{content:?}");
    }
    // Nothing was stored.
    let e = c.tool_err("plan-read", json!({}));
    assert_error(&e, 1002, "not_found");
}

#[test]
fn plan_write_rejects_unbalanced_and_repeated_markers() {
    let (_sb, _repo, c) = setup();
    let unbalanced =
        "plan-write failed: content contains an unbalanced <!-- forge-plan:start --> / <!-- forge-plan:end --> marker.";
    for content in [
        "<!-- forge-plan:start -->\n# Plan\n- no end marker",
        "# Plan\n<!-- forge-plan:end -->",
        "<!-- forge-plan:end -->\n# Plan\n<!-- forge-plan:start -->",
    ] {
        let e = c.tool_err("plan-write", json!({ "content": content }));
        assert_error(&e, 1006, "invalid");
        assert_eq!(e.message, unbalanced, "{content:?}");
    }
    let twice =
        "<!-- forge-plan:start -->\na\n<!-- forge-plan:end -->\n<!-- forge-plan:start -->\nb\n<!-- forge-plan:end -->";
    let e = c.tool_err("plan-write", json!({ "content": twice }));
    assert_error(&e, 1006, "invalid");
    assert_eq!(
        e.message,
        "plan-write failed: content contains more than one <!-- forge-plan:start --> / <!-- forge-plan:end --> pair."
    );
    assert_eq!(c.tool_err("plan-read", json!({})).code, 1002, "nothing stored");
}

#[test]
fn an_identical_rewrite_keeps_updated_at() {
    let (sb, repo, c) = setup();
    let session = c.session_id();
    let first = c.tool_ok("plan-write", json!({ "content": "# Same plan\nbody" }));
    assert_eq!(first.data["written"], json!(true));
    let db = sb.db();
    db.set_session_plan_updated_at(&repo.root_commit, &session, 1_000);

    let again = c.tool_ok("plan-write", json!({ "content": "# Same plan\nbody" }));
    assert_eq!(again.data["written"], json!(false), "identical content is not rewritten");
    assert_eq!(again.text, first.text, "the report is the same");
    assert_eq!(db.session_plan_updated_at(&repo.root_commit, &session), Some(1_000));
    // The same after normalization (surrounding whitespace, plan markers).
    c.tool_ok(
        "plan-write",
        json!({ "content": "\n<!-- forge-plan:start -->\n# Same plan\nbody\n<!-- forge-plan:end -->\n" }),
    );
    assert_eq!(db.session_plan_updated_at(&repo.root_commit, &session), Some(1_000));
    let read = c.tool_ok("plan-read", json!({}));
    assert_eq!(read.data["updatedAt"], json!(1_000));

    let changed = c.tool_ok("plan-write", json!({ "content": "# Same plan\nnew body" }));
    assert_eq!(changed.data["written"], json!(true));
    let at = db.session_plan_updated_at(&repo.root_commit, &session).unwrap();
    assert!(at > 1_000, "updated_at moves on a real change: {at}");
}

#[test]
fn plan_authoring_is_denied_to_the_code_agent() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for agent in ["code", "auditor", "auditor-loop", "minion"] {
        let c = connect(&sb, &repo, agent);
        for tool in ["plan-write", "plan-edit"] {
            let input = if tool == "plan-write" {
                json!({ "content": "# Plan" })
            } else {
                json!({ "oldString": "", "newString": "# Plan" })
            };
            let e = c.tool_err(tool, input);
            assert_error(&e, 1001, "denied");
            assert_contains(&e.message, &format!("forge.{tool}"));
            assert_contains(&e.message, &format!("`{agent}`"));
            assert_contains(&e.message, &c.session_id());
        }
        // Reading stays available.
        let e = c.tool_err("plan-read", json!({}));
        assert_error(&e, 1002, "not_found");
    }
    let architect = connect(&sb, &repo, "architect");
    architect.tool_ok("plan-write", json!({ "content": "# Architect plan" }));
}

#[test]
fn plan_writes_are_refused_while_the_session_runs_a_loop() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let session = "ses_01JLOOPOWNER000000000000";
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path).session(session));
    c.tool_ok("plan-write", json!({ "content": "# Before the loop\nbody" }));
    let db = sb.db();
    db.insert_loop(&LoopFixture::running(&repo.root_commit, "guarded-loop", session, &repo.path));

    let e = c.tool_err("plan-write", json!({ "content": "# During the loop" }));
    assert_error(&e, 1001, "denied");
    assert_contains(&e.message, "Cannot modify the plan from an active loop session");
    assert_contains(&e.message, "guarded-loop");
    assert_contains(&e.message, "plan-adjust");
    let e = c.tool_err("plan-edit", json!({ "oldString": "body", "newString": "changed" }));
    assert_error(&e, 1001, "denied");
    assert_contains(&e.message, "Cannot modify the plan from an active loop session");
    assert_eq!(db.session_plan(&repo.root_commit, session).as_deref(), Some("# Before the loop\nbody"));

    // A terminated loop's session may write again.
    db.conn
        .execute(
            "UPDATE loops SET status = 'completed', completed_at = ?1, termination_reason = 'completed' WHERE loop_name = 'guarded-loop'",
            [now_ms()],
        )
        .unwrap();
    c.tool_ok("plan-write", json!({ "content": "# After the loop" }));
}

// --- plan-read ------------------------------------------------------------------------------------

fn ten_lines() -> String {
    (1..=10).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n")
}

#[test]
fn plan_read_pages_with_offset_and_limit() {
    let (_sb, _repo, c) = setup();
    c.tool_ok("plan-write", json!({ "content": ten_lines() }));

    let all = c.tool_ok("plan-read", json!({}));
    let expected: String = std::iter::once("(10 lines total)".to_string())
        .chain((1..=10).map(|i| format!("{i}: line {i}")))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(all.text, expected);
    assert_eq!(all.data["totalLines"], json!(10));

    let page = c.tool_ok("plan-read", json!({ "offset": 3, "limit": 4 }));
    assert_eq!(
        page.text,
        "(10 lines total)\n3: line 3\n4: line 4\n5: line 5\n6: line 6\n\n(Showing lines 3-6 of 10. Use offset=7 to continue.)"
    );
    assert_eq!(page.data["nextOffset"], json!(7));

    let last = c.tool_ok("plan-read", json!({ "offset": 7, "limit": 4 }));
    assert_eq!(last.text, "(10 lines total)\n7: line 7\n8: line 8\n9: line 9\n10: line 10");

    let first = c.tool_ok("plan-read", json!({ "offset": 0, "limit": 1 }));
    assert_eq!(first.text, "(10 lines total)\n1: line 1\n\n(Showing lines 1-1 of 10. Use offset=2 to continue.)");

    let past = c.tool_ok("plan-read", json!({ "offset": 50 }));
    assert_eq!(past.text, "(10 lines total)\n");
}

#[test]
fn plan_read_searches_with_a_regex() {
    let (_sb, _repo, c) = setup();
    c.tool_ok("plan-write", json!({ "content": ten_lines() }));

    let two = c.tool_ok("plan-read", json!({ "pattern": "line [13]$" }));
    assert_eq!(two.text, "Found 2 matches:\n\n  Line 1: line 1\n  Line 3: line 3");
    let one = c.tool_ok("plan-read", json!({ "pattern": "10" }));
    assert_eq!(one.text, "Found 1 match:\n\n  Line 10: line 10");
    let none = c.tool_ok("plan-read", json!({ "pattern": "zebra" }));
    assert_eq!(none.text, "No matches found in plan");

    let e = c.tool_err("plan-read", json!({ "pattern": "(unclosed" }));
    assert_error(&e, 1006, "invalid");
    assert!(e.message.starts_with("Invalid regex pattern: "), "{}", e.message);

    // Read as ECMAScript, as Forge does: ASCII \d and \w, a lone brace is a literal.
    c.tool_ok("plan-write", json!({ "content": "é\n٣\nx\nPhase{ 1}" }));
    assert_eq!(c.tool_ok("plan-read", json!({ "pattern": "^\\w$" })).text, "Found 1 match:\n\n  Line 3: x");
    assert_eq!(c.tool_ok("plan-read", json!({ "pattern": "^\\d$" })).text, "No matches found in plan");
    assert_eq!(c.tool_ok("plan-read", json!({ "pattern": "Phase{" })).text, "Found 1 match:\n\n  Line 4: Phase{ 1}");
    // Look-around is refused, naming it.
    let e = c.tool_err("plan-read", json!({ "pattern": "(?=Phase)" }));
    assert_error(&e, 1006, "invalid");
    assert!(e.message.contains("look-around"), "{}", e.message);
}

#[test]
fn plan_read_without_a_plan_is_not_found() {
    let (_sb, _repo, c) = setup();
    let e = c.tool_err("plan-read", json!({}));
    assert_error(&e, 1002, "not_found");
    assert_eq!(e.message, "No plan found for current session");
    let e = c.tool_err("plan-read", json!({ "session_id": "ses_nobody" }));
    assert_error(&e, 1002, "not_found");
    assert_contains(&e.message, "ses_nobody");
    let e = c.tool_err("plan-read", json!({ "loop_name": "no-such-loop" }));
    assert_error(&e, 1002, "not_found");
    assert_contains(&e.message, "no-such-loop");
}

#[test]
fn plan_read_recent_lists_and_searches_the_project_plans() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let a = connect(&sb, &repo, "user");
    let b = connect(&sb, &repo, "user");
    let e = a.tool_ok("plan-read", json!({ "recent": true }));
    assert_eq!(e.text, "No recent plans found");

    a.tool_ok("plan-write", json!({ "content": "# Plan A\nalpha two\n  alpha three  \nalpha four" }));
    b.tool_ok("plan-write", json!({ "content": "  # Plan B  \nbeta two" }));
    let db = sb.db();
    db.set_session_plan_updated_at(&repo.root_commit, &a.session_id(), 1_733_149_940_000);
    db.set_session_plan_updated_at(&repo.root_commit, &b.session_id(), 1_733_150_000_123);
    let (sa, sbb) = (a.session_id(), b.session_id());

    let list = a.tool_ok("plan-read", json!({ "recent": true }));
    assert_eq!(
        list.text,
        format!(
            "Recent plans for project {} (2 found)\n  session: {sbb} | 2024-12-02T14:33:20.123Z | # Plan B\n    beta two\n  session: {sa} | 2024-12-02T14:32:20.000Z | # Plan A\n    alpha two   alpha three",
            repo.root_commit
        )
    );
    let one = a.tool_ok("plan-read", json!({ "recent": true, "count": 1 }));
    assert!(
        one.text.starts_with(&format!("Recent plans for project {} (1 found)\n", repo.root_commit)),
        "{:?}",
        one.text
    );

    let hit = a.tool_ok("plan-read", json!({ "recent": true, "pattern": "alpha t" }));
    assert_eq!(
        hit.text,
        format!("Found 1 recent plan match(es) for /alpha t/.\n  session: {sa} | 2024-12-02T14:32:20.000Z | # Plan A\n    Line 2: alpha two")
    );
    let none = a.tool_ok("plan-read", json!({ "recent": true, "pattern": "gamma" }));
    assert_eq!(none.text, "No matching recent plans found");
    let e = a.tool_err("plan-read", json!({ "recent": true, "pattern": "[" }));
    assert_error(&e, 1006, "invalid");
    assert!(e.message.starts_with("Invalid regex pattern: "), "{}", e.message);

    // Another session's plan by id (only the whole text is trimmed on write).
    let other = a.tool_ok("plan-read", json!({ "session_id": sbb }));
    assert_eq!(other.text, "(2 lines total)\n1: # Plan B  \n2: beta two");
}

#[test]
fn plan_read_recent_is_scoped_to_the_project() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let other_repo = GitRepo::new();
    let a = connect(&sb, &repo, "user");
    a.tool_ok("plan-write", json!({ "content": "# Plan of repo one" }));
    // Same data dir, different project (a different root commit).
    assert_ne!(other_repo.root_commit, repo.root_commit);
    let b = connect(&sb, &other_repo, "user");
    assert_eq!(b.tool_ok("plan-read", json!({ "recent": true })).text, "No recent plans found");
    assert_eq!(b.tool_err("plan-read", json!({ "session_id": a.session_id() })).code, 1002);
}

// --- plan-edit ------------------------------------------------------------------------------------

#[test]
fn plan_edit_replaces_a_unique_match() {
    let (_sb, _repo, c) = setup();
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    let out = c.tool_ok(
        "plan-edit",
        json!({ "oldString": "- Add the login handler.", "newString": "- Add the login and logout handlers." }),
    );
    let stored = GOOD_PLAN.replace("- Add the login handler.", "- Add the login and logout handlers.");
    // Only the touched section is listed.
    assert_eq!(
        out.text,
        format!(
            "Replaced 1 occurrence(s).\n{}\nLoop Name: add-oauth\nSections (2):\n  2. Phase 2: login flow",
            stored_line(&stored)
        )
    );
    assert_eq!(out.data["replaced"], json!(1));
    let read = c.tool_ok("plan-read", json!({ "pattern": "logout" }));
    assert_eq!(read.text, "Found 1 match:\n\n  Line 24: - Add the login and logout handlers.");
}

#[test]
fn plan_edit_failures_have_exact_messages_and_leave_the_plan_alone() {
    let (sb, repo, c) = setup();
    let session = c.session_id();

    // No plan yet.
    let e = c.tool_err("plan-edit", json!({ "oldString": "x", "newString": "y" }));
    assert_eq!(e.message, "plan-edit failed: no plan stored for this session. Use plan-write to create it first.");
    assert_eq!(e.code, 1002, "{e}");

    c.tool_ok("plan-write", json!({ "content": "# Plan\nstep\nstep\nstep\nend" }));
    let db = sb.db();
    db.set_session_plan_updated_at(&repo.root_commit, &session, 5_000);

    let e = c.tool_err("plan-edit", json!({ "oldString": "step", "newString": "step" }));
    assert_error(&e, 1006, "invalid");
    assert_eq!(e.message, "plan-edit failed: oldString and newString are identical.");

    // A stale edit: the text is not in the stored plan (1003, re-read and retry).
    let e = c.tool_err("plan-edit", json!({ "oldString": "missing text", "newString": "y" }));
    assert_error(&e, 1003, "conflict");
    assert!(e.message.starts_with("plan-edit failed: oldString not found in the stored plan."), "{}", e.message);

    let e = c.tool_err("plan-edit", json!({ "oldString": "step", "newString": "walk" }));
    assert_error(&e, 1006, "invalid");
    assert_eq!(
        e.message,
        "plan-edit failed: found 3 matches for oldString. Add surrounding context to make it unique, or set replaceAll: true."
    );
    let e = c.tool_err("plan-edit", json!({ "oldString": "step", "newString": "walk", "replaceAll": false }));
    assert_contains(&e.message, "found 3 matches");

    let e = c.tool_err("plan-edit", json!({ "oldString": "", "newString": "# Other" }));
    assert_error(&e, 1006, "invalid");
    assert!(
        e.message.starts_with("plan-edit failed: oldString cannot be empty when editing an existing plan"),
        "{}",
        e.message
    );

    let e = c.tool_err("plan-edit", json!({ "oldString": "# Plan\nstep\nstep\nstep\nend", "newString": "  \n " }));
    assert_error(&e, 1006, "invalid");
    assert!(e.message.starts_with("plan-edit failed: replacement would leave the plan empty."), "{}", e.message);

    assert_eq!(db.session_plan(&repo.root_commit, &session).as_deref(), Some("# Plan\nstep\nstep\nstep\nend"));
    assert_eq!(db.session_plan_updated_at(&repo.root_commit, &session), Some(5_000), "rejections keep updated_at");
}

#[test]
fn plan_edit_replace_all() {
    let (_sb, _repo, c) = setup();
    c.tool_ok("plan-write", json!({ "content": "# Plan\nstep\nstep\nstep\nend" }));
    let out = c.tool_ok("plan-edit", json!({ "oldString": "step", "newString": "walk", "replaceAll": true }));
    let stored = "# Plan\nwalk\nwalk\nwalk\nend";
    assert!(
        out.text
            .starts_with(&format!("Replaced 3 occurrence(s).\n{}\nSections (0): none detected\n", stored_line(stored))),
        "{:?}",
        out.text
    );
    assert_eq!(out.data["replaced"], json!(3));
    assert_eq!(c.tool_ok("plan-read", json!({})).text, "(5 lines total)\n1: # Plan\n2: walk\n3: walk\n4: walk\n5: end");
}

#[test]
fn plan_edit_with_an_empty_old_string_creates_the_plan() {
    let (_sb, _repo, c) = setup();
    let out = c.tool_ok("plan-edit", json!({ "oldString": "", "newString": "\n<!-- forge-plan:start -->\n# Created\nby edit\n<!-- forge-plan:end -->\n" }));
    assert!(
        out.text.starts_with("Created plan.\nPlan stored: 2 lines, 17 chars.\nSections (0): none detected"),
        "{:?}",
        out.text
    );
    assert_eq!(out.data["created"], json!(true));
    assert_eq!(c.tool_ok("plan-read", json!({})).text, "(2 lines total)\n1: # Created\n2: by edit");

    let (_sb2, _repo2, d) = setup();
    let e = d.tool_err("plan-edit", json!({ "oldString": "", "newString": "   " }));
    assert_error(&e, 1006, "invalid");
    assert_eq!(e.message, "plan-edit failed: content is empty.");
    let e = d.tool_err("plan-edit", json!({ "oldString": "", "newString": "<!-- forge-plan:start -->\nx" }));
    assert_eq!(
        e.message,
        "plan-edit failed: content contains an unbalanced <!-- forge-plan:start --> / <!-- forge-plan:end --> marker."
    );
}

#[test]
fn plan_edit_matches_regex_characters_literally() {
    let (_sb, _repo, c) = setup();
    c.tool_ok("plan-write", json!({ "content": "# Plan\nuse a.b*c (x) [y] $z ^w\naxbbbc x y z w" }));
    let out = c.tool_ok("plan-edit", json!({ "oldString": "a.b*c (x) [y] $z ^w", "newString": "literal $1 $& done" }));
    assert!(out.text.starts_with("Replaced 1 occurrence(s).\n"), "{:?}", out.text);
    // The replacement is literal too ($1 and $& are not expanded).
    assert_eq!(
        c.tool_ok("plan-read", json!({})).text,
        "(3 lines total)\n1: # Plan\n2: use literal $1 $& done\n3: axbbbc x y z w"
    );
    let e = c.tool_err("plan-edit", json!({ "oldString": "a.b*c", "newString": "q" }));
    assert!(e.message.starts_with("plan-edit failed: oldString not found"), "a regex must not match: {}", e.message);
}

#[test]
fn the_user_may_write_and_edit_another_sessions_plan() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let user = connect(&sb, &repo, "user");
    let target = connect(&sb, &repo, "architect");
    let tid = target.session_id();
    let out = user.tool_ok("plan-write", json!({ "content": "# For the architect\nstep", "session_id": tid }));
    assert_eq!(out.data["sessionId"], json!(tid));
    assert_eq!(target.tool_ok("plan-read", json!({})).text, "(2 lines total)\n1: # For the architect\n2: step");
    user.tool_ok("plan-edit", json!({ "oldString": "step", "newString": "walk", "session_id": tid }));
    assert_eq!(target.tool_ok("plan-read", json!({})).text, "(2 lines total)\n1: # For the architect\n2: walk");
    // The user's own session is untouched.
    assert_eq!(user.tool_err("plan-read", json!({})).code, 1002);

    // Other agents may not.
    let e = target.tool_err("plan-write", json!({ "content": "# x", "session_id": user.session_id() }));
    assert_error(&e, 1001, "denied");
    assert_contains(&e.message, "forge.plan-write");
    assert_contains(&e.message, "architect");
}

// --- input validation -------------------------------------------------------------------------------

#[test]
fn invalid_arguments_are_invalid_params_naming_the_field() {
    let (_sb, _repo, c) = setup();
    let cases: &[(&str, Value, &str)] = &[
        ("plan-write", json!({ "content": "# x", "bogus": 1 }), "bogus"),
        ("plan-write", json!({ "content": 5 }), "content"),
        ("plan-write", json!({ "content": null }), "content"),
        ("plan-write", json!({}), "content"),
        ("plan-write", json!({ "content": "# x", "session_id": 7 }), "session_id"),
        ("plan-read", json!({ "offset": "three" }), "offset"),
        ("plan-read", json!({ "offset": -1 }), "offset"),
        ("plan-read", json!({ "recent": "yes" }), "recent"),
        ("plan-read", json!({ "loopName": "x" }), "loopName"),
        ("plan-edit", json!({ "oldString": "a" }), "newString"),
        ("plan-edit", json!({ "oldString": "a", "newString": "b", "replaceAll": "true" }), "replaceAll"),
        ("plan-edit", json!({ "old_string": "a", "newString": "b" }), "old_string"),
        ("tools", json!({ "verbose": true }), "verbose"),
    ];
    for (tool, input, field) in cases {
        let e = c.tool_err(tool, input.clone());
        assert_error(&e, -32602, "invalid_params");
        assert_contains(&e.message, field);
    }
    assert_eq!(c.tool_err("plan-read", json!({})).code, 1002, "nothing was written by the rejected calls");
}

#[test]
fn arguments_must_be_a_list_with_one_object() {
    let (_sb, _repo, c) = setup();
    for args in [
        json!([{ "content": "# a" }, { "content": "# b" }]),
        json!(["# a"]),
        json!([42]),
        json!([[{ "content": "# a" }]]),
    ] {
        let e = c.execute("forge.plan-write", Some(args.clone())).expect_err("bad arguments");
        assert_eq!(e.code, -32602, "{args}: {e}");
        assert_contains(&e.message, "arguments");
    }
    // Absent arguments and an empty list (Helix, Zed) are an empty input.
    let e = c.execute("forge.plan-write", None).expect_err("missing content");
    assert_eq!(e.code, -32602);
    assert_contains(&e.message, "content");
    assert!(c.execute("forge.tools", None).is_ok());
    assert!(c.execute("forge.tools", Some(json!([]))).is_ok());
}

#[test]
fn an_unknown_command_is_invalid_params() {
    let (_sb, _repo, c) = setup();
    let e = c.execute("forge.no-such-tool", Some(json!([{}]))).expect_err("unknown command");
    assert_eq!(e.code, -32602, "{e}");
    assert_contains(&e.message, "forge.no-such-tool");
}

// --- forge.tools ------------------------------------------------------------------------------------

#[test]
fn forge_tools_offers_every_command_with_a_strict_schema() {
    let (_sb, _repo, mut c) = setup();
    let commands: Vec<String> = c.init_result.take().unwrap()["capabilities"]["executeCommandProvider"]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let out = c.tool_ok("tools", json!({}));
    let offers = out.data["tools"].as_array().expect("data.tools").clone();

    let offered: Vec<String> = offers.iter().map(|o| o["command"].as_str().expect("command").to_string()).collect();
    for cmd in &commands {
        assert!(offered.contains(cmd), "{cmd} has no offer in forge.tools ({offered:?})");
    }
    for cmd in &offered {
        assert!(commands.contains(cmd), "{cmd} is offered but not in executeCommandProvider.commands");
    }
    assert_eq!(out.text.lines().next(), Some(format!("{} tools:", offers.len()).as_str()), "{:?}", out.text);

    for o in &offers {
        let name = o["name"].as_str().expect("name");
        assert_eq!(o["command"], json!(format!("forge.{name}")));
        let description = o["description"].as_str().expect("description");
        assert!(!description.trim().is_empty(), "{name} has no description");
        assert_contains(&out.text, &format!("- {name} (forge.{name}): "));
        let schema = &o["inputSchema"];
        assert_eq!(schema["type"], json!("object"), "{name}: {schema}");
        assert_eq!(schema["additionalProperties"], json!(false), "{name} must reject unknown fields: {schema}");
        let schema_uri = schema["$schema"].as_str().unwrap_or("");
        assert!(schema_uri.contains("2020-12"), "{name}: draft 2020-12 schema, got {schema_uri:?}");

        // The parser agrees with the schema: an unknown field is rejected, naming it.
        match c.tool(name, json!({ "zz_unknown_field": 1 })) {
            Err(e) if e.code == -32602 => assert_contains(&e.message, "zz_unknown_field"),
            Err(e) if e.code == 1001 => {} // the tool is not available to this agent at all
            other => panic!("{name} accepted an unknown field: {other:?}"),
        }
    }

    // The documented plan tool arguments are in the schemas.
    let props = |name: &str| -> Vec<String> {
        let o = offers.iter().find(|o| o["name"] == json!(name)).unwrap_or_else(|| panic!("{name} offered"));
        o["inputSchema"]["properties"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
    };
    for f in ["offset", "limit", "count", "pattern", "loop_name", "session_id", "recent"] {
        assert!(props("plan-read").contains(&f.to_string()), "plan-read.{f}");
    }
    for f in ["content", "session_id"] {
        assert!(props("plan-write").contains(&f.to_string()), "plan-write.{f}");
    }
    for f in ["oldString", "newString", "replaceAll", "session_id"] {
        assert!(props("plan-edit").contains(&f.to_string()), "plan-edit.{f}");
    }
    let write = offers.iter().find(|o| o["name"] == json!("plan-write")).unwrap();
    assert_eq!(write["inputSchema"]["required"], json!(["content"]));
}

/// The server keeps the plans it wrote and read (forge_store::plans::cache); a write by
/// another process, and a read through a stale snapshot, must never be answered from it.
#[test]
fn another_process_writing_the_plan_is_seen_by_the_next_read() {
    let (sb, repo, c) = setup();
    let session = c.session_id();
    let uri = format!("forge://plan/session/{session}.md");
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nFirst words.\n" }));
    for _ in 0..2 {
        assert!(c.tool_ok("plan-read", json!({})).text.contains("First words."));
        assert!(c.content(&uri).unwrap().contains("First words."));
    }
    let edit = sb
        .call("plan-edit")
        .input(json!({ "oldString": "First words.", "newString": "Second words." }))
        .session(&session)
        .cwd(&repo.path)
        .run();
    assert_eq!(edit.code, 0, "{edit:?}");
    let read = c.tool_ok("plan-read", json!({}));
    assert!(read.text.contains("Second words.") && !read.text.contains("First words."), "{}", read.text);
    assert!(c.content(&uri).unwrap().contains("Second words."));
    // And the other way: this server's write is what the other process reads.
    c.tool_ok("plan-edit", json!({ "oldString": "Second words.", "newString": "Third words." }));
    let out = sb.call("plan-read").session(&session).cwd(&repo.path).run();
    assert!(out.stdout.contains("Third words."), "{out:?}");
    assert!(c.tool_ok("plan-read", json!({})).text.contains("Third words."));
}

/// A session id names its plan's `.forge/view/` copy (`<id>.md`): one too long for a file
/// name is refused where it comes in, with why (before, it was taken, and every connection
/// that uses the copies was told "File name too long" about a copy never written).
#[test]
fn a_session_id_too_long_for_a_file_name_is_refused() {
    let (sb, repo, c) = setup();
    let long = "s".repeat(300);
    let e = c.tool_err("plan-write", json!({ "content": "# P", "session_id": long }));
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("session ids name files"), "{e}");
    let other = sb.stdio();
    let e = other.initialize(&Init::new(&repo.path).session(&long)).expect_err("refused");
    assert!(e.message.contains("session ids name files"), "{e}");
}

/// A plan path written `~/<project>/…` is stored relative to the project when `~` is the
/// home directory by the password database (HOME unset or relative): the sanitizing read
/// `HOME` itself, and kept such paths as written (a review).
#[test]
fn plan_paths_under_the_home_are_sanitized_without_home() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let parent = repo.path.parent().expect("the repository's folder").display().to_string();
    let name = repo.path.file_name().expect("the repository's name").to_string_lossy().to_string();
    // Writes `plan` for `session` with `home` as HOME (and `passwd` standing in for the
    // password database's home), and reads back what was stored.
    let stored = |session: &str, plan: String, home: &str, passwd: &str| {
        let out = sb
            .call("plan-write")
            .session(session)
            .env("HOME", home)
            .env("FORGE_TEST_PASSWD_HOME", passwd)
            .input(json!({ "content": plan }))
            .cwd(&repo.path)
            .run();
        assert_eq!(out.code, 0, "{out:?}");
        sb.call("plan-read").session(session).input(json!({})).cwd(&repo.path).run()
    };
    let out = stored(
        "ses_home",
        format!("# Plan\n\nEdit ~/{name}/src/a.rs and {}/src/b.rs.\n", repo.path.display()),
        "",
        &parent,
    );
    assert!(out.stdout.contains("Edit src/a.rs and src/b.rs."), "{out:?}");
    // HOME a link to the folder: the same home directory.
    let link = sb.root.join("home-link");
    std::os::unix::fs::symlink(repo.path.parent().unwrap(), &link).unwrap();
    let out = stored("ses_link", format!("# Plan\n\nEdit ~/{name}/src/c.rs.\n"), &link.display().to_string(), "");
    assert!(out.stdout.contains("Edit src/c.rs."), "{out:?}");
}
