//! The SQLite store: `<dataDir>/forge.db`, its migrations, every query, and the change
//! feed (`changes`: what changed, as rows other processes can tail).
//!
//! Knows no LSP, no engine, no tools: callers hand it plain values and get rows back.
//!
//! One writer: every write of a process goes through the one write connection of its
//! [`Store`], behind a mutex, so state mutations are serialized no matter how the LSP
//! framework schedules handlers. [`Store::call`] sends a closure to the store's writer
//! thread and awaits the result; grouped writes (below) run on the calling thread when
//! the connection is free. One tool call is one transaction ([`transact`], or a savepoint
//! of a group, below).
//!
//! Readers: [`Store::read`] runs a closure on one of a few read-only connections (WAL
//! readers, opened on first use), each inside one read transaction, so a read sees one
//! committed snapshot and never waits for the write lock or for a write in progress.
//! Read-only connections cannot write: a "read" that tries fails, it does not write.
//! [`Store::read_here`] is the same read on the calling thread's own read connection, for
//! short reads where the hop to a reader thread and back costs more than the read.
//!
//! Group commit: [`Store::write_grouped`] jobs that queue up while the writer is busy run
//! together in one `BEGIN IMMEDIATE` transaction, each in its own savepoint (a failing
//! job rolls back only its own savepoint), and each caller gets its result only after
//! the group's `COMMIT` succeeded (if the commit fails, every job of the group fails and
//! nothing of it is kept). One commit for many writes is what makes many writes in
//! flight cheap; a lone write is a group of one.
//!
//! Who runs a group: a grouped write is queued. A lone write (no other grouped write is
//! waited for) yields once, so that writes arriving together (pipelined requests) can
//! queue up behind it, and then, if it is still alone and the connection is free, runs
//! right there on the caller's thread: no hop to the writer thread and back, which was a
//! third of a sequential write's time. Writes among others go to the writer thread, which
//! runs what is queued as one group while the callers' threads go on reading the requests
//! that follow. If the connection is busy, the caller just awaits its result: whoever
//! holds the connection looks at the queue again after letting it go (invariant: every
//! holder does, so a queued write is never left behind).
//!
//! Checkpoints: the write connection does not copy the log back into the database inside
//! a commit, as SQLite does by default; a thread of the store does it beside the writes
//! (`checkpoint` module).
//!
//! Opening never modifies a database it cannot understand: a file that is not a SQLite
//! database, or one whose schema is newer than this binary, is refused before any
//! pragma or migration writes to it.

pub mod attempts;
pub mod changes;
mod checkpoint;
pub mod findings;
pub mod interviews;
pub mod loop_db;
pub mod loop_starts;
pub mod loops;
pub mod plans;
pub mod servers;
pub mod status;
pub mod sweep;
pub mod task_messages;

use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags, Transaction};
use tokio::sync::oneshot;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}
pub use embedded::MIGRATIONS;

/// The schema version this binary knows (the highest embedded migration).
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create the data directory for {path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, std::io::Error),
    #[error("{path} is not a usable forge-lsp database ({err}); its contents were left untouched (only its mode may have been narrowed to 0600). Move it away, with the {path}-wal and {path}-shm files beside it if there are any (they may hold its latest writes), or choose another data directory (--data-dir / FORGE_DATA_DIR).", path = .0.display(), err = .1)]
    NotADatabase(PathBuf, String),
    #[error("{path}: {why}; forge-lsp keeps private data there and refuses to use it. Use a data directory of your own (--data-dir / FORGE_DATA_DIR), or set FORGE_SHARED_DATA_DIR=1 if it is shared on purpose.", path = .0.display(), why = .1)]
    NotPrivate(PathBuf, String),
    #[error("{shown} has schema version {found}, newer than this forge-lsp understands (version {known}); its contents were left untouched. Upgrade forge-lsp or use another data directory.", shown = path.display())]
    TooNew { path: PathBuf, found: u32, known: u32 },
    #[error("cannot open {path}: {err}", path = .0.display(), err = .1)]
    Sqlite(PathBuf, rusqlite::Error),
    #[error("{path} cannot be written ({err}): the database file, the directory that holds it, or its -wal and -shm files are read-only for this user; nothing was changed. Make them writable (the directory needs write permission too: SQLite creates its -wal and -shm files there), or choose another data directory (--data-dir / FORGE_DATA_DIR).", path = .0.display(), err = .1)]
    ReadOnly(PathBuf, String),
    #[error("{path} stayed busy for {secs} s: another process holds its lock (a forge-lsp server or call that is stopped or stuck, or another program), or its file system does not support SQLite's file locks (some network file systems); nothing was changed. `fuser -v {path} {path}-shm` lists the processes that have it open.", path = .0.display(), secs = BUSY_TIMEOUT.as_secs())]
    Busy(PathBuf),
}

impl OpenError {
    /// A database error while opening `path`: [`OpenError::Busy`] when SQLite gave up
    /// waiting for a lock past the busy timeout (`SQLITE_BUSY`: the file is fine, another
    /// process holds it, or locks fail on its file system), else what `other` makes.
    fn from_sqlite(path: &Path, e: rusqlite::Error, other: impl FnOnce(PathBuf, rusqlite::Error) -> OpenError) -> Self {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
            OpenError::Busy(path.to_path_buf())
        } else if is_read_only(&e) {
            // Not a bad database: a file or directory this user may not write (a review
            // found a healthy database called unusable, with advice to move it away).
            OpenError::ReadOnly(path.to_path_buf(), e.to_string())
        } else {
            other(path.to_path_buf(), e)
        }
    }
}

fn not_a_database(path: PathBuf, e: rusqlite::Error) -> OpenError {
    OpenError::NotADatabase(path, e.to_string())
}

pub use forge_core::now_ms;

/// `?` for database errors where a [`ToolError`](forge_protocol::ToolError) is expected.
pub trait Db<T> {
    fn db(self) -> Result<T, forge_protocol::ToolError>;
}

impl<T> Db<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T, forge_protocol::ToolError> {
        self.map_err(|e| {
            // What the user can act on, where there is something (a review found bare
            // "database is locked" and "attempt to write a readonly database").
            let hint = if is_busy(&e) {
                format!(
                    "; another process held the database's lock for over {} s (a forge-lsp server or call that is stopped or stuck, or another program): nothing was written, try again",
                    BUSY_TIMEOUT.as_secs()
                )
            } else if is_read_only(&e) {
                "; the database, its directory or its -wal and -shm files are read-only for this user: nothing was written. Make them writable, or choose another data directory (--data-dir / FORGE_DATA_DIR)".to_string()
            } else {
                String::new()
            };
            forge_protocol::ToolError::internal(format!("database error: {e}{hint}"))
        })
    }
}

/// Creates the data directory (mode 0700, whatever the umask) unless it exists; an
/// existing directory keeps its mode: it is the user's.
pub fn create_data_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.is_dir() {
        return Ok(());
    }
    // Parents the user did not ask for are created like any directory; the data
    // directory itself is private.
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(std::io::Error::new(
            e.kind(),
            format!(
                "{} exists and is not a directory (choose a directory with --data-dir / FORGE_DATA_DIR)",
                dir.display()
            ),
        )),
        Err(e) => Err(e),
    }
}

/// `forge.db-wal` beside `forge.db`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Set to `1` when a data directory is shared on purpose (a team directory others may write,
/// a mount whose owners and modes mean nothing): the checks of [`check_owned`] are skipped.
pub const SHARED_DATA_DIR_ENV: &str = "FORGE_SHARED_DATA_DIR";

/// Whether the data directory is shared on purpose ([`SHARED_DATA_DIR_ENV`] is `1`).
pub fn shared_data_dir() -> bool {
    std::env::var(SHARED_DATA_DIR_ENV).is_ok_and(|v| v == "1")
}

/// Refuses a data directory or database file that another user owns (they could read or
/// replace what is stored; root too, whose files there would then lock the owner out), a
/// database file that is a symbolic link (a chmod or a write would reach what it points
/// at), and a data directory every user may write without the sticky bit (they could
/// replace the database in it). A database file of ours that others may read or write
/// loses those bits (never gains any), through a descriptor opened without following
/// links; where the file system ignores modes that changes nothing and is not an error.
/// [`SHARED_DATA_DIR_ENV`] skips all of it (a directory shared on purpose, a container's
/// mounted directory, a mount whose owners and modes mean nothing).
pub(crate) fn check_owned(path: &Path, dir: bool) -> Result<(), OpenError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    if shared_data_dir() {
        return Ok(());
    }
    let refuse = |why: String| OpenError::NotPrivate(path.to_path_buf(), why);
    let io = |e| OpenError::Io(path.to_path_buf(), e);
    // The data directory may be a link to one of ours; a database file may not.
    let m = if dir { std::fs::metadata(path) } else { std::fs::symlink_metadata(path) }.map_err(io)?;
    if m.file_type().is_symlink() {
        return Err(refuse("it is a symbolic link; the database and its -wal and -shm files must be files".into()));
    }
    let me = forge_core::paths::euid();
    if m.uid() != me {
        return Err(refuse(format!("it is owned by uid {}, not by this user (uid {me})", m.uid())));
    }
    let mode = m.permissions().mode() & 0o7777;
    if dir && mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(refuse(format!(
            "every user may write this directory (mode {mode:04o}) and so replace the database in it; `chmod o-w` it"
        )));
    }
    if !dir && mode & 0o077 != 0 {
        let private = mode & 0o700;
        let done = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .and_then(|f| f.set_permissions(std::fs::Permissions::from_mode(private)));
        match done {
            Ok(()) => {
                tracing::warn!("{}: mode {mode:04o}, made {private:04o} (only its owner may use it)", path.display())
            }
            Err(e) => tracing::warn!("{}: mode {mode:04o}, and it cannot be made private: {e}", path.display()),
        }
    }
    Ok(())
}

/// Creates an empty database file with mode 0600 (whatever the umask) if there is none.
/// SQLite gives the `-wal` and `-shm` files the database file's mode.
fn create_db_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(f) => f.set_permissions(std::fs::Permissions::from_mode(0o600)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens (creating if needed) and migrates the database at `path`. Safe when several
/// processes open a fresh database at once: the WAL switch is retried while another
/// process holds the lock, and the migrations run in one exclusive transaction that
/// re-reads the schema version ([`migrate`]).
pub fn open_connection(path: &Path) -> Result<Connection, OpenError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_data_dir(dir).map_err(|e| OpenError::Io(path.to_path_buf(), e))?;
        check_owned(dir, true)?;
    }
    let existed = path.exists() && std::fs::metadata(path).map(|m| m.len() > 0).unwrap_or(false);
    if !existed {
        let wal = sibling(path, "-wal");
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
            return Err(OpenError::NotADatabase(
                path.to_path_buf(),
                format!(
                    "there is no database here but a write-ahead log with writes in it, {}, left by a database that was moved or deleted; a new database would discard them. Put the database back, or move the log away too",
                    wal.display()
                ),
            ));
        }
        create_db_file(path).map_err(|e| match e.kind() {
            // The directory is there but not writable: said as such (a review found it
            // called "cannot create the data directory").
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
                OpenError::ReadOnly(path.to_path_buf(), format!("cannot create the database file: {e}"))
            }
            _ => OpenError::Io(path.to_path_buf(), e),
        })?;
    }
    for file in [path.to_path_buf(), sibling(path, "-wal"), sibling(path, "-shm")] {
        if file.exists() {
            check_owned(&file, false)?;
        }
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| OpenError::Sqlite(path.to_path_buf(), e))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| OpenError::Sqlite(path.to_path_buf(), e))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    if existed {
        // Read-only probes first: nothing below writes until the file is known good.
        let probe: Result<i64, _> = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0));
        let tables = probe.map_err(|e| OpenError::from_sqlite(path, e, not_a_database))?;
        let found = applied_version(&conn).map_err(|e| OpenError::from_sqlite(path, e, not_a_database))?;
        if found > latest_version() {
            return Err(OpenError::TooNew { path: path.to_path_buf(), found, known: latest_version() });
        }
        // forge-lsp's first migration creates `schema_migrations` with everything else, in
        // one transaction: a file with tables but without it is another program's.
        if found == 0 && tables > 0 {
            return Err(OpenError::NotADatabase(
                path.to_path_buf(),
                "an SQLite database of another program: it has tables but no forge-lsp schema".to_string(),
            ));
        }
    }
    configure(&conn).map_err(|e| OpenError::from_sqlite(path, e, OpenError::Sqlite))?;
    match migrate(&conn) {
        Ok(()) => Ok(conn),
        Err(MigrateError::TooNew(found)) => {
            Err(OpenError::TooNew { path: path.to_path_buf(), found, known: latest_version() })
        }
        Err(MigrateError::Sqlite(e)) => Err(OpenError::from_sqlite(path, e, OpenError::Sqlite)),
    }
}

/// How long a statement waits for another process's lock.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `SQLITE_READONLY` in any of its forms (the file, the directory for the -wal and -shm
/// files, a read-only mount).
fn is_read_only(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::ReadOnly))
}

/// Whether another process held the database's lock past the busy timeout
/// (`SQLITE_BUSY`, `SQLITE_LOCKED`): nothing was written, and trying again may pass.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked))
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    // Switching to WAL needs an exclusive lock and may report SQLITE_BUSY without waiting
    // while another process opens the same fresh file: retry until the busy timeout.
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let mode = conn.query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0));
        let r = match mode {
            Ok(m) if m.eq_ignore_ascii_case("wal") => Ok(()),
            Ok(_) => conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).map(|_| ()),
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => break,
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Each grouped write is a savepoint, whose sub-journal is a temporary file by default
    // (written and read back per write); in memory it is bounded by a group's pages.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(())
}

/// The highest applied migration (0 for a fresh file).
pub fn applied_version(conn: &Connection) -> rusqlite::Result<u32> {
    let has: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='schema_migrations'",
        [],
        |r| r.get(0),
    )?;
    if has == 0 {
        return Ok(0);
    }
    conn.query_row("SELECT coalesce(max(version), 0) FROM schema_migrations", [], |r| r.get(0))
}

/// Why [`migrate`] failed.
#[derive(Debug)]
pub enum MigrateError {
    /// Another process migrated the file past what this binary knows.
    TooNew(u32),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sqlite(e)
    }
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigrateError::TooNew(v) => write!(f, "schema version {v} is newer than this forge-lsp understands"),
            MigrateError::Sqlite(e) => write!(f, "{e}"),
        }
    }
}

/// Applies every embedded migration not yet applied, all in one exclusive transaction
/// that first re-reads the schema version: of several processes starting at once on a
/// fresh file, one migrates and the others find the work done (they wait on the lock).
pub fn migrate(conn: &Connection) -> Result<(), MigrateError> {
    if applied_version(conn)? == latest_version() {
        return Ok(()); // the common case, without taking the write lock
    }
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.execute_batch("BEGIN EXCLUSIVE") {
            Ok(()) => break,
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let r = (|| -> Result<(), MigrateError> {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version    INTEGER PRIMARY KEY,
                name       TEXT    NOT NULL,
                applied_at INTEGER NOT NULL
            )",
        )?;
        let current = applied_version(conn)?;
        if current > latest_version() {
            return Err(MigrateError::TooNew(current));
        }
        for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
            conn.execute_batch(sql)?;
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![version, name, now_ms()],
            )?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => conn.execute_batch("COMMIT").map_err(MigrateError::from),
        Err(e) => {
            if let Err(rb) = conn.execute_batch("ROLLBACK") {
                tracing::warn!("rollback of a failed migration failed: {rb}");
            }
            Err(e)
        }
    }
}

/// A flag a blocking thread can wait on with a timeout.
#[derive(Default)]
pub struct Waker {
    flag: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Waker {
    pub fn wake(&self) {
        if let Ok(mut f) = self.flag.lock() {
            *f = true;
            self.cv.notify_all();
        }
    }
    /// Waits until woken or `timeout` passes; returns whether it was woken.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let Ok(guard) = self.flag.lock() else { return false };
        let Ok((mut guard, _)) = self.cv.wait_timeout_while(guard, timeout, |f| !*f) else { return false };
        std::mem::replace(&mut *guard, false)
    }
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// What a grouped write leaves after running in its savepoint: whether to keep it, and
/// how to deliver its result once the group's commit is known (`Err` = the commit failed).
pub type Deliver = Box<dyn FnOnce(Result<(), WriteFailure>) + Send>;

/// Why a grouped write was not kept (its group could not start, was abandoned or did not
/// commit): what failed, and of which kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    pub message: String,
    pub kind: WriteFailureKind,
}

/// The kinds of [`WriteFailure`] a caller answers differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFailureKind {
    /// The database stayed locked by another connection past the busy timeout: nothing is
    /// wrong with the write; it may be tried again.
    Busy,
    /// A newer forge-lsp migrated the database while this process ran: no write of this
    /// process is made any more; it must be restarted.
    Outdated,
    /// Anything else.
    Failed,
}

impl WriteFailure {
    fn new(what: &str, e: &rusqlite::Error) -> WriteFailure {
        let kind = if is_busy(e) { WriteFailureKind::Busy } else { WriteFailureKind::Failed };
        WriteFailure { message: format!("{what}: {e}"), kind }
    }

    fn outdated(message: String) -> WriteFailure {
        WriteFailure { message, kind: WriteFailureKind::Outdated }
    }
}

impl std::fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
/// A grouped write: given the group's connection it runs; given `None` (the group could not
/// start or was abandoned) it does not run and fails. Either way it says whether to keep its
/// work and how to deliver its result.
type GroupJob = Box<dyn FnOnce(Option<&Connection>) -> (bool, Deliver) + Send>;

enum Work {
    Plain(Job),
    /// Run what is queued ([`Writer::queue`]).
    Drain,
}

/// The write connection and the grouped writes waiting for it (module docs: who runs a
/// group).
struct Writer {
    conn: std::sync::Mutex<Connection>,
    queue: std::sync::Mutex<std::collections::VecDeque<GroupJob>>,
    /// Grouped writes whose callers wait for them (queued, running or not yet delivered).
    waiting: std::sync::atomic::AtomicUsize,
    /// Checkpoints the log off the write path (`checkpoint` module).
    checkpoints: checkpoint::Checkpoints,
    /// When the change feed was last pruned by this store.
    pruned: std::sync::Mutex<std::time::Instant>,
    /// The schema cookie (`PRAGMA schema_version`) of the schema this process checked
    /// last ([`Writer::outdated`]); -1 until the first check.
    schema_cookie: std::sync::atomic::AtomicI64,
    /// Why writes stopped, once a newer forge-lsp migrated the database: every later
    /// group is refused with it before its transaction (the connection is read-only).
    stopped: std::sync::OnceLock<String>,
}

/// Counts a caller in [`Writer::waiting`] while it lives.
struct Waiting<'a>(&'a Writer);

impl<'a> Waiting<'a> {
    fn new(w: &'a Writer) -> Self {
        w.waiting.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Waiting(w)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Writer {
    fn queued(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<GroupJob>> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether another grouped write is waited for besides the caller's.
    fn among_others(&self) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::Acquire) > 1
    }

    /// Takes the next group off the queue (at most [`MAX_GROUP`] writes).
    fn next_group(&self) -> Vec<GroupJob> {
        let mut q = self.queued();
        let n = q.len().min(MAX_GROUP);
        q.drain(..n).collect()
    }

    /// Runs queued groups on `conn` (held by the caller) until the queue is empty.
    fn run_queued(&self, conn: &Connection) {
        loop {
            let group = self.next_group();
            if group.is_empty() {
                return;
            }
            self.commit(conn, group);
        }
    }

    /// Runs `group` on `conn` (held by the caller) and then looks at the log's length
    /// (`checkpoint` module): every group goes through here.
    fn commit(&self, conn: &Connection, group: Vec<GroupJob>) {
        if let Some(message) = self.stopped.get() {
            // `BEGIN IMMEDIATE` would fail on the read-only connection with SQLite's words.
            abandon(conn, vec![], group, WriteFailure::outdated(message.clone()));
            return;
        }
        run_group(conn, group, |c| self.outdated(c));
        self.checkpoints.after_commit(conn);
        self.maybe_prune(conn);
    }

    /// `Some(why)` once another process migrated the database past the schema this binary
    /// knows (an upgraded forge-lsp started while this one ran): its writes would follow
    /// the old schema. One pragma when nothing changed (the schema cookie, from the file's
    /// header); a changed cookie reads the applied version. Checked inside each group's
    /// write transaction, and before each plain job (which then finds the connection
    /// read-only: `query_only`).
    fn outdated(&self, conn: &Connection) -> Option<String> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(why) = self.stopped.get() {
            return Some(why.clone());
        }
        let cookie: i64 = conn.query_row("PRAGMA schema_version", [], |r| r.get(0)).ok()?;
        if cookie == self.schema_cookie.load(Relaxed) {
            return None;
        }
        let found = applied_version(conn).ok()?;
        let known = latest_version();
        if found <= known {
            self.schema_cookie.store(cookie, Relaxed);
            return None;
        }
        let _ = conn.pragma_update(None, "query_only", true);
        let why = format!(
            "the database was migrated to schema version {found} by a newer forge-lsp while this process ran (it knows version {known}); nothing was written. Restart it (the editor's server, or the agent's) with the newer forge-lsp."
        );
        tracing::error!("{why}");
        Some(self.stopped.get_or_init(|| why).clone())
    }

    /// Prunes the change feed of rows older than [`sweep::CHANGES_KEEP_MS`] every
    /// [`PRUNE_EVERY`] of writing (the first connection's sweep prunes it too): a server that
    /// runs for weeks, or in-process calls that never sweep, would grow it without bound.
    fn maybe_prune(&self, conn: &Connection) {
        let mut at = self.pruned.lock().unwrap_or_else(|p| p.into_inner());
        if at.elapsed() < PRUNE_EVERY || !conn.is_autocommit() {
            return;
        }
        *at = std::time::Instant::now();
        if let Err(e) = changes::prune(conn, now_ms().saturating_sub(sweep::CHANGES_KEEP_MS)) {
            tracing::warn!("cannot prune the change feed: {e}");
        }
    }
}

/// How often a writing store prunes the change feed.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// Prepared statements a connection keeps (rusqlite's default is 16; one connection serves
/// every tool, and a statement pushed out is parsed and planned again on its next use).
const STATEMENT_CACHE: usize = 64;

/// Most grouped writes in one transaction.
const MAX_GROUP: usize = 256;

type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

/// Most databases a thread keeps a read connection to ([`Store::read_here`]).
const HERE_MAX: usize = 4;

thread_local! {
    /// This thread's read connections ([`Store::read_here`]), by database path.
    static HERE: std::cell::RefCell<Vec<(PathBuf, Connection)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The reader pool: threads with a read-only connection each, started on first use.
struct Readers {
    path: PathBuf,
    pool: std::sync::OnceLock<Result<std_mpsc::Sender<ReadJob>, String>>,
}

/// How many read connections (and threads) a store has.
fn reader_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 4)
}

/// Opens a read-only connection of a database that [`open_connection`] has opened and
/// migrated.
pub fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

impl Readers {
    fn sender(&self) -> Result<&std_mpsc::Sender<ReadJob>, String> {
        self.pool
            .get_or_init(|| {
                let (tx, rx) = std_mpsc::channel::<ReadJob>();
                let rx = Arc::new(std::sync::Mutex::new(rx));
                for i in 0..reader_count() {
                    let conn = open_reader(&self.path)
                        .map_err(|e| format!("cannot open a read connection to {}: {e}", self.path.display()))?;
                    let rx = rx.clone();
                    std::thread::Builder::new()
                        .name(format!("forge-store-read-{i}"))
                        .spawn(move || loop {
                            let job = {
                                let Ok(rx) = rx.lock() else { return };
                                match rx.recv() {
                                    Ok(j) => j,
                                    Err(_) => return,
                                }
                            };
                            // A panicking job loses its reply (its caller gets an error),
                            // not the thread; its read transaction is ended so the next job
                            // does not run inside a stale snapshot.
                            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&conn))).is_err() {
                                end_open_txn(&conn);
                            }
                        })
                        .map_err(|e| format!("cannot start a store reader thread: {e}"))?;
                }
                Ok(tx)
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Handle to the store's threads. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    jobs: std_mpsc::Sender<Work>,
    writer: Arc<Writer>,
    readers: Arc<Readers>,
    path: Arc<PathBuf>,
    /// Woken after every committed write, so the change feed is read at once.
    pub wrote: Arc<Waker>,
    /// Whether the terminal-loop sweep ran on this store ([`Store::sweep_once`]).
    swept: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the database and starts its owner thread.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let conn = open_connection(path)?;
        checkpoint::hook(&conn);
        let checkpoints = checkpoint::Checkpoints::new(path.to_path_buf());

        let writer = Arc::new(Writer {
            conn: std::sync::Mutex::new(conn),
            queue: Default::default(),
            waiting: Default::default(),
            checkpoints,
            pruned: std::sync::Mutex::new(std::time::Instant::now()),
            // Not the cookie read now: a newer forge-lsp could migrate between the version
            // check of `open_connection` and that read; -1 makes the first write look.
            schema_cookie: std::sync::atomic::AtomicI64::new(-1),
            stopped: std::sync::OnceLock::new(),
        });
        let (tx, rx) = std_mpsc::channel::<Work>();
        let w = writer.clone();
        std::thread::Builder::new()
            .name("forge-store".into())
            .spawn(move || writer_loop(&w, rx))
            .map_err(|e| OpenError::Io(path.to_path_buf(), e))?;
        Ok(Self {
            jobs: tx,
            writer,
            readers: Arc::new(Readers { path: path.to_path_buf(), pool: std::sync::OnceLock::new() }),
            path: Arc::new(path.to_path_buf()),
            wrote: Arc::new(Waker::default()),
            swept: Arc::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the writer thread.
    pub async fn call<R: Send + 'static>(&self, f: impl FnOnce(&mut Connection) -> R + Send + 'static) -> R {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |c| {
            let _ = tx.send(f(c));
        });
        if self.jobs.send(Work::Plain(job)).is_err() {
            panic!("forge-store thread stopped");
        }
        rx.await.expect("a store job failed with an internal error (a bug); the store keeps running")
    }

    /// Runs `f` on a read connection inside one read transaction (one committed
    /// snapshot). `Err` only when no read connection could be opened.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> R + Send + 'static,
    ) -> Result<R, String> {
        let sender = self.readers.sender()?;
        let (tx, rx) = oneshot::channel();
        let job: ReadJob = Box::new(move |c| {
            let _ = tx.send(in_read_txn(c, f));
        });
        sender.send(job).map_err(|_| "the store's reader threads stopped".to_string())?;
        rx.await.map_err(|_| "a store reader dropped a job (it panicked)".to_string())
    }

    /// Runs `f` at once on the calling thread, on this thread's read connection to the
    /// database (opened on first use and kept), inside one read transaction: what
    /// [`Store::read`] does without the hop to a reader thread. For short reads on a path
    /// where the hop costs more than the read (the read-only tools' store parts); the
    /// caller's thread is busy for as long as `f` runs. A panic in `f` is the caller's.
    pub fn read_here<R>(&self, f: impl FnOnce(&Connection) -> R) -> Result<R, String> {
        let kept = HERE.with(|h| {
            let mut h = h.borrow_mut();
            h.iter().position(|(p, _)| p == &*self.path).map(|i| h.swap_remove(i).1)
        });
        let conn = match kept {
            Some(c) => c,
            None => open_reader(&self.path)
                .map_err(|e| format!("cannot open a read connection to {}: {e}", self.path.display()))?,
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| in_read_txn(&conn, f)));
        // Kept for the next read, a panic included (its transaction ended first).
        end_open_txn(&conn);
        let _ = HERE.try_with(|h| {
            let mut h = h.borrow_mut();
            if h.len() >= HERE_MAX {
                h.remove(0);
            }
            h.push(((*self.path).clone(), conn));
        });
        Ok(r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    }

    /// Runs `f` as a grouped write (module docs): inside the open transaction of its
    /// group, in a savepoint kept when `f` returns `Ok` and rolled back otherwise. The
    /// result arrives after the group's commit; a failed commit turns an `Ok` into
    /// `Err(on_commit_failure(message))`.
    pub async fn write_grouped<T, E>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, E> + Send + 'static,
        on_commit_failure: impl FnOnce(WriteFailure) -> E + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, E>>();
        let job: GroupJob = Box::new(move |c| {
            let r = c.map(f);
            let keep = matches!(r, Some(Ok(_)));
            let deliver: Deliver = Box::new(move |committed| {
                let r = match (r, committed) {
                    (Some(Err(e)), _) => Err(e),
                    (Some(Ok(v)), Ok(())) => Ok(v),
                    (_, Err(m)) => Err(on_commit_failure(m)),
                    (None, Ok(())) => Err(on_commit_failure(WriteFailure {
                        message: "the write did not run".into(),
                        kind: WriteFailureKind::Failed,
                    })),
                };
                let _ = tx.send(r);
            });
            (keep, deliver)
        });
        let _waiting = Waiting::new(&self.writer);
        self.writer.queued().push_back(job);
        if !self.writer.among_others() {
            // Dropped before it leads (the call was cancelled during the yield): the write
            // is queued and still runs, on the writer thread, as it would have before.
            let unled = HandToWriter(self);
            // One turn of the scheduler first, so writes that arrive together queue up
            // behind this one and share its commit: pipelined requests that the same
            // connection task has yet to parse, other tasks. Without it the first write of
            // a burst ran alone, on the very task that reads the rest of the burst.
            tokio::task::yield_now().await;
            std::mem::forget(unled);
        }
        self.lead();
        rx.await.expect("a store job failed with an internal error (a bug); the store keeps running")
    }

    /// Runs a lone write here, when the write connection is free and no other write is
    /// waited for (no hop to the writer thread and back); several queued writes go to the
    /// writer thread as one group, so this thread goes on reading the requests that
    /// follow while they commit. Returns at once when the connection is busy: its holder
    /// runs the queue after it.
    fn lead(&self) {
        // Others wait for writes too (many in flight): the writer thread takes this one
        // with theirs, while this thread goes on with the requests that follow. Run
        // here, a write among many blocked the connection's task for its duration and
        // kept groups from forming (32 in flight: 13,600/s → 9,400-10,700/s).
        if self.writer.among_others() {
            self.hand_to_writer();
            return;
        }
        let conn = match self.writer.conn.try_lock() {
            Ok(c) => c,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        let lone = {
            let mut q = self.writer.queued();
            if q.len() == 1 {
                q.pop_front()
            } else {
                None
            }
        };
        if let Some(job) = lone {
            self.writer.commit(&conn, vec![job]);
        }
        drop(conn);
        // What is queued now (several writes, or writes that came while this thread held
        // the connection) is the writer thread's.
        self.hand_to_writer();
    }

    /// Asks the writer thread to run the queue, if anything is queued (one message is
    /// enough: it runs the whole queue).
    fn hand_to_writer(&self) {
        if !self.writer.queued().is_empty() && self.jobs.send(Work::Drain).is_err() {
            panic!("forge-store thread stopped");
        }
    }
}

/// Sends the queue to the writer thread when dropped (a grouped write whose caller went
/// away before leading).
struct HandToWriter<'a>(&'a Store);

impl Drop for HandToWriter<'_> {
    fn drop(&mut self) {
        // Not `hand_to_writer`: no panic in a drop.
        let _ = self.0.jobs.send(Work::Drain);
    }
}

/// The writer thread: plain jobs one by one, and the queued grouped writes whenever it
/// holds the connection (after every job, and when a leader left some behind).
fn writer_loop(writer: &Writer, rx: std_mpsc::Receiver<Work>) {
    // Ends the checkpoint thread with this one, a panicking job included.
    let _stop = StopCheckpoints(&writer.checkpoints);
    while let Ok(work) = rx.recv() {
        let mut work = Some(work);
        loop {
            {
                let mut conn = writer.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(Work::Plain(job)) = work.take() {
                    // Once stopped, the connection is read-only: the job's writes fail.
                    let _ = writer.outdated(&conn);
                    // A job that panics must not end the writer thread (every later write
                    // of the process would fail): its caller's channel is dropped (it sees
                    // the job lost) and a transaction it left open is rolled back.
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut conn))).is_err() {
                        tracing::error!("a store job panicked; its transaction, if any, is rolled back");
                        if !conn.is_autocommit() {
                            let _ = conn.execute_batch("ROLLBACK");
                        }
                    }
                    writer.checkpoints.after_commit(&conn);
                    writer.maybe_prune(&conn);
                }
                writer.run_queued(&conn);
            }
            // A write queued after the queue was found empty, while the connection was
            // still held, found it busy: it is this thread's to run.
            if writer.queued().is_empty() {
                break;
            }
        }
    }
}

/// Stops a store's checkpoint thread when dropped.
struct StopCheckpoints<'a>(&'a checkpoint::Checkpoints);

impl Drop for StopCheckpoints<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// One transaction for a group of writes, a savepoint each; results after the commit.
fn run_group(conn: &Connection, group: Vec<GroupJob>, outdated: impl FnOnce(&Connection) -> Option<String>) {
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        abandon(conn, vec![], group, WriteFailure::new("cannot start a write transaction", &e));
        return;
    }
    // Inside the write transaction: no migration can come between the check and the writes.
    if let Some(message) = outdated(conn) {
        abandon(conn, vec![], group, WriteFailure::outdated(message));
        return;
    }
    plans::cache::begin_group();
    let mut delivers: Vec<Deliver> = Vec::with_capacity(group.len());
    let mut jobs = group.into_iter();
    while let Some(job) = jobs.next() {
        if let Err(e) = exec(conn, "SAVEPOINT forge_job") {
            let rest = std::iter::once(job).chain(jobs).collect();
            abandon(conn, delivers, rest, WriteFailure::new("cannot start a savepoint", &e));
            return;
        }
        let mark = plans::cache::pending_mark();
        let (keep, deliver) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Some(conn)))) {
            Ok(r) => r,
            Err(_) => {
                // The job's sender is gone with the panic: its caller sees the dropped job.
                plans::cache::truncate_pending(mark);
                let _ = rollback_job(conn);
                continue;
            }
        };
        delivers.push(deliver);
        if !keep {
            plans::cache::truncate_pending(mark);
        }
        let end = if keep { exec(conn, "RELEASE forge_job") } else { rollback_job(conn) };
        if let Err(e) = end {
            abandon(conn, delivers, jobs.collect(), WriteFailure::new("cannot end a savepoint", &e));
            return;
        }
    }
    let committed = match exec(conn, "COMMIT") {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = exec(conn, "ROLLBACK");
            Err(WriteFailure::new("the transaction did not commit", &e))
        }
    };
    // Before the results go out: a caller that reads its plan back finds it kept.
    plans::cache::end_group(committed.is_ok());
    for d in delivers {
        d(committed.clone());
    }
}

/// Gives up a group: rolls back what ran (nothing of it is kept), fails the jobs that ran
/// and fails the others without running them.
fn abandon(conn: &Connection, ran: Vec<Deliver>, not_run: Vec<GroupJob>, why: WriteFailure) {
    plans::cache::end_group(false);
    if !conn.is_autocommit() {
        let _ = exec(conn, "ROLLBACK");
    }
    for d in ran {
        d(Err(why.clone()));
    }
    for job in not_run {
        let (_, deliver) = job(None);
        deliver(Err(why.clone()));
    }
}

/// Runs `f` in one read transaction (one committed snapshot) on a read connection.
fn in_read_txn<R>(c: &Connection, f: impl FnOnce(&Connection) -> R) -> R {
    let began = exec(c, "BEGIN DEFERRED");
    let r = f(c);
    if began.is_ok() {
        // A read transaction has nothing to keep; ending it releases the snapshot.
        let _ = exec(c, "COMMIT");
    }
    shed_cache(c);
    r
}

/// The most page cache a read connection keeps from one read to the next.
///
/// A read connection's cache only helps the reads that follow before the next write (any
/// commit empties it), so a large one mostly holds memory: after the first publication
/// of 100,000 findings the two reader threads kept 2 MiB each, and the freed pages stay
/// with the allocator's thread arenas unless they are handed back (issue 17). Reads that
/// touch less than this (a file's findings, a plan, the index pages) keep their pages.
const READ_CACHE_KEEP: i64 = 1 << 20;

/// Frees a read connection's page cache when it holds more than [`READ_CACHE_KEEP`].
fn shed_cache(c: &Connection) {
    if cache_used(c) > READ_CACHE_KEEP {
        let _ = c.release_memory();
    }
}

/// The bytes of page cache connection `c` holds (0 if SQLite cannot say).
fn cache_used(c: &Connection) -> i64 {
    let (mut used, mut highest) = (0, 0);
    // SAFETY: the handle is the live connection `c` borrows, used on this thread only;
    // `sqlite3_db_status` reads the connection's counters into the two integers.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_status(
            c.handle(),
            rusqlite::ffi::SQLITE_DBSTATUS_CACHE_USED,
            &mut used,
            &mut highest,
            0,
        )
    };
    if rc == rusqlite::ffi::SQLITE_OK {
        i64::from(used)
    } else {
        0
    }
}

/// Ends a transaction a panicking read left open, so the connection's next read does not
/// run inside a stale snapshot.
fn end_open_txn(c: &Connection) {
    if !c.is_autocommit() {
        let _ = c.execute_batch("ROLLBACK");
    }
}

/// A `LIMIT` clause with its number written into the SQL text. SQLite (3.46 and later)
/// reads a bound `LIMIT ?` at prepare time and marks the statement to be prepared again
/// whenever that parameter is bound, so a cached statement with `LIMIT ?N` was parsed and
/// planned anew on every run (a quarter of a `review-read file=` call's time in a
/// profile). Each limit value is its own cached statement instead.
pub(crate) fn limit(n: usize) -> String {
    format!("LIMIT {n}")
}

/// Runs one statement through the statement cache (the group's fixed statements are
/// parsed once, not per call).
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Undoes the current job's savepoint and ends it.
fn rollback_job(conn: &Connection) -> rusqlite::Result<()> {
    exec(conn, "ROLLBACK TO forge_job")?;
    exec(conn, "RELEASE forge_job")
}

/// Runs `f` in one IMMEDIATE transaction on a connection the caller owns: committed when
/// it returns `Ok`, rolled back otherwise (nothing is half written).
pub fn transact<R, E: From<rusqlite::Error>>(
    conn: &mut Connection,
    f: impl FnOnce(&Transaction) -> Result<R, E>,
) -> Result<R, E> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    match f(&tx) {
        Ok(r) => {
            tx.commit()?;
            Ok(r)
        }
        Err(e) => {
            let _ = tx.rollback();
            Err(e)
        }
    }
}

/// A store in `dir` (a fresh file) holding one running loop `l` of project `p` (session
/// `s1`): the set-up of the store's tests of a loop's rows.
#[cfg(test)]
pub(crate) fn test_store_with_loop(dir: &Path) -> Connection {
    let c = open_connection(&dir.join("f.db")).unwrap();
    c.execute(
        "INSERT INTO loops (project_id, loop_name, status, phase, current_session_id, project_dir, worktree_dir, started_at)
         VALUES ('p', 'l', 'running', 'coding', 's1', '/p', '/w', 0)",
        [],
    )
    .unwrap();
    c
}

#[cfg(test)]
mod tests {
    /// Which open and write errors say what the user can do (a review found a read-only
    /// data directory called "not a usable forge-lsp database", with advice to move it).
    #[test]
    fn read_only_and_busy_errors_name_their_cause() {
        use rusqlite::ffi;
        let err = |code: i32| rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some("x".into()));
        let path = Path::new("/d/forge.db");
        let cases: Vec<(i32, &str)> = vec![
            (ffi::SQLITE_READONLY, "cannot be written"),
            (ffi::SQLITE_READONLY_CANTINIT, "cannot be written"),
            (ffi::SQLITE_READONLY_DIRECTORY, "cannot be written"),
            (ffi::SQLITE_BUSY, "stayed busy"),
            (ffi::SQLITE_NOTADB, "is not a usable forge-lsp database"),
        ];
        for (code, says) in cases {
            let e = OpenError::from_sqlite(path, err(code), not_a_database).to_string();
            assert!(e.contains(says), "{code}: {e}");
        }
        let write = |code: i32| Err::<(), _>(err(code)).db().unwrap_err().message;
        assert!(write(ffi::SQLITE_READONLY).contains("read-only for this user"), "{}", write(ffi::SQLITE_READONLY));
        assert!(write(ffi::SQLITE_BUSY).contains("held the database's lock"), "{}", write(ffi::SQLITE_BUSY));
        assert!(write(ffi::SQLITE_LOCKED).contains("held the database's lock"), "{}", write(ffi::SQLITE_LOCKED));
        assert_eq!(write(ffi::SQLITE_CORRUPT), "database error: x");
    }

    use super::*;

    #[test]
    fn sqlite_reads_overflow_pages_through_its_cache_and_caches_per_connection() {
        // Set by .cargo/config.toml (LIBSQLITE3_FLAGS): without it every read of a plan,
        // on the write connection too, is one `pread` per overflow page.
        let c = Connection::open_in_memory().unwrap();
        let options: Vec<String> = c
            .prepare("PRAGMA compile_options")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(options.iter().any(|o| o.starts_with("THREADSAFE")), "{options:?}");
        assert!(!options.iter().any(|o| o.starts_with("DIRECT_OVERFLOW_READ")), "{options:?}");
        // Also set there: each connection its own page cache (docs/architecture.md).
        assert!(!options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"), "{options:?}");
    }

    #[test]
    fn migrates_once_and_records() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("forge.db");
        let c = open_connection(&p).unwrap();
        assert_eq!(applied_version(&c).unwrap(), latest_version());
        drop(c);
        let c = open_connection(&p).unwrap();
        let n: i64 = c.query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0)).unwrap();
        assert_eq!(n as usize, MIGRATIONS.len());
        let fk: i64 = c.query_row("PRAGMA foreign_keys", [], |r| r.get(0)).unwrap();
        assert_eq!(fk, 1);
        let jm: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(jm, "wal");
        let temp: i64 = c.query_row("PRAGMA temp_store", [], |r| r.get(0)).unwrap();
        assert_eq!(temp, 2, "savepoint journals in memory");
    }

    /// A database another process keeps locked past the busy timeout is named as locked,
    /// not as unusable (whose advice, to move the file away, would be wrong). Takes the
    /// busy timeout (10 s).
    #[test]
    fn a_database_locked_elsewhere_is_named_locked_not_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("forge.db");
        drop(open_connection(&p).unwrap());
        let holder = Connection::open(&p).unwrap();
        holder.execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; DELETE FROM servers;").unwrap();
        let Err(err) = open_connection(&p) else { panic!("opened a locked database") };
        assert!(matches!(err, OpenError::Busy(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("another process holds its lock") && !text.contains("Move it away"), "{text}");
        holder.execute_batch("COMMIT").unwrap();
        drop(holder);
        open_connection(&p).unwrap();
    }

    /// A newer forge-lsp that migrates the database while this store runs: every write
    /// after it is refused, grouped (`outdated`, the tools answer 1004) or plain (the
    /// connection is made read-only), instead of writing by the old schema (review).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_stop_once_a_newer_forge_lsp_migrated_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("forge.db");
        let store = Store::open(&p).unwrap();
        let job =
            |key: &'static str| move |c: &Connection| add_change(c, key).map_err(|e| WriteFailure::new("job", &e));
        store.write_grouped(job("before"), |f| f).await.unwrap();
        // Another process of this version changes the schema: nothing is refused.
        Connection::open(&p).unwrap().execute_batch("CREATE INDEX extra ON changes (at)").unwrap();
        store.write_grouped(job("same version"), |f| f).await.unwrap();
        // A newer one migrates.
        Connection::open(&p)
            .unwrap()
            .execute_batch(
                "BEGIN; INSERT INTO schema_migrations VALUES (999, 'future', 0); CREATE TABLE future (x); COMMIT;",
            )
            .unwrap();
        let failed = store.write_grouped(job("after"), |f| f).await.unwrap_err();
        assert!(
            failed.kind == WriteFailureKind::Outdated && failed.message.contains("schema version 999"),
            "{failed:?}"
        );
        // Every later one too, with the same words (the read-only connection's own error
        // was what the second got before).
        let again = store.write_grouped(job("again"), |f| f).await.unwrap_err();
        assert!(again.kind == WriteFailureKind::Outdated && again.message.contains("schema version 999"), "{again:?}");
        let plain = store.call(|c| add_change(c, "plain")).await;
        assert!(plain.is_err(), "a plain write is refused too: {plain:?}");
        assert_eq!(store.read(changes_count).await.unwrap(), 2, "nothing after the migration was written");
    }

    #[test]
    fn refuses_newer_schema_without_touching_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("forge.db");
        drop(open_connection(&p).unwrap());
        {
            let c = Connection::open(&p).unwrap();
            c.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)", []).unwrap();
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        }
        let before = std::fs::read(&p).unwrap();
        let Err(err) = open_connection(&p) else { panic!("must refuse") };
        let err = err.to_string();
        assert!(err.contains("schema version 999"), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), before);
    }

    #[test]
    fn refuses_corrupt_file_without_touching_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("forge.db");
        let junk =
            b"this is not sqlite at all, just some bytes.........................................................."
                .repeat(50);
        std::fs::write(&p, &junk).unwrap();
        let Err(err) = open_connection(&p) else { panic!("must refuse") };
        let err = err.to_string();
        assert!(err.contains("not a usable forge-lsp database"), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), junk);
    }

    #[test]
    fn failed_transaction_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = open_connection(&dir.path().join("forge.db")).unwrap();
        let r: Result<(), rusqlite::Error> = transact(&mut c, |tx| {
            tx.execute("INSERT INTO changes (project_id, kind, key, at) VALUES ('p','plan','k',0)", [])?;
            Err(rusqlite::Error::InvalidQuery)
        });
        assert!(r.is_err());
        let n: i64 = c.query_row("SELECT count(*) FROM changes", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0);
    }

    fn changes_count(c: &Connection) -> i64 {
        c.query_row("SELECT count(*) FROM changes", [], |r| r.get(0)).unwrap()
    }

    fn add_change(c: &Connection, key: &str) -> rusqlite::Result<()> {
        c.execute("INSERT INTO changes (project_id, kind, key, at) VALUES ('p','plan',?1,0)", [key]).map(|_| ())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_stays_short_under_many_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("forge.db");
        let store = Store::open(&db).unwrap();
        // Four pages or so per write: about 66 MB of WAL if nothing checkpointed it and
        // started it over; about 16 MB with the checkpoints (`checkpoint` module) when the
        // checkpoint thread gets a CPU. On a loaded machine its checkpoint can run long
        // while the writer goes on (writes never wait for it: a commit that finds it
        // running retries at the next commit), and the log grew to 34 MB in one run; the
        // bound checks that the log is started over at all.
        let big = "x".repeat(3900);
        for i in 0..4000 {
            let key = format!("{i}{big}");
            store.write_grouped(move |c| add_change(c, &key), |_| rusqlite::Error::InvalidQuery).await.unwrap();
        }
        let wal = std::fs::metadata(dir.path().join("forge.db-wal")).unwrap().len();
        assert!(wal < 48 << 20, "the WAL grew to {wal} bytes: nothing checkpointed it and started it over");
        assert_eq!(store.read(changes_count).await.unwrap(), 4000);
    }

    /// A store that keeps writing prunes the change feed every [`PRUNE_EVERY`]: rows older
    /// than an hour go, newer ones stay. (Only the first connection's sweep pruned it.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writing_store_prunes_the_change_feed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        store.call(|c| add_change(c, "old")).await.unwrap();
        store.write_grouped(|c| add_change(c, "unpruned yet"), |_| rusqlite::Error::InvalidQuery).await.unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 2, "not yet {PRUNE_EVERY:?}");
        let long_ago = std::time::Instant::now().checked_sub(PRUNE_EVERY * 2).expect("an instant that long ago");
        *store.writer.pruned.lock().unwrap() = long_ago;
        let now = now_ms();
        store
            .write_grouped(
                move |c| {
                    c.execute("INSERT INTO changes (project_id, kind, key, at) VALUES ('p','plan','new',?1)", [now])
                        .map(|_| ())
                },
                |_| rusqlite::Error::InvalidQuery,
            )
            .await
            .unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 1, "the rows of epoch 0 are pruned, the new one kept");
    }

    /// A plain job that panics inside its transaction loses its job and its transaction;
    /// the writer thread keeps running the next ones. It ended the thread before (every
    /// later write of the process panicked with "forge-store thread stopped").
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_leaves_the_writer_running() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        let s2 = store.clone();
        let lost = tokio::spawn(async move {
            s2.call(|c| {
                c.execute_batch("BEGIN IMMEDIATE").unwrap();
                add_change(c, "lost").unwrap();
                panic!("a bug in a job");
            })
            .await
        })
        .await;
        assert!(lost.is_err(), "the caller sees its job fail");
        store.call(|c| add_change(c, "kept")).await.unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 1, "the panicked job's write was rolled back");
    }

    /// A grouped write that finds the database locked by another connection past the busy
    /// timeout fails as `busy` (the tools answer 1005, "try again"), with nothing kept; the
    /// next one, after the lock is gone, is written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_held_off_by_another_connections_lock_fails_as_busy() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        let holder = Connection::open(dir.path().join("forge.db")).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let job =
            |key: &'static str| move |c: &Connection| add_change(c, key).map_err(|e| WriteFailure::new("job", &e));
        let failed = store.write_grouped(job("held off"), |f| f).await.unwrap_err();
        assert!(failed.kind == WriteFailureKind::Busy && failed.message.contains("database is locked"), "{failed:?}");
        holder.execute_batch("ROLLBACK").unwrap();
        store.write_grouped(job("written"), |f| f).await.unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn readers_see_committed_writes_and_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 0);
        store.write_grouped(|c| add_change(c, "a"), |_| rusqlite::Error::InvalidQuery).await.unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 1, "a read after the reply sees the write");
        let refused = store.read(|c| add_change(c, "b")).await.unwrap();
        let e = refused.expect_err("a read connection must refuse writes").to_string();
        assert!(e.contains("readonly") || e.contains("read-only"), "{e}");
        assert_eq!(store.read(changes_count).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_read_connection_keeps_a_small_cache_and_frees_a_large_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        // About 4 MiB of rows: a full scan touches about a thousand pages.
        store
            .call(|c| {
                c.execute_batch(
                    "CREATE TABLE scratch(x BLOB);
                     WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4000)
                     INSERT INTO scratch SELECT randomblob(1000) FROM n;",
                )
            })
            .await
            .unwrap();
        let scan = |c: &Connection| {
            let total: i64 = c.query_row("SELECT sum(length(x)) FROM scratch", [], |r| r.get(0)).unwrap();
            (total, cache_used(c))
        };
        let one = |c: &Connection| {
            let n: i64 = c.query_row("SELECT length(x) FROM scratch WHERE rowid = 7", [], |r| r.get(0)).unwrap();
            (n, cache_used(c))
        };
        // What a read finds when it starts is what the one before it left (on the pool,
        // the connection of whichever reader thread takes the job: each is within the
        // limit, having read nothing or shed what it read).
        let left = |c: &Connection| cache_used(c);
        let writer_before = store.call(|c| cache_used(c)).await;
        assert!(writer_before > READ_CACHE_KEEP, "the write connection holds {writer_before} bytes of cache");
        let (total, during) = store.read(scan).await.unwrap();
        assert_eq!(total, 4_000_000);
        assert!(during > READ_CACHE_KEEP, "the scan held {during} bytes of cache");
        for _ in 0..4 {
            let after = store.read(left).await.unwrap();
            assert!(after <= READ_CACHE_KEEP, "a reader kept {after} bytes of cache after a large read");
        }
        // Freeing a reader's cache leaves the other connections' alone.
        assert_eq!(store.call(|c| cache_used(c)).await, writer_before, "the write connection's cache was emptied");
        // On this thread's own connection, both ways.
        let (_, during) = store.read_here(scan).unwrap();
        assert!(during > READ_CACHE_KEEP, "the scan held {during} bytes of cache");
        let after = store.read_here(left).unwrap();
        assert!(after <= READ_CACHE_KEEP, "{after} bytes of cache were kept after a large read");
        let (n, during) = store.read_here(one).unwrap();
        assert_eq!(n, 1000);
        assert!(during > 0);
        assert_eq!(store.read_here(left).unwrap(), during, "a small read's pages are kept for the next read");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_here_see_commits_refuse_writes_and_survive_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        assert_eq!(store.read_here(changes_count).unwrap(), 0);
        store.write_grouped(|c| add_change(c, "a"), |_| rusqlite::Error::InvalidQuery).await.unwrap();
        assert_eq!(store.read_here(changes_count).unwrap(), 1, "the kept connection sees a later commit");
        let e = store.read_here(|c| add_change(c, "b")).unwrap().expect_err("a read connection must refuse writes");
        assert!(e.to_string().contains("readonly"), "{e}");
        let s = store.clone();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.read_here(|c| {
                let _ = changes_count(c);
                panic!("a bug in a read")
            })
        }));
        assert!(panicked.is_err());
        // The connection went back without the panicking read's transaction: a new
        // commit is visible to the next read on this thread.
        store.write_grouped(|c| add_change(c, "c"), |_| rusqlite::Error::InvalidQuery).await.unwrap();
        assert_eq!(store.read_here(changes_count).unwrap(), 2);
        assert_eq!(HERE.with(|h| h.borrow().len()), 1, "one kept connection for this thread and database");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn grouped_writes_keep_the_good_and_roll_back_the_failed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        // Hold the writer so the next writes queue up and run as one group.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocker = {
            let s = store.clone();
            tokio::spawn(async move { s.call(move |_| held.recv().ok()).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut calls = vec![];
        for i in 0..40 {
            let s = store.clone();
            calls.push(tokio::spawn(async move {
                s.write_grouped(
                    move |c| {
                        add_change(c, &format!("k{i}"))?;
                        if i % 10 == 3 {
                            return Err(rusqlite::Error::InvalidQuery); // its row must go
                        }
                        Ok(i)
                    },
                    |_| rusqlite::Error::InvalidQuery,
                )
                .await
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        release.send(()).unwrap();
        blocker.await.unwrap();
        let mut ok = 0;
        for (i, c) in calls.into_iter().enumerate() {
            match c.await.unwrap() {
                Ok(v) => {
                    assert_eq!(v, i);
                    ok += 1;
                }
                Err(_) => assert_eq!(i % 10, 3, "only the failing jobs fail"),
            }
        }
        assert_eq!(ok, 36);
        let keys: Vec<String> = store
            .read(|c| {
                let mut st = c.prepare("SELECT key FROM changes ORDER BY id").unwrap();
                st.query_map([], |r| r.get(0)).unwrap().collect::<rusqlite::Result<Vec<String>>>().unwrap()
            })
            .await
            .unwrap();
        assert_eq!(keys.len(), 36);
        assert!(keys.iter().all(|k| !k.ends_with('3')), "{keys:?}");
    }

    #[tokio::test]
    async fn a_failed_commit_fails_every_write_of_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forge.db");
        let store = Store::open(&path).unwrap();
        // A deferred foreign key violated at commit: the commit itself fails.
        store
            .call(|c| {
                c.execute_batch(
                    "CREATE TABLE parent (id INTEGER PRIMARY KEY);
                     CREATE TABLE child (pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
                )
            })
            .await
            .unwrap();
        let r = store
            .write_grouped(
                |c| {
                    add_change(c, "lost").map_err(|e| e.to_string())?;
                    c.execute("INSERT INTO child (pid) VALUES (42)", []).map(|_| ()).map_err(|e| e.to_string())
                },
                |m| m.message,
            )
            .await;
        let e = r.expect_err("the commit must fail");
        assert!(e.contains("did not commit"), "{e}");
        assert_eq!(store.read(changes_count).await.unwrap(), 0, "nothing of the group is kept");
        // The writer goes on.
        store.write_grouped(|c| add_change(c, "next").map_err(|e| e.to_string()), |m| m.message).await.unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 1);

        // Writes that queued up together share one commit: a good write grouped with one
        // that breaks the commit fails with it, and neither is kept.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocker = {
            let s = store.clone();
            tokio::spawn(async move { s.call(move |_| held.recv().ok()).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let good = {
            let s = store.clone();
            tokio::spawn(async move {
                s.write_grouped(|c| add_change(c, "good").map_err(|e| e.to_string()), |m| m.message).await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let bad = {
            let s = store.clone();
            tokio::spawn(async move {
                s.write_grouped(
                    |c| c.execute("INSERT INTO child (pid) VALUES (43)", []).map(|_| ()).map_err(|e| e.to_string()),
                    |m| m.message,
                )
                .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        release.send(()).unwrap();
        blocker.await.unwrap();
        let e = good.await.unwrap().expect_err("grouped with a write that fails the commit");
        assert!(e.contains("did not commit"), "{e}");
        assert!(bad.await.unwrap().is_err());
        assert_eq!(store.read(changes_count).await.unwrap(), 1, "the good write of the failed group is not kept");
    }

    #[test]
    fn a_bound_limit_makes_sqlite_prepare_again_and_a_literal_one_does_not() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3);").unwrap();
        let reprepared = |sql: &str, bind: bool| -> i32 {
            for n in [1i64, 2, 1] {
                let mut st = c.prepare_cached(sql).unwrap();
                let get = |r: &rusqlite::Row| r.get::<_, i64>(0);
                let rows: Vec<i64> = if bind {
                    st.query_map([n], get).unwrap().collect::<rusqlite::Result<_>>().unwrap()
                } else {
                    st.query_map([], get).unwrap().collect::<rusqlite::Result<_>>().unwrap()
                };
                assert!(!rows.is_empty());
            }
            c.prepare_cached(sql).unwrap().get_status(rusqlite::StatementStatus::RePrepare)
        };
        // The reason for `limit`: if this stops holding (a newer SQLite), a bound limit is
        // fine again.
        assert!(reprepared("SELECT id FROM t ORDER BY id LIMIT ?1", true) > 0);
        assert_eq!(reprepared(&format!("SELECT id FROM t ORDER BY id {}", limit(2)), false), 0);
    }

    #[tokio::test]
    async fn a_lone_grouped_write_runs_on_the_calling_thread() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        let here = std::thread::current().id();
        let ran_on = store
            .write_grouped(
                |c| add_change(c, "a").map(|_| std::thread::current().id()),
                |_| rusqlite::Error::InvalidQuery,
            )
            .await
            .unwrap();
        assert_eq!(ran_on, here, "the connection was free: no hop to the writer thread");
        assert_eq!(store.read(changes_count).await.unwrap(), 1);
    }

    #[test]
    fn no_write_is_left_in_the_queue_under_contention() {
        // Threads racing for the connection, each with its own runtime, plus plain jobs on
        // the writer thread: every write must come back (a queued write that found the
        // connection busy is run by whoever held it).
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let s = store.clone();
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    rt.block_on(async {
                        for i in 0..300 {
                            let w = s.write_grouped(
                                move |c| add_change(c, &format!("t{t}-{i}")),
                                |_| rusqlite::Error::InvalidQuery,
                            );
                            tokio::time::timeout(std::time::Duration::from_secs(20), w)
                                .await
                                .expect("a queued write was left behind")
                                .unwrap();
                            if i % 50 == 0 {
                                s.call(|c| changes_count(c)).await;
                            }
                        }
                    })
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        assert_eq!(rt.block_on(store.read(changes_count)).unwrap(), 1800);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_do_not_wait_for_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        store.write_grouped(|c| add_change(c, "a"), |_| rusqlite::Error::InvalidQuery).await.unwrap();
        // The writer is busy (a long job holding the write transaction open).
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocker = {
            let s = store.clone();
            tokio::spawn(async move {
                s.call(move |c| {
                    c.execute_batch("BEGIN IMMEDIATE").unwrap();
                    add_change(c, "uncommitted").unwrap();
                    held.recv().ok();
                    c.execute_batch("COMMIT").unwrap();
                })
                .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), store.read(changes_count))
            .await
            .expect("a read must not queue behind the writer")
            .unwrap();
        assert_eq!(n, 1, "a read sees the last commit, not the write in progress");
        release.send(()).unwrap();
        blocker.await.unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn a_panicking_read_loses_its_reply_not_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        for _ in 0..reader_count() * 2 {
            let r = store.read(|c| -> i64 {
                let _ = changes_count(c);
                panic!("a bug in a read");
            });
            assert!(r.await.is_err());
        }
        store.write_grouped(|c| add_change(c, "after"), |_| rusqlite::Error::InvalidQuery).await.unwrap();
        assert_eq!(store.read(changes_count).await.unwrap(), 1, "readers still work and see new writes");
    }
}
