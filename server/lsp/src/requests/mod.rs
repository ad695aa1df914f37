//! Request handlers, one file per method.

pub mod code_action;
pub mod code_lens;
pub mod document_symbol;
pub mod execute_command;
pub mod folding_range;
pub mod initialize;
pub mod text_document_content;

use forge_protocol::uri::ForgeUri;

use crate::conn::Conn;

/// Runs `f` (the work over a whole plan: symbols, folding ranges, lenses) on a blocking
/// thread, one at a time per connection. On the connection's task it held up every other
/// request of the connection, and the reading of `$/cancelRequest`, for as long as it took
/// (seconds for 60,000 headings). A request cancelled while it waits for its turn is
/// answered at once and computes nothing; one cancelled while it computes is answered at
/// once and its work finishes unobserved, still holding the turn, so an editor that asks
/// and cancels on every keystroke never has more than one running per connection.
pub async fn off_task<T: Send + 'static>(
    conn: &Conn,
    f: impl FnOnce() -> tower_lsp_server::jsonrpc::Result<T> + Send + 'static,
) -> tower_lsp_server::jsonrpc::Result<T> {
    off_task_when(conn, || true, f).await?.ok_or_else(tower_lsp_server::jsonrpc::Error::request_cancelled)
}

/// [`off_task`] for work that may be outdated by the time its turn comes (a plan's
/// warnings, asked for on every keystroke): `wanted` is asked once the turn is this
/// work's, and when it says no, nothing is computed (`None`).
pub async fn off_task_when<T: Send + 'static>(
    conn: &Conn,
    wanted: impl FnOnce() -> bool,
    f: impl FnOnce() -> tower_lsp_server::jsonrpc::Result<T> + Send + 'static,
) -> tower_lsp_server::jsonrpc::Result<Option<T>> {
    let fail = |why: String| {
        let mut err = tower_lsp_server::jsonrpc::Error::internal_error();
        err.message = format!("the plan's structure could not be computed: {why}").into();
        err
    };
    let turn = conn.plan_work.clone().acquire_owned().await.map_err(|e| fail(e.to_string()))?;
    if !wanted() {
        return Ok(None);
    }
    tokio::task::spawn_blocking(move || {
        let out = f();
        drop(turn);
        out
    })
    .await
    .map_err(|e| fail(e.to_string()))?
    .map(Some)
}

/// The text of a plan document: the open buffer, else the stored plan.
pub async fn plan_text(conn: &Conn, uri: &str) -> Option<(ForgeUri, String)> {
    let doc = conn.document(uri)?;
    if !doc.is_plan() {
        return None;
    }
    if let Some(t) = conn.open_text(&conn.from_client(uri.to_string())) {
        return Some((doc, t));
    }
    let text = crate::documents::render(conn, &doc, forge_core::Links::Forge).await.ok()?;
    Some((doc, text))
}
