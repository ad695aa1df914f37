//! Process groups of agent turns and sandboxed commands, and the environment marker of
//! the sandbox. A leaf: it imports no other module of this crate.

/// Set inside the sandbox, so a shim knows it is already inside.
pub const INSIDE_ENV: &str = "FORGE_SANDBOX";

/// Kills process group `pgid` (its leader's pid) with SIGKILL. A group that is gone
/// already is not an error.
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        // 0 would be our own group and 1 would mean every process we may signal.
        return;
    }
    // SAFETY: killpg only sends a signal; it touches no memory of ours.
    let r = unsafe { libc::killpg(pgid, libc::SIGKILL) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!("cannot kill process group {pgid}: {e}");
        }
    }
}
