//! `forge.interview-submit-state` (PROTOCOL.md 10.3) over the real binary: the state is
//! stored per session without being echoed, diffs apply to the stored spec (a diff that
//! does not apply names the hunk and changes nothing), and the state is the document
//! `forge://interview/<sessionId>.md` (refreshed, listed in the index). `forge-lsp call`
//! reaches the same tool.

mod common;

use common::*;
use serde_json::json;

const SPEC: &str =
    "# Spec: export\n\nGoal: CSV export of invoices.\n\n## Decisions\n\n- format: CSV\n- encoding: UTF-8\n";

#[test]
fn interview_state_is_stored_diffed_and_served_as_a_document() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let sid = c.session_id();
    let uri = format!("forge://interview/{sid}.md");

    // The first turn must carry the spec.
    let e = c.tool_err("interview-submit-state", json!({ "status": "starting", "diff": "@@ -1 +1 @@\n-a\n+b\n" }));
    // The input matches the schema: semantically invalid (PROTOCOL.md §3).
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("first turn must carry the full `spec`"), "{e}");
    let e = c.content(&uri).expect_err("nothing stored yet");
    assert_eq!(e.code, 1002, "{e}");

    let mark = c.mark();
    let out = c.tool_ok(
        "interview-submit-state",
        json!({ "status": "kickoff", "spec": SPEC, "questions": ["Which delimiter?", "Include drafts?"] }),
    );
    // Not echoed: the confirmation is short and holds none of the spec.
    assert!(!out.text.contains("CSV export") && !out.text.contains("delimiter"), "{}", out.text);
    assert!(out.text.contains("turn 1") && out.text.contains(&uri), "{}", out.text);
    assert_eq!(out.data["turn"], 1);
    assert!(c.wait_refresh(mark, &uri, WAIT).is_some(), "refresh of {uri}: {:?}", c.refreshed_uris());
    let doc = c.content(&uri).expect("interview document");
    assert!(doc.starts_with(&format!("# Interview {sid}\n")), "{doc}");
    assert_contains(&doc, "Status: kickoff");
    assert_contains(&doc, "1. Which delimiter?\n2. Include drafts?");
    assert_contains(&doc, SPEC.trim_end());

    // A later turn: a unified diff against the stored spec, new questions.
    let diff =
        "--- a/spec.md\n+++ b/spec.md\n@@ -7,2 +7,3 @@\n - format: CSV\n+- delimiter: semicolon\n - encoding: UTF-8\n";
    let out = c.tool_ok(
        "interview-submit-state",
        json!({ "status": "delimiter decided", "diff": diff, "questions": ["Include drafts?"] }),
    );
    assert!(out.text.contains("turn 2"), "{}", out.text);
    assert!(out.text.contains(", 1 open question)"), "review YP: one question: {}", out.text);
    assert!(!out.text.contains("semicolon"), "{}", out.text);
    let doc = c.content(&uri).unwrap();
    assert_contains(&doc, "- format: CSV\n- delimiter: semicolon\n- encoding: UTF-8");
    assert_contains(&doc, "Status: delimiter decided");
    assert!(!doc.contains("Which delimiter?"), "{doc}");

    // A diff that does not apply names the hunk and stores nothing.
    let bad =
        "@@ -1 +1 @@\n-# Spec: export\n+# Spec: CSV export\n@@ -8 +9 @@\n-- encoding: Latin-1\n+- encoding: ASCII\n";
    let e = c.tool_err("interview-submit-state", json!({ "status": "oops", "diff": bad }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("hunk 2 (diff line 4"), "{e}");
    assert!(e.message.contains("nothing was stored"), "{e}");
    let after = c.content(&uri).unwrap();
    assert_eq!(after, doc, "a refused diff must change nothing");

    // Bad input is named: -32602 when it does not match the schema, else 1006.
    for (input, needle, code) in [
        (json!({ "status": "" }), "`status`", 1006),
        (json!({ "status": "a\nb" }), "one line", 1006),
        (json!({ "status": "a\rb" }), "one line", 1006),
        (json!({ "status": "a\u{2028}b" }), "one line", 1006),
        (json!({ "status": "x".repeat(5000) }), "at most 4096", 1006),
        (json!({ "status": "x", "questions": vec!["q"; 101] }), "at most 100", 1006),
        (json!({ "status": "x", "questions": ["ok", "q".repeat(20_000)] }), "questions[1]", 1006),
        // A diff that removes every line would store an empty spec.
        (json!({ "status": "x", "diff": whole_removal(&c, &uri) }), "leave the spec empty", 1006),
        (json!({ "status": "x", "spec": "a", "diff": "@@ -1 +1 @@\n-a\n+b\n" }), "not both", 1006),
        (json!({ "status": "x", "questions": ["ok", " "] }), "questions[1]", 1006),
        (json!({ "status": "x", "bogus": 1 }), "bogus", -32602),
        (json!({ "status": 3 }), "status", -32602),
    ] {
        let e = c.tool_err("interview-submit-state", input);
        assert_eq!(e.code, code, "{e}");
        assert!(e.message.contains(needle), "{needle}: {e}");
    }

    // The index lists the interview.
    let index = c.content(INDEX_URI).unwrap();
    assert_contains(&index, &format!("[session {sid}]({uri}) · turn 2"));

    // `forge-lsp call` (in-process or through the server) stores per session too.
    let r = sb
        .call("interview-submit-state")
        .cwd(&repo.path)
        .session("ses_cli_interview")
        .input(json!({ "status": "from the shell", "spec": "# Other\n" }))
        .run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("turn 1"), "{}", r.stdout);
    let other = c.content("forge://interview/ses_cli_interview.md").unwrap();
    assert_contains(&other, "Status: from the shell");
    assert_contains(&other, "# Other");
    // Sessions do not share state.
    assert_contains(&c.content(&uri).unwrap(), "delimiter decided");
    c.shutdown_exit();
}

/// A diff that removes every line of the interview's stored spec (read from its document).
fn whole_removal(c: &Client, uri: &str) -> String {
    let doc = c.content(uri).expect("the interview document");
    let spec = doc.split("## Spec\n\n").nth(1).unwrap_or_default();
    let spec = spec.trim_end_matches('\n');
    let lines: Vec<&str> = spec.split('\n').collect();
    let mut d = format!("@@ -1,{} +0,0 @@\n", lines.len());
    for l in lines {
        d.push_str(&format!("-{l}\n"));
    }
    d
}
