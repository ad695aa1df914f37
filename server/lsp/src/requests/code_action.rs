//! `textDocument/codeAction`: `Delete finding` on a finding's diagnostic.

use std::collections::HashMap;

use serde_json::{json, Value};
use tower_lsp_server::gen_lsp_types::{CodeActionParams, CodeActionResponse};
use tower_lsp_server::jsonrpc::Result;

use crate::conn::Conn;
use crate::server::{typed, Backend};

pub async fn code_action(backend: &Backend, params: CodeActionParams) -> Result<Option<Vec<CodeActionResponse>>> {
    let conn = backend.conn()?;
    let env = conn.env();
    // Offered only where it can succeed: an agent that may not delete findings gets none.
    if forge_domain::permissions::check("review-delete", &env.caller.facts()).is_err() {
        return Ok(Some(vec![]));
    }
    let ours: Vec<Value> = params
        .context
        .diagnostics
        .iter()
        .map(|d| serde_json::to_value(d).unwrap_or(Value::Null))
        .filter(|d| d.get("source").and_then(Value::as_str) == Some("forge"))
        .collect();
    let found = recovered_data(conn, &env.project.id, &ours).await;
    let mut actions = vec![];
    for d in ours {
        let data = match d.get("data").filter(|x| x.get("findingId").is_some()) {
            Some(x) => x,
            None => match d.get("code").and_then(Value::as_i64).and_then(|id| found.get(&id)) {
                Some(x) => x,
                None => continue,
            },
        };
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

/// The `data` of the findings whose diagnostics came back without it, by id (their
/// `code`): a client that declared no `publishDiagnostics.dataSupport` need not keep
/// `data` between the publication and the code action request (LSP 3.16). A finding
/// deleted since is not found and gets no action.
async fn recovered_data(conn: &Conn, project: &str, diagnostics: &[Value]) -> HashMap<i64, Value> {
    let ids: Vec<i64> = diagnostics
        .iter()
        .filter(|d| d.get("data").and_then(|x| x.get("findingId")).is_none())
        .filter_map(|d| d.get("code").and_then(Value::as_i64))
        .collect();
    if ids.is_empty() {
        return HashMap::new();
    }
    let project = project.to_string();
    let read = conn.ws.store.read(move |db| forge_store::findings::by_ids(db, &project, &ids)).await;
    match read.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
        Ok(rows) => rows
            .iter()
            .filter_map(|f| Some((f.id, serde_json::to_value(forge_domain::diagnostics::data(f)).ok()?)))
            .collect(),
        Err(e) => {
            tracing::warn!("cannot read findings for code actions: {e}");
            HashMap::new()
        }
    }
}
