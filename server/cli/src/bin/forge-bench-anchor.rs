//! `forge-bench-anchor`: the reference servers `forge-bench` measures beside `forge-lsp`
//! (docs/performance.md, "Anchors"). Not a product binary; it stores nothing but the rows
//! of `tower DB`'s commit floor, in the database it is given.
//!
//! ```text
//! forge-bench-anchor echo       # raw framed echo: the transport floor
//! forge-bench-anchor tower      # tower-lsp-server no-op server: the framework floor
//! forge-bench-anchor tower DB   # the same, plus one SQLite commit per `commitRow` command
//! forge-bench-anchor exit       # exits at once: the process spawn floor
//! ```
//!
//! - `echo` reads LSP frames (`Content-Length` header, JSON body) from stdin on one thread
//!   and answers every request (a message with an `id` and a `method`) with a frame holding
//!   the same id and a `null` result; notifications get nothing; `exit` ends it. No
//!   framework, no runtime: the cost of the pipes, one header parse and one small JSON parse.
//! - `tower` is a `tower-lsp-server` server (the version `forge-lsp` uses) on the same tokio
//!   runtime `forge-lsp` builds (multi-threaded, 2 workers), reading `tokio::io::stdin`:
//!   `initialize` returns default capabilities plus an `executeCommandProvider`, and
//!   `workspace/executeCommand` returns `null` for any command.
//! - A command whose first argument is `{"replyBytes": N}` is answered instead with
//!   `{"text": T}`, T a plan-like text of N bytes (lines of about 100 characters, so about
//!   one newline to escape per line): the same reply size as a large read of ours, as a
//!   floor for it. `echo` writes a reply serialized once (the cost of moving its bytes);
//!   `tower` returns a `Value` the framework serializes on every call, as its handlers do.
//! - Given a database path, `tower` opens it with the same bundled SQLite in WAL mode with
//!   `synchronous=NORMAL`, as `forge-lsp`'s store does, but keeps SQLite's own automatic
//!   checkpoint on the committing connection (the store moves checkpoints to a thread of
//!   their own), and creates one table `calls(id, body)`, no index. A command
//!   whose first argument is `{"commitRow": V}` inserts V's JSON text as one row in a
//!   transaction of its own, commits, and then answers `null`: the floor of any tool that
//!   replies after a durable write, such as `forge.review-write`. The commit runs on the
//!   runtime's worker, with no thread hop.

use std::io::{BufRead, BufReader, Write};

use serde::Deserialize;
use serde_json::Value;
use tower_lsp_server::gen_lsp_types::{
    ExecuteCommandOptions, ExecuteCommandParams, InitializeParams, InitializeResult, LspAny, ServerCapabilities,
};
use tower_lsp_server::jsonrpc::Result as RpcResult;
use tower_lsp_server::{LanguageServer, LspService, Server};

const USAGE: &str = "usage: forge-bench-anchor echo|tower [DB]|exit";

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("echo") => echo(),
        Some("tower") => tower(std::env::args_os().nth(2).map(std::path::PathBuf::from)),
        Some("exit") => {}
        Some("-h" | "--help") => println!("{USAGE}"),
        _ => {
            eprintln!("forge-bench-anchor: {USAGE}");
            std::process::exit(2);
        }
    }
}

/// What `echo` reads of a message.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
}

/// The `replyBytes` a command asks for (see the module docs).
fn reply_bytes(params: Option<&Value>) -> Option<usize> {
    let n = params?.get("arguments")?.get(0)?.get("replyBytes")?.as_u64()?;
    usize::try_from(n).ok()
}

/// A plan-like text of `n` bytes.
fn reply_text(n: usize) -> String {
    const LINE: &str =
        "- Stage 3, step 12: replace the buffered `Vec<Record>` with a bounded channel and flush often.\n";
    let mut t = LINE.repeat(n / LINE.len() + 1);
    t.truncate(n);
    t
}

/// Reads one frame's body; `None` at the end of the input.
fn read_frame(input: &mut impl BufRead, line: &mut String) -> Option<Vec<u8>> {
    let mut length = None;
    loop {
        line.clear();
        if input.read_line(line).ok()? == 0 {
            return None;
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            }
        }
    }
    let Some(length) = length else {
        eprintln!("forge-bench-anchor echo: a frame without Content-Length");
        std::process::exit(1);
    };
    let mut body = vec![0u8; length];
    input.read_exact(&mut body).ok()?;
    Some(body)
}

fn echo() {
    let mut input = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut output = std::io::stdout().lock();
    let mut line = String::new();
    // The large results asked for, each serialized once (the bench alternates sizes).
    let mut large: std::collections::HashMap<usize, String> = std::collections::HashMap::new();
    while let Some(body) = read_frame(&mut input, &mut line) {
        let head: Head = match serde_json::from_slice(&body) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("forge-bench-anchor echo: a body that is not a JSON-RPC message: {e}");
                std::process::exit(1);
            }
        };
        match (head.method.as_deref(), head.id) {
            (Some("exit"), _) => return,
            (Some(_), Some(id)) => {
                let result = match reply_bytes(head.params.as_ref()) {
                    Some(n) => {
                        large.entry(n).or_insert_with(|| serde_json::json!({ "text": reply_text(n) }).to_string())
                    }
                    None => "null",
                };
                let reply = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
                let frame = format!("Content-Length: {}\r\n\r\n{reply}", reply.len());
                if output.write_all(frame.as_bytes()).and_then(|_| output.flush()).is_err() {
                    return;
                }
            }
            // Notifications, and responses to requests we never send.
            _ => {}
        }
    }
}

/// The tower anchor's state.
#[derive(Default)]
struct NoOp {
    /// The large texts asked for, by length (the bench alternates sizes).
    text: std::sync::Mutex<std::collections::HashMap<usize, String>>,
    /// The database of `commitRow` commands, when one was given.
    db: Option<std::sync::Mutex<rusqlite::Connection>>,
}

/// Opens (creating) the commit floor's database, with `forge-lsp`'s store pragmas.
fn open_db(path: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch("CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")?;
    Ok(conn)
}

/// Inserts `row` into `calls` in a transaction of its own.
fn commit_row(conn: &mut rusqlite::Connection, row: &Value) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.prepare_cached("INSERT INTO calls (body) VALUES (?1)")?.execute([row.to_string()])?;
    tx.commit()
}

impl LanguageServer for NoOp {
    async fn initialize(&self, _: InitializeParams) -> RpcResult<InitializeResult> {
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                execute_command_provider: Some(ExecuteCommandOptions {
                    commands: vec!["forge.noop".into()],
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    async fn shutdown(&self) -> RpcResult<()> {
        Ok(())
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> RpcResult<Option<LspAny>> {
        if let (Some(db), Some(row)) =
            (&self.db, params.arguments.as_deref().and_then(<[_]>::first).and_then(|a| a.get("commitRow")))
        {
            let mut conn = db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            return match commit_row(&mut conn, row) {
                Ok(()) => Ok(None),
                Err(e) => Err(tower_lsp_server::jsonrpc::Error {
                    code: tower_lsp_server::jsonrpc::ErrorCode::InternalError,
                    message: format!("commitRow: {e}").into(),
                    data: None,
                }),
            };
        }
        let asked = serde_json::json!({ "arguments": params.arguments });
        Ok(reply_bytes(Some(&asked)).map(|n| {
            let mut texts = self.text.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            serde_json::json!({ "text": texts.entry(n).or_insert_with(|| reply_text(n)).clone() })
        }))
    }
}

fn tower(db: Option<std::path::PathBuf>) {
    let db = db.map(|path| match open_db(&path) {
        Ok(conn) => std::sync::Mutex::new(conn),
        Err(e) => {
            eprintln!("forge-bench-anchor tower: cannot open {}: {e}", path.display());
            std::process::exit(1);
        }
    });
    // The runtime `forge-lsp` builds (server/cli/src/main.rs).
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    rt.block_on(async {
        let (service, socket) = LspService::new(|_client| NoOp { text: Default::default(), db });
        Server::new(tokio::io::stdin(), tokio::io::stdout(), socket).serve(service).await;
    });
}
