//! Where a connection's peer runs: the server's own process namespace (the host) or
//! another (a loop's sandbox), read from the kernel for Unix sockets and from `/proc` for
//! loopback TCP. A confined peer must identify as a loop session (`requests::initialize`).
//!
//! Read by hand from `/proc` (one line format, `/proc/net/tcp`, and the `fd` links): the
//! `procfs` crate would bring a whole parser of `/proc` for two lookups.

/// Where a connection's peer runs, as far as the server can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The server's own process namespace (an editor, a shell's `forge-lsp call`), or stdio
    /// (whoever started the server).
    Host,
    /// Another process namespace than the server's (a loop's sandbox: bubblewrap unshares
    /// it), or a peer whose place cannot be read: it must identify as a loop session.
    Confined,
}

impl Peer {
    /// Where the peer of the Unix socket `sock` runs: the process that connected, as the
    /// kernel recorded it at `connect` (`SO_PEERCRED`), placed by [`Peer::of_pid`].
    ///
    /// The process id alone is racy: a peer that exits at once, and whose id a host process
    /// gets in that instant, would pass as the host. Where the kernel gives the peer's
    /// pidfd (`SO_PEERPIDFD`, Linux 6.5), the peer is checked to be still alive after its
    /// namespace was read: an id cannot be reused while its process lives (a zombie keeps
    /// it too), so the namespace read was the peer's. A peer that is gone by then is
    /// confined. Older kernels keep the id-only check.
    pub fn of_socket(sock: std::os::fd::BorrowedFd<'_>) -> Peer {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let fd = sock.as_raw_fd();
        let Some(cred) = forge_core::paths::peer_cred(sock).filter(|c| c.pid > 0) else {
            return Peer::Confined;
        };
        let mut pidfd: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: as above; `pidfd` receives a new descriptor we then own.
        let rc = unsafe {
            libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERPIDFD, (&raw mut pidfd).cast(), &raw mut len)
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            // A kernel without SO_PEERPIDFD: the id-only check. Any other failure (the peer
            // is gone, say) leaves nothing to verify.
            return if e == Some(libc::ENOPROTOOPT) { Peer::of_pid(cred.pid) } else { Peer::Confined };
        }
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        let placed = Peer::of_pid(cred.pid);
        if placed == Peer::Host && alive(&pidfd) == Some(false) {
            return Peer::Confined;
        }
        placed
    }

    /// The place of the process `pid` (as this process sees it; 0 when it is in a process
    /// namespace this process cannot see): confined when its process namespace differs
    /// from this process's, or cannot be read (it may have gone).
    ///
    /// Only the process namespace: containers that share the host's processes but not its
    /// mounts (distrobox and toolbox run with the host's process namespace, snaps and
    /// services with a private /tmp have their own mount namespace) are the user's own
    /// shells, and a loop's sandbox always has a process namespace of its own.
    pub fn of_pid(pid: i32) -> Peer {
        let ns = |who: &str| std::fs::read_link(format!("/proc/{who}/ns/pid")).ok();
        let Some(ours) = ns("self") else {
            // No /proc here: nothing can be placed, so nothing is trusted.
            return Peer::Confined;
        };
        if pid <= 0 || ns(&pid.to_string()).as_ref() != Some(&ours) {
            return Peer::Confined;
        }
        Peer::Host
    }
}

/// The place of a loopback TCP peer: `None` when it is refused (another user's, or gone
/// before it could be looked up: TCP carries no credentials, and any local user can reach
/// a loopback port), else where the processes that hold its socket run.
///
/// `/proc/net/tcp` (and `tcp6`) name the owner and inode of the peer's end (its local
/// address is our remote one and the other way round); the threads whose `fd` links name
/// that inode hold it (each thread's table is read: a process whose main thread exited,
/// or a thread that unshared its table, shows the socket only there). Each holder is
/// placed by [`Peer::of_pid`], then checked to hold the socket still through one of the
/// threads it was found by (an id reused in between names a process without it). The host only when every holder found is;
/// confined when none is found (held where this process cannot look). Placement follows
/// who holds the socket when it is looked up, not who created it: a sandboxed process
/// that handed its socket to a host process and kept no readable copy would pass as the
/// host (docs/reliability.md).
pub fn of_tcp(ours: std::net::SocketAddr, theirs: std::net::SocketAddr) -> Option<Peer> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let (uid, inode) = tcp_socket_of(theirs, ours)?;
    // Inode 0: no socket behind the entry any more (closed, in TIME_WAIT; its uid reads 0).
    if uid != me || inode == 0 {
        return None;
    }
    let link = format!("socket:[{inode}]");
    Some(place_holders(&link, holders_of(&link)))
}

/// Where the `holders` of the socket `link` run ([`of_tcp`]): confined when there is none.
fn place_holders(link: &str, holders: Vec<(i32, std::path::PathBuf)>) -> Peer {
    if holders.is_empty() {
        return Peer::Confined;
    }
    // Each holding process once, with every path it was seen by: a thread that exited
    // since (a runtime's idle worker) takes its `task` entry with it, while its process
    // still holds the socket through the others.
    let mut by_pid: std::collections::BTreeMap<i32, Vec<std::path::PathBuf>> = Default::default();
    for (pid, fd_path) in holders {
        by_pid.entry(pid).or_default().push(fd_path);
    }
    for (pid, paths) in by_pid {
        let placed = Peer::of_pid(pid);
        let still = paths.iter().any(|p| std::fs::read_link(p).is_ok_and(|l| l.as_os_str() == link));
        if placed != Peer::Host || !still {
            return Peer::Confined;
        }
    }
    Peer::Host
}

/// The owner's uid and the inode of the TCP socket whose local address is `local` and
/// whose remote one is `remote`, from `/proc/net/tcp` and `/proc/net/tcp6`.
fn tcp_socket_of(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Option<(u32, u64)> {
    let (local, remote) = (canonical(local), canonical(remote));
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|file| {
        let table = std::fs::read_to_string(file).ok()?;
        table.lines().skip(1).find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (l, r, uid, inode) = (f.get(1)?, f.get(2)?, f.get(7)?, f.get(9)?);
            (proc_addr(l)? == local && proc_addr(r)? == remote).then_some(())?;
            Some((uid.parse().ok()?, inode.parse().ok()?))
        })
    })
}

/// An IPv4-mapped IPv6 address as the IPv4 one (a dual-stack socket's view of a v4 peer).
fn canonical(a: std::net::SocketAddr) -> std::net::SocketAddr {
    match a {
        std::net::SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => std::net::SocketAddr::from((v4, v6.port())),
            None => a,
        },
        v4 => v4,
    }
}

/// An address as `/proc/net/tcp*` print it: the address's 32-bit words in hex as the
/// machine stores them, a colon, the port in hex.
fn proc_addr(s: &str) -> Option<std::net::SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| ip.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok()).map(u32::to_ne_bytes);
    let addr = match ip.len() {
        8 => std::net::SocketAddr::from((std::net::Ipv4Addr::from(word(0)?), port)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            std::net::SocketAddr::from((std::net::Ipv6Addr::from(b), port))
        }
        _ => return None,
    };
    Some(canonical(addr))
}

/// The (process id, `/proc/<pid>/task/<tid>/fd/<fd>` path) pairs whose link is `link`,
/// over the threads this process may look into (other users' are unreadable, and
/// skipped).
fn holders_of(link: &str) -> Vec<(i32, std::path::PathBuf)> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return found };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else { continue };
        for t in tasks.flatten() {
            let Ok(fds) = std::fs::read_dir(t.path().join("fd")) else { continue };
            for fd in fds.flatten() {
                if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == link) {
                    found.push((pid, fd.path()));
                }
            }
        }
    }
    found
}

/// Whether the process of `pidfd` has not been reaped yet (signal 0 reaches it); `None`
/// when the call is not available (a seccomp filter that refuses it): the id-only check
/// then stands, as on a kernel without pidfds.
fn alive(pidfd: &std::os::fd::OwnedFd) -> Option<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: a live pidfd, signal 0 (nothing is sent), no siginfo, no flags.
    let rc = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), 0, std::ptr::null::<libc::siginfo_t>(), 0)
    };
    if rc == 0 {
        return Some(true);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM) => Some(true),
        Some(libc::ENOSYS) => None,
        _ => Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::Peer;
    use std::os::fd::AsFd;
    use std::os::unix::net::{UnixListener, UnixStream};

    /// A peer in this process's namespace that is alive: the host.
    #[test]
    fn a_live_peer_in_our_namespace_is_the_host() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(Peer::of_socket(a.as_fd()), Peer::Host);
    }

    /// A loopback TCP peer in this process: found by its socket, and the host.
    #[test]
    fn a_tcp_peer_in_our_namespace_is_the_host() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, theirs) = l.accept().unwrap();
        assert_eq!(theirs, c.local_addr().unwrap());
        assert_eq!(super::of_tcp(s.local_addr().unwrap(), theirs), Some(Peer::Host));
        // A peer whose socket is gone (closed before it was looked up): refused.
        let (ours, theirs) = (s.local_addr().unwrap(), c.local_addr().unwrap());
        drop(c);
        drop(s);
        // The closed pair may linger in TIME_WAIT (owner uid 0, inode 0): not ours either.
        assert_eq!(super::of_tcp(ours, theirs), None);
    }

    /// A holder seen through a thread that has exited since still holds the socket
    /// through its other threads: the host (this test failed now and then while other
    /// tests' threads ended beside it). A process that holds it through none: confined.
    #[test]
    fn a_holder_whose_listed_thread_exited_is_placed_by_the_others() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = l.as_raw_fd();
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        let link = link.to_str().unwrap();
        let me = std::process::id() as i32;
        let gone = std::path::PathBuf::from(format!("/proc/{me}/task/999999999/fd/{fd}"));
        let alive = std::path::PathBuf::from(format!("/proc/{me}/task/{me}/fd/{fd}"));
        assert_eq!(super::place_holders(link, vec![(me, gone.clone()), (me, alive)]), Peer::Host);
        assert_eq!(super::place_holders(link, vec![(me, gone)]), Peer::Confined);
        assert_eq!(super::place_holders(link, vec![]), Peer::Confined);
    }

    /// `/proc/net/tcp*` addresses, as the kernel prints them on a little-endian machine.
    #[test]
    #[cfg(target_endian = "little")]
    fn proc_addresses_are_read() {
        let cases = [
            ("0100007F:1F90", Some("127.0.0.1:8080")),
            ("00000000000000000000000001000000:0016", Some("[::1]:22")),
            ("0000000000000000FFFF00000100007F:A4C2", Some("127.0.0.1:42178")),
            ("0100007F", None),
            ("0100007:1F90", None),
            ("ZZ00007F:1F90", None),
        ];
        for (text, want) in cases {
            assert_eq!(super::proc_addr(text), want.map(|w| w.parse().unwrap()), "{text}");
        }
    }

    /// A peer that connected and is gone (exited and reaped) by the time it is placed is
    /// confined: nothing can show that its process id still names it.
    #[test]
    fn a_peer_that_is_gone_is_confined() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).unwrap();
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(c_path.as_bytes_with_nul()) {
            *d = *s as libc::c_char;
        }
        // SAFETY: the child calls only async-signal-safe functions (socket, connect,
        // _exit) on memory prepared before the fork.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            unsafe {
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let ok = libc::connect(
                    fd,
                    (&raw const addr).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                );
                libc::_exit(if ok == 0 { 0 } else { 1 });
            }
        }
        let (conn, _) = listener.accept().unwrap();
        let mut status = 0;
        // SAFETY: waits for (reaps) our own child.
        assert_eq!(unsafe { libc::waitpid(child, &raw mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child connected");
        assert_eq!(Peer::of_socket(conn.as_fd()), Peer::Confined);
    }
}
