//! The `servers` table: which processes serve a project, and on which private socket, so
//! `forge-lsp call` outside a loop can find one.

use rusqlite::Connection;

/// Records (or refreshes) a running server of `project`.
pub fn register(db: &Connection, pid: u32, project: &str, socket: &str, now: i64) -> rusqlite::Result<()> {
    db.execute(
        "INSERT INTO servers (pid, project_id, socket_path, started_at, heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (pid, project_id) DO UPDATE SET socket_path = excluded.socket_path, heartbeat_at = excluded.heartbeat_at",
        rusqlite::params![pid, project, socket, now],
    )?;
    Ok(())
}

/// Whether process `pid` is registered as a server of `project` with `socket`.
pub fn is_registered(db: &Connection, pid: u32, project: &str, socket: &str) -> rusqlite::Result<bool> {
    db.prepare_cached("SELECT 1 FROM servers WHERE pid = ?1 AND project_id = ?2 AND socket_path = ?3")?
        .exists(rusqlite::params![pid, project, socket])
}

/// Marks the server on `socket` as the most recently seen (`heartbeat_at = now`), so the
/// next call tries it first: what a call does after it passed over a server that did not
/// answer and reached this one.
pub fn touch(db: &Connection, socket: &str, now: i64) -> rusqlite::Result<usize> {
    db.execute("UPDATE servers SET heartbeat_at = ?2 WHERE socket_path = ?1", rusqlite::params![socket, now])
}

/// Forgets every registration of process `pid` (its shutdown).
pub fn unregister(db: &Connection, pid: u32) -> rusqlite::Result<()> {
    db.execute("DELETE FROM servers WHERE pid = ?1", [pid])?;
    Ok(())
}

/// Forgets every registration on `socket`: a server that died without unregistering
/// (killed with SIGKILL, a crash), found when its socket is gone or refuses connections.
pub fn forget_socket(db: &Connection, socket: &str) -> rusqlite::Result<usize> {
    db.execute("DELETE FROM servers WHERE socket_path = ?1", [socket])
}

/// The sockets process `pid` registered (one per project it serves).
pub fn sockets_of_pid(db: &Connection, pid: i64) -> rusqlite::Result<Vec<String>> {
    let mut st = db.prepare("SELECT DISTINCT socket_path FROM servers WHERE pid = ?1")?;
    let rows = st.query_map([pid], |r| r.get::<_, String>(0))?;
    rows.collect()
}

/// The `project_id` of a server that serves any project of this data directory: a
/// `serve --listen` server, registered when it starts listening, before any client has
/// named a project.
pub const ANY_PROJECT: &str = "*";

/// Sockets of the project's registered servers, most recently seen first, then those of
/// servers registered for any project ([`ANY_PROJECT`]), most recent first.
pub fn sockets(db: &Connection, project: &str) -> rusqlite::Result<Vec<String>> {
    let mut st = db.prepare(
        "SELECT socket_path FROM servers WHERE project_id = ?1 OR project_id = '*'
         ORDER BY project_id = '*', heartbeat_at DESC",
    )?;
    let rows = st.query_map([project], |r| r.get::<_, String>(0))?;
    rows.collect()
}
