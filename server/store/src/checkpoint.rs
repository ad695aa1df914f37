//! Checkpoints off the write path.
//!
//! In WAL mode SQLite copies the log back into the database file (a checkpoint) when a
//! commit leaves the log at 1,000 pages or more, inside that commit, on the committing
//! thread: the write that crosses the threshold waits for the copy and its syncs, and so
//! does every write queued behind it (with about seven pages per review-write, one write in
//! 140). A [`Store`](crate::Store)'s write connection has that automatic checkpoint
//! replaced by a hook that only notes how long the log is ([`hook`]); after a commit that
//! leaves it at [`FRAMES`] pages or more, [`Checkpoints::after_commit`] asks this module's
//! thread to checkpoint, on a connection of its own, while writes go on.
//!
//! That checkpoint is `PASSIVE`: it takes no write lock and waits for no one, so it copies
//! the log as it was when it started. The log starts over from its beginning at the first
//! write that finds every frame copied; until then each commit asks again, and each
//! checkpoint has only the frames written during the last one left to copy, so they
//! catch up as soon as writes leave a gap as long as one checkpoint. If writes never
//! do, the log grows: when a commit leaves it at [`MOST_FRAMES`] pages or more, the
//! committing thread checkpoints right there, as SQLite would have (the thread has
//! copied most of it by then), and the next write starts the log over.
//!
//! Invariant: the log of a `Store`'s database stays under about [`MOST_FRAMES`] pages plus
//! what is written while the thread finishes a checkpoint (the committing thread's own
//! finds it busy and is tried again at the next commit), unless a reader holds an old
//! snapshot (then no checkpoint can finish, as with SQLite's own). Connections opened outside a `Store` (`forge-lsp call` run
//! in its own process, migrations) keep SQLite's automatic checkpoint.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use rusqlite::Connection;

use crate::Waker;

/// Log growth (pages) after which the thread is asked to checkpoint: SQLite's own
/// threshold for its automatic checkpoint.
const FRAMES: u32 = 1000;

/// Log length (pages, 16 MB) at which the committing thread checkpoints itself.
const MOST_FRAMES: u32 = 4 * FRAMES;

thread_local! {
    /// The log length the last commit on this thread left, until read ([`take_frames`]).
    static LOG_FRAMES: Cell<u32> = const { Cell::new(0) };
}

fn note_frames(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    LOG_FRAMES.with(|f| f.set(u32::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// Replaces `conn`'s automatic checkpoint: each commit notes the log's length for
/// [`take_frames`] on the committing thread (SQLite calls the hook there, after the commit).
pub(crate) fn hook(conn: &Connection) {
    conn.wal_hook(Some(note_frames));
}

/// The log length the last commit on this thread left (0 when nothing was committed since
/// the last call).
fn take_frames() -> u32 {
    LOG_FRAMES.with(|f| f.replace(0))
}

/// The checkpoint thread of one database: started at the first request
/// ([`Checkpoints::due`]; an idle store has none), ended by [`Checkpoints::stop`].
pub(crate) struct Checkpoints {
    path: PathBuf,
    signal: Arc<Signal>,
    /// Whether the thread runs (`false`: it could not be started; the committing thread's
    /// own checkpoints at [`MOST_FRAMES`] still bound the log).
    started: OnceLock<bool>,
}

/// What the store and its checkpoint thread share.
#[derive(Default)]
struct Signal {
    wanted: Waker,
    stopped: AtomicBool,
}

impl Checkpoints {
    pub(crate) fn new(path: PathBuf) -> Self {
        Checkpoints { path, signal: Arc::default(), started: OnceLock::new() }
    }

    /// After a commit on this thread, on `conn` (the write connection, hooked): asks the
    /// thread for a checkpoint while the log is at [`FRAMES`] pages or more, and
    /// checkpoints on `conn` when it is at [`MOST_FRAMES`] or more (module docs). Nothing
    /// when nothing was committed since the last call.
    pub(crate) fn after_commit(&self, conn: &Connection) {
        let frames = take_frames();
        if frames >= MOST_FRAMES {
            // A busy result (the thread is checkpointing) is retried at the next commit.
            if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                tracing::warn!("checkpoint on the write connection failed: {e}");
            }
        } else if frames >= FRAMES {
            self.due();
        }
    }

    /// Asks for a checkpoint (requests while one runs make one more after it), starting
    /// the thread at the first.
    fn due(&self) {
        let running = *self.started.get_or_init(|| {
            let (signal, path) = (self.signal.clone(), self.path.clone());
            let spawned =
                std::thread::Builder::new().name("forge-store-checkpoint".into()).spawn(move || run(&signal, &path));
            if let Err(e) = &spawned {
                tracing::warn!("cannot start the checkpoint thread of {}: {e}", self.path.display());
            }
            spawned.is_ok()
        });
        if running {
            self.signal.wanted.wake();
        }
    }

    /// Ends the thread, if it runs (and closes its connection) once its current
    /// checkpoint is done.
    pub(crate) fn stop(&self) {
        self.signal.stopped.store(true, Ordering::Release);
        self.signal.wanted.wake();
    }
}

fn run(signal: &Signal, path: &std::path::Path) {
    let mut conn: Option<Connection> = None;
    loop {
        let woken = signal.wanted.wait(std::time::Duration::from_secs(3600));
        if signal.stopped.load(Ordering::Acquire) {
            return;
        }
        if !woken {
            continue;
        }
        if conn.is_none() {
            // Never creates the file: it is the store's, opened and migrated.
            let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
            match Connection::open_with_flags(path, flags) {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::warn!("cannot open {} to checkpoint its log: {e}", path.display());
                    continue;
                }
            }
        }
        if let Some(c) = &conn {
            // Returns (busy, log pages, pages copied); a busy or partial checkpoint is
            // retried at the next request.
            if let Err(e) = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                tracing::warn!("checkpoint of {} failed: {e}", path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::{self, Kind};

    fn write_pages(c: &Connection, commits: usize) {
        // A 3,900-byte key: about one page of the log per commit, plus the table's.
        let big = "x".repeat(3900);
        for i in 0..commits {
            changes::record(c, "p", Kind::Plan, &format!("{i}{big}"), 0).unwrap();
        }
    }

    /// A fresh database with an empty log, its write connection with the hook, and the
    /// database file's size.
    struct Hooked {
        _dir: tempfile::TempDir,
        path: PathBuf,
        conn: Connection,
        before: u64,
    }

    fn hooked() -> Hooked {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forge.db");
        let conn = crate::open_connection(&path).unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        hook(&conn);
        let before = db_bytes(&path);
        Hooked { _dir: dir, path, conn, before }
    }

    fn db_bytes(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn the_hook_notes_the_log_instead_of_checkpointing() {
        let h = hooked();
        assert_eq!(take_frames(), 0, "nothing committed yet");
        write_pages(&h.conn, 600);
        let frames = take_frames();
        assert!(frames >= FRAMES, "600 commits of a page or more leave {frames} frames");
        assert_eq!(take_frames(), 0, "read once");
        assert_eq!(db_bytes(&h.path), h.before, "no automatic checkpoint copied the log into the file");
    }

    #[test]
    fn the_thread_copies_the_log_while_the_writer_goes_on() {
        let h = hooked();
        let checkpoints = Checkpoints::new(h.path.clone());
        write_pages(&h.conn, 600);
        assert_eq!(db_bytes(&h.path), h.before, "the commits did not checkpoint themselves");
        checkpoints.after_commit(&h.conn);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while db_bytes(&h.path) < h.before + 600 * 4096 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(db_bytes(&h.path) >= h.before + 600 * 4096, "the thread copied the log into the file");
        checkpoints.stop();
    }

    #[test]
    fn a_log_that_never_pauses_is_checkpointed_by_the_committing_thread() {
        let h = hooked();
        // Stopped at once: only the committing thread can checkpoint.
        let checkpoints = Checkpoints::new(h.path.clone());
        checkpoints.stop();
        // A page of the log per commit or more.
        write_pages(&h.conn, MOST_FRAMES as usize);
        checkpoints.after_commit(&h.conn);
        assert!(db_bytes(&h.path) >= h.before + 1000 * 4096, "the committing thread copied the log");
        write_pages(&h.conn, 1);
        assert!(take_frames() < 10, "the next write started the log over");
    }
}
