//! `workspace/executeCommand`: runs a Forge tool (PROTOCOL.md §3).

use serde_json::Value;
use tower_lsp_server::gen_lsp_types::{ExecuteCommandParams, LspAny};
use tower_lsp_server::jsonrpc::Result;

use crate::rpc_error;
use crate::server::Backend;
use forge_tools as tools;

pub async fn execute_command(backend: &Backend, params: ExecuteCommandParams) -> Result<Option<LspAny>> {
    let conn = backend.conn()?;
    let input = tools::input_from_arguments(params.arguments).map_err(|e| rpc_error(&e))?;
    match tools::call(&conn.ws.store, &conn.ws.engine, conn.env(), &params.command, input).await {
        Ok(r) => Ok(Some(serde_json::to_value(r).unwrap_or(Value::Null))),
        Err(e) => Err(rpc_error(&e)),
    }
}
