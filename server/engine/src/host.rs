//! The agent host port and its `command` implementation (PROTOCOL.md §7).
//!
//! A loop phase session is a conversation run by an agent host. The `command` host runs
//! the configured argv template (`agent.command`) once per turn, in the loop's worktree,
//! with the prompt on standard input and in `{prompt_file}`, and these variables:
//! `FORGE_LSP_SOCKET`, `FORGE_SESSION_ID`, `FORGE_SESSION_TOKEN`, `FORGE_LOOP`,
//! `FORGE_ROLE`, `FORGE_WORKTREE`, `FORGE_DATA_DIR`, `FORGE_AGENT` (the agent kind:
//! `code`, `auditor-loop`; `forge-lsp call` uses it when `--agent` is not given). The turn ends when the process exits:
//! exit 0 with output is a reply, exit 0 without output is no reply, any other exit is an
//! assistant error.
//!
//! Placeholders: `{session}` (the session id), `{resume}` (the session id on every turn
//! after the session's first, else empty: an argument that is exactly `{resume}` is then
//! dropped), `{agent}`, `{model}` (empty when none is configured), `{variant}` (the
//! model variant, empty when none), `{cwd}`, `{title}`, `{prompt_file}`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::mpsc;

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    /// Exit 0 with output (the output's tail).
    Reply(String),
    /// Exit 0 without output.
    NoReply,
    /// Any other exit, or the process could not run: the message says what failed.
    Error(String),
    /// The process was killed by a signal it did not send itself through Forge (a turn the
    /// runner ends itself is never reported as a turn end): an aborted session, not an
    /// assistant error. The message names the signal.
    Aborted(String),
}

/// Everything one turn needs.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub argv: Vec<String>,
    pub session_id: String,
    pub token: String,
    /// `coder`, `auditor` or `post_action` (empty for an untracked session).
    pub role: String,
    pub agent: String,
    pub model: Option<String>,
    /// The model variant (`{variant}`; empty when none).
    pub variant: Option<String>,
    pub loop_name: String,
    pub cwd: PathBuf,
    pub title: String,
    pub prompt: String,
    /// Not the session's first turn: `{resume}` expands to the session id.
    pub resume: bool,
    pub socket: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// Where prompt files go.
    pub prompt_dir: PathBuf,
    pub turn: u32,
    /// The loop's sandbox shims (engine/sandbox.rs): first on the agent's `PATH`, and
    /// `SHELL=<dir>/sh`, so the shells the agent starts run sandboxed.
    pub shim_dir: Option<PathBuf>,
    /// Where output counts as the session's activity.
    pub activity: Arc<Activity>,
}

/// A running turn; dropping it does not stop the process, `abort` does.
#[derive(Debug, Clone, Copy)]
pub struct TurnHandle {
    pub pid: Option<u32>,
}

impl TurnHandle {
    /// Kills the turn's whole process group.
    pub fn abort(&self) {
        if let Some(pid) = self.pid {
            crate::process::kill_group(pid);
        }
    }
}

/// Expands the argv template.
pub fn expand(argv: &[String], req: &TurnRequest, prompt_file: &Path) -> Vec<String> {
    let resume = if req.resume { req.session_id.as_str() } else { "" };
    argv.iter()
        .filter(|a| !(a.as_str() == "{resume}" && resume.is_empty()))
        .map(|a| {
            a.replace("{session}", &req.session_id)
                .replace("{resume}", resume)
                .replace("{agent}", &req.agent)
                .replace("{model}", req.model.as_deref().unwrap_or(""))
                .replace("{variant}", req.variant.as_deref().unwrap_or(""))
                .replace("{cwd}", &req.cwd.display().to_string())
                .replace("{title}", &req.title)
                .replace("{prompt_file}", &prompt_file.display().to_string())
        })
        .collect()
}

/// Last activity (epoch ms) per session and its source: `output` (its process printed),
/// `tool-call` (it called a tool), `turn-start` (a turn was started and nothing else was
/// seen since). One per engine; the stall watchdog and `forge.task-status` read it.
#[derive(Debug, Default)]
pub struct Activity(std::sync::Mutex<std::collections::HashMap<String, (i64, &'static str)>>);

impl Activity {
    /// Records output of a session's process.
    pub fn touch(&self, session: &str) {
        self.touch_with(session, "output");
    }

    /// Records activity of a session with its source.
    pub fn touch_with(&self, session: &str, source: &'static str) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(session.to_string(), (forge_core::now_ms(), source));
        }
    }

    /// The last recorded activity of a session.
    pub fn last(&self, session: &str) -> Option<i64> {
        self.last_with_source(session).map(|(t, _)| t)
    }

    /// The last recorded activity of a session and its source.
    pub fn last_with_source(&self, session: &str) -> Option<(i64, &'static str)> {
        self.0.lock().ok().and_then(|m| m.get(session).copied())
    }

    /// Forgets a retired session.
    pub fn forget(&self, session: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(session);
        }
    }
}

/// Where a session's agent reports usage (JSON lines).
pub fn usage_file(data_dir: &Path, session: &str) -> PathBuf {
    data_dir.join("usage").join(format!("{session}.jsonl"))
}

const TAIL: usize = 64 * 1024;

async fn read_tail<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    session: String,
    activity: Arc<Activity>,
) -> (String, bool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut any = false;
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                any = true;
                activity.touch(&session);
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > 2 * TAIL {
                    buf.drain(..buf.len() - TAIL);
                }
            }
        }
    }
    if buf.len() > TAIL {
        buf.drain(..buf.len() - TAIL);
    }
    (String::from_utf8_lossy(&buf).into_owned(), any)
}

/// Starts a turn; its outcome is sent on `done` as `(session_id, turn, outcome)`.
pub fn start_turn(req: TurnRequest, done: mpsc::UnboundedSender<(String, u32, TurnOutcome)>) -> TurnHandle {
    let session = req.session_id.clone();
    let turn = req.turn;
    let fail = |msg: String| {
        let _ = done.send((session.clone(), turn, TurnOutcome::Error(msg)));
        TurnHandle { pid: None }
    };
    if req.argv.is_empty() {
        return fail("agent.command is empty".into());
    }
    if let Err(e) = std::fs::create_dir_all(&req.prompt_dir) {
        return fail(format!("cannot create {}: {e}", req.prompt_dir.display()));
    }
    let prompt_file = req.prompt_dir.join(format!("{}-{}.md", req.session_id, req.turn));
    let _ = std::fs::create_dir_all(req.data_dir.join("usage"));
    if let Err(e) = std::fs::write(&prompt_file, &req.prompt) {
        return fail(format!("cannot write the prompt file {}: {e}", prompt_file.display()));
    }
    let argv = expand(&req.argv, &req, &prompt_file);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(&req.cwd)
        .env("FORGE_SESSION_ID", &req.session_id)
        .env("FORGE_SESSION_TOKEN", &req.token)
        .env("FORGE_LOOP", &req.loop_name)
        .env("FORGE_ROLE", &req.role)
        .env("FORGE_AGENT", &req.agent)
        .env("FORGE_WORKTREE", &req.cwd)
        .env("FORGE_DATA_DIR", &req.data_dir)
        .env("FORGE_PROMPT_FILE", &prompt_file)
        .env("FORGE_USAGE_FILE", usage_file(&req.data_dir, &req.session_id))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    if let Some(s) = &req.socket {
        cmd.env("FORGE_LSP_SOCKET", s);
    }
    // The agent calls tools with `forge-lsp call`: give it this binary, whether or not it
    // is installed on PATH (`FORGE_LSP_BIN`, and its directory on `PATH` after the shims).
    let bin = self_bin();
    if let Some(b) = &bin {
        cmd.env(BIN_ENV, b);
    }
    cmd.env("PATH", agent_path(req.shim_dir.as_deref(), bin.as_deref(), std::env::var_os("PATH")));
    // Sandbox shims (engine/sandbox.rs).
    if let Some(dir) = &req.shim_dir {
        cmd.env("SHELL", dir.join("sh")).env_remove(crate::process::INSIDE_ENV);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start the agent command {:?}: {e}", argv[0])),
    };
    let pid = child.id();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let prompt = req.prompt.clone();
    tokio::spawn(async move {
        if let Some(mut s) = stdin {
            // An agent that does not read stdin closes it early: not an error.
            let _ = s.write_all(prompt.as_bytes()).await;
            let _ = s.shutdown().await;
        }
        let (s1, s2) = (session.clone(), session.clone());
        let (a1, a2) = (req.activity.clone(), req.activity.clone());
        let out = tokio::spawn(async move {
            match stdout {
                Some(s) => read_tail(s, s1, a1).await,
                None => (String::new(), false),
            }
        });
        let err = tokio::spawn(async move {
            match stderr {
                Some(s) => read_tail(s, s2, a2).await,
                None => (String::new(), false),
            }
        });
        let status = child.wait().await;
        let (out, any_out) = out.await.unwrap_or_default();
        let (err, _) = err.await.unwrap_or_default();
        let outcome = match status {
            Ok(s) if s.success() => {
                if any_out && !out.trim().is_empty() {
                    TurnOutcome::Reply(out)
                } else {
                    TurnOutcome::NoReply
                }
            }
            Ok(s) if std::os::unix::process::ExitStatusExt::signal(&s).is_some() => {
                let sig = std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0);
                TurnOutcome::Aborted(format!("agent killed by signal {sig}"))
            }
            Ok(s) => {
                let tail: String = err.trim().chars().rev().take(500).collect::<Vec<_>>().into_iter().rev().collect();
                let code = s.code().map(|c| format!("exit status {c}")).unwrap_or_else(|| "killed by a signal".into());
                TurnOutcome::Error(if tail.is_empty() {
                    format!("agent {code}")
                } else {
                    format!("agent {code}: {tail}")
                })
            }
            Err(e) => TurnOutcome::Error(format!("waiting for the agent failed: {e}")),
        };
        let _ = done.send((session, turn, outcome));
    });
    TurnHandle { pid }
}

/// The variable that gives an agent the path of the running `forge-lsp` binary.
pub const BIN_ENV: &str = "FORGE_LSP_BIN";

/// The binary this process runs (the server's own `forge-lsp`), if it still exists on disk.
pub fn self_bin() -> Option<PathBuf> {
    std::env::current_exe().ok().filter(|p| p.is_file())
}

/// An agent's `PATH`: the sandbox shims first, then the directory of the server's binary,
/// then the server's own `PATH` (without repeating those two, nor its empty entries, which
/// would mean the agent's working directory). A directory whose name holds a `:` cannot be
/// on `PATH` and is left out.
pub fn agent_path(shims: Option<&Path>, bin: Option<&Path>, path: Option<std::ffi::OsString>) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in shims.into_iter().chain(bin.and_then(Path::parent)) {
        if !d.as_os_str().is_empty() && !d.as_os_str().as_bytes().contains(&b':') && !dirs.iter().any(|x| x == d) {
            dirs.push(d.to_path_buf());
        }
    }
    let rest = path.unwrap_or_default();
    let rest: Vec<PathBuf> =
        std::env::split_paths(&rest).filter(|d| !d.as_os_str().is_empty() && !dirs.contains(d)).collect();
    std::env::join_paths(dirs.into_iter().chain(rest)).unwrap_or_default()
}

/// A random session token (hex of 32 bytes from the OS).
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn agent_path_puts_shims_then_the_binary_first() {
        let p = agent_path(
            Some(Path::new("/w/.forge/bin")),
            Some(Path::new("/opt/forge/forge-lsp")),
            Some("/usr/bin:/opt/forge:/bin".into()),
        );
        assert_eq!(p, "/w/.forge/bin:/opt/forge:/usr/bin:/bin");
        assert_eq!(agent_path(None, Some(Path::new("/o/forge-lsp")), None), "/o");
        assert_eq!(agent_path(None, Some(Path::new("/a:b/forge-lsp")), Some("/bin".into())), "/bin");
    }
}
