//! The loop lock: who may change who runs a loop, one at a time, across processes.
//!
//! A runner's step that does git work in the loop's worktree before it writes the step
//! (a section's checkpoint commit, the snapshot handed to an audit, the teardown commit)
//! checks that the loop is still its own, commits, and then writes the row in a
//! transaction that checks again. The check inside the transaction keeps the row right,
//! but a restart or cancel by another process between the first check and the write
//! would get a commit on the branch from a runner that no longer owns the loop. So the
//! runner holds this lock from its first check to its write, and a restart or cancel
//! holds it while it reads, checks and writes the loop's row: the two happen one after
//! the other, never interleaved.
//!
//! The lock is an advisory `flock` on `<dataDir>/locks/<hash>.lock` (0600, in a 0700
//! directory), one file per project and loop name. The kernel releases it when its holder
//! dies, so a crashed process never leaves a loop locked. A waiter blocks in `flock` on a
//! blocking thread (the kernel wakes it when the lock is let go), until a deadline; on a
//! filesystem without `flock`, or after the deadline, the caller decides (a runner goes on without it, as the transaction's check
//! still keeps the row right; a restart or cancel answers that the loop is busy).
//!
//! Invariant: nobody waits for this lock while holding the store's write lock or
//! another loop's lock, and a holder never waits for a runner to stop (a restart stops its
//! own runner before it takes the lock).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// How long a runner's step, a restart or a cancel waits for the lock. Its holders hold it
/// for a read, a few commits and a write; a holder that takes longer is stuck.
pub const WAIT: Duration = Duration::from_secs(30);

/// A held loop lock; dropping it (closing its file) releases it.
#[derive(Debug)]
pub struct LoopLock {
    _file: std::fs::File,
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another forge-lsp process is changing the loop (held longer than {0:?})")]
    Busy(Duration),
    #[error("cannot open the loop's lock file {path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, std::io::Error),
}

/// The lock file of `loop_name` in `project`.
pub fn path(data_dir: &Path, project: &str, loop_name: &str) -> PathBuf {
    let mut h = Sha256::new();
    h.update(project.as_bytes());
    h.update([0]);
    h.update(loop_name.as_bytes());
    let hex: String = h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
    data_dir.join("locks").join(format!("{hex}.lock"))
}

/// Takes the lock of `loop_name`, waiting at most `wait` for its holder.
///
/// A waiter blocks in `flock` on a blocking thread rather than polling, so the kernel
/// wakes it when the holder lets go: a runner whose steps follow each other within
/// milliseconds cannot take the lock back again and again before a restart that waits for
/// it. A waiter given up on (timed out, or its caller gone) lets go of the lock as soon as
/// its thread gets it.
pub async fn acquire(data_dir: &Path, project: &str, loop_name: &str, wait: Duration) -> Result<LoopLock, LockError> {
    let at = path(data_dir, project, loop_name);
    let file = open(&at)?;
    if try_lock(&file).map_err(|e| LockError::Io(at.clone(), e))? {
        return Ok(LoopLock { _file: file });
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::task::spawn_blocking(move || {
        // Nobody waits any more: the file, and with it the lock, is dropped here.
        let _ = tx.send(lock_blocking(file));
    });
    match tokio::time::timeout(wait, rx).await {
        Ok(Ok(Ok(file))) => Ok(LoopLock { _file: file }),
        Ok(Ok(Err(e))) => Err(LockError::Io(at, e)),
        Ok(Err(_)) => Err(LockError::Io(at, std::io::Error::other("the waiting thread ended"))),
        Err(_) => Err(LockError::Busy(wait)),
    }
}

/// [`acquire`] for a caller without a runtime (`forge-lsp cleanup`): the wait blocks this
/// thread, the `flock` itself another one (which lets go of the lock as soon as it gets it
/// when nobody waits any more).
pub fn acquire_blocking(
    data_dir: &Path,
    project: &str,
    loop_name: &str,
    wait: Duration,
) -> Result<LoopLock, LockError> {
    let at = path(data_dir, project, loop_name);
    let file = open(&at)?;
    if try_lock(&file).map_err(|e| LockError::Io(at.clone(), e))? {
        return Ok(LoopLock { _file: file });
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let _ = tx.send(lock_blocking(file));
    });
    match rx.recv_timeout(wait) {
        Ok(Ok(file)) => Ok(LoopLock { _file: file }),
        Ok(Err(e)) => Err(LockError::Io(at, e)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(LockError::Busy(wait)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err(LockError::Io(at, std::io::Error::other("the waiting thread ended")))
        }
    }
}

/// Waits in `flock` until `file` holds the lock.
fn lock_blocking(file: std::fs::File) -> std::io::Result<std::fs::File> {
    loop {
        // SAFETY: flock on a descriptor `file` owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Takes the lock if it is free: `Ok(false)` when another open file holds it.
fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor `file` owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

fn open(file: &Path) -> Result<std::fs::File, LockError> {
    let io = |e| LockError::Io(file.to_path_buf(), e);
    if let Some(dir) = file.parent() {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
    }
    std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(file).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_at_a_time_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let held = acquire(dir.path(), "p", "loop-a", Duration::ZERO).await.unwrap();
        // A second open file of the same lock (as another process would have) waits.
        let busy = acquire(dir.path(), "p", "loop-a", Duration::from_millis(30)).await;
        assert!(matches!(busy, Err(LockError::Busy(_))), "{busy:?}");
        // Other loops, and the same name in another project, are other locks.
        let _b = acquire(dir.path(), "p", "loop-b", Duration::ZERO).await.unwrap();
        let _c = acquire(dir.path(), "q", "loop-a", Duration::ZERO).await.unwrap();
        drop(held);
        // The waiter given up on above gets the lock when it is let go, and lets it go.
        acquire(dir.path(), "p", "loop-a", Duration::from_secs(5)).await.unwrap();
        // The same for a caller without a runtime. (Waiting: the waiter given up on above may
        // take the lock for a moment after the acquire just before it let it go.)
        let held = acquire_blocking(dir.path(), "p", "loop-a", Duration::from_secs(5)).unwrap();
        let busy = acquire_blocking(dir.path(), "p", "loop-a", Duration::from_millis(30));
        assert!(matches!(busy, Err(LockError::Busy(_))), "{busy:?}");
        drop(held);
        acquire_blocking(dir.path(), "p", "loop-a", Duration::from_secs(5)).unwrap();
    }

    #[tokio::test]
    async fn a_waiter_gets_the_lock_when_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let held = acquire(dir.path(), "p", "l", Duration::ZERO).await.unwrap();
        let d = dir.path().to_path_buf();
        let waiter = tokio::spawn(async move { acquire(&d, "p", "l", Duration::from_secs(10)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(held);
        waiter.await.unwrap().unwrap();
    }

    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let _l = rt.block_on(acquire(dir.path(), "p", "a name/with ../ odd bytes\n", Duration::ZERO)).unwrap();
        let f = path(dir.path(), "p", "a name/with ../ odd bytes\n");
        assert_eq!(f.parent().unwrap(), dir.path().join("locks"));
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(f.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    }
}
