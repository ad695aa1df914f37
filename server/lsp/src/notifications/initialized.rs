//! `initialized`: report configuration warnings, publish what the client should see
//! from the start (nothing for a tools-only client), and materialize views for clients
//! that only open files.

use forge_protocol::uri::ForgeUri;
use tower_lsp_server::gen_lsp_types::InitializedParams;

use crate::documents::{INDEX_INTERVIEWS, INDEX_PLANS};
use crate::server::Backend;

pub async fn initialized(backend: &Backend, _params: InitializedParams) {
    let Ok(conn) = backend.conn() else { return };
    let warnings = std::mem::take(&mut *conn.config_warnings.lock().expect("warnings"));
    for w in warnings {
        conn.warn_config_once(&w).await;
    }
    let notices = std::mem::take(&mut *conn.notices.lock().expect("notices"));
    for n in notices {
        conn.client.show_message(tower_lsp_server::gen_lsp_types::MessageType::Info, format!("forge-lsp: {n}")).await;
    }
    if conn.caps.tools_only {
        return;
    }
    let conn = conn.clone();
    tokio::spawn(async move {
        crate::findings_index::publish_initial(&conn).await;
        crate::loops::announce_initial(&conn).await;
        if conn.caps.materialize {
            // Every copy the index links to (its plans, each loop's documents, its
            // interviews), so that no link of a fresh index points at a file that is not
            // there (before: only 20 plans, and no loop's status: a review). Copies that
            // already show their text are left as they are.
            let project = conn.project_id();
            let session = conn.env().caller.session_id.clone();
            let (mut uris, loop_names): (Vec<String>, Vec<String>) = conn
                .ws
                .store
                .call(move |db| {
                    let mut v: Vec<String> = forge_store::plans::recent(db, &project, INDEX_PLANS)
                        .unwrap_or_default()
                        .iter()
                        .map(|p| p.uri().to_uri())
                        .collect();
                    v.push(ForgeUri::SessionPlan(session).to_uri());
                    v.extend(
                        forge_store::interviews::recent(db, &project, INDEX_INTERVIEWS)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|i| ForgeUri::Interview(i.session_id).to_uri()),
                    );
                    let loops = forge_store::loops::list(db, &project).unwrap_or_default();
                    (v, loops.into_iter().map(|l| l.loop_name).collect())
                })
                .await;
            for name in &loop_names {
                uris.extend(crate::announce::loop_document_uris(&conn, name).await);
            }
            uris.sort_unstable();
            uris.dedup();
            for u in uris.iter().chain(std::iter::once(&ForgeUri::Index.to_uri())) {
                crate::announce::materialize(&conn, u).await;
            }
        }
    });
}
