//! Task-control messages (`forge.task-message`): a loop session's inbox.

use rusqlite::{params, Connection};

/// A queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Its row id: messages are delivered up to an id ([`mark_delivered`]).
    pub id: i64,
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
    let out = undelivered(conn, session)?;
    if let Some(last) = out.last() {
        mark_delivered(conn, session, last.id, now)?;
    }
    Ok(out)
}

/// A session's undelivered messages, oldest first (nothing is marked).
pub fn undelivered(conn: &Connection, session: &str) -> rusqlite::Result<Vec<Queued>> {
    let mut st = conn.prepare_cached(
        "SELECT id, sender, message, created_at FROM task_messages
         WHERE session_id = ?1 AND delivered_at IS NULL ORDER BY id",
    )?;
    let rows = st.query_map(params![session], |r| {
        Ok(Queued { id: r.get(0)?, sender: r.get(1)?, message: r.get(2)?, created_at: r.get(3)? })
    })?;
    rows.collect()
}

/// Marks a session's undelivered messages up to id `up_to` delivered (one queued since
/// they were read stays waiting).
pub fn mark_delivered(conn: &Connection, session: &str, up_to: i64, now: i64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE task_messages SET delivered_at = ?3 WHERE session_id = ?1 AND delivered_at IS NULL AND id <= ?2",
        params![session, up_to, now],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages read for a turn are marked delivered up to the last one read: one queued
    /// in between stays waiting, and nothing is marked until the turn is claimed.
    #[test]
    fn messages_are_delivered_up_to_the_last_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::open_connection(&dir.path().join("forge.db")).unwrap();
        db.pragma_update(None, "foreign_keys", false).unwrap();
        queue(&db, "p", "l", "s", "user", "one", 1).unwrap();
        queue(&db, "p", "l", "s", "user", "two", 2).unwrap();
        let read = undelivered(&db, "s").unwrap();
        assert_eq!(read.iter().map(|q| q.message.as_str()).collect::<Vec<_>>(), ["one", "two"]);
        assert_eq!(waiting(&db, "s").unwrap(), 2, "reading marks nothing");
        queue(&db, "p", "l", "s", "user", "three", 3).unwrap();
        mark_delivered(&db, "s", read.last().unwrap().id, 4).unwrap();
        assert_eq!(take(&db, "s", 5).unwrap().iter().map(|q| q.message.as_str()).collect::<Vec<_>>(), ["three"]);
        assert_eq!(waiting(&db, "s").unwrap(), 0);
    }
}
