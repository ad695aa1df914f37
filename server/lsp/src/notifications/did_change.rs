//! `textDocument/didChange` (full sync). The buffer is replaced synchronously, before
//! any await, and a change whose version is not newer than the buffer's is ignored, so
//! concurrent handler scheduling cannot apply changes out of order.

use tower_lsp_server::gen_lsp_types::DidChangeTextDocumentParams;

use crate::server::Backend;

pub fn did_change(backend: &Backend, params: DidChangeTextDocumentParams) {
    let Ok(conn) = backend.conn() else { return };
    let uri = crate::uri::canonical(params.text_document.text_document_identifier.uri.0);
    let version = params.text_document.version;
    let Some(text) = params.content_changes.into_iter().last().map(|c| {
        serde_json::to_value(&c)
            .ok()
            .and_then(|v| v.get("text").and_then(|t| t.as_str()).map(str::to_string))
            .unwrap_or_default()
    }) else {
        return;
    };
    let applied = {
        let mut docs = conn.docs.lock().expect("docs");
        match docs.get_mut(&uri) {
            Some(d) if d.version >= version => false,
            Some(d) => {
                d.version = version;
                d.text = text;
                true
            }
            None => false,
        }
    };
    if applied && conn.document(&uri).is_some_and(|d| d.is_plan()) {
        let conn = conn.clone();
        tokio::spawn(async move { crate::announce::publish_plan_warnings(&conn, &uri).await });
    }
}
