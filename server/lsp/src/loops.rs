//! Live loop status on a connection (PROTOCOL.md §7): `forge/loopStatus` after every
//! persisted loop change and once after `initialized`, one work-done progress per running
//! loop (cancellable: cancelling cancels the loop), `window/showMessage` when a loop the
//! connection's session started ends, and refreshes of the loop's documents.

use forge_protocol::notifications::LoopStatusParams;
use forge_protocol::uri::ForgeUri;
use serde_json::json;
use tower_lsp_server::gen_lsp_types::{MessageType, ProgressParams, ProgressToken, WorkDoneProgressCreateParams};
use tower_lsp_server::gen_lsp_types::{ProgressNotification, WorkDoneProgressCreateRequest};

use std::sync::Arc;

use crate::conn::Conn;
use crate::ext::LoopStatus;
use crate::state::PendingProgress;
use forge_store::loops;

/// Announces one loop change to this connection, from its snapshot when it has one (else
/// from the current row).
///
/// `live`: a change that just happened (not the replay after `initialized`); only a live
/// end is told with `window/showMessage`.
pub async fn announce(conn: &Arc<Conn>, name: &str, payload: Option<&str>, live: bool) {
    // The snapshot is read in turn (a replay's is never older than a change announced
    // before it), and every send below goes out in that turn.
    let _turn = conn.announcing.lock().await;
    let snap = match payload.and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok()) {
        Some(v) => Some(v),
        None => {
            let (p, n) = (conn.project_id(), name.to_string());
            conn.ws
                .store
                .read(move |c| forge_store::status::snapshot(c, &p, &n))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
        }
    };
    let Some(snap) = snap else { return };
    if !live {
        // Tests hold the replay here, its snapshot read, while the loop moves on.
        forge_engine::pause::at("announce.replay").await;
    }
    let Ok(mut s) = serde_json::from_value::<LoopStatusParams>(snap["status"].clone()) else { return };
    let completed = snap["completedSections"].as_u64().unwrap_or(0) as usize;
    // A loop the replay finds running whose server has ended (killed, crashed): nothing
    // runs it. The notification says so (`serverGone`: an editor showed it running for
    // good, a review found), no progress is begun that nothing would end, and the user is
    // told.
    let orphaned = if !live && s.status == "running" {
        let (p, n) = (conn.project_id(), s.loop_name.clone());
        conn.ws
            .store
            .read(move |c| match loops::get(c, &p, &n)? {
                Some(row) => forge_engine::owner::server_gone(c, &p, &row),
                None => Ok(None),
            })
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
    } else {
        None
    };
    s.server_gone = orphaned;
    conn.client.send_notification::<LoopStatus>(s.clone()).await;
    conn.refresh(&ForgeUri::LoopStatus(s.loop_name.clone()).to_uri());
    conn.refresh(&ForgeUri::LoopHistory(s.loop_name.clone()).to_uri());
    conn.refresh(&ForgeUri::LoopPlan(s.loop_name.clone()).to_uri());
    for i in 0..s.total_sections.max(0) {
        conn.refresh(&ForgeUri::LoopSection(s.loop_name.clone(), i as u32).to_uri());
    }
    if let Some(pid) = orphaned {
        conn.client
            .show_message(
                MessageType::Warning,
                format!(
                    "Forge: loop {} is recorded as running, but the server that ran it (process {pid}) has ended: nothing runs it until you restart it (loop-status with restart and force) or cancel it.",
                    s.loop_name
                ),
            )
            .await;
    } else if conn.caps.work_done_progress {
        progress(conn, &s, completed).await;
    }
    // Tell every connection of the project that it ended (once per end).
    if live && s.status != "running" {
        let at = s.completed_at.unwrap_or(0);
        let first = {
            let mut st = conn.progress.lock().expect("progress");
            st.shown.insert(s.loop_name.clone(), at) != Some(at)
        };
        if first {
            let (kind, text) = match s.status.as_str() {
                "completed" => (MessageType::Info, format!("Forge: loop {} completed.", s.loop_name)),
                "cancelled" => (MessageType::Info, format!("Forge: loop {} was cancelled.", s.loop_name)),
                other => (
                    MessageType::Warning,
                    format!(
                        "Forge: loop {} {other}: {}.",
                        s.loop_name,
                        s.termination_reason.as_deref().unwrap_or("unknown reason")
                    ),
                ),
            };
            conn.client.show_message(kind, text).await;
        }
    }
}

/// `completed`, or `stalled: stall_timeout`: the reason only when it says more than the status.
fn end_message(s: &LoopStatusParams) -> String {
    match s.termination_reason.as_deref().filter(|r| *r != s.status) {
        Some(r) => format!("{}: {r}", s.status),
        None => s.status.clone(),
    }
}

fn progress_message(s: &LoopStatusParams) -> String {
    let mut parts = vec![];
    if let Some(k) = s.section_index {
        parts.push(format!("section {}/{}", k + 1, s.total_sections));
    }
    parts.push(s.phase.clone());
    parts.push(format!("iteration {}", s.iteration));
    parts.join(" · ")
}

async fn send_progress(conn: &Conn, token: &str, value: serde_json::Value) {
    conn.client
        .send_notification::<ProgressNotification>(ProgressParams {
            token: ProgressToken::String(token.to_string()),
            value,
        })
        .await;
}

/// The loop's work-done progress on this connection (LSP: a token is used only once the
/// client created it). The client is asked to create a loop's token without holding up
/// the announcements: until it answers, the loop's news is kept with the token
/// ([`PendingProgress`]) and sent as the `begin` (then `end`, if the loop stopped
/// meanwhile) once it is created.
async fn progress(conn: &Arc<Conn>, s: &LoopStatusParams, completed: usize) {
    let pct = if s.total_sections > 0 { (completed as i64 * 100 / s.total_sections).clamp(0, 100) } else { 0 };
    let report = {
        let mut st = conn.progress.lock().expect("progress");
        let existing = st.tokens.get(&s.loop_name).cloned();
        match existing {
            Some(token) if s.status == "running" => {
                if let Some(p) = st.pending.get_mut(&token) {
                    (p.message, p.percentage) = (progress_message(s), pct);
                    None
                } else if st.refused.contains(&token) {
                    None
                } else {
                    Some((
                        token,
                        json!({ "kind": "report", "message": progress_message(s), "percentage": pct, "cancellable": true }),
                    ))
                }
            }
            Some(token) => {
                st.tokens.remove(&s.loop_name);
                let refused = st.refused.remove(&token);
                if let Some(p) = st.pending.get_mut(&token) {
                    p.end = Some(end_message(s));
                    None
                } else if refused {
                    None
                } else {
                    Some((token, json!({ "kind": "end", "message": end_message(s) })))
                }
            }
            None if s.status == "running" => {
                st.made += 1;
                let token = format!("forge-loop-{}-{}-{}", s.loop_name, s.started_at, st.made);
                st.tokens.insert(s.loop_name.clone(), token.clone());
                st.pending.insert(
                    token.clone(),
                    PendingProgress { message: progress_message(s), percentage: pct, end: None },
                );
                drop(st);
                create_token(conn, token, format!("Forge: {}", s.loop_name));
                None
            }
            None => None,
        }
    };
    if let Some((token, value)) = report {
        send_progress(conn, &token, value).await;
    }
}

/// Asks the client to create `token` (timing out: never waiting on the client) and, once
/// it has, begins the progress with the loop's latest news.
fn create_token(conn: &Arc<Conn>, token: String, title: String) {
    let conn = conn.clone();
    tokio::spawn(async move {
        let client = conn.client.clone();
        let params = WorkDoneProgressCreateParams { token: ProgressToken::String(token.clone()) };
        let create = move || async move { client.send_request::<WorkDoneProgressCreateRequest>(params).await };
        let created = matches!(conn.silence.ask(conn.alive(), create).await, Some(Ok(())));
        // In turn with the announcements: what they said while the token was pending is
        // in `news`, and what they say next goes out after the `begin`.
        let _turn = conn.announcing.lock().await;
        let news = {
            let mut st = conn.progress.lock().expect("progress");
            let news = st.pending.remove(&token);
            if !created && st.tokens.values().any(|t| *t == token) {
                // Kept in `tokens` (not asked again for this loop), never used.
                st.refused.insert(token.clone());
            }
            news
        };
        let Some(news) = news.filter(|_| created) else { return };
        // Tests hold the begin here while the loop moves on (debug builds).
        forge_engine::pause::at("progress.begin").await;
        send_progress(
            &conn,
            &token,
            json!({ "kind": "begin", "title": title, "message": news.message, "percentage": news.percentage, "cancellable": true }),
        )
        .await;
        if let Some(end) = news.end {
            send_progress(&conn, &token, json!({ "kind": "end", "message": end })).await;
        }
    });
}

/// After `initialized`: the status of every loop that is not completed.
pub async fn announce_initial(conn: &Arc<Conn>) {
    let p = conn.project_id();
    let names: Vec<String> = conn
        .ws
        .store
        .call(move |c| {
            loops::list(c, &p).map(|v| v.into_iter().filter(|l| l.status != "completed").map(|l| l.loop_name).collect())
        })
        .await
        .unwrap_or_default();
    for n in names {
        announce(conn, &n, None, false).await;
    }
}
