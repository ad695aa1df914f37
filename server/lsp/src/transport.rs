//! A validating framing layer in front of tower-lsp-server.
//!
//! tower-lsp-server reads frames with tokio-util's `FramedRead`, which ends the stream
//! after the first decode error (`has_errored` → `None`): one frame with invalid UTF-8,
//! malformed JSON or a body that is not a JSON-RPC message closes the whole connection.
//! PROTOCOL.md §8 requires the connection to keep working. So every frame is read here
//! first with the shared decoder ([`forge_protocol::framing`]) and validated: bad ones are
//! answered with the JSON-RPC error LSP prescribes and dropped, and only well-formed
//! messages reach the framework, through an in-memory pipe. The framework's output and
//! our error responses are merged frame by frame onto the real writer.
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
//! - a body that is not UTF-8 or not JSON: -32700, id null;
//! - JSON that is not a request: -32600 with the request's id where it has one;
//! - a lone UTF-16 surrogate escape (`"\ud800"`): JSON's grammar allows it but it is no
//!   Unicode string, so the message is not a valid request: -32600 with its id
//!   (a notification is dropped and logged: notifications are never answered);
//! - a request id already in use by an unanswered request: -32600 with that id, saying so.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use forge_protocol::framing::{self, Decoder, Event};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tower_lsp_server::jsonrpc::{Request, Response};
use tower_lsp_server::{ClientSocket, LanguageServer, LspService, Server};

/// Largest accepted message body.
pub const MAX_MESSAGE: usize = framing::MAX_MESSAGE;
/// Largest announced body that is read and discarded; beyond it the connection closes.
pub const MAX_SKIP: u64 = 1 << 30;
const READ_CHUNK: usize = 64 * 1024;

/// One complete outgoing frame.
type Frame = Vec<u8>;

fn error_frame(id: Value, code: i64, message: &str) -> Frame {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    framing::encode(body.to_string().as_bytes())
}

/// Ids of the client's requests the framework has not answered yet (as JSON text).
type InFlight = Arc<Mutex<HashSet<String>>>;

/// What to do with one frame from the client.
#[derive(Debug)]
enum Incoming {
    /// A valid message body, to forward; `exit` says it is the `exit` notification.
    Message { body: Vec<u8>, exit: bool },
    /// An error response to send back; keep reading.
    Reply(Frame),
    /// Something unanswerable was skipped; keep reading.
    Skip,
}

fn validate(body: Vec<u8>, in_flight: &InFlight) -> Incoming {
    if body.is_empty() {
        return Incoming::Skip;
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
    let method = value.get("method").and_then(Value::as_str).map(str::to_string);
    let is_response = value.get("method").is_none() && (value.get("result").is_some() || value.get("error").is_some());
    let is_request = method.is_some() && value.get("id").is_some_and(|i| !i.is_null());
    let ok = if is_response {
        serde_json::from_value::<Response>(value).is_ok()
    } else {
        method.is_some() && serde_json::from_value::<Request>(value).is_ok()
    };
    if !ok {
        if is_response {
            return Incoming::Skip; // a malformed response to us: nothing to answer
        }
        return Incoming::Reply(error_frame(
            id,
            -32600,
            "Invalid Request: not a valid JSON-RPC request or notification (check `method`, `id` and `params`)",
        ));
    }
    let method = method.unwrap_or_default();
    // tower-lsp-server swallows the MethodNotFound answer to unknown `$/` requests, leaving
    // them unanswered; LSP requires the error (notifications may be ignored).
    if is_request && method.starts_with("$/") {
        return Incoming::Reply(error_frame(id, -32601, &format!("Method not found: {method}")));
    }
    if is_request {
        let key = id.to_string();
        let mut set = in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if !set.insert(key) {
            return Incoming::Reply(error_frame(
                id.clone(),
                -32600,
                &format!("Invalid Request: request id {id} is already in use by a request that has not been answered yet; use a fresh id"),
            ));
        }
    }
    Incoming::Message { body, exit: method == "exit" }
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

/// The head of a message the framework sends: its id, and whether it is a response.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<serde::de::IgnoredAny>,
}

/// Splits the framework's output (always well formed) into frames; a response frees
/// its request id.
async fn forward_frames<R: AsyncRead + Unpin>(mut r: R, out: mpsc::Sender<Frame>, in_flight: InFlight) {
    let mut dec = Decoder::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        while let Some(ev) = dec.next_event() {
            let Event::Frame(body) = ev else { continue };
            if let Ok(Head { id: Some(id), method: None }) = serde_json::from_slice::<Head>(&body) {
                in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&id.to_string());
            }
            if out.send(framing::encode(&body)).await.is_err() {
                return;
            }
        }
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => dec.push(&chunk[..n]),
        }
    }
}

/// Reads the client's frames, answers bad ones and forwards good ones to the framework
/// until `exit`, end of input, or an unskippable oversized message.
async fn read_client<R, W>(mut reader: R, mut to_framework: W, out_tx: mpsc::Sender<Frame>, in_flight: InFlight)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut dec = Decoder::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    'read: loop {
        while let Some(ev) = dec.next_event() {
            let incoming = match ev {
                Event::Frame(body) => validate(body, &in_flight),
                Event::TooLarge { length } => {
                    let (code, message) = Event::TooLarge { length }.error().unwrap_or_default();
                    if out_tx.send(error_frame(Value::Null, code, &message)).await.is_err() {
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
                    Incoming::Reply(error_frame(Value::Null, code, &message))
                }
            };
            match incoming {
                Incoming::Message { body, exit } => {
                    if to_framework.write_all(&framing::encode(&body)).await.is_err() {
                        break 'read;
                    }
                    if exit {
                        break 'read;
                    }
                }
                Incoming::Reply(f) => {
                    if out_tx.send(f).await.is_err() {
                        break 'read;
                    }
                }
                Incoming::Skip => {}
            }
        }
        match reader.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => dec.push(&chunk[..n]),
            Err(e) => {
                tracing::warn!("connection read failed: {e}");
                break;
            }
        }
    }
    // Closing the pipe ends the framework's read loop.
    let _ = to_framework.shutdown().await;
}

/// Serves one LSP connection over `reader`/`writer` until `exit` or end of input.
pub async fn serve<S, R, W>(reader: R, writer: W, service: LspService<S>, socket: ClientSocket)
where
    S: LanguageServer,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (to_framework, framework_in) = tokio::io::duplex(1 << 20);
    let (framework_out, from_framework) = tokio::io::duplex(1 << 20);
    let (out_tx, mut out_rx) = mpsc::channel::<Frame>(256);
    let in_flight: InFlight = Arc::default();

    let writer_task = tokio::spawn(async move {
        let mut writer = writer;
        while let Some(f) = out_rx.recv().await {
            if writer.write_all(&f).await.is_err() {
                break;
            }
            // Flush when nothing else is queued.
            if out_rx.is_empty() && writer.flush().await.is_err() {
                break;
            }
        }
        let _ = writer.flush().await;
    });
    let forwarder = tokio::spawn(forward_frames(from_framework, out_tx.clone(), in_flight.clone()));
    let reader_task = tokio::spawn(read_client(reader, to_framework, out_tx, in_flight));

    Server::new(framework_in, framework_out, socket).serve(service).await;
    reader_task.abort();
    let _ = forwarder.await;
    let _ = writer_task.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: &[u8]) -> String {
        match validate(body.to_vec(), &InFlight::default()) {
            Incoming::Message { body, .. } => format!("msg:{}", String::from_utf8_lossy(&body)),
            Incoming::Reply(f) => format!("reply:{}", String::from_utf8_lossy(&f)),
            Incoming::Skip => "skip".into(),
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
    fn a_duplicate_in_flight_id_is_refused_until_answered() {
        let set = InFlight::default();
        let req = br#"{"jsonrpc":"2.0","id":"a","method":"x"}"#;
        assert!(matches!(validate(req.to_vec(), &set), Incoming::Message { .. }));
        let Incoming::Reply(f) = validate(req.to_vec(), &set) else { panic!("duplicate accepted") };
        let f = String::from_utf8_lossy(&f);
        assert!(f.contains("-32600") && f.contains("already in use") && f.contains("\"id\":\"a\""), "{f}");
        set.lock().unwrap().remove("\"a\"");
        assert!(matches!(validate(req.to_vec(), &set), Incoming::Message { .. }));
    }
}
