//! Building LSP values from our own: diagnostics as the JSON the client receives.
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
