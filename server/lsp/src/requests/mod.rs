//! Request handlers, one file per method.

pub mod code_action;
pub mod code_lens;
pub mod document_symbol;
pub mod execute_command;
pub mod folding_range;
pub mod initialize;
pub mod text_document_content;

use forge_protocol::uri::ForgeUri;

use crate::conn::Conn;

/// Runs `f` (the work over a whole plan: symbols, folding ranges, lenses) on a blocking
/// thread. On the connection's task it held up every other request of the connection, and
/// the reading of `$/cancelRequest`, for as long as it took (seconds for 60,000 headings).
/// A cancelled request is answered at once; the work it started finishes unobserved.
pub async fn off_task<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> tower_lsp_server::jsonrpc::Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        let mut err = tower_lsp_server::jsonrpc::Error::internal_error();
        err.message = format!("the plan's structure could not be computed: {e}").into();
        err
    })
}

/// The text of a plan document: the open buffer, else the stored plan.
pub async fn plan_text(conn: &Conn, uri: &str) -> Option<(ForgeUri, String)> {
    let doc = conn.document(uri)?;
    if !doc.is_plan() {
        return None;
    }
    if let Some(t) = conn.open_text(&crate::uri::canonical(uri.to_string())) {
        return Some((doc, t));
    }
    let text = crate::documents::render(conn, &doc, forge_core::Links::Forge).await.ok()?;
    Some((doc, text))
}
