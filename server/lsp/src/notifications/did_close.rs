//! `textDocument/didClose`: forget the buffer (and clear a plan's warnings).

use tower_lsp_server::gen_lsp_types::DidCloseTextDocumentParams;

use crate::server::Backend;

pub fn did_close(backend: &Backend, params: DidCloseTextDocumentParams) {
    let Ok(conn) = backend.conn() else { return };
    let uri = conn.from_client(params.text_document.uri.0);
    if let Ok(mut docs) = conn.docs.lock() {
        docs.remove(&uri);
    }
    // Its plan warnings were of the buffer, which is gone (and may have held text never
    // saved): they are cleared, since not every client drops a closed document's
    // diagnostics (VS Code keeps them), and published again when it is reopened.
    conn.forget_warned(&uri);
    // Nor published again by a later change of the plan (review YC: a closed document got
    // its warnings back at the next plan-edit).
    conn.forget_known(&uri);
    // Closed, its findings' ranges are read from the file on disk again (the buffer may
    // have held text never saved).
    conn.republish_findings_at(&uri);
    if conn.document(&uri).is_some_and(|d| d.is_plan()) {
        let conn = conn.clone();
        tokio::spawn(async move {
            // Reopened meanwhile: its new warnings are the ones to show.
            if conn.open_text(&uri).is_none() {
                conn.publish::<serde_json::Value>(&uri, &[]).await;
            }
        });
    }
}
