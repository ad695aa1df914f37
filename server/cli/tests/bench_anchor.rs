//! `forge-bench-anchor` (the reference servers of `forge-bench`'s `anchors` scenario,
//! docs/performance.md): the echo and tower anchors answer `initialize`,
//! `workspace/executeCommand` and `shutdown` with the request's id and exit on `exit`;
//! `exit` mode exits at once; an unknown mode is a usage error. The real binary over pipes.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use forge_protocol::framing::{encode, Decoder, Event};
use serde_json::{json, Value};

const ANCHOR: &str = env!("CARGO_BIN_EXE_forge-bench-anchor");

fn spawn(mode: &str) -> Child {
    Command::new(ANCHOR)
        .arg(mode)
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

fn round_trip(mode: &str) {
    let mut child = spawn(mode);
    let mut d = Decoder::new();
    send(&mut child, &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "capabilities": {} } }));
    let r = recv(&mut child, &mut d);
    assert_eq!(r["id"], 1, "{mode}: {r}");
    assert!(r.get("error").is_none(), "{mode}: {r}");
    send(&mut child, &json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }));
    for id in [2, 3] {
        let cmd = json!({ "command": "forge.noop", "arguments": [{}] });
        send(&mut child, &json!({ "jsonrpc": "2.0", "id": id, "method": "workspace/executeCommand", "params": cmd }));
        let r = recv(&mut child, &mut d);
        assert_eq!(r["id"], id, "{mode}: {r}");
        assert_eq!(r["result"], Value::Null, "{mode}: {r}");
        assert!(r.get("error").is_none(), "{mode}: {r}");
    }
    send(&mut child, &json!({ "jsonrpc": "2.0", "id": "s", "method": "shutdown" }));
    let r = recv(&mut child, &mut d);
    assert_eq!(r["id"], "s", "{mode}: {r}");
    send(&mut child, &json!({ "jsonrpc": "2.0", "method": "exit" }));
    assert!(wait_exit(&mut child).success(), "{mode} exits cleanly after exit");
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
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: forge-bench-anchor echo|tower|exit"));
}
