//! `forge-bench-anchor` (the reference servers of `forge-bench`'s `anchors` scenario,
//! docs/performance.md): the echo and tower anchors answer `initialize`,
//! `workspace/executeCommand` and `shutdown` with the request's id and exit on `exit`;
//! `exit` mode exits at once; an unknown mode is a usage error; `tower DB` commits one row
//! per `commitRow` command before it answers. The real binary over pipes.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use forge_protocol::framing::{encode, Decoder, Event};
use serde_json::{json, Value};

const ANCHOR: &str = env!("CARGO_BIN_EXE_forge-bench-anchor");

fn spawn(mode: &str) -> Child {
    spawn_args(&[mode.as_ref()])
}

fn spawn_args(args: &[&std::ffi::OsStr]) -> Child {
    Command::new(ANCHOR)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start forge-bench-anchor")
}

fn send(child: &mut Child, msg: &Value) {
    let stdin = child.stdin.as_mut().expect("stdin");
    stdin.write_all(&encode(msg.to_string().as_bytes())).and_then(|_| stdin.flush()).expect("write");
}

fn recv(child: &mut Child, decoder: &mut Decoder) -> Value {
    let out = child.stdout.as_mut().expect("stdout");
    let mut buf = [0u8; 4096];
    loop {
        match decoder.next_event() {
            Some(Event::Frame(body)) => return serde_json::from_slice(&body).expect("a JSON reply"),
            Some(_) => panic!("a bad frame from the anchor"),
            None => {}
        }
        let n = out.read(&mut buf).expect("read");
        assert!(n > 0, "the anchor closed its output");
        decoder.push(&buf[..n]);
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the anchor did not exit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn initialize(child: &mut Child, d: &mut Decoder, mode: &str) {
    send(child, &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "capabilities": {} } }));
    let r = recv(child, d);
    assert_eq!(r["id"], 1, "{mode}: {r}");
    assert!(r.get("error").is_none(), "{mode}: {r}");
    send(child, &json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }));
}

fn shutdown(child: &mut Child, d: &mut Decoder, mode: &str) {
    send(child, &json!({ "jsonrpc": "2.0", "id": "s", "method": "shutdown" }));
    let r = recv(child, d);
    assert_eq!(r["id"], "s", "{mode}: {r}");
    send(child, &json!({ "jsonrpc": "2.0", "method": "exit" }));
    assert!(wait_exit(child).success(), "{mode} exits cleanly after exit");
}

fn round_trip(mode: &str) {
    let mut child = spawn(mode);
    let mut d = Decoder::new();
    initialize(&mut child, &mut d, mode);
    for id in [2, 3] {
        let cmd = json!({ "command": "forge.noop", "arguments": [{}] });
        send(&mut child, &json!({ "jsonrpc": "2.0", "id": id, "method": "workspace/executeCommand", "params": cmd }));
        let r = recv(&mut child, &mut d);
        assert_eq!(r["id"], id, "{mode}: {r}");
        assert_eq!(r["result"], Value::Null, "{mode}: {r}");
        assert!(r.get("error").is_none(), "{mode}: {r}");
    }
    shutdown(&mut child, &mut d, mode);
}

#[test]
fn echo_answers_every_request_with_its_id_and_null() {
    round_trip("echo");
}

#[test]
fn tower_noop_answers_execute_command_with_null() {
    round_trip("tower");
}

#[test]
fn exit_mode_exits_and_unknown_mode_is_a_usage_error() {
    let status = Command::new(ANCHOR).arg("exit").status().expect("run");
    assert!(status.success());
    let out = Command::new(ANCHOR).arg("nonsense").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: forge-bench-anchor echo|tower [DB]|exit"));
}

/// Both anchors keep one reply per size: alternating sizes each get their own length.
fn reply_sizes(mode: &str) {
    let mut child = spawn(mode);
    let mut d = Decoder::new();
    initialize(&mut child, &mut d, mode);
    for (id, n) in [(2, 1000), (3, 300), (4, 1000), (5, 0)] {
        let cmd = json!({ "command": "forge.noop", "arguments": [{ "replyBytes": n }] });
        send(&mut child, &json!({ "jsonrpc": "2.0", "id": id, "method": "workspace/executeCommand", "params": cmd }));
        let r = recv(&mut child, &mut d);
        assert_eq!(r["id"], id, "{mode}: {r}");
        let text = r["result"]["text"].as_str().unwrap_or_else(|| panic!("{mode}: no text in {r}"));
        assert_eq!(text.len(), n, "{mode}: call {id}");
    }
    shutdown(&mut child, &mut d, mode);
}

#[test]
fn echo_and_tower_answer_each_reply_size_asked_for() {
    reply_sizes("echo");
    reply_sizes("tower");
}

#[test]
fn tower_with_a_database_commits_one_row_per_commit_row_command_before_it_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("floor.db");
    let mut child = spawn_args(&["tower".as_ref(), db.as_os_str()]);
    let mut d = Decoder::new();
    initialize(&mut child, &mut d, "tower DB");
    let count = || {
        let conn = rusqlite::Connection::open(&db).expect("open the anchor's database");
        conn.query_row("SELECT count(*) FROM calls", [], |r| r.get::<_, i64>(0)).expect("count")
    };
    for id in 2..5 {
        let row = json!({ "file": "src/a.rs", "line": id });
        let cmd = json!({ "command": "forge.noop", "arguments": [{ "commitRow": row }] });
        send(&mut child, &json!({ "jsonrpc": "2.0", "id": id, "method": "workspace/executeCommand", "params": cmd }));
        let r = recv(&mut child, &mut d);
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["result"], Value::Null, "{r}");
        // Committed before the answer: another connection sees it now.
        assert_eq!(count(), id - 1, "rows after call {id}");
    }
    // A command without commitRow stores nothing.
    let cmd = json!({ "command": "forge.noop", "arguments": [{}] });
    send(&mut child, &json!({ "jsonrpc": "2.0", "id": 9, "method": "workspace/executeCommand", "params": cmd }));
    assert_eq!(recv(&mut child, &mut d)["result"], Value::Null);
    assert_eq!(count(), 3);
    let conn = rusqlite::Connection::open(&db).expect("open");
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("journal mode");
    assert_eq!(mode, "wal");
    let body: String = conn.query_row("SELECT body FROM calls WHERE id = 1", [], |r| r.get(0)).expect("row 1");
    assert_eq!(serde_json::from_str::<Value>(&body).expect("JSON body"), json!({ "file": "src/a.rs", "line": 2 }));
    // A commit that fails is an error reply that names it, and the anchor goes on.
    conn.execute_batch("DROP TABLE calls").expect("drop the table");
    let cmd = json!({ "command": "forge.noop", "arguments": [{ "commitRow": 1 }] });
    send(&mut child, &json!({ "jsonrpc": "2.0", "id": 10, "method": "workspace/executeCommand", "params": cmd }));
    let r = recv(&mut child, &mut d);
    assert_eq!(r["id"], 10, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("commitRow") && message.contains("calls"), "{r}");
    shutdown(&mut child, &mut d, "tower DB");
}

#[test]
fn tower_with_a_database_it_cannot_open_says_which_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("missing-dir").join("floor.db");
    let out = Command::new(ANCHOR).arg("tower").arg(&bad).stdin(Stdio::null()).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot open") && err.contains("missing-dir"), "{err}");
}
