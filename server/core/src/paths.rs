//! Where a server process puts its private callback socket, and the checks that keep
//! another local user from standing in for it.
//!
//! Each process gets a directory of its own that holds nothing but its socket, so a
//! loop sandbox can be given that directory read-write without exposing anything else:
//! `$XDG_RUNTIME_DIR/forge-lsp/<pid>/forge.sock`, where `forge-lsp/` must be ours (owner,
//! mode 0700, not a symlink), or without `XDG_RUNTIME_DIR` a fresh directory with an
//! unpredictable name made by `mkdtemp` (`/tmp/forge-lsp-XXXXXX/forge.sock`). Paths stay
//! short: Unix socket paths are limited to 108 bytes.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The socket's file name inside the process's directory.
pub const SOCKET_NAME: &str = "forge.sock";

/// Why a socket directory was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// This process's effective user id.
/// The credentials the kernel recorded for the other end of the Unix socket `sock`
/// (`SO_PEERCRED`): the connecting process for a server's accepted socket, the listener for
/// a client's. `None` when they cannot be read.
pub fn peer_cred(sock: std::os::fd::BorrowedFd<'_>) -> Option<libc::ucred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `sock` is a live descriptor borrowed for the call; `cred` and `len` are valid
    // for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &raw mut len)
    };
    (rc == 0).then_some(cred)
}

/// The capacity [`enlarge_pipe`] asks for (Linux's default is 64 KiB). A plan-sized
/// message (the bench's 2,000-line plan is 178 KB, its numbered page 189 KB) then goes in
/// one `write` instead of three, each of the others waiting for the reader to drain the
/// pipe and for the writer to be woken again: in `forge-bench` this took 10–20% off
/// plan-read, plan-write and `textDocumentContent` over the LSP pipes (docs/performance.md).
/// The kernel takes pages for a pipe only as data is written, so an idle pipe costs
/// nothing more; the size counts against the user's `pipe-user-pages-soft` (64 MiB by
/// default), 512 KiB for a server's two pipes, where 1 MiB pipes would give half as many
/// servers before the limit shrinks every new pipe of that user.
pub const PIPE_CAPACITY: usize = 256 << 10;

/// Makes the pipe `fd` [`PIPE_CAPACITY`] large, for the standard streams of `forge-lsp
/// serve` and `forge-lsp mcp`. Only ever enlarges: a pipe the client already made larger
/// is left as it is; so is anything that is not a pipe (`F_GETPIPE_SZ` fails on it). A
/// refusal (the user's pipe pages over `pipe-user-pages-soft`, a smaller `pipe-max-size`)
/// leaves the pipe as it was, which works as before.
pub fn enlarge_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let want = PIPE_CAPACITY as libc::c_int;
    // SAFETY: F_GETPIPE_SZ and F_SETPIPE_SZ (an integer argument) on a live descriptor
    // borrowed for the call.
    unsafe {
        if (0..want).contains(&libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ)) {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, want);
        }
    }
}

/// How process `pid` is stopped, as `/proc/<pid>/stat` says: `Some('T')` by a signal
/// (SIGSTOP, a shell's Ctrl-Z), `Some('t')` by a tracer (a debugger); `None` when it is not
/// stopped or its state cannot be read (another pid namespace, no `/proc`). A stopped
/// server still accepts connections into its backlog but answers nothing until continued.
/// Stopped means every thread: a debugger in non-stop mode may stop the main thread alone,
/// and the others still answer (a review). The threads are read only when the main one is
/// stopped, so a running server costs one read.
pub fn stop_state(pid: i32) -> Option<char> {
    if pid <= 0 {
        return None;
    }
    let state = |stat: String| stat_state(&stat).filter(|s| matches!(s, 'T' | 't'));
    let main = state(std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        state(stat)?;
    }
    Some(main)
}

/// The state letter of a `/proc/<pid>/stat` line: the field after the command, which is
/// in parentheses and may itself hold `)` and spaces.
fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Checks that `dir` is a real directory (not a symlink) owned by us with mode 0700.
pub fn check_private_dir(dir: &Path) -> Result<(), Refused> {
    let m = std::fs::symlink_metadata(dir).map_err(|e| Refused(format!("cannot inspect {}: {e}", dir.display())))?;
    if m.file_type().is_symlink() {
        return Err(Refused(format!(
            "{} is a symbolic link; the private socket directory must be a real directory (remove the link)",
            dir.display()
        )));
    }
    if !m.is_dir() {
        return Err(Refused(format!("{} is not a directory", dir.display())));
    }
    if m.uid() != euid() {
        return Err(Refused(format!(
            "{} is owned by uid {}, not by this user (uid {}); another user could stand in for the socket",
            dir.display(),
            m.uid(),
            euid()
        )));
    }
    let mode = m.permissions().mode() & 0o7777;
    if mode != 0o700 {
        return Err(Refused(format!(
            "{} has mode {mode:04o}, expected 0700 (other users could replace the socket in it); fix it with `chmod 700 {}` or remove it",
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// Creates `dir` and its missing parents as private directories (0700 under the usual
/// umasks); existing ones are left as they are. For directories of private files (the
/// data directory's prompts and usage, webfetch's cache), not for sockets
/// ([`ensure_private_dir`] checks those).
pub fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates `dir` with mode 0700 (exactly, whatever the umask) or, if it exists, checks
/// it is ours ([`check_private_dir`]). An existing directory is never chmod-ed.
pub fn ensure_private_dir(dir: &Path) -> Result<(), Refused> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Refused(format!("cannot set the mode of {}: {e}", dir.display())))?;
            check_private_dir(dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => check_private_dir(dir),
        Err(e) => Err(Refused(format!("cannot create {}: {e}", dir.display()))),
    }
}

/// A fresh private directory `<base>/<prefix>XXXXXX` (mkdtemp: unpredictable, 0700).
fn mkdtemp(base: &Path, prefix: &str) -> Result<PathBuf, Refused> {
    use std::os::unix::ffi::OsStrExt;
    let template = base.join(format!("{prefix}XXXXXX"));
    let mut bytes = template.as_os_str().as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated, writable buffer that mkdtemp fills in place.
    let p = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(Refused(format!(
            "cannot create a private directory in {}: {}",
            base.display(),
            std::io::Error::last_os_error()
        )));
    }
    bytes.pop();
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes));
    check_private_dir(&dir)?;
    Ok(dir)
}

/// The folder `d` where it resolves, for a socket path that goes on by `tail` bytes: the
/// socket's path is handed to loop sandboxes, whose own `/tmp` and runtime folders are
/// empty, so a link on its way there is missing inside (a runtime folder or `TMPDIR`
/// reached through a link left every agent's call with "nothing is there": review XB).
/// As spelled when it does not resolve, or when that would make the socket's path too long
/// for a Unix socket, where the spelling was fine (review XC: no loop could start then).
fn socket_folder(d: PathBuf, tail: usize) -> PathBuf {
    match d.canonicalize() {
        Ok(r) if r.as_os_str().len() + tail <= MAX_SOCKET_PATH => r,
        _ => d,
    }
}

/// The longest Unix socket path a client can connect to (`sun_path` is 108 bytes with
/// its terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Creates (and checks) this process's private socket directory; returns the path of
/// the socket inside it.
pub fn private_socket_path() -> Result<PathBuf, Refused> {
    let pid = std::process::id();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let resolved = socket_folder;
    let tail = |parts: &[&str]| parts.iter().map(|p| p.len() + 1).sum::<usize>();
    if let Some(runtime) = own_runtime_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), me) {
        let pid_s = pid.to_string();
        let base = resolved(runtime, tail(&["forge-lsp", &pid_s, SOCKET_NAME])).join("forge-lsp");
        ensure_private_dir(&base)?;
        let mine = base.join(pid.to_string());
        ensure_private_dir(&mine)?;
        // A directory left by a dead process with our pid: only its socket can be in it.
        let sock = mine.join(SOCKET_NAME);
        if let Ok(m) = std::fs::symlink_metadata(&sock) {
            if m.file_type().is_dir() {
                return Err(Refused(format!("{} is a directory", sock.display())));
            }
            std::fs::remove_file(&sock)
                .map_err(|e| Refused(format!("cannot remove the stale {}: {e}", sock.display())))?;
        }
        return Ok(sock);
    }
    Ok(mkdtemp(&resolved(std::env::temp_dir(), tail(&["forge-lsp-XXXXXX", SOCKET_NAME])), "forge-lsp-")?
        .join(SOCKET_NAME))
}

/// `XDG_RUNTIME_DIR` (`runtime`) when it is the user's own (`uid`, the effective one):
/// an absolute path to a folder that user owns. After `su` or `sudo -E` it may be another
/// user's; a sandbox, in its user namespace, then could not reach a socket there (a review).
fn own_runtime_dir(runtime: Option<&std::ffi::OsStr>, uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let d = Path::new(runtime?);
    (d.is_absolute() && std::fs::metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == uid)).then(|| d.to_path_buf())
}

/// Removes a private socket made by [`private_socket_path`] and its directory.
pub fn remove_private_socket(sock: &Path) {
    let _ = std::fs::remove_file(sock);
    if sock.file_name().is_some_and(|n| n == SOCKET_NAME) {
        if let Some(dir) = sock.parent() {
            let _ = std::fs::remove_dir(dir); // only if empty
        }
    }
}

/// How long a dead socket is left alone before [`sweep_stale_socket_dirs`] removes it:
/// a server binds its socket right after making its directory, so one this old whose
/// socket refuses connections belongs to no starting server.
pub const STALE_SOCKET_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes the socket directories that servers killed without cleanup (SIGKILL, the OOM
/// killer, a crash) left behind in the temporary directory, `<temp>/forge-lsp-XXXXXX/`.
/// Only a private directory of ours ([`check_private_dir`]) that holds nothing but our
/// socket file, older than [`STALE_SOCKET_AGE`], on which no one listens, is removed;
/// anything else is left as it is. Returns how many were removed. Cheap (one directory
/// listing), but run off the start-up path: it is housekeeping.
///
/// `$XDG_RUNTIME_DIR/forge-lsp/<pid>/` is not swept: a new server with a reused pid takes
/// its directory over (and removes the stale socket itself), so a sweep could remove that
/// server's fresh socket between its last check and the removal; such directories are
/// bounded by the pids in use and go with the runtime directory at logout.
pub fn sweep_stale_socket_dirs() -> usize {
    sweep_socket_dirs_in(&std::env::temp_dir(), std::time::SystemTime::now())
}

fn sweep_socket_dirs_in(base: &Path, now: std::time::SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = name.len() == "forge-lsp-".len() + 6
            && name.starts_with("forge-lsp-")
            && name["forge-lsp-".len()..].bytes().all(|b| b.is_ascii_alphanumeric());
        if !ours {
            continue;
        }
        let dir = entry.path();
        if check_private_dir(&dir).is_err() || !holds_only_a_dead_socket(&dir, now) {
            continue;
        }
        let sock = dir.join(SOCKET_NAME);
        if std::fs::remove_file(&sock).is_ok() && std::fs::remove_dir(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// `dir` holds exactly one entry, our old socket, and no one listens on it.
fn holds_only_a_dead_socket(dir: &Path, now: std::time::SystemTime) -> bool {
    let Ok(mut entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let only = match (entries.next(), entries.next()) {
        (Some(Ok(e)), None) => e.file_name() == SOCKET_NAME,
        _ => false,
    };
    let sock = dir.join(SOCKET_NAME);
    only && is_old_socket(&sock, now) && socket_is_dead(&sock)
}

/// `sock` is a socket of ours last changed at least [`STALE_SOCKET_AGE`] before `now`.
fn is_old_socket(sock: &Path, now: std::time::SystemTime) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let Ok(m) = std::fs::symlink_metadata(sock) else {
        return false;
    };
    m.file_type().is_socket()
        && m.uid() == euid()
        && m.modified().is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age >= STALE_SOCKET_AGE))
}

/// Whether nothing can ever answer on `sock` again: the socket file is gone, or nobody
/// listens on it (ECONNREFUSED). A slow or busy server is not dead. Asked without
/// waiting (a non-blocking connect): a live server whose backlog is full (stopped, wedged)
/// would block a plain connect; it counts as alive.
pub fn socket_is_dead(sock: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let bytes = sock.as_os_str().as_bytes();
    // SAFETY: a zeroed sockaddr_un is valid; the path is copied within its bounds.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        // Not a socket address at all: nothing to tell by connecting (as a plain connect,
        // which fails with another error, it is not called dead).
        return false;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain socket calls on a descriptor this function owns and closes.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        let r = libc::connect(
            fd,
            &addr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        );
        let err = if r == 0 { 0 } else { *libc::__errno_location() };
        libc::close(fd);
        matches!(err, libc::ENOENT | libc::ECONNREFUSED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_state_of_a_stat_line_follows_the_last_parenthesis() {
        for (line, want) in [
            ("42 (forge-lsp) S 1 42 42 0", Some('S')),
            ("42 (forge-lsp) T 1 42", Some('T')),
            ("42 (a) b) t 1", Some('t')),
            ("42 (x y) R", Some('R')),
            ("42 forge-lsp S", None),
            ("", None),
        ] {
            assert_eq!(stat_state(line), want, "{line}");
        }
        assert_eq!(stop_state(std::process::id() as i32), None, "this process runs");
        assert_eq!((stop_state(0), stop_state(-1)), (None, None));
        // A child stopped with SIGSTOP is stopped; continued, it is not.
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let stopped = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            stop_state(pid) == Some('T')
        });
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let continued = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            stop_state(pid).is_none()
        });
        let _ = child.kill();
        let _ = child.wait();
        assert!(stopped && continued, "stopped {stopped}, continued {continued}");
    }

    /// Every directory `create_private_dirs` makes is private (the prompts, usage and
    /// agent-session directories hold plans and credentials' paths); one that exists keeps
    /// its mode.
    /// The runtime folder is used only when it is the user's own: another user's (after
    /// `su` or `sudo -E`), a relative path, a file or a missing folder is not.
    #[test]
    fn only_the_users_own_runtime_folder_holds_the_socket() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let uid = std::fs::metadata(d.path()).unwrap().uid();
        let file = d.path().join("file");
        std::fs::write(&file, "").unwrap();
        let missing = d.path().join("missing");
        let table: &[(Option<&std::ffi::OsStr>, u32, bool)] = &[
            (Some(d.path().as_os_str()), uid, true),
            (Some(d.path().as_os_str()), uid.wrapping_add(1), false),
            (Some(std::ffi::OsStr::new("relative/run")), uid, false),
            (Some(file.as_os_str()), uid, false),
            (Some(missing.as_os_str()), uid, false),
            (None, uid, false),
        ];
        for &(runtime, who, used) in table {
            assert_eq!(own_runtime_dir(runtime, who).is_some(), used, "{runtime:?} for uid {who}");
        }
    }

    /// The socket's folder where it resolves, unless the socket's path would be too long
    /// there, or it does not resolve.
    #[test]
    fn the_socket_folder_is_resolved_when_its_path_stays_short_enough() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(socket_folder(link.clone(), 10), real);
        let room = MAX_SOCKET_PATH - real.as_os_str().len();
        assert_eq!(socket_folder(link.clone(), room), real);
        assert_eq!(socket_folder(link.clone(), room + 1), link, "too long resolved: as spelled");
        let missing = d.path().join("missing");
        assert_eq!(socket_folder(missing.clone(), 10), missing);
    }

    #[test]
    fn private_dirs_are_made_0700_and_existing_ones_are_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let existing = d.path().join("existing");
        std::fs::create_dir(&existing).unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
        let deep = existing.join("prompts").join("loop-a");
        create_private_dirs(&deep).unwrap();
        assert_eq!(mode(&existing), 0o755);
        assert_eq!(mode(&existing.join("prompts")), 0o700);
        assert_eq!(mode(&deep), 0o700);
        // Again: nothing changes, no error.
        create_private_dirs(&deep).unwrap();
        assert_eq!(mode(&deep), 0o700);
    }

    /// What a sweep of left socket directories removes and what it leaves, case by case:
    /// only a private directory of ours holding nothing but an old socket no one listens
    /// on.
    #[test]
    fn a_sweep_removes_only_old_dead_socket_directories() {
        use std::os::unix::net::UnixListener;
        let base = tempfile::tempdir().unwrap();
        let b = base.path();
        let private = |name: &str| {
            let d = b.join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
            d
        };
        // A socket no one listens on: bound, then the listener dropped (the file stays).
        let dead = |d: &Path| drop(UnixListener::bind(d.join(SOCKET_NAME)).unwrap());
        let later = std::time::SystemTime::now() + STALE_SOCKET_AGE + std::time::Duration::from_secs(5);

        let gone = private("forge-lsp-aB3dE9");
        dead(&gone);
        let live = private("forge-lsp-liveAA");
        let _listening = UnixListener::bind(live.join(SOCKET_NAME)).unwrap();
        let extra = private("forge-lsp-extraA");
        dead(&extra);
        std::fs::write(extra.join("notes"), "mine").unwrap();
        let shared = private("forge-lsp-sharAA");
        dead(&shared);
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        let empty = private("forge-lsp-emptAA");
        let file = private("forge-lsp-fileAA");
        std::fs::write(file.join(SOCKET_NAME), "").unwrap();
        let odd_name = private("forge-lsp-toolongname");
        dead(&odd_name);
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("t");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        dead(&target);
        std::os::unix::fs::symlink(&target, b.join("forge-lsp-linkAA")).unwrap();

        // Young: nothing is removed yet.
        assert_eq!(sweep_socket_dirs_in(b, std::time::SystemTime::now()), 0);
        assert!(gone.exists());
        // Old.
        assert_eq!(sweep_socket_dirs_in(b, later), 1);
        assert!(!gone.exists(), "an old dead socket's directory is removed");
        for kept in [&live, &extra, &shared, &empty, &file, &odd_name] {
            assert!(kept.exists(), "{} is kept", kept.display());
        }
        assert!(live.join(SOCKET_NAME).exists() && extra.join("notes").exists());
        assert!(target.join(SOCKET_NAME).exists(), "a link is not followed");
    }
}
