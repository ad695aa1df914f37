//! Our own connection loop around tower-lsp-server's service.
//!
//! tower-lsp-server's `Server` reads frames with tokio-util's `FramedRead`, which ends the
//! stream after the first decode error (`has_errored` → `None`): one frame with invalid
//! UTF-8, malformed JSON or a body that is not a JSON-RPC message closes the whole
//! connection. PROTOCOL.md §8 requires the connection to keep working. So frames are read
//! here with the shared decoder ([`forge_protocol::framing`]) and handed to the
//! framework's `LspService` directly (its `Server` loop is not used):
//!
//! - each frame is parsed once (the fast path reads it straight into the framework's
//!   `Request`/`Response`); only a frame the fast path does not take goes through the
//!   full validation below, which answers what is wrong;
//! - requests are handled [`CONCURRENCY`] at a time;
//! - replies, the server's own messages, our error answers and frames the server built
//!   as bytes ([`Outbox`]) are merged frame by frame onto the real writer;
//! - a request the server takes itself ([`Direct`]: `workspace/executeCommand` and
//!   `workspace/textDocumentContent` once initialized) does not pass through the framework: its result is serialized once,
//!   straight into the reply's bytes. The transport gives it what the framework would:
//!   `$/cancelRequest` for its id drops it and answers -32800, and after `shutdown` it is
//!   left to the framework (which refuses it).
//!
//! Bad input and its answer (docs/reliability.md lists the tests):
//! - bytes that are not an LSP header (a stray byte, the rest of a broken frame): one
//!   -32700 with id null per run, then the stream resynchronizes at the next
//!   `Content-Length` header;
//! - a bad or missing `Content-Length`: -32700, id null;
//! - a body over 64 MiB: -32600 (id null) at once, as soon as the header is read; the
//!   body is read and discarded in bounded chunks. A length over [`MAX_SKIP`] cannot be
//!   skipped in reasonable time: after the answer the connection is closed and the
//!   reason logged;
//! - a body that is empty, not UTF-8 or not JSON: -32700, id null;
//! - JSON that is not a request: -32600 with the request's id where it has one;
//! - a lone UTF-16 surrogate escape (`"\ud800"`): JSON's grammar allows it but it is no
//!   Unicode string, so the message is not a valid request: -32600 with its id
//!   (a notification is dropped and logged: notifications are never answered);
//! - a request id already in use by an unanswered request: -32600 with that id, saying so.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures_util::future::{AbortHandle, Abortable};

use forge_protocol::framing::{self, Decoder, Event};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tower_lsp_server::jsonrpc::{Error, Id, Request, Response};
use tower_lsp_server::{ClientSocket, LanguageServer, LspService};

/// Largest accepted message body.
pub const MAX_MESSAGE: usize = framing::MAX_MESSAGE;
/// Largest announced body that is read and discarded; beyond it the connection closes.
pub const MAX_SKIP: u64 = 1 << 30;
const READ_CHUNK: usize = 64 * 1024;

/// One complete outgoing frame: `buf[start..]`. A direct reply becomes its frame in the
/// room kept at the front of its buffer ([`FRONT`]), so a reply of megabytes is not moved.
pub struct Frame {
    buf: Vec<u8>,
    start: usize,
    /// Its share of the connection's output budget ([`OUT_BUDGET_KIB`]), given back when
    /// the frame is written (dropped).
    held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl From<Vec<u8>> for Frame {
    fn from(buf: Vec<u8>) -> Frame {
        Frame { buf, start: 0, held: None }
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Frame({:?})", String::from_utf8_lossy(self))
    }
}

impl std::ops::Deref for Frame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn error_frame(id: Value, code: i64, message: &str) -> Frame {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    framing::encode(body.to_string().as_bytes()).into()
}

/// Ids of the client's requests the framework has not answered yet (as JSON text).
type InFlight = Arc<Mutex<HashSet<String>>>;

/// What to do with one frame from the client.
enum Incoming {
    /// A valid message, to hand on (a request still goes through [`admit`]).
    Message(Msg),
    /// An error response to send back; keep reading.
    Reply(Frame),
    /// Something unanswerable was skipped; keep reading.
    Skip,
}

/// The slow path: finds what is wrong with a frame the fast path did not take.
fn validate(body: Vec<u8>) -> Incoming {
    if body.is_empty() {
        return Incoming::Reply(error_frame(
            Value::Null,
            -32700,
            "Parse error: the message body is empty (Content-Length: 0)",
        ));
    }
    let text = match std::str::from_utf8(&body) {
        Ok(t) => t,
        Err(e) => {
            return Incoming::Reply(error_frame(
                Value::Null,
                -32700,
                &format!("Parse error: message is not valid UTF-8 ({e})"),
            ))
        }
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return parse_failure(text, e),
    };
    let id = value.get("id").filter(|i| i.is_string() || i.is_i64()).cloned().unwrap_or(Value::Null);
    if !value.is_object() {
        return Incoming::Reply(error_frame(Value::Null, -32600, "Invalid Request: a message must be a JSON object"));
    }
    if value.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Reply(error_frame(id, -32600, "Invalid Request: `jsonrpc` must be \"2.0\""));
    }
    // JSON-RPC allows a null id, LSP does not (integer or string); such a request would be
    // run with no way to answer or cancel it.
    if value.get("method").is_some() && value.get("id").is_some_and(Value::is_null) {
        return Incoming::Reply(error_frame(
            Value::Null,
            -32600,
            "Invalid Request: `id` must be an integer or a string (LSP has no null ids); a notification has no `id` at all",
        ));
    }
    let is_response = value.get("method").is_none() && (value.get("result").is_some() || value.get("error").is_some());
    if is_response {
        // A malformed response to us: nothing to answer.
        return serde_json::from_value::<Response>(value)
            .map_or(Incoming::Skip, |r| Incoming::Message(Msg::Response(r)));
    }
    match value.get("method").is_some().then(|| serde_json::from_value::<Request>(value)) {
        Some(Ok(r)) => Incoming::Message(Msg::Request(r)),
        _ => Incoming::Reply(error_frame(
            id,
            -32600,
            "Invalid Request: not a valid JSON-RPC request or notification (check `method`, `id` and `params`)",
        )),
    }
}

/// A body that serde_json refuses: a parse error, unless the only fault is a lone
/// surrogate escape, which gets an error for the request's id.
fn parse_failure(text: &str, e: serde_json::Error) -> Incoming {
    if let Some(fixed) = framing::replace_lone_surrogates(text) {
        if let Ok(v) = serde_json::from_str::<Value>(&fixed) {
            let message = "Invalid Request: the message holds a lone UTF-16 surrogate escape (such as \\ud800 without its pair), which denotes no Unicode character; LSP strings must be valid Unicode";
            return match v.get("id").filter(|i| i.is_string() || i.is_i64()) {
                Some(id) => Incoming::Reply(error_frame(id.clone(), -32600, message)),
                None if v.get("method").is_some() => {
                    tracing::warn!("dropped a notification: {message}");
                    Incoming::Skip
                }
                None => Incoming::Reply(error_frame(Value::Null, -32600, message)),
            };
        }
    }
    Incoming::Reply(error_frame(Value::Null, -32700, &format!("Parse error: {e}")))
}

/// How many requests and notifications are handled at once (the framework's own loop
/// allows 4; reads run on the store's read connections and writes are grouped, so more in
/// flight is more done).
pub const CONCURRENCY: usize = 64;

/// How long a write may make no progress once the client is done (`exit`, end of input)
/// before the connection closes without what is left to send.
pub const CLOSING_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// Sends frames onto the connection beside the framework's own messages: what the server
/// builds as bytes (diagnostics) goes out without becoming a `serde_json::Value` first.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Frame>,
    budget: Arc<tokio::sync::Semaphore>,
}

/// What a connection may hold queued for its client, in KiB (32 MiB). A client that sends
/// requests and does not read the replies gets no more replies built for it once this
/// much waits to be written: the handling waits, and the reading of its requests with it.
/// The queue's count of frames (256) alone let large replies (a plan's text, a page of
/// findings) pile up to gigabytes.
pub const OUT_BUDGET_KIB: u32 = 32 * 1024;

impl Outbox {
    /// Queues one frame once its size fits in the budget (a frame larger than the whole
    /// budget waits until nothing else is queued); false once the connection is closed.
    async fn send(&self, mut frame: Frame) -> bool {
        let kib = frame.len().div_ceil(1024).min(OUT_BUDGET_KIB as usize) as u32;
        if kib > 0 {
            match self.budget.clone().acquire_many_owned(kib).await {
                Ok(p) => frame.held = Some(p),
                Err(_) => return false,
            }
        }
        self.tx.send(frame).await.is_ok()
    }

    /// Sends one serialized JSON-RPC message; false once the connection is closed.
    pub async fn send_body(&self, body: &[u8]) -> bool {
        !body.is_empty() && self.send(framing::encode(body).into()).await
    }
}

/// The outgoing queue of a connection: the [`Outbox`] for the server's code and the end
/// [`serve`] writes from.
pub fn outbox() -> (Outbox, mpsc::Receiver<Frame>) {
    let (tx, rx) = mpsc::channel(256);
    (Outbox { tx, budget: Arc::new(tokio::sync::Semaphore::new(OUT_BUDGET_KIB as usize)) }, rx)
}

/// `Some` of a field that is present, even when it is `null` (as the framework reads it).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

/// A message as read in the one parse of the fast path.
#[derive(serde::Deserialize)]
struct Raw {
    #[serde(default)]
    jsonrpc: Option<String>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// A message for the framework.
enum Msg {
    Request(Request),
    Response(Response),
}

fn to_id(v: Value) -> Option<Id> {
    match v {
        Value::Number(n) => n.as_i64().map(Id::Number),
        Value::String(s) => Some(Id::String(s)),
        Value::Null => Some(Id::Null),
        _ => None,
    }
}

/// The fast path: one parse into [`Raw`], for the regular messages. `None` sends the body
/// down the slow path ([`validate`]), which finds and answers what is wrong.
fn fast(body: &[u8]) -> Option<Msg> {
    let raw: Raw = serde_json::from_slice(body).ok()?;
    if raw.jsonrpc.as_deref() != Some("2.0") {
        return None;
    }
    match (raw.method, raw.result, raw.error) {
        (Some(method), None, None) => {
            let id = match raw.id {
                None => None,
                Some(Value::Null) => return None,
                Some(v) => Some(to_id(v)?),
            };
            let mut b = Request::build(method);
            if let Some(p) = raw.params {
                b = b.params(p);
            }
            if let Some(id) = id {
                b = b.id(id);
            }
            Some(Msg::Request(b.finish()))
        }
        (None, Some(result), None) => Some(Msg::Response(Response::from_ok(to_id(raw.id?)?, result))),
        (None, None, Some(error)) => {
            let error: tower_lsp_server::jsonrpc::Error = serde_json::from_value(error).ok()?;
            Some(Msg::Response(Response::from_error(to_id(raw.id?)?, error)))
        }
        _ => None,
    }
}

/// The in-flight key of an id (its JSON text, as [`validate`] writes it).
fn id_key(id: &Id) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// Checks a request before it is handled: a `$/` request is answered with MethodNotFound
/// (tower-lsp-server swallows that answer, leaving it unanswered; LSP requires the error)
/// and an id already in flight is refused; else its id is in flight until its reply. A
/// message with a null id is treated as a notification here.
fn admit(req: &Request, in_flight: &InFlight) -> Option<Frame> {
    let id = req.id().filter(|id| **id != Id::Null)?;
    let idv = serde_json::to_value(id).unwrap_or(Value::Null);
    if req.method().starts_with("$/") {
        return Some(error_frame(idv, -32601, &format!("Method not found: {}", req.method())));
    }
    let mut set = in_flight.lock().unwrap_or_else(|p| p.into_inner());
    if !set.insert(id_key(id)) {
        return Some(error_frame(
            idv.clone(),
            -32600,
            &format!("Invalid Request: request id {idv} is already in use by a request that has not been answered yet; use a fresh id"),
        ));
    }
    None
}

/// The result of a request the server answers itself: the result's JSON (after [`FRONT`]
/// bytes kept for the reply's head), or an error.
pub type DirectReply = Result<ReplyBody, Error>;

/// Room kept in front of a direct result for its frame's header and the response up to
/// `"result":`: 60 bytes and the request's id. A longer id moves the result once.
const FRONT: usize = 128;

/// A direct result's JSON, written after [`FRONT`] bytes of room (made by [`reply_with`]).
pub struct ReplyBody(Vec<u8>);
/// A request the server answers itself, running.
pub type DirectFuture = std::pin::Pin<Box<dyn std::future::Future<Output = DirectReply> + Send>>;

/// Answers one request the server took, given its params.
pub type DirectHandler = Box<dyn FnOnce(Option<Value>) -> DirectFuture + Send>;

/// Requests the server answers beside the framework, its result serialized straight into
/// the reply (no `serde_json::Value` in between, no second serialization).
pub trait Direct {
    /// The handler of a request for `method` when the server takes it now (else the
    /// framework gets it).
    fn take(&self, method: &str) -> Option<DirectHandler>;
    /// Whether `initialize` has succeeded (a `shutdown` before it is refused and shuts
    /// nothing down).
    fn accepted_initialize(&self) -> bool;
}

/// The params of a request the server takes itself, read as the framework reads them
/// (same errors).
pub fn params<T: serde::de::DeserializeOwned>(params: Option<Value>) -> Result<T, Error> {
    let params = params.ok_or_else(|| Error::invalid_params("Missing params field"))?;
    serde_json::from_value(params).map_err(|e| Error::invalid_params(e.to_string()))
}

/// The reply of a request the server took, as `write` appends its result's JSON to the
/// buffer it is given: sized for `text_len` bytes of text (most of a big reply) and some
/// more, so that it is not regrown while written, after [`FRONT`] bytes of room to become
/// its frame in place. `write` only appends.
pub fn reply_with(text_len: usize, write: impl FnOnce(&mut Vec<u8>)) -> DirectReply {
    let mut out = Vec::with_capacity(FRONT + text_len + text_len / 16 + 1024);
    out.resize(FRONT, 0);
    write(&mut out);
    // A writer that cut into the room would otherwise make a broken frame.
    if out.len() < FRONT {
        return Err(Error::internal_error());
    }
    Ok(ReplyBody(out))
}

/// What handling a request gives: the framework's response, or the reply of one the
/// server took itself.
enum Out {
    Framework(Response),
    Direct(Id, DirectReply),
}

impl Out {
    fn id(&self) -> &Id {
        match self {
            Out::Framework(r) => r.id(),
            Out::Direct(id, _) => id,
        }
    }

    /// The complete frame of the reply (a direct result becomes its frame in place).
    fn into_frame(self) -> Frame {
        match self {
            Out::Framework(r) => framing::encode(&serde_json::to_vec(&r).unwrap_or_default()).into(),
            Out::Direct(id, Ok(ReplyBody(mut buf))) => {
                let id = serde_json::to_string(&id).unwrap_or_else(|_| "null".into());
                let (head, mid) = (&b"{\"jsonrpc\":\"2.0\",\"id\":"[..], &b",\"result\":"[..]);
                let mut front = framing::header(head.len() + id.len() + mid.len() + (buf.len() - FRONT) + 1);
                front.extend_from_slice(head);
                front.extend_from_slice(id.as_bytes());
                front.extend_from_slice(mid);
                buf.push(b'}');
                match FRONT.checked_sub(front.len()) {
                    Some(start) => {
                        buf[start..FRONT].copy_from_slice(&front);
                        Frame { buf, start, held: None }
                    }
                    None => {
                        buf.splice(0..FRONT, front);
                        buf.into()
                    }
                }
            }
            Out::Direct(id, Err(e)) => {
                framing::encode(&serde_json::to_vec(&Response::from_error(id, e)).unwrap_or_default()).into()
            }
        }
    }
}

type Handling = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Out>> + Send>>;

/// Requests the server took itself and has not answered yet: their cancel handles and
/// shields (`forge_tools::cancel`: raised, the request runs to the end), by id.
type Taken = Arc<Mutex<HashMap<String, (AbortHandle, Arc<std::sync::atomic::AtomicBool>)>>>;

/// The id a `$/cancelRequest` names, as an in-flight key.
fn cancelled_key(req: &Request) -> Option<String> {
    let id = req.params()?.get("id")?;
    (id.is_string() || id.is_i64()).then(|| id.to_string())
}

/// Why a `textDocument/didChange`'s changes cannot be applied as sent: a change with a
/// `range` (or `rangeLength`) that is not an LSP range (a negative number, a missing
/// field). `None` when every change is a valid ranged change or a whole text.
fn bad_change_range(params: Option<&Value>) -> Option<String> {
    let changes = params?.get("contentChanges")?.as_array()?;
    changes.iter().enumerate().find_map(|(i, c)| {
        // `"range": null` is no range: a whole-text change, as the framework reads it.
        if let Some(range) = c.get("range").filter(|r| !r.is_null()) {
            if let Err(e) = serde_json::from_value::<tower_lsp_server::gen_lsp_types::Range>(range.clone()) {
                return Some(format!("change {i}'s range is not an LSP range ({e})"));
            }
        }
        match c.get("rangeLength") {
            Some(n) if !n.is_null() && n.as_u64().is_none_or(|n| n > u64::from(u32::MAX)) => {
                Some(format!("change {i}'s rangeLength is not an unsigned integer"))
            }
            _ => None,
        }
    })
}

/// A `shutdown` request as the framework may be given it: without params when they are
/// empty (`{}`, `[]`), or, when they are anything else, its refusal (-32602) to send
/// instead. Any other message is given back as it is.
fn shutdown_params(req: Request) -> Result<Request, Handling> {
    let empty = |p: &Value| match p {
        Value::Null => true,
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    if req.method() != "shutdown" || req.id().is_none_or(|id| *id == Id::Null) || req.params().is_none() {
        return Ok(req);
    }
    let (method, id, params) = req.into_parts();
    let id = id.unwrap_or(Id::Null);
    if params.as_ref().is_some_and(empty) {
        return Ok(Request::build(method).id(id).finish());
    }
    let refusal = Error::invalid_params("`shutdown` takes no params; the server was not shut down");
    Err(Box::pin(async move { Some(Out::Direct(id, Err(refusal))) }))
}

/// Reads the client's frames, answers bad ones and hands good ones to the service (or,
/// for responses to our requests, to the framework's client) until `exit`, end of input,
/// or an unskippable oversized message.
async fn read_client<R, S, K>(
    mut reader: R,
    mut service: LspService<S>,
    mut responses: K,
    tasks: mpsc::Sender<Handling>,
    out: Outbox,
    in_flight: InFlight,
    taken: Taken,
) where
    R: AsyncRead + Unpin,
    S: LanguageServer + Direct,
    K: futures_util::Sink<Response> + Unpin,
    K::Error: std::fmt::Display,
{
    let mut dec = Decoder::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    // After `shutdown` every request goes to the framework, which knows the lifecycle.
    let mut shut_down = false;
    // Where this connection's `initialize` is: none yet (or the last one failed), running,
    // answered.
    let initialize_state = Arc::new(std::sync::atomic::AtomicU8::new(INIT_NONE));
    'read: loop {
        while let Some(ev) = dec.next_event() {
            let msg = match ev {
                Event::Frame(body) => {
                    let msg = match fast(&body) {
                        Some(m) => Ok(m),
                        None => match validate(body) {
                            Incoming::Message(m) => Ok(m),
                            Incoming::Reply(f) => Err(f),
                            Incoming::Skip => continue,
                        },
                    };
                    match msg {
                        Ok(Msg::Request(req)) => match admit(&req, &in_flight) {
                            Some(reply) => Err(reply),
                            None => Ok(Msg::Request(req)),
                        },
                        other => other,
                    }
                }
                Event::TooLarge { length } => {
                    let (code, mut message) = Event::TooLarge { length }.error().unwrap_or_default();
                    if length > MAX_SKIP {
                        // Not skipped: say what happens instead.
                        let size = if length == u64::MAX {
                            "message length".to_string()
                        } else {
                            format!("message of {length} bytes")
                        };
                        message = format!(
                            "Invalid Request: {size} exceeds the limit of {MAX_MESSAGE} bytes (64 MiB) and is too long to skip (over 1 GiB); the connection is closed"
                        );
                    }
                    if !out.send(error_frame(Value::Null, code, &message)).await {
                        break 'read;
                    }
                    if length > MAX_SKIP {
                        tracing::warn!(
                            "closing the connection: the client announced a message of {length} bytes, over the {MAX_MESSAGE}-byte limit and too long to skip (over {MAX_SKIP} bytes)"
                        );
                        break 'read;
                    }
                    tracing::warn!("skipping a message of {length} bytes: over the {MAX_MESSAGE}-byte limit");
                    continue;
                }
                other => {
                    let (code, message) = other.error().unwrap_or_default();
                    tracing::warn!("bad input from the client: {message}");
                    Err(error_frame(Value::Null, code, &message))
                }
            };
            match msg {
                Ok(Msg::Request(req)) => {
                    use tower::Service;
                    if let Err(e) = futures_util::future::poll_fn(|cx| service.poll_ready(cx)).await {
                        tracing::debug!("the service stopped taking requests: {e}");
                        break 'read;
                    }
                    // `shutdown` takes no params. Empty ones (`{}`, `[]`: some clients send
                    // them) are dropped before the framework sees them; others are refused
                    // here, and the server is not shut down. The framework refused them
                    // (-32602) after it had already shut down, so a client told that its
                    // `shutdown` failed could neither send another one nor exit with code 0.
                    // A ranged change whose range the types cannot read would reach the
                    // handler as a whole-text change (the change type is an untagged
                    // union): its fragment would become the buffer. Dropped instead.
                    if req.id().is_none() && req.method() == "textDocument/didChange" {
                        if let Some(why) = bad_change_range(req.params()) {
                            tracing::warn!("dropped a textDocument/didChange: {why}");
                            continue;
                        }
                    }
                    let req = match shutdown_params(req) {
                        Ok(req) => req,
                        Err(refusal) => {
                            if tasks.send(refusal).await.is_err() {
                                break 'read;
                            }
                            continue;
                        }
                    };
                    // `exit` is a notification. Sent as a request (with an id) the framework
                    // exited without answering it; the client waited for a reply that never
                    // came. It is refused here, and the server goes on.
                    if req.method() == "exit" && req.id().is_some_and(|id| *id != Id::Null) {
                        let id = req.id().cloned().unwrap_or(Id::Null);
                        let refusal = Error {
                            code: tower_lsp_server::jsonrpc::ErrorCode::InvalidRequest,
                            message: "`exit` is a notification: send it without an id; the server did not exit".into(),
                            data: None,
                        };
                        if tasks.send(Box::pin(async move { Some(Out::Direct(id, Err(refusal))) })).await.is_err() {
                            break 'read;
                        }
                        continue;
                    }
                    // A second `initialize` request is refused here, whether or not the first
                    // has been answered. Handed to the framework while the first still ran,
                    // both ran; the second's refusal put the framework back to "not
                    // initialized", and every request it handles (shutdown included) got
                    // -32002 for good (review BB).
                    let is_initialize = req.method() == "initialize" && req.id().is_some_and(|id| *id != Id::Null);
                    if is_initialize {
                        // One that failed may be sent again (LSP's `retry`); one running or
                        // answered may not.
                        if initialize_state.load(std::sync::atomic::Ordering::Acquire) != INIT_NONE {
                            let id = req.id().cloned().unwrap_or(Id::Null);
                            let refusal = Error {
                                code: tower_lsp_server::jsonrpc::ErrorCode::InvalidRequest,
                                message: "Invalid request: `initialize` was already received on this connection (LSP allows it once)".into(),
                                data: None,
                            };
                            if tasks.send(Box::pin(async move { Some(Out::Direct(id, Err(refusal))) })).await.is_err() {
                                break 'read;
                            }
                            continue;
                        }
                        initialize_state.store(INIT_RUNNING, std::sync::atomic::Ordering::Release);
                    }
                    let exit = req.method() == "exit";
                    let after_shutdown = shut_down;
                    // `exit` after `shutdown`: reading ends here, and the connection ends once
                    // the replies in flight are out, `shutdown`'s included. Handed to the
                    // framework, an `exit` read right behind `shutdown` (one write from the
                    // client, as `forge-lsp call` sends them) cancelled that `shutdown`
                    // before its handler ran: its reply was an error and a stdio server
                    // exited with code 1.
                    if exit && after_shutdown {
                        break 'read;
                    }
                    // A `shutdown` request (with an id): sent as a notification it is not one.
                    // Before `initialize` has succeeded the framework refuses it (-32002), and
                    // the connection goes on as one that was never shut down.
                    shut_down |= req.method() == "shutdown"
                        && req.id().is_some_and(|id| *id != Id::Null)
                        && service.inner().accepted_initialize();
                    if req.method() == "$/cancelRequest" && req.id().is_none() {
                        let handle = cancelled_key(&req)
                            .and_then(|k| taken.lock().unwrap_or_else(|p| p.into_inner()).remove(&k));
                        if let Some((h, shield)) = handle {
                            // A call that must run to the end is answered with its result.
                            if forge_tools::cancel::cancellable(&shield) {
                                h.abort();
                            }
                            continue;
                        }
                    }
                    let own = match req.id() {
                        Some(id) if !shut_down && *id != Id::Null => service.inner().take(req.method()),
                        _ => None,
                    };
                    let handling: Handling = if let Some(handler) = own {
                        let (_, id, params) = req.into_parts();
                        let id = id.unwrap_or(Id::Null);
                        let (handle, registration) = AbortHandle::new_pair();
                        let shield = Arc::new(std::sync::atomic::AtomicBool::new(false));
                        taken.lock().unwrap_or_else(|p| p.into_inner()).insert(id_key(&id), (handle, shield.clone()));
                        let run = Abortable::new(forge_tools::cancel::scope(shield, handler(params)), registration);
                        Box::pin(async move {
                            let reply = run.await.unwrap_or_else(|_| Err(Error::request_cancelled()));
                            Some(Out::Direct(id, reply))
                        })
                    } else {
                        let method = req.method().to_string();
                        let call = service.call(req);
                        let state = is_initialize.then(|| initialize_state.clone());
                        Box::pin(async move {
                            let r = call.await.unwrap_or_else(|e| {
                                tracing::debug!("request not handled: {e}");
                                None
                            });
                            if let Some(state) = state {
                                let ok = r.as_ref().is_some_and(|r| r.error().is_none());
                                state.store(
                                    if ok { INIT_DONE } else { INIT_NONE },
                                    std::sync::atomic::Ordering::Release,
                                );
                            }
                            r.map(|r| Out::Framework(explain_refusal(&method, after_shutdown, r)))
                        })
                    };
                    if tasks.send(handling).await.is_err() || exit {
                        break 'read;
                    }
                }
                Ok(Msg::Response(res)) => {
                    use futures_util::SinkExt;
                    if let Err(e) = responses.send(res).await {
                        tracing::warn!("cannot hand a client's response to the server: {e}");
                        break 'read;
                    }
                }
                Err(reply) => {
                    if !out.send(reply).await {
                        break 'read;
                    }
                }
            }
        }
        match reader.read(&mut chunk).await {
            Ok(0) => {
                if let Some(what) = dec.unfinished() {
                    tracing::warn!("the client's input ended inside a message: {what}; it is dropped");
                }
                break;
            }
            Ok(n) => dec.push(&chunk[..n]),
            Err(e) => {
                tracing::warn!("connection read failed: {e}");
                break;
            }
        }
    }
}

/// States of a connection's `initialize` (`read_client`).
const INIT_NONE: u8 = 0;
const INIT_RUNNING: u8 = 1;
const INIT_DONE: u8 = 2;

/// The framework refuses a second `initialize` and every request after `shutdown` with a
/// bare "Invalid request": say which rule the request broke (same code, -32600).
fn explain_refusal(method: &str, after_shutdown: bool, r: Response) -> Response {
    let bare = r.error().is_some_and(|e| {
        e.code == tower_lsp_server::jsonrpc::ErrorCode::InvalidRequest
            && e.data.is_none()
            && e.message == tower_lsp_server::jsonrpc::ErrorCode::InvalidRequest.description()
    });
    let message = match () {
        _ if !bare => return r,
        _ if after_shutdown => {
            format!("Invalid request: the server has received `shutdown` and answers no more requests ({method}); send `exit`")
        }
        _ if method == "initialize" => {
            "Invalid request: `initialize` was already received on this connection (LSP allows it once)".to_string()
        }
        _ => return r,
    };
    let (id, _) = r.into_parts();
    let mut error = Error::invalid_request();
    error.message = message.into();
    Response::from_error(id, error)
}

/// Serves one LSP connection over `reader`/`writer` until `exit` or end of input. Each
/// frame is parsed once and handed to the framework's service directly (no second parse,
/// no in-memory pipe); `out` carries everything written, `outbox` being its sender.
/// `input_closed` is set once nothing more is read from the client (`exit`, end of input).
pub async fn serve<S, R, W>(
    reader: R,
    writer: W,
    service: LspService<S>,
    socket: ClientSocket,
    outbox: Outbox,
    mut out_rx: mpsc::Receiver<Frame>,
    input_closed: tokio::sync::watch::Sender<bool>,
) where
    S: LanguageServer + Direct,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    use futures_util::StreamExt;
    let in_flight: InFlight = Arc::default();
    let taken: Taken = Arc::default();

    // Four parts of one task (as the framework's own loop is): a message moves between
    // them without waking another thread.
    //
    // Writer: an empty frame asks it to flush and stop (the outbox lives on in the
    // server's state, so the channel alone would never close). Once the client is done
    // (`exit` read, or end of input), a write that makes no progress for
    // [`CLOSING_FLUSH`] ends the writer: a client that sent `exit` and left its end of the
    // pipe open without reading kept a server with queued diagnostics blocked in a write
    // for ever. Until then a slow reader is waited for.
    let (closed_tx, mut closed) = tokio::sync::watch::channel(false);
    let write = async move {
        let mut writer = writer;
        while let Some(f) = out_rx.recv().await {
            if f.is_empty() {
                break;
            }
            // Flush when nothing else is queued.
            let flush = out_rx.is_empty();
            let put = async {
                writer.write_all(&f).await?;
                if flush {
                    writer.flush().await?;
                }
                std::io::Result::Ok(())
            };
            let stuck = async {
                let _ = closed.wait_for(|c| *c).await;
                tokio::time::sleep(CLOSING_FLUSH).await;
            };
            tokio::select! {
                r = put => if r.is_err() { break },
                _ = stuck => {
                    tracing::warn!(
                        "the client stopped reading: {} queued bytes not sent {CLOSING_FLUSH:?} after it was done; closing without them",
                        f.len()
                    );
                    return;
                }
            }
        }
        let _ = writer.flush().await;
    };
    let (mut requests, responses) = socket.split();
    let stop = tokio::sync::Notify::new();
    // The server's own requests and notifications to the client, until the handling ended.
    let to_client = {
        let out = outbox.clone();
        let stop = &stop;
        async move {
            loop {
                tokio::select! {
                    req = requests.next() => {
                        let Some(req) = req else { return };
                        let body = serde_json::to_vec(&req).unwrap_or_default();
                        if !out.send_body(&body).await {
                            return;
                        }
                    }
                    _ = stop.notified() => return,
                }
            }
        }
    };
    // Handling, CONCURRENCY at a time; each reply frees its id. When the reader is done
    // and every reply is out, the other parts stop.
    let (tasks_tx, mut tasks_rx) = mpsc::channel::<Handling>(100);
    let handle = {
        let out = outbox.clone();
        let in_flight = in_flight.clone();
        let taken = taken.clone();
        let stop = &stop;
        async move {
            let incoming = futures_util::stream::poll_fn(move |cx| tasks_rx.poll_recv(cx));
            let mut replies = incoming.buffer_unordered(CONCURRENCY);
            while let Some(reply) = replies.next().await {
                let Some(res) = reply else { continue };
                let key = id_key(res.id());
                if matches!(res, Out::Direct(..)) {
                    taken.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                }
                let frame = res.into_frame();
                in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                if !out.send(frame).await {
                    break;
                }
            }
            stop.notify_one();
            let _ = out.send(Vec::new().into()).await;
        }
    };
    let to_answer = outbox.clone();
    let read = async move {
        read_client(reader, service, responses, tasks_tx, to_answer, in_flight, taken).await;
        let _ = closed_tx.send(true);
        // The client is gone or done: calls that would outlive it (plugin tools) stop.
        let _ = input_closed.send(true);
    };
    drop(outbox);
    tokio::join!(read, handle, to_client, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queued output is bounded in bytes: a frame waits while the frames before it hold
    /// the budget, and goes out once one of them was written (dropped).
    #[tokio::test]
    async fn queued_output_is_bounded_in_bytes() {
        let (out, mut rx) = outbox();
        let big = || Frame::from(vec![b'x'; 20 * 1024 * 1024]);
        assert!(out.send(big()).await);
        let second = tokio::spawn({
            let out = out.clone();
            async move { out.send(big()).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "40 MiB queued with a budget of 32");
        let first = rx.recv().await.unwrap();
        drop(first);
        assert!(second.await.unwrap());
        // A frame larger than the whole budget still goes out, alone.
        drop(rx.recv().await.unwrap());
        assert!(out.send(Frame::from(vec![b'y'; 40 * 1024 * 1024])).await);
        assert_eq!(rx.recv().await.unwrap().len(), 40 * 1024 * 1024);
    }

    fn check(body: &[u8]) -> String {
        match validate(body.to_vec()) {
            Incoming::Message(_) => "msg:".into(),
            Incoming::Reply(f) => format!("reply:{}", String::from_utf8_lossy(&f)),
            Incoming::Skip => "skip".into(),
        }
    }

    #[test]
    fn a_change_with_an_unreadable_range_is_told_apart() {
        let range = |l: Value| json!({ "start": { "line": l, "character": 0 }, "end": { "line": 0, "character": 0 } });
        // (contentChanges, bad?)
        let table = [
            (json!([{ "text": "all" }]), false),
            (json!([{ "range": null, "rangeLength": null, "text": "all" }]), false),
            (json!([{ "range": range(json!(1)), "text": "x" }]), false),
            (json!([{ "range": range(json!(1)), "rangeLength": 3, "text": "x" }]), false),
            (json!([{ "range": range(json!(-1)), "text": "x" }]), true),
            (json!([{ "text": "all" }, { "range": range(json!("one")), "text": "x" }]), true),
            (json!([{ "range": { "start": { "line": 0 } }, "text": "x" }]), true),
            (json!([{ "range": range(json!(1)), "rangeLength": -2, "text": "x" }]), true),
        ];
        for (changes, bad) in table {
            let params = json!({ "textDocument": { "uri": "forge://x", "version": 2 }, "contentChanges": changes });
            assert_eq!(bad_change_range(Some(&params)).is_some(), bad, "{changes}");
        }
    }

    #[test]
    fn shutdown_is_given_to_the_framework_without_params_or_refused() {
        let req = |method: &'static str, id: Option<i64>, params: Option<Value>| {
            let mut b = Request::build(method);
            if let Some(id) = id {
                b = b.id(id);
            }
            if let Some(p) = params {
                b = b.params(p);
            }
            b.finish()
        };
        for (given, passed) in [
            (req("shutdown", Some(1), None), Some(req("shutdown", Some(1), None))),
            (req("shutdown", Some(1), Some(Value::Null)), Some(req("shutdown", Some(1), None))),
            (req("shutdown", Some(1), Some(json!({}))), Some(req("shutdown", Some(1), None))),
            (req("shutdown", Some(1), Some(json!([]))), Some(req("shutdown", Some(1), None))),
            (req("shutdown", Some(1), Some(json!({ "force": true }))), None),
            (req("shutdown", Some(1), Some(json!([1]))), None),
            // Not a request: the framework's business.
            (
                req("shutdown", None, Some(json!({ "force": true }))),
                Some(req("shutdown", None, Some(json!({ "force": true })))),
            ),
            (req("exit", None, Some(json!({}))), Some(req("exit", None, Some(json!({}))))),
            (req("forge/x", Some(2), Some(json!({ "a": 1 }))), Some(req("forge/x", Some(2), Some(json!({ "a": 1 }))))),
        ] {
            let shown = format!("{given:?}");
            match (shutdown_params(given), passed) {
                (Ok(got), Some(want)) => assert_eq!(format!("{got:?}"), format!("{want:?}"), "{shown}"),
                (Err(_), None) => {}
                (got, want) => {
                    panic!("{shown}: got {:?}, want {want:?}", got.map(|r| format!("{r:?}")).map_err(|_| "a refusal"))
                }
            }
        }
    }

    #[test]
    fn bad_bodies_are_answered() {
        assert!(check(b"{bad}").contains("-32700"));
        assert!(check(b"\xff\xfe\xfd").contains("UTF-8"));
        assert!(check(b"[]").contains("-32600"));
        assert!(check(b"{\"jsonrpc\":1.0").contains("-32700"));
        assert!(check(br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#).starts_with("msg:"));
        let r = check(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":"\ud800"}}"#);
        assert!(r.contains("-32600") && r.contains("\"id\":7") && r.contains("surrogate"), "{r}");
        assert_eq!(check(br#"{"jsonrpc":"2.0","method":"x","params":{"a":"\udc00"}}"#), "skip");
    }

    #[test]
    fn a_direct_reply_is_one_well_formed_frame() {
        let body = |json: &[u8]| reply_with(0, |out| out.extend_from_slice(json));
        // An id too long for the room kept in front of the result.
        let long = "i".repeat(FRONT);
        for (id, reply, want) in [
            (Id::Number(7), body(br#"{"text":"a\nb"}"#), json!({"jsonrpc":"2.0","id":7,"result":{"text":"a\nb"}})),
            (Id::String("é".into()), body(b"null"), json!({"jsonrpc":"2.0","id":"é","result":null})),
            (Id::String(long.clone()), body(b"[1]"), json!({"jsonrpc":"2.0","id":long,"result":[1]})),
            (
                Id::Number(1),
                Err(Error::request_cancelled()),
                json!({"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"Canceled"}}),
            ),
        ] {
            let f = Out::Direct(id, reply).into_frame();
            let mut dec = Decoder::new();
            dec.push(&f);
            let Some(Event::Frame(body)) = dec.next_event() else { panic!("not one frame: {f:?}") };
            assert!(dec.next_event().is_none(), "one frame only");
            assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), want);
        }
    }

    #[test]
    fn a_duplicate_in_flight_id_is_refused_until_answered() {
        let set = InFlight::default();
        let req: Request = serde_json::from_slice(br#"{"jsonrpc":"2.0","id":"a","method":"x"}"#).unwrap();
        assert!(admit(&req, &set).is_none());
        let Some(f) = admit(&req, &set) else { panic!("duplicate accepted") };
        let f = String::from_utf8_lossy(&f);
        assert!(f.contains("-32600") && f.contains("already in use") && f.contains("\"id\":\"a\""), "{f}");
        set.lock().unwrap().remove("\"a\"");
        assert!(admit(&req, &set).is_none());
    }
}
