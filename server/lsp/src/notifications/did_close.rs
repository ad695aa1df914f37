//! `textDocument/didClose`: forget the buffer.

use tower_lsp_server::gen_lsp_types::DidCloseTextDocumentParams;

use crate::server::Backend;

pub fn did_close(backend: &Backend, params: DidCloseTextDocumentParams) {
    let Ok(conn) = backend.conn() else { return };
    conn.docs.lock().expect("docs").remove(&params.text_document.uri.0);
}
