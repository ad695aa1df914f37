//! The agent host port and its `command` implementation (PROTOCOL.md §7).
//!
//! A loop phase session is a conversation run by an agent host. The `command` host runs
//! the configured argv template (`agent.command`) once per turn, in the loop's worktree,
//! with the prompt on standard input and in `{prompt_file}`, and these variables:
//! `FORGE_LSP_SOCKET`, `FORGE_SESSION_ID`, `FORGE_SESSION_TOKEN`, `FORGE_LOOP`,
//! `FORGE_ROLE`, `FORGE_WORKTREE`, `FORGE_DATA_DIR`, `FORGE_AGENT` (the agent kind:
//! `code`, `auditor-loop`; `forge-lsp call` uses it when `--agent` is not given), and
//! `FORGE_TURN_ID` (new each turn: what carries it is killed when the turn is stopped). The turn ends when the process exits:
//! exit 0 with output is a reply, exit 0 without output is no reply, any other exit is an
//! assistant error.
//!
//! Placeholders: `{session}` (the session id), `{session_uuid}` (a UUID derived from the
//! session id, the same on every turn), `{resume}` (the session id on every turn after the
//! session's first, else empty: an argument that is exactly `{resume}` is then dropped
//! together with the flag right before it, and so is `<flag>={resume}`), `{agent}`,
//! `{model}` (empty when none is configured), `{variant}` (the model variant, empty when
//! none), `{cwd}`, `{title}`, `{prompt_file}`.
//!
//! `PWD` is the worktree. The command is one [`crate::agents::AgentHost`]: the generic
//! host or an `agent.preset` (engine/src/agents/), which builds the argv and environment
//! and reads the output; this module runs the process the same way for all of them.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::mpsc;

use forge_store::loop_db;

pub use crate::turn::{self_bin, tail_chars, usage_file, Activity, TurnOutcome, TurnRequest};

pub use crate::process::TURN_ENV;

/// A running turn; dropping it does not stop the process, `abort` does.
#[derive(Debug, Clone)]
pub struct TurnHandle {
    pub pid: Option<u32>,
    /// Notified once the turn's end is recorded (what the CLI printed: its session id,
    /// usage), just before its outcome is sent.
    ended: Arc<tokio::sync::Notify>,
    /// Set by [`TurnHandle::abort`]: the turn's end then also kills what left its group.
    aborted: Arc<std::sync::atomic::AtomicBool>,
}

impl TurnHandle {
    /// Kills the turn's whole process group, and (when the turn ends) every process that
    /// carries its mark (`FORGE_TURN_ID`), however it left the group.
    pub fn abort(&self) {
        self.aborted.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(pid) = self.pid {
            crate::process::kill_group(pid);
        }
    }

    /// Waits (at most `wait`) until the turn's end is recorded, after [`TurnHandle::abort`]
    /// that is once what left its group is killed too: a server about to exit must not go
    /// before that step, which nobody would take after it. Whether it ended in time.
    pub async fn wait_ended(&self, wait: std::time::Duration) -> bool {
        self.pid.is_none() || tokio::time::timeout(wait, self.ended.notified()).await.is_ok()
    }

    /// Kills the turn and waits (at most `wait`) until its end is recorded: a turn started
    /// next in the same session must find the CLI session id and usage the killed one
    /// printed (Claude Code refuses a second start under the same `--session-id`; Codex's
    /// usage is a running total each turn subtracts from).
    pub async fn abort_and_wait(&self, wait: std::time::Duration) {
        self.abort();
        if self.pid.is_some() && tokio::time::timeout(wait, self.ended.notified()).await.is_err() {
            tracing::warn!("a killed agent turn did not end within {wait:?}; the next turn starts anyway");
        }
    }
}

/// The placeholders [`expand`] replaces in an `agent.command` template.
pub const PLACEHOLDERS: [&str; 9] =
    ["{session_uuid}", "{session}", "{resume}", "{agent}", "{model}", "{variant}", "{cwd}", "{title}", "{prompt_file}"];

/// Expands the argv template.
pub fn expand(argv: &[String], req: &TurnRequest, prompt_file: &Path) -> Vec<String> {
    let resume = if req.resume { req.session_id.as_str() } else { "" };
    let uuid = forge_domain::agent_cli::session_uuid(&req.session_id);
    forge_domain::agent_cli::drop_empty_resume(argv, resume.is_empty())
        .iter()
        .map(|a| {
            a.replace("{session_uuid}", &uuid)
                .replace("{session}", &req.session_id)
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

const TAIL: usize = 64 * 1024;

/// The `FORGE_USAGE_FILE` an agent gets: in a sandboxed loop `<worktree>/.forge/usage/
/// <session>.jsonl` (writable inside the sandbox, where the data directory is read-only),
/// else the session's usage file in the data directory.
pub fn agent_usage_file(req: &TurnRequest) -> PathBuf {
    match req.shim_dir {
        Some(_) => req.cwd.join(crate::sandbox::USAGE_DIR).join(format!("{}.jsonl", req.session_id)),
        None => usage_file(&req.data_dir, &req.session_id),
    }
}

/// The most usage text taken from a worktree per turn.
const USAGE_CAP: u64 = 16 * 1024 * 1024;

/// Moves what the agent appended to its worktree usage file ([`agent_usage_file`]) to the
/// session's usage file in the data directory. The file is renamed away first and read
/// without following a symlink; a `.forge` or `.forge/usage` that is not a plain directory
/// is left alone.
pub fn absorb_usage(req: &TurnRequest) {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    // The folder is opened once, never through a link (a `.forge` or `.forge/usage` that is
    // a link is left alone), and the file is renamed, read and removed relative to it: a
    // sandboxed command may swap names under it (a FIFO or a link at the file's name, a
    // link for the folder), and a path re-walked for each step could then move, read or
    // delete another file (found by reviews: a FIFO held this thread for good).
    let Ok(dir) = forge_core::beneath::open_dir(&req.cwd, Path::new(crate::sandbox::USAGE_DIR), false) else {
        return;
    };
    let file = agent_usage_file(req);
    let Some(name) = file.file_name() else { return };
    let taken = format!(".{}.{}.taken", req.session_id, req.turn);
    let taken = std::ffi::OsStr::from_bytes(taken.as_bytes());
    if forge_core::beneath::rename_in(&dir, name, taken).is_err() {
        return;
    }
    let mut text = String::new();
    let read = forge_core::beneath::open_file_in(&dir, taken).and_then(|f| f.take(USAGE_CAP).read_to_string(&mut text));
    let _ = forge_core::beneath::unlink_at(&dir, taken, false);
    if let Err(e) = read {
        tracing::warn!(session = %req.session_id, "cannot read the agent's usage file {}: {e}", file.display());
        return;
    }
    if text.trim().is_empty() {
        return;
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    use std::io::Write;
    let dest = usage_file(&req.data_dir, &req.session_id);
    let _ = forge_core::paths::create_private_dirs(&req.data_dir.join("usage"));
    let res = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&dest)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = res {
        tracing::warn!(session = %req.session_id, "cannot record usage in {}: {e}", dest.display());
    }
}

/// The last bytes an agent wrote to one of its pipes, kept as they arrive, so that what was
/// read so far can be taken even when the pipe never ends (a process outside the turn's
/// group holds it open).
#[derive(Default)]
struct Tail {
    buf: std::sync::Mutex<Vec<u8>>,
}

impl Tail {
    /// The last `keep` bytes, as text.
    fn take(&self, keep: usize) -> String {
        let mut buf = std::mem::take(&mut *self.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        if buf.len() > keep {
            buf.drain(..buf.len() - keep);
            // From a character's start: not the end of one cut in two.
            let cont = buf.iter().take(3).take_while(|&&b| b & 0xC0 == 0x80).count();
            buf.drain(..cont);
        }
        String::from_utf8_lossy(&buf).into_owned()
    }
}

async fn read_tail<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    session: String,
    activity: Arc<Activity>,
    keep: usize,
    tail: Arc<Tail>,
) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                activity.touch(&session);
                let mut buf = tail.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > 2 * keep {
                    let cut = buf.len() - keep;
                    buf.drain(..cut);
                }
            }
        }
    }
}

/// How long the pipes of a turn whose agent exited may stay open after its process group
/// was killed: only a process that left the group (`setsid`) can still hold them.
const PIPES_LEFT_OPEN: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits until process `pid` (a child of this process) has exited, without reaping it: as
/// long as it is a zombie its pid, which is also its process group's id, cannot be taken
/// by another process, so the group can be killed after it without hitting a stranger.
fn wait_exit_unreaped(pid: u32) {
    let id: libc::id_t = pid;
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`; WNOWAIT leaves the child to be reaped.
        let r = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Starts a turn; its outcome is sent on `done` as `(session_id, turn, outcome)`.
pub fn start_turn(req: TurnRequest, done: mpsc::UnboundedSender<(String, u32, TurnOutcome)>) -> TurnHandle {
    let session = req.session_id.clone();
    let turn = req.turn;
    let ended = Arc::new(tokio::sync::Notify::new());
    let aborted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A turn that starts no agent forgets its claim (`TurnRequest::claim`), after its
    // outcome is sent: the runner's next turn claims under a name of its own.
    let unclaim = || {
        if let (Some(store), Some(claim)) = (req.record.clone(), req.claim.clone()) {
            let s = session.clone();
            tokio::spawn(async move {
                if let Err(e) = store.call(move |c| loop_db::forget_agent_process(c, &s, &claim)).await {
                    tracing::warn!("cannot clear a turn's claim: {e}");
                }
            });
        }
    };
    let fail = |msg: String| {
        let _ = done.send((session.clone(), turn, TurnOutcome::Error(msg)));
        unclaim();
        TurnHandle { pid: None, ended: ended.clone(), aborted: aborted.clone() }
    };
    let host = crate::agents::host_for(&req);
    if let Err(e) = forge_core::paths::create_private_dirs(&req.prompt_dir) {
        return fail(format!("cannot create {}: {e}", req.prompt_dir.display()));
    }
    let prompt_file = req.prompt_dir.join(format!("{}-{}.md", req.session_id, req.turn));
    let _ = forge_core::paths::create_private_dirs(&req.data_dir.join("usage"));
    let mut written = crate::agents::write_private(&prompt_file, req.prompt.as_bytes());
    if written.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        // The folder was removed in between (the sweep of agents' files takes a loop's
        // folder once it is empty): made again, once.
        written = forge_core::paths::create_private_dirs(&req.prompt_dir)
            .and_then(|()| crate::agents::write_private(&prompt_file, req.prompt.as_bytes()));
    }
    if let Err(e) = written {
        return fail(format!("cannot write the prompt file {}: {e}", prompt_file.display()));
    }
    // Configuration of the preset's CLI in the worktree that the user has not trusted: no
    // turn, and an outcome of its own (the loop ends instead of retrying).
    if let Some(why) = crate::agents::config_refusal(req.preset, req.project_config, &req.cwd) {
        let _ = done.send((session.clone(), turn, TurnOutcome::Refused(why)));
        unclaim();
        return TurnHandle { pid: None, ended: ended.clone(), aborted: aborted.clone() };
    }
    let launch = match host.prepare(&req, &prompt_file) {
        Ok(l) if !l.argv.is_empty() => l,
        Ok(_) => return fail("agent.command is empty".into()),
        Err(e) => return fail(e),
    };
    let argv = if launch.template { expand(&launch.argv, &req, &prompt_file) } else { launch.argv };
    let mut cmd = match (&launch.whole_in_sandbox, &req.shim_dir) {
        // The whole agent process in the loop's sandbox (its shells cannot be reached
        // from outside): network shared, so its model endpoint stays reachable.
        (Some(extra), Some(_)) => {
            let bwrap = match crate::sandbox::find_bwrap() {
                Ok(b) => b,
                Err(e) => return fail(e),
            };
            whole_sandbox(&req, &launch.keep_env, extra, &argv).command(&bwrap, &argv, &req.cwd)
        }
        _ => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            // A secret-named variable whose name is no shell name (`MY-API-KEY`) would pass
            // the shims where `/bin/sh` is bash (it lists only shell names but passes all):
            // a sandboxed loop's agent does not get one.
            if req.shim_dir.is_some() {
                for k in crate::secrets::secret_vars_here(&req.secrets.expose_env) {
                    if !crate::secrets::is_shell_name(&k.to_string_lossy()) {
                        c.env_remove(&k);
                    }
                }
            }
            c
        }
    };
    // Marks every process of this turn, so that what left its process group is found at
    // the turn's end (`process::kill_marked`).
    let turn_id = ulid::Ulid::new().to_string();
    cmd.current_dir(&req.cwd)
        .env("PWD", &req.cwd)
        .env("FORGE_SESSION_ID", &req.session_id)
        .env("FORGE_SESSION_TOKEN", &req.token)
        .env("FORGE_LOOP", &req.loop_name)
        .env("FORGE_ROLE", &req.role)
        .env("FORGE_AGENT", &req.agent)
        .env("FORGE_WORKTREE", &req.cwd)
        .env("FORGE_DATA_DIR", &req.data_dir)
        .env("FORGE_PROMPT_FILE", &prompt_file)
        .env("FORGE_USAGE_FILE", agent_usage_file(&req))
        .env(TURN_ENV, &turn_id)
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
    for (k, v) in &launch.env {
        cmd.env(k, v);
    }
    // A loop's turn: its runner is in this server (an untracked session is nobody's).
    if req.record.is_some() {
        crate::process::die_with_server(&mut cmd);
    } else {
        crate::process::original_limits(&mut cmd);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        // The one directory a spawn needs besides the program: name it when it is gone.
        Err(e) if !req.cwd.is_dir() => {
            return fail(format!(
                "cannot start the agent command: its working directory {} is gone ({e})",
                req.cwd.display()
            ))
        }
        Err(e) => return fail(format!("cannot start the agent command {:?}: {e}", argv[0])),
    };
    let pid = child.id();
    crate::process::RUNNING_TURNS.lock().unwrap_or_else(|p| p.into_inner()).insert(session.clone(), turn_id.clone());
    crate::process::ENDED_TURNS.lock().unwrap_or_else(|p| p.into_inner()).remove(&session);
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let prompt = req.prompt.clone();
    let keep = host.keep_stdout();
    let ended2 = ended.clone();
    let aborted2 = aborted.clone();
    tokio::spawn(async move {
        // The prompt is written beside the readers, not before them: an agent that writes
        // more than a pipe holds before it has read its whole prompt (a long plan) would
        // otherwise wait on its output while this waited on its input.
        let writer = tokio::spawn(async move {
            if let Some(mut s) = stdin {
                // An agent that does not read stdin closes it early: not an error.
                let _ = s.write_all(prompt.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        let (s1, s2) = (session.clone(), session.clone());
        let (a1, a2) = (req.activity.clone(), req.activity.clone());
        let (t1, t2) = (Arc::new(Tail::default()), Arc::new(Tail::default()));
        let (t1r, t2r) = (t1.clone(), t2.clone());
        let mut out = tokio::spawn(async move {
            if let Some(s) = stdout {
                read_tail(s, s1, a1, keep, t1r).await;
            }
        });
        let mut err = tokio::spawn(async move {
            if let Some(s) = stderr {
                read_tail(s, s2, a2, TAIL, t2r).await;
            }
        });
        // Recorded while the turn runs, once its input and output are under way (the store
        // may wait for another process's write lock): if this server dies, a restart or
        // cancel from another one ends what the turn left running (`kill_orphaned`).
        let leader = pid.and_then(crate::process::Leader::of).map(|l| l.record());
        crate::pause::at("host.record").await;
        if let (Some(store), Some(l)) = (&req.record, &leader) {
            let (s, l, claim) = (session.clone(), l.clone(), req.claim.clone());
            let recorded = store.call(move |c| match claim {
                Some(claim) => loop_db::replace_claim(c, &s, &claim, &l),
                None => loop_db::record_agent_process(c, &s, &l),
            });
            if let Err(e) = recorded.await {
                tracing::warn!(session = %session, "cannot record the agent's process: {e}");
            }
        }
        // The turn ends when the agent exits (PROTOCOL.md 7), not when its output does:
        // what it left running in its process group (`npm run dev &`) is killed then, which
        // also closes the pipes such a process held. Killed before the agent is reaped, so
        // the group's id is still the agent's.
        if let Some(pid) = pid {
            let _ = tokio::task::spawn_blocking(move || wait_exit_unreaped(pid)).await;
            crate::process::kill_group(pid);
        }
        // A turn that was stopped (cancel, restart, the stall watchdog) also loses what left
        // the group (`setsid`, a daemon) but carries its mark. A turn that ended by itself
        // keeps those: a daemon it started (sccache, an ssh master, a Gradle daemon) may be
        // serving other loops and the user by now.
        // The turn is over: what the server runs for the session from now on is not its.
        {
            let mut running = crate::process::RUNNING_TURNS.lock().unwrap_or_else(|p| p.into_inner());
            if running.get(&session) == Some(&turn_id) {
                running.remove(&session);
                crate::process::note_turn_ended(&session);
            }
        }
        if aborted2.load(std::sync::atomic::Ordering::SeqCst) {
            let t = turn_id.clone();
            let escaped = tokio::task::spawn_blocking(move || crate::process::kill_marked(TURN_ENV, &t)).await;
            if let Ok(n @ 1..) = escaped {
                tracing::info!(session = %session, "killed {n} process(es) the stopped agent started outside its process group");
            }
        }
        // The record is the agent's process, or the turn's claim if that was never
        // replaced (the process could not be read): either is forgotten if still there.
        if let Some(store) = &req.record {
            for l in leader.into_iter().chain(req.claim.clone()) {
                let s = session.clone();
                if let Err(e) = store.call(move |c| loop_db::forget_agent_process(c, &s, &l)).await {
                    tracing::warn!(session = %session, "cannot clear the agent's process record: {e}");
                }
            }
        }
        let status = child.wait().await;
        // Its input ends with it (or with a process it left holding it): not waited for.
        writer.abort();
        // A process that left the group (`setsid`) may still hold a pipe: what was read by
        // then is the output.
        let drained = tokio::time::timeout(PIPES_LEFT_OPEN, async {
            let _ = (&mut out).await;
            let _ = (&mut err).await;
        })
        .await;
        if drained.is_err() {
            out.abort();
            err.abort();
            tracing::warn!(session = %session, "the agent exited, but a process it started outside its process group still holds its output; the turn ends without waiting for it");
        }
        let (stdout, stderr) = (t1.take(keep), t2.take(TAIL));
        if req.shim_dir.is_some() {
            let r2 = req.clone();
            let _ = tokio::task::spawn_blocking(move || absorb_usage(&r2)).await;
        }
        let outcome = match status {
            Ok(s) if std::os::unix::process::ExitStatusExt::signal(&s).is_some() => {
                let sig = std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0);
                // What it printed before it was killed is still recorded: the CLI's session
                // id (the next turn resumes it instead of starting over, or of reusing an
                // id the CLI now refuses) and the usage it reported. A runner that kills a
                // turn to start another waits for this (`TurnHandle::abort_and_wait`).
                let run = crate::agents::Run { code: None, stdout, stderr };
                let h = crate::agents::host_for(&req);
                let r2 = req.clone();
                let _ = tokio::task::spawn_blocking(move || h.finish(&r2, &run)).await;
                TurnOutcome::Aborted(format!("agent killed by signal {sig}"))
            }
            Ok(s) => {
                let run = crate::agents::Run { code: s.code(), stdout, stderr };
                // Parsing and recording (usage, the CLI's session id) touch files: off the
                // runtime's threads.
                let h = crate::agents::host_for(&req);
                let r2 = req.clone();
                tokio::task::spawn_blocking(move || h.finish(&r2, &run))
                    .await
                    .unwrap_or_else(|e| TurnOutcome::Error(format!("reading the agent's output failed: {e}")))
            }
            Err(e) => TurnOutcome::Error(format!("waiting for the agent failed: {e}")),
        };
        ended2.notify_one();
        let _ = done.send((session, turn, outcome));
    });
    TurnHandle { pid, ended, aborted }
}

/// The sandbox of an agent CLI run whole inside it (Codex): the loop's, with the network
/// shared, the CLI's own `extra` folders writable, its key variables `keep_env` kept, and
/// its program bound where the sandbox would hide it.
fn whole_sandbox(
    req: &TurnRequest,
    keep_env: &[String],
    extra: &[PathBuf],
    argv: &[String],
) -> crate::sandbox::Sandbox {
    let mut sb =
        crate::sandbox::Sandbox::for_loop(&req.cwd, true, req.socket.as_deref()).with_secrets(req.secrets.clone());
    // The agent CLI keeps its own key (`agents/codex.rs`), and only that.
    sb.keep_env = keep_env.to_vec();
    sb.binds.extend(extra.iter().cloned());
    // Added to the loop's own binds (the repository's git directory under `/tmp`), not in
    // their place (they were replaced, and git failed in Codex's commands there).
    sb.ro_binds.extend(crate::sandbox::program_binds(Some(argv), &req.cwd));
    // The CLI's install folders where the sandbox would hide them, found on the PATH the
    // agent gets.
    let path = agent_path(req.shim_dir.as_deref(), self_bin().as_deref(), std::env::var_os("PATH"));
    let install = crate::sandbox::install_binds(argv, &path, &req.cwd);
    sb.install_dirs = install.dirs;
    sb.install_links = install.links;
    sb.with_shims(&req.data_dir)
}

/// The variable that gives an agent the path of the running `forge-lsp` binary.
pub const BIN_ENV: &str = "FORGE_LSP_BIN";

/// An agent's `PATH`: the sandbox shims first, then the directory of the server's binary,
/// then the server's own `PATH` (without repeating those two). Only absolute directories:
/// an empty entry, `.` or `node_modules/.bin` would be looked up in the agent's working
/// directory, the worktree, whose files come from the repository (a committed
/// `node_modules/.bin/node` run on the host by `#!/usr/bin/env node`). A directory whose
/// name holds a `:` cannot be on `PATH` and is left out.
pub fn agent_path(shims: Option<&Path>, bin: Option<&Path>, path: Option<std::ffi::OsString>) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in shims.into_iter().chain(bin.and_then(Path::parent)) {
        if d.is_absolute() && !d.as_os_str().as_bytes().contains(&b':') && !dirs.iter().any(|x| x == d) {
            dirs.push(d.to_path_buf());
        }
    }
    let rest = path.unwrap_or_default();
    let rest: Vec<PathBuf> = std::env::split_paths(&rest).filter(|d| d.is_absolute() && !dirs.contains(d)).collect();
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
            Some(Path::new("/d/shims/ab12")),
            Some(Path::new("/opt/forge/forge-lsp")),
            Some("/usr/bin:/opt/forge:/bin".into()),
        );
        assert_eq!(p, "/d/shims/ab12:/opt/forge:/usr/bin:/bin");
        // Relative entries would be looked up in the worktree: left out.
        assert_eq!(agent_path(None, None, Some("/usr/bin:.:node_modules/.bin::bin:/bin".into())), "/usr/bin:/bin");
        assert_eq!(agent_path(Some(Path::new("data/shims/x")), None, Some("/bin".into())), "/bin");
        assert_eq!(agent_path(None, Some(Path::new("/o/forge-lsp")), None), "/o");
        assert_eq!(agent_path(None, Some(Path::new("/a:b/forge-lsp")), Some("/bin".into())), "/bin");
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn usage_lines_move_to_the_data_directory() {
        let d = tempfile::tempdir().unwrap();
        // A sandboxed loop turn (its usage file is in the worktree).
        let r = crate::agents::test_support::req(d.path(), None);
        std::fs::create_dir_all(r.cwd.join(crate::sandbox::USAGE_DIR)).unwrap();
        std::fs::write(agent_usage_file(&r), "{\"a\":1}").unwrap();
        absorb_usage(&r);
        assert_eq!(std::fs::read_to_string(usage_file(&r.data_dir, "ses_T1")).unwrap(), "{\"a\":1}\n");
        assert!(!agent_usage_file(&r).exists());
    }

    /// A sandboxed command can put a FIFO at the usage file's name: it is not waited on
    /// (before, the open waited for a writer forever and the loop's turn never ended).
    #[test]
    fn a_fifo_at_the_usage_file_is_passed_over_without_waiting() {
        let d = tempfile::tempdir().unwrap();
        // A sandboxed loop turn (its usage file is in the worktree).
        let r = crate::agents::test_support::req(d.path(), None);
        std::fs::create_dir_all(r.cwd.join(crate::sandbox::USAGE_DIR)).unwrap();
        let fifo = std::ffi::CString::new(agent_usage_file(&r).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            absorb_usage(&r);
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("absorb_usage returned");
        assert!(!usage_file(&d.path().join("data"), "ses_T1").exists());
    }

    /// A `.forge/usage` that is a link (to the data directory's usage folder, say) is not
    /// gone through: nothing there is renamed, read or removed.
    #[test]
    fn a_linked_usage_folder_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        // A sandboxed loop turn (its usage file is in the worktree).
        let r = crate::agents::test_support::req(d.path(), None);
        let target = d.path().join("elsewhere");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("ses_T1.jsonl"), "{\"kept\":1}\n").unwrap();
        std::fs::create_dir_all(r.cwd.join(".forge")).unwrap();
        std::os::unix::fs::symlink(&target, r.cwd.join(crate::sandbox::USAGE_DIR)).unwrap();
        absorb_usage(&r);
        assert_eq!(std::fs::read_to_string(target.join("ses_T1.jsonl")).unwrap(), "{\"kept\":1}\n");
        assert!(!usage_file(&r.data_dir, "ses_T1").exists());
    }
}

#[cfg(test)]
mod expand_tests {
    use super::*;

    #[test]
    fn placeholders_and_the_resume_flag() {
        let d = tempfile::tempdir().unwrap();
        let mut r = TurnRequest {
            argv: vec![],
            session_id: "ses_T1".into(),
            token: "tok".into(),
            role: "coder".into(),
            agent: "code".into(),
            model: Some("m1".into()),
            variant: Some("high".into()),
            loop_name: "l".into(),
            cwd: d.path().join("wt"),
            title: "t".into(),
            prompt: "p".into(),
            resume: false,
            socket: None,
            data_dir: d.path().join("data"),
            prompt_dir: d.path().join("prompts"),
            turn: 1,
            shim_dir: None,
            activity: Arc::default(),
            preset: None,
            project_config: false,
            secrets: Default::default(),
            record: None,
            claim: None,
        };
        // A CLI run whole in the sandbox keeps the loop's binds (the git directory of a
        // repository under /tmp) beside its program's.
        let repo = tempfile::Builder::new().prefix("fl-host").tempdir_in("/tmp").unwrap();
        let repo_path = repo.path().canonicalize().unwrap();
        let git = std::process::Command::new("git").args(["init", "-q"]).arg(&repo_path).status().unwrap();
        assert!(git.success());
        let wt = repo_path.join("wt");
        std::fs::create_dir(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}/.git/worktrees/wt\n", repo_path.display())).unwrap();
        let whole = TurnRequest { cwd: wt, ..r.clone() };
        let sb = whole_sandbox(&whole, &[], &[d.path().join("codex-home")], &["/bin/sh".to_string()]);
        assert!(sb.ro_binds.contains(&repo_path.join(".git")), "{:?}", sb.ro_binds);
        assert_eq!(sb.binds, vec![d.path().join("codex-home")]);
        let uuid = forge_domain::agent_cli::session_uuid("ses_T1");
        let t = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let argv = t(&[
            "a",
            "--id",
            "{session_uuid}",
            "--resume",
            "{resume}",
            "--s={resume}",
            "-m",
            "{model}",
            "{prompt_file}",
            "--effort={variant}",
        ]);
        let table: &[(bool, Vec<String>)] = &[
            (
                false,
                vec![
                    "a".into(),
                    "--id".into(),
                    uuid.clone(),
                    "-m".into(),
                    "m1".into(),
                    "/p".into(),
                    "--effort=high".into(),
                ],
            ),
            (
                true,
                vec![
                    "a".into(),
                    "--id".into(),
                    uuid.clone(),
                    "--resume".into(),
                    "ses_T1".into(),
                    "--s=ses_T1".into(),
                    "-m".into(),
                    "m1".into(),
                    "/p".into(),
                    "--effort=high".into(),
                ],
            ),
        ];
        for (resume, want) in table {
            r.resume = *resume;
            assert_eq!(&expand(&argv, &r, Path::new("/p")), want, "resume={resume}");
        }
        // Every placeholder the list names is one `expand` replaces (loop start refuses them
        // in a preset's program by this list).
        r.resume = true;
        for p in PLACEHOLDERS {
            let out = expand(&[format!("x{p}y")], &r, Path::new("/p"));
            assert!(!out.iter().any(|a| a.contains(p)), "{p}: {out:?}");
        }
    }
}
