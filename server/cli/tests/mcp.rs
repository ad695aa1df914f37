//! `forge-lsp mcp`: the real binary speaking MCP (newline-delimited JSON-RPC) over stdio
//! (docs/mcp.md, docs/protocol.md "forge-lsp mcp"): initialize, tools/list, tools/call
//! results and failures, and the identity and project rules it shares with `forge-lsp call`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// An MCP client over the stdio of a `forge-lsp mcp` process.
struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    next_id: i64,
}

impl Mcp {
    /// Starts `forge-lsp --data-dir <sandbox data> mcp <args>` in `cwd`.
    fn start(sb: &Sandbox, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Mcp {
        let mut cmd = sb.command();
        cmd.arg("--data-dir").arg(&sb.data_dir).arg("mcp").args(args).current_dir(cwd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Mcp::spawn(cmd)
    }

    fn spawn(mut cmd: Command) -> Mcp {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn forge-lsp mcp");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let stdin = child.stdin.take();
        Mcp { child, stdin, lines, stderr: Some(stderr), next_id: 1 }
    }

    fn send(&mut self, msg: &Value) {
        let w = self.stdin.as_mut().expect("stdin open");
        writeln!(w, "{msg}").expect("write to forge-lsp mcp");
        w.flush().expect("flush");
    }

    /// Sends a request and returns the whole response (`result` or `error`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let line = self
                .lines
                .recv_timeout(REQUEST_TIMEOUT)
                .unwrap_or_else(|e| panic!("no answer to {method} within {REQUEST_TIMEOUT:?}: {e}"));
            let msg: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout: {line:?}: {e}"));
            assert_eq!(msg["jsonrpc"], "2.0", "{msg}");
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return msg;
            }
        }
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// initialize (protocol 2025-06-18) + initialized; returns the initialize result.
    fn initialize(&mut self) -> Value {
        let r = self.result(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "forge-test", "version": "1" } }),
        );
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        r
    }

    /// tools/call; returns the CallToolResult.
    fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.result("tools/call", json!({ "name": name, "arguments": arguments }))
    }

    /// Sends a `tools/call` without waiting for its answer; returns its id.
    fn start_call(&mut self, name: &str, arguments: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": name, "arguments": arguments } }));
        id
    }

    /// Sends `notifications/cancelled` for the call `id`.
    fn cancel(&mut self, id: i64) {
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id, "reason": "user" } }));
    }

    /// Closes stdin and waits for the exit; returns (exit code, stderr).
    fn finish(mut self) -> (i32, String) {
        drop(self.stdin.take());
        let status = wait_exit(&mut self.child, WAIT).expect("forge-lsp mcp exits when its input closes");
        (status.code().unwrap_or(-1), self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default())
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The text of a CallToolResult's one content item.
fn text(r: &Value) -> String {
    let content = r["content"].as_array().unwrap_or_else(|| panic!("no content: {r}"));
    assert_eq!(content.len(), 1, "{r}");
    assert_eq!(content[0]["type"], "text", "{r}");
    content[0]["text"].as_str().expect("text").to_string()
}

fn assert_ok(r: &Value) {
    assert_eq!(r["isError"], json!(false), "{r}");
    assert!(r["structuredContent"].is_object(), "structuredContent is the data object: {r}");
}

fn assert_tool_error(r: &Value, kind: &str) {
    assert_eq!(r["isError"], json!(true), "{r}");
    assert_eq!(r["structuredContent"]["error"]["kind"], kind, "{r}");
}

const PLAN: &str = "# Plan: MCP\n\n## Objective\nShow MCP.\n\n## Phase 1: write\nWrite it.\n";

#[test]
fn initialize_list_and_call_over_stdio() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);

    let init = m.initialize();
    // Its standard pipes are made larger, as `serve`'s (a plan-sized result in one write).
    for fd in [0, 1] {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(format!("/proc/{}/fd/{fd}", m.child.id()))
            .expect("the server's pipe");
        // SAFETY: F_GETPIPE_SZ on a descriptor owned by `f`.
        assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETPIPE_SZ) }, 256 << 10, "fd {fd}");
    }
    assert_eq!(init["serverInfo"]["name"], "forge-lsp", "{init}");
    assert_eq!(init["serverInfo"]["version"], env!("CARGO_PKG_VERSION"), "{init}");
    assert_eq!(init["protocolVersion"], "2025-06-18", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");

    // One MCP tool per forge.tools offer: name, description and input schema.
    let listed = m.result("tools/list", json!({}));
    let tools = listed["tools"].as_array().expect("tools");
    let offers = forge_lsp::tools::offers();
    assert_eq!(tools.len(), offers.len(), "{listed}");
    for (t, o) in tools.iter().zip(&offers) {
        assert_eq!(t["name"], o.name.as_str());
        assert_eq!(t["description"], o.description.as_str());
        assert_eq!(t["inputSchema"], o.input_schema, "{}", o.name);
        assert_eq!(t["inputSchema"]["type"], "object", "{}", o.name);
    }
    for name in ["plan-read", "plan-write", "review-write", "review-read", "execute-plan", "tools"] {
        assert!(tools.iter().any(|t| t["name"] == name), "{name} missing from {listed}");
    }
    // The `tools` tool's text names each tool as MCP calls it (before: only `forge.<name>`,
    // which tools/call does not know).
    let listing = m.call("tools", json!({}));
    assert!(text(&listing).contains("\n- plan-read (forge.plan-read): "), "{listing}");

    // plan-write, then plan-read in the same process: one session for the process.
    let w = m.call("plan-write", json!({ "content": PLAN }));
    assert_ok(&w);
    assert!(text(&w).starts_with("Plan stored: 7 lines"), "{w}");
    let session = w["structuredContent"]["sessionId"].as_str().expect("sessionId").to_string();
    let r = m.call("plan-read", json!({}));
    assert_ok(&r);
    assert!(text(&r).contains("6: ## Phase 1: write"), "{r}");
    assert_eq!(r["structuredContent"]["totalLines"], 7, "{r}");

    // Findings: a user may write and read them.
    let f = m.call(
        "review-write",
        json!({ "file": "README.md", "line": 1, "severity": "bug", "description": "the title is wrong" }),
    );
    assert_ok(&f);
    let rr = m.call("review-read", json!({}));
    assert_ok(&rr);
    assert!(text(&rr).contains("the title is wrong"), "{rr}");

    // A tool that fails is a result with isError and the message, not a JSON-RPC error.
    let e = m.call("plan-edit", json!({ "oldString": "not in the plan", "newString": "x" }));
    assert_tool_error(&e, "conflict");
    assert!(text(&e).contains("plan-edit failed"), "{e}");
    // So is input the schema rejects (the model can correct it).
    let e = m.call("plan-read", json!({ "bogus": 1 }));
    assert_tool_error(&e, "invalid_params");
    assert!(text(&e).contains("bogus"), "{e}");
    // Loop control needs a running server: refused with a message saying so.
    let e = m.call("loop-cancel", json!({ "name": "none" }));
    assert_eq!(e["isError"], json!(true), "{e}");
    assert!(text(&e).contains("needs a running forge-lsp server"), "{e}");

    // An unknown tool is a protocol error (-32602), as the MCP spec says.
    let u = m.request("tools/call", json!({ "name": "no-such-tool", "arguments": {} }));
    assert_eq!(u["error"]["code"], -32602, "{u}");
    assert_contains(u["error"]["message"].as_str().unwrap_or_default(), "no-such-tool");
    // Arguments that are not an object: -32602 saying so; an unknown method: -32601.
    let bad = m.request("tools/call", json!({ "name": "plan-read", "arguments": "x" }));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert_contains(bad["error"]["message"].as_str().unwrap_or_default(), "arguments");
    let bad = m.request("bogus/method", json!({}));
    assert_eq!(bad["error"]["code"], -32601, "{bad}");
    // A line that is not JSON is dropped by the SDK's transport, without a reply (as every
    // official MCP SDK does; docs/mcp.md says why) ...
    m.stdin.as_mut().expect("stdin").write_all(b"this is not json\n").expect("write");
    // ... while JSON that is no JSON-RPC message is answered -32600: the next line out.
    m.send(&json!({ "not": "a message" }));
    let line = m.lines.recv_timeout(REQUEST_TIMEOUT).expect("an answer to JSON that is no message");
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    // And the connection goes on.
    assert_ok(&m.call("plan-read", json!({ "limit": 2 })));

    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "exit when the client closes stdin: {stderr}");

    // The same database as `forge-lsp call`: the plan is there under the MCP session.
    let out = sb.call("plan-read").session(&session).cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert_contains(&out.stdout, "## Phase 1: write");
}

#[test]
fn identity_flags_and_denials() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    // An auditor may not author plans: a denial (1001) naming the tool, as a tool error.
    let mut m =
        Mcp::start(&sb, &repo.path, &["--agent", "auditor", "--session", "ses_01JMCPAUDITOR0000000000000"], &[]);
    m.initialize();
    let e = m.call("plan-write", json!({ "content": PLAN }));
    assert_tool_error(&e, "denied");
    assert_eq!(e["structuredContent"]["error"]["code"], 1001, "{e}");
    assert_contains(&text(&e), "forge.plan-write");
    assert_ok(
        &m.call("review-write", json!({ "file": "README.md", "line": 1, "severity": "warning", "description": "d" })),
    );
    drop(m);

    // An unknown agent is a usage error at start (exit 2), before any MCP.
    let out = run_process(
        {
            let mut c = sb.command();
            c.arg("--data-dir").arg(&sb.data_dir).args(["mcp", "--agent", "robot"]).current_dir(&repo.path);
            c
        },
        Some(Vec::new()),
        CALL_TIMEOUT,
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert_contains(&out.stderr, "robot");
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn a_loop_session_needs_its_token() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    sb.ensure_db();
    let session = "ses_01JMCPLOOPCALLER000000000";
    let db = sb.db();
    db.insert_loop(&LoopFixture::running(&repo.root_commit, "mcp-loop", session, &repo.path));
    db.insert_loop_session(session, &repo.root_commit, "mcp-loop", "coder", "tok-mcp");

    // A wrong token is refused at start, naming the session and nothing else.
    let m = Mcp::start(&sb, &repo.path, &[], &[("FORGE_SESSION_ID", session), ("FORGE_SESSION_TOKEN", "tok-wrong")]);
    let (code, stderr) = m.finish();
    assert_eq!(code, 1, "{stderr}");
    assert_contains(&stderr, &format!("session {session} cannot be claimed"));
    // So is claiming the session without a token.
    let m = Mcp::start(&sb, &repo.path, &["--session", session], &[]);
    let (code, stderr) = m.finish();
    assert_eq!(code, 1, "{stderr}");
    assert_contains(&stderr, session);

    // With its token the process is that loop session: reads work, plan authoring is denied.
    let mut m = Mcp::start(&sb, &repo.path, &[], &[("FORGE_SESSION_ID", session), ("FORGE_SESSION_TOKEN", "tok-mcp")]);
    m.initialize();
    let e = m.call("plan-write", json!({ "content": PLAN }));
    assert_tool_error(&e, "denied");
    assert_contains(&text(&e), "forge.plan-write");
    assert_ok(&m.call("review-read", json!({})));
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
}

/// Empty input that ends before a client speaks is no failure: exit 0, nothing on stderr
/// (it was exit 1 with "connection closed: initialize request"; review); input that is
/// not MCP stays a failure.
#[test]
fn input_that_ends_before_a_client_spoke_is_a_quiet_exit() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let m = Mcp::start(&sb, &repo.path, &[], &[]);
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("connection closed"), "{stderr}");
    // Input that is no MCP at all is still a failure, saying so.
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    std::io::Write::write_all(m.stdin.as_mut().unwrap(), b"Content-Length: 2\r\n\r\n{}").unwrap();
    let (code, stderr) = m.finish();
    assert_eq!(code, 1, "{stderr}");
    assert_contains(&stderr, "the input ended without an MCP initialize request");
}

#[test]
fn outside_a_repository_it_refuses_unless_given_a_project() {
    let sb = Sandbox::new();
    let (_keep, plain) = plain_dir();
    let m = Mcp::start(&sb, &plain, &[], &[]);
    let (code, stderr) = m.finish();
    assert_eq!(code, 2, "{stderr}");
    assert_contains(&stderr, "not inside a git repository");
    assert_contains(&stderr, "--project");
    // `--project` naming a directory outside git: the message says what --project needs,
    // rather than telling the caller to use --project.
    let (_keep2, other) = plain_dir();
    let m = Mcp::start(&sb, &plain, &["--project", other.to_str().expect("utf-8 path")], &[]);
    let (code, stderr) = m.finish();
    assert_eq!(code, 2, "{stderr}");
    assert_contains(&stderr, "--project must name a directory inside a git repository with a commit");
    assert!(!stderr.contains("name one with --project"), "{stderr}");

    let repo = GitRepo::new();
    let mut m = Mcp::start(&sb, &plain, &["--project", repo.path.to_str().expect("utf-8 path")], &[]);
    m.initialize();
    assert_ok(&m.call("plan-write", json!({ "content": PLAN })));
    assert_ok(&m.call("plan-read", json!({})));
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn inside_a_loop_calls_go_through_the_socket() {
    let sb = Sandbox::new();
    // An unreachable FORGE_LSP_SOCKET is an error at start, not a silent fallback.
    let (_keep, plain) = plain_dir();
    let absent = sb.root.join("absent.sock");
    let m = Mcp::start(&sb, &plain, &[], &[("FORGE_LSP_SOCKET", absent.to_str().expect("utf-8"))]);
    let (code, stderr) = m.finish();
    assert_eq!(code, 1, "{stderr}");
    assert_contains(&stderr, "FORGE_LSP_SOCKET");
    assert_contains(&stderr, "absent.sock");

    // With a live server the process serves even outside a repository (the server decides),
    // and its calls are that server's.
    let sock = sb.root.join("s/forge.sock");
    // A user plugin tool the server sees; the MCP process is given another configuration
    // directory, so only the server's listing has it.
    user_plugin_tool(
        &sb,
        "kit",
        "Ping",
        "#!/bin/sh\ncat >/dev/null\necho pong\n",
        json!({ "description": "Pong.", "inputSchema": {} }),
    );
    let server = sb.listen_unix(&sock);
    let elsewhere = sb.mkdir("other-config");
    let mut m = Mcp::start(
        &sb,
        &plain,
        &[],
        &[("FORGE_LSP_SOCKET", sock.to_str().expect("utf-8")), ("XDG_CONFIG_HOME", elsewhere.to_str().expect("utf-8"))],
    );
    m.initialize();
    let w = m.call("plan-write", json!({ "content": PLAN }));
    assert_ok(&w);
    assert_ok(&m.call("plan-read", json!({})));
    // tools/list is the server's forge.tools (its configuration and trust decide), and a
    // name the server does not know is a protocol error, as outside a loop.
    let listed = m.result("tools/list", json!({}));
    let names: Vec<String> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    let mut editor = server.connect();
    editor.init(&Init::new(&plain));
    let offered: Vec<String> = editor.tool_ok("tools", json!({})).data["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, offered);
    assert!(names.iter().any(|n| n == "kit__Ping"), "the server's plugin tool is listed: {names:?}");
    let r = m.call("kit__Ping", json!({}));
    assert_contains(&text(&r), "pong");
    let e = m.request("tools/call", json!({ "name": "no_such__Tool", "arguments": {} }));
    assert_eq!(e["error"]["code"], json!(-32602), "{e}");
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");

    // A loop session through the socket: the server checks the token at start.
    let repo = GitRepo::new();
    let session = "ses_01JMCPSOCKETCALLER0000000";
    let db = sb.db();
    db.insert_loop(&LoopFixture::running(&repo.root_commit, "mcp-sock-loop", session, &repo.path));
    db.insert_loop_session(session, &repo.root_commit, "mcp-sock-loop", "auditor", "tok-sock");
    let sock_env = sock.to_str().expect("utf-8");
    let m = Mcp::start(
        &sb,
        &repo.path,
        &[],
        &[("FORGE_LSP_SOCKET", sock_env), ("FORGE_SESSION_ID", session), ("FORGE_SESSION_TOKEN", "tok-wrong")],
    );
    let (code, stderr) = m.finish();
    assert_eq!(code, 1, "{stderr}");
    assert_contains(&stderr, session);
    let mut m = Mcp::start(
        &sb,
        &repo.path,
        &[],
        &[("FORGE_LSP_SOCKET", sock_env), ("FORGE_SESSION_ID", session), ("FORGE_SESSION_TOKEN", "tok-sock")],
    );
    m.initialize();
    let e = m.call("plan-write", json!({ "content": PLAN }));
    assert_tool_error(&e, "denied");
    assert_contains(&text(&e), "forge.plan-write");
    assert_ok(&m.call("review-read", json!({})));
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
    drop(server);
}

#[test]
fn structured_content_can_be_left_out() {
    // For agent CLIs that show the model structuredContent instead of the text.
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut m = Mcp::start(&sb, &repo.path, &[], &[("FORGE_MCP_STRUCTURED_CONTENT", "off")]);
    m.initialize();
    let w = m.call("plan-write", json!({ "content": PLAN }));
    assert_eq!(w["isError"], json!(false), "{w}");
    assert!(w.get("structuredContent").is_none(), "{w}");
    let r = m.call("plan-read", json!({}));
    assert!(r.get("structuredContent").is_none(), "{r}");
    assert!(text(&r).contains("6: ## Phase 1: write"), "{r}");
    let e = m.call("plan-read", json!({ "bogus": 1 }));
    assert_eq!(e["isError"], json!(true), "{e}");
    assert!(e.get("structuredContent").is_none(), "{e}");
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn help_names_the_command_and_its_flags() {
    let sb = Sandbox::new();
    let mut cmd = sb.command();
    cmd.arg("--help");
    let top = run_process(cmd, None, CALL_TIMEOUT);
    assert_eq!(top.code, 0, "{top:?}");
    assert_contains(&top.stdout, "mcp");
    let mut cmd = sb.command();
    cmd.args(["mcp", "--help"]);
    let help = run_process(cmd, None, CALL_TIMEOUT);
    assert_eq!(help.code, 0, "{help:?}");
    for flag in ["--project", "--agent", "--session", "--data-dir", "FORGE_SESSION_TOKEN", "FORGE_LSP_SOCKET"] {
        assert_contains(&help.stdout, flag);
    }
}

/// Plugin tools from files (PROTOCOL.md 10.4) are MCP tools too.
#[test]
fn plugin_tools_are_listed_and_called() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let dir = sb.config_home.join("forge-lsp/plugins/kit/tools");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Ping"), "#!/bin/sh\nread -r line\nprintf '{\"pong\":%s}\\n' \"$line\"\n").unwrap();
    std::fs::set_permissions(dir.join("Ping"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.join("Ping.json"),
        json!({ "description": "Pong.", "inputSchema": { "type": "object", "properties": { "x": { "type": "integer" } } } })
            .to_string(),
    )
    .unwrap();
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    m.initialize();
    let listed = m.result("tools/list", json!({}));
    let tools = listed["tools"].as_array().expect("tools");
    let ping = tools.iter().find(|t| t["name"] == "kit__Ping").unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(ping["description"], "Pong.");
    let r = m.call("kit__Ping", json!({ "x": 3 }));
    assert_ok(&r);
    assert_eq!(r["structuredContent"]["pong"], json!({ "x": 3 }), "{r}");
    let r = m.call("kit__Ping", json!({ "x": "three" }));
    assert_tool_error(&r, "invalid_params");
    // Its name with the commands' prefix is no listed tool's (review YA: it ran).
    let r = m.request("tools/call", json!({ "name": "forge.kit__Ping", "arguments": { "x": 3 } }));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("forge.kit__Ping"), "{r}");
    let (code, _) = m.finish();
    assert_eq!(code, 0);

    // A sidecar schema without a type is an object schema; one of another type is skipped
    // (the input is one object, and MCP requires "type": "object").
    for (tool, schema) in [("Untyped", json!({ "properties": {} })), ("Stringy", json!({ "type": "string" }))] {
        std::fs::copy(dir.join("Ping"), dir.join(tool)).unwrap();
        std::fs::write(
            dir.join(format!("{tool}.json")),
            json!({ "description": "D.", "inputSchema": schema }).to_string(),
        )
        .unwrap();
    }
    // Structured content off holds for plugin tools too (every preset sets it).
    let mut m = Mcp::start(&sb, &repo.path, &[], &[("FORGE_MCP_STRUCTURED_CONTENT", "off")]);
    m.initialize();
    let listed = m.result("tools/list", json!({}));
    let tools = listed["tools"].as_array().expect("tools");
    let untyped = tools.iter().find(|t| t["name"] == "kit__Untyped").unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(untyped["inputSchema"]["type"], "object", "{untyped}");
    assert!(tools.iter().all(|t| t["name"] != "kit__Stringy"), "{listed}");
    assert!(tools.iter().all(|t| t["inputSchema"]["type"] == "object"), "{listed}");
    let r = m.call("kit__Ping", json!({ "x": 3 }));
    assert_eq!(r["isError"], json!(false), "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    assert_contains(&text(&r), "pong");
    let r = m.call("kit__Ping", json!({ "x": "three" }));
    assert_eq!(r["isError"], json!(true), "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    let (code, _) = m.finish();
    assert_eq!(code, 0);
}

/// An agent started by forge-lsp without a session token (a new-session agent) says what it
/// is with FORGE_AGENT, as for `forge-lsp call`: a `code` agent may not author plans.
#[test]
fn forge_agent_names_the_agent_as_for_call() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let env = [("FORGE_AGENT", "code"), ("FORGE_SESSION_ID", "ses_01JMCPNEWSESSIONAGENT0000")];
    let mut m = Mcp::start(&sb, &repo.path, &[], &env);
    m.initialize();
    let e = m.call("plan-write", json!({ "content": PLAN }));
    assert_tool_error(&e, "denied");
    assert_contains(&text(&e), "forge.plan-write");
    drop(m);
    // --agent still wins over the variable.
    let mut m = Mcp::start(&sb, &repo.path, &["--agent", "user"], &env);
    m.initialize();
    assert_ok(&m.call("plan-write", json!({ "content": PLAN })));
}

/// Without a running server every call of the process runs in it: the repeated-call guard
/// (PROTOCOL.md 10.3) holds there too.
#[test]
fn the_repeated_call_guard_holds_without_a_server() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("src/a.rs", "fn needle() {}\n");
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    m.initialize();
    for i in 1..=5 {
        let r = m.call("grep", json!({ "pattern": "needle" }));
        assert_ok(&r);
        assert_eq!(text(&r).contains("Notice:"), i >= 3, "call {i}: {r}");
    }
    let r = m.call("grep", json!({ "pattern": "needle" }));
    assert_eq!(r["isError"], json!(true), "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], 1003, "{r}");
    // Another pattern is a new call.
    assert_ok(&m.call("grep", json!({ "pattern": "fn" })));
}

/// An MCP client's `notifications/cancelled` stops a plugin tool that `forge-lsp mcp` runs
/// itself (no server running): its process group is killed, and the process serves on.
#[test]
fn a_cancelled_plugin_tool_call_is_killed() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    hanging_tool(&sb);
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    m.initialize();
    cancel_the_hanging_tool(&sb, &mut m);
}

/// Through a running server too: the MCP process closes its connection to the server, and
/// the server kills the plugin tool whose caller went away.
#[test]
fn a_cancelled_plugin_tool_call_through_a_server_is_killed() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    hanging_tool(&sb);
    let sock = sb.root.join("s/forge.sock");
    let server = sb.listen_unix(&sock);
    let mut m = Mcp::start(&sb, &repo.path, &[], &[("FORGE_LSP_SOCKET", sock.to_str().expect("utf-8"))]);
    m.initialize();
    cancel_the_hanging_tool(&sb, &mut m);
    // The server serves on.
    let mut editor = server.connect();
    editor.init(&Init::new(&repo.path));
    assert!(editor.tool_ok("tools", json!({})).data["tools"].is_array());
}

/// A user plugin tool `slow__Hang` that writes its pid and never ends.
fn hanging_tool(sb: &Sandbox) {
    user_plugin_tool(
        sb,
        "slow",
        "Hang",
        "#!/bin/sh\necho $$ > \"$FORGE_PLUGIN_DIR/pid\"\nsleep 60 &\nwait\n",
        json!({ "description": "Never ends.", "inputSchema": {} }),
    );
}

/// A user plugin tool `<plugin>__<name>`: the executable `script` and its sidecar.
fn user_plugin_tool(sb: &Sandbox, plugin: &str, name: &str, script: &str, sidecar: Value) {
    use std::os::unix::fs::PermissionsExt;
    let dir = sb.config_home.join(format!("forge-lsp/plugins/{plugin}/tools"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), script).unwrap();
    std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join(format!("{name}.json")), sidecar.to_string()).unwrap();
}

/// Calls `slow__Hang`, cancels the call once the tool runs, and checks that its process is
/// gone, that the call is answered, and that the MCP process serves on.
fn cancel_the_hanging_tool(sb: &Sandbox, m: &mut Mcp) {
    let id = m.start_call("slow__Hang", json!({}));
    let pid = written_pid(&sb.config_home.join("forge-lsp/plugins/slow/pid")).expect("the tool started");
    let proc_dir = format!("/proc/{}", pid.trim());
    m.cancel(id);
    assert!(
        wait_for(Duration::from_secs(5), || (!Path::new(&proc_dir).exists()).then_some(())).is_some(),
        "the tool process {pid} was not killed"
    );
    assert!(m.result("tools/list", json!({}))["tools"].is_array());
}

/// A call whose line is longer than the MCP SDK's default 16 MiB (a plan within
/// `maxPlanBytes` whose characters grow when escaped) is read and answered, as the LSP side
/// would: lines up to 64 MiB. Before, the SDK dropped the line without an answer.
#[test]
fn a_call_longer_than_16_mib_is_answered() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    // The plan limit counts the text as sent (17.5 MB): raised for this test.
    repo.write_project_config("[documents]\nmaxPlanBytes = 33554432\n");
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    m.initialize();
    // 5 MB of text, 17.5 MB on the line: each control character is escaped as `\u0001`.
    let plan = format!("# Long\n{}", "a\u{1}".repeat(2_500_000));
    let r = m.call("plan-write", json!({ "content": plan }));
    assert_ok(&r);
    assert!(text(&r).contains("Plan stored"), "{}", text(&r));
    let r = m.call("plan-read", json!({ "limit": 1 }));
    assert_ok(&r);
}

/// Many calls sent at once are run a few at a time and all answered: with the process's
/// descriptors limited to 256, 600 pipelined writes all succeed. Before, each ran on a
/// thread and a database connection of its own at once, and most failed with misleading
/// errors ("not a usable forge-lsp database", "Too many open files").
#[test]
fn many_pipelined_calls_all_succeed() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).arg("mcp").current_dir(&repo.path);
    limit_open_files(&mut cmd, 256);
    let mut m = Mcp::spawn(cmd);
    m.initialize();
    let n = 600;
    for i in 0..n {
        let args = json!({ "file": format!("p{i}.rs"), "line": 1, "severity": "bug", "description": "pipelined" });
        m.send(&json!({ "jsonrpc": "2.0", "id": 10_000 + i, "method": "tools/call", "params": { "name": "review-write", "arguments": args } }));
    }
    let mut failed = vec![];
    for _ in 0..n {
        let line = m.lines.recv_timeout(REQUEST_TIMEOUT).expect("an answer");
        let msg: Value = serde_json::from_str(&line).unwrap();
        if msg.get("error").is_some() || msg["result"]["isError"] == json!(true) {
            failed.push(msg);
        }
    }
    assert!(failed.is_empty(), "{} failed, e.g. {}", failed.len(), failed[0]);
    let r = m.call("review-read", json!({ "limit": 1000 }));
    assert_ok(&r);
}

/// A client that sends notifications or a response before `initialize`, or an `initialize`
/// with malformed params, stays connected: the stray messages are dropped, the malformed
/// `initialize` is answered with -32602 naming the field, and the next `initialize` starts
/// the session. Before, the SDK's handshake ended the process on the first notification, and
/// answered the malformed `initialize` with a message about request metadata.
#[test]
fn messages_before_initialize_do_not_end_the_session() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    m.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    m.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": 7 } }));
    m.send(&json!({ "jsonrpc": "2.0", "id": "from-client", "result": {} }));
    // A request before initialize is answered, saying what is missing, and does not start
    // the session: the notification after it is dropped too.
    let r = m.request("tools/list", json!({}));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("tools/list came before initialize; start with the MCP handshake"), "{r}");
    // `ping` needs no handshake.
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    m.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let r = m.request("initialize", json!({ "protocolVersion": 5, "capabilities": {} }));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("invalid initialize: params.protocolVersion"), "{r}");
    let r = m.request("initialize", json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {} }));
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("params.clientInfo.name"), "{r}");
    let r = m.request(
        "initialize",
        json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "c" } }),
    );
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("params.clientInfo.version"), "{r}");
    let init = m.initialize();
    assert_eq!(init["serverInfo"]["name"], "forge-lsp", "{init}");
    let r = m.call("review-read", json!({}));
    assert_ok(&r);
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
}

/// A connection started by a stateless request (the 2026-07-28 protocol: each request
/// carries its version and capabilities in `_meta`) takes no `initialize` afterwards: it is
/// refused, saying why, and stateless requests go on working. Before, the SDK answered the
/// `initialize` with success and stayed stateless, so the client's next ordinary request
/// failed for missing metadata.
#[test]
fn a_stateless_session_refuses_a_later_initialize() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("src/a.rs", "fn needle() {}\n");
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "stateless-test", "version": "1" }
    });
    let r = m.request("tools/list", json!({ "_meta": meta }));
    assert!(r["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    let r = m.request(
        "initialize",
        json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } }),
    );
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("started with stateless requests"), "{r}");
    let r = m.request("tools/call", json!({ "name": "grep", "arguments": { "pattern": "needle" }, "_meta": meta }));
    assert!(r.get("error").is_none(), "{r}");
    assert!(text(&r["result"]).contains("src/a.rs:1"), "{r}");
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
}

/// Every tool is on the one page of `tools/list`: the server gives no cursor, so any
/// cursor is an invalid one (the MCP spec: -32602).
#[test]
fn tools_list_refuses_a_cursor_it_never_gave() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    m.initialize();
    let r = m.request("tools/list", json!({}));
    assert!(r["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    assert!(r["result"].get("nextCursor").is_none(), "{r}");
    let r = m.request("tools/list", json!({ "cursor": "page-2" }));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("unknown cursor \"page-2\""), "{r}");
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
}

/// A client that sends its requests and closes its input at once (`printf … | forge-lsp
/// mcp | …`), and reads the output late, still gets every answer whole before the exit:
/// replies larger than the pipe (the writer blocked on the reader) and a call that ends
/// 6 s after the input closed included. Before, the SDK gave them 5 s after the end of
/// the input: the late call was never answered, and with a slow reader a reply was cut in
/// the middle of its line.
#[test]
fn input_closed_with_calls_in_flight_gets_every_answer_whole() {
    use std::io::Read;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    user_plugin_tool(
        &sb,
        "big",
        "Slow",
        "#!/bin/sh\ncat > /dev/null\nsleep 0.3\nhead -c 300000 /dev/zero | tr '\\0' y\n",
        json!({ "description": "Slow and large.", "inputSchema": { "type": "object" } }),
    );
    user_plugin_tool(
        &sb,
        "big",
        "Late",
        "#!/bin/sh\ncat > /dev/null\nsleep 6\necho '{\"late\":true}'\n",
        json!({ "description": "Late.", "inputSchema": { "type": "object" } }),
    );
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).arg("mcp").current_dir(&repo.path);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn forge-lsp mcp");
    let mut input = String::new();
    for msg in [
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } }),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "big__Slow", "arguments": {} } }),
        json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list" }),
        json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": { "name": "big__Slow", "arguments": {} } }),
        json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": { "name": "big__Late", "arguments": {} } }),
    ] {
        input.push_str(&format!("{msg}\n"));
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    // The reader comes late: the replies fill the pipe meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = wait_exit(&mut child, WAIT).expect("forge-lsp mcp exits");
    assert_eq!(status.code(), Some(0));
    assert!(out.ends_with('\n'), "the last line was cut: …{}", &out[out.len().saturating_sub(80)..]);
    let mut ids: Vec<i64> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("a cut line ({} bytes): {e}", l.len())))
        .filter_map(|m| m["id"].as_i64())
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4, 5], "{} bytes", out.len());
    assert!(out.contains(r#"\"late\":true"#), "the late call's reply");
    assert!(out.len() > 600_000, "{} bytes", out.len());
}

/// An MCP client ends `forge-lsp mcp` with SIGTERM (the Python SDK's shutdown): the plugin
/// tools it runs go with it, their whole process groups. Before, the tool's own child was
/// adopted by init and ran on (review AA).
#[test]
fn a_terminated_mcp_process_takes_its_plugin_tools_with_it() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    user_plugin_tool(
        &sb,
        "slow",
        "Sleeper",
        "#!/bin/sh\nsleep 60 &\necho $! > \"$FORGE_PLUGIN_DIR/sleep.pid\"\nwait\n",
        json!({ "description": "Sleeps.", "inputSchema": {} }),
    );
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    m.initialize();
    m.start_call("slow__Sleeper", json!({}));
    let pid = written_pid(&sb.config_home.join("forge-lsp/plugins/slow/sleep.pid")).expect("the tool started");
    let proc_dir = format!("/proc/{}", pid.trim());
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(m.child.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut m.child, Duration::from_secs(10)).is_some(), "forge-lsp mcp did not end");
    assert!(
        wait_for(Duration::from_secs(5), || (!running(&proc_dir)).then_some(())).is_some(),
        "the tool's sleep {} outlived forge-lsp mcp",
        pid.trim()
    );
}

/// A loop session's `shell` command through the loop's server stops when the MCP client
/// cancels the call, and when the MCP process is killed (its connection to the server
/// closes). Before, it ran on to its time limit (review AA).
#[test]
fn a_cancelled_or_abandoned_shell_call_is_killed() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let sock = sb.root.join("s/forge.sock");
    let server = sb.listen_unix(&sock);
    // A first client: the server has made its database by the time it is answered.
    let mut editor = server.connect();
    editor.init(&Init::new(&repo.path));
    let session = "ses_01JMCPSHELLCANCEL000000000";
    let db = sb.db();
    db.insert_loop(&LoopFixture::running(&repo.root_commit, "mcp-shell-loop", session, &repo.path));
    db.insert_loop_session(session, &repo.root_commit, "mcp-shell-loop", "coder", "tok-shell");
    std::fs::create_dir_all(repo.path.join(".forge-test-worktree")).unwrap();
    let env = [
        ("FORGE_LSP_SOCKET", sock.to_str().expect("utf-8")),
        ("FORGE_SESSION_ID", session),
        ("FORGE_SESSION_TOKEN", "tok-shell"),
    ];
    for (k, how) in ["cancelled", "killed"].into_iter().enumerate() {
        let mut m = Mcp::start(&sb, &repo.path, &[], &env);
        m.initialize();
        let pid_file = sb.root.join(format!("shell-{k}.pid"));
        let command = format!("echo $$ > {}; exec sleep 60", pid_file.display());
        let id = m.start_call("shell", json!({ "command": command, "timeoutMs": 120000 }));
        let pid = written_pid(&pid_file).unwrap_or_else(|| {
            let said: Vec<String> = m.lines.try_iter().collect();
            panic!("{how}: the shell command did not start: {said:?}")
        });
        let proc_dir = format!("/proc/{}", pid.trim());
        if how == "cancelled" {
            m.cancel(id);
        } else {
            let _ = m.child.kill();
        }
        assert!(
            wait_for(Duration::from_secs(10), || (!running(&proc_dir)).then_some(())).is_some(),
            "{how}: the shell command {} ran on",
            pid.trim()
        );
    }
    drop(server);
}

/// Whether the process of `/proc/<pid>` runs: gone, or a zombie its new parent (init, once
/// its own parent was killed) has not reaped yet, is not running.
fn running(proc_dir: &str) -> bool {
    std::fs::read_to_string(format!("{proc_dir}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// The process id a test's tool or command writes to `file`, once it has (`None` after
/// [`WAIT`]).
fn written_pid(file: &Path) -> Option<String> {
    wait_for(WAIT, || std::fs::read_to_string(file).ok().filter(|s| !s.trim().is_empty()))
}

/// A request no JSON parser takes although its id can be read is answered -32600 with the
/// reason, as the LSP side answers it, and the session goes on: a lone UTF-16 surrogate
/// escape (JavaScript's `JSON.stringify` writes one for half an emoji), bytes that are not
/// UTF-8, nesting over 128 levels. Before, the SDK dropped the line and its client waited
/// for ever (review YA). A line that is not JSON at all is still dropped (docs/mcp.md).
#[test]
fn a_request_no_parser_takes_is_answered_and_the_session_goes_on() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut m = Mcp::start(&sb, &repo.path, &[], &[]);
    // Before the handshake too, with its own reason (review YE: the stand-in's method was
    // named instead).
    {
        let w = m.stdin.as_mut().expect("stdin open");
        w.write_all(br#"{"jsonrpc":"2.0","id":100,"method":"initialize","params":{"x":"\ud800"}}"#).unwrap();
        w.write_all(b"\n").unwrap();
        w.flush().unwrap();
        let answer: Value = serde_json::from_str(&m.lines.recv_timeout(REQUEST_TIMEOUT).unwrap()).unwrap();
        assert_eq!(answer["id"], json!(100), "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap_or_default().contains("surrogate"), "{answer}");
    }
    m.initialize();
    // A response (no method) is never answered: the next message with its id is the ping's.
    {
        let w = m.stdin.as_mut().expect("stdin open");
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"t\":\"\\ud800\"}}\n").unwrap();
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\n").unwrap();
        w.flush().unwrap();
        let answer: Value = serde_json::from_str(&m.lines.recv_timeout(REQUEST_TIMEOUT).unwrap()).unwrap();
        assert_eq!(answer, json!({ "jsonrpc": "2.0", "id": 5, "result": {} }));
    }
    let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
    let lines: Vec<(i64, Vec<u8>, &str)> = vec![
        (
            101,
            br##"{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"plan-write","arguments":{"content":"# a \ud83d plan\n"}}}"##.to_vec(),
            "lone UTF-16 surrogate",
        ),
        (
            102,
            b"{\"jsonrpc\":\"2.0\",\"id\":102,\"method\":\"tools/call\",\"params\":{\"name\":\"plan-write\",\"arguments\":{\"content\":\"\xff\xfe\"}}}".to_vec(),
            "not valid UTF-8",
        ),
        (
            103,
            format!(r#"{{"jsonrpc":"2.0","id":103,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{deep}}}}}}}"#).into_bytes(),
            "128 levels",
        ),
    ];
    for (id, line, needle) in lines {
        let w = m.stdin.as_mut().expect("stdin open");
        w.write_all(&line).unwrap();
        w.write_all(b"\n{not json\n").unwrap();
        w.flush().unwrap();
        let answer = loop {
            let line = m.lines.recv_timeout(REQUEST_TIMEOUT).unwrap_or_else(|e| panic!("no answer to {id}: {e}"));
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == json!(id) {
                break msg;
            }
        };
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap_or_default().contains(needle), "{answer}");
        // Still serving.
        assert_ok(&m.call("review-read", json!({})));
    }
    let (code, stderr) = m.finish();
    assert_eq!(code, 0, "{stderr}");
}
