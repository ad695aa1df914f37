//! `forge-lsp call <tool> [JSON|-]` (docs/protocol.md, "forge-lsp call").
//!
//! With `FORGE_LSP_SOCKET` (set for agents in a loop) the call goes through that server.
//! Otherwise it looks for a running server of the project in the database's `servers`
//! table (an editor's server registers for its project; a `serve --listen` server for any
//! project); with none it runs tools that only touch the database in-process, and refuses
//! loop control. `--verbose` says on standard error which route it took.

use std::io::Read;
use std::path::{Path, PathBuf};

use forge_protocol::{CommandResult, ErrorKind, ToolError};
use serde_json::{json, Value};

use super::lsp_client::LspClient;
use forge_core::config::Loader;
use forge_core::project::{self, Project};
use forge_engine::start::{shell_watch_line, WATCH_IN_EDITOR};
use forge_store as store;
use forge_tools::{self as tools, ToolEnv};

/// Options of one call.
pub struct CallArgs {
    pub tool: String,
    pub input: Option<String>,
    pub json: bool,
    pub agent: Option<String>,
    pub session: Option<String>,
    pub data_dir: Option<PathBuf>,
    /// `--project DIR`: the project, instead of the working directory's repository.
    pub project: Option<PathBuf>,
    /// `--verbose`: say on standard error which route the call took.
    pub verbose: bool,
}

/// Process exit status: 0 success, 1 tool failure (or a standard output that cannot be
/// written: closed pipe, full disk), 2 usage error. Never panics on a closed stream.
pub fn run(args: CallArgs) -> i32 {
    use std::io::Write;
    match call_tool(&args) {
        Ok(r) => {
            let text = if args.json { serde_json::to_string_pretty(&r).unwrap_or_default() } else { r.text };
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{text}").and_then(|_| out.flush()) {
                Ok(()) => 0,
                Err(e) => {
                    let _ =
                        writeln!(std::io::stderr(), "forge-lsp call: cannot write the result to standard output: {e}");
                    1
                }
            }
        }
        Err(e) => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}", e.message);
            if args.json {
                let _ = writeln!(
                    err,
                    "{}",
                    json!({ "error": { "code": e.kind.code(), "message": e.message, "data": { "kind": e.kind.as_str() } } })
                );
            }
            if matches!(e.kind, ErrorKind::InvalidParams) {
                2
            } else {
                1
            }
        }
    }
}

fn parse_input(raw: Option<&str>) -> Result<Value, ToolError> {
    let text = match raw {
        None => return Ok(json!({})),
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| ToolError::invalid_params(format!("cannot read the input from standard input: {e}")))?;
            s
        }
        Some(s) => s.to_string(),
    };
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| ToolError::invalid_params(format!("the input is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ToolError::invalid_params("the input must be one JSON object, e.g. '{\"content\": \"...\"}'"));
    }
    Ok(v)
}

/// Runs one call and returns its result (what `run` prints); the demo's agent uses it too.
pub fn call_tool(args: &CallArgs) -> Result<CommandResult, ToolError> {
    let Some(tool) = tools::find(&args.tool) else {
        return Err(ToolError::invalid_params(format!(
            "unknown tool `{}`; `forge-lsp call --help` lists the tools",
            args.tool
        )));
    };
    let mut input = parse_input(args.input.as_deref())?;
    let env_session = std::env::var("FORGE_SESSION_ID").ok().filter(|s| !s.is_empty());
    let env_token = std::env::var("FORGE_SESSION_TOKEN").ok().filter(|s| !s.is_empty());
    let (session, token) = match (&env_session, &env_token) {
        (Some(s), Some(t)) => (Some(s.clone()), Some(t.clone())),
        _ => (args.session.clone().or(env_session.clone()), None),
    };
    // A plan written from a shell belongs to a session the caller must name again to edit
    // it: choose it here, so the reply can say which.
    let chosen_session =
        (session.is_none() && matches!(tool.name, "plan-write" | "plan-edit")).then(forge_core::fresh_session);
    let session = session.or(chosen_session.clone());
    let here =
        std::env::current_dir().map_err(|e| ToolError::internal(format!("cannot read the working directory: {e}")))?;
    let cwd = match &args.project {
        Some(p) => p.canonicalize().map_err(|e| {
            ToolError::invalid_params(format!("--project {}: not a usable directory: {e}", p.display()))
        })?,
        None => here.clone(),
    };
    // The project is the repository the directory is in, with its work tree as the root
    // (as an editor opening the repository sees it), wherever in it the caller stands.
    let detected = Project::detect(&cwd);
    let cwd = detected.repo_root.clone().unwrap_or(cwd);
    let in_loop = std::env::var_os("FORGE_LSP_SOCKET").is_some_and(|s| !s.is_empty());
    if !in_loop && detected.is_global() {
        return Err(ToolError::invalid_params(format!(
            "{} is not inside a git repository with a commit, so there is no project to call forge.{} on; run it from your project, or name one with --project DIR",
            detected.root.display(),
            tool.name
        )));
    }
    relative_file_from(&mut input, &here, &cwd);
    let mut result = call_with(args, tool, input, session, token, &cwd);
    if let (Ok(r), "execute-plan", false) = (&mut result, tool.name, in_loop) {
        // From a shell there is no editor to watch the loop in: say how to watch it here.
        if let Some(name) = r.data.get("loopName").and_then(Value::as_str).map(str::to_string) {
            r.text = r
                .text
                .lines()
                .map(|l| if l.starts_with(WATCH_IN_EDITOR) { shell_watch_line(&name) } else { l.to_string() })
                .collect::<Vec<_>>()
                .join("\n");
        }
    }
    match (result, chosen_session) {
        (Ok(mut r), Some(s)) => {
            r.text.push_str(&format!(
                "\n\nSession: {s} (this plan's session: pass --session {s} or FORGE_SESSION_ID={s} to read or edit it)"
            ));
            Ok(r)
        }
        (r, _) => r,
    }
}

/// A relative `file` is relative to the caller's working directory: rewritten relative to
/// the project root (or absolute when the directory is outside it).
fn relative_file_from(input: &mut Value, cwd: &Path, root: &Path) {
    let Some(file) = input.get("file").and_then(Value::as_str) else { return };
    if file.is_empty() || Path::new(file).is_absolute() {
        return;
    }
    let Ok(sub) = cwd.strip_prefix(root) else {
        // Outside the project: make it absolute, so it names the file the caller meant.
        input["file"] = Value::String(cwd.join(file).display().to_string());
        return;
    };
    if sub.as_os_str().is_empty() {
        return;
    }
    input["file"] = Value::String(sub.join(file).display().to_string());
}

fn call_with(
    args: &CallArgs,
    tool: &'static tools::ToolEntry,
    input: Value,
    session: Option<String>,
    token: Option<String>,
    cwd: &Path,
) -> Result<CommandResult, ToolError> {
    let cwd = cwd.to_path_buf();
    let data_dir = project::data_dir(None, args.data_dir.as_deref());

    let say = |route: String| {
        if args.verbose {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "forge-lsp call: {route}");
        }
    };
    if let Some(sock) = std::env::var_os("FORGE_LSP_SOCKET").filter(|s| !s.is_empty()) {
        say(format!("through the server at FORGE_LSP_SOCKET={}", Path::new(&sock).display()));
        return via_server(
            Path::new(&sock),
            tool.name,
            input,
            args.agent.as_deref(),
            session.as_deref(),
            token.as_deref(),
            &cwd,
            &data_dir,
        )
        .map_err(|e| {
            e.unwrap_or_else(|| {
                ToolError::precondition(format!(
                    "cannot reach the forge-lsp server at FORGE_LSP_SOCKET={}",
                    Path::new(&sock).display()
                ))
            })
        });
    }

    let project = Project::detect(&cwd);
    let mut conn =
        store::open_connection(&data_dir.join("forge.db")).map_err(|e| ToolError::precondition(e.to_string()))?;
    for sock in running_servers(&conn, &project.id) {
        say(format!(
            "through the running server at {} (found in {})",
            sock.display(),
            data_dir.join("forge.db").display()
        ));
        match via_server(
            &sock,
            tool.name,
            input.clone(),
            args.agent.as_deref(),
            session.as_deref(),
            token.as_deref(),
            &cwd,
            &data_dir,
        ) {
            Ok(r) => return Ok(r),
            Err(Some(e)) => return Err(e),
            Err(None) => {
                // Not reachable (a server that died): try the next, then in-process. A
                // socket that is gone or refuses connections belongs to a server that died
                // without unregistering (SIGKILL, crash): its row is forgotten.
                say(format!("{} does not answer", sock.display()));
                if socket_is_dead(&sock) {
                    match store::servers::forget_socket(&conn, &sock.display().to_string()) {
                        Ok(n) if n > 0 => {
                            say(format!("forgot the registration of the dead server at {}", sock.display()))
                        }
                        _ => {}
                    }
                }
                continue;
            }
        }
    }
    if tool.needs_server {
        return Err(ToolError::precondition(format!(
            "forge.{} needs a running forge-lsp server (it controls loops) and none of this project is running with the data directory {}; start your editor's forge-lsp or `forge-lsp serve --listen unix:PATH` (same data directory), then retry",
            tool.name,
            data_dir.display()
        )));
    }
    say(format!("in-process (no running server of this project in {})", data_dir.join("forge.db").display()));
    let loader = Loader::standard(&project.root, None).map_err(|e| ToolError::invalid(e.0))?;
    for w in &loader.warnings {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "warning: {w}");
    }
    let caller = forge_tools::identity::resolve(&conn, args.agent.as_deref(), session.as_deref(), token.as_deref())?;
    let env = ToolEnv {
        project,
        caller,
        config: loader.build(),
        home: std::env::var("HOME").ok(),
        links: forge_core::Links::Forge,
    };
    tools::run_on(&mut conn, &env, tool.name, input)
}

/// Whether nothing can ever answer on `sock` again: the socket file is gone, or nobody
/// listens on it (ECONNREFUSED). A slow or busy server is not dead.
fn socket_is_dead(sock: &Path) -> bool {
    match std::os::unix::net::UnixStream::connect(sock) {
        Ok(_) => false,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused),
    }
}

/// Sockets of the project's running servers, newest first, then of servers for any project
/// (`serve --listen`), each once.
fn running_servers(conn: &rusqlite::Connection, project: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for s in store::servers::sockets(conn, project).unwrap_or_default() {
        let p = PathBuf::from(s);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// Runs the call through a server. `Err(None)` when the server cannot be reached.
#[allow(clippy::too_many_arguments)]
fn via_server(
    sock: &Path,
    tool: &str,
    input: Value,
    agent: Option<&str>,
    session: Option<&str>,
    token: Option<&str>,
    cwd: &Path,
    data_dir: &Path,
) -> Result<CommandResult, Option<ToolError>> {
    let mut c = LspClient::connect(sock).map_err(|_| None)?;
    // A one-shot call is not an editor: it never reads materialized views, and writing them
    // into its working directory (an agent's loop worktree) could recreate that worktree
    // after the loop removed it.
    let mut forge =
        json!({ "dataDir": data_dir.display().to_string(), "config": { "documents": { "materialize": false } } });
    if let Some(a) = agent {
        forge["agent"] = json!(a);
    }
    if let Some(s) = session {
        forge["session"] = json!(s);
    }
    if let Some(t) = token {
        forge["token"] = json!(t);
    }
    let root = format!("file://{}", cwd.display());
    let init = c
        .request(
            "initialize",
            json!({ "processId": std::process::id(), "rootUri": root, "capabilities": {}, "workspaceFolders": [{ "uri": root, "name": "cwd" }], "initializationOptions": { "forge": forge } }),
        )
        .map_err(|_| None)?;
    if let Err(e) = init {
        return Err(Some(rpc_to_tool_error(&e)));
    }
    c.notify("initialized", json!({})).map_err(|_| None)?;
    let r = c
        .request(
            "workspace/executeCommand",
            json!({ "command": forge_protocol::command_name(tool), "arguments": [input] }),
        )
        .map_err(|e| Some(ToolError::internal(format!("the server connection failed during the call: {e}"))))?;
    let _ = c.request("shutdown", Value::Null);
    let _ = c.notify("exit", Value::Null);
    match r {
        Ok(v) => serde_json::from_value(v)
            .map_err(|e| Some(ToolError::internal(format!("unexpected result from the server: {e}")))),
        Err(e) => Err(Some(rpc_to_tool_error(&e))),
    }
}

fn rpc_to_tool_error(e: &Value) -> ToolError {
    let code = e.get("code").and_then(Value::as_i64).unwrap_or(1007);
    let message = e.get("message").and_then(Value::as_str).unwrap_or("unknown error").to_string();
    ToolError::new(ErrorKind::from_code(code).unwrap_or(ErrorKind::Internal), message)
}

/// The `call --help` list of tools.
pub fn tools_help() -> String {
    let mut s =
        String::from("Tools (input is one JSON object; `forge-lsp call tools --json` prints every input schema):\n");
    for t in tools::TOOLS {
        let first = t.description.split(". ").next().unwrap_or(t.description);
        s.push_str(&format!("  {:<15} {}\n", t.name, first.trim_end_matches('.')));
    }
    s.push_str("\nIdentity: FORGE_SESSION_ID + FORGE_SESSION_TOKEN (a loop session), else --agent and --session.\nExit status: 0 success, 1 the tool failed (message on stderr), 2 usage error.");
    s
}
