//! `window/workDoneProgress/cancel`: the user cancelled a loop's progress: cancel the loop.

use serde_json::{json, Value};
use tower_lsp_server::gen_lsp_types::{MessageType, WorkDoneProgressCancelParams};

use crate::server::Backend;
use forge_tools as tools;

pub async fn work_done_progress_cancel(backend: &Backend, params: WorkDoneProgressCancelParams) {
    let Ok(conn) = backend.conn() else { return };
    let token = match serde_json::to_value(&params.token).unwrap_or(Value::Null) {
        Value::String(s) => s,
        other => other.to_string(),
    };
    let Some(name) = conn.progress.lock().expect("progress").loop_of(&token) else { return };
    let conn = conn.clone();
    tokio::spawn(async move {
        let r = tools::call(&conn.ws.store, &conn.ws.engine, conn.env(), "forge.loop-cancel", json!({ "name": name }))
            .await;
        if let Err(e) = r {
            conn.client
                .show_message(MessageType::Warning, format!("Forge: cancelling loop {name} failed: {}", e.message))
                .await;
        }
    });
}
