//! `textDocument/didSave`: a save over a read-only `.forge/view/` copy is adopted as a
//! `plan-write` (session plans) or refused and restored with a message, never lost.

use forge_protocol::uri::ForgeUri;
use tower_lsp_server::gen_lsp_types::DidSaveTextDocumentParams;

use crate::server::Backend;

pub async fn did_save(backend: &Backend, params: DidSaveTextDocumentParams) {
    let Ok(conn) = backend.conn() else { return };
    let uri = conn.from_client(params.text_document.uri.0);
    // Only copies: a forge:// document is saved by the client through plan-write itself.
    if ForgeUri::parse(&uri).is_some() {
        return;
    }
    let Some(doc) = conn.document(&uri) else { return };
    let path = conn.view_path(&doc);
    // Read beneath the project without following a link (review YC: a committed link there
    // was read through, and its target stored as the plan of a save without its text).
    let disk = crate::announce::read_copy(&conn.env().project.root, &path).map(|(bytes, _)| bytes);
    let text = match params.text {
        Some(t) => Some(t),
        None => disk.clone().and_then(|b| String::from_utf8(b).ok()),
    };
    let current = crate::documents::render(conn, &doc, forge_core::Links::View).await.ok();
    let mut adopted = false;
    if let Some(text) = text {
        if current.as_deref().is_some_and(|c| c != text && same_but_final_line_breaks(c, &text)) {
            // The editor added (or took away) the final line break on save (Vim's and
            // Neovim's `fixeol`, Helix's `insert-final-newline`): no edit. Nothing is
            // written back under the editor; the next rewrite of the copy replaces it.
            let seen: Vec<&[u8]> = std::iter::once(text.as_bytes()).chain(disk.as_deref()).collect();
            crate::announce::note_handled_edit(&path, &seen);
            return;
        }
        // The document changed after this buffer last held its copy (an agent's plan-edit,
        // another session's plan-write): the buffer's text starts from an older version,
        // and storing it would undo that change without a word (review Z).
        let base = conn.copy_base(&uri);
        let stale = base.is_some() && base != current.as_deref().map(crate::conn::digest);
        if current.as_deref() != Some(text.as_str()) && conn.claim_view_edit(&path, &text, false) {
            // Handled here: what the editor sent and what it wrote (which may differ, a byte
            // order mark) are not a new edit for the next rewrite of the copy.
            let seen: Vec<&[u8]> = std::iter::once(text.as_bytes()).chain(disk.as_deref()).collect();
            crate::announce::note_handled_edit(&path, &seen);
            let how = if stale { crate::announce::Edit::SavedStale } else { crate::announce::Edit::Saved };
            crate::announce::adopt_view_edit(conn, &doc, &path, text, how).await;
            adopted = !stale;
        }
    }
    crate::announce::materialize(conn, &doc.to_uri()).await;
    // The buffer holds the copy just written (the save adopted): its new base.
    conn.note_copy_base(&uri);
    // A save adopted is the document's newest version, whatever became of the copy: when
    // the buffer holds the document as it is now, its next edits start from it (review YR:
    // when the copy could not be written, the base stayed at the copy before, and every
    // later save was refused as stale). Not when another write came in between: that one
    // the buffer has not seen.
    if adopted {
        if let Ok(now) = crate::documents::render(conn, &doc, forge_core::Links::View).await {
            conn.note_copy_base_held(&uri, crate::conn::digest(&now));
        }
    }
}

/// Whether two texts differ at most in the line breaks they end with.
fn same_but_final_line_breaks(a: &str, b: &str) -> bool {
    let end = |t: &str| t.trim_end_matches(['\n', '\r']).len();
    let (ea, eb) = (end(a), end(b));
    ea == eb && a[..ea] == b[..eb]
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_final_line_breaks_may_differ() {
        for (a, b, same) in [
            ("# P\n\nx", "# P\n\nx\n", true),
            ("# P\n\nx", "# P\n\nx\r\n", true),
            ("# P\n\nx\n", "# P\n\nx", true),
            ("# P\n\nx", "# P\n\ny\n", false),
            ("# P\n\nx", "# P\n\nx \n", false),
            ("# P\n\nx", "\n# P\n\nx", false),
        ] {
            assert_eq!(super::same_but_final_line_breaks(a, b), same, "{a:?} {b:?}");
        }
    }
}
