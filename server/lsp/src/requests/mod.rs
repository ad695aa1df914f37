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
