//! forge-lsp's Model Context Protocol front end: `forge-lsp mcp`, the Forge tools to MCP
//! agents over stdio (docs/mcp.md; docs/protocol.md, "forge-lsp mcp").
//!
//! Owns the MCP wire, on the official Rust SDK (`rmcp`): `initialize` (serverInfo
//! `forge-lsp`), `tools/list` (one tool per `forge.tools` offer) and `tools/call` (text and
//! structured content; a failed tool is a result with `isError`). It does not know how a
//! tool runs: every call goes through `forge_tools::route`, the path `forge-lsp call` takes
//! (the loop's server, the project's running server, or in-process with the one
//! dispatcher), with the identity and project found once at start the way `call` finds
//! them. It knows nothing of the LSP front end or the command line, and nothing below it
//! knows it exists.

mod checked;

use std::sync::Arc;

use forge_engine::start::WATCH_IN_EDITOR;
use forge_protocol::{CommandResult, ErrorKind, ToolError};
use forge_tools::route::{Route, RouteArgs};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest, CustomResult, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};

/// The options of `forge-lsp mcp` (the same as `forge-lsp call`'s).
#[derive(Clone, Debug, Default)]
pub struct McpArgs {
    pub agent: Option<String>,
    pub session: Option<String>,
    pub data_dir: Option<std::path::PathBuf>,
    pub project: Option<std::path::PathBuf>,
}

/// Serves MCP on standard input and output until the client closes them. Returns the
/// process exit status: 0 when the client closed the connection, 2 for a usage error
/// (outside a git repository without `--project`, an unknown agent), 1 when the identity is
/// refused (a loop session with a wrong or missing token) or serving failed. Messages go to
/// standard error; standard output carries only MCP.
pub fn run(args: McpArgs) -> i32 {
    let route = match prepare(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("forge-lsp mcp: {}", e.message);
            return if matches!(e.kind, ErrorKind::InvalidParams) { 2 } else { 1 };
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("forge-lsp mcp: cannot start the runtime: {e}");
            return 1;
        }
    };
    let structured = structured_content_from_env();
    let by_hand = {
        use std::io::IsTerminal;
        std::io::stdin().is_terminal()
    };
    if by_hand {
        eprintln!("forge-lsp mcp: waiting for an MCP client on stdin/stdout (agent CLIs start it this way: docs/mcp.md; Ctrl-D or Ctrl-C to quit).");
    }
    let r = rt.block_on(async move {
        let server =
            ForgeMcp { route: Arc::new(route), structured, calls: Arc::new(tokio::sync::Semaphore::new(MAX_CALLS)) };
        // Pipes made larger, as for `serve`: a plan-sized result goes in one write.
        {
            use std::os::fd::AsFd;
            forge_core::paths::enlarge_pipe(std::io::stdin().as_fd());
            forge_core::paths::enlarge_pipe(std::io::stdout().as_fd());
        }
        // Lines as long as the LSP side's messages (64 MiB; the SDK's default is 16 MiB,
        // which a plan within `maxPlanBytes` could exceed once escaped, and a longer line is
        // dropped unanswered).
        let (stdin, stdout) = rmcp::transport::stdio();
        let stdin = Counted::new(stdin);
        let input = stdin.seen.clone();
        let stdin = checked::Checked::new(stdin);
        let transport = BeforeInitialize::new(
            rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout)
                .with_max_line_length(forge_protocol::framing::MAX_MESSAGE),
        );
        let running = match server.serve(transport).await {
            Ok(r) => r,
            // Standard input ended before a client sent its first message.
            // Input that ended before a client spoke, with nothing in it: nobody came.
            // Anything read, or a read error, is a failure (garbage, LSP framing, a
            // directory as input; found by a review of the first version).
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) if input.nothing() => return Ok(None),
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                return Err(format!("the input ended without an MCP initialize request ({})", input.describe()))
            }
            Err(e) => return Err(e.to_string()),
        };
        running.waiting().await.map(Some).map_err(|e| e.to_string())
    });
    // A blocking read of standard input may still be pending (the client closed only its
    // reading end): do not wait for it.
    rt.shutdown_background();
    match r {
        Ok(Some(reason)) => {
            tracing::debug!("forge-lsp mcp: {reason:?}");
            0
        }
        // Standard input ended before any client spoke: nothing failed, nobody came (the
        // message said "connection closed: initialize request", exit 1; a review).
        Ok(None) => {
            if by_hand {
                eprintln!("forge-lsp mcp: input ended before a client connected");
            }
            0
        }
        Err(e) => {
            eprintln!("forge-lsp mcp: {e}");
            1
        }
    }
}

/// The route every call takes, with the identity proven once: a session is chosen when the
/// caller names none, so all calls of this process share it (a plan written is read back).
fn prepare(args: &McpArgs) -> Result<Route, ToolError> {
    let route_args = RouteArgs {
        agent: args.agent.clone(),
        session: args.session.clone(),
        data_dir: args.data_dir.clone(),
        project: args.project.clone(),
        verbose: false,
        label: "forge-lsp mcp",
    };
    let mut route = Route::new(&route_args, "for forge-lsp mcp to serve")?;
    if route.session.is_none() {
        route.session = Some(forge_core::fresh_session());
    }
    route.check_identity()?;
    Ok(route)
}

/// The method an `initialize` on a stateless session is handed to the handler as, to be
/// refused there (a name no client sends: the reply carries only the request's id).
const STATELESS_INITIALIZE: &str = "forge-lsp/initialize-on-a-stateless-session";

/// The wire until the client's `initialize`: the SDK's handshake ends the connection on a
/// notification or a response that comes before it, and answers an `initialize` whose
/// params it cannot parse as if it were another request, with a message about request
/// metadata. This keeps such a client connected: it drops notifications and responses sent
/// before `initialize` (the MCP spec has the client send none) and answers a malformed
/// `initialize` with -32602 naming the field. From the request the SDK takes as the start of
/// the session on (`initialize`, or a stateless request with its full metadata), everything
/// passes through untouched.
///
/// It also keeps the end of the input from ending the session before every request read is
/// answered ([`Unanswered`]): a client may send its requests and close its input at once
/// (`printf … | forge-lsp mcp | …`). The SDK gives what is still running or being written
/// at the end of the input 5 s and then drops it, which cut a reply in the middle of its
/// line for a client that read slowly.
///
/// After the session started it never writes: the SDK's loop may drop a `receive` at any
/// await, and what it was writing with it.
struct BeforeInitialize<T> {
    inner: T,
    started: bool,
    /// The session was started by a stateless request: a later `initialize` is refused
    /// (the SDK would answer it with success and stay stateless, so the client's next
    /// ordinary request failed for missing metadata).
    stateless: bool,
    /// The `_meta` of the request that started a stateless session: the refused
    /// `initialize` is handed on with it, or the SDK would refuse it for missing metadata.
    session_meta: Option<rmcp::model::RequestMetaObject>,
    unanswered: Arc<Unanswered>,
    /// When the input ended: the wait for the last answers is counted from then, however
    /// often the SDK starts a new `receive`.
    ended_at: Option<std::time::Instant>,
}

impl<T> BeforeInitialize<T> {
    fn new(inner: T) -> Self {
        BeforeInitialize {
            inner,
            started: false,
            stateless: false,
            session_meta: None,
            unanswered: Arc::default(),
            ended_at: None,
        }
    }
}

/// The requests read and not yet answered (their reply not yet written, or cancelled by
/// the client), and a wake-up for the reader waiting for the last one at the end of input.
#[derive(Default)]
struct Unanswered {
    ids: std::sync::Mutex<std::collections::HashSet<rmcp::model::RequestId>>,
    answered: tokio::sync::Notify,
}

/// How long after the end of the input running calls may still be answered: longer than
/// the tools' usual time limits (a `plugins.timeoutMs` set higher is cut here); a call
/// still running then is dropped by the SDK.
const ANSWER_AFTER_EOF: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl Unanswered {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<rmcp::model::RequestId>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn answered(&self, id: &rmcp::model::RequestId) {
        if self.lock().remove(id) {
            self.answered.notify_one();
        }
    }

    /// Until every request read is answered, or [`ANSWER_AFTER_EOF`] after `ended`.
    async fn all_answered(&self, ended: std::time::Instant) {
        let wait = async {
            while !self.lock().is_empty() {
                self.answered.notified().await;
            }
        };
        if tokio::time::timeout_at((ended + ANSWER_AFTER_EOF).into(), wait).await.is_err() {
            tracing::warn!(
                "forge-lsp mcp: input closed; calls still unanswered after {ANSWER_AFTER_EOF:?} are dropped"
            );
        }
    }
}

impl<T: rmcp::transport::Transport<RoleServer>> rmcp::transport::Transport<RoleServer> for BeforeInitialize<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        use rmcp::model::JsonRpcMessage;
        let id = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        let write = self.inner.send(item);
        let unanswered = self.unanswered.clone();
        async move {
            // Written (or failed: the client is gone): answered either way.
            let r = write.await;
            if let Some(id) = id {
                unanswered.answered(&id);
            }
            r
        }
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleServer>> {
        if let Some(ended) = self.ended_at {
            self.unanswered.all_answered(ended).await;
            return None;
        }
        let Some(message) = self.receive_started().await else {
            let ended = *self.ended_at.get_or_insert_with(std::time::Instant::now);
            self.unanswered.all_answered(ended).await;
            return None;
        };
        use rmcp::model::{ClientNotification, JsonRpcMessage};
        match &message {
            JsonRpcMessage::Request(r) => {
                self.unanswered.lock().insert(r.id.clone());
            }
            // A cancelled request may get no reply at all.
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification {
                    if let Some(id) = &c.params.request_id {
                        self.unanswered.answered(id);
                    }
                }
            }
            _ => {}
        }
        Some(message)
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

impl<T: rmcp::transport::Transport<RoleServer>> BeforeInitialize<T> {
    /// The next message the session is to see, `None` at the end of the input.
    async fn receive_started(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleServer>> {
        use rmcp::model::{ClientRequest, JsonRpcMessage, ServerJsonRpcMessage};
        loop {
            let message = self.inner.receive().await?;
            if self.started {
                // An `initialize` on a session a stateless request started: handed on as a
                // request the handler refuses, saying why (`STATELESS_INITIALIZE`). It is
                // not answered here: the SDK's service loop may drop this `receive` at any
                // await once a session runs, and an answer sent from here was lost so.
                if self.stateless {
                    if let JsonRpcMessage::Request(r) = &message {
                        if matches!(r.request, ClientRequest::InitializeRequest(_))
                            || matches!(&r.request, ClientRequest::CustomRequest(c) if c.method == "initialize")
                        {
                            use rmcp::model::GetMeta;
                            let mut custom = rmcp::model::CustomRequest::new(STATELESS_INITIALIZE, None);
                            *custom.get_meta_mut() = self.session_meta.clone().unwrap_or_default();
                            let refused = ClientRequest::CustomRequest(custom);
                            return Some(rmcp::model::ClientJsonRpcMessage::request(refused, r.id.clone()));
                        }
                    }
                }
                return Some(message);
            }
            match &message {
                JsonRpcMessage::Request(r) => match &r.request {
                    ClientRequest::CustomRequest(c) if c.method == "initialize" => {
                        let error = ErrorData::invalid_params(initialize_problem(c.params.as_ref()), None);
                        // A reply that cannot be written: the client is gone, and the next
                        // receive says so.
                        let _ = self.inner.send(ServerJsonRpcMessage::error(error, Some(r.id.clone()))).await;
                    }
                    ClientRequest::InitializeRequest(_) => {
                        self.started = true;
                        return Some(message);
                    }
                    // The SDK answers any other request itself before a session starts
                    // (ping, discovery, a metadata error) and keeps waiting; only a request
                    // with the complete inline metadata of the stateless protocol starts
                    // one without `initialize`.
                    other => {
                        use rmcp::model::GetMeta;
                        let meta = other.get_meta();
                        let handshake_free =
                            matches!(other, ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_));
                        // A request without the stateless protocol's version in its metadata
                        // is a handshake client's that skipped `initialize`: the SDK would
                        // answer it about missing request metadata, which misleads such a
                        // client. Say what is missing instead.
                        // A request no parser took (`checked`): its own reason, not the
                        // stand-in's method (review YE).
                        if let ClientRequest::CustomRequest(c) = other {
                            if c.method == checked::INVALID_MESSAGE {
                                let error = ErrorData::invalid_request(checked::reason(c.params.as_ref()), None);
                                let _ = self.inner.send(ServerJsonRpcMessage::error(error, Some(r.id.clone()))).await;
                                continue;
                            }
                        }
                        if !handshake_free && meta.protocol_version().is_none() {
                            let error = ErrorData::invalid_request(
                                format!(
                                    "forge-lsp mcp: {} came before initialize; start with the MCP handshake (initialize, then notifications/initialized)",
                                    other.method()
                                ),
                                None,
                            );
                            let _ = self.inner.send(ServerJsonRpcMessage::error(error, Some(r.id.clone()))).await;
                            continue;
                        }
                        // (The versions this server takes are the SDK's known ones: ForgeMcp
                        // keeps the handler's default.)
                        let stateless = !handshake_free
                            && meta
                                .protocol_version()
                                .is_some_and(|v| rmcp::model::ProtocolVersion::KNOWN_VERSIONS.contains(&v))
                            && meta.missing_required_keys(&rmcp::model::ProtocolVersion::V_2026_07_28).is_empty();
                        self.started = stateless;
                        self.stateless = stateless;
                        if stateless {
                            self.session_meta = Some(meta.clone());
                        }
                        return Some(message);
                    }
                },
                other => tracing::debug!("forge-lsp mcp: dropped before initialize: {other:?}"),
            }
        }
    }
}

/// What is wrong with the params of an `initialize` the SDK could not parse.
fn initialize_problem(params: Option<&Value>) -> String {
    let why = match params {
        None => "params are missing".to_string(),
        Some(p) if !p.is_object() => "params must be an object".to_string(),
        Some(p) if !p.get("protocolVersion").is_some_and(Value::is_string) => {
            "params.protocolVersion must be the protocol version the client speaks (a string, e.g. \"2025-06-18\")"
                .to_string()
        }
        Some(p) if !p.get("capabilities").is_some_and(Value::is_object) => {
            "params.capabilities must be an object".to_string()
        }
        Some(p) => match p.get("clientInfo") {
            Some(Value::Object(info)) if !info.get("name").is_some_and(Value::is_string) => {
                "params.clientInfo.name must be the client's name (a string)".to_string()
            }
            Some(Value::Object(info)) if !info.get("version").is_some_and(Value::is_string) => {
                "params.clientInfo.version must be the client's version (a string)".to_string()
            }
            Some(Value::Object(_)) => "params do not match the MCP schema of initialize".to_string(),
            _ => "params.clientInfo must be an object with the client's name and version".to_string(),
        },
    };
    format!("invalid initialize: {why}")
}

/// Tool calls one `forge-lsp mcp` process runs at once.
const MAX_CALLS: usize = 16;

/// The MCP server: one per process, over stdio.
#[derive(Clone)]
pub struct ForgeMcp {
    route: Arc<Route>,
    /// Calls running at once ([`MAX_CALLS`]); the others wait their turn.
    calls: Arc<tokio::sync::Semaphore>,
    /// Whether results carry `structuredContent` (see [`STRUCTURED_CONTENT_ENV`]).
    structured: bool,
}

/// `FORGE_MCP_STRUCTURED_CONTENT=off` leaves `structuredContent` out of every result. Some
/// agent CLIs (Codex, Claude Code) show the model a result's `structuredContent` instead of
/// its text when both are there, and the text is what a Forge tool writes for an agent
/// (plan-read's lines are only in the text); with this set their models read the text.
pub const STRUCTURED_CONTENT_ENV: &str = "FORGE_MCP_STRUCTURED_CONTENT";

fn structured_content_from_env() -> bool {
    match std::env::var(STRUCTURED_CONTENT_ENV) {
        Ok(v) => !matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "0" | "false" | "no"),
        Err(_) => true,
    }
}

/// The MCP tools: one per `forge.tools` offer, all of them whoever the caller is (a denied
/// call says why, naming the rule; see docs/mcp.md).
pub fn tools() -> Vec<Tool> {
    as_tools(forge_tools::offers())
}

/// The MCP tools of the plugin tools from files of a project (PROTOCOL.md 10.4).
pub fn plugin_tools(root: &std::path::Path) -> Vec<Tool> {
    as_tools(forge_tools::plugins::offers(root, forge_tools::plugins::trusted_outside(root)))
}

/// One MCP tool per offer (a schema that is not an object becomes `{"type": "object"}`).
fn as_tools(offers: Vec<forge_protocol::ToolOffer>) -> Vec<Tool> {
    offers
        .into_iter()
        .map(|o| {
            let schema = match o.input_schema {
                Value::Object(m) => m,
                _ => JsonObject::from_iter([("type".to_string(), json!("object"))]),
            };
            Tool::new(o.name, o.description, Arc::new(schema))
        })
        .collect()
}

/// The `tools/call` result of a tool's outcome.
pub fn to_mcp(outcome: Result<CommandResult, ToolError>) -> CallToolResult {
    match outcome {
        Ok(r) => {
            let mut out = CallToolResult::success(vec![ContentBlock::text(r.text)]);
            out.structured_content = match r.data.into_value() {
                Value::Null => None,
                Value::Object(m) => Some(Value::Object(m)),
                // structuredContent must be an object: anything else is wrapped.
                other => Some(json!({ "value": other })),
            };
            out
        }
        Err(e) => {
            let mut out = CallToolResult::error(vec![ContentBlock::text(e.message)]);
            out.structured_content = Some(json!({ "error": { "code": e.kind.code(), "kind": e.kind.as_str() } }));
            out
        }
    }
}

/// The MCP spec's protocol error for a tool name nobody offers (-32602).
fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("Unknown tool: {name}; tools/list lists the Forge tools"), None)
}

/// The error for a request the SDK could not parse: -32602 naming what is wrong for the
/// methods this server has, -32601 for any other method.
fn malformed_request(method: &str, params: Option<&Value>) -> ErrorData {
    match method {
        "tools/call" => {
            let why = match params {
                None => "params are missing".to_string(),
                Some(p) if !p.is_object() => "params must be an object".to_string(),
                Some(p) if !p.get("name").is_some_and(Value::is_string) => {
                    "params.name must be the tool's name (a string)".to_string()
                }
                Some(p) => match p.get("arguments") {
                    Some(a) if !a.is_object() && !a.is_null() => {
                        "params.arguments must be one JSON object (the tool's input)".to_string()
                    }
                    _ => "params do not match the MCP schema of tools/call".to_string(),
                },
            };
            ErrorData::invalid_params(format!("invalid tools/call: {why}"), None)
        }
        "initialize" | "tools/list" | "ping" => {
            ErrorData::invalid_params(format!("invalid {method}: params do not match the MCP schema"), None)
        }
        other => ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {other} (forge-lsp mcp offers tools only)"),
            None,
        ),
    }
}

/// An MCP agent has the `loop-status` tool, not an editor: execute-plan's reply says so.
fn mcp_watch_line(text: &str, data: &Value) -> Option<String> {
    let name = data.get("loopName").and_then(Value::as_str)?;
    let input = json!({ "name": name }).to_string();
    Some(
        text.lines()
            .map(|l| {
                if l.starts_with(WATCH_IN_EDITOR) {
                    format!("Your part is done; watch it with the loop-status tool ({input}) (or open forge://loop/{name}/status.md in an editor).")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

impl ForgeMcp {
    /// Runs tool `name` through the route off the runtime, with the request's cancel token
    /// passed on as the route's cancel flag when `cancellable` (module docs of `Route`).
    async fn call_cancellable(
        &self,
        context: &RequestContext<RoleServer>,
        name: &str,
        needs_server: bool,
        input: Value,
        cancellable: bool,
    ) -> Result<CommandResult, ToolError> {
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let asked = cancel.clone();
        let ct = context.ct.clone();
        let watch = tokio::spawn(async move {
            ct.cancelled().await;
            asked.store(true, std::sync::atomic::Ordering::Release);
        });
        let (route, owned) = (self.route.clone(), name.to_string());
        let outcome = tokio::task::spawn_blocking(move || {
            route.call_named_cancellable(&owned, needs_server, input, cancellable.then_some(&*cancel))
        })
        .await
        .unwrap_or_else(|e| Err(ToolError::internal(format!("forge.{name} failed: {e}"))));
        watch.abort();
        outcome
    }

    /// The `tools/call` result of an outcome, without `structuredContent` when this process
    /// leaves it out ([`STRUCTURED_CONTENT_ENV`]).
    fn result(&self, outcome: Result<CommandResult, ToolError>) -> CallToolResult {
        let mut result = to_mcp(outcome);
        if !self.structured {
            result.structured_content = None;
        }
        result
    }

    /// The loop's server's `forge.tools` as MCP tools; `None` when it cannot be asked (then
    /// the local listing stands in).
    async fn offers_of_the_server(&self) -> Option<Vec<Tool>> {
        let entry = forge_tools::find("tools")?;
        let route = self.route.clone();
        let r = tokio::task::spawn_blocking(move || route.call(entry, json!({}))).await.ok()?.ok()?;
        let offers: Vec<forge_protocol::ToolOffer> =
            serde_json::from_value(r.data.into_value().get("tools")?.clone()).ok()?;
        Some(as_tools(offers))
    }
}

impl ServerHandler for ForgeMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("forge-lsp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Forge: durable plans, review findings and coding/auditing loops of this project. \
                 Tools are the Forge tools (plan-read, plan-write, review-write, execute-plan, ...); \
                 each takes one JSON object as described by its input schema.",
            )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Every tool is on the one page, so this server gives no cursor, and any cursor is
        // one it did not give (the MCP spec: an invalid cursor is -32602).
        if let Some(cursor) = request.as_ref().and_then(|r| r.cursor.as_ref()) {
            return Err(ErrorData::invalid_params(
                format!(
                    "tools/list: unknown cursor {cursor:?}; every tool is listed on one page, so there is no next page"
                ),
                None,
            ));
        }
        // Inside a loop the loop's server decides what is offered (its configuration and
        // its trust, which may come from an editor's initialization options): its
        // `forge.tools`, as one MCP tool per offer.
        if self.route.in_loop() {
            if let Some(listed) = self.offers_of_the_server().await {
                return Ok(ListToolsResult::with_all_items(listed));
            }
        }
        let mut all: Vec<Tool> = tools();
        // Trust is decided with the project's id: detection reads git (a history walk when
        // its cache is cold), so it runs on a blocking thread, never on the runtime's.
        let root = self.route.root.clone();
        let plugins = tokio::task::spawn_blocking(move || plugin_tools(&root)).await.unwrap_or_default();
        for t in plugins {
            // An override replaces the built-in of its name.
            match all.iter_mut().find(|b| b.name == t.name) {
                Some(b) => *b = t,
                None => all.push(t),
            }
        }
        Ok(ListToolsResult::with_all_items(all))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A client that pipelines thousands of calls gets them run 16 at a time: each runs
        // on a thread of its own with a database connection of its own, and thousands at
        // once ran out of descriptors and failed with misleading errors.
        let Ok(_turn) = self.calls.clone().acquire_owned().await else {
            return Err(ErrorData::internal_error("forge-lsp mcp is shutting down", None));
        };
        // The MCP spec's rule: an unknown tool is a protocol error (-32602), a tool that ran
        // and failed is a result with isError.
        let Some(tool) = forge_tools::TOOLS.iter().find(|t| t.name == request.name) else {
            // No listed tool's name has the commands' prefix: `forge.<plugin>__<name>` is
            // unknown, not that plugin (review YA: it ran in-process and, through a server,
            // failed naming `forge.forge.…`).
            if request.name.starts_with(forge_protocol::COMMAND_PREFIX) {
                return Err(unknown_tool(&request.name));
            }
            // A plugin tool from files (PROTOCOL.md 10.4); inside a loop, whatever the loop's
            // server offers (it says when it has no such tool).
            let (route, name) = (self.route.clone(), request.name.to_string());
            let in_loop = self.route.in_loop();
            let is_plugin =
                in_loop || tokio::task::spawn_blocking(move || route.plugin(&name).is_some()).await.unwrap_or(false);
            if is_plugin {
                let input = Value::Object(request.arguments.unwrap_or_default());
                // The client's `notifications/cancelled` stops a plugin tool this process runs
                // (its process group is killed), as `$/cancelRequest` does in a server.
                let outcome = self.call_cancellable(&context, &request.name, false, input, true).await;
                if let Err(e) = &outcome {
                    if in_loop
                        && e.kind == forge_protocol::ErrorKind::InvalidParams
                        && e.message.starts_with("unknown command `")
                    {
                        return Err(unknown_tool(&request.name));
                    }
                }
                return Ok(self.result(outcome).into());
            }
            return Err(unknown_tool(&request.name));
        };
        let input = Value::Object(request.arguments.unwrap_or_default());
        // The client's `notifications/cancelled` stops a shell command (through the loop's
        // server: the connection is closed, and the server kills it) and a read-only tool
        // run in this process (a search stops its walk); other built-in tools run to their
        // end (their writes are whole). Before, a cancelled shell command ran on to its time
        // limit (review AA).
        let cancellable = tool.name == "shell" || tool.read_only;
        let outcome = self.call_cancellable(&context, tool.name, tool.needs_server, input, cancellable).await;
        let outcome = outcome.map(|mut r| {
            if tool.name == "execute-plan" && !self.route.in_loop() {
                if let Some(text) = mcp_watch_line(&r.text, &r.data) {
                    r.text = text;
                }
            }
            r
        });
        Ok(self.result(outcome).into())
    }

    /// The SDK hands over requests it could not parse as custom requests: a `tools/call`
    /// whose `arguments` is not an object lands here. Say what is wrong instead of the SDK's
    /// bare "method not found".
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if request.method == checked::INVALID_MESSAGE {
            return Err(ErrorData::invalid_request(checked::reason(request.params.as_ref()), None));
        }
        if request.method == STATELESS_INITIALIZE {
            return Err(ErrorData::invalid_request(
                "forge-lsp mcp: this connection started with stateless requests (each carries its protocol version and capabilities in _meta), so it takes no initialize; go on sending stateless requests, or start a new forge-lsp mcp for a handshake session",
                None,
            ));
        }
        Err(malformed_request(&request.method, request.params.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(data: Value) -> Result<CommandResult, ToolError> {
        Ok(CommandResult { text: "done".into(), data: data.into() })
    }

    #[test]
    fn results_and_failures_map_to_call_tool_results() {
        // (outcome, isError, structuredContent)
        let cases: Vec<(Result<CommandResult, ToolError>, bool, Option<Value>)> = vec![
            (ok(json!({ "a": 1 })), false, Some(json!({ "a": 1 }))),
            (ok(Value::Null), false, None),
            (ok(json!([1, 2])), false, Some(json!({ "value": [1, 2] }))),
            (ok(json!("s")), false, Some(json!({ "value": "s" }))),
            (
                Err(ToolError::denied("forge.plan-write is denied")),
                true,
                Some(json!({ "error": { "code": 1001, "kind": "denied" } })),
            ),
            (
                Err(ToolError::invalid_params("invalid argument `x`")),
                true,
                Some(json!({ "error": { "code": -32602, "kind": "invalid_params" } })),
            ),
        ];
        for (outcome, is_error, structured) in cases {
            let text = match &outcome {
                Ok(r) => r.text.clone(),
                Err(e) => e.message.clone(),
            };
            let r = serde_json::to_value(to_mcp(outcome)).expect("serializes");
            assert_eq!(r["isError"], json!(is_error), "{r}");
            assert_eq!(r.get("structuredContent").cloned(), structured, "{r}");
            assert_eq!(r["content"], json!([{ "type": "text", "text": text }]), "{r}");
        }
    }

    #[test]
    fn malformed_requests_say_what_is_wrong() {
        let cases = [
            ("tools/call", Some(json!({ "name": "plan-read", "arguments": "x" })), -32602, "params.arguments"),
            ("tools/call", Some(json!({ "name": 3 })), -32602, "params.name"),
            ("tools/call", Some(json!([1])), -32602, "must be an object"),
            ("tools/call", None, -32602, "missing"),
            ("tools/list", Some(json!({ "cursor": 1 })), -32602, "tools/list"),
            ("bogus/method", None, -32601, "bogus/method"),
        ];
        for (method, params, code, needle) in cases {
            let e = malformed_request(method, params.as_ref());
            assert_eq!(e.code.0, code, "{method}: {e:?}");
            assert!(e.message.contains(needle), "{method}: {}", e.message);
        }
    }

    #[test]
    fn a_malformed_initialize_names_the_field() {
        let cases = [
            (None, "params are missing"),
            (Some(json!([1])), "must be an object"),
            (Some(json!({ "protocolVersion": 5 })), "params.protocolVersion"),
            (Some(json!({ "protocolVersion": "2025-06-18", "capabilities": [] })), "params.capabilities"),
            (Some(json!({ "protocolVersion": "2025-06-18", "capabilities": {} })), "params.clientInfo must"),
            (
                Some(json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": 1 } })),
                "params.clientInfo.name",
            ),
        ];
        for (params, needle) in cases {
            let m = initialize_problem(params.as_ref());
            assert!(m.starts_with("invalid initialize: ") && m.contains(needle), "{params:?}: {m}");
        }
    }

    #[test]
    fn every_offer_is_a_tool_with_an_object_schema() {
        let tools = tools();
        let offers = forge_tools::offers();
        assert_eq!(tools.len(), offers.len());
        for (t, o) in tools.iter().zip(&offers) {
            assert_eq!(t.name, o.name);
            assert_eq!(t.input_schema.get("type"), Some(&json!("object")), "{}", o.name);
        }
    }

    #[test]
    fn execute_plan_points_an_mcp_agent_at_loop_status() {
        let text = format!("Loop started.\n{WATCH_IN_EDITOR} (forge://loop/x/status.md).");
        let out = mcp_watch_line(&text, &json!({ "loopName": "x" })).expect("rewritten");
        assert_eq!(out.lines().next(), Some("Loop started."));
        assert!(out.contains("loop-status tool ({\"name\":\"x\"})"), "{out}");
        assert!(mcp_watch_line(&text, &json!({})).is_none());
    }
}

/// What was read from standard input before the client's first message: nothing (a
/// quiet end), some bytes, or a read error.
#[derive(Default)]
struct Seen {
    bytes: std::sync::atomic::AtomicU64,
    error: std::sync::Mutex<Option<String>>,
}

impl Seen {
    fn nothing(&self) -> bool {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed) == 0 && self.error.lock().map_or(true, |e| e.is_none())
    }

    fn describe(&self) -> String {
        let n = self.bytes.load(std::sync::atomic::Ordering::Relaxed);
        match self.error.lock().ok().and_then(|e| e.clone()) {
            Some(e) => format!("{n} bytes read, then: {e}"),
            // Pings and requests before `initialize` are answered, and are no handshake
            // (review YA: "none of it a JSON-RPC message line" after an answered ping).
            None => format!("{n} bytes read, with no initialize request among them"),
        }
    }
}

/// Standard input, counting what it gives ([`Seen`]).
struct Counted<R> {
    inner: R,
    seen: Arc<Seen>,
}

impl<R> Counted<R> {
    fn new(inner: R) -> Self {
        Counted { inner, seen: Arc::default() }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        match &r {
            std::task::Poll::Ready(Ok(())) => {
                let n = (buf.filled().len() - before) as u64;
                self.seen.bytes.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
            std::task::Poll::Ready(Err(e)) => {
                if let Ok(mut slot) = self.seen.error.lock() {
                    slot.get_or_insert_with(|| e.to_string());
                }
            }
            std::task::Poll::Pending => {}
        }
        r
    }
}
