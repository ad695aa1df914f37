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
    // A client that declared no hierarchical support takes `SymbolInformation`s: each
    // symbol's range as a location in the document it asked about (LSP 3.17; review BB).
    let flat_uri = (!conn.caps.hierarchical_symbols).then(|| params.text_document.uri.0.to_string());
    super::off_task(conn, move || {
        let mut symbols = plan_features::symbols(&text, encoding);
        if let Some(uri) = flat_uri {
            for s in &mut symbols {
                let range = s["range"].take();
                *s = serde_json::json!({ "name": s["name"], "kind": s["kind"], "location": { "uri": uri, "range": range } });
            }
        }
        typed(serde_json::Value::Array(symbols)).map(Some)
    })
    .await
}
