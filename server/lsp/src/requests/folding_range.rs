//! `textDocument/foldingRange` on plan documents: one range per block of more than one
//! line (the preamble, each `##` block, each section, the trailing headings).

use tower_lsp_server::gen_lsp_types::{FoldingRange, FoldingRangeParams};
use tower_lsp_server::jsonrpc::Result;

use crate::plan_features;
use crate::server::{typed, Backend};

pub async fn folding_range(backend: &Backend, params: FoldingRangeParams) -> Result<Option<Vec<FoldingRange>>> {
    let conn = backend.conn()?;
    let Some((_, text)) = super::plan_text(conn, &params.text_document.uri.0).await else {
        return Ok(None);
    };
    super::off_task(conn, move || typed(serde_json::Value::Array(plan_features::folding(&text))).map(Some)).await
}
