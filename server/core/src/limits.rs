//! The process's limit on open files.
//!
//! A server holds one descriptor per folder of a file it stages in an all-or-nothing write
//! (`beneath`), and a search keeps its walkers' folders open: a rewrite spread over more
//! folders than the usual soft limit (1,024, which an editor's language server inherits)
//! failed with "Too many open files" however it was retried (review YO). [`raise`] lifts the
//! soft limit to the hard one at start-up, as Go's runtime does; the processes the server
//! starts (agents, shell commands, plugin tools) get the limit it started with back
//! ([`restore_in_child`]): a program using `select()` breaks on descriptors past 1,024.

use std::sync::atomic::{AtomicU64, Ordering};

/// The soft limit found at start-up, when [`raise`] changed it (`u64::MAX`: unchanged).
static ORIGINAL_SOFT: AtomicU64 = AtomicU64::new(u64::MAX);

/// The most a raise goes to: a hard limit of "unlimited" is not a number to allocate by.
const CEILING: u64 = 1 << 20;

/// Raises the soft limit on open files to the hard limit (at most 2^20). Returns the
/// limits before and after, or `None` when nothing changed (already there, or refused).
pub fn raise() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    let (soft, hard) = (lim.rlim_cur, lim.rlim_max);
    let target = hard.min(CEILING);
    if soft >= target {
        return None;
    }
    let raised = libc::rlimit { rlim_cur: target, rlim_max: hard };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return None;
    }
    ORIGINAL_SOFT.store(soft, Ordering::Relaxed);
    Some((soft, target))
}

/// In a child between fork and exec: puts back the soft limit found before [`raise`].
/// Only a system call, no allocation (async-signal-safe in practice).
pub fn restore_in_child() {
    let soft = ORIGINAL_SOFT.load(Ordering::Relaxed);
    if soft == u64::MAX {
        return;
    }
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read or write only the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = soft.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
