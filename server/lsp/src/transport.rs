//! A validating framing layer in front of tower-lsp-server.
//!
//! tower-lsp-server reads frames with tokio-util's `FramedRead`, which ends the stream
//! after the first decode error (`has_errored` → `None`): one frame with invalid UTF-8,
//! malformed JSON or a body that is not a JSON-RPC message closes the whole connection.
//! PROTOCOL.md §8 requires the connection to keep working. So every frame is read and
//! validated here first: bad ones are answered with the JSON-RPC error LSP prescribes
//! (-32700 parse error, -32600 invalid request) and dropped, oversized ones (over 64 MiB)
//! are skipped without buffering, and only well-formed messages reach the framework,
//! through an in-memory pipe. The framework's output and our error responses are merged
//! frame by frame onto the real writer.

use std::io;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tower_lsp_server::jsonrpc::{Request, Response};
use tower_lsp_server::{ClientSocket, LanguageServer, LspService, Server};

/// Largest accepted message body.
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;
const MAX_HEADER_LINE: usize = 8 * 1024;

/// One complete outgoing frame.
type Frame = Vec<u8>;

fn frame(body: &[u8]) -> Frame {
    let mut f = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    f.extend_from_slice(body);
    f
}

fn error_frame(id: Value, code: i64, message: &str) -> Frame {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    frame(body.to_string().as_bytes())
}

/// The outcome of reading one frame from the client.
enum Incoming {
    /// A valid message body, to forward.
    Message(Vec<u8>),
    /// An error response to send back; keep reading.
    Reply(Frame),
    /// Something unanswerable was skipped; keep reading.
    Skip,
    Eof,
}

async fn read_header_line<R: AsyncRead + Unpin>(r: &mut BufReader<R>, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.clear();
    // Bounded line read: a header line longer than MAX_HEADER_LINE is cut (and invalid).
    let mut total = 0;
    loop {
        let available = r.fill_buf().await?;
        if available.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let n = chunk.len();
        if buf.len() < MAX_HEADER_LINE {
            buf.extend_from_slice(&chunk[..n.min(MAX_HEADER_LINE - buf.len())]);
        }
        r.consume(n);
        total += n;
        if done {
            return Ok(total);
        }
    }
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> io::Result<Incoming> {
    read_frame_checked(r, true).await
}

/// Reads one frame; `check` validates its body (client input), else it is passed on as
/// it is (the framework's own output, which is well formed).
async fn read_frame_checked<R: AsyncRead + Unpin>(r: &mut BufReader<R>, check: bool) -> io::Result<Incoming> {
    let mut line = Vec::new();
    let mut content_length: Option<Result<usize, String>> = None;
    let mut saw_header = false;
    loop {
        let n = read_header_line(r, &mut line).await?;
        if n == 0 {
            return Ok(Incoming::Eof);
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if saw_header {
                break;
            }
            continue; // stray blank line between frames
        }
        saw_header = true;
        match text.split_once(':') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                content_length = Some(value.trim().parse::<usize>().map_err(|_| value.trim().to_string()));
            }
            Some(_) => {} // Content-Type and unknown headers are ignored
            None => {
                // Not a header: the stream is out of sync. Answer once and resynchronise
                // at the next header block.
                return Ok(Incoming::Reply(error_frame(
                    Value::Null,
                    -32700,
                    &format!(
                        "Parse error: expected an LSP header (`Content-Length: N`), got {:?}",
                        text.chars().take(60).collect::<String>()
                    ),
                )));
            }
        }
    }
    let len = match content_length {
        None => {
            return Ok(Incoming::Reply(error_frame(Value::Null, -32700, "Parse error: missing Content-Length header")))
        }
        Some(Err(v)) => {
            return Ok(Incoming::Reply(error_frame(
                Value::Null,
                -32700,
                &format!("Parse error: invalid Content-Length {v:?}"),
            )))
        }
        Some(Ok(n)) => n,
    };
    if len > MAX_MESSAGE {
        let skipped = tokio::io::copy(&mut r.take(len as u64), &mut tokio::io::sink()).await?;
        if (skipped as usize) < len {
            return Ok(Incoming::Eof);
        }
        return Ok(Incoming::Reply(error_frame(
            Value::Null,
            -32600,
            &format!("Invalid Request: message of {len} bytes exceeds the limit of {MAX_MESSAGE} bytes"),
        )));
    }
    let mut body = vec![0u8; len];
    if let Err(e) = r.read_exact(&mut body).await {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            return Ok(Incoming::Eof);
        }
        return Err(e);
    }
    Ok(if check { validate(body) } else { Incoming::Message(body) })
}

fn validate(body: Vec<u8>) -> Incoming {
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
        Err(e) => return Incoming::Reply(error_frame(Value::Null, -32700, &format!("Parse error: {e}"))),
    };
    let id = value.get("id").filter(|i| i.is_string() || i.is_i64()).cloned().unwrap_or(Value::Null);
    if !value.is_object() {
        return Incoming::Reply(error_frame(Value::Null, -32600, "Invalid Request: a message must be a JSON object"));
    }
    if value.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Reply(error_frame(id, -32600, "Invalid Request: `jsonrpc` must be \"2.0\""));
    }
    let is_response = value.get("method").is_none() && (value.get("result").is_some() || value.get("error").is_some());
    let dollar_request = value
        .get("method")
        .and_then(Value::as_str)
        .filter(|m| m.starts_with("$/") && value.get("id").is_some_and(|i| !i.is_null()))
        .map(str::to_string);
    let ok = if is_response {
        serde_json::from_value::<Response>(value).is_ok()
    } else {
        value.get("method").is_some_and(Value::is_string) && serde_json::from_value::<Request>(value).is_ok()
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
    // tower-lsp-server swallows the MethodNotFound answer to unknown `$/` requests, leaving
    // them unanswered; LSP requires the error (notifications may be ignored).
    if let Some(m) = dollar_request {
        return Incoming::Reply(error_frame(id, -32601, &format!("Method not found: {m}")));
    }
    Incoming::Message(body)
}

/// Splits the framework's output (always well formed) into frames.
async fn forward_frames<R: AsyncRead + Unpin>(r: R, out: mpsc::Sender<Frame>) {
    let mut r = BufReader::new(r);
    loop {
        match read_frame_checked(&mut r, false).await {
            Ok(Incoming::Message(body)) => {
                if out.send(frame(&body)).await.is_err() {
                    return;
                }
            }
            Ok(Incoming::Eof) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Serves one LSP connection over `reader`/`writer` until `exit` or end of input.
pub async fn serve<S, R, W>(reader: R, writer: W, service: LspService<S>, socket: ClientSocket)
where
    S: LanguageServer,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_framework, framework_in) = tokio::io::duplex(1 << 20);
    let (framework_out, from_framework) = tokio::io::duplex(1 << 20);
    let (out_tx, mut out_rx) = mpsc::channel::<Frame>(256);

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
    let forwarder = tokio::spawn(forward_frames(from_framework, out_tx.clone()));

    let reader_task = tokio::spawn(async move {
        let mut r = BufReader::with_capacity(64 * 1024, reader);
        loop {
            match read_frame(&mut r).await {
                Ok(Incoming::Message(body)) => {
                    let is_exit = serde_json::from_slice::<Value>(&body)
                        .ok()
                        .and_then(|v| v.get("method").and_then(Value::as_str).map(|m| m == "exit"))
                        .unwrap_or(false);
                    if to_framework.write_all(&frame(&body)).await.is_err() {
                        break;
                    }
                    if is_exit {
                        break;
                    }
                }
                Ok(Incoming::Reply(f)) => {
                    if out_tx.send(f).await.is_err() {
                        break;
                    }
                }
                Ok(Incoming::Skip) => {}
                Ok(Incoming::Eof) => break,
                Err(e) => {
                    tracing::warn!("connection read failed: {e}");
                    break;
                }
            }
        }
        // Closing the pipe ends the framework's read loop.
        let _ = to_framework.shutdown().await;
    });

    Server::new(framework_in, framework_out, socket).serve(service).await;
    reader_task.abort();
    let _ = forwarder.await;
    let _ = writer_task.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn one(input: &[u8]) -> Vec<String> {
        let mut r = BufReader::new(input);
        let mut out = vec![];
        loop {
            match read_frame(&mut r).await.unwrap() {
                Incoming::Message(b) => out.push(format!("msg:{}", String::from_utf8(b).unwrap())),
                Incoming::Reply(f) => out.push(format!("reply:{}", String::from_utf8_lossy(&f))),
                Incoming::Skip => out.push("skip".into()),
                Incoming::Eof => return out,
            }
        }
    }

    #[tokio::test]
    async fn bad_frames_are_answered_and_the_stream_continues() {
        let good = br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#;
        let mut input = Vec::new();
        input.extend_from_slice(b"Content-Length: 5\r\n\r\n{bad}");
        input.extend_from_slice(b"Content-Length: 3\r\n\r\n\xff\xfe\xfd");
        input.extend_from_slice(b"Content-Length: 2\r\n\r\n[]");
        input.extend_from_slice(b"Content-Length: 14\r\n\r\n{\"jsonrpc\":1.0");
        input.extend_from_slice(format!("Content-Length: {}\r\n\r\n", good.len()).as_bytes());
        input.extend_from_slice(good);
        let out = one(&input).await;
        assert_eq!(out.len(), 5, "{out:?}");
        assert!(out[0].contains("-32700"));
        assert!(out[1].contains("-32700") && out[1].contains("UTF-8"));
        assert!(out[2].contains("-32600"));
        assert!(out[3].contains("-32700"));
        assert!(out[4].starts_with("msg:"));
    }

    #[tokio::test]
    async fn oversized_is_skipped() {
        let mut input = format!("Content-Length: {}\r\n\r\n", MAX_MESSAGE + 1).into_bytes();
        input.extend(std::iter::repeat_n(b' ', MAX_MESSAGE + 1));
        input.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
        let out = one(&input).await;
        assert!(out[0].contains("-32600") && out[0].contains("exceeds"), "{}", &out[0][..100.min(out[0].len())]);
        assert!(out[1].contains("-32600"), "{out:?}");
    }
}
