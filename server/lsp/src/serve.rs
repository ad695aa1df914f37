//! Serving connections: stdio, `--listen unix:PATH|tcp:127.0.0.1:PORT`, and the
//! process's private callback socket that agents and `forge-lsp call` connect to.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tower_lsp_server::LspService;

use crate::server::{Backend, Peer};
use crate::transport;
use forge_engine::hub::Hub;

/// Serves one connection over a reader/writer pair whose peer runs at `peer`; returns
/// whether the client sent `shutdown` before the connection ended.
pub async fn serve_connection<R, W>(hub: Arc<Hub>, reader: R, writer: W, peer: Peer) -> bool
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tracing::Instrument;
    // Every log line of this connection carries its id (`conn{id=3}: ...`).
    let id = hub.next_conn_id();
    let (outbox, out_rx) = transport::outbox();
    let raw = outbox.clone();
    let shut_down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = shut_down.clone();
    let (input_closed, closed) = tokio::sync::watch::channel(false);
    let (service, socket) = LspService::build(move |client| Backend::new(client, hub, id, peer, flag, closed, raw))
        .custom_method("window/workDoneProgress/cancel", Backend::work_done_progress_cancel)
        .finish();
    tracing::debug!(conn = id, ?peer, "connection opened");
    transport::serve(reader, writer, service, socket, outbox, out_rx, input_closed)
        .instrument(tracing::info_span!("conn", id))
        .await;
    tracing::debug!(conn = id, "connection closed");
    shut_down.load(std::sync::atomic::Ordering::SeqCst)
}

/// Where a Unix socket connection's peer runs ([`Peer::of_socket`]).
fn peer_of(s: &tokio::net::UnixStream) -> Peer {
    use std::os::fd::AsFd;
    Peer::of_socket(s.as_fd())
}

/// Serves stdin/stdout until `exit`, end of input, SIGTERM, SIGINT or SIGHUP. Returns whether the
/// server stopped cleanly: the client sent `shutdown` first, or a signal asked it to stop.
/// (LSP: "exit" without a prior "shutdown" ends the process with exit code 1.)
pub async fn stdio(hub: Arc<Hub>) -> bool {
    let flags = StdioFlags::save();
    start_private_socket(hub.clone());
    // The connection is a task on the runtime's workers, not part of the caller's
    // `block_on`: the worker that sees the pipe become readable runs it at once, where a
    // future on the main thread had to be woken by that worker (one more thread switch
    // per message and per reply from the store).
    let h = hub.clone();
    let mut served = tokio::spawn(async move {
        match stdio_pipes() {
            Some((input, Some(output))) => serve_connection(h, input, output, Peer::Host).await,
            Some((input, None)) => serve_connection(h, input, tokio::io::stdout(), Peer::Host).await,
            None => serve_connection(h, tokio::io::stdin(), tokio::io::stdout(), Peer::Host).await,
        }
    });
    let clean = tokio::select! {
        shut_down = &mut served => shut_down.unwrap_or(false),
        sig = shutdown_signal() => {
            tracing::warn!("{sig}: shutting down");
            served.abort();
            true
        }
    };
    hub.shutdown().await;
    flags.restore();
    clean
}

/// The file status flags of standard input and output as this process was given them.
/// Reading them on the reactor makes both pipes non-blocking ([`stdio_pipes`]), a flag of
/// the pipe's open file, which every process given the same pipe shares: a shell's
/// `(forge-lsp serve; cmd) | …` gave `cmd` "Resource temporarily unavailable" (a review).
/// Put back when serving ends (not after a kill, which leaves no chance to).
struct StdioFlags([Option<libc::c_int>; 2]);

impl StdioFlags {
    fn save() -> StdioFlags {
        // SAFETY: F_GETFL on the standard descriptors; -1 (closed) is kept as None.
        StdioFlags([0, 1].map(|fd| Some(unsafe { libc::fcntl(fd, libc::F_GETFL) }).filter(|&f| f >= 0)))
    }

    fn restore(&self) {
        for (fd, flags) in [0, 1].into_iter().zip(self.0) {
            if let Some(flags) = flags {
                // SAFETY: F_SETFL with flags F_GETFL gave for the same descriptor.
                unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
            }
        }
    }
}

/// Standard input and output as non-blocking pipes on the runtime's reactor, when both are
/// pipes (as editors and agent CLIs start a language server). `tokio::io::stdin`/`stdout`
/// run every read and every write on a blocking-pool thread: two thread hops per request
/// that a pipe read when it is ready does not need. Anything else (a terminal, a socket,
/// a file) keeps tokio's blocking standard streams. Setting `O_NONBLOCK` changes the
/// pipes' open files, which other processes given the same pipes share: [`StdioFlags`]
/// puts the flags back when serving ends. Both pipes are also made larger
/// ([`forge_core::paths::enlarge_pipe`]).
fn stdio_pipes() -> Option<(tokio::net::unix::pipe::Receiver, Option<tokio::net::unix::pipe::Sender>)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    use tokio::net::unix::pipe;
    let input = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    // Both or neither: a stream left blocking must not have been switched.
    let is_pipe = |fd: &std::os::fd::OwnedFd| {
        fd.try_clone().map(std::fs::File::from).and_then(|f| f.metadata()).is_ok_and(|m| m.file_type().is_fifo())
    };
    if !is_pipe(&input) || !is_pipe(&output) {
        return None;
    }
    for fd in [&input, &output] {
        forge_core::paths::enlarge_pipe(fd.as_fd());
    }
    let input = pipe::Receiver::from_owned_fd(input).ok()?;
    // Input switched: output is still taken as it is if it cannot be.
    Some((input, pipe::Sender::from_owned_fd(output).ok()))
}

/// Waits for SIGTERM, SIGINT or SIGHUP (a closed terminal: `forge-lsp serve --listen … &`);
/// returns its name. SIGHUP is left alone when this process was started with it ignored
/// (`nohup`): whoever started it asked it to outlive the terminal.
pub async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::warn!("cannot install the SIGTERM/SIGINT handlers; signals end the process without cleanup");
        return std::future::pending().await;
    };
    let mut hup = if hangup_ignored() { None } else { signal(SignalKind::hangup()).ok() };
    let hangup = async {
        match &mut hup {
            Some(h) => {
                h.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hangup => "SIGHUP",
    }
}

/// Whether SIGHUP is ignored in this process (`nohup`, or a parent that ignored it).
fn hangup_ignored() -> bool {
    // SAFETY: reads the current disposition only (no new action is installed).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Where a listen address points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Unix(PathBuf),
    Tcp(String),
}

impl ListenAddr {
    pub fn parse(s: &str) -> Result<ListenAddr, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err("unix: needs a socket path, e.g. unix:/run/user/1000/forge.sock".into());
            }
            return Ok(ListenAddr::Unix(PathBuf::from(p)));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            let whole_host = matches!(a, "127.0.0.1" | "localhost" | "[::1]");
            let Some((host, port)) =
                a.rsplit_once(':').filter(|(h, p)| !whole_host && !p.is_empty() && !h.ends_with(':'))
            else {
                return Err(format!("tcp: needs a host and a port (tcp:127.0.0.1:PORT), got {a:?}"));
            };
            if port.parse::<u16>().is_err() {
                return Err(format!("tcp: port {port:?} is not a port number (0 to 65535), in {a:?}"));
            }
            if host == "::1" {
                return Err(format!("tcp: write the IPv6 loopback in brackets, tcp:[::1]:{port}, got {a:?}"));
            }
            if !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
                return Err(format!("tcp listening is for tests on loopback only (tcp:127.0.0.1:PORT), got {a:?}"));
            }
            return Ok(ListenAddr::Tcp(a.to_string()));
        }
        Err(format!("listen address must be unix:PATH or tcp:127.0.0.1:PORT, got {s:?}"))
    }
}

/// `cannot listen on ADDR: why`, keeping the error's kind.
fn context(e: std::io::Error, addr: &str) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))
}

use forge_core::paths::MAX_SOCKET_PATH;

/// Binds a Unix socket with mode 0600; a directory it creates gets mode 0700. Only a socket
/// is ever replaced at `path` (a stale one, from a dead server); any other file there is
/// refused, never removed.
pub fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let long = path.as_os_str().len();
    if long > MAX_SOCKET_PATH {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the socket path is {long} bytes long; clients cannot connect to one over {MAX_SOCKET_PATH} bytes: choose a shorter path"),
        ));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            let what = if m.is_dir() {
                "a directory"
            } else if m.is_symlink() {
                "a symbolic link"
            } else {
                "a file that is not a socket"
            };
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} is {what}; forge-lsp only replaces a stale socket there and leaves anything else alone",
                    path.display()
                ),
            ));
        }
        _ => {}
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            // Every directory made for it is private, not only the last.
            forge_core::paths::create_private_dirs(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    if path.symlink_metadata().is_ok() {
        // A stale socket from a dead process (checked above: a socket); a live one
        // answers the connect.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by a running server", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    // Bound in a private (0700) staging directory beside it, made 0600 there and only then
    // linked into place: under a permissive umask a socket bound at `path` directly could
    // be connected to before its mode is set. The link fails when something is at `path`
    // already (another server that bound it meanwhile): the path is in use, as a bind
    // there would have said. The staging name carries the process id and the clock's
    // nanoseconds, so a shared directory such as /tmp cannot be primed with it. A staging
    // path too long for a socket address falls back to binding in place.
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let staging = dir.join(format!(".forge-bind-{}-{nanos:08x}", std::process::id()));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    }
    let staged = staging.join("s");
    let bound = UnixListener::bind(&staged).and_then(|l| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::hard_link(&staged, path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{} is in use by a running server", path.display()),
                )
            } else {
                e
            }
        })?;
        Ok(l)
    });
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    match bound {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            let l = UnixListener::bind(path)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
            Ok(l)
        }
        Err(e) => Err(e),
    }
}

/// Why the directory of a listening socket at `path` is unsafe, if it is: other users may
/// write it (group- or world-writable without the sticky bit), so they could remove the
/// socket and put their own in its place for clients to connect to. (The socket itself is
/// 0600: no one else can connect to it.)
fn shared_directory(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mode = std::fs::metadata(dir).ok()?.mode();
    let sticky = mode & 0o1000 != 0;
    (mode & 0o022 != 0 && !sticky).then(|| {
        format!(
            "the socket's directory {} (mode {:o}) is writable by other users: they could replace the socket with their own; listen in a directory only you can write (e.g. under $XDG_RUNTIME_DIR)",
            dir.display(),
            mode & 0o7777
        )
    })
}

/// Accepts connections forever; each gets its own LSP session on the shared hub. Once
/// listening it says where on standard error (`listening on tcp:127.0.0.1:PORT`).
pub async fn listen(hub: Arc<Hub>, addr: ListenAddr) -> std::io::Result<()> {
    listen_with(hub, addr, true).await
}

/// [`listen`], saying where it listens on standard error only when `announce` (the demo
/// serves in-process and keeps its output for the user).
pub async fn listen_with(hub: Arc<Hub>, addr: ListenAddr, announce: bool) -> std::io::Result<()> {
    let say = |addr: String| {
        if announce {
            announce_listening(&addr)
        } else {
            tracing::info!("listening on {addr}")
        }
    };
    match addr {
        ListenAddr::Unix(path) => {
            let l = bind_unix(&path).map_err(|e| context(e, &format!("unix:{}", path.display())))?;
            if let Some(why) = shared_directory(&path) {
                // Said on stderr beside the `listening on` line: the user chose the path.
                eprintln!("forge-lsp: warning: {why}");
                tracing::warn!("{why}");
            }
            // Loops get the private socket, in a directory of its own: never this one,
            // whose directory may hold anything (it is bound into loop sandboxes).
            start_private_socket(hub.clone());
            register_listener(&hub, Some(&path)).await;
            say(format!("unix:{}", path.display()));
            // The whole file system is visible (read-only) in a loop's sandbox, and a socket
            // on a read-only mount can still be connected to: each peer is placed.
            serve_unix(hub, l, "the listening socket").await;
            Ok(())
        }
        ListenAddr::Tcp(a) => {
            let l = TcpListener::bind(&a).await.map_err(|e| context(e, &format!("tcp:{a}")))?;
            start_private_socket(hub.clone());
            register_listener(&hub, None).await;
            say(format!("tcp:{}", l.local_addr()?));
            // Two lookups at a time: each reads the fd links of the user's processes, and a
            // burst of connections must not take the blocking threads tools run on.
            let lookups = Arc::new(tokio::sync::Semaphore::new(2));
            let mut pause = AcceptPause::default();
            loop {
                let (s, theirs) = match l.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        pause.after(&e, "the listening socket").await;
                        continue;
                    }
                };
                pause.reset();
                let (hub, lookups) = (hub.clone(), lookups.clone());
                tokio::spawn(async move {
                    // No credentials over TCP (loopback only, for tests): the peer's process
                    // is looked up in /proc, off the runtime's threads. Another user's
                    // connection, or one gone before the lookup, is closed unanswered.
                    let Ok(permit) = lookups.acquire().await else { return };
                    let placed = match s.local_addr() {
                        Ok(ours) => tokio::task::spawn_blocking(move || crate::peer::of_tcp(ours, theirs))
                            .await
                            .unwrap_or(Some(Peer::Confined)),
                        Err(_) => Some(Peer::Confined),
                    };
                    drop(permit);
                    let Some(peer) = placed else {
                        tracing::warn!(
                            "refused the TCP connection from {theirs}: its socket is another user's, or gone"
                        );
                        return;
                    };
                    let (r, w) = s.into_split();
                    serve_connection(hub, r, w, peer).await;
                });
            }
        }
    }
}

/// Says on standard error, in one machine-readable line, where the server listens (with
/// the port the system chose for `tcp:127.0.0.1:0`).
fn announce_listening(addr: &str) {
    use std::io::Write;
    tracing::info!("listening on {addr}");
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "listening on {addr}");
    let _ = err.flush();
}

/// Registers this listening server in the `servers` table of its default data directory
/// for any project (`forge_store::servers::ANY_PROJECT`), so `forge-lsp call` from a shell
/// finds it before any editor has connected: its private socket, else `unix_listen`. A
/// registration that fails (the database locked by another process past the busy timeout,
/// not writable yet) is tried again in the background until it is done (before, once:
/// `call` never found the server; a review).
async fn register_listener(hub: &Arc<Hub>, unix_listen: Option<&Path>) {
    let Some(socket) = hub.private_socket().or_else(|| unix_listen.map(Path::to_path_buf)) else { return };
    if let Err((e, busy)) = try_register_listener(hub, &socket).await {
        if !busy {
            // Nothing that passes (a read-only database): said once, not retried.
            tracing::warn!("{e}; `forge-lsp call` will not find this server");
            return;
        }
        tracing::warn!("{e}; trying again in the background until it works (`forge-lsp call` does not find this server until then)");
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut wait = std::time::Duration::from_secs(1);
            loop {
                tokio::time::sleep(wait).await;
                match try_register_listener(&hub, &socket).await {
                    Ok(()) => {
                        tracing::info!("registered the server in the end: `forge-lsp call` finds it now");
                        return;
                    }
                    Err((e, true)) => tracing::debug!("{e}; trying again"),
                    Err((e, false)) => {
                        tracing::warn!("{e}; `forge-lsp call` will not find this server");
                        return;
                    }
                }
                wait = (wait * 2).min(std::time::Duration::from_secs(30));
            }
        });
    }
}

/// Registers the listener; on failure, the message and whether it may pass (another
/// process held the database's lock).
async fn try_register_listener(hub: &Hub, socket: &Path) -> Result<(), (String, bool)> {
    let data_dir = forge_core::project::data_dir(None, hub.cli_data_dir.as_deref());
    let ws = hub.workspace(&data_dir).map_err(|e| {
        let busy = matches!(e, forge_store::OpenError::Busy(_));
        (format!("cannot register the server in {}: {e}", data_dir.display()), busy)
    })?;
    let (s, pid, now) = (socket.display().to_string(), std::process::id(), forge_core::now_ms());
    let any = forge_store::servers::ANY_PROJECT;
    ws.store
        .call(move |c| forge_store::servers::register(c, pid, any, &s, now))
        .await
        .map_err(|e| (format!("cannot register the server: {e}"), forge_store::is_busy(&e)))
}

/// Serves stdin/stdout like [`stdio`]; when standard input is a terminal (someone started
/// the server by hand), first says on standard error what it is waiting for.
pub async fn stdio_with_hint(hub: Arc<Hub>) -> bool {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        eprintln!("forge-lsp: waiting for an LSP client on stdin/stdout (editors start it this way; Ctrl-C to quit). To see it work, run `forge-lsp demo`; `forge-lsp --help` lists the commands.");
    }
    stdio(hub).await
}

/// Serves every connection `l` accepts, each peer placed by its credentials
/// ([`peer_of`]); `what` names the socket in the log. Runs until the process ends.
async fn serve_unix(hub: Arc<Hub>, l: UnixListener, what: &'static str) {
    let mut pause = AcceptPause::default();
    loop {
        let s = match l.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                pause.after(&e, what).await;
                continue;
            }
        };
        pause.reset();
        let peer = peer_of(&s);
        let (r, w) = s.into_split();
        tokio::spawn(serve_connection(hub.clone(), r, w, peer));
    }
}

/// What a listener does after `accept` failed. Every such failure is taken as passing:
/// out of descriptors (`EMFILE`, `ENFILE`: every client holds one) or memory, a
/// connection reset before it was accepted. The listener waits, longer after each failure
/// in a row (10 ms doubling to 1 s), and accepts again; the connections it serves go on
/// meanwhile and free descriptors as they close. Logged once per run of failures. Before,
/// the first `EMFILE` ended a `--listen` server (every client dropped) or silently stopped
/// the private socket (every loop agent's call refused from then on).
#[derive(Default)]
struct AcceptPause {
    failures: u32,
}

impl AcceptPause {
    async fn after(&mut self, e: &std::io::Error, what: &str) {
        if self.failures == 0 {
            tracing::error!("cannot accept a connection on {what}: {e}; retrying (existing connections are served)");
        }
        self.failures = self.failures.saturating_add(1);
        let ms = 10u64.saturating_mul(1 << self.failures.min(7)).min(1000);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }

    fn reset(&mut self) {
        if self.failures > 0 {
            tracing::info!("accepting connections again after {} failure(s)", self.failures);
        }
        self.failures = 0;
    }
}

/// Starts the private callback socket (`forge_core::paths::private_socket_path`). A
/// socket directory that is not ours is refused: the server keeps serving its clients,
/// logs why, and loops (which need the socket) refuse to start.
pub fn start_private_socket(hub: Arc<Hub>) {
    // Servers killed without cleanup left their socket directories; sweep them once per
    // server, on a thread of its own (housekeeping, never on the start-up path).
    let _ = std::thread::Builder::new().name("forge-sweep-sockets".into()).spawn(|| {
        let n = forge_core::paths::sweep_stale_socket_dirs();
        if n > 0 {
            tracing::info!(
                "removed {n} socket director{} left by servers that were killed",
                if n == 1 { "y" } else { "ies" }
            );
        }
    });
    let path = match forge_core::paths::private_socket_path() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("no private socket: {e}; loops cannot start in this server");
            return;
        }
    };
    match bind_unix(&path) {
        Ok(l) => {
            hub.set_private_socket(path.clone());
            // Bound into every loop sandbox: a sandboxed process is confined.
            tokio::spawn(serve_unix(hub, l, "the private socket"));
        }
        Err(e) => {
            tracing::error!(
                "cannot listen on the private socket {}: {e}; loops cannot start in this server",
                path.display()
            );
            forge_core::paths::remove_private_socket(&path);
        }
    }
}

/// Removes this process's private socket file and its directory.
pub fn remove_private_socket(hub: &Hub) {
    if let Some(p) = hub.private_socket() {
        forge_core::paths::remove_private_socket(&p);
    }
}

/// Removes a `--listen` socket file this process bound (a socket, not anything else).
pub fn remove_listen_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::ListenAddr;

    /// Each wrong listen address is told what is wrong with it (a missing port was told
    /// "loopback only").
    #[test]
    fn listen_addresses_name_what_is_wrong() {
        let err = |s: &str| ListenAddr::parse(s).err().unwrap_or_else(|| panic!("{s} was taken"));
        for s in ["tcp:127.0.0.1", "tcp:localhost", "tcp:[::1]", "tcp:127.0.0.1:", "tcp:"] {
            assert!(err(s).contains("needs a host and a port"), "{s}: {}", err(s));
        }
        assert!(err("tcp:127.0.0.1:99999").contains("is not a port number"));
        assert!(err("tcp:10.0.0.1:80").contains("loopback only"));
        assert!(err("tcp:::1:9000").contains("tcp:[::1]:9000"), "{}", err("tcp:::1:9000"));
        assert!(err("unix:").contains("needs a socket path"));
        assert!(err("127.0.0.1:80").contains("must be unix:PATH or tcp:127.0.0.1:PORT"));
        for s in ["tcp:127.0.0.1:0", "tcp:localhost:9000", "tcp:[::1]:9000"] {
            assert!(matches!(ListenAddr::parse(s), Ok(ListenAddr::Tcp(_))), "{s}");
        }
    }
}
