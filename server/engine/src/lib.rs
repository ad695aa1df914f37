//! The loop engine: git worktrees ([`git`]), the sandbox ([`sandbox`], [`secrets`]), agent hosts
//! ([`host`]), loop start and restart ([`start`]) and the loop runner ([`runner`]), one
//! serialized task per running loop; plus the [`hub`] of a process's data directories.
//!
//! Knows the store below it and takes what it needs about a caller as a plain
//! [`ToolEnv`] value from `forge-core`; never imports the tools or any front end. It
//! reports nothing upwards by calls: every persisted change goes to the change feed,
//! which the hub broadcasts to whoever subscribed.
//!
//! Tools stay synchronous database transactions; a tool that needs git, processes or a
//! running loop's task returns an [`Effect`], which the engine carries out after the
//! tool's transaction committed. Every persisted loop change appends to the change feed,
//! from which every connection announces `forge/loopStatus`.

pub mod agents;
pub mod file_sweep;
pub mod git;
pub mod host;
pub mod hub;
pub mod loop_lock;
pub mod owner;
pub mod pause;
pub mod process;
pub mod prompt_context;
pub mod runner;
pub mod sandbox;
pub mod secrets;
pub mod start;
pub mod turn;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use forge_protocol::{CommandResult, ToolError};

use forge_core::ToolEnv;
use forge_store::Store;

/// Work a tool hands to the engine. `Shell` is `forge.shell`: `sh -c command` in
/// `<worktree>/<cwd>` (cwd normalized, relative), in the loop's sandbox when it has one
/// ([`sandbox::shell`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    StartLoop {
        title: String,
        plan: String,
        loop_name: Option<String>,
        branch: Option<String>,
    },
    NewSession {
        title: String,
        plan: String,
    },
    Cancel {
        loop_name: String,
    },
    Restart {
        loop_name: String,
        force: bool,
    },
    Shell {
        loop_name: String,
        command: String,
        cwd: String,
        timeout_ms: u64,
    },
    /// A task control on a session of a running loop (`session`: default the current phase
    /// session); see [`runner::task`].
    Task {
        loop_name: String,
        session: Option<String>,
        action: TaskAction,
    },
}

/// What a task control does (`forge.task-status`, `-message`, `-cancel`, `-revive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskAction {
    Status,
    /// Queue a message into the session's next turn without starting one.
    Message(String),
    /// Stop the running turn, keeping the session.
    Cancel,
    /// Resume a stopped session with an instruction.
    Revive(String),
}

/// A loop: its project id and name.
type LoopKey = (String, String);

/// The engine of one data directory.
pub struct Engine {
    pub store: Store,
    pub data_dir: PathBuf,
    runners: Mutex<HashMap<(String, String), runner::Handle>>,
    /// This process's private callback socket (`FORGE_LSP_SOCKET` of its agents).
    private_socket: Option<PathBuf>,
    /// Last activity per loop session (the stall watchdog's input).
    pub activity: Arc<host::Activity>,
    /// The change feed's batches, every process's writes (the hub's watcher sends them):
    /// front ends announce from it, and a runner learns from it that another process
    /// cancelled or took over its loop.
    changes: tokio::sync::broadcast::Sender<hub::Batch>,
    /// One restart or cancel of a loop at a time in this process (two force restarts would
    /// each start a runner, and the later one's would unregister the earlier's; a cancel
    /// during a restart waits for its runner). Invariants that keep it free of deadlocks:
    /// it is taken before the loop lock, never after; and neither a runner nor anything
    /// holding it waits for a cancel or a restart.
    restarts: Mutex<HashMap<LoopKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Whether [`Engine::sweep_files_once`] ran.
    files_swept: std::sync::atomic::AtomicBool,
}

impl Engine {
    pub fn new(store: Store, data_dir: PathBuf, private_socket: Option<PathBuf>) -> Arc<Engine> {
        // Absolute: worktrees and shims are named from it, and agents run in their worktree
        // (a relative shim directory on an agent's PATH would be looked up in the worktree).
        let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
        Arc::new(Engine {
            store,
            data_dir,
            runners: Mutex::new(HashMap::new()),
            private_socket,
            activity: Arc::default(),
            changes: tokio::sync::broadcast::channel(hub::channel_capacity()).0,
            restarts: Mutex::default(),
            files_swept: Default::default(),
        })
    }

    /// Sweeps the agents' old files out of the data directory ([`file_sweep`]), once per
    /// engine, with the `completedLoopTtlMs` of the first call (the first host connection
    /// that is not a loop session, as the store's sweep of terminal loops): a first call
    /// with 0 keeps them all for the engine's life, whatever later connections ask. Stale
    /// socket files of the `servers` folder go too, whatever the TTL: they are no one's
    /// record ([`forge_store::servers::sweep_files`]). In the background, off the store's
    /// writer thread: nothing waits for it.
    pub fn sweep_files_once(self: &Arc<Self>, ttl_ms: u64) {
        use std::sync::atomic::Ordering;
        if self.files_swept.swap(true, Ordering::SeqCst) {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            // The rows first: a server registering after this writes a file too new to go.
            match engine.store.read(forge_store::servers::all_rows).await {
                Ok(Ok(rows)) => {
                    let dir = engine.data_dir.clone();
                    let now = std::time::SystemTime::now();
                    let swept =
                        tokio::task::spawn_blocking(move || forge_store::servers::sweep_files(&dir, &rows, now)).await;
                    if let Some(n) = swept.ok().filter(|n| *n > 0) {
                        tracing::info!(files = n, "swept stale socket files");
                    }
                }
                Ok(Err(e)) => tracing::warn!("the sweep of socket files cannot read the servers table: {e}"),
                Err(e) => tracing::warn!("the sweep of socket files cannot read the servers table: {e}"),
            }
            if ttl_ms == 0 {
                return;
            }
            // Read before the files are listed: a session that starts after this writes
            // files too new to be swept.
            let live = match engine.store.read(file_sweep::live_sessions).await {
                Ok(Ok(live)) => live,
                Ok(Err(e)) => return tracing::warn!("the sweep of agents' files cannot read the sessions: {e}"),
                Err(e) => return tracing::warn!("the sweep of agents' files cannot read the sessions: {e}"),
            };
            let dir = engine.data_dir.clone();
            let swept = tokio::task::spawn_blocking(move || {
                file_sweep::sweep(&dir, &live, ttl_ms, std::time::SystemTime::now())
            })
            .await;
            if let Some(s) = swept.ok().filter(|s| s.files > 0) {
                tracing::info!(files = s.files, bytes = s.bytes, "swept agents' files older than {ttl_ms} ms");
            }
        });
    }

    /// The loop lock of `loop_name` ([`loop_lock`]), waited for at most `wait`.
    pub(crate) async fn loop_lock(
        &self,
        project: &str,
        loop_name: &str,
        wait: std::time::Duration,
    ) -> Result<loop_lock::LoopLock, loop_lock::LockError> {
        loop_lock::acquire(&self.data_dir, project, loop_name, wait).await
    }

    /// Held for the whole of a restart, or of a cancel, of the loop `loop_name` (`restarts`).
    pub(crate) async fn restart_lock(&self, project: &str, loop_name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((project.to_string(), loop_name.to_string()))
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    /// Every change-feed batch from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<hub::Batch> {
        self.changes.subscribe()
    }

    /// The private socket agents call back on.
    pub fn private_socket(&self) -> Option<PathBuf> {
        self.private_socket.clone()
    }

    /// The runner of a loop, if this process runs it.
    pub fn runner(&self, project: &str, loop_name: &str) -> Option<runner::Handle> {
        self.runners.lock().expect("runners").get(&(project.to_string(), loop_name.to_string())).cloned()
    }

    pub(crate) fn register(&self, project: &str, loop_name: &str, h: runner::Handle) {
        self.runners.lock().expect("runners").insert((project.to_string(), loop_name.to_string()), h);
    }

    /// Forgets the runner `id` of the loop; a later runner of the same loop (a restart's)
    /// stays registered.
    pub(crate) fn unregister(&self, project: &str, loop_name: &str, id: u64) {
        let mut runners = self.runners.lock().expect("runners");
        let key = (project.to_string(), loop_name.to_string());
        if runners.get(&key).is_some_and(|h| h.id() == id) {
            runners.remove(&key);
        }
    }

    /// Carries out an effect for the caller `env`.
    pub async fn run(self: &Arc<Self>, effect: Effect, env: Arc<ToolEnv>) -> Result<CommandResult, ToolError> {
        match effect {
            Effect::StartLoop { title, plan, loop_name, branch } => {
                start::start_loop(self, &env, title, plan, loop_name, branch).await
            }
            Effect::NewSession { title, plan } => start::new_session(self, &env, title, plan).await,
            Effect::Cancel { loop_name } => runner::cancel(self, &env, &loop_name).await,
            Effect::Restart { loop_name, force } => start::restart(self, &env, &loop_name, force).await,
            Effect::Shell { loop_name, command, cwd, timeout_ms } => {
                sandbox::shell(self, &env, &loop_name, &command, &cwd, timeout_ms).await
            }
            Effect::Task { loop_name, session, action } => runner::task(self, &env, &loop_name, session, action).await,
        }
    }

    /// Stops every runner (server shutdown): each loop terminates with `shutdown`.
    pub async fn shutdown(&self) {
        let all: Vec<runner::Handle> = self.runners.lock().expect("runners").values().cloned().collect();
        // All at once: each may wait for its killed turn's end (at most 5 s), and a server
        // with many loops must not add those up before it exits.
        let mut stopping = tokio::task::JoinSet::new();
        for h in all {
            stopping.spawn(async move { h.shutdown().await });
        }
        while stopping.join_next().await.is_some() {}
    }
}
