//! `textDocument/didOpen`: track the buffer (full sync).

use tower_lsp_server::gen_lsp_types::DidOpenTextDocumentParams;

use crate::conn::OpenDoc;
use crate::server::Backend;

pub fn did_open(backend: &Backend, params: DidOpenTextDocumentParams) {
    let Ok(conn) = backend.conn() else { return };
    // Keyed in the server's spelling of file URIs (the one diagnostics are published with).
    let uri = conn.from_client(params.text_document.uri.0);
    conn.docs.lock().expect("docs").insert(
        uri.clone(),
        OpenDoc { version: params.text_document.version, text: params.text_document.text, base: None },
    );
    conn.note_copy_base(&uri);
    // Clients drop a closed buffer's diagnostics (Neovim) or ignore those of files that
    // were not open (eglot): republish this file's findings to this connection.
    conn.republish_findings_at(&uri);
    if conn.document(&uri).is_some_and(|d| d.is_plan()) {
        conn.mark_known(&uri);
        let conn = conn.clone();
        tokio::spawn(async move { crate::announce::publish_plan_warnings(&conn, &uri).await });
    }
}
