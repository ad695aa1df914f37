//! A minimal blocking LSP client over a Unix socket, for `forge-lsp call`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

pub struct LspClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: i64,
}

impl LspClient {
    pub fn connect(path: &Path) -> std::io::Result<LspClient> {
        let s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(660)))?;
        Ok(LspClient { reader: BufReader::new(s.try_clone()?), writer: s, next_id: 1 })
    }

    fn send(&mut self, v: &Value) -> std::io::Result<()> {
        let body = v.to_string();
        write!(self.writer, "Content-Length: {}\r\n\r\n{}", body.len(), body)?;
        self.writer.flush()
    }

    fn read(&mut self) -> std::io::Result<Value> {
        let mut len = None;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "server closed the connection"));
            }
            let t = line.trim_end();
            if t.is_empty() {
                if len.is_some() {
                    break;
                }
                continue;
            }
            if let Some((k, v)) = t.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse::<usize>().ok();
                }
            }
        }
        let mut buf = vec![0; len.unwrap_or(0)];
        self.reader.read_exact(&mut buf)?;
        serde_json::from_slice(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    pub fn notify(&mut self, method: &str, params: Value) -> std::io::Result<()> {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
    }

    /// Sends a request and returns its `result` or `error` object.
    pub fn request(&mut self, method: &str, params: Value) -> std::io::Result<Result<Value, Value>> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        loop {
            let msg = self.read()?;
            if msg.get("method").is_some() {
                // A request from the server (e.g. progress creation): answer with null.
                if let Some(rid) = msg.get("id") {
                    let rid = rid.clone();
                    self.send(&json!({ "jsonrpc": "2.0", "id": rid, "result": null }))?;
                }
                continue;
            }
            if msg.get("id") == Some(&json!(id)) {
                if let Some(e) = msg.get("error") {
                    return Ok(Err(e.clone()));
                }
                return Ok(Ok(msg.get("result").cloned().unwrap_or(Value::Null)));
            }
        }
    }
}
