//! Request handlers, one file per method.

pub mod code_action;
pub mod code_lens;
pub mod document_symbol;
pub mod execute_command;
pub mod folding_range;
pub mod initialize;
pub mod text_document_content;

use forge_protocol::uri::ForgeUri;

use crate::lsp::conn::Conn;

/// The `forge:` document a URI names: a `forge://` URI, or a materialized copy under
/// `<project>/.forge/view/` (for clients that open files only).
pub fn forge_document(conn: &Conn, uri: &str) -> Option<ForgeUri> {
    if let Some(u) = ForgeUri::parse(uri) {
        return Some(u);
    }
    let path = uri.strip_prefix("file://")?;
    let path = percent_decode(path);
    let view = conn.env().project.root.join(".forge/view");
    let rel = std::path::Path::new(&path).strip_prefix(&view).ok()?;
    ForgeUri::parse(&format!("forge://{}", rel.display()))
}

/// Decodes `%XX` escapes of a URI path.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The text of a plan document: the open buffer, else the stored plan.
pub async fn plan_text(conn: &Conn, uri: &str) -> Option<(ForgeUri, String)> {
    let doc = forge_document(conn, uri)?;
    if !doc.is_plan() {
        return None;
    }
    if let Some(t) = conn.open_text(uri) {
        return Some((doc, t));
    }
    let text = crate::lsp::documents::render(conn, &doc).await.ok()?;
    Some((doc, text))
}
