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
    Ok(TextDocumentContentResult { text: text(backend.conn()?, params).await?.as_str().to_string() })
}

/// The same request for the transport: the result's JSON.
pub fn direct(conn: Arc<Conn>, params: Option<serde_json::Value>) -> DirectFuture {
    Box::pin(async move {
        let text = text(&conn, crate::transport::params(params)?).await?;
        let text = text.as_str();
        crate::transport::reply_with(text.len(), |out| result_json(out, text))
    })
}

/// `TextDocumentContentResult { text }`'s JSON, the text escaped a word at a time.
fn result_json(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(b"{\"text\":");
    forge_protocol::json::push_string(out, text);
    out.push(b'}');
}

async fn text(conn: &Arc<Conn>, params: TextDocumentContentParams) -> Result<documents::Rendered> {
    let uri = params.uri.0;
    let Some(doc) = ForgeUri::parse(&uri) else {
        return Err(rpc_error(&ToolError::not_found(format!("Unknown forge document {uri}."))));
    };
    // Read through forge://, so its links are forge:// too.
    let text = documents::render_here(conn, &doc, forge_core::Links::Forge).map_err(|e| rpc_error(&e))?;
    if doc.is_plan() {
        conn.mark_known(&uri);
        crate::announce::plan_warnings_after_read(conn, uri, &text);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_is_what_the_framework_would_send() {
        for text in ["", "# Plan\n- \"a\" `b` \\ c\tü\n", &"line\n".repeat(1000)] {
            let mut ours = Vec::new();
            result_json(&mut ours, text);
            let theirs = serde_json::to_vec(&TextDocumentContentResult { text: text.to_string() }).unwrap();
            assert_eq!(ours, theirs);
        }
    }
}
