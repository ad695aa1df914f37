//! Whether the server recorded as running a loop is still there.

use forge_store::loops::{self, LoopRow};

/// The recorded server of a running loop when that process has ended: its pid names no
/// process that may be it ([`crate::process::may_be_owner`]: none, a zombie, or one
/// started after the loop), and none of the sockets it registered accepts a connection.
/// The pid alone misjudged a live owner in another pid namespace, or after the wall clock
/// was stepped; the socket alone is the runner's own test (`owned_elsewhere`). `None` for a
/// loop that is not running, that has no recorded owner, or that this process runs.
pub fn server_gone(db: &rusqlite::Connection, project: &str, l: &LoopRow) -> rusqlite::Result<Option<i64>> {
    if l.status != "running" {
        return Ok(None);
    }
    let Some(pid) = loops::owner_pid(db, project, &l.loop_name)? else { return Ok(None) };
    Ok(process_gone(db, pid, l.started_at)?.then_some(pid))
}

/// Whether the server `pid`, recorded at `since_ms`, has ended: the pid names no process
/// that may be it, and none of the sockets it registered accepts a connection
/// ([`server_gone`]). Never this process.
pub fn process_gone(db: &rusqlite::Connection, pid: i64, since_ms: i64) -> rusqlite::Result<bool> {
    if pid == i64::from(std::process::id())
        || u32::try_from(pid).is_ok_and(|p| crate::process::may_be_owner(p, since_ms))
    {
        return Ok(false);
    }
    let sockets = forge_store::servers::sockets_of_pid(db, pid)?;
    Ok(!sockets.iter().any(|s| !forge_core::paths::socket_is_dead(std::path::Path::new(s))))
}
