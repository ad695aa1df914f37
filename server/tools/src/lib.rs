//! The tools: the registry, the caller context, permissions and one file per tool.
//!
//! Calls the engine and the store; knows no front end (no LSP, MCP or CLI types: a
//! failure is a [`ToolError`], which each front end maps to its own wire shape).
//! Helper modules live at the crate root ([`identity`], [`loop_scope`],
//! [`loop_permissions`], [`plan_ops`]); every file in `src/tools/` is a tool.
//! [`route`] is how a process that is not a server (`forge-lsp call`, `forge-lsp mcp`)
//! runs a tool: through a server's socket (a minimal LSP client speaking the wire of
//! `forge-protocol`) or in-process with the same dispatcher.
//!
//! One file per tool in `src/tools/`: it holds the tool's
//! `DESCRIPTION`, its `Input` type (whose JSON Schema is generated) and its
//! `execute(input, ctx)`. `build.rs` derives the registry from the file names, so
//! `forge.tools`, `executeCommandProvider.commands` and dispatch are never maintained
//! by hand.
//!
//! A tool that writes runs on the store's writer thread as one grouped write (one
//! savepoint of a group commit, `forge_store` docs): it is kept when `execute` returns
//! `Ok`, nothing of it is written when it returns an error, and its reply leaves only
//! after the commit. A tool whose file says `READ_ONLY = true` (and every plugin tool,
//! whose store part only reads) runs on a read connection in one read transaction, so
//! reads never wait for writes; a read-only connection refuses writes, so a tool marked
//! read-only by mistake fails loudly instead of writing. Its store part runs on the
//! calling thread ([`forge_store::Store::read_here`]): it is short by rule (what may take
//! long, a file walk, a process, a fetch, goes into `after` or an engine effect, off the
//! caller's thread), and the hop to a reader thread and back costs more than it.

use std::sync::Arc;

use forge_protocol::{CommandResult, ToolError, ToolOffer};
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub mod cancel;
pub mod files;
pub mod guard;
pub mod identity;
pub mod loop_permissions;
pub mod loop_scope;
pub mod plan_ops;
pub mod plugins;
pub mod route;
pub mod structural;
pub mod task_control;

pub use forge_core::{Caller, LoopBinding, ToolEnv};
pub use forge_store::{Db, Store};

mod registry {
    use super::*;
    include!(concat!(env!("OUT_DIR"), "/tools_registry.rs"));
}
/// The loop status document's text, from the tool that renders the same lines.
pub use registry::loop_status::document as loop_status_document;
pub use registry::TOOLS;

/// A registered tool.
pub struct ToolEntry {
    /// Tool name (`plan-read`); the command is `forge.<name>`.
    pub name: &'static str,
    pub description: &'static str,
    /// Controls loops (needs a running server); `forge-lsp call` refuses it in-process.
    pub needs_server: bool,
    /// Only reads the store (runs on a read connection).
    pub read_only: bool,
    /// What a call does when its caller gives up on it (the tool's `WHEN_ABANDONED`).
    pub when_abandoned: Abandoned,
    pub schema: fn() -> Value,
    /// Parses an input without running the tool (docs examples, clients).
    pub validate: fn(Value) -> Result<(), ToolError>,
    pub run: fn(Value, &mut ToolCtx) -> Result<CommandResult, ToolError>,
}

/// What a call does when its caller gives up on it: a `$/cancelRequest` (or an MCP
/// cancel), or the end of the caller's connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Abandoned {
    /// Runs to its end: its writes are committed whole and its effects must not stop
    /// halfway. (A read-only tool without engine work stops on a cancel all the same: it
    /// loses nothing.)
    Finish,
    /// Stops on a cancel, not when the connection's input ends (a client may close its
    /// side and read on).
    StopOnCancel,
    /// Stops on a cancel and when the caller's connection closes: what it runs would run
    /// on for nobody.
    StopOnCancelOrClose,
}

/// The context of one call: the environment, the open transaction, the clock.
pub struct ToolCtx<'a> {
    pub env: &'a ToolEnv,
    pub db: &'a Connection,
    pub now: i64,
    /// Work for the loop engine, carried out after the transaction commits; its result
    /// replaces the tool's.
    pub effect: Option<forge_engine::Effect>,
    /// Whether an engine is there to carry out effects (false for in-process calls).
    pub has_engine: bool,
    /// Work after the transaction, off the store thread (file tools: the files are read
    /// and written there, never while the store is held); its result replaces the tool's.
    pub after: Option<After>,
    /// Raised when the caller gave up on the call (`$/cancelRequest`, MCP's cancel, its
    /// connection closed): a search's `after` stops walking at it ([`ToolCtx::cancel_flag`]).
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Work a tool leaves for after its transaction (see [`ToolCtx::after`]).
pub type After = Box<dyn FnOnce() -> Result<CommandResult, ToolError> + Send>;

impl<'a> ToolCtx<'a> {
    /// A call's context now, on `db` (its open transaction), with nothing left for after it.
    pub fn new(env: &'a ToolEnv, db: &'a Connection, has_engine: bool) -> ToolCtx<'a> {
        ToolCtx { env, db, now: forge_store::now_ms(), effect: None, has_engine, after: None, cancel: None }
    }

    /// The flag raised when the caller gives up on this call, for `after` work that can
    /// stop early (a read-only search: nothing is lost by stopping it).
    pub fn cancel_flag(&mut self) -> Arc<std::sync::atomic::AtomicBool> {
        self.cancel.get_or_insert_with(Default::default).clone()
    }

    pub fn project_id(&self) -> &str {
        &self.env.project.id
    }
    pub fn caller(&self) -> &Caller {
        &self.env.caller
    }
}

/// Builds a result.
pub fn ok(text: impl Into<String>, data: Value) -> Result<CommandResult, ToolError> {
    Ok(CommandResult { text: text.into(), data: data.into() })
}

/// The JSON Schema (draft 2020-12) of an input type.
pub fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// Parses a tool input; errors name the offending field.
pub fn parse_input<T: DeserializeOwned>(mut v: Value) -> Result<T, ToolError> {
    // `2.0` is an integer, as JSON Schema (and the offered schemas) say.
    forge_protocol::json::integral_floats_as_integers(&mut v);
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = plain_expectations(&e.into_inner().to_string());
        if path == "." || path.is_empty() {
            ToolError::invalid_params(format!("invalid arguments: {inner}"))
        } else {
            ToolError::invalid_params(format!("invalid argument `{path}`: {inner}"))
        }
    })
}

/// serde's expectations in the words of JSON, not of Rust: `expected i64` is "expected an
/// integer", `expected struct AuditSummary` "expected an object" (a review found the Rust
/// type names in tool errors).
fn plain_expectations(msg: &str) -> String {
    const WORDS: [(&str, &str); 11] = [
        ("expected i64", "expected an integer"),
        ("expected i32", "expected an integer"),
        ("expected isize", "expected an integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u8", "expected a non-negative integer"),
        ("expected usize", "expected a non-negative integer"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected a sequence", "expected an array"),
    ];
    // serde's expectation is the message's end; the caller's value before it (quoted) is
    // left as written (a review found `"expected u64"` given as a value rewritten).
    let Some(at) = msg.rfind("expected ") else { return msg.to_string() };
    let (head, mut tail) = (&msg[..at], msg[at..].to_string());
    for (rust, json) in WORDS {
        if let Some(rest) = tail.strip_prefix(rust) {
            if !rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                tail = format!("{json}{rest}");
                break;
            }
        }
    }
    const STRUCT: &str = "expected struct ";
    if let Some(rest) = tail.strip_prefix(STRUCT) {
        let end = rest.find(|c: char| !c.is_alphanumeric() && c != '_').unwrap_or(rest.len());
        tail = format!("expected an object{}", &rest[end..]);
    }
    format!("{head}{tail}")
}

/// Finds a tool by command (`forge.plan-read`) or by name (`plan-read`).
pub fn find(command_or_name: &str) -> Option<&'static ToolEntry> {
    let name = command_or_name.strip_prefix(forge_protocol::COMMAND_PREFIX).unwrap_or(command_or_name);
    TOOLS.iter().find(|t| t.name == name)
}

/// Every command the server offers.
pub fn commands() -> Vec<String> {
    TOOLS.iter().map(|t| forge_protocol::command_name(t.name)).collect()
}

/// The `forge.tools` offers.
pub fn offers() -> Vec<ToolOffer> {
    static OFFERS: std::sync::OnceLock<Vec<ToolOffer>> = std::sync::OnceLock::new();
    OFFERS
        .get_or_init(|| {
            TOOLS
                .iter()
                .map(|t| ToolOffer {
                    name: t.name.to_string(),
                    command: forge_protocol::command_name(t.name),
                    description: t.description.to_string(),
                    input_schema: (t.schema)(),
                })
                .collect()
        })
        .clone()
}

/// Extracts the single input object from `workspace/executeCommand` arguments: absent, or a
/// list of exactly one object (PROTOCOL.md §3). Two encodings of real clients also mean an
/// empty input: `[[]]`, how Neovim encodes an empty Lua table in that place (§3.1), and
/// `[]`, which Helix and Zed send for a command run without arguments (their `lsp-types`
/// always serializes the list) and VS Code for a server command invoked without any.
/// Anything else, `[null]` included, is -32602 naming what was sent.
pub fn input_from_arguments(args: Option<Vec<Value>>) -> Result<Value, ToolError> {
    let Some(mut args) = args.filter(|a| !a.is_empty()) else {
        return Ok(Value::Object(Default::default()));
    };
    if args.len() != 1 {
        return Err(ToolError::invalid_params(format!(
            "arguments must be absent or a list with exactly one JSON object (the tool's input), got a list of {} items",
            args.len()
        )));
    }
    match args.remove(0) {
        Value::Object(m) => Ok(Value::Object(m)),
        Value::Array(a) if a.is_empty() => Ok(Value::Object(Default::default())),
        other => Err(ToolError::invalid_params(format!(
            "arguments must be absent or a list with exactly one JSON object (the tool's input), got a list holding {}",
            forge_protocol::json::kind(&other)
        ))),
    }
}

/// Runs one tool call synchronously on `conn` in one transaction, without an engine; work
/// left for after the transaction runs here, after the commit. Guarded against repeated
/// calls (PROTOCOL.md 10.3) as a server's calls are: a `forge-lsp mcp` process without a
/// server runs all of its session's calls here. Setting `cancel` while a plugin tool runs
/// kills its process group, as a dropped call does in a server (how `forge-lsp mcp` passes
/// on an MCP client's `notifications/cancelled`).
pub fn run_on(
    conn: &mut Connection,
    env: &ToolEnv,
    command: &str,
    input: Value,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<CommandResult, ToolError> {
    use std::sync::atomic::Ordering;
    let name = resolve(env, command).map(|t| t.guard_name()).unwrap_or_default();
    let ticket = guard::start(&env.caller.session_id, &env.project.id, &name, &input)?;
    let outcome = run_tx(conn, env, command, input, false).and_then(|done| match (done.after, cancel, done.cancel) {
        (Some(after), Some(asked), Some(flag)) => {
            // Passes the caller's cancel on to the tool's flag while the tool runs.
            let finished = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !finished.load(Ordering::Acquire) {
                        if asked.load(Ordering::Acquire) {
                            flag.store(true, Ordering::Release);
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                });
                let r = after();
                finished.store(true, Ordering::Release);
                r
            })
        }
        (Some(after), _, _) => after(),
        (None, _, _) => Ok(done.result),
    });
    guard::settle(ticket, outcome)
}

/// What one committed tool call leaves: its result, engine work and off-thread work.
pub struct Done {
    pub result: CommandResult,
    pub effect: Option<forge_engine::Effect>,
    pub after: Option<After>,
    /// Set when the caller gave up on the call (`$/cancelRequest`): a plugin tool's
    /// process group is killed.
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
}

/// Sets the cancel flag of a call when the call's future is dropped unfinished.
struct CancelOnDrop(Option<Arc<std::sync::atomic::AtomicBool>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            f.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

/// What a command names: a plugin tool or a built-in one.
pub enum Resolved {
    Plugin(plugins::PluginTool),
    Builtin(&'static ToolEntry),
}

impl Resolved {
    /// The name the repeated-call guard counts calls under: a built-in's, or a plugin
    /// tool's `<plugin>__<Name>` (never a built-in's, even for an override).
    pub fn guard_name(&self) -> String {
        match self {
            Resolved::Plugin(p) => p.offer_name(),
            Resolved::Builtin(t) => t.name.to_string(),
        }
    }

    /// What the call does when its caller gives up (a plugin tool's process is killed on
    /// a cancel and when its caller's connection closes).
    pub fn when_abandoned(&self) -> Abandoned {
        match self {
            Resolved::Plugin(_) => Abandoned::StopOnCancelOrClose,
            Resolved::Builtin(t) => t.when_abandoned,
        }
    }

    /// Whether the call only reads the store (plugin tools: their store part reads the
    /// loop row at most).
    pub fn read_only(&self) -> bool {
        match self {
            Resolved::Plugin(_) => true,
            Resolved::Builtin(t) => t.read_only,
        }
    }
}

/// Finds what `command` runs: a plugin tool (its namespaced command, or a built-in's name
/// it overrides) or a built-in.
pub fn resolve(env: &ToolEnv, command: &str) -> Result<Resolved, ToolError> {
    if let Some(p) = plugins::find(&plugins::project_dir(env), command, || plugins::project_trusted(env)) {
        return Ok(Resolved::Plugin(p));
    }
    find(command).map(Resolved::Builtin).ok_or_else(|| {
        ToolError::invalid_params(format!("unknown command `{command}`; forge.tools lists the available commands"))
    })
}

/// Runs one tool call in one transaction of its own; returns its result and the work it
/// leaves.
pub fn run_tx(
    conn: &mut Connection,
    env: &ToolEnv,
    command: &str,
    input: Value,
    has_engine: bool,
) -> Result<Done, ToolError> {
    let tool = resolve(env, command)?;
    let behavior = if tool.read_only() {
        rusqlite::TransactionBehavior::Deferred
    } else {
        rusqlite::TransactionBehavior::Immediate
    };
    let tx = conn.transaction_with_behavior(behavior).db()?;
    match run_in(&tx, env, tool, input, has_engine) {
        Ok(done) => {
            tx.commit().db()?;
            Ok(done)
        }
        Err(e) => {
            let _ = tx.rollback();
            Err(e)
        }
    }
}

/// Runs one resolved tool call inside the transaction (or savepoint) the caller holds
/// open on `conn`; the caller commits on `Ok` and rolls back on `Err`.
pub fn run_in(
    conn: &Connection,
    env: &ToolEnv,
    tool: Resolved,
    input: Value,
    has_engine: bool,
) -> Result<Done, ToolError> {
    let tool = match tool {
        Resolved::Plugin(p) => {
            // The rules of the name it is called under: an override takes the place of a
            // built-in and gets its rules (an auditor may not write through an
            // `apply-patch` override); a loop's deny list may name it either way.
            let name = p.effective_name(plugins::project_trusted(env));
            forge_domain::permissions::check(&name, &env.caller.facts()).map_err(ToolError::denied)?;
            crate::loop_permissions::check(env, &name, &input)?;
            if name != p.offer_name() {
                crate::loop_permissions::check(env, &p.offer_name(), &input)?;
            }
            return plugin_call(conn, env, p, input);
        }
        Resolved::Builtin(t) => t,
    };
    forge_domain::permissions::check(tool.name, &env.caller.facts()).map_err(ToolError::denied)?;
    crate::loop_permissions::check(env, tool.name, &input)?;
    let mut ctx = ToolCtx::new(env, conn, has_engine);
    let result = (tool.run)(input, &mut ctx);
    let (effect, after, cancel) = (ctx.effect.take(), ctx.after.take(), ctx.cancel.take());
    result.map(|result| Done { result, effect, after, cancel })
}

/// A plugin tool (`forge.<plugin>__<Name>`): trust, then the input against its schema, then
/// the process after the (empty) transaction, off the store thread.
fn plugin_call(conn: &Connection, env: &ToolEnv, p: plugins::PluginTool, input: Value) -> Result<Done, ToolError> {
    let command = forge_protocol::command_name(&p.effective_name(plugins::project_trusted(env)));
    if p.plugin == "project" && !plugins::project_trusted(env) {
        return Err(ToolError::denied(format!(
            "{command} is a tool of this repository ({}), and a repository cannot trust itself: to run its tools, set `plugins.trustProjectTools = true` in {} (or in initializationOptions.forge.config), or add \"{}\" to `plugins.trustedProjects` there",
            p.exe.display(),
            forge_core::config::Loader::user_file().display(),
            plugins::project_dir(env).display()
        )));
    }
    plugins::validate(&p.input_schema, &input, "")
        .map_err(|e| ToolError::invalid_params(format!("invalid arguments for {command}: {e}")))?;
    // From a loop session: the loop's worktree, in its sandbox when it has one.
    let place = match &env.caller.binding {
        Some(b) => {
            let row = conn
                .query_row(
                    "SELECT worktree_dir, sandbox, sandbox_network FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                    rusqlite::params![env.project.id, b.loop_name],
                    |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? != 0, r.get::<_, i64>(2)? != 0)),
                )
                .db()?;
            // The data directory is the database's folder.
            let data_dir = conn.path().and_then(|p| std::path::Path::new(p).parent()).map(std::path::Path::to_path_buf);
            Some(plugins::LoopPlace {
                worktree: std::path::PathBuf::from(row.0),
                sandbox: row.1,
                network: row.2,
                data_dir,
            })
        }
        None => None,
    };
    let env = env.clone();
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = cancel.clone();
    Ok(Done {
        result: CommandResult { text: String::new(), data: forge_protocol::Data::default() },
        effect: None,
        after: Some(Box::new(move || {
            let timeout = std::time::Duration::from_millis(env.config.plugin_timeout_ms);
            plugins::run(&p, &env, &input, timeout, &flag, place.as_ref())
        })),
        cancel: Some(cancel),
    })
}

/// Runs one tool call: a read-only tool on this thread's read connection
/// ([`forge_store::Store::read_here`]), any other as one grouped write.
pub async fn call(
    store: &Store,
    engine: &Arc<forge_engine::Engine>,
    env: Arc<ToolEnv>,
    command: &str,
    input: Value,
) -> Result<CommandResult, ToolError> {
    call_watched(store, engine, env, command, input, None).await
}

/// A write the store did not keep: `busy` (1005) when another connection held the
/// database locked past the busy timeout, a state that passes and says nothing is wrong
/// with the call; `precondition` (1004) when a newer forge-lsp migrated the database under
/// this process; else `internal`.
fn write_failure(f: forge_store::WriteFailure) -> ToolError {
    use forge_store::WriteFailureKind as Kind;
    match f.kind {
        Kind::Busy => ToolError::busy(format!(
            "the database is locked by another process ({f}); nothing was written, try again in a moment"
        )),
        Kind::Outdated => ToolError::precondition(f.message),
        Kind::Failed => ToolError::internal(f.message),
    }
}

/// [`call`], stopping a plugin tool (its process group killed) when `caller_gone` becomes
/// true before it answered: the caller's connection ended. Built-in tools run to the end:
/// their writes are committed whole and their effects must not stop halfway.
pub async fn call_watched(
    store: &Store,
    engine: &Arc<forge_engine::Engine>,
    env: Arc<ToolEnv>,
    command: &str,
    input: Value,
    caller_gone: Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<CommandResult, ToolError> {
    // A tool call is activity of the loop session (stall watchdog), except the listing of
    // the tools: an agent CLI asks for it as it starts (its MCP server's `tools/list`),
    // before and whether or not its model answers, so a hung model's every nudged turn
    // counted as progress and the loop never stalled (a review).
    if env.caller.binding.is_some()
        && command.strip_prefix(forge_protocol::COMMAND_PREFIX).unwrap_or(command) != "tools"
    {
        engine.activity.touch_with(&env.caller.session_id, "tool-call");
    }
    let tool = resolve(&env, command)?;
    // Runs to the end once resolved (`cancel`), except what a cancel should stop and whose
    // stopping loses nothing: a plugin tool's process, a shell command, a read-only tool
    // (a search over a large tree ran on for seconds after its cancel and then sent its
    // whole result, review BB) unless it leaves engine work (loop-status's restart: shielded
    // below, once that is known).
    let abandoned = tool.when_abandoned();
    if abandoned == Abandoned::Finish && !tool.read_only() {
        cancel::shield();
    }
    let name = tool.guard_name();
    let ticket = guard::start(&env.caller.session_id, &env.project.id, &name, &input)?;
    let read_only = tool.read_only();
    // A plugin tool's process and a shell command end with their caller's connection (a
    // `forge-lsp call` killed, an MCP client gone): nobody would read their result, and a
    // shell command would run on to its time limit (review AA).
    // Only those whose process would run on: the end of a connection's input is no sign its
    // client stopped reading (a client may send its requests, close its side and read the
    // answers; a read-only tool's or a task control's answer is then still wanted). A
    // first try stopped read-only tools too, and dropped the answers owed after `exit`.
    let caller_gone = caller_gone.filter(|_| abandoned == Abandoned::StopOnCancelOrClose);
    let command = command.to_string();
    let env2 = env.clone();
    let guarded = move |conn: &Connection| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_in(conn, &env2, tool, input, true)))
            .unwrap_or_else(|_| {
                Err(ToolError::internal(format!(
                    "{command} failed with an internal error (a bug); the server keeps running"
                )))
            })
    };
    let r = if read_only {
        // Here, on this thread's read connection: a read-only tool's store part is short
        // (file walks, processes and fetches run in `after` or as an effect), shorter than
        // the hop to a reader thread and back.
        store.read_here(guarded).unwrap_or_else(|e| Err(ToolError::internal(e)))
    } else {
        let r = store.write_grouped(guarded, write_failure).await;
        if r.is_ok() {
            store.wrote.wake();
        }
        r
    };
    let outcome = async {
        let done = r?;
        // Engine work (a restart, a loop start) runs to its end; a shell command and a task
        // control not yet taken by its loop's runner may stop.
        if done.effect.is_some() && abandoned == Abandoned::Finish {
            cancel::shield();
        }
        // Dropped with the call's future (`$/cancelRequest`): kills a plugin tool's process.
        let mut on_drop = CancelOnDrop(done.cancel);
        let res = match (done.effect, done.after) {
            (Some(e), _) => engine.run(e, env).await,
            (None, Some(after)) => tokio::task::spawn_blocking(after)
                .await
                .unwrap_or_else(|e| Err(ToolError::internal(format!("forge.{name} failed: {e}")))),
            (None, None) => Ok(done.result),
        };
        // Finished: nothing to cancel.
        on_drop.0 = None;
        res
    };
    let outcome = match caller_gone {
        None => outcome.await,
        Some(mut gone) => tokio::select! {
            r = outcome => r,
            // Dropping the call above kills the plugin tool's process group.
            _ = gone.wait_for(|g| *g) => Err(ToolError::internal(format!("forge.{name} was stopped: its caller's connection closed"))),
        },
    };
    guard::settle(ticket, outcome)
}

#[cfg(test)]
mod parse_tests {
    #[test]
    fn input_errors_name_json_types_not_rust_types() {
        let cases = [
            ("invalid type: string \"1\", expected i64", "invalid type: string \"1\", expected an integer"),
            (
                "invalid value: integer `-1`, expected u64",
                "invalid value: integer `-1`, expected a non-negative integer",
            ),
            (
                "invalid type: string \"x\", expected struct AuditSummary",
                "invalid type: string \"x\", expected an object",
            ),
            ("invalid type: map, expected a sequence", "invalid type: map, expected an array"),
            ("missing field `content`", "missing field `content`"),
            // The caller's own value is not rewritten.
            (
                "invalid type: string \"expected u64\", expected u64",
                "invalid type: string \"expected u64\", expected a non-negative integer",
            ),
        ];
        for (serde, want) in cases {
            assert_eq!(plain_expectations(serde), want);
        }
        let e = parse_input::<forge_protocol::inputs::ReviewWriteInput>(serde_json::json!({
            "file": "a", "line": "1", "severity": "bug", "description": "d"
        }))
        .unwrap_err();
        assert_eq!(e.message, "invalid argument `line`: invalid type: string \"1\", expected an integer");
    }

    use super::*;
    use forge_protocol::inputs::ReviewWriteInput;
    use serde_json::json;

    /// A locked database is "busy, try again" (1005), not an internal failure: agents and
    /// scripts retry the one and report the other (review).
    #[test]
    fn a_locked_database_is_busy_and_other_write_failures_are_internal() {
        use forge_store::WriteFailureKind as Kind;
        let f = |kind| forge_store::WriteFailure {
            message: "cannot start a write transaction: database is locked".into(),
            kind,
        };
        let e = write_failure(f(Kind::Busy));
        assert_eq!(e.kind, forge_protocol::ErrorKind::Busy);
        assert!(e.message.contains("locked by another process") && e.message.contains("nothing was written"), "{e}");
        assert_eq!(write_failure(f(Kind::Failed)).kind, forge_protocol::ErrorKind::Internal);
        // A database migrated by a newer forge-lsp: a precondition, with the store's words.
        assert_eq!(write_failure(f(Kind::Outdated)).kind, forge_protocol::ErrorKind::Precondition);
    }

    /// The lists the handoff tools refuse empty say so in the schemas agents are offered
    /// (`minItems: 1`), as the seed's schemas do; an empty one is -32602 (domain tests).
    #[test]
    fn handoff_lists_that_need_entries_have_min_items() {
        let handoff = (find("forge.loop-handoff").expect("loop-handoff").schema)();
        let complete = (find("forge.loop-complete").expect("loop-complete").schema)();
        for (schema, path) in [
            (&handoff, "/properties/changes/minItems"),
            (&handoff, "/properties/verification/minItems"),
            (&handoff, "/$defs/AuditSummary/properties/done/minItems"),
            (&complete, "/properties/steps/minItems"),
        ] {
            assert_eq!(schema.pointer(path), Some(&json!(1)), "{path} in {schema:#}");
        }
        assert_eq!(handoff.pointer("/properties/deviations/minItems"), None, "deviations may be empty");
    }

    /// `2.0` is an integer to JSON Schema (the offered schemas say `integer`); `2.5` is not.
    #[test]
    fn an_integral_float_is_an_integer() {
        let base = |line: Value| json!({ "file": "a.rs", "line": line, "severity": "bug", "description": "d" });
        for (line, want) in [(json!(2.0), 2), (json!(1e3), 1000), (json!(-0.0), 0), (json!(7), 7)] {
            let input: ReviewWriteInput = parse_input(base(line.clone())).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(input.line, want, "{line}");
        }
        for line in [json!(2.5), json!(1e300), json!("2")] {
            let e = parse_input::<ReviewWriteInput>(base(line.clone())).expect_err("refused");
            assert!(e.message.contains("`line`"), "{line}: {}", e.message);
        }
    }
}
