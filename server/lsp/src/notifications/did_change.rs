//! `textDocument/didChange`. The server asks for full sync, but a change event with a
//! `range` is applied as the edit it is (in order, positions in the negotiated encoding),
//! not taken for the whole text: a client that sends ranges anyway must not have its
//! buffer replaced by a fragment (a range the types cannot read is dropped before this,
//! in the transport). The buffer is changed synchronously, before any await, in the order
//! the notifications were read (the transport first-polls handlers in arrival order), and a
//! change whose version is not newer than the buffer's is ignored.

use tower_lsp_server::gen_lsp_types::{DidChangeTextDocumentParams, TextDocumentContentChangeEvent as Change};

use crate::server::Backend;

pub fn did_change(backend: &Backend, params: DidChangeTextDocumentParams) {
    let Ok(conn) = backend.conn() else { return };
    let uri = conn.from_client(params.text_document.text_document_identifier.uri.0);
    let version = params.text_document.version;
    if params.content_changes.is_empty() {
        return;
    }
    let encoding = conn.caps.encoding;
    let applied = {
        let mut docs = conn.docs.lock().expect("docs");
        match docs.get_mut(&uri) {
            Some(d) if d.version >= version => false,
            Some(d) => {
                d.version = version;
                for change in params.content_changes {
                    match change {
                        Change::TextDocumentContentChangeWholeDocument(w) => d.text = w.text,
                        Change::TextDocumentContentChangePartial(p) => {
                            let (a, b) = (p.range.start, p.range.end);
                            forge_domain::text::replace_range_in(
                                &mut d.text,
                                (a.line, a.character),
                                (b.line, b.character),
                                &p.text,
                                encoding,
                            )
                        }
                    }
                }
                true
            }
            None => false,
        }
    };
    if applied {
        // A copy's buffer reloaded after the server rewrote the copy starts from it now.
        conn.note_copy_base(&uri);
        // The findings' ranges end where the buffer's lines end now (review Z: they kept
        // the opened text's until the next finding was written).
        conn.republish_findings_at(&uri);
    }
    if applied && conn.document(&uri).is_some_and(|d| d.is_plan()) {
        let conn = conn.clone();
        tokio::spawn(async move { crate::announce::publish_plan_warnings(&conn, &uri).await });
    }
}
