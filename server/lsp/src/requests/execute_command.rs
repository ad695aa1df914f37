//! `workspace/executeCommand`: runs a Forge tool (PROTOCOL.md §3).
//!
//! Once the connection is initialized the transport hands these requests to [`direct`]
//! instead of the framework ([`crate::transport::Direct`]): the tool's `{ text, data }` is
//! serialized once, straight into the bytes of the reply. The framework's handler
//! ([`execute_command`]) answers the ones before that (and is the same call).

use std::sync::Arc;

use tokio::sync::watch;

use serde_json::Value;
use tower_lsp_server::gen_lsp_types::{ExecuteCommandParams, LspAny};
use tower_lsp_server::jsonrpc::Result;

use crate::conn::Conn;
use crate::rpc_error;
use crate::server::Backend;
use crate::transport::DirectFuture;
use forge_protocol::CommandResult;
use forge_tools as tools;

pub async fn execute_command(backend: &Backend, params: ExecuteCommandParams) -> Result<Option<LspAny>> {
    let r = run(backend.conn()?, backend.input_closed.clone(), params).await?;
    Ok(Some(serde_json::to_value(r).unwrap_or(Value::Null)))
}

/// The same call for the transport: parses the params (naming the field that is wrong)
/// and answers with the result's JSON.
pub fn direct(conn: Arc<Conn>, closed: watch::Receiver<bool>, params: Option<Value>) -> DirectFuture {
    Box::pin(async move {
        check_params(params.as_ref())?;
        let params: ExecuteCommandParams = crate::transport::params(params)?;
        let r = run(&conn, closed, params).await?;
        // Data built as JSON text is copied as it is: its length is known.
        let len = r.text.len() + r.data.as_json_text().map_or(0, str::len);
        crate::transport::reply_with(len, |out| r.write_json(out))
    })
}

/// The shape of the params, each field named when it is wrong, as a tool's bad input is
/// (-32602 with `data.kind`): the framework's decoding said only `invalid type: map,
/// expected a sequence` for `"arguments": {…}` (found by a review).
fn check_params(params: Option<&Value>) -> Result<()> {
    let bad = |m: String| {
        Err(rpc_error(&forge_protocol::ToolError::invalid_params(format!("workspace/executeCommand: {m}"))))
    };
    let kind = forge_protocol::json::kind;
    let Some(Value::Object(p)) = params else {
        let found = params.map_or("none", kind);
        return bad(format!("params must be an object with `command` and `arguments`, found {found}"));
    };
    match p.get("command") {
        Some(Value::String(_)) => {}
        None => return bad("missing `command` (the tool to run, e.g. \"forge.plan-read\")".into()),
        Some(v) => return bad(format!("`command` must be a string, found {}", kind(v))),
    }
    match p.get("workDoneToken") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(v) => return bad(format!("`workDoneToken` must be a string or an integer, found {}", kind(v))),
    }
    match p.get("arguments") {
        None | Some(Value::Null | Value::Array(_)) => Ok(()),
        Some(v) => bad(format!("`arguments` must be an array holding the tool's input (`[{{…}}]`), found {}", kind(v))),
    }
}

/// Runs the tool. A plugin tool is stopped (its process group killed) when the caller's
/// connection ends before it answers: an agent's `forge-lsp call` killed with its loop, or
/// an editor that went away (`forge_tools::call_watched`).
async fn run(conn: &Conn, closed: watch::Receiver<bool>, params: ExecuteCommandParams) -> Result<CommandResult> {
    let input = tools::input_from_arguments(params.arguments).map_err(|e| rpc_error(&e))?;
    tools::call_watched(&conn.ws.store, &conn.ws.engine, conn.env(), &params.command, input, Some(closed))
        .await
        .map_err(|e| rpc_error(&e))
}
