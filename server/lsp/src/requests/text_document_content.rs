//! `workspace/textDocumentContent` (LSP 3.18): the `forge:` virtual documents.

use forge_protocol::uri::ForgeUri;
use forge_protocol::ToolError;
use tower_lsp_server::gen_lsp_types::{TextDocumentContentParams, TextDocumentContentResult};
use tower_lsp_server::jsonrpc::Result;

use crate::documents;
use crate::rpc_error;
use crate::server::Backend;

pub async fn text_document_content(
    backend: &Backend,
    params: TextDocumentContentParams,
) -> Result<TextDocumentContentResult> {
    let conn = backend.conn()?;
    let uri = params.uri.0;
    let Some(doc) = ForgeUri::parse(&uri) else {
        return Err(rpc_error(&ToolError::not_found(format!("Unknown forge document {uri}."))));
    };
    // Read through forge://, so its links are forge:// too.
    let text = documents::render(conn, &doc, forge_core::Links::Forge).await.map_err(|e| rpc_error(&e))?;
    if doc.is_plan() {
        conn.mark_known(&uri);
        let conn = conn.clone();
        tokio::spawn(async move { crate::announce::publish_plan_warnings(&conn, &uri).await });
    }
    Ok(TextDocumentContentResult { text })
}
