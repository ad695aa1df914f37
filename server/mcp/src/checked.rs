//! Standard input, line by line, with requests no JSON parser takes turned into requests
//! the handler refuses ([`Checked`]).
//!
//! The SDK's stdio transport drops a line it cannot parse, without a word: a request with a
//! lone UTF-16 surrogate escape (which JavaScript's `JSON.stringify` writes for half an
//! emoji in a model's text), bytes that are not UTF-8, or nesting deeper than 128 levels
//! was never answered, and its client waited for ever (review YA). Such a line whose `id`
//! can be read ([`forge_protocol::framing::unreadable_request`]) is handed on as a request
//! of [`INVALID_MESSAGE`] with that id, which the handler answers with -32600 and the
//! reason; the LSP side answers the same input so. Every other line passes unchanged.
//!
//! Invariant: bytes are handed on only as whole lines (or, at the end of the input, what
//! is left), each checked once; a line longer than [`MAX_LINE`] is handed on unchecked as
//! it comes, for the transport to discard, so what is held stays bounded.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The method a request no parser takes is handed to the handler as (a name no client
/// sends); its params carry `message`, the reason.
pub const INVALID_MESSAGE: &str = "forge-lsp/invalid-message";

/// The longest line checked, its line break included (the transport's own limit: a longer
/// one it drops).
pub const MAX_LINE: usize = forge_protocol::framing::MAX_MESSAGE;

/// The reason a stand-in carries.
pub fn reason(params: Option<&serde_json::Value>) -> String {
    params.and_then(|p| p.get("message")).and_then(serde_json::Value::as_str).unwrap_or("Invalid Request").to_string()
}

/// [`AsyncRead`] over `R` that checks each line (module docs).
pub struct Checked<R> {
    inner: R,
    /// Read and not yet handed on: the start of a line.
    pending: Vec<u8>,
    /// Ready to hand on, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    /// Inside a line over [`MAX_LINE`]: handed on unchecked up to its end.
    passing: bool,
    /// How much of `pending` is known to hold no line break (each byte is looked at once:
    /// searching from its start at every read made a long line's cost its length squared,
    /// review YE).
    scanned: usize,
    eof: bool,
}

impl<R> Checked<R> {
    pub fn new(inner: R) -> Self {
        Checked { inner, pending: vec![], out: vec![], out_at: 0, passing: false, scanned: 0, eof: false }
    }

    /// Moves what `pending` holds of whole lines (all of it at the end of the input) to
    /// `out`, each checked.
    fn take_lines(&mut self) {
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(n) = self.pending[from..].iter().position(|&b| b == b'\n') {
            let end = from + n + 1;
            from = end;
            if self.passing {
                self.out.extend_from_slice(&self.pending[start..end]);
                self.passing = false;
            } else {
                push_checked(&mut self.out, &self.pending[start..end]);
            }
            start = end;
        }
        let rest = self.pending.len() - start;
        if self.eof || self.passing || rest >= MAX_LINE {
            // The end of the input, or a line too long to check: handed on as it is.
            self.passing = self.passing || (!self.eof && rest >= MAX_LINE);
            self.out.extend_from_slice(&self.pending[start..]);
            self.pending.clear();
        } else {
            self.pending.drain(..start);
        }
        self.scanned = self.pending.len();
    }
}

/// Appends `line` to `out`, or the request that stands for it when no parser takes it.
fn push_checked(out: &mut Vec<u8>, line: &[u8]) {
    // One the transport drops for its length is left to it, as it is.
    if line.len() > MAX_LINE {
        return out.extend_from_slice(line);
    }
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    match forge_protocol::framing::unreadable_request(body) {
        Some((id, message)) => {
            tracing::warn!("a request no JSON parser takes, answered as such: {message}");
            let stand_in = serde_json::json!({
                "jsonrpc": "2.0", "id": id, "method": INVALID_MESSAGE, "params": { "message": message },
            });
            out.extend_from_slice(stand_in.to_string().as_bytes());
            out.push(b'\n');
        }
        None => out.extend_from_slice(line),
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Checked<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.out_at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_at);
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                if this.out_at == this.out.len() {
                    this.out.clear();
                    this.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 64 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let got = rb.filled();
                    if got.is_empty() {
                        this.eof = true;
                    } else if this.passing {
                        // A long line handed on as it comes, up to its end.
                        match got.iter().position(|&b| b == b'\n') {
                            Some(n) => {
                                this.out.extend_from_slice(&got[..=n]);
                                this.passing = false;
                                this.pending.extend_from_slice(&got[n + 1..]);
                            }
                            None => this.out.extend_from_slice(got),
                        }
                    } else {
                        this.pending.extend_from_slice(got);
                    }
                    this.take_lines();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn through(input: &[u8], chunk: usize) -> Vec<u8> {
        let (mut w, r) = tokio::io::duplex(1 << 20);
        let input = input.to_vec();
        let feed = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in input.chunks(chunk) {
                w.write_all(c).await.unwrap();
            }
        });
        let mut out = vec![];
        Checked::new(r).read_to_end(&mut out).await.unwrap();
        feed.await.unwrap();
        out
    }

    #[tokio::test]
    async fn lines_pass_unchanged_and_unreadable_requests_become_stand_ins() {
        let good = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{not json\n\n";
        let bad = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"a\":\"\\ud83d\"}}\r\n";
        let mut input = good.to_vec();
        input.extend_from_slice(bad);
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}");
        for chunk in [1, 3, 64, 1 << 16] {
            let out = through(&input, chunk).await;
            let text = String::from_utf8(out).unwrap();
            let lines: Vec<&str> = text.split('\n').collect();
            assert_eq!(&lines[..3], ["{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", "{not json", ""], "{chunk}");
            let stand_in: serde_json::Value = serde_json::from_str(lines[3]).unwrap();
            assert_eq!(stand_in["id"], 7);
            assert_eq!(stand_in["method"], INVALID_MESSAGE);
            assert!(stand_in["params"]["message"].as_str().unwrap().contains("surrogate"), "{stand_in}");
            assert_eq!(
                lines[4], "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}",
                "the last line, without a break"
            );
            assert_eq!(lines.len(), 5);
        }
    }
}
