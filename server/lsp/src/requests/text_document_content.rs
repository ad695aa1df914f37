//! `workspace/textDocumentContent` (LSP 3.18): the `forge:` virtual documents.
//!
//! Once the connection is initialized the transport hands these requests to [`direct`]
//! ([`crate::transport::Direct`]): the document's text is serialized once, straight into
//! the reply's bytes.

use std::sync::Arc;

use forge_protocol::uri::ForgeUri;
use forge_protocol::ToolError;
use tower_lsp_server::gen_lsp_types::{TextDocumentContentParams, TextDocumentContentResult};
use tower_lsp_server::jsonrpc::Result;

use crate::conn::Conn;
use crate::documents;
use crate::rpc_error;
use crate::server::Backend;
use crate::transport::DirectFuture;

pub async fn text_document_content(
    backend: &Backend,
    params: TextDocumentContentParams,
) -> Result<TextDocumentContentResult> {
    Ok(TextDocumentContentResult { text: text(backend.conn()?, params).await? })
}

/// The same request for the transport: the result's JSON.
pub fn direct(conn: Arc<Conn>, params: Option<serde_json::Value>) -> DirectFuture {
    Box::pin(async move {
        let text = text(&conn, crate::transport::params(params)?).await?;
        let len = text.len();
        crate::transport::reply(&TextDocumentContentResult { text }, len)
    })
}

async fn text(conn: &Arc<Conn>, params: TextDocumentContentParams) -> Result<String> {
    let uri = params.uri.0;
    let Some(doc) = ForgeUri::parse(&uri) else {
        return Err(rpc_error(&ToolError::not_found(format!("Unknown forge document {uri}."))));
    };
    // Read through forge://, so its links are forge:// too.
    let text = documents::render_here(conn, &doc, forge_core::Links::Forge).map_err(|e| rpc_error(&e))?;
    if doc.is_plan() {
        conn.mark_known(&uri);
        let (conn, text) = (conn.clone(), text.clone());
        tokio::spawn(async move { crate::announce::publish_plan_warnings_of(&conn, &uri, Some(text)).await });
    }
    Ok(text)
}
