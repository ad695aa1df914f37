//! `textDocument/codeAction`: `Delete finding` on a finding's diagnostic.

use serde_json::{json, Value};
use tower_lsp_server::gen_lsp_types::{CodeActionParams, CodeActionResponse};
use tower_lsp_server::jsonrpc::Result;

use crate::server::{typed, Backend};

pub async fn code_action(backend: &Backend, params: CodeActionParams) -> Result<Option<Vec<CodeActionResponse>>> {
    let conn = backend.conn()?;
    let env = conn.env();
    // Offered only where it can succeed: an agent that may not delete findings gets none.
    if forge_domain::permissions::check("review-delete", &env.caller.facts()).is_err() {
        return Ok(Some(vec![]));
    }
    let mut actions = vec![];
    for d in &params.context.diagnostics {
        let d = serde_json::to_value(d).unwrap_or(Value::Null);
        if d.get("source").and_then(Value::as_str) != Some("forge") {
            continue;
        }
        let Some(data) = d.get("data").filter(|x| x.get("findingId").is_some()) else { continue };
        let file = data.get("file").cloned().unwrap_or(Value::Null);
        let line = data.get("line").cloned().unwrap_or(Value::Null);
        let mut input = json!({ "file": file, "line": line });
        if let Some(l) = data.get("loopName").and_then(Value::as_str) {
            // The user names the finding's loop; a loop session deletes in its own loop
            // (naming a loop is the user's alone); anyone else cannot reach a loop's finding.
            match &env.caller.binding {
                None if env.caller.agent == "user" => input["loopName"] = json!(l),
                Some(b) if b.loop_name == l => {}
                _ => continue,
            }
        }
        match data.get("sectionIndex") {
            Some(Value::Number(n)) => input["sectionIndex"] = Value::Number(n.clone()),
            _ => {
                if data.get("crossSection").and_then(Value::as_bool) == Some(true) {
                    input["crossSection"] = json!(true);
                }
            }
        }
        let command = json!({ "title": "Delete finding", "command": "forge.review-delete", "arguments": [input] });
        // A client that declared no `codeActionLiteralSupport` takes only commands (LSP
        // 3.17; review BB).
        actions.push(if conn.caps.code_action_literals {
            json!({ "title": "Delete finding", "kind": "quickfix", "diagnostics": [d], "command": command })
        } else {
            command
        });
    }
    Ok(Some(typed(Value::Array(actions))?))
}
