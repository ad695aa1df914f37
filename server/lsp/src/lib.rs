//! The LSP front end: transport, connections, handlers (one file per request or
//! notification), diagnostics and document publication, and the listeners ([`serve`]).
//!
//! Sits on top of the tools, the engine and the store. It is never called from below:
//! each connection subscribes to its workspace's change feed ([`forge_engine::hub`]) and
//! turns batches into refreshes, diagnostics and loop status. It alone knows the LSP
//! framework; tool errors become JSON-RPC errors here ([`rpc_error`]).
//!
//! Layout (after ruff's `ruff_server`): `server.rs` implements the framework's trait by
//! delegating every method to one free function in `requests/` or `notifications/`, one
//! file per method; `conn.rs` is the per-connection state; `ext.rs` declares the Forge
//! protocol extensions; `documents.rs` renders the `forge:` virtual documents;
//! `transport.rs` is the validating framing layer.

pub mod announce;
pub mod conn;
pub mod diagnostics;
pub mod documents;
pub mod ext;
pub mod findings_index;
pub mod loops;
pub mod notifications;
pub mod peer;
pub mod plan_features;
pub mod requests;
pub mod serve;
pub mod server;
pub mod state;
pub mod to_proto;
pub mod transport;
pub mod uri;

/// The JSON-RPC error of a tool error.
pub fn rpc_error(e: &forge_protocol::ToolError) -> tower_lsp_server::jsonrpc::Error {
    tower_lsp_server::jsonrpc::Error {
        code: tower_lsp_server::jsonrpc::ErrorCode::from(e.kind.code()),
        message: e.message.clone().into(),
        data: Some({
            let mut data = e.data.clone().unwrap_or_default();
            data.insert("kind".into(), e.kind.as_str().into());
            serde_json::Value::Object(data)
        }),
    }
}
