//! Plans as virtual documents (PROTOCOL.md §4): `workspace/textDocumentContent`, refreshes,
//! document symbols, folding ranges, code lenses, structure warnings as diagnostics, open
//! buffers, and the materialized read-only copies for clients without virtual documents.

mod common;

use std::time::Instant;

use common::*;
use serde_json::{json, Value};

fn client(sb: &Sandbox, repo: &GitRepo, init: Init) -> Client {
    let mut c = sb.stdio();
    let _ = repo;
    c.init(&init);
    c
}

/// The 0-based index of the first line of `text` equal to `line`.
fn line_of(text: &str, line: &str) -> usize {
    text.split('\n').position(|l| l == line).unwrap_or_else(|| panic!("{line:?} not in the plan"))
}

fn doc(uri: &str) -> Value {
    json!({ "textDocument": { "uri": uri } })
}

fn symbol_names(symbols: &Value) -> Vec<String> {
    symbols.as_array().expect("symbols").iter().map(|s| s["name"].as_str().expect("name").to_string()).collect()
}

#[test]
fn text_document_content_serves_session_plans_and_the_index() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let sid = c.session_id();
    let uri = session_plan_uri(&sid);

    let e = c.content(&uri).expect_err("no plan yet");
    assert_eq!(e.code, 1002, "{e}");
    let index = c.content(INDEX_URI).expect("index");
    assert!(index.starts_with(&format!("# Forge: project {}", repo.root_commit)), "{index}");

    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    assert_eq!(c.content(&uri).expect("plan document"), GOOD_PLAN);
    let index = c.content(INDEX_URI).expect("index");
    assert_contains(&index, &format!("[session: {sid}]({uri})"));
    assert_contains(&index, "# Add OAuth login");

    for bad in [
        "forge://nope.md",
        "forge://plan/session/ses_nobody.md",
        "forge://plan/loop/no-such-loop.md",
        "forge://loop/no-such-loop/status.md",
        "forge://loop/no-such-loop/section/0.md",
        "forge://plan/session/.md",
        "forge://plan/session/x.txt",
        "file:///etc/passwd",
    ] {
        let e = c.content(bad).expect_err(bad);
        assert_eq!(e.code, 1002, "{bad}: {e}");
        assert_eq!(e.kind(), Some("not_found"), "{bad}: {e}");
    }
}

#[test]
fn a_plan_write_refreshes_the_plan_document_and_the_index() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());

    let mark = c.mark();
    let sent = Instant::now();
    c.tool_ok("plan-write", json!({ "content": "# First version" }));
    let r = c.wait_refresh(mark, &uri, WAIT).unwrap_or_else(|| {
        panic!("no refresh of {uri}; got {:?}{}", c.refreshed_uris(), c.diagnostics());
    });
    println!("refresh of the plan after {:?}", r.at.duration_since(sent));
    assert_eq!(r.params(), &json!({ "uri": uri }));
    assert!(c.wait_refresh(mark, INDEX_URI, WAIT).is_some(), "index refresh: {:?}", c.refreshed_uris());
    assert_eq!(c.content(&uri).unwrap(), "# First version");

    // Edits refresh too, and the document then shows the new text.
    let mark = c.mark();
    c.tool_ok("plan-edit", json!({ "oldString": "First", "newString": "Second" }));
    assert!(c.wait_refresh(mark, &uri, WAIT).is_some(), "{:?}", c.refreshed_uris());
    assert_eq!(c.content(&uri).unwrap(), "# Second version");

    // A rejected write announces nothing.
    let mark = c.mark();
    c.tool_err("plan-write", json!({ "content": "  " }));
    c.tool_ok("plan-write", json!({ "content": "# Second version" })); // identical: no write
    assert!(c.wait_refresh(mark, &uri, QUIET).is_none(), "nothing changed, no refresh");
}

#[test]
fn clients_without_the_capability_get_no_refresh_requests() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut init = Init::new(&repo.path).text_document_content(false);
    init.config = Some(json!({ "documents": { "materialize": false } }));
    let c = client(&sb, &repo, init);
    c.tool_ok("plan-write", json!({ "content": "# Plan" }));
    // The tool's own answer comes after the write; give announcements a moment anyway.
    let refresh =
        c.wait_server_request_since(Mark::default(), QUIET, |r| r.method().ends_with("textDocumentContent/refresh"));
    assert!(refresh.is_none(), "{:?}", c.server_requests());
    assert!(!repo.path.join(".forge").exists(), "materialize is off");
}

#[test]
fn document_symbols_folding_ranges_and_code_lenses_of_a_plan() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));

    let symbols = c.request_ok("textDocument/documentSymbol", doc(&uri));
    let names = symbol_names(&symbols);
    let sections: Vec<&String> = names.iter().filter(|n| n.starts_with(|ch: char| ch.is_ascii_digit())).collect();
    assert_eq!(sections, ["1. Phase 1: token storage", "2. Phase 2: login flow"], "{names:?}");
    for trailing in ["Objective", "Decisions", "Conventions", "Key Context"] {
        assert!(names.iter().any(|n| n == trailing), "{trailing} missing from {names:?}");
    }
    let pos = |n: &str| names.iter().position(|x| x == n).unwrap();
    assert!(pos("Objective") < pos("1. Phase 1: token storage"));
    assert!(pos("2. Phase 2: login flow") < pos("Decisions"));

    let markers: Vec<usize> =
        GOOD_PLAN.split('\n').enumerate().filter(|(_, l)| *l == "<!-- forge-section -->").map(|(i, _)| i).collect();
    let phase1 = line_of(GOOD_PLAN, "## Phase 1: token storage");
    let phase2 = line_of(GOOD_PLAN, "## Phase 2: login flow");
    let decisions = line_of(GOOD_PLAN, "## Decisions");
    // A client that declared no hierarchical support gets `SymbolInformation`s: the same
    // names and ranges, as locations in the document (LSP 3.17; review BB).
    let flat = client(&sb, &repo, Init { flat_symbols: true, ..Init::new(&repo.path) });
    let listed = flat.request_ok("textDocument/documentSymbol", doc(&uri));
    assert_eq!(symbol_names(&listed), names);
    for (f, h) in listed.as_array().unwrap().iter().zip(symbols.as_array().unwrap()) {
        assert_eq!(f["location"]["uri"], json!(uri), "{f}");
        assert_eq!(f["location"]["range"], h["range"], "{f}");
        assert!(f.get("selectionRange").is_none() && f.get("range").is_none(), "{f}");
    }
    let s1 = &symbols[pos("1. Phase 1: token storage")];
    assert_eq!(s1["range"]["start"]["line"], json!(markers[0]), "{s1}");
    assert_eq!(s1["selectionRange"]["start"]["line"], json!(phase1), "{s1}");
    let s2 = &symbols[pos("2. Phase 2: login flow")];
    assert_eq!(s2["range"]["start"]["line"], json!(markers[1]), "{s2}");
    assert_eq!(s2["selectionRange"]["start"]["line"], json!(phase2), "{s2}");
    assert!(
        s2["range"]["end"]["line"].as_u64().unwrap() < decisions as u64,
        "section 2 ends before the trailing headings"
    );

    let folds = c.request_ok("textDocument/foldingRange", doc(&uri));
    let folds = folds.as_array().expect("folding ranges");
    // One fold per section: from its marker to its last non-blank line.
    let last_of_phase1 = line_of(GOOD_PLAN, "- cargo test -p auth");
    let last_of_phase2 = line_of(GOOD_PLAN, "- cargo test -p auth login");
    for (start, end) in [(markers[0], last_of_phase1), (markers[1], last_of_phase2)] {
        assert!(
            folds.iter().any(|f| f["startLine"] == json!(start) && f["endLine"] == json!(end)),
            "no fold {start}-{end} in {folds:?}"
        );
    }

    let lenses = c.request_ok("textDocument/codeLens", doc(&uri));
    let lenses = lenses.as_array().expect("code lenses");
    let exec: Vec<&Value> = lenses.iter().filter(|l| l["command"]["title"] == json!("Execute plan")).collect();
    assert_eq!(exec.len(), 1, "{lenses:?}");
    assert_eq!(exec[0]["command"]["command"], json!("forge.execute-plan"));
    let args = &exec[0]["command"]["arguments"][0];
    assert_eq!(args["plan"], json!(GOOD_PLAN), "{args}");
    assert!(args["title"].as_str().is_some_and(|t| !t.is_empty()), "{args}");

    // Not a plan document: nothing.
    for method in ["textDocument/documentSymbol", "textDocument/foldingRange", "textDocument/codeLens"] {
        let r = c.request_ok(method, doc(INDEX_URI));
        assert!(r.is_null() || r == json!([]), "{method} on the index: {r}");
        let r = c.request_ok(method, doc(&file_uri(&repo.path.join("README.md"))));
        assert!(r.is_null() || r == json!([]), "{method} on a file: {r}");
    }
}

/// The structure of a large plan is computed off the connection's task: a
/// `$/cancelRequest` sent while documentSymbol computes is read, so the request is answered
/// -32800, and a request behind it is answered. Before, the computation held the
/// connection's one task: the cancel was read only after the symbols had gone out in full.
#[test]
fn a_large_plans_symbols_and_folding_can_be_cancelled() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let mut plan = String::from("## Objective\nmany sections\n\nLoop Name: big\n\n");
    for i in 0..40_000 {
        plan.push_str(&format!("<!-- forge-section -->\n## Phase {i}: part {i}\nbody {i}\n\n"));
    }
    c.tool_ok("plan-write", json!({ "content": plan }));
    let uri = session_plan_uri(&c.session_id());
    // The computation takes seconds here (4 s for the symbols in a debug build); the
    // cancels come once it has surely started, so that it is the computation that must
    // let them through.
    let symbols = c.send_request("textDocument/documentSymbol", doc(&uri));
    let folding = c.send_request("textDocument/foldingRange", doc(&uri));
    std::thread::sleep(std::time::Duration::from_millis(300));
    c.notify("$/cancelRequest", json!({ "id": symbols }));
    c.notify("$/cancelRequest", json!({ "id": folding }));
    let tools = c.send_request("workspace/executeCommand", json!({ "command": "forge.tools", "arguments": [{}] }));
    let r = c.wait_response(symbols, std::time::Duration::from_secs(120));
    let shown = r.to_string().chars().take(200).collect::<String>();
    assert_eq!(r["error"]["code"], json!(-32800), "documentSymbol was not cancelled: {shown}");
    let r = c.wait_response(folding, std::time::Duration::from_secs(120));
    assert!(
        r.get("result").is_some() || r["error"]["code"] == json!(-32800),
        "{}",
        r.to_string().chars().take(200).collect::<String>()
    );
    let r = c.wait_response(tools, std::time::Duration::from_secs(120));
    assert!(r.get("result").is_some(), "{r}");
}

#[test]
fn document_features_use_utf8_columns_when_negotiated() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let plan = "## Objective\nÉtendre — ok\n\nLoop Name: utf\n\n<!-- forge-section -->\n## Phase 1: café ☕\nbody";
    let mut ends = vec![];
    for utf8 in [false, true] {
        let c = client(&sb, &repo, Init::new(&repo.path).utf8(utf8));
        c.tool_ok("plan-write", json!({ "content": plan }));
        let symbols = c.request_ok("textDocument/documentSymbol", doc(&session_plan_uri(&c.session_id())));
        let s = symbols.as_array().unwrap().iter().find(|s| s["name"] == json!("1. Phase 1: café ☕")).cloned();
        let s = s.unwrap_or_else(|| panic!("{symbols}"));
        ends.push(s["selectionRange"]["end"]["character"].clone());
    }
    let heading = "## Phase 1: café ☕";
    assert_eq!(ends, [json!(heading.encode_utf16().count()), json!(heading.len())]);
}

#[test]
fn structure_warnings_are_published_as_diagnostics() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());
    let out = c.tool_ok("plan-write", json!({ "content": "# Quick idea\n\nJust do it." }));
    let expected: Vec<String> =
        out.data["warnings"].as_array().unwrap().iter().map(|w| w["message"].as_str().unwrap().to_string()).collect();
    assert_eq!(expected.len(), 4, "{}", out.text);

    // Fetching the document makes the client "know" it: its warnings follow.
    let mark = c.mark();
    c.content(&uri).unwrap();
    let diags = c.wait_diagnostics_since(mark, &uri, WAIT, |d| !d.is_empty()).unwrap_or_else(|| {
        panic!("no diagnostics on {uri}: {:?}", c.notifications_of("textDocument/publishDiagnostics"))
    });
    let messages: Vec<&str> = diags.iter().map(|d| d["message"].as_str().unwrap()).collect();
    assert_eq!(messages, expected);
    for d in &diags {
        assert_eq!(d["severity"], json!(2), "{d}");
        assert_eq!(d["source"], json!("forge"), "{d}");
        assert!(d["range"]["start"]["line"].is_u64(), "{d}");
    }

    // A new version of the plan without warnings clears them.
    let mark = c.mark();
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    assert!(
        c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.is_empty()).is_some(),
        "cleared: {:?}",
        c.notifications_of("textDocument/publishDiagnostics")
    );
}

/// An empty list of plan warnings is not sent again when the client was last sent an
/// empty one (a plan edited without warnings before or after); a list with positions is
/// (eglot keeps positions as offsets a text change makes wrong). Closing the document
/// forgets what was sent.
#[test]
fn an_empty_list_of_warnings_is_not_sent_twice() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());
    let on_uri = |c: &Client, since: Mark| -> Vec<usize> {
        c.notifications_since(since, "textDocument/publishDiagnostics")
            .iter()
            .filter(|p| p["uri"] == json!(uri))
            .map(|p| p["diagnostics"].as_array().map_or(0, Vec::len))
            .collect()
    };
    let quick = |n: usize| format!("# Quick idea\n\nJust do it{}.", "!".repeat(n));
    c.tool_ok("plan-write", json!({ "content": quick(0) }));
    let mark = c.mark();
    c.content(&uri).unwrap();
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == 4).expect("the warnings");

    // The same warnings on another text are sent again (their positions may have moved).
    let mark = c.mark();
    c.tool_ok("plan-write", json!({ "content": quick(1) }));
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == 4).expect("sent again");

    // Cleared, then another text without warnings, then warnings: the empty list went out
    // once (the sends of one document's warnings keep the order of its texts).
    let mark = c.mark();
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.is_empty()).expect("cleared");
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN.replace("Add the login handler.", "Add the handler.") }));
    c.wait_refresh(mark, &uri, WAIT).expect("announced");
    c.content(&uri).unwrap();
    c.tool_ok("plan-write", json!({ "content": quick(2) }));
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == 4).expect("the warnings again");
    assert_eq!(on_uri(&c, mark), vec![0, 4], "one empty list, then the warnings");

    // Closed and read again: what was sent is forgotten.
    let mark = c.mark();
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.is_empty()).expect("cleared");
    c.did_close(&uri);
    let mark = c.mark();
    c.content(&uri).unwrap();
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.is_empty()).expect("sent again after a close");
}

/// Closing a plan buffer that held unsaved text clears its warnings (they were of that
/// text; before, they stayed, and VS Code keeps a closed document's diagnostics).
#[test]
fn closing_a_plan_buffer_clears_its_warnings() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    c.did_open(&uri, "# Quick idea\n\nJust do it.", 1);
    c.wait_diagnostics_since(Mark::default(), &uri, WAIT, |d| d.len() == 4).expect("the open buffer's warnings");
    let mark = c.mark();
    c.did_close(&uri);
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.is_empty()).expect("cleared on close");
    // A later change of the plan does not bring them back on the closed document (review
    // YC: it did, at the next plan-edit); opening it does.
    c.tool_ok("plan-write", json!({ "content": "# Quick idea\n\nJust do it." }));
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(c.latest_diagnostics(&uri).unwrap_or_default().len(), 0, "the closed document shows no warnings");
    let mark = c.mark();
    c.did_open(&uri, "# Quick idea\n\nJust do it.", 2);
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == 4).expect("published again on opening");
}

/// A burst of edits to an open plan: whatever order the checks finish in, the warnings the
/// client is left with are the last text's (an older text's are never sent after a newer's).
#[test]
fn after_a_burst_of_edits_the_warnings_are_the_last_texts() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    let quick = "# Quick idea\n\nJust do it.";
    c.did_open(&uri, quick, 1);
    c.wait_diagnostics_since(Mark::default(), &uri, WAIT, |d| d.len() == 4).expect("the open buffer's warnings");
    for (round, (last, expected)) in [(GOOD_PLAN, 0), (quick, 4), (GOOD_PLAN, 0)].into_iter().enumerate() {
        let mark = c.mark();
        let base = 2 + 100 * round as i32;
        for v in 0..40 {
            let text = if v % 2 == 0 { quick.to_string() } else { GOOD_PLAN.replace("login", &format!("login {v}")) };
            c.did_change(&uri, &text, base + v);
        }
        c.did_change(&uri, last, base + 50);
        c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == expected).expect("the last text's warnings");
        // Settled: nothing later replaces them.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let latest = c.latest_diagnostics(&uri).unwrap_or_default();
        assert_eq!(latest.len(), expected, "the client is left with the last text's warnings: {latest:?}");
    }
}

#[test]
fn a_warning_about_a_section_points_at_its_line() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());
    let plan = GOOD_PLAN.replace("### Edits\n- Add the login handler.\n", "");
    let out = c.tool_ok("plan-write", json!({ "content": plan }));
    assert_contains(&out.text, "\nWarnings:\n  - Section 2 is missing required headings: Edits.");
    let mark = c.mark();
    c.did_open(&uri, &plan, 1);
    let diags = c.wait_diagnostics_since(mark, &uri, WAIT, |d| !d.is_empty()).expect("diagnostics after didOpen");
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["message"], json!("Section 2 is missing required headings: Edits."));
    let line = diags[0]["range"]["start"]["line"].as_u64().unwrap() as usize;
    let markers: Vec<usize> =
        plan.split('\n').enumerate().filter(|(_, l)| *l == "<!-- forge-section -->").map(|(i, _)| i).collect();
    let decisions = line_of(&plan, "## Decisions");
    assert!(line >= markers[1] && line < decisions, "line {line} is inside section 2 ({}..{decisions})", markers[1]);
}

#[test]
fn open_buffers_drive_symbols_and_diagnostics() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let uri = session_plan_uri(&c.session_id());
    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));

    // didOpen with unsaved text: symbols follow the buffer, not the store.
    let buffer = GOOD_PLAN.replace("## Phase 2: login flow", "## Phase 2: sign-in flow");
    let mark = c.mark();
    c.did_open(&uri, &buffer, 1);
    let names = symbol_names(&c.request_ok("textDocument/documentSymbol", doc(&uri)));
    assert!(names.contains(&"2. Phase 2: sign-in flow".to_string()), "{names:?}");
    assert!(c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.is_empty()).is_some(), "no warnings on open");

    // didChange (full sync) to a plan without structure: symbols and diagnostics follow.
    let mark = c.mark();
    c.did_change(&uri, "# Scratch\n\nnothing yet", 2);
    let names = symbol_names(&c.request_ok("textDocument/documentSymbol", doc(&uri)));
    assert!(!names.iter().any(|n| n.starts_with("1. ")), "{names:?}");
    let diags = c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == 4).expect("warnings of the buffer");
    assert!(diags.iter().all(|d| d["severity"] == json!(2) && d["source"] == json!("forge")), "{diags:?}");

    // A change with a range (the server asks for full sync; some clients send ranges
    // anyway) is applied as an edit, in order, not taken for the whole text: the first
    // replaces "Scratch" on line 0, the second inserts a line at the end; positions are
    // UTF-16 units (the title's "é" is one).
    c.notify(
        "textDocument/didChange",
        json!({
            "textDocument": { "uri": uri, "version": 3 },
            "contentChanges": [
                { "range": { "start": { "line": 0, "character": 2 }, "end": { "line": 0, "character": 9 } }, "text": "Café" },
                { "range": { "start": { "line": 2, "character": 11 }, "end": { "line": 2, "character": 11 } }, "text": "\n## Après" },
                { "range": { "start": { "line": 0, "character": 6 }, "end": { "line": 0, "character": 6 } }, "text": "!" }
            ]
        }),
    );
    let symbols = c.request_ok("textDocument/documentSymbol", doc(&uri));
    // The buffer is now "# Café!\n\nnothing yet\n## Après": the preamble's title line is 7
    // units long, its body ends at line 2, and the new heading is line 3.
    let range = |s: &Value, k: &str| (s[k]["end"]["line"].clone(), s[k]["end"]["character"].clone());
    let names = symbol_names(&symbols);
    assert_eq!(names, ["Preamble", "Après"], "{symbols}");
    assert_eq!(range(&symbols[0], "selectionRange"), (json!(0), json!(7)), "{symbols}");
    assert_eq!(range(&symbols[0], "range"), (json!(2), json!(11)), "{symbols}");
    assert_eq!(range(&symbols[1], "range"), (json!(3), json!(8)), "{symbols}");
    // A range the types cannot read (a negative line) is dropped, not taken for the whole
    // text (the change type is an untagged union: it read as a whole-text change).
    c.notify(
        "textDocument/didChange",
        json!({
            "textDocument": { "uri": uri, "version": 4 },
            "contentChanges": [{ "range": { "start": { "line": -1, "character": 0 }, "end": { "line": 0, "character": 0 } }, "text": "X" }]
        }),
    );
    let again = c.request_ok("textDocument/documentSymbol", doc(&uri));
    assert_eq!(again, symbols, "a malformed change replaced the buffer");

    // A stale version is ignored.
    c.did_change(&uri, &GOOD_PLAN.replace("Phase 1: token storage", "Phase 1: STALE"), 1);
    let names = symbol_names(&c.request_ok("textDocument/documentSymbol", doc(&uri)));
    assert!(!names.iter().any(|n| n.contains("STALE")), "{names:?}");

    // The buffer is not saved by editing: the stored plan is unchanged.
    assert_eq!(c.content(&uri).unwrap(), GOOD_PLAN);

    // Closing returns to the stored plan.
    c.did_close(&uri);
    let names = symbol_names(&c.request_ok("textDocument/documentSymbol", doc(&uri)));
    assert!(names.contains(&"2. Phase 2: login flow".to_string()), "{names:?}");

    // Saving (plan-write with session_id) stores the buffer.
    c.tool_ok("plan-write", json!({ "content": buffer, "session_id": c.session_id() }));
    assert_eq!(c.content(&uri).unwrap(), buffer);
}

#[test]
fn clients_without_virtual_documents_get_read_only_copies() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path).text_document_content(false));
    let sid = c.session_id();
    let view = repo.path.join(format!(".forge/view/plan/session/{sid}.md"));
    let index = repo.path.join(".forge/view/index.md");

    c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
    let ok = wait_for(WAIT, || (std::fs::read_to_string(&view).ok().as_deref() == Some(GOOD_PLAN)).then_some(()));
    assert!(ok.is_some(), "no copy at {}{}", view.display(), c.diagnostics());
    let mode = std::fs::metadata(&view).unwrap().permissions().mode();
    assert_eq!(mode & 0o222, 0, "the copy is read-only: {mode:o}");
    // The copies hold what the private database does: their folder is the user's alone.
    let dir = std::fs::metadata(repo.path.join(".forge/view")).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir, 0o700, "the copies' folder: {dir:o}");
    let ok = wait_for(WAIT, || {
        std::fs::read_to_string(&index).ok().filter(|t| t.contains(&format!("session: {sid}"))).map(|_| ())
    });
    assert!(ok.is_some(), "index copy at {}", index.display());

    let exclude = std::fs::read_to_string(repo.path.join(".git/info/exclude")).unwrap();
    assert!(exclude.lines().any(|l| l.trim() == "**/.forge/view/"), "{exclude}");
    assert_eq!(repo.git(&["status", "--porcelain"]), "", "the views do not dirty the repository");

    // The copy follows changes.
    c.tool_ok("plan-edit", json!({ "oldString": "Use the oauth2 crate.", "newString": "Use openidconnect." }));
    let ok =
        wait_for(WAIT, || std::fs::read_to_string(&view).ok().filter(|t| t.contains("Use openidconnect.")).map(|_| ()));
    assert!(ok.is_some(), "updated copy");

    // Editor features work on the copy's file URI.
    let names = symbol_names(&c.request_ok("textDocument/documentSymbol", doc(&file_uri(&view))));
    assert!(names.contains(&"1. Phase 1: token storage".to_string()), "{names:?}");

    // No refresh requests: the client did not declare the capability.
    assert!(c.refreshed_uris().is_empty(), "{:?}", c.refreshed_uris());
}

#[test]
fn clients_with_virtual_documents_get_no_copies_by_default() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path));
    let mark = c.mark();
    c.tool_ok("plan-write", json!({ "content": "# Plan" }));
    assert!(c.wait_refresh(mark, &session_plan_uri(&c.session_id()), WAIT).is_some());
    assert!(c.wait_refresh(mark, INDEX_URI, WAIT).is_some());
    assert!(!repo.path.join(".forge").exists(), "no .forge/view for a client with textDocumentContent");
}

/// A client that names no folder (rootUri null) gets no copies written into the server's
/// working directory, which it never chose (an editor started from the home directory), nor
/// the repository's `info/exclude` touched. Before, `<cwd>/.forge/view/` was written.
#[test]
fn a_client_without_a_folder_gets_no_copies_in_the_working_directory() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let exclude = std::fs::read_to_string(repo.path.join(".git/info/exclude")).unwrap_or_default();
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--data-dir").arg(&sb.data_dir).current_dir(&repo.path);
    });
    c.init(&Init::rootless().text_document_content(false));
    c.tool_ok("plan-write", json!({ "content": "# No folder" }));
    // The tools work (on the working directory's project) and write nothing there.
    let read = c.tool_ok("plan-read", json!({}));
    assert!(read.text.contains("# No folder"), "{}", read.text);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!repo.path.join(".forge").exists(), "copies were written into the working directory");
    assert_eq!(std::fs::read_to_string(repo.path.join(".git/info/exclude")).unwrap_or_default(), exclude);
}

#[test]
fn materialize_can_be_forced_by_configuration() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Init::new(&repo.path).config(json!({ "documents": { "materialize": true } })));
    let view = repo.path.join(format!(".forge/view/plan/session/{}.md", c.session_id()));
    c.tool_ok("plan-write", json!({ "content": "# Forced copy" }));
    let ok = wait_for(WAIT, || (std::fs::read_to_string(&view).ok().as_deref() == Some("# Forced copy")).then_some(()));
    assert!(ok.is_some(), "{}", view.display());
}
