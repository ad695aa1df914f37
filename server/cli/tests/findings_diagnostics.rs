//! Review findings as diagnostics (PROTOCOL.md §6): URIs, ranges in UTF-16 and UTF-8,
//! severity, source, code, message and data; republication on delete; the initial
//! publication (completed loops excluded, loop worktrees and the mirror under the project
//! root); findings written by another process; the `Delete finding` code action; the
//! open findings of `forge://index.md`.

mod common;
mod findings_support;

use std::time::Instant;

use common::*;
use findings_support::*;
use serde_json::{json, Value};

// --- 1. write → diagnostic → delete ---------------------------------------------------------------

#[test]
fn a_finding_is_published_on_its_file_and_cleared_on_delete() {
    let (sb, repo) = setup();
    let rel = "src/dir with space/ü 世.rs";
    let line2 = "    let café = \"naïve\";";
    repo.write(rel, &format!("fn main() {{\n{line2}\n}}\n"));
    let c = connect(&sb, Init::new(&repo.path));
    assert_eq!(position_encoding(&c), "utf-16");

    // The URI is the absolute path, percent-encoded byte by byte.
    let uri = format!("file://{}/src/dir%20with%20space/%C3%BC%20%E4%B8%96.rs", repo.path.display());
    assert_eq!(uri, uri_in(&repo.path, rel));

    let mark = c.mark();
    let out = c.tool_ok(
        "review-write",
        json!({ "file": rel, "line": 2, "severity": "bug", "description": "The name shadows a builtin.",
                "scenario": "Any call of café()." }),
    );
    assert_eq!(out.text, format!("Stored review finding at {rel}:2 (bug)"));
    let bug_id = out.data["finding"]["id"].as_i64().expect("id");
    assert_eq!(out.data["finding"]["file"], json!(rel));
    assert_eq!(out.data["finding"]["line"], json!(2));
    assert_eq!(out.data["finding"]["loopName"], Value::Null);
    assert_eq!(out.data["finding"]["sectionIndex"], Value::Null);

    let diags = expect_count(&c, mark, &uri, 1);
    let d = &diags[0];
    assert_ne!(utf16_len(line2), line2.len() as u64, "the line must tell the encodings apart");
    assert_eq!(range(d), (1, 0, 1, utf16_len(line2)), "whole line 2 in UTF-16: {d}");
    assert_eq!(d["severity"], json!(1), "{d}");
    assert_eq!(d["source"], json!("forge"), "{d}");
    assert_eq!(d["code"], json!(bug_id), "{d}");
    assert_eq!(d["message"], json!("The name shadows a builtin.\n\nScenario: Any call of café()."), "{d}");
    assert_data(d, bug_id, None, None);

    // A warning without a scenario: severity 2, the message is the description alone.
    let mark = c.mark();
    let warn = write_finding(
        &c,
        json!({ "file": rel, "line": 3, "severity": "warning", "description": "Missing newline handling." }),
    );
    let warn_id = warn["id"].as_i64().expect("id");
    let diags = expect_count(&c, mark, &uri, 2);
    let w = by_id(&diags, warn_id);
    assert_eq!(range(&w), (2, 0, 2, 1), "{w}");
    assert_eq!(w["severity"], json!(2), "{w}");
    assert_eq!(w["message"], json!("Missing newline handling."), "{w}");
    assert_data(&w, warn_id, None, None);
    assert_eq!(range(&by_id(&diags, bug_id)), (1, 0, 1, utf16_len(line2)));

    // A client offering utf-8 (another process on the same data directory) gets the
    // same findings at connect time, measured in bytes.
    let mut init8 = Init::new(&repo.path);
    init8.utf8 = true;
    let c8 = connect(&sb, init8);
    assert_eq!(position_encoding(&c8), "utf-8");
    let diags8 = expect_count(&c8, Mark::default(), &uri, 2);
    assert_eq!(range(&by_id(&diags8, bug_id)), (1, 0, 1, line2.len() as u64));
    assert_eq!(range(&by_id(&diags8, warn_id)), (2, 0, 2, 1));

    // Delete: the file is republished, to both clients, finally with an empty list.
    let mark = c.mark();
    let mark8 = c8.mark();
    let del = c.tool_ok("review-delete", json!({ "file": rel, "line": 2 }));
    assert_eq!(del.text, format!("Deleted review finding at {rel}:2"));
    let left = expect_count(&c, mark, &uri, 1);
    assert_eq!(left[0]["code"], json!(warn_id));
    let mark = c.mark();
    c.tool_ok("review-delete", json!({ "file": rel, "line": 3 }));
    expect_count(&c, mark, &uri, 0);
    expect_count(&c8, mark8, &uri, 0);
}

#[test]
fn two_spellings_of_one_path_share_a_uri_and_are_republished_together() {
    let (sb, repo) = setup();
    repo.write("src/a.rs", "first line\nsecond\n");
    let c = connect(&sb, Init::new(&repo.path));
    let uri = uri_in(&repo.path, "src/a.rs");
    let mark = c.mark();
    let plain = write_bug(&c, "src/a.rs", 1)["id"].as_i64().expect("id");
    let dotted = write_bug(&c, "./src/../src/a.rs", 2)["id"].as_i64().expect("id");
    let d = expect_count(&c, mark, &uri, 2);
    assert_eq!(range(&by_id(&d, plain)), (0, 0, 0, 10));
    assert_eq!(range(&by_id(&d, dotted)), (1, 0, 1, 6));
    // Stored under the file's one key (docs/protocol.md): both findings name `src/a.rs`.
    assert_eq!(by_id(&d, dotted)["data"]["file"], json!("src/a.rs"));

    // Deleting under one spelling republishes the URI with the other's finding.
    let mark = c.mark();
    c.tool_ok("review-delete", json!({ "file": "./src/../src/a.rs", "line": 2 }));
    let left = expect_count(&c, mark, &uri, 1);
    assert_eq!(left[0]["code"], json!(plain));
    let mark = c.mark();
    c.tool_ok("review-delete", json!({ "file": "src/a.rs", "line": 1 }));
    expect_count(&c, mark, &uri, 0);
}

/// An editor opened through a link to the project, with a finding stored under the link's
/// spelling before keys were resolved: both of the file's findings arrive in one
/// publication on the link's URI (review YL: two publications of one client URI, the
/// second wiping the first).
#[test]
fn findings_under_two_spellings_of_one_client_uri_are_published_together() {
    let (sb, repo) = setup();
    repo.write("src/a.rs", "one\ntwo\nthree\n");
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("link");
    std::os::unix::fs::symlink(&repo.path, &link).unwrap();
    let old_key = link.join("src/a.rs").display().to_string();
    // A first connection makes the database.
    drop(connect(&sb, Init::new(&repo.path)));
    let old = insert_finding(&sb.db(), &repo.root_commit, "", &old_key, 3, None, "bug", "old link key");
    let c = connect(&sb, Init::new(&link));
    let uri = uri_in(&link, "src/a.rs");
    // The first publication (the old finding alone), then a step of its own for the write.
    expect_count(&c, Mark::default(), &uri, 1);
    let mark = c.mark();
    let new = write_bug(&c, "src/a.rs", 1)["id"].as_i64().expect("id");
    let d = expect_count(&c, mark, &uri, 2);
    by_id(&d, old);
    by_id(&d, new);
    // Deleting one republishes the other, alone, on the same URI.
    let mark = c.mark();
    c.tool_ok("review-delete", json!({ "file": "src/a.rs", "line": 1 }));
    let left = expect_count(&c, mark, &uri, 1);
    assert_eq!(left[0]["code"], json!(old));
}

// --- 2. multi-byte lines -------------------------------------------------------------------------

#[test]
fn ranges_count_emoji_and_cjk_in_the_negotiated_encoding() {
    let (sb, repo) = setup();
    let line1 = "let greeting = \"😀 世界\";";
    repo.write("src/emoji.rs", &format!("{line1}\r\nnext();\r\n"));
    // `let greeting = "` is 16; 😀 is 2 UTF-16 units / 4 bytes; 世界 is 2 units / 6 bytes.
    assert_eq!(utf16_len(line1), 16 + 2 + 1 + 2 + 2);
    assert_eq!(line1.len(), 16 + 4 + 1 + 6 + 2);

    let c16 = connect(&sb, Init::new(&repo.path));
    let mut init8 = Init::new(&repo.path);
    init8.utf8 = true;
    let c8 = connect(&sb, init8);
    assert_eq!(position_encoding(&c16), "utf-16");
    assert_eq!(position_encoding(&c8), "utf-8");

    let uri = uri_in(&repo.path, "src/emoji.rs");
    let (m16, m8) = (c16.mark(), c8.mark());
    let f1 = write_bug(&c16, "src/emoji.rs", 1)["id"].as_i64().expect("id");
    let f2 = write_bug(&c16, "src/emoji.rs", 2)["id"].as_i64().expect("id");

    let d16 = expect_count(&c16, m16, &uri, 2);
    assert_eq!(range(&by_id(&d16, f1)), (0, 0, 0, 23), "UTF-16 end of the emoji line");
    assert_eq!(range(&by_id(&d16, f2)), (1, 0, 1, 7), "the CR of CRLF is not part of the line");
    // The utf-8 client is another process: it learns of the writes through the change feed.
    let d8 = expect_count(&c8, m8, &uri, 2);
    assert_eq!(range(&by_id(&d8, f1)), (0, 0, 0, 29), "UTF-8 end of the emoji line");
    assert_eq!(range(&by_id(&d8, f2)), (1, 0, 1, 7));
}

#[test]
fn an_open_buffer_is_measured_instead_of_the_file_on_disk() {
    let (sb, repo) = setup();
    repo.write("src/open.rs", "short\n");
    let c = connect(&sb, Init::new(&repo.path));
    let uri = uri_in(&repo.path, "src/open.rs");
    let buffer_line = "a much longer line with 😀 in the unsaved buffer";
    c.did_open(&uri, &format!("{buffer_line}\n"), 1);
    let mark = c.mark();
    write_bug(&c, "src/open.rs", 1);
    let d = expect_count(&c, mark, &uri, 1);
    assert_eq!(range(&d[0]), (0, 0, 0, utf16_len(buffer_line)), "measured on the open buffer: {}", d[0]);
    // A change of the buffer and its close move the ranges too (review Z: they kept the
    // opened text's until the next finding was written).
    let mark = c.mark();
    c.did_change(&uri, "eight ch\n", 2);
    let d = expect_count(&c, mark, &uri, 1);
    assert_eq!(range(&d[0]), (0, 0, 0, 8), "measured on the changed buffer: {}", d[0]);
    let mark = c.mark();
    c.did_close(&uri);
    let d = expect_count(&c, mark, &uri, 1);
    assert_eq!(range(&d[0]), (0, 0, 0, 5), "measured on the file once closed: {}", d[0]);
}

// --- 4. a `forge-lsp call` in another process ------------------------------------------------------

#[test]
fn a_finding_written_by_forge_lsp_call_reaches_the_connected_client() {
    let (sb, repo) = setup();
    repo.write("src/call.rs", "fn called() {}\n");
    let c = connect(&sb, Init::new(&repo.path));
    let uri = uri_in(&repo.path, "src/call.rs");

    let mark = c.mark();
    let out = sb
        .call("review-write")
        .input(json!({ "file": "src/call.rs", "line": 1, "severity": "warning", "description": "Written by call." }))
        .cwd(&repo.path)
        .agent("user")
        .run();
    let written = Instant::now();
    assert_eq!(out.code, 0, "{out:?}");
    assert_contains(&out.stdout, "Stored review finding at src/call.rs:1 (warning)");

    let diags = expect_count(&c, mark, &uri, 1);
    let latency = c
        .with_recorded(|r| {
            r.notifications[mark.notifications..]
                .iter()
                .find(|n| n.method() == PUBLISH && n.params()["uri"] == uri)
                .map(|n| n.at)
        })
        .expect("publication")
        .saturating_duration_since(written);
    println!("call took {:?}; diagnostics arrived {latency:?} after the call exited", out.elapsed);
    assert!(latency < std::time::Duration::from_secs(3), "diagnostics took {latency:?}");
    assert_eq!(diags[0]["severity"], json!(2));
    assert_eq!(diags[0]["message"], json!("Written by call."));
    assert_eq!(range(&diags[0]), (0, 0, 0, 14));
}

// --- 5. initial publication, loops, worktrees and the mirror ----------------------------------------

struct LoopFixtures {
    plain_uri: String,
    done_uri: String,
    wt_uri: String,
    root_loop_uri: String,
    wt_line: &'static str,
    root_line: &'static str,
    plain_id: i64,
    live_id: i64,
}

/// Findings stored before any client connects: one outside loops (written by an
/// in-process `forge-lsp call`), one of a completed loop, one of a running loop whose
/// worktree holds a different version of the file.
fn loop_fixtures(sb: &Sandbox, repo: &GitRepo) -> LoopFixtures {
    let wt = sb.mkdir("worktrees/live-loop");
    let root_line = "root version";
    let wt_line = "worktree version, longer";
    repo.write("src/plain.rs", "plain();\n");
    repo.write("src/done.rs", "done();\n");
    repo.write("src/loop.rs", &format!("{root_line}\n"));
    std::fs::create_dir_all(wt.join("src")).expect("mkdir");
    std::fs::write(wt.join("src/loop.rs"), format!("{wt_line}\n")).expect("write");

    // No server runs yet: the call executes in-process and creates the schema.
    let out = sb
        .call("review-write")
        .input(json!({ "file": "src/plain.rs", "line": 1, "severity": "bug", "description": "Plain finding." }))
        .cwd(&repo.path)
        .json()
        .run();
    assert_eq!(out.code, 0, "{out:?}");
    let plain: Value = serde_json::from_str(&out.stdout).expect("--json output");
    let plain_id = plain.pointer("/data/finding/id").and_then(Value::as_i64).expect("finding id");

    let db = sb.db();
    let p = repo.root_commit.as_str();
    let done_wt = sb.mkdir("worktrees/done-loop");
    insert_loop(
        &db,
        &LoopRow {
            project: p,
            name: "done-loop",
            status: "completed",
            phase: "coding",
            session: "ses_done",
            project_dir: &repo.path,
            worktree_dir: &done_wt,
            total_sections: 0,
            current_section: 0,
        },
    );
    insert_finding(&db, p, "done-loop", "src/done.rs", 1, None, "bug", "Finding of a completed loop.");
    insert_loop(
        &db,
        &LoopRow {
            project: p,
            name: "live-loop",
            status: "running",
            phase: "auditing",
            session: "ses_live",
            project_dir: &repo.path,
            worktree_dir: &wt,
            total_sections: 3,
            current_section: 1,
        },
    );
    let live_id = insert_finding(&db, p, "live-loop", "src/loop.rs", 1, Some(1), "warning", "Loop finding.");
    LoopFixtures {
        plain_uri: uri_in(&repo.path, "src/plain.rs"),
        done_uri: uri_in(&repo.path, "src/done.rs"),
        wt_uri: uri_in(&wt, "src/loop.rs"),
        root_loop_uri: uri_in(&repo.path, "src/loop.rs"),
        wt_line,
        root_line,
        plain_id,
        live_id,
    }
}

#[test]
fn findings_stored_before_connecting_are_published_after_initialized() {
    let (sb, repo) = setup();
    let fx = loop_fixtures(&sb, &repo);
    let c = connect(&sb, Init::new(&repo.path));
    let start = Mark::default();

    let plain = expect_count(&c, start, &fx.plain_uri, 1);
    assert_eq!(plain[0]["code"], json!(fx.plain_id));
    assert_data(&plain[0], fx.plain_id, None, None);
    assert_eq!(range(&plain[0]), (0, 0, 0, 8));

    // The running loop's finding: on its worktree, measured there ...
    let wt = expect_count(&c, start, &fx.wt_uri, 1);
    assert_eq!(range(&wt[0]), (0, 0, 0, fx.wt_line.len() as u64), "{}", wt[0]);
    assert_eq!(wt[0]["message"], json!("Loop finding.\n\nloop live-loop, section 2"));
    assert_eq!(wt[0]["severity"], json!(2));
    assert_data(&wt[0], fx.live_id, Some("live-loop"), Some(1));
    // ... and mirrored under the project root (default), measured on the root's file.
    let mirrored = expect_count(&c, start, &fx.root_loop_uri, 1);
    assert_eq!(range(&mirrored[0]), (0, 0, 0, fx.root_line.len() as u64), "{}", mirrored[0]);
    assert_data(&mirrored[0], fx.live_id, Some("live-loop"), Some(1));

    // A finding outside the loop on the same root file joins the mirrored one there, and
    // leaves it in place when deleted.
    let user = connect(&sb, Init::new(&repo.path));
    let mark = c.mark();
    let own =
        write_finding(&user, json!({ "file": "src/loop.rs", "line": 1, "severity": "bug", "description": "mine" }));
    let both = expect_count(&c, mark, &fx.root_loop_uri, 2);
    assert_data(&by_id(&both, own["id"].as_i64().expect("id")), own["id"].as_i64().expect("id"), None, None);
    assert_data(&by_id(&both, fx.live_id), fx.live_id, Some("live-loop"), Some(1));
    let mark = c.mark();
    user.tool_ok("review-delete", json!({ "file": "src/loop.rs", "line": 1 }));
    let left = expect_count(&c, mark, &fx.root_loop_uri, 1);
    assert_eq!(left[0]["code"], json!(fx.live_id));
    assert_eq!(c.latest_diagnostics(&fx.wt_uri).map(|d| d.len()), Some(1));

    // The completed loop's finding is never published.
    settle();
    assert_eq!(publications_on(&c, start, &fx.done_uri), 0, "{:?}", published_uris(&c, start));

    // When the loop completes (written by another process: row + feed entry), its
    // diagnostics are cleared on both URIs.
    let mark = c.mark();
    let db = sb.db();
    db.conn
        .execute(
            "UPDATE loops SET status = 'completed', completed_at = ?2 WHERE loop_name = ?1",
            rusqlite::params!["live-loop", now_ms()],
        )
        .expect("complete loop");
    feed(&db, &repo.root_commit, "loop", "live-loop");
    expect_count(&c, mark, &fx.wt_uri, 0);
    expect_count(&c, mark, &fx.root_loop_uri, 0);
    assert_eq!(c.latest_diagnostics(&fx.plain_uri).map(|d| d.len()), Some(1));
}

#[test]
fn without_mirroring_a_loop_finding_is_only_on_its_worktree() {
    let (sb, repo) = setup();
    let fx = loop_fixtures(&sb, &repo);
    let c = connect(&sb, Init::new(&repo.path).config(json!({ "diagnostics": { "mirrorLoopFindings": false } })));
    let start = Mark::default();
    expect_count(&c, start, &fx.plain_uri, 1);
    let wt = expect_count(&c, start, &fx.wt_uri, 1);
    assert_data(&wt[0], fx.live_id, Some("live-loop"), Some(1));
    settle();
    assert_eq!(publications_on(&c, start, &fx.root_loop_uri), 0, "{:?}", published_uris(&c, start));
    assert_eq!(publications_on(&c, start, &fx.done_uri), 0, "{:?}", published_uris(&c, start));
}

// --- 8. the `Delete finding` code action ----------------------------------------------------------

/// `textDocument/codeAction` with `diags` as context; returns the actions.
fn code_actions(c: &Client, uri: &str, diags: &[Value]) -> Vec<Value> {
    let r = c.request_ok(
        "textDocument/codeAction",
        json!({
            "textDocument": { "uri": uri },
            "range": diags.first().map(|d| d["range"].clone())
                .unwrap_or(json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 0, "character": 0 } })),
            "context": { "diagnostics": diags }
        }),
    );
    r.as_array().cloned().unwrap_or_default()
}

/// Runs an action's command as the client would.
fn run_command(c: &Client, action: &Value) -> Value {
    let cmd = &action["command"];
    let name = cmd["command"].as_str().unwrap_or_else(|| panic!("action without a command: {action}"));
    c.execute(name, cmd.get("arguments").cloned()).unwrap_or_else(|e| panic!("{name} failed: {e}"))
}

#[test]
fn the_delete_finding_code_action_deletes_the_finding() {
    let (sb, repo) = setup();
    repo.write("src/act.rs", "one\ntwo\n");
    let c = connect(&sb, Init::new(&repo.path));
    let uri = uri_in(&repo.path, "src/act.rs");
    let mark = c.mark();
    let id = write_bug(&c, "src/act.rs", 2)["id"].as_i64().expect("id");
    let keep = write_bug(&c, "src/act.rs", 1)["id"].as_i64().expect("id");
    let diags = expect_count(&c, mark, &uri, 2);
    let target = by_id(&diags, id);

    let actions = code_actions(&c, &uri, std::slice::from_ref(&target));
    assert_eq!(actions.len(), 1, "{actions:?}");
    let a = &actions[0];
    assert_eq!(a["title"], json!("Delete finding"), "{a}");
    assert_eq!(a["command"]["command"], json!("forge.review-delete"), "{a}");
    let args = a["command"]["arguments"].as_array().expect("arguments");
    assert_eq!(args.len(), 1, "{a}");
    assert_eq!(args[0]["file"], json!("src/act.rs"), "{a}");
    assert_eq!(args[0]["line"], json!(2), "{a}");

    // A diagnostic of another source gets no action.
    let mut foreign = target.clone();
    foreign["source"] = json!("rustc");
    assert!(code_actions(&c, &uri, &[foreign]).is_empty());

    let mark = c.mark();
    let r = run_command(&c, a);
    assert_eq!(r["text"], json!("Deleted review finding at src/act.rs:2"), "{r}");
    let left = expect_count(&c, mark, &uri, 1);
    assert_eq!(left[0]["code"], json!(keep));
    let read = c.tool_ok("review-read", json!({}));
    assert_eq!(read.data["findings"].as_array().map(Vec::len), Some(1), "{}", read.data);

    // A client that declared no `codeActionLiteralSupport` gets the bare command (LSP 3.17;
    // review BB: it was sent `CodeAction` literals).
    let plain = connect(&sb, Init { commands_only: true, ..Init::new(&repo.path) });
    let mark = plain.mark();
    plain.did_open(&uri, "one\ntwo\n", 1);
    let diags = expect_count(&plain, mark, &uri, 1);
    let actions = code_actions(&plain, &uri, &diags);
    assert_eq!(actions.len(), 1, "{actions:?}");
    let cmd = &actions[0];
    assert_eq!(cmd["command"], json!("forge.review-delete"), "{cmd}");
    assert_eq!(cmd["title"], json!("Delete finding"), "{cmd}");
    assert!(cmd.get("kind").is_none() && cmd.get("diagnostics").is_none(), "{cmd}");
    assert_eq!(cmd["arguments"][0]["line"], json!(1), "{cmd}");
}

#[test]
fn the_delete_finding_code_action_reaches_a_loop_finding_from_the_editor() {
    let (sb, repo) = setup();
    let fx = loop_fixtures(&sb, &repo);
    let c = connect(&sb, Init::new(&repo.path));
    let start = Mark::default();
    let diags = expect_count(&c, start, &fx.root_loop_uri, 1);
    expect_count(&c, start, &fx.wt_uri, 1);

    let actions = code_actions(&c, &fx.root_loop_uri, &diags);
    assert_eq!(actions.len(), 1, "{actions:?}");
    let args = &actions[0]["command"]["arguments"][0];
    assert_eq!(args["loopName"], json!("live-loop"), "{args}");
    assert_eq!(args["sectionIndex"], json!(1), "{args}");

    let mark = c.mark();
    let r = run_command(&c, &actions[0]);
    assert_eq!(r["text"], json!("Deleted review finding at src/loop.rs:1"), "{r}");
    expect_count(&c, mark, &fx.root_loop_uri, 0);
    expect_count(&c, mark, &fx.wt_uri, 0);
    let n = sb.db().count("SELECT count(*) FROM review_findings WHERE loop_name = 'live-loop'");
    assert_eq!(n, 0);
}

/// A client that declared no `publishDiagnostics.dataSupport` may send the diagnostics back
/// without `data` (LSP 3.16): the finding is then found by its `code`, its id; one deleted
/// since gets no action.
#[test]
fn the_delete_finding_code_action_works_without_the_diagnostic_data() {
    let (sb, repo) = setup();
    let fx = loop_fixtures(&sb, &repo);
    repo.write("src/act.rs", "one\ntwo\n");
    let c = connect(&sb, Init::new(&repo.path));
    let uri = uri_in(&repo.path, "src/act.rs");
    let mark = c.mark();
    let id = write_bug(&c, "src/act.rs", 2)["id"].as_i64().expect("id");
    let diags = expect_count(&c, mark, &uri, 1);
    let mut bare = by_id(&diags, id);
    bare.as_object_mut().expect("diagnostic").remove("data");
    let actions = code_actions(&c, &uri, std::slice::from_ref(&bare));
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["command"]["arguments"][0], json!({ "file": "src/act.rs", "line": 2, "crossSection": true }));

    let loop_diags = expect_count(&c, Mark::default(), &fx.root_loop_uri, 1);
    let mut bare_loop = loop_diags[0].clone();
    bare_loop.as_object_mut().expect("diagnostic").remove("data");
    let actions = code_actions(&c, &fx.root_loop_uri, &[bare_loop]);
    assert_eq!(actions.len(), 1, "{actions:?}");
    let args = &actions[0]["command"]["arguments"][0];
    assert_eq!((&args["loopName"], &args["sectionIndex"]), (&json!("live-loop"), &json!(1)), "{args}");

    let mark = c.mark();
    run_command(&c, &code_actions(&c, &uri, std::slice::from_ref(&bare))[0]);
    expect_count(&c, mark, &uri, 0);
    assert!(code_actions(&c, &uri, &[bare]).is_empty(), "a deleted finding gets no action");
}

/// The action is offered only where it can succeed: an auditor's editor cannot name a
/// loop (the user's alone), and a `code` agent may not delete findings at all.
#[test]
fn the_delete_finding_code_action_is_offered_only_where_it_can_succeed() {
    let (sb, repo) = setup();
    let fx = loop_fixtures(&sb, &repo);
    repo.write("src/elsewhere.rs", "one\ntwo\nthree\n");
    let user = connect(&sb, Init::new(&repo.path));
    let plain_uri = uri_in(&repo.path, "src/elsewhere.rs");
    let mark = user.mark();
    write_bug(&user, "src/elsewhere.rs", 3);
    let plain = expect_count(&user, mark, &plain_uri, 1);
    let looped = expect_count(&user, Mark::default(), &fx.root_loop_uri, 1);
    let auditor = connect(&sb, Init::new(&repo.path).agent("auditor"));
    assert!(code_actions(&auditor, &fx.root_loop_uri, &looped).is_empty(), "a loop's finding");
    let actions = code_actions(&auditor, &plain_uri, &plain);
    assert_eq!(actions.len(), 1, "{actions:?}");
    run_command(&auditor, &actions[0]);
    let code = connect(&sb, Init::new(&repo.path).agent("code"));
    assert!(code_actions(&code, &fx.root_loop_uri, &looped).is_empty());
}

// --- 9. forge://index.md --------------------------------------------------------------------------

#[test]
fn the_index_lists_open_findings_per_file_with_counts_and_links() {
    let (sb, repo) = setup();
    let c = connect(&sb, Init::new(&repo.path));
    let index = c.content(INDEX_URI).expect("index");
    assert_contains(&index, "## Open findings\n\nNo open findings.");

    for (file, line, severity) in [
        ("src/a.rs", 1, "bug"),
        ("src/a.rs", 2, "bug"),
        ("src/a.rs", 3, "warning"),
        ("src/b c.rs", 7, "warning"),
        ("src/z.rs", 1, "bug"),
    ] {
        c.tool_ok("review-write", json!({ "file": file, "line": line, "severity": severity, "description": "d" }));
    }
    // A completed loop's finding is not open.
    let db = sb.db();
    let done = sb.mkdir("worktrees/old");
    insert_loop(
        &db,
        &LoopRow {
            project: &repo.root_commit,
            name: "old",
            status: "completed",
            phase: "coding",
            session: "ses_old",
            project_dir: &repo.path,
            worktree_dir: &done,
            total_sections: 0,
            current_section: 0,
        },
    );
    insert_finding(&db, &repo.root_commit, "old", "src/closed.rs", 4, None, "bug", "closed");

    let index = c.content(INDEX_URI).expect("index");
    let a = format!("- [src/a.rs]({}) · 3 (2 bugs, 1 warning)", uri_in(&repo.path, "src/a.rs"));
    let b = format!("- [src/b c.rs]({}) · 1 (1 warning)", uri_in(&repo.path, "src/b c.rs"));
    let z = format!("- [src/z.rs]({}) · 1 (1 bug)", uri_in(&repo.path, "src/z.rs"));
    assert_contains(&index, &format!("## Open findings\n\n{a}\n{b}\n{z}\n"));
    assert!(!index.contains("src/closed.rs"), "{index}");
    assert!(b.contains("src/b%20c.rs"), "{b}");

    c.tool_ok("review-delete", json!({ "file": "src/a.rs", "line": 1 }));
    let index = c.content(INDEX_URI).expect("index");
    assert_contains(&index, "- [src/a.rs](");
    assert_contains(&index, " · 2 (1 bug, 1 warning)");

    // A file name is literal text: not a link of its own, and a line break cannot end the
    // list (a probe's `x](http://evil.example/).rs` was a link to that site).
    for file in ["x](http://evil.example/).rs", "two\nlines.rs"] {
        c.tool_ok("review-write", json!({ "file": file, "line": 1, "severity": "bug", "description": "d" }));
    }
    let index = c.content(INDEX_URI).expect("index");
    // (Stored as a path: `//` is `/`.)
    assert_contains(&index, "- [x\\](http:/evil.example/).rs](");
    assert_contains(&index, "- [two\\\\nlines.rs](");
}

// --- a client that stops reading ------------------------------------------------------------------

fn raw_send(s: &mut std::os::unix::net::UnixStream, v: &Value) {
    use std::io::Write;
    let b = v.to_string();
    s.write_all(format!("Content-Length: {}\r\n\r\n{b}", b.len()).as_bytes()).expect("send");
}

/// A client that stops reading long enough for the change feed to drop batches it had not
/// taken (its connection's writer blocked on a full socket while findings are
/// written) gets every finding published once it reads again, the first one written
/// included: the connection announces everything again after a lag. Before, the skipped
/// batches' files were never published to it.
#[test]
fn a_client_that_stopped_reading_gets_every_finding_when_it_reads_again() {
    stop_reading_then_read_again(false);
}

/// The same, when the changes the client missed were pruned from the feed meanwhile (as
/// the first connection's sweep or a long-running server prunes them): they cannot be
/// read back, so the connection announces everything again, and the client still gets
/// every finding.
#[test]
fn after_the_missed_changes_were_pruned_a_lagging_client_still_gets_every_finding() {
    stop_reading_then_read_again(true);
}

fn stop_reading_then_read_again(prune: bool) {
    let (sb, repo) = setup();
    let sock = sb.root.join("sockdir/forge.sock");
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).arg("serve").arg("--listen").arg(format!("unix:{}", sock.display()));
    // The feed keeps 8 batches for a connection that does not take them (4,096 in a
    // release build): a few hundred writes make A fall behind.
    cmd.env("FORGE_TEST_FEED_CAPACITY", "8");
    let server = ListenServer::start(cmd, Addr::Unix(sock.clone()), sb.next_log("listen-lag"));
    let mut a = std::os::unix::net::UnixStream::connect(&sock).expect("connect");
    let mut reader = std::io::BufReader::new(a.try_clone().unwrap());
    raw_send(
        &mut a,
        &json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "processId": null, "rootUri": file_uri(&repo.path),
            "capabilities": { "workspace": { "textDocumentContent": {} }, "textDocument": { "publishDiagnostics": {} } } } }),
    );
    let session = loop {
        let m: Value = serde_json::from_slice(&read_frame(&mut reader).unwrap().expect("a reply")).unwrap();
        if m["id"] == json!(0) {
            break m["result"]["capabilities"]["experimental"]["forge"]["sessionId"].as_str().unwrap().to_string();
        }
    };
    raw_send(&mut a, &json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }));
    // A's own plan, 60 KB, asked for 700 times without reading the replies: its socket and
    // its connection's queue fill, and its announcements wait.
    let plan = format!("# P\n## Phase 1: a\n{}", format!("{}\n", "z".repeat(99)).repeat(600));
    let b = server.connect();
    let mut b = b;
    b.init(&Init::new(&repo.path));
    b.tool_ok("plan-write", json!({ "content": plan, "session_id": session }));
    let uri = session_plan_uri(&session);
    let mut w = a.try_clone().unwrap();
    let flood = std::thread::spawn(move || {
        for i in 0..700 {
            raw_send(
                &mut w,
                &json!({ "jsonrpc": "2.0", "id": 1000 + i, "method": "workspace/textDocumentContent", "params": { "uri": uri } }),
            );
        }
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    // A change A must announce (its plan), then more batches than the feed keeps.
    b.tool_ok("plan-write", json!({ "content": "# P2\n## Phase 1: b\n", "session_id": session }));
    b.tool_ok(
        "review-write",
        json!({ "file": "first.rs", "line": 1, "severity": "bug", "description": "written first" }),
    );
    for i in 0..200 {
        b.tool_ok(
            "review-write",
            json!({ "file": format!("f{i}.rs"), "line": 1, "severity": "bug", "description": "d" }),
        );
        std::thread::sleep(std::time::Duration::from_millis(10)); // one batch each
    }
    flood.join().unwrap();
    if prune {
        // Once the server's watcher has taken them, every change row goes, as a prune of
        // rows older than now would take them.
        std::thread::sleep(std::time::Duration::from_secs(1));
        let pruned = sb.db().conn.execute("DELETE FROM changes", []).unwrap();
        assert!(pruned > 200, "{pruned} change rows");
    }
    // A reads again: everything, until the server has been quiet for 3 s.
    a.set_read_timeout(Some(std::time::Duration::from_secs(3))).unwrap();
    let mut published = std::collections::HashSet::new();
    while let Ok(Some(body)) = read_frame(&mut reader) {
        let m: Value = serde_json::from_slice(&body).unwrap();
        if m["method"] == json!("textDocument/publishDiagnostics")
            && !m["params"]["diagnostics"].as_array().unwrap().is_empty()
        {
            published.insert(m["params"]["uri"].as_str().unwrap().to_string());
        }
    }
    assert!(server.stderr().contains("change batches behind"), "the feed did not lag: {}", server.stderr());
    assert_eq!(server.stderr().contains("announcing everything again"), prune, "{}", server.stderr());
    for f in ["first.rs", "f0.rs", "f199.rs"] {
        assert!(published.contains(&uri_in(&repo.path, f)), "{f} was not published ({} URIs)", published.len());
    }
}

/// A change whose feed row was pruned before the server's watcher read it (a server
/// stopped or suspended for longer than rows are kept, while other processes wrote and a
/// newer server's sweep pruned): the connection announces everything again, so the finding
/// is published. Before, the watcher moved past the gap and it never was (review).
#[test]
fn a_change_pruned_before_the_server_read_it_is_still_published() {
    let (sb, repo) = setup();
    let c = connect(&sb, Init::new(&repo.path));
    let mark = c.mark();
    c.tool_ok("review-write", json!({ "file": "a.rs", "line": 1, "severity": "bug", "description": "first" }));
    expect_count(&c, mark, &uri_in(&repo.path, "a.rs"), 1);
    // Another process's write of b.rs, and its feed row gone before the server reads it.
    let mark = c.mark();
    sb.db()
        .conn
        .execute_batch(
            "BEGIN;
             INSERT INTO review_findings (project_id, loop_name, file, line, section_index, severity, description, created_at)
               SELECT project_id, '', 'b.rs', 1, -1, 'bug', 'unannounced', created_at FROM review_findings WHERE file = 'a.rs';
             INSERT INTO changes (project_id, kind, key, at)
               SELECT project_id, 'finding', char(31) || 'b.rs', 0 FROM review_findings WHERE file = 'b.rs';
             DELETE FROM changes WHERE key = char(31) || 'b.rs';
             COMMIT;",
        )
        .unwrap();
    let diags = expect_count(&c, mark, &uri_in(&repo.path, "b.rs"), 1);
    assert_eq!(diags[0]["message"], json!("unannounced"));
}

// --- a client that only runs tools ----------------------------------------------------------------

/// What a raw client connected to `sock` is sent from `initialize` to the reply of its
/// `shutdown`: the methods of the server's notifications and requests, in order. Between
/// them it runs `forge.review-read`, then `meanwhile` runs (another client's write) and the
/// client waits `quiet`, so a first publication the server started for it, and the
/// announcement of that write, have time to arrive.
fn pushes_to(
    sock: &std::path::Path,
    root: &std::path::Path,
    capabilities: Value,
    meanwhile: impl FnOnce(),
    quiet: std::time::Duration,
) -> Vec<String> {
    let mut s = std::os::unix::net::UnixStream::connect(sock).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
    let mut pushed = vec![];
    let mut until = |s: &mut std::os::unix::net::UnixStream, id: i64, pushed: &mut Vec<String>| loop {
        let m: Value = serde_json::from_slice(&read_frame(&mut reader).unwrap().expect("a frame")).unwrap();
        if let Some(method) = m["method"].as_str() {
            pushed.push(method.to_string());
            if m.get("id").is_some() {
                raw_send(s, &json!({ "jsonrpc": "2.0", "id": m["id"], "result": null }));
            }
        } else if m["id"] == json!(id) {
            assert!(m.get("error").is_none(), "{m}");
            return;
        }
    };
    raw_send(
        &mut s,
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": null, "rootUri": file_uri(root), "capabilities": capabilities } }),
    );
    until(&mut s, 1, &mut pushed);
    raw_send(&mut s, &json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }));
    raw_send(
        &mut s,
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
                 "params": { "command": "forge.review-read", "arguments": [{ "file": "src/a.rs" }] } }),
    );
    until(&mut s, 2, &mut pushed);
    meanwhile();
    std::thread::sleep(quiet);
    raw_send(&mut s, &json!({ "jsonrpc": "2.0", "id": 3, "method": "shutdown" }));
    until(&mut s, 3, &mut pushed);
    pushed
}

/// A client that declares `experimental.forge.toolsOnly` (what `forge-lsp call` and
/// `forge-lsp mcp` do through a server) is sent no diagnostics and no announcements, of
/// what was stored before it connected or of what is written while it is connected, and
/// its tools still run; the same client without it gets both published.
#[test]
fn a_tools_only_client_is_sent_no_diagnostics() {
    let (sb, repo) = setup();
    repo.write("src/a.rs", "fn a() {}\n");
    let sock = sb.root.join("sockdir/forge.sock");
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).arg("serve").arg("--listen").arg(format!("unix:{}", sock.display()));
    let server = ListenServer::start(cmd, Addr::Unix(sock.clone()), sb.next_log("listen-tools-only"));
    let mut writer = server.connect();
    writer.init(&Init::new(&repo.path));
    writer.tool_ok("review-write", json!({ "file": "src/a.rs", "line": 1, "severity": "bug", "description": "d" }));
    let quiet = std::time::Duration::from_millis(500);

    let write = |file: &'static str| {
        let mut w = server.connect();
        w.init(&Init::new(&repo.path));
        move || {
            w.tool_ok("review-write", json!({ "file": file, "line": 1, "severity": "bug", "description": "d" }));
        }
    };
    let tools_only = json!({ "experimental": { "forge": { "toolsOnly": true } } });
    let pushed = pushes_to(&sock, &repo.path, tools_only, write("src/b.rs"), quiet);
    let unasked: Vec<&String> = pushed.iter().filter(|m| !m.starts_with("window/")).collect();
    assert!(unasked.is_empty(), "a tools-only client was sent {unasked:?}");

    // The check can see both: the same client without the capability gets the stored
    // finding's first publication (src/a.rs) and the written one's (src/c.rs).
    let pushed = pushes_to(&sock, &repo.path, json!({}), write("src/c.rs"), quiet);
    let diagnostics = pushed.iter().filter(|m| *m == "textDocument/publishDiagnostics").count();
    assert!(diagnostics >= 2, "{pushed:?}");
}

/// An editor opened on a folder inside a repository (a package of a monorepo) publishes a
/// finding on the file every other client means: relative paths are the repository's, as
/// `forge-lsp call` and the loops' worktrees store them. Before, they were resolved against
/// the folder: `sub/x.rs` was published on `sub/sub/x.rs`, and `y.rs` on `sub/y.rs`.
#[test]
fn an_editor_on_a_folder_inside_a_repository_publishes_on_the_repositorys_paths() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("sub/x.rs", "one\ntwo\n");
    repo.write("y.rs", "one\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path.join("sub")));
    let since = c.mark();
    for (cwd, file) in [(repo.path.join("sub"), "x.rs"), (repo.path.clone(), "y.rs")] {
        let out = sb
            .call("review-write")
            .input(json!({ "file": file, "line": 1, "severity": "bug", "description": "d" }))
            .cwd(&cwd)
            .run();
        assert_eq!(out.code, 0, "{out:?}");
    }
    for path in ["sub/x.rs", "y.rs"] {
        let uri = uri_in(&repo.path, path);
        let d = c.wait_diagnostics_since(since, &uri, std::time::Duration::from_secs(10), |d| d.len() == 1);
        assert!(d.is_some(), "nothing published on {uri}");
    }
    assert!(c.latest_diagnostics(&uri_in(&repo.path, "sub/sub/x.rs")).is_none());
    assert!(c.latest_diagnostics(&uri_in(&repo.path, "sub/y.rs")).is_none());
    // The index links them the same way.
    let index = c.content(INDEX_URI).expect("index");
    assert_contains(&index, &format!("- [sub/x.rs]({})", uri_in(&repo.path, "sub/x.rs")));
    assert_contains(&index, &format!("- [y.rs]({})", uri_in(&repo.path, "y.rs")));
    // The file tools name files the same way: a path grep prints is one review-write takes.
    let found = c.tool_ok("grep", json!({ "pattern": "^two$" }));
    assert_contains(&found.text, "sub/x.rs");
}

/// Folders without a commit share the project `global`: a finding written in one is about
/// that folder's file, keyed by its absolute path, and shown on it in every folder's editor,
/// never on a file of the same name in another folder (review BB).
#[test]
fn a_finding_in_a_folder_without_a_commit_stays_on_its_own_file() {
    let sb = Sandbox::new();
    let (_a_keep, a) = plain_dir();
    let (_b_keep, b) = plain_dir();
    std::fs::write(a.join("notes.txt"), "a\n").unwrap();
    std::fs::write(b.join("notes.txt"), "b\n").unwrap();
    let ca = connect(&sb, Init::new(&a));
    let mark = ca.mark();
    let f = write_bug(&ca, "notes.txt", 1);
    assert_eq!(f["file"], json!(a.join("notes.txt").display().to_string()), "{f}");
    let a_uri = uri_in(&a, "notes.txt");
    expect_count(&ca, mark, &a_uri, 1);
    let cb = connect(&sb, Init::new(&b));
    // From its start: its first publication can come before `connect` returns (a CI run).
    let mark = Mark::default();
    let b_uri = uri_in(&b, "notes.txt");
    expect_count(&cb, mark, &a_uri, 1);
    settle();
    assert_eq!(publications_on(&cb, mark, &b_uri), 0, "{:?}", published_uris(&cb, mark));
    // Read and deleted by the same spelling from its folder.
    let read = ca.tool_ok("review-read", json!({ "file": "notes.txt" }));
    assert_eq!(read.data["findings"].as_array().map(Vec::len), Some(1), "{}", read.data);
    assert_eq!(cb.tool_ok("review-read", json!({ "file": "notes.txt" })).data["findings"], json!([]));
    // A finding stored with a relative key before (it names no folder) does not go before
    // the caller's own (review CC).
    insert_finding(&sb.db(), "global", "", "notes.txt", 1, None, "bug", "stored before keys were absolute");
    let del = ca.tool_ok("review-delete", json!({ "file": "notes.txt", "line": 1 }));
    assert_eq!(del.data["findings"][0]["file"], json!(a.join("notes.txt").display().to_string()), "{}", del.data);
}
