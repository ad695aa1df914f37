//! A minimal blocking LSP client over a Unix socket: how `forge-lsp call`, `forge-lsp mcp`
//! and the demo reach a running server.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use forge_protocol::framing::{self, Decoder, Event};
use serde_json::{json, Value};

pub struct LspClient {
    reader: UnixStream,
    decoder: Decoder,
    writer: UnixStream,
    next_id: i64,
    /// Notifications from the server seen while waiting for replies, when kept.
    notifications: Option<Vec<Value>>,
    /// Frames queued by [`LspClient::notify_with_next`], written with the next message.
    pending: Vec<u8>,
}

/// How long a reply may take: longer than any tool's own limit (a shell command's 600 s).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(660);

/// Connects a Unix stream socket to `path`, waiting at most `wait` while the listener's
/// backlog is full. By hand because std's `UnixStream::connect` sets no option before it
/// connects, and Linux waits for room in the backlog for as long as the socket's send
/// timeout (`SO_SNDTIMEO`), which is none by default; the timeout is cleared again after.
fn connect_unix(path: &Path, wait: Duration) -> std::io::Result<UnixStream> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a usable socket path (empty, too long or with a NUL byte)", path.display()),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket has no memory preconditions; a non-negative result is a new
    // descriptor we own.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let set_send_timeout = |t: Duration| {
        let tv = libc::timeval {
            tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_usec: t.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: `fd` is a live socket; `tv` is valid for reads of its size.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDTIMEO,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // A zero timeout means none: at least one microsecond.
    set_send_timeout(wait.max(Duration::from_micros(1)))?;
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    loop {
        // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes.
        let rc = unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len) };
        if rc == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Connected while the interrupted call was under way.
            Some(libc::EISCONN) => break,
            Some(libc::EAGAIN) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{}: the server did not take the connection within {wait:?}", path.display()),
                ))
            }
            _ => return Err(e),
        }
    }
    set_send_timeout(Duration::ZERO)?;
    Ok(UnixStream::from(fd))
}

impl LspClient {
    pub fn connect(path: &Path) -> std::io::Result<LspClient> {
        Self::connect_within(path, REPLY_TIMEOUT)
    }

    /// [`LspClient::connect`], waiting at most `wait` for the server to take the
    /// connection: a server that stopped accepting (stopped, wedged) with its backlog full
    /// would otherwise hold `connect` for ever. Fails with `TimedOut` then.
    pub fn connect_within(path: &Path, wait: Duration) -> std::io::Result<LspClient> {
        let s = connect_unix(path, wait)?;
        s.set_read_timeout(Some(REPLY_TIMEOUT))?;
        Ok(LspClient {
            reader: s.try_clone()?,
            decoder: Decoder::new(),
            writer: s,
            next_id: 1,
            notifications: None,
            pending: Vec::new(),
        })
    }

    /// The user id of the process that listens on the other end, as the kernel recorded
    /// it when it created the socket (`SO_PEERCRED`); `None` when it cannot be read.
    pub fn peer_uid(&self) -> Option<u32> {
        use std::os::fd::AsFd;
        forge_core::paths::peer_cred(self.writer.as_fd()).map(|c| c.uid)
    }

    /// The server's process id as the kernel recorded it when it listened (`SO_PEERCRED`);
    /// `None` when it cannot be read or lies in another pid namespace (0).
    pub fn peer_pid(&self) -> Option<i32> {
        use std::os::fd::AsFd;
        forge_core::paths::peer_cred(self.writer.as_fd()).map(|c| c.pid).filter(|&p| p > 0)
    }

    /// How long a read waits for the server from now on.
    pub fn set_timeout(&self, wait: Duration) -> std::io::Result<()> {
        self.reader.set_read_timeout(Some(wait))
    }

    /// A handle on the same connection that can close it from another thread
    /// (`shutdown`), ending a `request` that waits for its reply.
    pub fn closer(&self) -> std::io::Result<UnixStream> {
        self.writer.try_clone()
    }

    /// From now on, keeps the notifications the server sends (the demo shows them);
    /// otherwise they are dropped.
    pub fn keep_notifications(&mut self) {
        self.notifications.get_or_insert_with(Vec::new);
    }

    /// The notifications kept so far, oldest first.
    pub fn take_notifications(&mut self) -> Vec<Value> {
        self.notifications.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn send(&mut self, v: &Value) -> std::io::Result<()> {
        let frame = framing::encode(v.to_string().as_bytes());
        self.write_with_pending(frame)
    }

    /// Writes `frame` after the queued frames, in one write.
    fn write_with_pending(&mut self, frame: Vec<u8>) -> std::io::Result<()> {
        let out = if self.pending.is_empty() {
            frame
        } else {
            let mut out = std::mem::take(&mut self.pending);
            out.extend(frame);
            out
        };
        self.writer.write_all(&out)?;
        self.writer.flush()
    }

    /// Reads the next message (the shared decoder; anything but a frame from the server
    /// is a protocol error).
    fn read(&mut self) -> std::io::Result<Value> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.decoder.next_event() {
                Some(Event::Frame(body)) => {
                    return serde_json::from_slice(&body)
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                }
                Some(other) => {
                    let why = other.error().map(|e| e.1).unwrap_or_default();
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("bad frame from the server: {why}"),
                    ));
                }
                None => {}
            }
            let n = match self.reader.read(&mut chunk) {
                Ok(n) => n,
                // A signal this process handles (the SIGCHLD of `forge-lsp demo`'s agent):
                // a read on a socket with a timeout is not restarted (signal(7)), whatever
                // the handler's SA_RESTART says.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "server closed the connection"));
            }
            self.decoder.push(&chunk[..n]);
        }
    }

    /// Ends the connection as LSP asks, `shutdown` and then `exit`, in one write and
    /// without waiting for `shutdown`'s reply: a caller that is done has nothing to read,
    /// so the reply is only a round trip (issue 17). The server runs `shutdown` and
    /// answers it before the `exit` behind it ends the connection; the reply may find the
    /// connection closed, and the server stops writing then.
    pub fn finish(mut self) -> std::io::Result<()> {
        let id = self.next_id;
        let mut out =
            framing::encode(json!({ "jsonrpc": "2.0", "id": id, "method": "shutdown" }).to_string().as_bytes());
        out.extend(framing::encode(json!({ "jsonrpc": "2.0", "method": "exit" }).to_string().as_bytes()));
        self.write_with_pending(out)
    }

    pub fn notify(&mut self, method: &str, params: Value) -> std::io::Result<()> {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
    }

    /// Queues a notification to go out in one write with the next message (`initialized`
    /// with the call that follows it: one wake-up of the server instead of two).
    pub fn notify_with_next(&mut self, method: &str, params: Value) {
        let v = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.pending.extend(framing::encode(v.to_string().as_bytes()));
    }

    /// Sends a request and returns its `result` or `error` object.
    /// `params` is written as it is, not copied into the message first (a plan-write's may
    /// be megabytes, and a call sent on to another server sends it again).
    pub fn request(&mut self, method: &str, params: impl serde::Serialize) -> std::io::Result<Result<Value, Value>> {
        #[derive(serde::Serialize)]
        struct Request<'a, P> {
            jsonrpc: &'static str,
            id: i64,
            method: &'a str,
            params: P,
        }
        let id = self.next_id;
        self.next_id += 1;
        let body = serde_json::to_string(&Request { jsonrpc: "2.0", id, method, params })
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // The server skips a longer message and can only answer it without its id.
        if body.len() > framing::MAX_MESSAGE {
            return Ok(Err(json!({
                "code": -32602,
                "message": format!(
                    "the request is {} bytes, over the {} bytes a message to the server may have; nothing was sent",
                    body.len(),
                    framing::MAX_MESSAGE
                ),
            })));
        }
        self.write_with_pending(framing::encode(body.as_bytes()))?;
        loop {
            let msg = self.read()?;
            if msg.get("method").is_some() {
                // A request from the server (e.g. progress creation): answer with null.
                if let Some(rid) = msg.get("id") {
                    let rid = rid.clone();
                    self.send(&json!({ "jsonrpc": "2.0", "id": rid, "result": null }))?;
                } else if let Some(kept) = self.notifications.as_mut() {
                    kept.push(msg);
                }
                continue;
            }
            // An error without an id is the server's answer to a message it could not read:
            // one request is out at a time, so it is this one's.
            let unread = msg.get("id").is_some_and(Value::is_null) && msg.get("error").is_some();
            if msg.get("id") == Some(&json!(id)) || unread {
                if let Some(e) = msg.get("error") {
                    return Ok(Err(e.clone()));
                }
                return Ok(Ok(msg.get("result").cloned().unwrap_or(Value::Null)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn ignore(_: libc::c_int) {}

    /// A signal handled by this process while a request waits for its reply does not fail
    /// the request. Before, `forge-lsp demo` failed now and then with "Interrupted system
    /// call" when its agent's SIGCHLD reached the thread that waited for the server.
    #[test]
    fn a_signal_while_waiting_for_a_reply_is_not_an_error() {
        // SIGURG without SA_RESTART: nothing else in this test binary uses it.
        // SAFETY: installs a handler that does nothing; sigaction is given valid pointers.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGURG, &sa, std::ptr::null_mut()), 0);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut d = Decoder::new();
            let mut chunk = [0u8; 4096];
            let id = loop {
                if let Some(Event::Frame(body)) = d.next_event() {
                    break serde_json::from_slice::<Value>(&body).unwrap()["id"].clone();
                }
                let n = s.read(&mut chunk).unwrap();
                d.push(&chunk[..n]);
            };
            // Late enough for the signal to find the client waiting.
            std::thread::sleep(Duration::from_millis(300));
            s.write_all(&framing::encode(json!({ "jsonrpc": "2.0", "id": id, "result": 7 }).to_string().as_bytes()))
                .unwrap();
            s
        });
        // SAFETY: pthread_self names this thread, which outlives the signalling thread's use.
        let me = unsafe { libc::pthread_self() };
        let signaller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: `me` is the waiting test thread, alive until this thread is joined.
            unsafe { libc::pthread_kill(me, libc::SIGURG) };
        });
        let mut c = LspClient::connect(&path).unwrap();
        let r = c.request("x", json!({}));
        signaller.join().unwrap();
        let _s = server.join().unwrap();
        assert_eq!(r.unwrap().unwrap(), json!(7));
    }

    /// An error without an id (the server could not read the message, e.g. one over its
    /// size limit) answers the request in flight; a request too large for one message is
    /// refused before anything is sent.
    #[test]
    fn an_error_without_an_id_answers_the_request_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut chunk = [0u8; 4096];
            let _ = s.read(&mut chunk).unwrap();
            let unread = json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32600, "message": "too long" } });
            s.write_all(&framing::encode(unread.to_string().as_bytes())).unwrap();
            s
        });
        let mut c = LspClient::connect(&path).unwrap();
        let r = c.request("x", json!({})).unwrap();
        assert_eq!(r.unwrap_err()["message"], json!("too long"));
        let _s = server.join().unwrap();
        let big = "x".repeat(framing::MAX_MESSAGE);
        let r = c.request("x", json!({ "content": big })).unwrap();
        let e = r.unwrap_err();
        assert_eq!(e["code"], json!(-32602));
        assert!(e["message"].as_str().unwrap().contains("nothing was sent"), "{e}");
    }
}
