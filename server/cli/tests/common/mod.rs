//! Integration-test harness for `forge-lsp`: the real binary, real SQLite files and real git
//! repositories in temporary directories, no mocks.
//!
//! - [`Sandbox`]: per-test isolation (XDG config/runtime/data dirs, the data dir) and the
//!   builders that start the binary: [`Sandbox::stdio`], [`Sandbox::listen_unix`],
//!   [`Sandbox::listen_tcp`], [`Sandbox::call`].
//! - [`Client`]: an LSP client over stdio, a Unix socket or TCP. A reader thread records
//!   every frame: responses by id, notifications, and server→client requests, which it answers
//!   (with `null`, or a result set with [`Client::respond_to`]) and records.
//!   `wait_*` helpers block until something matching arrives or a deadline passes.
//! - [`GitRepo`]: a repository with one commit; [`Db`]: direct access to `forge.db`.
//!
//! Timeouts are generous (the suite must not be flaky on a loaded 2-core machine): a request
//! waits up to [`REQUEST_TIMEOUT`], an expected event up to [`WAIT`].

#![allow(dead_code)] // each test file uses a different part of the harness

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_forge-lsp");

/// How long a request may take before the test fails.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long to wait for something that is expected (a notification, a refresh, a file).
pub const WAIT: Duration = Duration::from_secs(10);
/// How long to wait for something that should *not* happen before concluding it did not.
pub const QUIET: Duration = Duration::from_millis(700);
/// How long a `forge-lsp call` process may run.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Environment variables of the machine that would leak into the server under test.
const SCRUBBED_ENV: &[&str] = &[
    "FORGE_DATA_DIR",
    "FORGE_LSP_SOCKET",
    "FORGE_SESSION_ID",
    "FORGE_SESSION_TOKEN",
    "FORGE_LOOP",
    "FORGE_ROLE",
    "FORGE_WORKTREE",
    "FORGE_LOG",
    "FORGE_MCP_STRUCTURED_CONTENT",
];

// ---------------------------------------------------------------------------------------------
// Sandbox
// ---------------------------------------------------------------------------------------------

/// Per-test isolation: every server and `call` started from a sandbox uses its own XDG
/// directories and data directory, so tests neither share state nor touch the machine's.
pub struct Sandbox {
    dir: TempDir,
    pub root: PathBuf,
    pub config_home: PathBuf,
    pub runtime_dir: PathBuf,
    pub data_home: PathBuf,
    /// The data directory passed with `--data-dir` by default.
    pub data_dir: PathBuf,
    /// Where server stderr logs go (one file per process).
    pub logs: PathBuf,
    counter: AtomicI64,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        // Unix socket paths are limited to 108 bytes: keep the sandbox path short.
        let base = std::env::temp_dir();
        let base = if base.as_os_str().len() > 40 { PathBuf::from("/tmp") } else { base };
        let dir = tempfile::Builder::new().prefix("fl").tempdir_in(base).expect("sandbox tempdir");
        let root = dir.path().canonicalize().expect("canonical sandbox");
        let mk = |name: &str| {
            let p = root.join(name);
            std::fs::create_dir_all(&p).expect("sandbox dir");
            p
        };
        let runtime_dir = mk("run");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&runtime_dir, std::fs::Permissions::from_mode(0o700)).expect("chmod run");
        }
        Sandbox {
            config_home: mk("config"),
            data_home: mk("share"),
            data_dir: root.join("data"),
            logs: mk("logs"),
            runtime_dir,
            root,
            dir,
            counter: AtomicI64::new(0),
        }
    }

    /// `<data_dir>/forge.db`.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("forge.db")
    }

    /// An executable file `name` in the sandbox's root holding `text` (a script with its
    /// `#!` line: a fake agent or tool).
    pub fn executable(&self, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.root.join(name);
        std::fs::write(&p, text).expect("write executable");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod executable");
        p
    }

    /// A fresh directory inside the sandbox.
    pub fn mkdir(&self, name: &str) -> PathBuf {
        let p = self.root.join(name);
        std::fs::create_dir_all(&p).expect("mkdir");
        p
    }

    pub fn next_log(&self, what: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.logs.join(format!("{n:02}-{what}.log"))
    }

    /// The binary with the sandbox's environment (no arguments yet, cwd = sandbox root).
    pub fn command(&self) -> Command {
        let mut c = Command::new(BIN);
        for k in SCRUBBED_ENV {
            c.env_remove(k);
        }
        c.env("XDG_CONFIG_HOME", &self.config_home)
            .env("XDG_RUNTIME_DIR", &self.runtime_dir)
            .env("XDG_DATA_HOME", &self.data_home)
            .env("FORGE_LOG", "warn")
            .env("RUST_BACKTRACE", "1")
            .current_dir(&self.root);
        // As from a terminal, whoever runs the tests: a run under `nohup` (CI's) would give
        // every server SIGHUP ignored, which a server keeps (`serve::shutdown_signal`).
        // SAFETY: signal() is async-signal-safe and only changes the child's disposition.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        c
    }

    /// `forge-lsp --data-dir <data_dir>` over stdio.
    pub fn stdio(&self) -> Client {
        self.stdio_with(|c| {
            c.arg("--data-dir").arg(&self.data_dir);
        })
    }

    /// `forge-lsp` over stdio; `configure` adds arguments and environment.
    pub fn stdio_with(&self, configure: impl FnOnce(&mut Command)) -> Client {
        let mut cmd = self.command();
        configure(&mut cmd);
        Client::spawn_stdio(cmd, self.next_log("stdio"), Some(self.runtime_dir.join("forge-lsp")))
    }

    /// `forge-lsp --data-dir <data_dir> serve --listen unix:<path>`, once it accepts connections.
    pub fn listen_unix(&self, path: &Path) -> ListenServer {
        let mut cmd = self.command();
        cmd.arg("--data-dir").arg(&self.data_dir).arg("serve").arg("--listen").arg(format!("unix:{}", path.display()));
        ListenServer::start(cmd, Addr::Unix(path.to_path_buf()), self.next_log("listen-unix"))
    }

    /// `forge-lsp --data-dir <data_dir> serve --listen tcp:127.0.0.1:<free port>`.
    pub fn listen_tcp(&self) -> ListenServer {
        // Retry on the (unlikely) race where the free port is taken before the server binds it.
        let mut last = None;
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = self.command();
            cmd.arg("--data-dir").arg(&self.data_dir).arg("serve").arg("--listen").arg(format!("tcp:127.0.0.1:{port}"));
            match ListenServer::try_start(cmd, Addr::Tcp(format!("127.0.0.1:{port}")), self.next_log("listen-tcp")) {
                Ok(s) => return s,
                Err(e) => last = Some(e),
            }
        }
        panic!("serve --listen tcp did not start: {}", last.unwrap_or_default());
    }

    /// A `forge-lsp call <tool>` builder (data dir = the sandbox's, cwd = the sandbox root).
    pub fn call(&self, tool: &str) -> Call {
        Call {
            cmd: self.command(),
            tool: tool.to_string(),
            input: None,
            flags: vec![],
            data_dir: Some(self.data_dir.clone()),
            stdin: None,
            timeout: CALL_TIMEOUT,
        }
    }

    /// Writes the user configuration file `$XDG_CONFIG_HOME/forge-lsp/config.toml`.
    pub fn write_user_config(&self, toml: &str) -> PathBuf {
        let p = self.config_home.join("forge-lsp/config.toml");
        std::fs::create_dir_all(p.parent().expect("parent")).expect("config dir");
        std::fs::write(&p, toml).expect("write config");
        p
    }

    /// Creates and migrates `forge.db` (by running a harmless in-process call).
    pub fn ensure_db(&self) {
        // `call` needs a project: a throwaway repository.
        let repo = GitRepo::new();
        let out = self.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).run();
        assert_eq!(out.code, 0, "creating the database failed: {out:?}");
        assert!(self.db_path().exists());
    }

    /// Opens the sandbox database directly (it must exist).
    pub fn db(&self) -> Db {
        Db::open(&self.db_path())
    }

    /// The path of the sandbox temp dir (kept alive as long as the sandbox).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind :0").local_addr().expect("addr").port()
}

// ---------------------------------------------------------------------------------------------
// Git repositories
// ---------------------------------------------------------------------------------------------

/// A git repository in a temporary directory with one commit.
pub struct GitRepo {
    _dir: TempDir,
    /// The work tree (canonical path).
    pub path: PathBuf,
    /// The hash of the root commit: the project id.
    pub root_commit: String,
}

/// Runs git in `dir` with a fixed identity and no user or system configuration.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Forge Test")
        .env("GIT_AUTHOR_EMAIL", "test@forge.invalid")
        .env("GIT_COMMITTER_NAME", "Forge Test")
        .env("GIT_COMMITTER_EMAIL", "test@forge.invalid")
        .env("GIT_AUTHOR_DATE", "2024-12-02T12:00:00Z")
        .env("GIT_COMMITTER_DATE", "2024-12-02T12:00:00Z")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl GitRepo {
    /// `git init` and one commit (a README).
    pub fn new() -> GitRepo {
        let dir = tempfile::Builder::new().prefix("flrepo").tempdir().expect("repo tempdir");
        let path = dir.path().canonicalize().expect("canonical repo");
        git(&path, &["init", "-q"]);
        // The directory name makes every fixture's root commit (the project id) unique.
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        std::fs::write(path.join("README.md"), format!("# test project {name}\n")).expect("write README");
        git(&path, &["add", "README.md"]);
        git(&path, &["commit", "-q", "-m", "initial commit"]);
        let root_commit = git(&path, &["rev-parse", "HEAD"]);
        GitRepo { _dir: dir, path, root_commit }
    }

    /// The `file://` URI of the work tree.
    pub fn uri(&self) -> String {
        file_uri(&self.path)
    }

    pub fn git(&self, args: &[&str]) -> String {
        git(&self.path, args)
    }

    /// Writes a file of the work tree (creating directories).
    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.path.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write");
        p
    }

    /// `git add -A` and a commit; returns the new HEAD.
    pub fn commit_all(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// The project's `.forge/config.toml`.
    pub fn write_project_config(&self, toml: &str) -> PathBuf {
        self.write(".forge/config.toml", toml)
    }
}

impl Default for GitRepo {
    fn default() -> Self {
        Self::new()
    }
}

/// A plain directory (no repository, so the project is `global`).
pub fn plain_dir() -> (TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("flplain").tempdir().expect("tempdir");
    let p = dir.path().canonicalize().expect("canonical");
    (dir, p)
}

/// `file://` URI of an absolute path (percent-encoding what needs it).
pub fn file_uri(path: &Path) -> String {
    let mut s = String::from("file://");
    for b in path.display().to_string().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// `forge://plan/session/<id>.md`.
pub fn session_plan_uri(session: &str) -> String {
    format!("forge://plan/session/{session}.md")
}

pub const INDEX_URI: &str = "forge://index.md";

// ---------------------------------------------------------------------------------------------
// LSP client
// ---------------------------------------------------------------------------------------------

/// A JSON-RPC error response.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    fn from_value(v: &Value) -> RpcError {
        RpcError {
            code: v.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: v.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
            data: v.get("data").cloned(),
        }
    }
    /// `error.data.kind`.
    pub fn kind(&self) -> Option<&str> {
        self.data.as_ref()?.get("kind")?.as_str()
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error {}: {}", self.code, self.message)?;
        if let Some(d) = &self.data {
            write!(f, " (data {d})")?;
        }
        Ok(())
    }
}

/// A tool's successful result: `{ text, data }`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub data: Value,
}

/// One frame received from the server, with its arrival time.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub msg: Value,
}

impl Received {
    pub fn method(&self) -> &str {
        self.msg.get("method").and_then(Value::as_str).unwrap_or("")
    }
    pub fn params(&self) -> &Value {
        self.msg.get("params").unwrap_or(&Value::Null)
    }
}

/// Everything the reader thread recorded.
#[derive(Default)]
pub struct Recorded {
    /// Responses to our requests, by numeric id.
    pub responses: HashMap<i64, Received>,
    /// Responses whose id is null or not one of ours (e.g. parse errors), in order.
    pub orphan_responses: Vec<Received>,
    /// Notifications from the server, in order.
    pub notifications: Vec<Received>,
    /// Requests from the server (already answered), in order.
    pub server_requests: Vec<Received>,
    /// Set when the server closed the stream (or sent something unreadable).
    pub closed: Option<String>,
}

struct Shared {
    state: Mutex<Recorded>,
    cv: Condvar,
}

type Writer = Arc<Mutex<Box<dyn Write + Send>>>;

/// The key of a responder value that is an error reply ([`Client::refuse`]).
const ERROR_REPLY: &str = "$error";
/// A responder marker: server requests of the method are never answered.
const NO_REPLY: &str = "__forge_test_no_reply";

/// Builds `initialize` params.
#[derive(Debug, Clone, Default)]
pub struct Init {
    pub root: Option<PathBuf>,
    pub root_uri_only: bool,
    pub agent: Option<String>,
    pub session: Option<String>,
    pub token: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub config: Option<Value>,
    /// Declare `workspace.textDocumentContent` (virtual documents and their refresh).
    pub text_document_content: bool,
    /// Declare `window.workDoneProgress`.
    pub work_done_progress: bool,
    /// Offer `utf-8` in `general.positionEncodings`.
    pub utf8: bool,
    /// Declare `workspace.codeLens.refreshSupport`.
    pub code_lens_refresh: bool,
    /// Declares no `codeActionLiteralSupport`: code actions come as bare commands.
    pub commands_only: bool,
    /// Declares no `hierarchicalDocumentSymbolSupport`: symbols come as `SymbolInformation`.
    pub flat_symbols: bool,
    /// Extra `initializationOptions.forge` fields (merged last).
    pub forge_extra: Option<Value>,
}

impl Init {
    /// A client of the folder `root` (the project) that supports virtual documents.
    pub fn new(root: &Path) -> Init {
        Init { root: Some(root.to_path_buf()), text_document_content: true, ..Default::default() }
    }
    /// A client without a workspace folder or rootUri.
    pub fn rootless() -> Init {
        Init { text_document_content: true, ..Default::default() }
    }
    pub fn agent(mut self, a: &str) -> Self {
        self.agent = Some(a.into());
        self
    }
    pub fn session(mut self, s: &str) -> Self {
        self.session = Some(s.into());
        self
    }
    pub fn token(mut self, t: &str) -> Self {
        self.token = Some(t.into());
        self
    }
    pub fn data_dir(mut self, d: &Path) -> Self {
        self.data_dir = Some(d.to_path_buf());
        self
    }
    pub fn config(mut self, c: Value) -> Self {
        self.config = Some(c);
        self
    }
    pub fn text_document_content(mut self, on: bool) -> Self {
        self.text_document_content = on;
        self
    }
    pub fn work_done_progress(mut self, on: bool) -> Self {
        self.work_done_progress = on;
        self
    }
    pub fn code_lens_refresh(mut self, on: bool) -> Self {
        self.code_lens_refresh = on;
        self
    }
    pub fn utf8(mut self, on: bool) -> Self {
        self.utf8 = on;
        self
    }
    /// Name the folder only through `rootUri` (no `workspaceFolders`).
    pub fn root_uri_only(mut self) -> Self {
        self.root_uri_only = true;
        self
    }

    /// The `initialize` params.
    pub fn params(&self) -> Value {
        let mut forge = serde_json::Map::new();
        if let Some(a) = &self.agent {
            forge.insert("agent".into(), json!(a));
        }
        if let Some(s) = &self.session {
            forge.insert("session".into(), json!(s));
        }
        if let Some(t) = &self.token {
            forge.insert("token".into(), json!(t));
        }
        if let Some(d) = &self.data_dir {
            forge.insert("dataDir".into(), json!(d.display().to_string()));
        }
        if let Some(c) = &self.config {
            forge.insert("config".into(), c.clone());
        }
        if let Some(Value::Object(extra)) = &self.forge_extra {
            for (k, v) in extra {
                forge.insert(k.clone(), v.clone());
            }
        }
        let mut caps = json!({
            "general": { "positionEncodings": if self.utf8 { json!(["utf-8", "utf-16"]) } else { json!(["utf-16"]) } },
            "textDocument": {
                "synchronization": { "dynamicRegistration": false },
                "publishDiagnostics": { "relatedInformation": false },
                "documentSymbol": { "hierarchicalDocumentSymbolSupport": true },
                "codeLens": {},
                "foldingRange": {},
                "codeAction": { "codeActionLiteralSupport": { "codeActionKind": { "valueSet": ["quickfix"] } } }
            },
            "workspace": { "executeCommand": {}, "workspaceFolders": true },
            "window": { "workDoneProgress": self.work_done_progress, "showMessage": {} }
        });
        if self.text_document_content {
            caps["workspace"]["textDocumentContent"] = json!({ "dynamicRegistration": false });
        }
        if self.code_lens_refresh {
            caps["workspace"]["codeLens"] = json!({ "refreshSupport": true });
        }
        if self.commands_only {
            caps["textDocument"].as_object_mut().expect("textDocument").remove("codeAction");
        }
        if self.flat_symbols {
            caps["textDocument"]["documentSymbol"] = json!({});
        }
        let mut p = json!({
            "processId": std::process::id(),
            "clientInfo": { "name": "forge-lsp-tests", "version": "0" },
            "capabilities": caps,
            "initializationOptions": { "forge": Value::Object(forge) },
        });
        match &self.root {
            Some(root) => {
                p["rootUri"] = json!(file_uri(root));
                if !self.root_uri_only {
                    p["workspaceFolders"] = json!([{ "uri": file_uri(root), "name": "project" }]);
                }
            }
            None => p["rootUri"] = Value::Null,
        }
        p
    }
}

/// An LSP client connected to a server process (stdio) or a socket.
pub struct Client {
    shared: Arc<Shared>,
    writer: Writer,
    responders: Arc<Mutex<HashMap<String, Value>>>,
    next_id: AtomicI64,
    child: Option<Child>,
    /// The server's stderr log (stdio servers).
    pub log: Option<PathBuf>,
    /// The directory of private sockets of the server (stdio servers).
    private_socket_dir: Option<PathBuf>,
    /// Set by [`Client::init`]: the connection's session id.
    pub session: Option<String>,
    /// Set by [`Client::init`]: the `initialize` result.
    pub init_result: Option<Value>,
    /// Closes a socket connection on drop (the reader thread holds a clone of the stream).
    closer: Option<Box<dyn Fn() + Send>>,
}

impl Client {
    /// Spawns `cmd` as a stdio server and connects to it.
    pub fn spawn_stdio(mut cmd: Command, log: PathBuf, private_socket_dir: Option<PathBuf>) -> Client {
        let log_file = std::fs::File::create(&log).expect("log file");
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::from(log_file));
        let mut child = cmd.spawn().expect("spawn forge-lsp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let mut c = Client::of_process(Box::new(stdout), Box::new(stdin), child, log);
        c.private_socket_dir = private_socket_dir;
        c
    }

    /// A client over `reader`/`writer` of the server process `child` (stderr in `log`).
    pub fn of_process(
        reader: Box<dyn Read + Send>,
        writer: Box<dyn Write + Send>,
        child: Child,
        log: PathBuf,
    ) -> Client {
        let mut c = Client::over(reader, writer);
        c.child = Some(child);
        c.log = Some(log);
        c
    }

    /// Connects to a Unix socket.
    pub fn connect_unix(path: &Path) -> std::io::Result<Client> {
        let s = UnixStream::connect(path)?;
        let r = s.try_clone()?;
        let k = s.try_clone()?;
        let mut c = Client::over(Box::new(r), Box::new(s));
        c.closer = Some(Box::new(move || {
            let _ = k.shutdown(std::net::Shutdown::Both);
        }));
        Ok(c)
    }

    /// Connects to a TCP address.
    pub fn connect_tcp(addr: &str) -> std::io::Result<Client> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        let r = s.try_clone()?;
        let k = s.try_clone()?;
        let mut c = Client::over(Box::new(r), Box::new(s));
        c.closer = Some(Box::new(move || {
            let _ = k.shutdown(std::net::Shutdown::Both);
        }));
        Ok(c)
    }

    /// A client over any reader/writer pair.
    pub fn over(reader: Box<dyn Read + Send>, writer: Box<dyn Write + Send>) -> Client {
        let shared = Arc::new(Shared { state: Mutex::new(Recorded::default()), cv: Condvar::new() });
        let writer: Writer = Arc::new(Mutex::new(writer));
        let responders: Arc<Mutex<HashMap<String, Value>>> = Arc::new(Mutex::new(HashMap::new()));
        {
            let shared = shared.clone();
            let writer = writer.clone();
            let responders = responders.clone();
            std::thread::Builder::new()
                .name("lsp-test-reader".into())
                .spawn(move || reader_loop(reader, shared, writer, responders))
                .expect("reader thread");
        }
        Client {
            shared,
            writer,
            responders,
            next_id: AtomicI64::new(1),
            child: None,
            log: None,
            private_socket_dir: None,
            session: None,
            init_result: None,
            closer: None,
        }
    }

    /// The result this client returns for server requests of `method` (default `null`).
    pub fn respond_to(&self, method: &str, result: Value) {
        self.responders.lock().expect("responders").insert(method.to_string(), result);
    }

    /// This client never answers server requests of `method` (a client that ignores them).
    pub fn ignore(&self, method: &str) {
        self.respond_to(method, json!({ NO_REPLY: true }));
    }

    /// This client answers server requests of `method` with a JSON-RPC error.
    pub fn refuse(&self, method: &str, code: i64, message: &str) {
        self.respond_to(method, json!({ ERROR_REPLY: { "code": code, "message": message } }));
    }

    // --- sending ------------------------------------------------------------------------------

    /// Writes raw bytes to the server.
    pub fn send_raw(&self, bytes: &[u8]) {
        let mut w = self.writer.lock().expect("writer");
        w.write_all(bytes).expect("write to server");
        w.flush().expect("flush");
    }

    /// Frames `body` with a `Content-Length` header and sends it.
    pub fn send_body(&self, body: &[u8]) {
        let mut f = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        f.extend_from_slice(body);
        self.send_raw(&f);
    }

    pub fn send(&self, msg: &Value) {
        self.send_body(msg.to_string().as_bytes());
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request without waiting; returns its id.
    pub fn send_request(&self, method: &str, params: Value) -> i64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    /// Reserves a request id (for hand-built requests).
    pub fn next_request_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Waits for the response with `id` (the whole message).
    pub fn wait_response(&self, id: i64, timeout: Duration) -> Value {
        let r = self.wait_until(timeout, |s| s.responses.get(&id).map(|r| r.msg.clone()));
        match r {
            Some(v) => v,
            None => panic!("no response to request {id} within {timeout:?}{}", self.diagnostics()),
        }
    }

    /// Sends a request and waits for its result or error.
    pub fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.send_request(method, params);
        let msg = self.wait_response(id, REQUEST_TIMEOUT);
        match msg.get("error") {
            Some(e) => Err(RpcError::from_value(e)),
            None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    /// A request that must succeed.
    pub fn request_ok(&self, method: &str, params: Value) -> Value {
        match self.request(method, params.clone()) {
            Ok(v) => v,
            Err(e) => panic!("{method} {params} failed: {e}{}", self.diagnostics()),
        }
    }

    /// A request that must fail.
    pub fn request_err(&self, method: &str, params: Value) -> RpcError {
        match self.request(method, params.clone()) {
            Ok(v) => panic!("{method} {params} was expected to fail but returned {v}"),
            Err(e) => e,
        }
    }

    // --- lifecycle ----------------------------------------------------------------------------

    /// Sends `initialize` (only).
    pub fn initialize(&self, init: &Init) -> Result<Value, RpcError> {
        self.request("initialize", init.params())
    }

    /// `initialize` + `initialized`; remembers the session id. Panics on failure.
    pub fn init(&mut self, init: &Init) -> Value {
        let r = match self.initialize(init) {
            Ok(r) => r,
            Err(e) => panic!("initialize failed: {e}{}", self.diagnostics()),
        };
        self.notify("initialized", json!({}));
        self.session = r.pointer("/capabilities/experimental/forge/sessionId").and_then(Value::as_str).map(Into::into);
        self.init_result = Some(r.clone());
        r
    }

    /// The session id of an initialized connection.
    pub fn session_id(&self) -> String {
        self.session.clone().expect("initialized connection with a sessionId")
    }

    /// `shutdown` then `exit`; for a stdio server, waits for the process and returns its
    /// status and how long the exit took after `exit` was sent.
    pub fn shutdown_exit(&mut self) -> Option<(ExitStatus, Duration)> {
        let r = self.request("shutdown", Value::Null);
        assert!(r.is_ok(), "shutdown failed: {r:?}");
        let sent = Instant::now();
        self.notify("exit", Value::Null);
        let child = self.child.as_mut()?;
        let status = wait_child(child, REQUEST_TIMEOUT).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("the server did not exit within {REQUEST_TIMEOUT:?} after exit");
        });
        Some((status, sent.elapsed()))
    }

    /// Waits for the server process (stdio) to end.
    /// Closes the connection's input: the server reads the end of it.
    pub fn close_input(&self) {
        *self.writer.lock().unwrap_or_else(|p| p.into_inner()) = Box::new(std::io::sink());
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_child(self.child.as_mut()?, timeout)
    }

    /// Whether the server process (stdio) is still running.
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => self.closed().is_none(),
        }
    }

    /// The server process id (stdio).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's private callback socket (stdio servers): `<dir>/<pid>/forge.sock`.
    pub fn private_socket(&self) -> Option<PathBuf> {
        Some(self.private_socket_dir.as_ref()?.join(self.pid()?.to_string()).join("forge.sock"))
    }

    /// Why the stream closed, if it did.
    pub fn closed(&self) -> Option<String> {
        self.shared.state.lock().expect("state").closed.clone()
    }

    // --- tools --------------------------------------------------------------------------------

    /// `workspace/executeCommand` with raw `arguments` (`None` = absent).
    pub fn execute(&self, command: &str, arguments: Option<Value>) -> Result<Value, RpcError> {
        let mut p = json!({ "command": command });
        if let Some(a) = arguments {
            p["arguments"] = a;
        }
        self.request("workspace/executeCommand", p)
    }

    /// Runs `forge.<tool>` with one input object.
    pub fn tool(&self, tool: &str, input: Value) -> Result<ToolOutput, RpcError> {
        let r = self.execute(&format!("forge.{tool}"), Some(json!([input])))?;
        let text = r.get("text").and_then(Value::as_str);
        let Some(text) = text else { panic!("forge.{tool}: result without text: {r}") };
        Ok(ToolOutput { text: text.to_string(), data: r.get("data").cloned().unwrap_or(Value::Null) })
    }

    /// A tool call that must succeed.
    pub fn tool_ok(&self, tool: &str, input: Value) -> ToolOutput {
        match self.tool(tool, input.clone()) {
            Ok(o) => o,
            Err(e) => panic!("forge.{tool} {input} failed: {e}{}", self.diagnostics()),
        }
    }

    /// A tool call that must fail.
    pub fn tool_err(&self, tool: &str, input: Value) -> RpcError {
        match self.tool(tool, input.clone()) {
            Ok(o) => panic!("forge.{tool} {input} was expected to fail but returned {:?}", o.text),
            Err(e) => e,
        }
    }

    /// `workspace/textDocumentContent` → the text.
    pub fn content(&self, uri: &str) -> Result<String, RpcError> {
        let r = self.request("workspace/textDocumentContent", json!({ "uri": uri }))?;
        Ok(r.get("text").and_then(Value::as_str).unwrap_or_else(|| panic!("no text in {r}")).to_string())
    }

    pub fn did_open(&self, uri: &str, text: &str, version: i32) {
        self.notify(
            "textDocument/didOpen",
            json!({ "textDocument": { "uri": uri, "languageId": "markdown", "version": version, "text": text } }),
        );
    }

    pub fn did_change(&self, uri: &str, text: &str, version: i32) {
        self.notify(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": version }, "contentChanges": [{ "text": text }] }),
        );
    }

    pub fn did_close(&self, uri: &str) {
        self.notify("textDocument/didClose", json!({ "textDocument": { "uri": uri } }));
    }

    // --- recorded traffic ---------------------------------------------------------------------

    /// Blocks until `f` returns `Some` on the recorded traffic, or `timeout` passes.
    pub fn wait_until<T>(&self, timeout: Duration, mut f: impl FnMut(&Recorded) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock().expect("state");
        loop {
            if let Some(t) = f(&st) {
                return Some(t);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            // Re-check at least every 50 ms, so `f` may also look at things outside the
            // traffic (files, the database).
            let slice = (deadline - now).min(Duration::from_millis(50));
            st = self.shared.cv.wait_timeout(st, slice).expect("state").0;
        }
    }

    /// Runs `f` on the recorded traffic.
    pub fn with_recorded<T>(&self, f: impl FnOnce(&Recorded) -> T) -> T {
        f(&self.shared.state.lock().expect("state"))
    }

    /// Every notification so far.
    pub fn notifications(&self) -> Vec<Received> {
        self.with_recorded(|s| s.notifications.clone())
    }

    /// Notifications of `method` so far (their messages).
    pub fn notifications_of(&self, method: &str) -> Vec<Value> {
        self.with_recorded(|s| s.notifications.iter().filter(|r| r.method() == method).map(|r| r.msg.clone()).collect())
    }

    /// Notifications of `method` after `since` (their params).
    pub fn notifications_since(&self, since: Mark, method: &str) -> Vec<Value> {
        self.with_recorded(|s| {
            s.notifications[since.notifications..]
                .iter()
                .filter(|r| r.method() == method)
                .map(|r| r.params().clone())
                .collect()
        })
    }

    /// Waits for a notification of `method` after `since` whose params match `pred`.
    pub fn wait_method_since(
        &self,
        since: Mark,
        method: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        self.wait_notification_since(since, timeout, |r| r.method() == method && pred(r.params()))
            .map(|r| r.params().clone())
    }

    /// Every server→client request so far.
    pub fn server_requests(&self) -> Vec<Received> {
        self.with_recorded(|s| s.server_requests.clone())
    }

    /// The number of notifications and server requests so far: a mark for `*_since` waits.
    pub fn mark(&self) -> Mark {
        self.with_recorded(|s| Mark {
            notifications: s.notifications.len(),
            server_requests: s.server_requests.len(),
            orphan_responses: s.orphan_responses.len(),
        })
    }

    /// Waits for a notification (after `since`) matching `pred`.
    pub fn wait_notification_since(
        &self,
        since: Mark,
        timeout: Duration,
        mut pred: impl FnMut(&Received) -> bool,
    ) -> Option<Received> {
        self.wait_until(timeout, |s| s.notifications[since.notifications..].iter().find(|r| pred(r)).cloned())
    }

    /// Waits for any notification matching `pred`.
    pub fn wait_notification(&self, timeout: Duration, pred: impl FnMut(&Received) -> bool) -> Option<Received> {
        self.wait_notification_since(Mark::default(), timeout, pred)
    }

    /// Waits for a server request (after `since`) matching `pred`.
    pub fn wait_server_request_since(
        &self,
        since: Mark,
        timeout: Duration,
        mut pred: impl FnMut(&Received) -> bool,
    ) -> Option<Received> {
        self.wait_until(timeout, |s| s.server_requests[since.server_requests..].iter().find(|r| pred(r)).cloned())
    }

    /// Waits for a `workspace/textDocumentContent/refresh` of `uri` after `since`.
    pub fn wait_refresh(&self, since: Mark, uri: &str, timeout: Duration) -> Option<Received> {
        self.wait_server_request_since(since, timeout, |r| {
            r.method() == "workspace/textDocumentContent/refresh" && r.params().get("uri") == Some(&json!(uri))
        })
    }

    /// Refreshes received so far (their URIs).
    pub fn refreshed_uris(&self) -> Vec<String> {
        self.with_recorded(|s| {
            s.server_requests
                .iter()
                .filter(|r| r.method() == "workspace/textDocumentContent/refresh")
                .filter_map(|r| r.params().get("uri").and_then(Value::as_str).map(String::from))
                .collect()
        })
    }

    /// Waits for `textDocument/publishDiagnostics` on `uri` (after `since`) matching `pred`
    /// on its `diagnostics` array.
    pub fn wait_diagnostics_since(
        &self,
        since: Mark,
        uri: &str,
        timeout: Duration,
        mut pred: impl FnMut(&[Value]) -> bool,
    ) -> Option<Vec<Value>> {
        self.wait_until(timeout, |s| {
            s.notifications[since.notifications..].iter().rev().find_map(|r| {
                if r.method() != "textDocument/publishDiagnostics" || r.params().get("uri") != Some(&json!(uri)) {
                    return None;
                }
                let d = r.params().get("diagnostics").and_then(Value::as_array).cloned().unwrap_or_default();
                pred(&d).then_some(d)
            })
        })
    }

    /// The latest diagnostics published for `uri`, if any.
    pub fn latest_diagnostics(&self, uri: &str) -> Option<Vec<Value>> {
        self.with_recorded(|s| {
            s.notifications.iter().rev().find_map(|r| {
                (r.method() == "textDocument/publishDiagnostics" && r.params().get("uri") == Some(&json!(uri)))
                    .then(|| r.params().get("diagnostics").and_then(Value::as_array).cloned().unwrap_or_default())
            })
        })
    }

    /// Waits for a response that is not to one of our numbered requests (e.g. a parse error
    /// answered with `id: null`) after `since`.
    pub fn wait_orphan_response(&self, since: Mark, timeout: Duration) -> Option<Value> {
        self.wait_until(timeout, |s| s.orphan_responses.get(since.orphan_responses).map(|r| r.msg.clone()))
    }

    /// Server stderr (stdio servers) and connection state, for failure messages.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        if let Some(c) = self.closed() {
            s.push_str(&format!("\n[connection closed: {c}]"));
        }
        if let Some(log) = &self.log {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = text.chars().rev().take(4000).collect::<Vec<_>>().into_iter().rev().collect();
            s.push_str(&format!("\n[server stderr {}]\n{tail}", log.display()));
        }
        s
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(close) = self.closer.take() {
            close();
        }
        if let Some(mut c) = self.child.take() {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// Counts of recorded traffic at a point in time (see [`Client::mark`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Mark {
    pub notifications: usize,
    pub server_requests: usize,
    pub orphan_responses: usize,
}

/// Reads one LSP frame. `Ok(None)` at a clean end of stream.
pub fn read_frame(r: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut len: Option<usize> = None;
    let mut saw_header = false;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return if saw_header {
                Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "eof inside a header"))
            } else {
                Ok(None)
            };
        }
        let t = line.trim_end_matches(['\r', '\n']);
        if t.is_empty() {
            if saw_header {
                break;
            }
            continue;
        }
        saw_header = true;
        let (k, v) = t
            .split_once(':')
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad header line {t:?}")))?;
        if k.trim().eq_ignore_ascii_case("content-length") {
            len = Some(v.trim().parse().map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad Content-Length {v:?}"))
            })?);
        }
    }
    let len = len.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no Content-Length"))?;
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

fn reader_loop(
    reader: Box<dyn Read + Send>,
    shared: Arc<Shared>,
    writer: Writer,
    responders: Arc<Mutex<HashMap<String, Value>>>,
) {
    let mut r = BufReader::with_capacity(1 << 16, reader);
    let closed = loop {
        let body = match read_frame(&mut r) {
            Ok(Some(b)) => b,
            Ok(None) => break "end of stream".to_string(),
            Err(e) => break format!("read error: {e}"),
        };
        let msg: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => break format!("the server sent invalid JSON ({e}): {}", String::from_utf8_lossy(&body)),
        };
        let rec = Received { at: Instant::now(), msg: msg.clone() };
        let method = msg.get("method").and_then(Value::as_str).map(String::from);
        let id = msg.get("id").cloned();
        match (method, id) {
            (Some(method), Some(id)) => {
                // A request from the server: answer first (the server may be waiting), then record.
                let result = responders.lock().expect("responders").get(&method).cloned().unwrap_or(Value::Null);
                if result.get(NO_REPLY).is_none() {
                    let reply = match result.get(ERROR_REPLY) {
                        Some(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
                        None => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                    }
                    .to_string();
                    let frame = format!("Content-Length: {}\r\n\r\n{}", reply.len(), reply);
                    if let Ok(mut w) = writer.lock() {
                        let _ = w.write_all(frame.as_bytes());
                        let _ = w.flush();
                    }
                }
                shared.state.lock().expect("state").server_requests.push(rec);
            }
            (Some(_), None) => shared.state.lock().expect("state").notifications.push(rec),
            (None, id) => {
                let mut st = shared.state.lock().expect("state");
                match id.as_ref().and_then(Value::as_i64) {
                    Some(n) => {
                        st.responses.insert(n, rec);
                    }
                    None => st.orphan_responses.push(rec),
                }
            }
        }
        shared.cv.notify_all();
    };
    shared.state.lock().expect("state").closed = Some(closed);
    shared.cv.notify_all();
}

/// Writes `path` (its directories made) with `text`, last modified `days` days ago: an
/// old file for the sweeps that go by age.
pub fn write_aged(path: &Path, text: &str, days: u64) -> PathBuf {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    std::fs::write(path, text).expect("write");
    let t = std::time::SystemTime::now() - Duration::from_secs(days * 86_400);
    std::fs::File::options().write(true).open(path).expect("open").set_modified(t).expect("mtime");
    path.to_path_buf()
}

/// Polls `f` every 20 ms until it returns `Some` or `timeout` passes (for conditions outside
/// a client's traffic: files, the database, processes).
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(t) = f() {
            return Some(t);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a child with a deadline.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// serve --listen
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub enum Addr {
    Unix(PathBuf),
    Tcp(String),
}

/// A `forge-lsp serve --listen` process.
pub struct ListenServer {
    child: Child,
    pub addr: Addr,
    pub log: PathBuf,
}

impl ListenServer {
    pub fn start(cmd: Command, addr: Addr, log: PathBuf) -> ListenServer {
        match Self::try_start(cmd, addr, log) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    fn try_start(mut cmd: Command, addr: Addr, log: PathBuf) -> Result<ListenServer, String> {
        let log_file = std::fs::File::create(&log).expect("log file");
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log_file));
        let child = cmd.spawn().expect("spawn forge-lsp serve");
        let mut s = ListenServer { child, addr, log };
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            let ok = match &s.addr {
                Addr::Unix(p) => UnixStream::connect(p).is_ok(),
                Addr::Tcp(a) => TcpStream::connect(a).is_ok(),
            };
            if ok {
                return Ok(s);
            }
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!("forge-lsp serve exited ({status}) before listening: {}", s.stderr()));
            }
            if Instant::now() >= deadline {
                let _ = s.child.kill();
                return Err(format!("forge-lsp serve did not listen on {:?}: {}", s.addr, s.stderr()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A new client connection.
    pub fn connect(&self) -> Client {
        let mut c = match &self.addr {
            Addr::Unix(p) => Client::connect_unix(p),
            Addr::Tcp(a) => Client::connect_tcp(a),
        }
        .expect("connect to forge-lsp serve");
        c.log = Some(self.log.clone());
        c
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, and waits for the exit: the server shuts down (unregisters).
    pub fn terminate(&mut self) {
        // SAFETY: a signal to the child this handle started and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }

    /// SIGKILL: the server dies without shutting down (its registration and socket file stay).
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ListenServer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// forge-lsp call
// ---------------------------------------------------------------------------------------------

/// A `forge-lsp call` invocation.
pub struct Call {
    cmd: Command,
    tool: String,
    input: Option<String>,
    flags: Vec<String>,
    data_dir: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

/// What a `forge-lsp call` printed.
#[derive(Debug, Clone)]
pub struct CallOutput {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Call {
    /// The input as a JSON value.
    pub fn input(mut self, v: Value) -> Self {
        self.input = Some(v.to_string());
        self
    }
    /// The input argument verbatim (e.g. invalid JSON, or `-`).
    pub fn raw_input(mut self, s: &str) -> Self {
        self.input = Some(s.to_string());
        self
    }
    pub fn json(mut self) -> Self {
        self.flags.push("--json".into());
        self
    }
    pub fn agent(mut self, a: &str) -> Self {
        self.flags.extend(["--agent".into(), a.into()]);
        self
    }
    pub fn session(mut self, s: &str) -> Self {
        self.flags.extend(["--session".into(), s.into()]);
        self
    }
    pub fn arg(mut self, a: &str) -> Self {
        self.flags.push(a.into());
        self
    }
    pub fn data_dir(mut self, d: &Path) -> Self {
        self.data_dir = Some(d.to_path_buf());
        self
    }
    /// No `--data-dir` (the data directory then comes from the environment).
    pub fn no_data_dir(mut self) -> Self {
        self.data_dir = None;
        self
    }
    pub fn cwd(mut self, d: &Path) -> Self {
        self.cmd.current_dir(d);
        self
    }
    /// Starts the call with a soft limit of `n` open files (the hard limit as it is).
    pub fn soft_open_files(mut self, n: u64) -> Self {
        soft_open_files(&mut self.cmd, n);
        self
    }
    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(k, v);
        self
    }
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Runs the process to completion (killed after [`CALL_TIMEOUT`]).
    pub fn run(mut self) -> CallOutput {
        if let Some(d) = &self.data_dir {
            self.cmd.arg("--data-dir").arg(d);
        }
        self.cmd.arg("call").arg(&self.tool);
        if let Some(i) = &self.input {
            self.cmd.arg(i);
        }
        self.cmd.args(&self.flags);
        run_process(self.cmd, self.stdin, self.timeout)
    }
}

/// Runs a process with piped output and a deadline.
pub fn run_process(mut cmd: Command, stdin: Option<Vec<u8>>, timeout: Duration) -> CallOutput {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn process");
    if let Some(bytes) = stdin {
        let mut w = child.stdin.take().expect("stdin");
        std::thread::spawn(move || {
            let _ = w.write_all(&bytes);
        });
    }
    let pipe = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = pipe(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = pipe(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let status = match wait_child(&mut child, timeout) {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {timeout:?}; stderr: {}", err.join().unwrap_or_default());
        }
    };
    let elapsed = started.elapsed();
    CallOutput {
        code: status.code().unwrap_or(-1),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed,
    }
}

// ---------------------------------------------------------------------------------------------
// The database
// ---------------------------------------------------------------------------------------------

/// Direct access to a `forge.db` (for fixtures the tools cannot create, and for checks).
pub struct Db {
    pub conn: rusqlite::Connection,
}

/// A loop row to insert (the columns the schema requires, plus the common ones).
#[derive(Debug, Clone)]
pub struct LoopFixture {
    pub project_id: String,
    pub loop_name: String,
    pub status: String,
    pub phase: String,
    pub current_session_id: String,
    pub project_dir: String,
    pub worktree_dir: String,
    pub total_sections: i64,
}

impl LoopFixture {
    /// A running loop in `coding` whose current session is `session`.
    pub fn running(project_id: &str, loop_name: &str, session: &str, project_dir: &Path) -> LoopFixture {
        LoopFixture {
            project_id: project_id.into(),
            loop_name: loop_name.into(),
            status: "running".into(),
            phase: "coding".into(),
            current_session_id: session.into(),
            project_dir: project_dir.display().to_string(),
            worktree_dir: project_dir.join(".forge-test-worktree").display().to_string(),
            total_sections: 0,
        }
    }
}

impl Db {
    pub fn open(path: &Path) -> Db {
        let conn = rusqlite::Connection::open(path).expect("open forge.db");
        conn.busy_timeout(Duration::from_secs(10)).expect("busy_timeout");
        conn.pragma_update(None, "foreign_keys", "ON").expect("foreign_keys");
        Db { conn }
    }

    pub fn insert_loop(&self, l: &LoopFixture) {
        self.conn
            .execute(
                "INSERT INTO loops (project_id, loop_name, title, status, phase, current_session_id, project_dir,
                    worktree_dir, worktree_branch, total_sections, started_at)
                 VALUES (?1, ?2, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                rusqlite::params![
                    l.project_id,
                    l.loop_name,
                    l.status,
                    l.phase,
                    l.current_session_id,
                    l.project_dir,
                    l.worktree_dir,
                    format!("forge/{}", l.loop_name),
                    l.total_sections,
                    now_ms(),
                ],
            )
            .expect("insert loop");
    }

    /// A loop phase session whose token hash is sha-256 hex of `token`.
    pub fn insert_loop_session(&self, session: &str, project_id: &str, loop_name: &str, role: &str, token: &str) {
        self.conn
            .execute(
                "INSERT INTO loop_sessions (session_id, project_id, loop_name, role, token_hash, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                rusqlite::params![session, project_id, loop_name, role, sha256_hex(token), now_ms()],
            )
            .expect("insert loop session");
    }

    /// `updated_at` of a session plan.
    pub fn session_plan_updated_at(&self, project_id: &str, session: &str) -> Option<i64> {
        self.conn
            .query_row(
                "SELECT updated_at FROM plans WHERE project_id = ?1 AND session_id = ?2",
                rusqlite::params![project_id, session],
                |r| r.get(0),
            )
            .ok()
    }

    /// The stored content of a session plan.
    pub fn session_plan(&self, project_id: &str, session: &str) -> Option<String> {
        self.conn
            .query_row(
                "SELECT content FROM plans WHERE project_id = ?1 AND session_id = ?2",
                rusqlite::params![project_id, session],
                |r| r.get(0),
            )
            .ok()
    }

    pub fn set_session_plan_updated_at(&self, project_id: &str, session: &str, at: i64) {
        let n = self
            .conn
            .execute(
                "UPDATE plans SET updated_at = ?3 WHERE project_id = ?1 AND session_id = ?2",
                rusqlite::params![project_id, session, at],
            )
            .expect("update plan");
        assert_eq!(n, 1, "no session plan {session} in project {project_id}");
        // As every writer of a plan does (the servers' plan cache relies on it).
        self.conn
            .execute(
                "INSERT INTO changes (project_id, kind, key, at) VALUES (?1, 'plan', ?2, ?3)",
                rusqlite::params![
                    project_id,
                    forge_protocol::uri::ForgeUri::SessionPlan(session.to_string()).to_uri(),
                    at
                ],
            )
            .expect("record the plan's change");
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.conn.query_row(sql, [], |r| r.get(0)).expect("count query")
    }
}

/// Hex sha-256.
pub fn sha256_hex(s: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Plans and text helpers
// ---------------------------------------------------------------------------------------------

/// A well-formed two-phase plan: no structure warnings.
pub const GOOD_PLAN: &str = "# Add OAuth login

## Objective
Let users sign in with an OAuth provider.

Loop Name: add-oauth

<!-- forge-section -->
## Phase 1: token storage
### Files
- src/auth/token.rs
### Edits
- Add a Token type with expiry.
### Acceptance Criteria
- Tokens round-trip through storage.
### Verification
- cargo test -p auth

<!-- forge-section -->
## Phase 2: login flow
### Files
- src/auth/login.rs
### Edits
- Add the login handler.
### Acceptance Criteria
- A user can log in.
### Verification
- cargo test -p auth login

## Decisions
- Use the oauth2 crate.

## Conventions
- Errors are thiserror enums.

## Key Context
- The session store lives in src/session.rs.";

/// `Plan stored: <L> lines, <C> chars.` for a stored text (JS semantics: lines split on
/// `\n`, chars in UTF-16 code units).
pub fn stored_line(stored: &str) -> String {
    format!("Plan stored: {} lines, {} chars.", stored.split('\n').count(), stored.encode_utf16().count())
}

/// Asserts that `hay` contains `needle`, printing both on failure.
#[track_caller]
pub fn assert_contains(hay: &str, needle: &str) {
    assert!(hay.contains(needle), "expected to find\n  {needle:?}\nin\n  {hay:?}");
}

/// Whether bubblewrap can start a sandbox on this machine (probed once). The loop tests run
/// with the sandbox on, as users get it, when it can; otherwise they say so on standard
/// error (past the test harness's capture, so the skip is visible) and run without it.
pub fn sandbox_available() -> bool {
    static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| {
        let out = Command::new("bwrap")
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-all"])
            .args(["--die-with-parent", "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        let why = match out {
            Ok(o) if o.status.success() => return true,
            Ok(o) => format!("{}: {}", o.status, String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) => e.to_string(),
        };
        let _ = writeln!(
            std::io::stderr(),
            "SKIP sandbox: bubblewrap cannot start a sandbox here ({why}); loop tests run with sandbox.enabled = false"
        );
        false
    })
}

/// Starts `cmd`'s process with a soft limit of `n` open files (the hard limit as it is).
pub fn soft_open_files(cmd: &mut Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only getrlimit and setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            lim.rlim_cur = n.min(lim.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Limits the open files of the process `cmd` starts to `n` (soft and hard).
pub fn limit_open_files(cmd: &mut Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only setrlimit (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The `[sandbox]` table of a loop test's project configuration: on where bubblewrap works.
pub fn sandbox_toml() -> String {
    format!("[sandbox]\nenabled = {}\n", sandbox_available())
}

/// Whether the tests run as root; when not, prints that the test is skipped because
/// `what` needs root.
pub fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!("skipped: {what} needs root");
    }
    root
}
