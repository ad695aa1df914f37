//! Task-control messages (`forge.task-message`): a loop session's inbox.

use rusqlite::{params, Connection};

/// A queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub sender: String,
    pub message: String,
    pub created_at: i64,
}

/// Queues a message for a session; returns how many are now waiting for it.
pub fn queue(
    conn: &Connection,
    project: &str,
    loop_name: &str,
    session: &str,
    sender: &str,
    message: &str,
    now: i64,
) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO task_messages (project_id, loop_name, session_id, sender, message, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![project, loop_name, session, sender, message, now])?;
    waiting(conn, session)
}

/// Undelivered messages of a session.
pub fn waiting(conn: &Connection, session: &str) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT count(*) FROM task_messages WHERE session_id = ?1 AND delivered_at IS NULL",
        params![session],
        |r| r.get(0),
    )
}

/// Takes a session's undelivered messages, oldest first, and marks them delivered.
pub fn take(conn: &Connection, session: &str, now: i64) -> rusqlite::Result<Vec<Queued>> {
    let out: Vec<Queued> = {
        let mut st = conn.prepare_cached(
            "SELECT sender, message, created_at FROM task_messages WHERE session_id = ?1 AND delivered_at IS NULL ORDER BY id",
        )?;
        let rows = st.query_map(params![session], |r| {
            Ok(Queued { sender: r.get(0)?, message: r.get(1)?, created_at: r.get(2)? })
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    conn.execute(
        "UPDATE task_messages SET delivered_at = ?2 WHERE session_id = ?1 AND delivered_at IS NULL",
        params![session, now],
    )?;
    Ok(out)
}
