//! Helpers shared by the `findings_*` integration tests: loop and finding fixtures written
//! straight into `forge.db`, and checks of published diagnostics (PROTOCOL.md §6).

#![allow(dead_code)] // each test file uses a different part

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

/// `textDocument/publishDiagnostics`.
pub const PUBLISH: &str = "textDocument/publishDiagnostics";

/// A fresh sandbox and repository.
pub fn setup() -> (Sandbox, GitRepo) {
    (Sandbox::new(), GitRepo::new())
}

/// A stdio server of `sb` initialized with `init`.
pub fn connect(sb: &Sandbox, init: Init) -> Client {
    let mut c = sb.stdio();
    c.init(&init);
    c
}

/// `initializeResult.capabilities.positionEncoding`.
pub fn position_encoding(c: &Client) -> String {
    let r = c.init_result.as_ref().expect("initialized");
    r.pointer("/capabilities/positionEncoding").and_then(Value::as_str).unwrap_or("utf-16").to_string()
}

/// `file://` URI of `rel` under `dir`.
pub fn uri_in(dir: &Path, rel: &str) -> String {
    file_uri(&dir.join(rel))
}

/// Lexical normalisation of `.` and `..`: the server's own function.
#[allow(unused_imports)]
pub use forge_lsp::lsp::diagnostics::normalize as lexical;

/// Length of `s` in UTF-16 code units.
pub fn utf16_len(s: &str) -> u64 {
    s.encode_utf16().count() as u64
}

/// `forge.review-write` that must succeed; returns `data.finding`.
pub fn write_finding(c: &Client, input: Value) -> Value {
    let out = c.tool_ok("review-write", input);
    let f = out.data["finding"].clone();
    assert!(f["id"].is_i64(), "review-write data without a finding id: {}", out.data);
    f
}

/// A bug at `file:line` with a generated description.
pub fn write_bug(c: &Client, file: &str, line: i64) -> Value {
    write_finding(
        c,
        json!({ "file": file, "line": line, "severity": "bug", "description": format!("bug at {file}:{line}") }),
    )
}

/// Waits for a publication on `uri` after `since` whose diagnostics satisfy `pred`;
/// panics with the traffic seen when it does not come.
#[track_caller]
pub fn expect_diags(c: &Client, since: Mark, uri: &str, what: &str, pred: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
    match c.wait_diagnostics_since(since, uri, WAIT, pred) {
        Some(d) => d,
        None => panic!(
            "no publication on {uri} ({what}) within {WAIT:?}; latest there: {:?}; published URIs: {:?}{}",
            c.latest_diagnostics(uri),
            published_uris(c, since),
            c.diagnostics()
        ),
    }
}

/// Waits for a publication on `uri` with exactly `n` diagnostics.
#[track_caller]
pub fn expect_count(c: &Client, since: Mark, uri: &str, n: usize) -> Vec<Value> {
    expect_diags(c, since, uri, &format!("{n} diagnostics"), |d| d.len() == n)
}

/// The URIs published after `since`, in order (repeats included).
pub fn published_uris(c: &Client, since: Mark) -> Vec<String> {
    c.notifications_since(since, PUBLISH).iter().filter_map(|p| p["uri"].as_str().map(String::from)).collect()
}

/// How many publications on `uri` arrived after `since`.
pub fn publications_on(c: &Client, since: Mark, uri: &str) -> usize {
    published_uris(c, since).iter().filter(|u| *u == uri).count()
}

/// `(line, startChar, endLine, endChar)` of a diagnostic.
pub fn range(d: &Value) -> (u64, u64, u64, u64) {
    let n = |p: &str| d.pointer(p).and_then(Value::as_u64).unwrap_or_else(|| panic!("no {p} in {d}"));
    (n("/range/start/line"), n("/range/start/character"), n("/range/end/line"), n("/range/end/character"))
}

/// The diagnostic whose `code` is the finding id `id`.
#[track_caller]
pub fn by_id(diags: &[Value], id: i64) -> Value {
    diags
        .iter()
        .find(|d| d["code"] == json!(id))
        .cloned()
        .unwrap_or_else(|| panic!("no diagnostic with code {id} in {diags:?}"))
}

/// Asserts the protocol's `data` keys of a finding diagnostic (extra keys are allowed).
#[track_caller]
pub fn assert_data(d: &Value, id: i64, loop_name: Option<&str>, section: Option<u64>) {
    let data = &d["data"];
    assert_eq!(data["findingId"], json!(id), "{d}");
    assert_eq!(data["loopName"], json!(loop_name), "{d}");
    assert_eq!(data["sectionIndex"], json!(section), "{d}");
    assert_eq!(data["crossSection"], json!(section.is_none()), "{d}");
}

// --- fixtures in forge.db -----------------------------------------------------------------------

/// A loop row with the columns the scoping rules read.
pub struct LoopRow<'a> {
    pub project: &'a str,
    pub name: &'a str,
    pub status: &'a str,
    pub phase: &'a str,
    pub session: &'a str,
    pub project_dir: &'a Path,
    pub worktree_dir: &'a Path,
    pub total_sections: i64,
    pub current_section: i64,
}

pub fn insert_loop(db: &Db, l: &LoopRow) {
    let completed_at = (l.status != "running").then(now_ms);
    db.conn
        .execute(
            "INSERT INTO loops (project_id, loop_name, title, status, phase, current_session_id, project_dir,
                worktree_dir, worktree_branch, total_sections, current_section_index, started_at, completed_at)
             VALUES (?1, ?2, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            rusqlite::params![
                l.project,
                l.name,
                l.status,
                l.phase,
                l.session,
                l.project_dir.display().to_string(),
                l.worktree_dir.display().to_string(),
                format!("forge/{}", l.name),
                l.total_sections,
                l.current_section,
                now_ms(),
                completed_at,
            ],
        )
        .expect("insert loop");
}

/// A finding row (`loop_name` `""` = outside loops, `section` `None` = cross-section).
#[allow(clippy::too_many_arguments)]
pub fn insert_finding(
    db: &Db,
    project: &str,
    loop_name: &str,
    file: &str,
    line: i64,
    section: Option<i64>,
    severity: &str,
    description: &str,
) -> i64 {
    db.conn
        .execute(
            "INSERT INTO review_findings (project_id, loop_name, file, line, section_index, severity, description,
                created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            rusqlite::params![project, loop_name, file, line, section.unwrap_or(-1), severity, description, now_ms()],
        )
        .expect("insert finding");
    db.conn.last_insert_rowid()
}

/// An audit attempt row; returns its id.
pub fn insert_attempt(db: &Db, project: &str, loop_name: &str, section: i64, number: i64, session: &str) -> i64 {
    db.conn
        .execute(
            "INSERT INTO loop_attempts (project_id, loop_name, scope, attempt_number, section_index, source_session_id,
                completion_key, iteration, coder_decisions, findings_before, outcome, created_at, audited_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, '[]', 'dirty', ?10, ?10)",
            rusqlite::params![
                project,
                loop_name,
                format!("section:{section}"),
                number,
                section,
                session,
                format!("key-{section}-{number}"),
                number,
                format!("decisions of section {section} attempt {number}"),
                now_ms(),
            ],
        )
        .expect("insert attempt");
    db.conn.last_insert_rowid()
}

/// Appends a change-feed entry, as a writer in another process would.
pub fn feed(db: &Db, project: &str, kind: &str, key: &str) {
    db.conn
        .execute(
            "INSERT INTO changes (project_id, kind, key, at) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![project, kind, key, now_ms()],
        )
        .expect("insert change");
}

/// Waits a little longer than the publisher's coalescing and the watcher's poll, for
/// checks that something did *not* happen.
pub fn settle() {
    std::thread::sleep(QUIET.max(Duration::from_millis(700)));
}
