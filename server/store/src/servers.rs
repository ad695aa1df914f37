//! The `servers` table: which processes serve a project, and on which private socket, so
//! `forge-lsp call` outside a loop can find one.
//!
//! Beside it, one file per project, `<data dir>/servers/<project id>`, names the socket of
//! the project's most recently seen server: the table's first row for the project. A call
//! reads it without opening the database (whose schema alone costs a new connection about
//! 0.2 ms to parse); when it is missing, does not hold up, or names a server that does not
//! answer, the call goes by the table, which stays the record. Invariants:
//! - every write that makes a server the most recently seen of a project (its registration;
//!   a call's mark after passing over another, [`touch`], which moves all the socket's rows
//!   first) writes that project's file too, after the row, by an atomic rename;
//! - forgetting a server's rows ([`unregister`], [`forget_socket`]) removes the files that
//!   name its socket, and a caller that finds a socket dead removes the project's file that
//!   names it even when no row does ([`forget_hint`]);
//! - a caller that went by the table writes the file only for a socket that is still the
//!   project's first row ([`name_in_hint`]);
//! - the file is only a shortcut: each write is best effort, and a reader trusts it no
//!   more than the database (the data directory, the folder and the file must be this
//!   user's and not writable by others, unless the data directory is shared on purpose);
//! - every read, write and removal of a socket file is relative to the folder's
//!   descriptor, opened without following a link and checked as opened ([`folder`]);
//! - a file is removed only when its rows are forgotten (a server's shutdown, a caller
//!   finding its socket dead or another user's), or by [`sweep_files`]: old, this user's,
//!   and backed by no row (or unusable for what it is);
//! - the functions that write rows here run in autocommit (the store thread's plain
//!   calls, a caller's own connection): a file is written only after its row committed.
//!   Inside a larger transaction that rolls back, a file could name a row that never was
//!   (harmless: a live server, or a dead one the next caller forgets).

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use forge_core::beneath::{self, Mode};
use rusqlite::Connection;

/// The folder of the data directory that holds the per-project socket files.
pub const HINTS_DIR: &str = "servers";

/// Records (or refreshes) a running server of `project`; it is now the project's most
/// recently seen server, and its socket file says so.
pub fn register(db: &Connection, pid: u32, project: &str, socket: &str, now: i64) -> rusqlite::Result<()> {
    db.execute(
        "INSERT INTO servers (pid, project_id, socket_path, started_at, heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (pid, project_id) DO UPDATE SET socket_path = excluded.socket_path, heartbeat_at = excluded.heartbeat_at",
        rusqlite::params![pid, project, socket, now],
    )?;
    if project != ANY_PROJECT {
        write_hint(db, project, socket);
    }
    Ok(())
}

/// Whether process `pid` is registered as a server of `project` with `socket`.
pub fn is_registered(db: &Connection, pid: u32, project: &str, socket: &str) -> rusqlite::Result<bool> {
    db.prepare_cached("SELECT 1 FROM servers WHERE pid = ?1 AND project_id = ?2 AND socket_path = ?3")?
        .exists(rusqlite::params![pid, project, socket])
}

/// Marks the server on `socket` as the most recently seen (`heartbeat_at = now`) of every
/// project it is registered for, socket files included, so the next call tries it first:
/// what a call does after it passed over a server that did not answer and reached this one.
pub fn touch(db: &Connection, socket: &str, now: i64) -> rusqlite::Result<usize> {
    let n =
        db.execute("UPDATE servers SET heartbeat_at = ?2 WHERE socket_path = ?1", rusqlite::params![socket, now])?;
    for (project, _) in rows_where(db, "socket_path = ?1", &socket)? {
        if project != ANY_PROJECT {
            write_hint(db, &project, socket);
        }
    }
    Ok(n)
}

/// Writes `project`'s socket file naming `socket` if the table still has it as the
/// project's most recently seen server (a read, no commit): what a call does that found no
/// socket file (or one that did not hold) and reached the table's first server.
pub fn name_in_hint(db: &Connection, project: &str, socket: &str) {
    let first = db
        .query_row(
            "SELECT socket_path FROM servers WHERE project_id = ?1 ORDER BY heartbeat_at DESC LIMIT 1",
            [project],
            |r| r.get::<_, String>(0),
        )
        .ok();
    if project != ANY_PROJECT && first.as_deref() == Some(socket) {
        write_hint(db, project, socket);
    }
}

/// Removes `project`'s socket file in `data_dir` if it names `socket`: a caller found that
/// socket dead. Needed apart from [`forget_socket`] for a file no row backs (written by a
/// call as its server shut down, or left when the database was replaced).
/// Whether a file was removed.
pub fn forget_hint(data_dir: &Path, project: &str, socket: &Path) -> bool {
    hint_path(data_dir, project).is_some()
        && matches!(folder(data_dir, false), Ok(Some(dir)) if remove_if_naming(&dir, project, socket.as_os_str()))
}

/// Forgets every registration of process `pid` (its shutdown), and the socket files that
/// name its sockets.
pub fn unregister(db: &Connection, pid: u32) -> rusqlite::Result<()> {
    let rows = rows_where(db, "pid = ?1", &pid)?;
    db.execute("DELETE FROM servers WHERE pid = ?1", [pid])?;
    remove_hints(db, &rows);
    Ok(())
}

/// Forgets every registration on `socket`: a server that died without unregistering
/// (killed with SIGKILL, a crash), found when its socket is gone or refuses connections.
pub fn forget_socket(db: &Connection, socket: &str) -> rusqlite::Result<usize> {
    let rows = rows_where(db, "socket_path = ?1", &socket)?;
    let n = db.execute("DELETE FROM servers WHERE socket_path = ?1", [socket])?;
    remove_hints(db, &rows);
    Ok(n)
}

/// `(project, socket)` of the rows matching `filter` (one `?1` parameter).
fn rows_where(db: &Connection, filter: &str, value: &dyn rusqlite::ToSql) -> rusqlite::Result<Vec<(String, String)>> {
    let mut st = db.prepare(&format!("SELECT project_id, socket_path FROM servers WHERE {filter}"))?;
    let rows = st.query_map([value], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    rows.collect()
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
/// servers registered for any project ([`ANY_PROJECT`]), most recent first; each with
/// whether it is the project's own registration (`true`) or one for any project.
pub fn sockets(db: &Connection, project: &str) -> rusqlite::Result<Vec<(String, bool)>> {
    let mut st = db.prepare(
        "SELECT socket_path, project_id != '*' FROM servers WHERE project_id = ?1 OR project_id = '*'
         ORDER BY project_id = '*', heartbeat_at DESC",
    )?;
    let rows = st.query_map([project], |r| Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?)))?;
    rows.collect()
}

/// The socket file of `project` in `data_dir`; none for a project id that is not a plain
/// name (ids are commit hashes; [`ANY_PROJECT`] has no file).
pub fn hint_path(data_dir: &Path, project: &str) -> Option<PathBuf> {
    let plain = !project.is_empty()
        && project.len() <= 128
        && !project.starts_with('.')
        && project.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    plain.then(|| data_dir.join(HINTS_DIR).join(project))
}

/// The data directory of an open database (none in memory).
fn data_dir_of(db: &Connection) -> Option<PathBuf> {
    let path = Path::new(db.path().filter(|p| !p.is_empty())?);
    Some(path.parent()?.to_path_buf())
}

/// Whether a file or folder of the data directory with owner `uid` and mode `mode` is this
/// user's and nobody else's to write; always when the data directory is shared on purpose.
fn private(uid: u32, mode: u32) -> bool {
    crate::shared_data_dir() || (uid == forge_core::paths::euid() && mode & 0o022 == 0)
}

/// Why a file or folder (`what`) with owner `uid` and mode `mode` is not this user's and
/// nobody else's to write; `None` when it is, and always when the data directory is shared
/// on purpose.
fn not_private(uid: u32, mode: u32, what: &str) -> Option<String> {
    let me = forge_core::paths::euid();
    if private(uid, mode) {
        None
    } else if uid != me {
        Some(format!("the {what} is owned by uid {uid}, not by this user (uid {me})"))
    } else {
        Some(format!("others may write the {what} (mode {:04o})", mode & 0o7777))
    }
}

/// The socket files' folder of `data_dir`, opened without following a link: every read,
/// write and removal of a socket file is relative to this descriptor, so a folder swapped
/// for a link after its check (a member of a group-writable data directory's group could)
/// redirects none of them. With `create`, a missing folder is made (0700). `Ok(None)` when
/// there is none; `Err(why)` for a link, something else than a folder, or a folder that is
/// not this user's and private to write.
fn folder(data_dir: &Path, create: bool) -> Result<Option<OwnedFd>, String> {
    let data = beneath::open_base(data_dir).map_err(|e| format!("the data directory cannot be opened ({e})"))?;
    let name = OsStr::new(HINTS_DIR);
    if create {
        beneath::make_subdir(&data, name, 0o700).map_err(|e| format!("the folder cannot be made ({e})"))?;
    }
    let dir = match beneath::open_subdir(&data, name) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
            let link = beneath::stat_at(&data, name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK);
            return Err(if link { "the folder is a symbolic link" } else { "the folder is not a folder" }.into());
        }
        Err(e) => return Err(format!("the folder cannot be opened ({e})")),
    };
    // The folder opened, not the name looked up again: a just-made folder passes.
    let st = beneath::stat_fd(&dir).map_err(|e| format!("the folder cannot be read ({e})"))?;
    match not_private(st.st_uid, st.st_mode, "folder") {
        Some(why) => Err(why),
        None => Ok(Some(dir)),
    }
}

/// Writes `project`'s socket file naming `socket`: a new file renamed over the old, so a
/// reader sees one or the other whole. Best effort: a failure only costs the next call
/// its shortcut.
fn write_hint(db: &Connection, project: &str, socket: &str) {
    let Some(path) = data_dir_of(db).and_then(|d| hint_path(&d, project)) else { return };
    let Some(data_dir) = path.parent().and_then(Path::parent) else { return };
    match folder(data_dir, true) {
        Ok(Some(dir)) => write_in(std::sync::Arc::new(dir), path, project, socket),
        Ok(None) => {}
        Err(why) => tracing::debug!("no socket file written in {}: {why}", data_dir.join(HINTS_DIR).display()),
    }
}

/// Writes the socket file `project` (shown as `path`) naming `socket` in the folder `dir`:
/// a new file of the writer's, 0600, renamed over the old.
fn write_in(dir: std::sync::Arc<OwnedFd>, path: PathBuf, project: &str, socket: &str) {
    let contents = format!("{socket}\n");
    let written =
        beneath::stage_at(dir, path.clone(), OsStr::new(project), contents.as_bytes(), Mode::Mine(0o600), false)
            .and_then(beneath::Staged::commit);
    if let Err(e) = written {
        tracing::debug!("cannot write {}: {e}", path.display());
    }
}

/// Removes the socket files that name one of `rows`' sockets for its project (a file that
/// a newer server rewrote since is left alone; a removal racing such a rewrite only costs
/// the next call its shortcut).
fn remove_hints(db: &Connection, rows: &[(String, String)]) {
    let Some(data_dir) = data_dir_of(db) else { return };
    let Ok(Some(dir)) = folder(&data_dir, false) else { return };
    for (project, socket) in rows {
        if hint_path(&data_dir, project).is_some() {
            remove_if_naming(&dir, project, OsStr::new(socket));
        }
    }
}

/// Removes the socket file `project` of the folder `dir` if it names `socket`; whether it did.
fn remove_if_naming(dir: &OwnedFd, project: &str, socket: &OsStr) -> bool {
    read_hint(dir, project).is_ok_and(|s| s.as_os_str() == socket)
        && beneath::unlink_at(dir, OsStr::new(project), false).is_ok()
}

/// The socket `<data dir>/servers/<project>` names, if the file holds up: the data
/// directory passes the database's checks, the folder and the file are this user's and
/// nobody else's to write, neither is a link, and the file names one absolute path.
/// Otherwise the caller goes by the table: `Err(None)` when there is no file, `Err(Some(why))`
/// when there is one that is not used (for `forge-lsp call --verbose`).
pub fn hinted_socket(data_dir: &Path, project: &str) -> Result<PathBuf, Option<String>> {
    let path = hint_path(data_dir, project).ok_or(None)?;
    // Only said of a file that is there (the reasons are built on this path only).
    let refused = |why: String| Err(std::fs::symlink_metadata(&path).is_ok().then_some(why));
    // The data directory may be a link to one of ours (as for the database); the folder
    // and the file may not.
    if let Err(e) = crate::check_owned(data_dir, true) {
        return refused(format!("the data directory does not pass the database's checks ({e})"));
    }
    match folder(data_dir, false) {
        Ok(Some(dir)) => read_hint(&dir, project),
        Ok(None) => Err(None),
        Err(why) => refused(why),
    }
}

/// Why a socket file gives no socket.
enum Unread {
    /// There is no file.
    Missing,
    /// What the file is says it is not to be used: a link, not a regular file, not this
    /// user's and private to write, too long, or not one absolute path on one line.
    Unusable(String),
    /// It could not be read just now (out of descriptors, an I/O error): nothing is known
    /// of it.
    Failed(String),
}

/// The one absolute path the socket file `name` of the folder `dir` holds, read without
/// following a link. `Err(None)` when there is no file; `Err(Some(why))` when it is not
/// used ([`Unread`]).
fn read_hint(dir: &OwnedFd, name: &str) -> Result<PathBuf, Option<String>> {
    read_at(dir, name).map_err(|e| match e {
        Unread::Missing => None,
        Unread::Unusable(why) | Unread::Failed(why) => Some(why),
    })
}

fn read_at(dir: &OwnedFd, name: &str) -> Result<PathBuf, Unread> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let failed = |e: std::io::Error| Unread::Failed(format!("it cannot be read ({e})"));
    let c = std::ffi::CString::new(name).map_err(|_| Unread::Unusable("its name holds a NUL byte".to_string()))?;
    // Never through a link; never waiting (a FIFO planted there does not hold the caller).
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOENT) => Unread::Missing,
            Some(libc::ELOOP) => Unread::Unusable("the file is a symbolic link".to_string()),
            _ => failed(e),
        });
    }
    // SAFETY: just opened, owned here.
    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let m = f.metadata().map_err(failed)?;
    if !m.is_file() {
        return Err(Unread::Unusable("it is not a regular file".into()));
    }
    if let Some(why) = not_private(m.uid(), m.permissions().mode(), "file") {
        return Err(Unread::Unusable(why));
    }
    if m.len() > 4096 {
        return Err(Unread::Unusable("it is longer than 4,096 bytes".into()));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    (&f).take(4097).read_to_end(&mut bytes).map_err(failed)?;
    match bytes.strip_suffix(b"\n") {
        Some(line) if !line.is_empty() && !line.contains(&b'\n') && !line.contains(&0) && line[0] == b'/' => {
            Ok(PathBuf::from(std::ffi::OsString::from_vec(line.to_vec())))
        }
        _ => Err(Unread::Unusable("it does not hold one absolute path on one line".into())),
    }
}

/// How long a socket file no row backs, or a temporary file of a write, is left before
/// [`sweep_files`] removes it: far longer than any write of one (a registration writes its
/// row before its file, and a rename replaces a file with a new one).
pub const SWEEP_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Every `(project, socket)` of the table: the rows that back socket files.
pub fn all_rows(db: &Connection) -> rusqlite::Result<std::collections::HashSet<(String, String)>> {
    let mut st = db.prepare("SELECT project_id, socket_path FROM servers")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    rows.collect()
}

/// Removes what is stale in `data_dir`'s socket files' folder, given `rows` (the table's
/// rows, read before this runs); the number of files removed. A file goes only when it is
/// a regular file of this user's, last written more than [`SWEEP_AFTER`] before `now`, and
/// - a temporary file of a write that never reached its rename (a name starting with `.`),
/// - or a project's socket file that no row of `rows` backs (its project and socket), or
///   that is not to be used for what it holds or for a mode that lets others write it. A
///   file that cannot be opened or read (out of descriptors, its own mode) is left.
///
/// A socket file that a row backs stays, even when its server is dead: the next call that
/// finds it so forgets both. Whether a socket path exists is never asked: a server in
/// another mount namespace sharing the data directory (a container) has a path this
/// process may not see, and its row keeps its file. Everything is done relative to the
/// folder's descriptor, never through a link, and a file replaced or changed since it was
/// looked at (a server registering now) is left, but for the instant between the last look
/// and the removal, where a registration's file could still go: that only costs the next
/// call its shortcut (it goes by the table, which names the server and writes the file
/// again). Errors are skipped: a sweep never fails a caller.
pub fn sweep_files(
    data_dir: &Path,
    rows: &std::collections::HashSet<(String, String)>,
    now: std::time::SystemTime,
) -> usize {
    match folder(data_dir, false) {
        Ok(Some(dir)) => sweep_in(&dir, data_dir, rows, now),
        _ => 0,
    }
}

fn sweep_in(
    dir: &OwnedFd,
    data_dir: &Path,
    rows: &std::collections::HashSet<(String, String)>,
    now: std::time::SystemTime,
) -> usize {
    let Ok(names) = beneath::list_dir(dir) else { return 0 };
    let cutoff = now.checked_sub(SWEEP_AFTER).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let Some(cutoff) = cutoff.map(|d| d.as_secs() as i64) else { return 0 };
    let me = forge_core::paths::euid();
    // What tells one file at a name from the next (a rename puts a new inode there, and the
    // change time moves with any change, an inode number used again included).
    let id = |st: &libc::stat| (st.st_dev, st.st_ino, st.st_ctime, st.st_ctime_nsec);
    let mut removed = 0;
    for name in names {
        let Some(text) = name.to_str() else { continue };
        // The entry itself, never what a link points to.
        let Ok(st) = beneath::stat_at(dir, &name) else { continue };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != me || st.st_mtime >= cutoff {
            continue;
        }
        let stale = text.starts_with('.')
            || (hint_path(data_dir, text).is_some()
                && match read_at(dir, text) {
                    Ok(socket) => socket.to_str().is_none_or(|s| !rows.contains(&(text.to_string(), s.to_string()))),
                    Err(Unread::Unusable(_)) => true,
                    Err(Unread::Missing | Unread::Failed(_)) => false,
                });
        let same = || beneath::stat_at(dir, &name).is_ok_and(|now| id(&now) == id(&st));
        if stale && same() && beneath::unlink_at(dir, &name, false).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const P: &str = "0123456789abcdef0123456789abcdef01234567";

    fn store() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open_connection(&dir.path().join("forge.db")).unwrap();
        (dir, conn)
    }

    fn hint(dir: &Path) -> PathBuf {
        dir.join(HINTS_DIR).join(P)
    }

    #[test]
    fn the_socket_file_follows_the_projects_most_recently_seen_server() {
        let (dir, db) = store();
        let d = dir.path();
        assert_eq!(hinted_socket(d, P).ok(), None, "no server yet");
        register(&db, 1, P, "/run/a.sock", 10).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/a.sock")));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&d.join(HINTS_DIR)), mode(&hint(d))), (0o700, 0o600));
        register(&db, 2, P, "/run/b.sock", 20).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/b.sock")));
        // The table agrees: its first row is the file's server.
        assert_eq!(sockets(&db, P).unwrap()[0], ("/run/b.sock".to_string(), true));
        // A call that passed over b and reached a marks a; a serve --listen server's
        // registration for any project names no file.
        touch(&db, "/run/a.sock", 30).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/a.sock")));
        assert_eq!(sockets(&db, P).unwrap()[0].0, "/run/a.sock");
        register(&db, 3, ANY_PROJECT, "/run/any.sock", 40).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/a.sock")));
        assert_eq!(std::fs::read_dir(d.join(HINTS_DIR)).unwrap().count(), 1, "no other file, no leftover");
        // b leaving does not remove a's file; a leaving does.
        unregister(&db, 2).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/a.sock")));
        unregister(&db, 1).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), None);
        assert!(!hint(d).exists());
        // A dead server's socket forgotten by a caller takes its file with it.
        register(&db, 4, P, "/run/d.sock", 50).unwrap();
        assert_eq!(forget_socket(&db, "/run/d.sock").unwrap(), 1);
        assert!(!hint(d).exists());
        // A call that found no file names the table's first server.
        register(&db, 5, P, "/run/e.sock", 60).unwrap();
        std::fs::remove_file(hint(d)).unwrap();
        name_in_hint(&db, P, "/run/e.sock");
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/e.sock")));
    }

    /// A server that serves two projects and is marked after a call passed over another
    /// is the first of both in the table, and both files name it: otherwise the other
    /// project's calls would wait for the server passed over again.
    #[test]
    fn a_mark_moves_every_project_of_the_socket() {
        let (dir, db) = store();
        let d = dir.path();
        const Q: &str = "fedcba9876543210fedcba9876543210fedcba98";
        for (pid, sock, at) in [(1, "/run/b.sock", 10), (2, "/run/a.sock", 20)] {
            for project in [P, Q, ANY_PROJECT] {
                register(&db, pid, project, sock, at).unwrap();
            }
        }
        assert_eq!(hinted_socket(d, Q).ok(), Some(PathBuf::from("/run/a.sock")));
        touch(&db, "/run/b.sock", 30).unwrap();
        for project in [P, Q] {
            assert_eq!(sockets(&db, project).unwrap()[0].0, "/run/b.sock", "{project}");
            assert_eq!(hinted_socket(d, project).ok(), Some(PathBuf::from("/run/b.sock")), "{project}");
        }
    }

    /// A file no row backs (written as its server shut down, or left when the database
    /// was replaced) is removed by a caller that finds its socket dead; a caller that went
    /// by the table names only the table's first server.
    #[test]
    fn a_socket_file_without_a_row_is_forgotten_and_not_written() {
        let (dir, db) = store();
        let d = dir.path();
        register(&db, 1, P, "/run/a.sock", 10).unwrap();
        db.execute("DELETE FROM servers", []).unwrap();
        assert!(!forget_hint(d, P, Path::new("/run/other.sock")), "names another socket");
        assert!(hint(d).exists());
        assert!(forget_hint(d, P, Path::new("/run/a.sock")));
        assert!(!hint(d).exists());
        name_in_hint(&db, P, "/run/a.sock");
        assert!(!hint(d).exists(), "written for a server with no row");
        register(&db, 2, P, "/run/b.sock", 20).unwrap();
        register(&db, 3, P, "/run/c.sock", 30).unwrap();
        std::fs::remove_file(hint(d)).unwrap();
        name_in_hint(&db, P, "/run/b.sock");
        assert!(!hint(d).exists(), "written for a server that is not the first");
        name_in_hint(&db, P, "/run/c.sock");
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/c.sock")));
    }

    #[test]
    fn a_socket_file_that_does_not_hold_up_is_not_read() {
        let (dir, db) = store();
        let d = dir.path();
        register(&db, 1, P, "/run/a.sock", 10).unwrap();
        let f = hint(d);
        let set_mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        // Others may write the file, or the folder: a planted socket could take the caller's
        // identity (its session token).
        assert_eq!(hinted_socket(d, P).err().flatten(), None, "nothing wrong");
        set_mode(&f, 0o620);
        assert_eq!(hinted_socket(d, P).ok(), None);
        assert_eq!(hinted_socket(d, P).err().flatten().as_deref(), Some("others may write the file (mode 0620)"));
        set_mode(&f, 0o600);
        set_mode(&d.join(HINTS_DIR), 0o777);
        assert_eq!(hinted_socket(d, P).ok(), None);
        assert_eq!(hinted_socket(d, P).err().flatten().as_deref(), Some("others may write the folder (mode 0777)"));
        set_mode(&d.join(HINTS_DIR), 0o700);
        assert!(hinted_socket(d, P).is_ok());
        // A link, as the file or as the folder, is not followed.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("x"), "/run/evil.sock\n").unwrap();
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("x"), &f).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), None);
        assert_eq!(hinted_socket(d, P).err().flatten().as_deref(), Some("the file is a symbolic link"));
        std::fs::remove_file(&f).unwrap();
        std::fs::rename(d.join(HINTS_DIR), d.join("moved")).unwrap();
        std::fs::write(elsewhere.path().join(P), "/run/evil.sock\n").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), d.join(HINTS_DIR)).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), None);
        assert_eq!(hinted_socket(d, P).err().flatten().as_deref(), Some("the folder is a symbolic link"));
        // ... nor written through: a registration leaves the linked folder alone.
        register(&db, 2, P, "/run/b.sock", 20).unwrap();
        assert_eq!(std::fs::read_to_string(elsewhere.path().join(P)).unwrap(), "/run/evil.sock\n");
        std::fs::remove_file(d.join(HINTS_DIR)).unwrap();
        std::fs::rename(d.join("moved"), d.join(HINTS_DIR)).unwrap();
        // Contents that are not one absolute path.
        for bad in ["", "\n", "run/a.sock\n", "/run/a.sock", "/run/a.sock\n/run/b.sock\n", "/run/a\0.sock\n"] {
            std::fs::write(&f, bad).unwrap();
            set_mode(&f, 0o600);
            assert_eq!(hinted_socket(d, P).ok(), None, "{bad:?}");
        }
        assert_eq!(
            hinted_socket(d, P).err().flatten().as_deref(),
            Some("it does not hold one absolute path on one line")
        );
        std::fs::write(&f, format!("/{}\n", "x".repeat(5000))).unwrap();
        assert_eq!(hinted_socket(d, P).ok(), None, "too long");
        assert_eq!(hinted_socket(d, P).err().flatten().as_deref(), Some("it is longer than 4,096 bytes"));
        // A project id that is not a plain name has no file (and names no other path).
        for odd in ["", "../forge.db", ".hidden", "a/b", ANY_PROJECT] {
            assert_eq!(hint_path(d, odd), None, "{odd:?}");
            register(&db, 3, odd, "/run/c.sock", 30).unwrap();
        }
        assert!(!d.join("forge.db").is_dir() && !d.join(".hidden").exists());
    }

    /// The sweep removes old temporary files and old socket files no row backs (or that
    /// hold no path), and leaves a file a row backs, a young file, a link and a name that
    /// is no project's.
    #[test]
    fn the_sweep_takes_only_old_files_no_row_backs() {
        let (dir, db) = store();
        let d = dir.path();
        const Q: &str = "fedcba9876543210fedcba9876543210fedcba98";
        const R: &str = "00000000000000000000000000000000000000aa";
        const S: &str = "00000000000000000000000000000000000000bb";
        register(&db, 1, P, "/run/a.sock", 10).unwrap();
        let folder = d.join(HINTS_DIR);
        let plant = |name: &str, text: &str| {
            let f = folder.join(name);
            std::fs::write(&f, text).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        plant(Q, "/run/q.sock\n"); // no row
        plant(R, "not a path\n");
        plant(S, "/run/other.sock\n"); // a row of S, for another socket
        register(&db, 2, S, "/run/s.sock", 20).unwrap();
        plant(S, "/run/other.sock\n");
        plant(".0123.99.0", "/run/a.sock"); // a temporary file left by a dead writer
        plant("a b", "/run/x.sock\n");
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("t"), "/run/t.sock\n").unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("t"), folder.join("0000000000000000000000000000000000000011"))
            .unwrap();
        let names = || {
            let mut n: Vec<String> =
                std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            n.sort();
            n
        };
        let all = names();
        assert_eq!(all.len(), 7);
        let rows = all_rows(&db).unwrap();
        assert!(rows.contains(&(P.to_string(), "/run/a.sock".to_string())));
        // Everything is young: nothing goes.
        assert_eq!(sweep_files(d, &rows, std::time::SystemTime::now()), 0);
        assert_eq!(names(), all);
        // An hour later.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        assert_eq!(sweep_files(d, &rows, later), 4);
        assert_eq!(names(), ["0000000000000000000000000000000000000011", P, "a b"]);
        assert_eq!(std::fs::read_to_string(elsewhere.path().join("t")).unwrap(), "/run/t.sock\n");
        assert_eq!(hinted_socket(d, P).ok(), Some(PathBuf::from("/run/a.sock")));
        // No folder: nothing to do.
        std::fs::remove_dir_all(&folder).unwrap();
        assert_eq!(sweep_files(d, &rows, later), 0);
    }

    /// A folder swapped for a link after it was opened and checked redirects nothing: the
    /// removal, the write and the sweep all happen in the folder opened.
    #[test]
    fn a_folder_swapped_for_a_link_after_its_check_redirects_nothing() {
        let (dir, db) = store();
        let d = dir.path();
        register(&db, 1, P, "/run/a.sock", 10).unwrap();
        let opened = folder(d, false).unwrap().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let theirs = outside.path().join(P);
        std::fs::write(&theirs, "/run/a.sock\n").unwrap();
        std::fs::write(outside.path().join(".tmp"), "x").unwrap();
        std::fs::rename(d.join(HINTS_DIR), d.join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.join(HINTS_DIR)).unwrap();
        assert!(remove_if_naming(&opened, P, OsStr::new("/run/a.sock")));
        assert!(!d.join("moved").join(P).exists() && theirs.exists());
        let opened = std::sync::Arc::new(opened);
        write_in(opened.clone(), hint(d), P, "/run/b.sock");
        assert_eq!(std::fs::read_to_string(d.join("moved").join(P)).unwrap(), "/run/b.sock\n");
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "/run/a.sock\n");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        assert_eq!(sweep_in(&opened, d, &Default::default(), later), 1);
        assert!(!d.join("moved").join(P).exists());
        assert!(theirs.exists() && outside.path().join(".tmp").exists());
        // Through the path, the link is refused.
        assert_eq!(hinted_socket(d, P).err().flatten().as_deref(), Some("the folder is a symbolic link"));
        assert_eq!(sweep_files(d, &Default::default(), later), 0);
        assert!(theirs.exists());
    }

    /// A socket file written over another user's (a shared data directory, the writer root)
    /// is the writer's, not left the other user's to rewrite.
    #[test]
    fn a_socket_file_written_is_the_writers() {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipped: giving a file to another user needs root");
            return;
        }
        let (dir, db) = store();
        register(&db, 1, P, "/run/a.sock", 10).unwrap();
        let f = hint(dir.path());
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
        register(&db, 2, P, "/run/b.sock", 20).unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().uid(), 0);
    }

    #[test]
    fn a_store_without_a_file_writes_no_socket_file() {
        let db = Connection::open_in_memory().unwrap();
        crate::configure(&db).unwrap();
        crate::migrate(&db).unwrap();
        register(&db, 1, P, "/run/a.sock", 10).unwrap();
        unregister(&db, 1).unwrap();
    }
}
