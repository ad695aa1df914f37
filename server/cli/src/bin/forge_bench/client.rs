//! A small blocking LSP client that drives a `forge-lsp` child process over stdio.
//!
//! Single-threaded on purpose: the caller writes a request and then reads the server's
//! output on its own thread until the response arrives, so a measured round trip has
//! no thread hand-off in it. While reading, server→client requests (for example
//! `workspace/textDocumentContent/refresh`) are answered with a `null` result at once
//! and notifications are drained; `textDocument/publishDiagnostics` URIs are recorded.
//! A response is time-stamped as soon as its body has been read, before it is parsed.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use forge_protocol::framing::{self, Decoder, Event};
use serde::Deserialize;
use serde_json::{json, Value};

/// Where a server process runs: its binary, project and private directories.
#[derive(Debug, Clone)]
pub struct Target {
    pub bin: PathBuf,
    /// The project (a committed git repository), canonical.
    pub root: PathBuf,
    pub data_dir: PathBuf,
    pub home: PathBuf,
    pub xdg_config: PathBuf,
    pub xdg_runtime: PathBuf,
    pub stderr_log: PathBuf,
}

impl Target {
    /// `forge-lsp --data-dir DIR` in the project with the private environment; more
    /// arguments (a subcommand) may follow. stdin/stdout/stderr are not set.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--data-dir")
            .arg(&self.data_dir)
            .current_dir(&self.root)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", &self.xdg_config)
            .env("XDG_RUNTIME_DIR", &self.xdg_runtime)
            .env("XDG_DATA_HOME", self.home.join("data"))
            .env_remove("FORGE_DATA_DIR")
            .env_remove("FORGE_LOG")
            .env_remove("FORGE_SESSION_ID")
            .env_remove("FORGE_SESSION_TOKEN")
            .env_remove("FORGE_LSP_SOCKET")
            .env_remove("FORGE_AGENT");
        cmd
    }
}

/// A response: when it arrived and its `result` (or `error`).
#[derive(Debug)]
pub struct Reply {
    pub at: Instant,
    pub result: Result<Value, Value>,
}

/// What the client reads of every incoming message. Diagnostics arrays and other large
/// parameters are skipped without building a `Value`.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<UriParams>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// [`Envelope`] without `params` and `result`.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    error: Option<Value>,
}

/// Responses larger than this are not parsed into a `Value` (their result reads as null).
pub const LARGE: usize = 4 << 20;

#[derive(Deserialize)]
struct UriParams {
    #[serde(default)]
    uri: Option<String>,
}

/// Recorded `textDocument/publishDiagnostics` notifications.
#[derive(Debug, Default)]
pub struct DiagLog {
    /// Distinct `file://` URIs published so far.
    pub uris: HashSet<String>,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
    pub count: u64,
}

pub struct Server {
    child: Child,
    stdin: ChildStdin,
    out: ChildStdout,
    decoder: Decoder,
    next_id: i64,
    early: HashMap<i64, Reply>,
    pub diags: DiagLog,
    /// Server→client requests answered (refresh etc.).
    pub server_requests: u64,
    pub notifications: u64,
    /// The connection's session id (from the initialize result).
    pub session_id: String,
    pub spawned_at: Instant,
    /// When `initialized` was written (just before).
    pub initialized_at: Option<Instant>,
    /// Body size of the last response read.
    pub last_response_bytes: usize,
}

/// `file://` URI of a path, spelled as the server spells it.
pub use forge_lsp::lsp::uri::file_uri;

/// An LSP frame (header + JSON body).
fn frame(v: &Value) -> Vec<u8> {
    framing::encode(v.to_string().as_bytes())
}

impl Server {
    /// Starts the server process (no message sent yet).
    pub fn spawn(t: &Target) -> Server {
        let mut cmd = t.command();
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&t.stderr_log)
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null());
        cmd.stderr(stderr);
        Server::spawn_command(cmd)
    }

    /// Starts any LSP server process (an anchor, or `forge-lsp` with its arguments) with
    /// piped stdin/stdout; stderr is left as the command has it.
    pub fn spawn_command(mut cmd: Command) -> Server {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let spawned_at = Instant::now();
        let mut child =
            cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", cmd.get_program().to_string_lossy()));
        let stdin = child.stdin.take().expect("stdin");
        let out = child.stdout.take().expect("stdout");
        Server {
            child,
            stdin,
            out,
            decoder: Decoder::new(),
            next_id: 1,
            early: HashMap::new(),
            diags: DiagLog::default(),
            server_requests: 0,
            notifications: 0,
            session_id: String::new(),
            spawned_at,
            initialized_at: None,
            last_response_bytes: 0,
        }
    }

    /// Spawns and sends `initialize`; returns the server and the time from spawn to the
    /// initialize response. `initialized` is not sent yet.
    pub fn start(t: &Target) -> (Server, Duration) {
        Server::start_with(t, true)
    }

    /// [`Server::start`]; `content` says whether the client declares
    /// `workspace.textDocumentContent` (without it the server writes `.forge/view` copies).
    pub fn start_with(t: &Target, content: bool) -> (Server, Duration) {
        let s = Server::spawn(t);
        s.initialize(&t.root, content)
    }

    /// Sends `initialize` for the project `root` and reads its response.
    pub fn initialize(mut self, root: &Path, content: bool) -> (Server, Duration) {
        let root_uri = file_uri(root);
        let mut workspace = json!({ "workspaceFolders": true });
        if content {
            workspace["textDocumentContent"] = json!({ "dynamicRegistration": false });
        }
        let params = json!({
            "processId": std::process::id(),
            "rootUri": root_uri,
            "workspaceFolders": [{ "uri": root_uri, "name": "bench" }],
            "capabilities": {
                "general": { "positionEncodings": ["utf-16"] },
                "workspace": workspace,
                "textDocument": { "publishDiagnostics": { "relatedInformation": false } },
                "window": { "workDoneProgress": false }
            },
            "initializationOptions": { "forge": { "agent": "user" } }
        });
        let r = self.request("initialize", params);
        let took = r.at - self.spawned_at;
        let result = r.result.unwrap_or_else(|e| panic!("initialize failed: {e}"));
        self.session_id = result
            .pointer("/capabilities/experimental/forge/sessionId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        (self, took)
    }

    /// `start` + `initialized`.
    pub fn connect(t: &Target) -> (Server, Duration) {
        Server::connect_with(t, true)
    }

    /// [`Server::start_with`] + `initialized`.
    pub fn connect_with(t: &Target, content: bool) -> (Server, Duration) {
        let (mut s, took) = Server::start_with(t, content);
        s.initialized();
        (s, took)
    }

    /// Sends `initialized` and records when.
    pub fn initialized(&mut self) {
        let frame = frame(&json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }));
        self.initialized_at = Some(Instant::now());
        self.write_frame(&frame);
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn write(&mut self, v: &Value) {
        self.write_frame(&frame(v));
    }

    fn write_frame(&mut self, frame: &[u8]) {
        self.stdin.write_all(frame).and_then(|_| self.stdin.flush()).expect("write to the server");
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.write(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    /// Reads until the response to `id` arrives.
    pub fn wait(&mut self, id: i64) -> Reply {
        if let Some(r) = self.early.remove(&id) {
            return r;
        }
        loop {
            let (rid, reply) = self.read_one();
            if let Some(rid) = rid {
                if rid == id {
                    return reply;
                }
                self.early.insert(rid, reply);
            }
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Reply {
        let id = self.send(method, params);
        self.wait(id)
    }

    /// One timed request: the time from writing it to having read its response.
    /// The request is serialized before the clock starts.
    pub fn timed_raw(&mut self, method: &str, params: &Value) -> (Duration, Result<Value, Value>) {
        let id = self.next_id;
        self.next_id += 1;
        let frame = frame(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let t0 = Instant::now();
        self.write_frame(&frame);
        let r = self.wait(id);
        (r.at - t0, r.result)
    }

    /// [`Server::timed_raw`] for a request that must succeed.
    pub fn timed(&mut self, method: &str, params: &Value) -> (Duration, Value) {
        match self.timed_raw(method, params) {
            (took, Ok(v)) => (took, v),
            (_, Err(e)) => panic!("{method} {params:.200} failed: {e}"),
        }
    }

    /// `n` requests with up to `window` outstanding (`request(i)` gives the i-th method and
    /// params); every one must succeed. Returns the wall time from the first write to the
    /// last response.
    pub fn pipelined(
        &mut self,
        n: usize,
        window: usize,
        mut request: impl FnMut(usize) -> (&'static str, Value),
    ) -> Duration {
        let t0 = Instant::now();
        let mut inflight = std::collections::VecDeque::new();
        for i in 0..n {
            if inflight.len() >= window {
                let (id, method) = inflight.pop_front().expect("in flight");
                self.wait(id).result.unwrap_or_else(|e| panic!("{method} failed: {e}"));
            }
            let (method, params) = request(i);
            inflight.push_back((self.send(method, params), method));
        }
        while let Some((id, method)) = inflight.pop_front() {
            self.wait(id).result.unwrap_or_else(|e| panic!("{method} failed: {e}"));
        }
        t0.elapsed()
    }

    /// `workspace/executeCommand` params for `forge.<tool>` with one input object.
    pub fn command(tool: &str, input: Value) -> Value {
        json!({ "command": format!("forge.{tool}"), "arguments": [input] })
    }

    /// Runs a tool and returns its result (`{ text, data }`); panics on an error.
    pub fn call(&mut self, tool: &str, input: Value) -> Value {
        self.timed("workspace/executeCommand", &Server::command(tool, input)).1
    }

    /// Reads one message. Returns `(Some(id), reply)` for a response; handles
    /// requests and notifications and returns `(None, _)` for them.
    fn read_one(&mut self) -> (Option<i64>, Reply) {
        let body = self.read_frame();
        let at = Instant::now();
        let parsed = if body.len() > LARGE {
            // A huge response: only its id and error matter; its result is not kept.
            serde_json::from_slice::<Head>(&body).map(|h| Envelope {
                id: h.id,
                method: h.method,
                params: None,
                result: None,
                error: h.error,
            })
        } else {
            serde_json::from_slice::<Envelope>(&body)
        };
        let env = parsed.unwrap_or_else(|e| {
            panic!("bad message from the server ({e}): {}", String::from_utf8_lossy(&body[..body.len().min(300)]))
        });
        let none = || Reply { at, result: Ok(Value::Null) };
        match (env.method, env.id) {
            (Some(_), Some(id)) => {
                // A request from the server: answer at once.
                self.server_requests += 1;
                self.write(&json!({ "jsonrpc": "2.0", "id": id, "result": null }));
                (None, none())
            }
            (Some(method), None) => {
                self.notifications += 1;
                if method == "textDocument/publishDiagnostics" {
                    self.diags.count += 1;
                    self.diags.first.get_or_insert(at);
                    self.diags.last = Some(at);
                    if let Some(uri) = env.params.and_then(|p| p.uri).filter(|u| u.starts_with("file://")) {
                        self.diags.uris.insert(uri);
                    }
                }
                (None, none())
            }
            (None, id) => {
                self.last_response_bytes = body.len();
                let id = id.and_then(|v| v.as_i64());
                let result = match env.error {
                    Some(e) => Err(e),
                    None => Ok(env.result.unwrap_or(Value::Null)),
                };
                (id, Reply { at, result })
            }
        }
    }

    fn read_frame(&mut self) -> Vec<u8> {
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            match self.decoder.next_event() {
                Some(Event::Frame(body)) => return body,
                Some(other) => panic!("bad frame from the server: {}", other.error().map(|e| e.1).unwrap_or_default()),
                None => {}
            }
            let n = self.out.read(&mut chunk).expect("read from the server");
            if n == 0 {
                let status = self.child.try_wait().ok().flatten();
                panic!("the server closed its output (exit status {status:?})");
            }
            self.decoder.push(&chunk[..n]);
        }
    }

    /// Reads (and answers) everything the server sends until `n` distinct `file://`
    /// URIs have had diagnostics published. Returns when the last new one arrived.
    pub fn wait_diagnostic_uris(&mut self, n: usize) -> Instant {
        while self.diags.uris.len() < n {
            let (rid, reply) = self.read_one();
            if let Some(rid) = rid {
                self.early.insert(rid, reply);
            }
        }
        self.diags.last.expect("a publish")
    }

    /// Lets background work finish: waits `quiet`, then drains everything the server
    /// sent before answering a cheap request.
    pub fn settle(&mut self, quiet: Duration) {
        std::thread::sleep(quiet);
        let _ = self.request("workspace/textDocumentContent", json!({ "uri": "forge://no-such-document.md" }));
    }

    /// `shutdown` + `exit`, then waits for the process (killing our own child after 10 s).
    pub fn stop(mut self) {
        let id = self.send("shutdown", Value::Null);
        let _ = self.wait(id);
        self.notify("exit", Value::Null);
        // Keep reading until the server closes its output: it flushes what it queued.
        let mut out = self.out;
        let drain = std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                _ => {
                    eprintln!("forge-bench: server {} did not exit after `exit`; killing it", self.child.id());
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        let _ = drain.join();
    }
}

/// `(VmRSS, VmHWM)` of a process in KiB.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Samples a process's `VmRSS` on a thread every `every` until [`RssSampler::stop`].
pub struct RssSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<u64>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut max = 0;
            loop {
                max = max.max(rss_kib(pid).0);
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    return max;
                }
                std::thread::sleep(every);
            }
        });
        RssSampler { stop, handle }
    }

    /// The largest `VmRSS` sampled, in KiB.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.join().unwrap_or(0)
    }
}
