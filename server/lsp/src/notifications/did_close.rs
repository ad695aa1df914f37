//! `textDocument/didClose`: forget the buffer.

use tower_lsp_server::gen_lsp_types::DidCloseTextDocumentParams;

use crate::server::Backend;

pub fn did_close(backend: &Backend, params: DidCloseTextDocumentParams) {
    let Ok(conn) = backend.conn() else { return };
    let uri = crate::uri::canonical(params.text_document.uri.0);
    if let Ok(mut docs) = conn.docs.lock() {
        docs.remove(&uri);
    }
    // A client drops a closed document's diagnostics: its plan warnings are published
    // again when it is reopened.
    conn.forget_warned(&uri);
}
