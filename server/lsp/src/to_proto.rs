//! Building LSP values from our own: diagnostics as the JSON the client receives, as
//! values (plan warnings) or straight as bytes (findings, [`publish_diagnostics`]).
//! A leaf: it imports no other module of this crate.

use serde_json::{json, Value};

/// Diagnostics JSON helper.
pub fn diagnostic(
    line: u32,
    start: u32,
    end: u32,
    severity: u8,
    message: &str,
    code: Option<Value>,
    data: Option<Value>,
) -> Value {
    let mut d = json!({
        "range": { "start": { "line": line, "character": start }, "end": { "line": line, "character": end } },
        "severity": severity,
        "source": "forge",
        "message": message,
    });
    if let Some(c) = code {
        d["code"] = c;
    }
    if let Some(x) = data {
        d["data"] = x;
    }
    d
}

/// A position (line, character in the client's encoding).
#[derive(serde::Serialize)]
pub struct Position {
    pub line: u32,
    pub character: u32,
}

/// A range on one line.
#[derive(serde::Serialize)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

impl Range {
    pub fn on_line(line: u32, start: u32, end: u32) -> Range {
        Range { start: Position { line, character: start }, end: Position { line, character: end } }
    }
}

/// A diagnostic as the client receives it, serialized without a `serde_json::Value`.
#[derive(serde::Serialize)]
pub struct Diagnostic<D: serde::Serialize> {
    pub range: Range,
    pub severity: u8,
    pub source: &'static str,
    pub message: String,
    pub code: i64,
    pub data: D,
}

#[derive(serde::Serialize)]
struct PublishParams<'a, T: serde::Serialize> {
    uri: &'a str,
    diagnostics: &'a [T],
}

#[derive(serde::Serialize)]
struct Notification<P: serde::Serialize> {
    jsonrpc: &'static str,
    method: &'static str,
    params: P,
}

/// The whole `textDocument/publishDiagnostics` message for `uri`, as bytes.
pub fn publish_diagnostics<T: serde::Serialize>(uri: &str, diagnostics: &[T]) -> Vec<u8> {
    serde_json::to_vec(&Notification {
        jsonrpc: "2.0",
        method: "textDocument/publishDiagnostics",
        params: PublishParams { uri, diagnostics },
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialized_diagnostics_match_the_json_shape() {
        let d = Diagnostic {
            range: Range::on_line(4, 0, 12),
            severity: 1,
            source: "forge",
            message: "m".into(),
            code: 7,
            data: json!({"findingId": 7}),
        };
        let bytes = publish_diagnostics("file:///p/a.rs", &[d]);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let mut expected = diagnostic(4, 0, 12, 1, "m", Some(json!(7)), Some(json!({"findingId": 7})));
        expected["code"] = json!(7);
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {"uri": "file:///p/a.rs", "diagnostics": [expected]}})
        );
        let empty: [Diagnostic<Value>; 0] = [];
        let v: Value = serde_json::from_slice(&publish_diagnostics("file:///x", &empty)).unwrap();
        assert_eq!(v["params"]["diagnostics"], json!([]));
    }
}
