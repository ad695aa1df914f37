//! The data of one agent turn, shared by the host (engine/src/host.rs, which runs the
//! process) and the agent hosts (engine/src/agents/, which build its argv and read its
//! output): the request, the outcome, session activity, and the paths they agree on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Not started: the worktree holds configuration of the preset's CLI that the user has
    /// not trusted and the CLI cannot be told to leave out
    /// (`agents::config_refusal`; a turn may have written it for the next one).
    /// The loop ends (`worktree_failed`, with the message) instead of retrying a turn that
    /// cannot start.
    Refused(String),
    /// Not started: the turn's claim could not be written (a database failure,
    /// `runner::claim_turn`), and an agent that a restart from another server could not see
    /// must not start. The prompt counts as not sent: retried in the same phase.
    NotClaimed(String),
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
    /// `agent.preset`: the agent CLI whose preset runs the turn (else `agent.command`).
    pub preset: Option<forge_domain::agent_output::Cli>,
    /// `agent.trustProjectConfig`: the preset's CLI may load the repository's own
    /// configuration for it (hooks, MCP servers, plugins, which run on the host). False:
    /// it is started so that it does not (`agents/*.rs`, docs/agents.md).
    pub project_config: bool,
    /// `sandbox.hidePaths`, `sandbox.exposePaths`, `sandbox.exposeEnv`: an agent CLI run
    /// whole in the loop's sandbox (Codex) hides the user's secrets by them.
    pub secrets: crate::secrets::Secrets,
    /// Where the turn's leading process is recorded while it runs (a loop session's
    /// `agent_process`): the store of a loop's turn, `None` for an untracked session.
    pub record: Option<forge_store::Store>,
    /// What the session's `agent_process` was set to before the agent started, in the
    /// transaction that checked the loop is still the runner's (`runner::claim_turn`): a
    /// restart from another server sees the turn from then on, not only once the agent's
    /// process is recorded. Forgotten at the turn's end if still there (a turn that never
    /// started its agent, or whose process could not be recorded).
    pub claim: Option<String>,
}

/// Last activity (epoch ms) per session and its source: `output` (its process printed),
/// `tool-call` (it called a tool), `turn-start` (a turn was started and nothing else was
/// seen since). One per engine; the stall watchdog and `forge.task-status` read it.
///
/// Also the last *progress* of each session: a tool call, or output later than the start
/// grace given by [`Activity::turn_started`]. Output right at a turn's start only
/// shows the agent is alive (an agent CLI prints its start events at once, whether or not
/// its model ever answers), so it extends the stall timer but does not end a run of
/// stalls; later output is the model working (its text, its own tools' events).
#[derive(Debug, Default)]
pub struct Activity(std::sync::Mutex<std::collections::HashMap<String, Seen>>);

/// What [`Activity`] keeps of one session.
#[derive(Debug, Clone, Copy)]
struct Seen {
    at: i64,
    source: &'static str,
    progress: i64,
    turn_started: i64,
    grace: i64,
}

impl Activity {
    /// Records output of a session's process.
    pub fn touch(&self, session: &str) {
        self.touch_with(session, "output");
    }

    /// Records activity of a session with its source: `tool-call` is progress, and so is
    /// `output` later than the start grace after [`Activity::turn_started`].
    pub fn touch_with(&self, session: &str, source: &'static str) {
        if let Ok(mut m) = self.0.lock() {
            let now = forge_core::now_ms();
            let e = m.entry(session.to_string()).or_insert(Seen {
                at: now,
                source,
                progress: 0,
                turn_started: 0,
                grace: 0,
            });
            (e.at, e.source) = (now, source);
            match source {
                "tool-call" => e.progress = now,
                "output" if now - e.turn_started >= e.grace => e.progress = now,
                _ => {}
            }
        }
    }

    /// Records that a turn of the session started (source `turn-start`); its output within
    /// `grace_ms` is taken for start events, not progress.
    pub fn turn_started(&self, session: &str, grace_ms: i64) {
        self.touch_with(session, "turn-start");
        if let Ok(mut m) = self.0.lock() {
            if let Some(e) = m.get_mut(session) {
                (e.turn_started, e.grace) = (e.at, grace_ms.max(0));
            }
        }
    }

    /// The last progress of a session; 0 when none was seen.
    pub fn last_progress(&self, session: &str) -> i64 {
        self.0.lock().ok().and_then(|m| m.get(session).map(|s| s.progress)).unwrap_or(0)
    }

    /// The last recorded activity of a session.
    pub fn last(&self, session: &str) -> Option<i64> {
        self.last_with_source(session).map(|(t, _)| t)
    }

    /// The last recorded activity of a session and its source.
    pub fn last_with_source(&self, session: &str) -> Option<(i64, &'static str)> {
        self.0.lock().ok().and_then(|m| m.get(session).map(|s| (s.at, s.source)))
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

/// The binary this process runs (the server's own `forge-lsp`), if it still exists on disk.
pub fn self_bin() -> Option<PathBuf> {
    std::env::current_exe().ok().filter(|p| p.is_file())
}

/// The last `n` characters of `s`.
pub fn tail_chars(s: &str, n: usize) -> String {
    let count = s.chars().count();
    s.chars().skip(count.saturating_sub(n)).collect()
}
