//! `textDocument/documentSymbol` on plan documents: preamble, sections, trailing headings.

use tower_lsp_server::gen_lsp_types::{DocumentSymbolParams, DocumentSymbolResponse};
use tower_lsp_server::jsonrpc::Result;

use crate::plan_features;
use crate::server::{typed, Backend};

pub async fn document_symbol(
    backend: &Backend,
    params: DocumentSymbolParams,
) -> Result<Option<DocumentSymbolResponse>> {
    let conn = backend.conn()?;
    let Some((_, text)) = super::plan_text(conn, &params.text_document.uri.0).await else {
        return Ok(None);
    };
    let encoding = conn.caps.encoding;
    super::off_task(conn, move || typed(serde_json::Value::Array(plan_features::symbols(&text, encoding))).map(Some))
        .await
}
