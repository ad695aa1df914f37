//! One running loop: a single task that owns the loop's state changes.
//!
//! The task receives turn ends from the agent host and control messages (cancel,
//! shutdown), one at a time. At a turn end it reads the pending handoff record, asks the
//! pure state machine (`forge_domain::loop_machine::next_transition`) what to do, and
//! persists the result in ONE transaction: the loop row, exactly one `loop_transitions`
//! row for a logged transition, the handoff resolution (guarded on `status = 'pending'`),
//! section rows, attempt history and the change-feed entry that announces it. Only then
//! does it start the next turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use forge_domain::handoff::{self, Role, HANDOFF_NUDGE};
use forge_domain::loop_machine::{
    next_transition, Event, LoopFacts, Phase, TerminationReason, Transition, TransitionKind,
};
use forge_protocol::inputs::AuditSummary;
use forge_protocol::{CommandResult, ToolError};
use rusqlite::OptionalExtension;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::host::{self, TurnHandle, TurnOutcome, TurnRequest};
use super::prompt_context::{self, Kind};
use super::{git, Engine};
use forge_core::config::Config;
use forge_core::ToolEnv;
use forge_store::loop_db as db;
use forge_store::loops::{self, LoopRow};
use forge_store::{attempts, now_ms};

/// The one-line prompt a stalled busy turn gets after it was aborted.
/// How long a stalled turn that was killed may take to end and be recorded before the
/// nudge starts the next one anyway.
const KILLED_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a shutdown waits for a killed turn's end (its processes gone), within the
/// 10 s a server gives each runner to answer its shutdown.
const SHUTDOWN_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub const CONTINUE_NUDGE: &str =
    "Continue where you left off: finish the work of this turn, then call the handoff tool and end your turn.";

/// The nudge of a busy turn the watchdog stopped after it had called the handoff tool:
/// that handoff was discarded with the turn.
pub const DISCARDED_HANDOFF_NUDGE: &str = "Your last turn was stopped because it kept working after calling the handoff tool, so that handoff was discarded. Finish the work, call the handoff tool again, and end your turn right after it.";

/// How often a deferred turn end looks again whether the other loop sessions settled.
const DEFER_POLL: Duration = Duration::from_millis(200);

/// The prompt given (on stdin) to `agent.compactCommand`.
pub const COMPACT_PROMPT: &str =
    "Compact this conversation: summarize what was done and decided so far, keeping what the next turn needs.";

/// Control messages.
pub enum Msg {
    /// `None` in reply: the loop is no longer this runner's (ended or taken over by another
    /// process): the caller cancels it in the store.
    Cancel(oneshot::Sender<Option<Result<CommandResult, ToolError>>>),
    /// A task control (`forge.task-*`) by `sender` on `session` (default: the live one).
    Task {
        session: Option<String>,
        action: super::TaskAction,
        sender: String,
        reply: oneshot::Sender<Result<CommandResult, ToolError>>,
        /// [`TASK_WAITING`], then [`TASK_TAKEN`] by the runner or [`TASK_GIVEN_UP`] by the
        /// caller, whichever comes first: a request its caller gave up on is never acted on.
        taken: Arc<std::sync::atomic::AtomicU8>,
    },
    Shutdown(oneshot::Sender<()>),
    /// Stops the runner without ending the loop: its turn is killed, nothing is written
    /// (a force restart takes the loop over; another process changed the loop's row).
    Stop(oneshot::Sender<()>),
}

/// The most messages that may wait for one session (review YI: nothing bounded them, and
/// all of them go into its next prompt; 16 KiB each).
const MAX_QUEUED_MESSAGES: i64 = 32;

/// The states of a task control request ([`Msg::Task`]).
const TASK_WAITING: u8 = 0;
const TASK_TAKEN: u8 = 1;
const TASK_GIVEN_UP: u8 = 2;

/// How long a task control waits for the runner to take it. The runner takes its messages
/// between steps; a standby's compaction is one step of up to 10 minutes (review YI:
/// `task-status` answered after the whole compaction, and could not be cancelled).
const TASK_WAIT: Duration = Duration::from_secs(5);

/// Gives a task control request up when its caller stops waiting (a timeout, or the call
/// cancelled and its future dropped), unless the runner took it already.
struct GiveUp(Arc<std::sync::atomic::AtomicU8>);

impl GiveUp {
    fn now(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.0.compare_exchange(TASK_WAITING, TASK_GIVEN_UP, SeqCst, SeqCst).is_ok()
    }
}

impl Drop for GiveUp {
    fn drop(&mut self) {
        self.now();
    }
}

/// Set by a cancel, shutdown or stop sent to a runner: from then on it starts no turn, and a
/// compaction under way is stopped, so the message is handled at once instead of after
/// the compaction (up to 10 minutes).
#[derive(Default)]
struct Stopping {
    asked: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
}

impl Stopping {
    fn ask(&self) {
        self.asked.store(true, std::sync::atomic::Ordering::Release);
        self.wake.notify_one();
    }

    fn asked(&self) -> bool {
        self.asked.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Handle to a running loop's task.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::UnboundedSender<Msg>,
    stopping: Arc<Stopping>,
    /// Tells this runner from a later one of the same loop (a restart registers a new
    /// runner while the old one may still be unregistering).
    id: u64,
    /// The configuration the loop runs with (its agent sessions' connections use it).
    pub config: std::sync::Arc<Config>,
}

impl Handle {
    pub async fn cancel(&self) -> Option<Result<CommandResult, ToolError>> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Msg::Cancel(tx)).ok()?;
        self.stopping.ask();
        rx.await.ok().flatten()
    }
    pub async fn task(
        &self,
        loop_name: &str,
        session: Option<String>,
        action: super::TaskAction,
        sender: String,
    ) -> Option<Result<CommandResult, ToolError>> {
        let (tx, mut rx) = oneshot::channel();
        let taken = Arc::new(std::sync::atomic::AtomicU8::new(TASK_WAITING));
        let give_up = GiveUp(taken.clone());
        self.tx.send(Msg::Task { session, action, sender, reply: tx, taken }).ok()?;
        match tokio::time::timeout(TASK_WAIT, &mut rx).await {
            Ok(r) => r.ok(),
            Err(_) if give_up.now() => Some(Err(ToolError::busy(format!(
                "Loop \"{loop_name}\" is busy (compacting a standby session, or ending a turn) and did not take the request within {} s; nothing was done: try again",
                TASK_WAIT.as_secs()
            )))),
            // Taken meanwhile: its answer comes.
            Err(_) => rx.await.ok(),
        }
    }
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Shutdown(tx)).is_ok() {
            self.stopping.ask();
            let _ = tokio::time::timeout(Duration::from_secs(10), rx).await;
        }
    }

    /// Stops the runner without ending the loop (`Msg::Stop`); returns once it stopped,
    /// false when it did not within 10 s. A runner that already ended counts as stopped.
    pub async fn stop(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Stop(tx)).is_err() {
            return true;
        }
        self.stopping.ask();
        match tokio::time::timeout(Duration::from_secs(10), rx).await {
            Ok(_) => true,
            // The runner ended without answering (it broke out for another reason).
            Err(_) => self.tx.is_closed(),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

/// The live phase session.
struct Live {
    id: String,
    token: String,
    role: Role,
    turns: u32,
    nudges: u32,
    /// The phase's full prompt: sent on the session's first turn of the phase, and again
    /// after a turn with no reply, a retry, an auditor or post-action model fallback and an
    /// idle stall. Nudges and task-revive instructions never replace it (seeds: a turn with
    /// no reply "is re-sent the full phase prompt").
    phase_prompt: String,
    /// The turn under way was started with something else than the phase prompt (a nudge,
    /// the busy-stall continue nudge, a task-revive instruction).
    nudge_turn: bool,
    handle: Option<TurnHandle>,
    /// Its turn was stopped by `forge.task-cancel`: the outcome of that turn is ignored, the
    /// watchdog leaves it alone, and `forge.task-revive` starts its next turn.
    stopped: bool,
}

pub struct Runner {
    engine: Arc<Engine>,
    project: String,
    repo_root: PathBuf,
    loop_name: String,
    config: Config,
    live: Live,
    done_tx: mpsc::UnboundedSender<(String, u32, TurnOutcome)>,
    /// Watchdog: consecutive stalls, the time activity is measured from, and the last
    /// progress (a tool call of the live session) that ended a run of stalls.
    stalls: u32,
    quiet_since: i64,
    progress_seen: i64,
    /// Sessions this runner created: id → (token, turns so far, role). The standby can only
    /// be resumed from here (tokens are stored hashed).
    sessions: std::collections::HashMap<String, (String, u32, Role)>,
    /// The configured `loop.postAction.model` failed: post-action turns use the auditor
    /// model with the auditor's variant.
    post_action_fallback: bool,
    /// Since when the current turn end waits for other busy sessions of the loop.
    deferred_since: Option<i64>,
    /// A cancel, shutdown or stop was sent ([`Stopping`]).
    stopping: Arc<Stopping>,
    /// A write of this runner found the loop no longer its own (ended or taken over by
    /// another process): nothing was written, and the runner stops.
    gone: bool,
    /// The loop lock, while a step holds it (from its ownership check to its write).
    step: Option<crate::loop_lock::LoopLock>,
    /// The count of changed files ([`Runner::count_changes`]): one at a time.
    counting: Arc<Counting>,
}

/// Whether a count of changed files runs, and whether another turn ended meanwhile (then
/// it counts once more when it is done, instead of a count per turn end piling up).
#[derive(Default)]
struct Counting {
    state: std::sync::Mutex<CountState>,
}

#[derive(Default)]
struct CountState {
    running: bool,
    again: bool,
}

/// Records a count of changed files taken at `at` (ms), or logs why it could not be.
async fn record_count(
    store: forge_store::Store,
    project: String,
    loop_name: String,
    counted: db::FilesChanged,
    at: i64,
) {
    let n = loop_name.clone();
    let written = store
        .call(move |c| {
            forge_store::transact(c, |tx| {
                db::set_files_changed(tx, &project, &loop_name, &counted, at)?;
                forge_store::status::output_changed(tx, &project, &loop_name, now_ms())
            })
        })
        .await;
    match written {
        Ok(()) => store.wrote.wake(),
        Err(e) => tracing::warn!(loop_name = %n, "cannot record the count of changed files: {e}"),
    }
}

/// Counts the changed files of an ended loop once, beside the caller: its worktree when it
/// is there, else its branch, which needs no worktree. For a loop with no runner to count
/// it (a cancel after its server died), and a runner's count on the branch
/// ([`Runner::count_on_branch`], [`Runner::count_at_end`]).
fn count_ended(store: forge_store::Store, row: LoopRow) {
    let Some(base) = row.base_commit.clone() else { return };
    tokio::spawn(async move {
        let at = now_ms();
        let (wt, repo, branch) =
            (PathBuf::from(&row.worktree_dir), PathBuf::from(&row.project_dir), row.worktree_branch.clone());
        let counted = tokio::task::spawn_blocking(move || {
            if wt.is_dir() {
                Some(git::files_changed(&wt, &base).map_err(|e| e.to_string()))
            } else {
                branch.map(|b| git::files_changed_on_branch(&repo, &base, &b).map_err(|e| e.to_string()))
            }
        })
        .await;
        if let Ok(Some(counted)) = counted {
            record_count(store, row.project_id.clone(), row.loop_name.clone(), counted, at).await;
        }
    });
}

/// How a [`Runner::guarded_write`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guarded {
    Written,
    /// The loop is no longer this runner's: nothing was written, and the runner stops.
    Lost,
    /// Another failure (logged): nothing was written.
    Failed,
}

/// The error a runner's write fails with when the loop is no longer its own.
#[derive(Debug)]
struct TakenOver;

impl std::fmt::Display for TakenOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the loop is no longer run by this runner")
    }
}

impl std::error::Error for TakenOver {}

/// Inside a runner's write: fails with [`TakenOver`] (rolling the write back) unless the loop
/// is still running with `session` as its current session.
fn still_ours(tx: &rusqlite::Connection, p: &str, n: &str, session: &str) -> rusqlite::Result<()> {
    let ours: Option<bool> = tx
        .query_row(
            "SELECT status = 'running' AND current_session_id = ?3 FROM loops WHERE project_id = ?1 AND loop_name = ?2",
            rusqlite::params![p, n, session],
            |r| r.get(0),
        )
        .optional()?;
    if ours == Some(true) {
        Ok(())
    } else {
        // Carried in the one boxed-error variant every rusqlite build has.
        Err(rusqlite::Error::ToSqlConversionFailure(Box::new(TakenOver)))
    }
}

/// Marks `session` busy and sets its `agent_process` to `claim`, just before a turn's
/// agent starts; always inside a transaction that first checks the loop is still the
/// runner's ([`still_ours`]). A force restart from another server takes the loop in a
/// transaction of its own and then waits until no turn of the loop is recorded
/// ([`await_turns_ended`]): either the claim commits first and the restart sees the turn
/// (and waits for its end), or the restart committed first and no agent starts here.
/// Before, the agent's process was recorded only once it ran, so a restart could miss an
/// agent started at that very moment and start its own beside it.
fn claim_turn(tx: &rusqlite::Connection, session: &str, claim: &str) -> rusqlite::Result<()> {
    db::set_session_status(tx, session, "busy")?;
    db::record_agent_process(tx, session, claim)
}

/// A new turn's claim ([`claim_turn`]): this process, the session and a number no other
/// claim of this process has, so that a turn's end forgets its own claim only.
fn turn_claim(session: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{CLAIM_PREFIX}{}:{session}:{n}", std::process::id())
}

/// How a claim's record starts (a process record is `<pid> <boot id>`).
const CLAIM_PREFIX: &str = "starting:";

fn is_taken_over(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::ToSqlConversionFailure(b) if b.is::<TakenOver>())
}

/// What the first turn of a (re)started runner sends.
pub struct FirstTurn {
    pub session_id: String,
    pub token: String,
    pub role: Role,
    pub prompt: String,
}

/// Starts the task of a loop whose row is `running` and whose current session is
/// `first.session_id`; sends the first prompt. Returns an error when the agent could not
/// be started at all (the caller rolls back).
pub fn spawn(
    engine: &Arc<Engine>,
    project: &str,
    repo_root: &Path,
    loop_name: &str,
    config: Config,
    first: FirstTurn,
) -> Handle {
    let (tx, rx) = mpsc::unbounded_channel();
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stopping = Arc::new(Stopping::default());
    let handle = Handle { tx, id, stopping: stopping.clone(), config: std::sync::Arc::new(config.clone()) };
    engine.register(project, loop_name, handle.clone());
    let runner = Runner {
        engine: engine.clone(),
        project: project.to_string(),
        repo_root: repo_root.to_path_buf(),
        loop_name: loop_name.to_string(),
        config,
        live: Live {
            id: first.session_id,
            token: first.token,
            role: first.role,
            turns: 0,
            nudges: 0,
            phase_prompt: first.prompt,
            nudge_turn: false,
            handle: None,
            stopped: false,
        },
        done_tx,
        stalls: 0,
        quiet_since: now_ms(),
        progress_seen: 0,
        sessions: std::collections::HashMap::new(),
        post_action_fallback: false,
        deferred_since: None,
        stopping,
        gone: false,
        step: None,
        counting: Arc::default(),
    };
    // Subscribed before the runner runs: a change committed from here on reaches it.
    let feed = engine.subscribe();
    tokio::spawn(run(runner, id, feed, rx, done_rx));
    handle
}

async fn run(
    mut r: Runner,
    id: u64,
    mut feed: tokio::sync::broadcast::Receiver<crate::hub::Batch>,
    mut ctl: mpsc::UnboundedReceiver<Msg>,
    mut done: mpsc::UnboundedReceiver<(String, u32, TurnOutcome)>,
) {
    // Another process may cancel or restart this loop (they share the database): the
    // runner follows its loop's row through the change feed (`feed`, subscribed before the
    // runner was spawned) and stops when it is no longer the one running it. A change made
    // before that is seen here.
    if r.taken_over().await {
        r.engine.unregister(&r.project, &r.loop_name, id);
        return;
    }
    let prompt = r.live.phase_prompt.clone();
    r.send(prompt).await;
    // The reply to a `Msg::Stop`, sent once the runner is gone.
    let mut stopped: Option<oneshot::Sender<()>> = None;
    let tick = watchdog_tick(&r.config);
    let mut ticker = tokio::time::interval(tick.unwrap_or(Duration::from_secs(3600)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Control first: a cancel, shutdown or stop ready together with a turn end is
            // handled before it.
            biased;
            msg = ctl.recv() => match msg {
                Some(Msg::Cancel(reply)) => {
                    let res = r.cancel().await;
                    let _ = reply.send(res);
                    break;
                }
                Some(Msg::Task { session, action, sender, reply, taken }) => {
                    use std::sync::atomic::Ordering::SeqCst;
                    if taken.compare_exchange(TASK_WAITING, TASK_TAKEN, SeqCst, SeqCst).is_err() {
                        continue;
                    }
                    let res = r.task(session, action, &sender).await;
                    let _ = reply.send(res);
                }
                Some(Msg::Shutdown(reply)) => {
                    r.external(Event::Shutdown).await;
                    // A turn `external` left (the loop was no longer this runner's) ends
                    // before the server may exit, too.
                    if let Some(h) = r.live.handle.take() {
                        h.abort();
                        h.wait_ended(SHUTDOWN_TURN_WAIT).await;
                    }
                    let _ = reply.send(());
                    break;
                }
                Some(Msg::Stop(reply)) => {
                    stopped = Some(reply);
                    break;
                }
                None => break,
            },
            batch = feed.recv() => {
                let mine = match &batch {
                    Ok(b) => b.missed || b.iter().any(|c| {
                        c.kind == forge_store::changes::Kind::Loop && c.key == r.loop_name && c.project_id == r.project
                    }),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => false,
                };
                if mine && r.taken_over().await {
                    break;
                }
            }
            _ = ticker.tick(), if tick.is_some() && !r.stopping.asked() => {
                if !r.watchdog().await {
                    break;
                }
            }
            Some((sid, turn, outcome)) = done.recv() => {
                // A turn the runner aborted, or of a retired session: not a turn end. After a
                // cancel, shutdown or stop was sent, nothing more is acted on.
                if sid != r.live.id || turn != r.live.turns || r.live.stopped || r.stopping.asked() {
                    continue;
                }
                r.live.handle = None;
                let s2 = sid.clone();
                r.write(move |c| db::set_session_status(c, &s2, "idle")).await;
                r.capture_usage().await;
                // The turn-end sequence waits while another session of the loop (not the
                // standby) is busy or retrying; a status that cannot be read keeps it waiting.
                // Post-action is the exception: an assistant error completes before the wait.
                let skip_wait = r.live.role == Role::PostAction && matches!(outcome, TurnOutcome::Error(_));
                let others = if skip_wait { vec![] } else { r.others_busy().await };
                if !others.is_empty() {
                    if r.deferred_since.is_none() {
                        tracing::info!(loop_name = %r.loop_name, ?others, "turn end deferred: other loop sessions are busy");
                        r.deferred_since = Some(now_ms());
                    }
                    let tx = r.done_tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(DEFER_POLL).await;
                        let _ = tx.send((sid, turn, outcome));
                    });
                    continue;
                }
                r.deferred_since = None;
                if !r.on_turn_end(outcome).await {
                    break;
                }
            }
        }
    }
    if let Some(h) = r.live.handle.take() {
        h.abort();
    }
    r.engine.unregister(&r.project, &r.loop_name, id);
    if let Some(reply) = stopped {
        let _ = reply.send(());
    }
}

/// How often the watchdog looks: a quarter of the shorter enabled timeout, 50 ms to 5 s;
/// `None` when both timeouts are 0 (disabled).
fn watchdog_tick(c: &Config) -> Option<Duration> {
    let t = [c.stall_timeout_ms, c.busy_stall_timeout_ms].into_iter().filter(|&t| t > 0).min()?;
    Some(Duration::from_millis((t / 4).clamp(50, 5000)))
}

/// A provider limit (quota, auth, HTTP 403/429), as opposed to an ordinary error.
fn provider_limit(msg: &str) -> bool {
    forge_domain::agent_cli::is_provider_limit(msg)
}

fn model_error(msg: &str) -> bool {
    regex::Regex::new(r"(?i)provider|auth|model|api\s*error").map(|re| re.is_match(msg)).unwrap_or(false)
}

impl Runner {
    async fn db<R: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> rusqlite::Result<R> {
        self.engine.store.call(move |c| f(c)).await
    }

    /// A write whose failure cannot change what the runner does next: logged, never
    /// dropped silently.
    async fn write<R: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> Option<R> {
        match self.db(f).await {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::error!(project = %self.project, loop_name = %self.loop_name, "database write failed: {e}");
                None
            }
        }
    }

    async fn row(&self) -> Option<LoopRow> {
        let (p, n) = (self.project.clone(), self.loop_name.clone());
        self.db(move |c| loops::get(c, &p, &n)).await.ok().flatten()
    }

    /// `f` in one transaction that first checks the loop is still this runner's
    /// ([`still_ours`]; a loop taken over is [`is_taken_over`]'s error). For a caller that
    /// handles the outcome itself; [`Runner::guarded_write`] stops the runner.
    async fn owned_write(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<()> + Send + 'static,
    ) -> rusqlite::Result<()> {
        let (p, n, sid) = (self.project.clone(), self.loop_name.clone(), self.live.id.clone());
        self.engine
            .store
            .call(move |c| {
                forge_store::transact(c, |tx| -> rusqlite::Result<()> {
                    still_ours(tx, &p, &n, &sid)?;
                    f(tx)
                })
            })
            .await
    }

    /// A write of the loop (`what` names it in the log), in one transaction that first
    /// checks the loop is still this runner's ([`still_ours`]). When it is not, nothing is
    /// written and the runner stops ([`Runner::lost`]); another failure is logged.
    async fn guarded_write(
        &mut self,
        what: &str,
        f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<()> + Send + 'static,
    ) -> Guarded {
        match self.owned_write(f).await {
            Ok(()) => Guarded::Written,
            Err(e) if is_taken_over(&e) => {
                tracing::info!(loop_name = %self.loop_name, "{what}: the loop was ended or taken over by another process; this runner stops");
                self.lost().await;
                Guarded::Lost
            }
            Err(e) => {
                tracing::error!(project = %self.project, loop_name = %self.loop_name, "{what} failed: {e}");
                Guarded::Failed
            }
        }
    }

    /// The loop lock for a step that does git work in the worktree before its write
    /// (`loop_lock`). `None` when it could not be taken (logged): the step goes on, and
    /// its write's own check ([`still_ours`]) still keeps the row right.
    async fn step_lock(&self) -> Option<crate::loop_lock::LoopLock> {
        match self.engine.loop_lock(&self.project, &self.loop_name, crate::loop_lock::WAIT).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(loop_name = %self.loop_name, "the loop's step goes on without the loop lock: {e}");
                None
            }
        }
    }

    /// [`Runner::step_lock`] for a step a stop may interrupt (a rotation): `Err` when a
    /// cancel, shutdown or stop is asked for while it waits, or was before; the step then
    /// writes nothing (the message is handled next). A restart in this process waits at
    /// most 10 s for its runner to stop, less than a wait for the lock may take.
    async fn step_lock_or_stop(&self) -> Result<Option<crate::loop_lock::LoopLock>, ()> {
        let got = tokio::select! {
            l = self.step_lock() => l,
            _ = self.stopping.wake.notified(), if !self.stopping.asked() => return Err(()),
            _ = std::future::ready(()), if self.stopping.asked() => return Err(()),
        };
        if self.stopping.asked() {
            return Err(());
        }
        Ok(got)
    }

    /// Removes the worktree of a loop cancelled a moment ago, under the loop lock (this
    /// runner's step's, when it holds it) and only if the loop is still cancelled: a
    /// restart by another process between the cancel and this removal has a runner
    /// working in it.
    async fn remove_cancelled_worktree(&self, wt: PathBuf) {
        let mut locked = None;
        if self.step.is_none() {
            match self.engine.loop_lock(&self.project, &self.loop_name, crate::loop_lock::WAIT).await {
                Ok(l) => locked = Some(l),
                Err(e) => {
                    tracing::warn!(loop_name = %self.loop_name, "the cancelled loop's worktree is kept: {e}");
                    return;
                }
            }
        }
        if let Ok(Some(r)) = self.loop_row().await {
            if r.status == "cancelled" {
                // Cancelled in another process, this runner's turn killed: what the agent
                // wrote is committed here, as this process's own cancel commits it.
                let commit = (cancel_message(&r), r.worktree_branch.clone());
                remove_worktree_logged(self.engine.data_dir.clone(), self.repo_root.clone(), wt, Some(commit)).await;
            }
        }
        drop(locked);
    }

    /// The loop's row; `Err` when it cannot be read.
    async fn loop_row(&self) -> rusqlite::Result<Option<LoopRow>> {
        let (p, n) = (self.project.clone(), self.loop_name.clone());
        self.db(move |c| loops::get(c, &p, &n)).await
    }

    /// Whether `row` is running this runner's live session.
    fn is_ours(&self, row: &LoopRow) -> bool {
        row.status == "running" && row.current_session_id == self.live.id
    }

    /// Whether the loop is still running with this runner's live session (a read: writes
    /// check again inside their transaction, [`still_ours`]). A row that cannot be read
    /// counts as owned: the write's own check decides then.
    async fn owns(&self) -> bool {
        match self.loop_row().await {
            Ok(Some(r)) => self.is_ours(&r),
            Ok(None) => false,
            Err(_) => true,
        }
    }

    /// The loop turned out not to be this runner's any more: the runner stops, after
    /// [`Runner::taken_over`]'s cleanup (its turn killed; the worktree of a loop cancelled
    /// elsewhere removed when `loop.cleanupWorktree` asks for it).
    async fn lost(&mut self) {
        self.gone = true;
        self.taken_over().await;
    }

    /// Whether another process ended or took over this loop: its row is gone, no longer
    /// running, or running another session than this runner's live one (a restart there).
    /// Then the turn is left to be killed as the runner stops, nothing is written, and a
    /// loop cancelled elsewhere has its worktree removed here when `loop.cleanupWorktree`
    /// asks for it (the canceller leaves it to the process whose agent works in it).
    async fn taken_over(&mut self) -> bool {
        let row = match self.loop_row().await {
            Ok(row) => row,
            // Unreadable: keep running; the next change looks again.
            Err(_) => return false,
        };
        let Some(row) = row else { return true };
        if self.is_ours(&row) {
            return false;
        }
        tracing::info!(
            loop_name = %self.loop_name,
            status = %row.status,
            "the loop was {} by another process: this runner stops",
            if row.status == "running" { "taken over" } else { "ended" }
        );
        if let Some(h) = self.live.handle.take() {
            h.abort();
        }
        if row.status == "cancelled" {
            if self.config.cleanup_worktree {
                self.remove_cancelled_worktree(PathBuf::from(&row.worktree_dir)).await;
            }
            self.count_at_end(&row);
        }
        true
    }

    fn facts(&self, row: &LoopRow) -> LoopFacts {
        row.facts(post_action_configured(&self.config))
    }

    /// Sessions of the loop other than the live one and the standby that are busy or
    /// retrying (`["unknown"]` when that cannot be read: the deferral fails closed).
    async fn others_busy(&self) -> Vec<String> {
        let (p, n, me) = (self.project.clone(), self.loop_name.clone(), self.live.id.clone());
        let res = self
            .db(move |c| {
                let standby: Option<String> = c
                    .query_row(
                        "SELECT standby_session_id FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                        rusqlite::params![p, n],
                        |r| r.get(0),
                    )
                    .optional()?
                    .flatten();
                Ok(db::busy_others(c, &p, &n, &me)?
                    .into_iter()
                    .filter(|s| Some(s) != standby.as_ref())
                    .collect::<Vec<_>>())
            })
            .await;
        res.unwrap_or_else(|e| {
            tracing::warn!(loop_name = %self.loop_name, "cannot read the loop's session status ({e}); deferring the turn end");
            vec!["unknown".into()]
        })
    }

    /// Marks a session of the loop `busy`, `retry` or `idle`.
    async fn mark(&self, session: &str, status: &'static str) {
        let s = session.to_string();
        self.write(move |c| db::set_session_status(c, &s, status)).await;
    }

    /// Starts a turn of the live session with `prompt`.
    /// Whether the live session is run by a preset CLI that never recorded its own
    /// conversation id (OpenCode and Gemini report it only once their model has answered):
    /// its next turn starts a new conversation, which has never seen the task.
    fn cli_conversation_unrecorded(&self) -> bool {
        crate::agents::preset(&self.config).is_some()
            && crate::agents::recorded_cli_session(&self.engine.data_dir, &self.live.id).is_none()
    }

    async fn send(&mut self, prompt: String) {
        let Some(row) = self.row().await else { return };
        if !self.is_ours(&row) || self.stopping.asked() {
            // Cancelled or taken over by another process meanwhile (the feed stops the
            // runner), or a cancel, shutdown or stop waits in the runner's queue.
            return;
        }
        let argv = crate::agents::program(&self.config).unwrap_or_default();
        let role = self.live.role;
        let (agent, model, variant) = match role {
            Role::Auditor => {
                // The current model of the auditor chain (moved on by a provider limit); the
                // auditor variant goes with the chain's first model only.
                let chain = self.auditor_chain();
                let i = (row.auditor_fallback_index().max(0) as usize).min(chain.len() - 1);
                ("auditor-loop", chain[i].clone(), self.config.auditor_variant.clone().filter(|_| i == 0))
            }
            // loop.postAction.model is sent without a variant; unset, or after it failed, the
            // auditor model with the auditor's variant.
            Role::PostAction => match self.config.post_action_model.clone().filter(|_| !self.post_action_fallback) {
                Some(m) => ("code", Some(m), None),
                None => ("code", self.auditor_chain().first().cloned().flatten(), self.config.auditor_variant.clone()),
            },
            Role::Coder => ("code", self.config.execution_model.clone(), self.config.execution_variant.clone()),
        };
        // After a model error the agent's default model (without a variant), until a
        // successful pass clears it.
        let model = model.filter(|_| !row.model_failed);
        let variant = variant.filter(|v| model.is_some() && !v.trim().is_empty());
        let title = session_title(&row, role);
        self.live.turns += 1;
        self.live.stopped = false;
        self.live.nudge_turn = prompt != self.live.phase_prompt;
        // A nudge or an instruction continues the CLI's conversation; a preset's CLI whose
        // session id was never recorded (its first turn was killed or hung before its
        // model answered: OpenCode and Gemini report the id only then) starts a new one,
        // which has never seen the task: it gets the phase prompt first (a review found
        // such sessions given only "Continue where you left off").
        let fresh_cli = self.live.turns > 1 && self.cli_conversation_unrecorded();
        let prompt = with_phase_prompt(&self.live.phase_prompt, prompt, fresh_cli);
        // Messages queued for this session (forge.task-message) go first, delivered once.
        let sid = self.live.id.clone();
        // Read now, marked delivered with the turn's claim (a turn that does not start
        // delivers nothing).
        let queued = self.write(move |c| forge_store::task_messages::undelivered(c, &sid)).await.unwrap_or_default();
        let delivered = queued.last().map(|q| q.id);
        let claim = turn_claim(&self.live.id);
        let prompt = if queued.is_empty() { prompt } else { format!("{}{prompt}", queued_block(&queued)) };
        // A new turn replaces any deferred turn end (its outcome no longer matches).
        self.deferred_since = None;
        let req = TurnRequest {
            argv,
            session_id: self.live.id.clone(),
            token: self.live.token.clone(),
            role: role.as_str().to_string(),
            agent: agent.to_string(),
            model,
            variant,
            loop_name: self.loop_name.clone(),
            cwd: PathBuf::from(&row.worktree_dir),
            title,
            prompt,
            resume: self.live.turns > 1,
            socket: self.engine.private_socket(),
            activity: self.engine.activity.clone(),
            data_dir: self.engine.data_dir.clone(),
            prompt_dir: self.engine.data_dir.join("prompts").join(&self.loop_name),
            turn: self.live.turns,
            shim_dir: row
                .sandbox
                .then(|| super::sandbox::shim_dir(&self.engine.data_dir, Path::new(&row.worktree_dir))),
            preset: crate::agents::preset(&self.config),
            project_config: self.config.agent_trust_project_config,
            secrets: crate::secrets::Secrets::from_config(&self.config),
            record: Some(self.engine.store.clone()),
            claim: Some(claim.clone()),
        };
        let sid = self.live.id.clone();
        let claimed = self
            .guarded_write("starting a turn", move |c| {
                claim_turn(c, &sid, &claim)?;
                match delivered {
                    Some(id) => forge_store::task_messages::mark_delivered(c, &sid, id, now_ms()),
                    None => Ok(()),
                }
            })
            .await;
        match claimed {
            Guarded::Written => {}
            Guarded::Lost => return,
            // Not claimed (the database failed): no agent starts unseen by a restart. The
            // prompt counts as not sent (`Event::PromptFailed`: retried in this phase, within
            // the error budget), not as an assistant error.
            Guarded::Failed => {
                self.quiet_since = now_ms();
                let why = "the turn could not be recorded in the database before its agent started".to_string();
                let _ = self.done_tx.send((self.live.id.clone(), self.live.turns, TurnOutcome::NotClaimed(why)));
                return;
            }
        }
        // Output in the first half of the busy timeout (at most 10 s) is the CLI's start
        // events, not yet the model working.
        let grace = (self.config.busy_stall_timeout_ms as i64 / 2).min(10_000);
        self.engine.activity.turn_started(&self.live.id, grace);
        self.quiet_since = now_ms();
        self.live.handle = Some(host::start_turn(req, self.done_tx.clone()));
    }

    /// The auditor model chain: the configured auditor model (else the loop's or the
    /// configured execution model, else the default), then the fallbacks, deduplicated.
    fn auditor_chain(&self) -> Vec<Option<String>> {
        let first = self.config.auditor_model.clone().or(self.config.execution_model.clone());
        let mut chain = vec![first];
        for m in &self.config.auditor_fallback_models {
            if !chain.iter().any(|c| c.as_deref() == Some(m.as_str())) {
                chain.push(Some(m.clone()));
            }
        }
        chain
    }

    /// Stores the live session's reported usage (its rows are replaced, so nothing is
    /// counted twice).
    async fn capture_usage(&self) {
        let file = host::usage_file(&self.engine.data_dir, &self.live.id);
        let Ok(text) = tokio::fs::read_to_string(&file).await else { return };
        let (lines, bad) = forge_domain::usage::parse(&text);
        if bad > 0 {
            tracing::warn!(loop_name = %self.loop_name, "{bad} malformed usage line(s) in {}", file.display());
        }
        let role = match self.live.role {
            Role::Auditor => "auditor",
            _ => "code",
        };
        let fallback = match self.live.role {
            Role::Auditor => self.auditor_chain().first().cloned().flatten(),
            _ => self.config.execution_model.clone(),
        }
        .unwrap_or_else(|| "default".into());
        let per_model = forge_domain::usage::per_model(&lines, &fallback);
        let (p, n, sid) = (self.project.clone(), self.loop_name.clone(), self.live.id.clone());
        self
            .write(move |c| {
                c.execute(
                    "DELETE FROM loop_session_usage WHERE project_id = ?1 AND loop_name = ?2 AND session_id = ?3",
                    rusqlite::params![p, n, sid],
                )?;
                for (model, t) in &per_model {
                    c.execute(
                        "INSERT INTO loop_session_usage (project_id, loop_name, session_id, model, role, cost, input_tokens, output_tokens,
                            reasoning_tokens, cache_read_tokens, cache_write_tokens, message_count, captured_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                        rusqlite::params![
                            p, n, sid, model, role, t.cost, t.input as i64, t.output as i64, t.reasoning as i64,
                            t.cache_read as i64, t.cache_write as i64, t.messages as i64, now_ms()
                        ],
                    )?;
                }
                Ok(())
            })
            .await;
    }

    /// Ends a run of stalls when the live session made progress since the last look: a
    /// tool call, or output later than the start of its turn (see [`Activity`]).
    fn note_progress(&mut self) {
        let progress = self.engine.activity.last_progress(&self.live.id);
        if progress > self.progress_seen {
            self.progress_seen = progress;
            self.stalls = 0;
        }
    }

    /// One watchdog look. A busy turn without activity past `busyStallTimeoutMs`, or no
    /// turn running past `stallTimeoutMs`, is a stall: the busy turn is aborted and nudged
    /// to continue, an idle phase is re-triggered; the `maxConsecutiveStalls`-th stall ends
    /// the loop (`stall_timeout`). Activity (output of the agent, tool calls of its
    /// session) resets the timer; only progress (a tool call, output after the turn's start
    /// grace) resets the count, so an agent that prints its start events and then hangs,
    /// turn after nudged turn, still reaches the limit (Forge: "busy alone never resets the
    /// stall counters"). Returns false when the loop stopped.
    async fn watchdog(&mut self) -> bool {
        let now = now_ms();
        // A session stopped by its owner waits for task-revive, not for the watchdog.
        if self.live.stopped {
            self.quiet_since = now;
            return true;
        }
        let activity = self.engine.activity.last(&self.live.id).unwrap_or(0);
        if activity > self.quiet_since {
            self.quiet_since = activity;
        }
        self.note_progress();
        let busy = self.live.handle.is_some() || self.deferred_since.is_some();
        let limit = if busy { self.config.busy_stall_timeout_ms } else { self.config.stall_timeout_ms } as i64;
        if limit == 0 || now - self.quiet_since < limit {
            return true;
        }
        // Acting on a stall writes the loop: only while it is still this runner's.
        if !self.owns().await {
            self.lost().await;
            return false;
        }
        self.stalls += 1;
        self.quiet_since = now;
        let (p, n, k) = (self.project.clone(), self.loop_name.clone(), self.stalls);
        let written = self
            .guarded_write("the stall count", move |c| {
                c.execute(
                    "UPDATE loops SET stall_count = ?3 WHERE project_id = ?1 AND loop_name = ?2",
                    rusqlite::params![p, n, k],
                )?;
                forge_store::status::touch(c, &p, &n, now_ms())
            })
            .await;
        if written == Guarded::Lost {
            return false;
        }
        self.engine.store.wrote.wake();
        tracing::warn!(loop_name = %self.loop_name, stalls = self.stalls, busy, "loop stalled");
        let max = self.config.max_consecutive_stalls as u32;
        if max > 0 && self.stalls >= max {
            self.external(Event::StallTimeout).await;
            return false;
        }
        if busy {
            if let Some(h) = self.live.handle.take() {
                // The nudge resumes the same CLI session: it must find what the killed
                // turn printed (its session id, its usage) recorded first.
                h.abort_and_wait(KILLED_TURN_WAIT).await;
            }
            let (p, n) = (self.project.clone(), self.loop_name.clone());
            let discarded = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let seen = discarded.clone();
            let written = self
                .guarded_write("discarding the stalled turn's handoff", move |c| {
                    let k = db::discard_pending(c, &p, &n, now_ms())?;
                    seen.store(k > 0, std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                })
                .await;
            if written == Guarded::Lost {
                return false;
            }
            // A handoff the turn recorded before it stayed busy is gone: say so, or the agent
            // takes its handoff for done (review YU: "I already handed off", then three
            // nudges and handoff_missing).
            let nudge = if discarded.load(std::sync::atomic::Ordering::Relaxed) {
                DISCARDED_HANDOFF_NUDGE
            } else {
                CONTINUE_NUDGE
            };
            self.send(nudge.to_string()).await;
        } else {
            let prompt = self.live.phase_prompt.clone();
            self.send(prompt).await;
        }
        true
    }

    /// Handles a turn end; returns false when the loop stopped.
    async fn on_turn_end(&mut self, outcome: TurnOutcome) -> bool {
        let Some(row) = self.row().await else { return false };
        if !self.is_ours(&row) {
            return false;
        }
        // Progress the turn made (its handoff, a tool call) ends a run of stalls now, before
        // a rotation forgets its session: the watchdog's next look may come after that.
        self.note_progress();
        // The reply, for loop-status's `Recent Activity:` (a loop taken over meanwhile
        // keeps the other runner's; what follows finds that out): a preset CLI's is the
        // model's final message, kept from its start; a command agent's is the end of its
        // output.
        if let TurnOutcome::Reply(text) = &outcome {
            if !text.trim().is_empty() {
                let (p, n, text) = (self.project.clone(), self.loop_name.clone(), text.clone());
                let (role, tail) = (self.live.role.as_str(), crate::agents::preset(&self.config).is_none());
                let kept = self
                    .owned_write(move |tx| {
                        db::add_reply(tx, &p, &n, role, &text, tail)?;
                        forge_store::status::output_changed(tx, &p, &n, now_ms())
                    })
                    .await;
                match kept {
                    Ok(()) => self.engine.store.wrote.wake(),
                    Err(e) if !is_taken_over(&e) => {
                        tracing::warn!(loop_name = %self.loop_name, "cannot keep the turn's reply: {e}")
                    }
                    Err(_) => {}
                }
            }
        }
        let facts = self.facts(&row);
        let role = self.live.role;
        let (p, n, sid) = (self.project.clone(), self.loop_name.clone(), self.live.id.clone());
        let pending = self
            .db(move |c| db::pending(c, &p, &n))
            .await
            .ok()
            .flatten()
            .filter(|x| x.session_id == sid && x.role == role.as_str());
        // Re-validated against its role schema on every read (seeds "loop_handoffs"): an
        // invalid row is logged and discarded, never coerced or partially applied; the turn
        // then ends as one without a record.
        let pending = match pending {
            Some(x) => match handoff::parse_stored(role, &x.payload.to_string()) {
                Ok(_) => Some(x),
                Err(e) => {
                    tracing::warn!(loop_name = %self.loop_name, handoff = x.id, "skipping an invalid pending handoff: {e}");
                    let id = x.id;
                    self.write(move |c| db::resolve_handoff(c, id, "discarded", now_ms()).map(|_| ())).await;
                    None
                }
            },
            None => None,
        };

        // A post-action turn on the configured loop.postAction.model that failed without a
        // record: the same prompt once more, on the auditor model with its variant.
        if let TurnOutcome::Error(msg) = &outcome {
            if facts.phase == Phase::PostAction
                && pending.is_none()
                && !self.post_action_fallback
                && self.config.post_action_model.is_some()
                && !row.model_failed
            {
                tracing::warn!(loop_name = %self.loop_name, "loop.postAction.model failed ({msg}); falling back to the auditor model");
                self.post_action_fallback = true;
                let prompt = self.live.phase_prompt.clone();
                self.send(prompt).await;
                return true;
            }
        }
        let event = match &outcome {
            // The worktree was removed under the loop: no turn can run in it again (before,
            // each turn failed to start and used up the error budget, blaming the agent
            // program). A restart re-attaches it from the loop's branch.
            _ if !Path::new(&row.worktree_dir).is_dir() => {
                tracing::warn!(loop_name = %self.loop_name, "the worktree {} is gone", row.worktree_dir);
                Event::MissingWorktreeDir
            }
            // Aborted (killed by a signal, not by us): with this session's record for its
            // role the record is processed as the handoff (seeds "Auditing", "Behavior");
            // without one it is a session abort, never an assistant error.
            TurnOutcome::Aborted(msg) if pending.is_none() => {
                tracing::warn!(loop_name = %self.loop_name, "the phase session was aborted: {msg}");
                Event::SessionAborted
            }
            // A turn that could not start on the worktree's content: the loop ends, naming
            // it (a retry would be refused the same way).
            TurnOutcome::Refused(msg) => Event::WorktreeFailed { message: msg.clone() },
            TurnOutcome::NotClaimed(msg) => Event::PromptFailed { context: msg.clone() },
            TurnOutcome::Error(msg) => {
                if facts.phase == Phase::PostAction && pending.is_some() {
                    Event::PostActionComplete
                } else if provider_limit(msg) && (facts.phase != Phase::PostAction || self.live.nudge_turn) {
                    // Classified in coding and auditing; in post-action only on a nudge's turn
                    // (seeds: a failed send of a post-action nudge can end the loop with
                    // provider_limit, while an assistant error there completes it).
                    let chain = self.auditor_chain();
                    let fallback_available =
                        facts.phase == Phase::Auditing && (row.auditor_fallback_index() as usize + 1) < chain.len();
                    Event::ProviderLimit { message: msg.clone(), fallback_available }
                } else {
                    // Said in the log too (before, only the error count showed it: a review).
                    let shown: String = msg.chars().take(2000).collect();
                    tracing::warn!(loop_name = %self.loop_name, "the {} turn failed: {shown}", facts.phase.as_str());
                    Event::AssistantError { message: msg.clone(), model_error: model_error(msg) }
                }
            }
            TurnOutcome::Reply(_) | TurnOutcome::NoReply | TurnOutcome::Aborted(_) => match (&pending, role) {
                (Some(_), Role::Coder) => Event::CoderHandoff,
                (Some(p), Role::Auditor) => {
                    let r2 = row.clone();
                    let blocking = self
                        .db(move |c| prompt_context::outstanding(c, &r2))
                        .await
                        .map(|v| v.len() as u32)
                        .unwrap_or(0);
                    let has_summary = p.payload.get("summary").is_some_and(|s| !s.is_null());
                    Event::AuditorHandoff { blocking_findings: blocking, has_summary, nudges_sent: self.live.nudges }
                }
                (Some(_), Role::PostAction) => Event::PostActionComplete,
                (None, _) => Event::NoHandoff {
                    replied: matches!(outcome, TurnOutcome::Reply(_)),
                    nudges_sent: self.live.nudges,
                },
            },
        };
        let t = next_transition(&facts, &event);
        tracing::info!(loop_name = %self.loop_name, event = event.name(), kind = t.kind.as_str(), "turn end");
        // What the work changed, for loop-status's `Files changed:`: counted beside the loop,
        // but before the worktree goes when this turn ends it.
        self.count_changes(&row);
        let ends = (t.kind == TransitionKind::Terminate).then(|| row.clone());
        // Only a handoff event consumes the record; otherwise it is discarded with the turn.
        let uses_record =
            matches!(event, Event::CoderHandoff | Event::AuditorHandoff { .. } | Event::PostActionComplete);
        let going = self.apply(row, t, pending.filter(|_| uses_record)).await;
        if let Some(row) = ends {
            self.count_on_branch(&row);
        }
        going
    }

    /// Counts what the loop's worktree changed since its start commit
    /// (`git::files_changed`, which can take seconds in a large worktree) on a blocking
    /// thread and records it. One count at a time: a turn end while one runs makes it count
    /// once more when it is done. A worktree that is gone (before or during the count)
    /// leaves the last count as it was.
    fn count_changes(&self, row: &LoopRow) {
        let Some(base) = row.base_commit.clone() else { return };
        {
            let mut st = self.counting.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.running {
                st.again = true;
                return;
            }
            *st = CountState { running: true, again: false };
        }
        let (store, p, n) = (self.engine.store.clone(), self.project.clone(), self.loop_name.clone());
        let (wt, counting) = (PathBuf::from(&row.worktree_dir), self.counting.clone());
        tokio::spawn(async move {
            loop {
                let at = now_ms();
                let (wt2, base2) = (wt.clone(), base.clone());
                let counted = tokio::task::spawn_blocking(move || {
                    let c = wt2.is_dir().then(|| git::files_changed(&wt2, &base2).map_err(|e| e.to_string()));
                    // Whatever it found, a count of a worktree that went meanwhile is not kept.
                    c.filter(|_| wt2.is_dir())
                })
                .await;
                if let Ok(Some(counted)) = counted {
                    record_count(store.clone(), p.clone(), n.clone(), counted, at).await;
                }
                let mut st = counting.state.lock().unwrap_or_else(|p| p.into_inner());
                if !st.again {
                    *st = CountState::default();
                    return;
                }
                st.again = false;
            }
        });
    }

    /// After the turn that ended the loop: when its worktree went (a completed loop's, once
    /// all its work is on the branch), the count on the branch, which needs no worktree. It
    /// is taken after every count of the worktree, so it is the one kept; a count of the
    /// worktree still running finds it gone and keeps nothing.
    fn count_on_branch(&self, row: &LoopRow) {
        if !Path::new(&row.worktree_dir).is_dir() {
            count_ended(self.engine.store.clone(), row.clone());
        }
    }

    /// An event from outside a turn (cancel, shutdown).
    /// `None` when the loop is not this runner's to end (no longer running, or running
    /// another session: taken over by another process).
    async fn external(&mut self, event: Event) -> Option<Transition> {
        let row = self.row().await?;
        if !self.is_ours(&row) {
            return None;
        }
        let turn = self.live.handle.take();
        if let Some(h) = &turn {
            h.abort();
        }
        let shutdown = matches!(event, Event::Shutdown);
        let cancel = matches!(event, Event::Cancel);
        let t = next_transition(&self.facts(&row), &event);
        self.apply(row.clone(), t.clone(), None).await;
        // What the stopped turn left (a stall's, a shutdown's): counted as the loop ends, as
        // a turn end counts its own. A cancel counts once its worktree is kept or removed.
        if t.kind == TransitionKind::Terminate && !cancel && !self.gone {
            self.count_at_end(&row);
        }
        // The server exits once every runner answered its shutdown: the killed turn's end
        // (which kills what left its group, `setsid`) must come first, or nobody takes it.
        if let (true, Some(h)) = (shutdown, &turn) {
            if !h.wait_ended(SHUTDOWN_TURN_WAIT).await {
                tracing::warn!(loop_name = %self.loop_name, "the killed agent turn did not end within {SHUTDOWN_TURN_WAIT:?}; shutting down anyway");
            }
        }
        if self.gone {
            return None;
        }
        // A termination that could not be written (a database failure) leaves the loop
        // running with this session: not reported as done.
        if t.kind == TransitionKind::Terminate && matches!(self.loop_row().await, Ok(Some(r)) if self.is_ours(&r)) {
            return None;
        }
        Some(t)
    }

    /// Logs a task control as a `control` transition (phase and counters unchanged).
    async fn log_control(&self, row: &LoopRow, event: Event) {
        let t = next_transition(&self.facts(row), &event);
        let (p, n) = (self.project.clone(), self.loop_name.clone());
        let res = self
            .engine
            .store
            .call(move |c| {
                forge_store::transact(c, |tx| -> rusqlite::Result<()> {
                    let now = now_ms();
                    db::log_transition(tx, &p, &n, &t, now)?;
                    forge_store::status::touch(tx, &p, &n, now)
                })
            })
            .await;
        if let Err(e) = res {
            tracing::error!(loop_name = %self.loop_name, "cannot log a task control: {e}");
        }
        self.engine.store.wrote.wake();
    }

    /// A task control (`forge.task-*`) on a session of this loop.
    async fn task(
        &mut self,
        session: Option<String>,
        action: super::TaskAction,
        sender: &str,
    ) -> Result<CommandResult, ToolError> {
        use super::TaskAction;
        let row = self
            .row()
            .await
            .ok_or_else(|| ToolError::not_found(format!("No loop found for loop \"{}\".", self.loop_name)))?;
        if row.status != "running" {
            return Err(ToolError::conflict(format!("Loop \"{}\" is not running ({}).", row.loop_name, row.status)));
        }
        let target = session.unwrap_or_else(|| self.live.id.clone());
        let is_live = target == self.live.id;
        let is_standby = row.standby_session_id.as_deref() == Some(target.as_str());
        if !is_live && !is_standby {
            let mut known = format!("{} ({}, current)", self.live.id, self.live.role.as_str());
            if let Some(sb) = &row.standby_session_id {
                known.push_str(&format!(", {sb} (standby)"));
            }
            return Err(ToolError::not_found(format!(
                "Session {target} is not a session of loop \"{}\"; its sessions: {known}.",
                self.loop_name
            )));
        }
        let role = if is_live {
            self.live.role.as_str().to_string()
        } else {
            self.sessions.get(&target).map(|(_, _, r)| r.as_str().to_string()).unwrap_or_else(|| "standby".into())
        };
        let not_live = |what: &str, done: &str| {
            ToolError::conflict(format!(
                "Session {target} is the loop's standby session: it runs no turn to {what}; only the current phase session {} can be {done}.",
                self.live.id
            ))
        };
        match action {
            TaskAction::Status => {
                let state = if !is_live {
                    "standby (resumed at the next rotation to its role)"
                } else if self.live.stopped {
                    "stopped (task-cancel); task-revive resumes it"
                } else if self.live.handle.is_some() {
                    "running a turn"
                } else if self.deferred_since.is_some() {
                    "turn ended; waiting for the loop's other sessions to settle"
                } else {
                    "idle"
                };
                let (at, source) = match self.engine.activity.last_with_source(&target) {
                    Some((at, src)) => (Some(at), src),
                    None => (None, "unknown"),
                };
                let t2 = target.clone();
                let queued = self.db(move |c| forge_store::task_messages::waiting(c, &t2)).await.unwrap_or(0);
                let turns =
                    if is_live { self.live.turns } else { self.sessions.get(&target).map(|(_, t, _)| *t).unwrap_or(0) };
                let activity = match at {
                    Some(at) => format!(
                        "{} ({source}, {}s ago)",
                        forge_domain::text::iso_millis(at),
                        (now_ms() - at).max(0) / 1000
                    ),
                    None => "none seen (unknown)".to_string(),
                };
                let text = format!(
                    "Session {target} ({role}) of loop \"{}\": {state}\nPhase: {} · iteration {} · turn {turns}\nLast activity: {activity}\nQueued messages: {queued}",
                    self.loop_name, row.phase, row.iteration
                );
                Ok(CommandResult {
                    text,
                    data: json!({
                        "loopName": self.loop_name, "sessionId": target, "role": role, "state": state,
                        "current": is_live, "running": is_live && self.live.handle.is_some(),
                        "stopped": is_live && self.live.stopped, "turn": turns,
                        "lastActivityAt": at, "lastActivitySource": source, "queuedMessages": queued,
                    })
                    .into(),
                })
            }
            TaskAction::Message(message) => {
                let (p, n, t2, who) =
                    (self.project.clone(), self.loop_name.clone(), target.clone(), sender.to_string());
                let queued = self
                    .db(move |c| {
                        let waiting = forge_store::task_messages::waiting(c, &t2)?;
                        if waiting >= MAX_QUEUED_MESSAGES {
                            return Ok(Err(waiting));
                        }
                        forge_store::task_messages::queue(c, &p, &n, &t2, &who, &message, now_ms()).map(Ok)
                    })
                    .await
                    .map_err(|e| ToolError::internal(e.to_string()))?;
                let waiting = queued.map_err(|waiting| {
                    ToolError::conflict(format!(
                        "Session {target} already has {waiting} messages waiting (at most {MAX_QUEUED_MESSAGES}); they go at the start of its next turn (the loop's next prompt to it, or task-revive after task-cancel): send more after that turn has started."
                    ))
                })?;
                self.log_control(&row, Event::TaskMessage).await;
                Ok(CommandResult {
                    text: format!(
                        "Message queued for session {target} without launching or resuming it; it goes at the start of the session's next turn ({waiting} waiting)."
                    ),
                    data: json!({ "sessionId": target, "queuedMessages": waiting }).into(),
                })
            }
            TaskAction::Cancel => {
                if !is_live {
                    return Err(not_live("cancel", "cancelled"));
                }
                let Some(h) = self.live.handle.take() else {
                    return Ok(CommandResult {
                        text: format!("No turn of session {target} is running; nothing was stopped."),
                        data: json!({ "sessionId": target, "interrupted": false }).into(),
                    });
                };
                self.live.stopped = true;
                h.abort();
                self.deferred_since = None;
                self.mark(&target, "idle").await;
                self.log_control(&row, Event::TaskCancel).await;
                Ok(CommandResult {
                    text: format!(
                        "Stopped turn {} of session {target} ({role}); the session is kept and the loop waits: task-revive resumes it with an instruction. Partial edits in the worktree were not rolled back.",
                        self.live.turns
                    ),
                    data: json!({ "sessionId": target, "interrupted": true, "turn": self.live.turns }).into(),
                })
            }
            TaskAction::Revive(instruction) => {
                if !is_live {
                    return Err(not_live("revive", "revived"));
                }
                if self.live.handle.is_some() {
                    return Err(ToolError::conflict(format!(
                        "Session {target} is running a turn: task-message queues a message into its next turn, task-cancel stops this one."
                    )));
                }
                if !self.live.stopped && self.deferred_since.is_some() {
                    return Err(ToolError::conflict(format!(
                        "Session {target} ended its turn and the loop is acting on it; nothing to revive."
                    )));
                }
                self.log_control(&row, Event::TaskRevive).await;
                self.live.nudges = 0;
                self.send(instruction).await;
                Ok(CommandResult {
                    text: format!(
                        "Session {target} ({role}) resumed with your instruction (turn {}).",
                        self.live.turns
                    ),
                    data: json!({ "sessionId": target, "turn": self.live.turns }).into(),
                })
            }
        }
    }

    /// `None` when the loop is no longer this runner's (gone, ended, or running another
    /// process's session): the caller then answers from the store.
    async fn cancel(&mut self) -> Option<Result<CommandResult, ToolError>> {
        let row = self.row().await?;
        let iteration = row.iteration;
        if self.external(Event::Cancel).await.is_none() {
            // Not this runner's to end: it stops, cleaning up after a cancel made elsewhere.
            self.taken_over().await;
            return None;
        }
        if self.config.cleanup_worktree {
            self.remove_cancelled_worktree(PathBuf::from(&row.worktree_dir)).await;
        }
        self.count_at_end(&row);
        Some(Ok(cancelled_result(&row, iteration)))
    }

    /// `Files changed:` of a cancelled loop, once its worktree is kept or gone: what the
    /// stopped turn left in the worktree, else what its branch holds (the worktree's work
    /// committed there as it went, `loop.cleanupWorktree`). Before, a cancelled loop kept
    /// the count of its last finished turn, and a count racing the worktree's removal was
    /// lost (review XB).
    fn count_at_end(&self, row: &LoopRow) {
        if Path::new(&row.worktree_dir).is_dir() {
            self.count_changes(row);
        } else {
            count_ended(self.engine.store.clone(), row.clone());
        }
    }

    /// Carries out a transition; returns false when the loop stopped.
    async fn apply(&mut self, row: LoopRow, t: Transition, pending: Option<db::Pending>) -> bool {
        match t.kind {
            TransitionKind::Noop => true,
            TransitionKind::AuditorFallback => {
                // Next model of the auditor chain, same session, the pending record of the
                // aborted turn discarded, the audit prompt sent again.
                let (p, n) = (self.project.clone(), self.loop_name.clone());
                let written = self
                    .guarded_write("the auditor fallback", move |c| {
                        db::discard_pending(c, &p, &n, now_ms())?;
                        c.execute(
                            "UPDATE loops SET auditor_fallback_index = auditor_fallback_index + 1 WHERE project_id = ?1 AND loop_name = ?2",
                            rusqlite::params![p, n],
                        )
                        .map(|_| ())
                    })
                    .await;
                if written == Guarded::Lost {
                    return false;
                }
                self.mark(&self.live.id.clone(), "retry").await;
                let p = self.live.phase_prompt.clone();
                self.send(p).await;
                true
            }
            TransitionKind::Nudge => {
                let text = if t.cause == "summary-missing" {
                    if let Some(p) = &pending {
                        let id = p.id;
                        self.write(move |c| db::resolve_handoff(c, id, "discarded", now_ms()).map(|_| ())).await;
                    }
                    handoff::SUMMARY_NUDGE.to_string()
                } else {
                    HANDOFF_NUDGE.to_string()
                };
                self.live.nudges += 1;
                self.send(text).await;
                true
            }
            TransitionKind::Resend => {
                self.live.nudges += 1;
                let p = self.live.phase_prompt.clone();
                self.send(p).await;
                true
            }
            TransitionKind::Retry => {
                let (p, n, e) = (self.project.clone(), self.loop_name.clone(), t.error_count_after);
                let written = self
                    .guarded_write("the retry's error count", move |c| {
                        c.execute(
                            "UPDATE loops SET error_count = ?3 WHERE project_id = ?1 AND loop_name = ?2",
                            rusqlite::params![p, n, e],
                        )
                        .map(|_| ())
                    })
                    .await;
                if written == Guarded::Lost {
                    return false;
                }
                // The session is retrying until the prompt is sent again.
                self.mark(&self.live.id.clone(), "retry").await;
                tokio::time::sleep(Duration::from_secs(2)).await;
                let p = self.live.phase_prompt.clone();
                self.send(p).await;
                true
            }
            TransitionKind::Terminate => {
                self.terminate(row, t, pending).await;
                false
            }
            _ => {
                self.switch(row, t, pending).await;
                !self.gone
            }
        }
    }

    /// A phase change into a fresh session.
    async fn switch(&mut self, row: LoopRow, t: Transition, pending: Option<db::Pending>) {
        let Some(to) = t.to else { return };
        // Not into a worktree another process took over (its transaction below checks again).
        if !self.owns().await {
            self.lost().await;
            return;
        }
        let now = now_ms();
        let section_clean = t.cause == "section-clean";
        let role = match to {
            Phase::Coding => Role::Coder,
            Phase::Auditing => Role::Auditor,
            Phase::PostAction => Role::PostAction,
        };
        // Session rotation with a standby (seeds: "Session Rotation"): within a section (or
        // across a non-sectioned loop's iterations) the opposite role's session is retained
        // and resumed; a new section, post-action, recurrence escalation or a reuse
        // percentage of 0 means a fresh session.
        let same_scope = matches!(
            t.cause,
            "coder-handoff" | "coder-error" | "section-dirty" | "audit-dirty" | "audit-error" | "audit-session-aborted"
        );
        let escalate = same_scope && self.escalation(&row, matches!(t.cause, "section-dirty" | "audit-dirty")).await;
        let percent = |r: Role| match r {
            Role::Coder => self.config.coder_context_percent,
            Role::Auditor => self.config.auditor_context_percent,
            Role::PostAction => 0,
        };
        let standby_dbg = row.standby_session_id.clone();
        let standby = row
            .standby_session_id
            .clone()
            .filter(|sb| *sb != self.live.id)
            .and_then(|sb| self.sessions.get(&sb).map(|(tok, turns, r)| (sb, tok.clone(), *turns, *r)))
            .filter(|(_, _, _, r)| *r == role);
        let resumed = match standby {
            Some(sb) if same_scope && !escalate && percent(role) != 0 => Some(sb),
            _ => None,
        };
        // The context-window check: resume, compact first, or replace the standby.
        let resumed = match resumed {
            None => None,
            Some(sb) => {
                let text =
                    tokio::fs::read_to_string(host::usage_file(&self.engine.data_dir, &sb.0)).await.unwrap_or_default();
                let (lines, _) = forge_domain::usage::parse(&text);
                let can_compact = self.config.agent_compact_command.as_ref().is_some_and(|a| !a.is_empty());
                match forge_domain::usage::reuse_decision(&lines, percent(role), can_compact) {
                    forge_domain::usage::Reuse::Resume => Some(sb),
                    forge_domain::usage::Reuse::Compact => {
                        if self.compact(&row, &sb.0, &sb.1, role).await {
                            Some(sb)
                        } else {
                            None
                        }
                    }
                    forge_domain::usage::Reuse::Fresh => None,
                }
            }
        };
        // A compaction stopped by a cancel, shutdown or stop, or by another process taking
        // the loop over: nothing of the rotation is written (the message is handled next).
        // From the ownership check to the write: git work in the worktree, which no restart
        // or cancel by another process may come between (`loop_lock`).
        let Ok(step) = self.step_lock_or_stop().await else { return };
        self.step = step;
        if !self.owns().await {
            self.lost().await;
            self.step = None;
            return;
        }
        crate::pause::at("runner.step").await;
        // Git first: the checkpoint commit of a clean section (a new section never resumes a
        // standby, so nothing above compacted).
        let checkpoint = if section_clean { self.checkpoint_section(&row).await } else { None };
        tracing::debug!(loop_name = %self.loop_name, cause = t.cause, ?standby_dbg, escalate, known = self.sessions.len(), "session rotation");
        let old_role = self.live.role;
        let keep_old = same_scope && !escalate && percent(old_role) != 0 && t.cause != "audit-error";
        self.sessions.insert(self.live.id.clone(), (self.live.token.clone(), self.live.turns, old_role));
        let (new_id, token, prior_turns, fresh) = match &resumed {
            Some((id, tok, turns, _)) => (id.clone(), tok.clone(), *turns, false),
            None => (forge_core::fresh_session(), host::new_token(), 0, true),
        };
        let new_standby: Option<String> = keep_old.then(|| self.live.id.clone());
        let (p, n) = (self.project.clone(), self.loop_name.clone());
        let (old_id, nid, tok) = (self.live.id.clone(), new_id.clone(), token.clone());
        let sb2 = new_standby.clone();
        let summary: Option<AuditSummary> = pending
            .as_ref()
            .and_then(|x| x.payload.get("summary").cloned())
            .and_then(|s| serde_json::from_value(s).ok());
        let coder_decisions = match (&pending, t.cause) {
            (Some(x), "coder-handoff") => {
                handoff::parse_stored(Role::Coder, &x.payload.to_string()).ok().map(|s| match s {
                    handoff::StoredHandoff::Coder(c) => handoff::render_coder_handoff(&c),
                    _ => String::new(),
                })
            }
            _ => None,
        };
        // The attempt's checkpoint references: a snapshot of the worktree handed to audit.
        let snap = if t.from == Phase::Coding && to == Phase::Auditing {
            self.attempt_snapshot(&row).await
        } else {
            Snapshot::default()
        };
        let t2 = t.clone();
        let r2 = row.clone();
        let decisions = coder_decisions.clone();
        let pend = pending.clone();
        let written = self
            .guarded_write("persisting a transition", move |tx| {
                    if let Some(x) = &pend {
                        db::apply_handoff(tx, &p, &n, &x.session_id, &x.role, now)?;
                    } else {
                        db::discard_pending(tx, &p, &n, now)?;
                    }
                    let cur = r2.section();
                    // Attempt history.
                    if t2.from == Phase::Coding && t2.to == Some(Phase::Auditing) {
                        let before = serde_json::to_value(prompt_context::outstanding(tx, &r2)?).unwrap_or(Value::Null);
                        let key = pend.as_ref().map(|x| format!("handoff:{}", x.id)).unwrap_or_else(|| format!("error:{}:{now}", r2.iteration));
                        let scope = attempts::scope_of(cur);
                        attempts::record(
                            tx,
                            &p,
                            &attempts::NewAttempt {
                                loop_name: &n,
                                scope: &scope,
                                section_index: cur.map(i64::from),
                                source_session_id: &old_id,
                                completion_key: &key,
                                iteration: r2.iteration,
                                worktree_dir: Some(&r2.worktree_dir),
                                plan_hash: None,
                                coder_decisions: decisions.as_deref(),
                                snapshot_commit: snap.commit.as_deref(),
                                snapshot_ref: snap.ref_name.as_deref(),
                                previous_commit: snap.previous.as_deref().or(r2.base_commit.as_deref()),
                                diff_summary: snap.diff.as_deref(),
                                fallback_reason: (pend.is_none()).then_some("coder turn ended on an assistant error"),
                                findings_before: &before,
                            },
                            now,
                        )?;
                    }
                    if t2.from == Phase::Auditing {
                        set_latest_outcome(tx, &p, &n, &old_id, &r2, if section_clean || t2.cause == "audit-clear" { "clean" } else { "dirty" }, now)?;
                        if let Some(x) = &pend {
                            let clean = section_clean || t2.cause == "audit-clear";
                            if let Some(text) = last_audit_text(tx, &r2, x, clean)? {
                                db::set_large(tx, &p, &n, Some(&text), None)?;
                            }
                        }
                    }
                    // Sections.
                    if let Some(k) = cur {
                        if section_clean {
                            let s = summary.clone().unwrap_or(AuditSummary { done: vec![], deviations: vec![], follow_ups: vec![] });
                            db::complete_section(tx, &p, &n, k, &s.done, &s.deviations, &s.follow_ups, checkpoint.as_deref(), now)?;
                        } else if t2.cause == "section-dirty" {
                            db::bump_section_attempts(tx, &p, &n, k)?;
                        }
                    }
                    if let Some(next) = t2.section_after {
                        if Some(next) != cur {
                            db::start_section(tx, &p, &n, next, now)?;
                        }
                    }
                    tx.execute(
                        "UPDATE loops SET phase = ?3, iteration = ?4, current_section_index = coalesce(?5, current_section_index),
                            audit_count = ?6, error_count = ?7, model_failed = coalesce(?8, model_failed),
                            current_session_id = ?9, nudge_count = 0, standby_session_id = ?10,
                            failed_coding_turns = ?11, failed_audit_turns = ?12
                         WHERE project_id = ?1 AND loop_name = ?2 AND status = 'running'",
                        rusqlite::params![
                            p,
                            n,
                            to.as_str(),
                            t2.iteration_after,
                            t2.section_after,
                            t2.audit_count_after,
                            t2.error_count_after,
                            t2.model_failed.map(i64::from),
                            nid,
                            sb2,
                            t2.failed_turns_after.coding,
                            t2.failed_turns_after.auditing
                        ],
                    )?;
                    let keep: Vec<String> = std::iter::once(nid.clone()).chain(sb2.clone()).collect();
                    db::delete_sessions_except(tx, &p, &n, &keep, now)?;
                    if fresh {
                        db::insert_session(tx, &p, &n, &nid, role.as_str(), &tok, t2.section_after.or(cur), now)?;
                    }
                    if t2.is_logged() {
                        db::log_transition(tx, &p, &n, &t2, now)?;
                    }
                    forge_store::status::touch(tx, &p, &n, now)
            })
            .await;
        self.step = None;
        if written != Guarded::Written {
            return;
        }
        self.engine.store.wrote.wake();
        // Sessions that are neither current nor standby are gone.
        let keep: Vec<String> = std::iter::once(new_id.clone()).chain(new_standby.clone()).collect();
        self.sessions.retain(|id, _| keep.contains(id));
        if !keep.contains(&self.live.id) {
            self.engine.activity.forget(&self.live.id);
        }
        self.live = Live {
            id: new_id,
            token,
            role,
            turns: prior_turns,
            nudges: 0,
            phase_prompt: String::new(),
            nudge_turn: false,
            handle: None,
            stopped: false,
        };
        // A resumed standby whose CLI conversation was never recorded (a preset's CLI
        // reports its id only once its model has answered; the standby's turns were killed
        // or hung before that) starts a new conversation, which never saw the task: it gets
        // the prompt a new session gets, not a follow-up that assumes the earlier turns.
        let continues = continues_conversation(fresh, self.cli_conversation_unrecorded());
        let kind = prompt_kind(to, t.kind == TransitionKind::AdvanceSection, continues);
        let prompt = self.build_prompt(kind, coder_decisions).await;
        self.live.phase_prompt = prompt.clone();
        self.send(prompt).await;
    }

    /// Compacts a standby session with `agent.compactCommand` (run like a turn, with the
    /// session's id and token, at most 10 minutes). False when it failed: the caller then
    /// starts a fresh session instead.
    async fn compact(&self, row: &LoopRow, session: &str, token: &str, role: Role) -> bool {
        let Some(argv) = self.config.agent_compact_command.clone().filter(|a| !a.is_empty()) else { return false };
        let claim = turn_claim(session);
        let req = TurnRequest {
            argv,
            session_id: session.to_string(),
            token: token.to_string(),
            role: role.as_str().to_string(),
            agent: if role == Role::Auditor { "auditor-loop" } else { "code" }.to_string(),
            model: None,
            variant: None,
            loop_name: self.loop_name.clone(),
            cwd: PathBuf::from(&row.worktree_dir),
            title: session_title(row, role),
            prompt: COMPACT_PROMPT.to_string(),
            resume: true,
            socket: self.engine.private_socket(),
            activity: self.engine.activity.clone(),
            data_dir: self.engine.data_dir.clone(),
            prompt_dir: self.engine.data_dir.join("prompts").join(&self.loop_name),
            turn: 0,
            shim_dir: row
                .sandbox
                .then(|| super::sandbox::shim_dir(&self.engine.data_dir, Path::new(&row.worktree_dir))),
            preset: None,
            project_config: self.config.agent_trust_project_config,
            secrets: crate::secrets::Secrets::from_config(&self.config),
            record: Some(self.engine.store.clone()),
            claim: Some(claim.clone()),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        // The standby is busy while it compacts (other loop sessions see it), and its turn
        // is claimed first, as any turn's ([`claim_turn`]): not when the loop is no longer
        // this runner's.
        let s = session.to_string();
        if let Err(e) = self.owned_write(move |c| claim_turn(c, &s, &claim)).await {
            tracing::info!(loop_name = %self.loop_name, "no compaction: {e}");
            return false;
        }
        let handle = host::start_turn(req, tx);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        // Every 2 s: is the loop still this runner's (the change feed is not read while the
        // runner compacts)?
        let mut look = tokio::time::interval(Duration::from_secs(2));
        look.tick().await;
        let res = loop {
            tokio::select! {
                r = tokio::time::timeout_at(deadline, rx.recv()) => break Some(r),
                // A cancel, shutdown or stop waits: it is handled now, not after the compaction.
                _ = self.stopping.wake.notified(), if !self.stopping.asked() => break None,
                _ = std::future::ready(()), if self.stopping.asked() => break None,
                _ = look.tick() => {
                    if !self.owns().await {
                        break None;
                    }
                }
            }
        };
        self.mark(session, "idle").await;
        let Some(res) = res else {
            handle.abort();
            // A shutdown exits once this runner answers: what the compaction left outside its
            // group goes first (as for a live turn, `external`).
            handle.wait_ended(SHUTDOWN_TURN_WAIT).await;
            tracing::info!(loop_name = %self.loop_name, "compaction stopped: the loop is being cancelled or stopped, or another process took it over");
            return false;
        };
        match res {
            // Its usage file is kept (its rows are totals); the resumed turn reports anew.
            Ok(Some((_, _, TurnOutcome::Reply(_) | TurnOutcome::NoReply))) => true,
            Ok(other) => {
                tracing::warn!(loop_name = %self.loop_name, ?other, "compaction failed; starting a fresh session");
                false
            }
            Err(_) => {
                handle.abort();
                tracing::warn!(loop_name = %self.loop_name, "compaction timed out; starting a fresh session");
                false
            }
        }
    }

    /// Recurrence escalation: a bug finding seen in 3 consecutive dirty audits (counting the
    /// audit being closed now when `dirty_now`) forces fresh sessions for both roles.
    async fn escalation(&self, row: &LoopRow, dirty_now: bool) -> bool {
        let (r2, config) = (row.clone(), self.config.clone());
        let ctx = self.db(move |c| prompt_context::load(c, &r2, &config, None)).await;
        let Ok(mut ctx) = ctx else { return false };
        if dirty_now {
            if let Some(last) = ctx.attempts.iter_mut().rev().find(|a| a.outcome.is_none()) {
                last.outcome = Some("dirty".into());
                last.findings_after = ctx.findings.clone();
            }
        }
        !forge_domain::prompts::recurring_findings(&ctx).is_empty()
    }

    /// Builds a prompt from the current row.
    async fn build_prompt(&self, kind: Kind, coder_decisions: Option<String>) -> String {
        let Some(row) = self.row().await else { return String::new() };
        let config = self.config.clone();
        let r2 = row.clone();
        let ctx = self.db(move |c| prompt_context::load(c, &r2, &config, coder_decisions)).await;
        let Ok(ctx) = ctx else { return String::new() };
        let ctx = if matches!(kind, Kind::Audit | Kind::AuditFollowUp) {
            let r3 = row.clone();
            tokio::task::spawn_blocking(move || prompt_context::with_scope(ctx, &r3))
                .await
                .unwrap_or_else(|_| panic!("scope task"))
        } else {
            ctx
        };
        prompt_context::build(kind, &ctx)
    }

    /// The snapshot of a coder handoff: a commit of the worktree (HEAD and the index
    /// untouched) under `refs/forge/<loop>/attempts/<scope>-<n>`, the previous checkpoint
    /// of the same scope (the previous attempt's snapshot, else the last completed
    /// section's checkpoint, else the base commit) and the diff summary between them.
    /// A git failure leaves the fields empty (logged): the audit still runs.
    async fn attempt_snapshot(&self, row: &LoopRow) -> Snapshot {
        let (p, n, cur) = (self.project.clone(), self.loop_name.clone(), row.section());
        let scope = attempts::scope_of(cur);
        let base = row.base_commit.clone();
        let known = self
            .db(move |c| {
                let number: i64 = c.query_row(
                    "SELECT coalesce(max(attempt_number), 0) + 1 FROM loop_attempts WHERE project_id = ?1 AND loop_name = ?2 AND scope = ?3",
                    rusqlite::params![p, n, scope],
                    |r| r.get(0),
                )?;
                let prev_snap: Option<String> = c
                    .query_row(
                        "SELECT snapshot_commit FROM loop_attempts WHERE project_id = ?1 AND loop_name = ?2 AND scope = ?3
                            AND snapshot_commit IS NOT NULL ORDER BY id DESC LIMIT 1",
                        rusqlite::params![p, n, scope],
                        |r| r.get(0),
                    )
                    .ok();
                let section_checkpoint: Option<String> = match cur {
                    Some(k) => c
                        .query_row(
                            "SELECT checkpoint_commit FROM section_plans WHERE project_id = ?1 AND loop_name = ?2
                                AND section_index < ?3 AND checkpoint_commit IS NOT NULL ORDER BY section_index DESC LIMIT 1",
                            rusqlite::params![p, n, k],
                            |r| r.get(0),
                        )
                        .ok(),
                    None => None,
                };
                Ok((number, prev_snap.or(section_checkpoint).or(base)))
            })
            .await;
        let Ok((number, previous)) = known else { return Snapshot::default() };
        let tag = match cur {
            Some(k) => format!("section-{k}"),
            None => "plan".to_string(),
        };
        let ref_name = format!("refs/forge/{}/attempts/{tag}-{number}", self.loop_name);
        let msg = format!("forge attempt {number} of {} ({tag}, iteration {})", self.loop_name, row.iteration);
        let wt = PathBuf::from(&row.worktree_dir);
        let r2 = ref_name.clone();
        let prev = previous.clone();
        let res = tokio::task::spawn_blocking(move || -> Result<(String, Option<String>), git::GitError> {
            let commit = git::snapshot(&wt, &r2, &msg)?;
            let diff = match &prev {
                Some(p) => Some(git::diff_summary(&wt, p, &commit)?),
                None => None,
            };
            Ok((commit, diff))
        })
        .await;
        match res {
            Ok(Ok((commit, diff))) => Snapshot { commit: Some(commit), ref_name: Some(ref_name), previous, diff },
            Ok(Err(e)) => {
                tracing::warn!(loop_name = %self.loop_name, "attempt snapshot failed: {e}");
                Snapshot { previous, ..Snapshot::default() }
            }
            Err(_) => Snapshot { previous, ..Snapshot::default() },
        }
    }

    /// Commits the worktree as the checkpoint of the current section.
    async fn checkpoint_section(&self, row: &LoopRow) -> Option<String> {
        let k = row.section()?;
        let (p, n) = (self.project.clone(), self.loop_name.clone());
        let title = self
            .db(move |c| db::sections(c, &p, &n))
            .await
            .ok()
            .and_then(|s| s.into_iter().find(|s| s.index == k))
            .map(|s| s.title.trim().to_string())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "checkpoint".into());
        let msg = format!("section {}: {title}", k + 1);
        let wt = PathBuf::from(&row.worktree_dir);
        let branch = row.worktree_branch.clone();
        match tokio::task::spawn_blocking(move || git::checkpoint_on(&wt, branch.as_deref(), &msg)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::warn!(loop_name = %row.loop_name, "checkpoint commit failed: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// Ends the loop.
    async fn terminate(&mut self, row: LoopRow, t: Transition, pending: Option<db::Pending>) {
        // Not into a worktree another process took over (the transaction checks again),
        // and no restart or cancel by another process between this check, the commits and
        // the write (`loop_lock`).
        self.step = self.step_lock().await;
        if !self.owns().await {
            self.lost().await;
            self.step = None;
            return;
        }
        crate::pause::at("runner.step").await;
        let now = now_ms();
        let reason = t.termination.clone().unwrap_or(TerminationReason::Completed);
        let section_clean = t.cause == "section-clean";
        let checkpoint = if section_clean { self.checkpoint_section(&row).await } else { None };
        // Teardown commit: whatever the agent left is kept on the branch.
        let label = match &reason {
            TerminationReason::Completed => "completed",
            TerminationReason::Cancelled => "cancelled",
            TerminationReason::StallTimeout => "stalled",
            TerminationReason::Shutdown => "shutdown",
            TerminationReason::MaxIterations => "max_iterations",
            TerminationReason::MissingWorktreeDir => "removed",
            _ => "errored",
        };
        let wt = PathBuf::from(&row.worktree_dir);
        let msg = teardown_message(&row, label);
        let wt2 = wt.clone();
        let branch = row.worktree_branch.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if wt2.exists() {
                git::checkpoint_on(&wt2, branch.as_deref(), &msg).ok()
            } else {
                None
            }
        })
        .await;

        let summary: Option<AuditSummary> = pending
            .as_ref()
            .and_then(|x| x.payload.get("summary").cloned())
            .and_then(|s| serde_json::from_value(s).ok());
        let post = pending
            .as_ref()
            .filter(|x| x.role == "post_action")
            .and_then(|x| handoff::parse_stored(Role::PostAction, &x.payload.to_string()).ok());
        let (report, completion) = match &post {
            Some(handoff::StoredHandoff::PostAction(pa)) => {
                (Some(handoff::render_post_action_report(pa)), Some(handoff::render_post_action_summary(pa)))
            }
            _ => (None, None),
        };
        let apply_record =
            matches!(t.cause, "section-clean" | "audit-clear" | "post-action-complete" | "post-action-error");
        let (p, n, old_id) = (self.project.clone(), self.loop_name.clone(), self.live.id.clone());
        let t2 = t.clone();
        let r2 = row.clone();
        let written = self
            .guarded_write("persisting the termination", move |tx| {
                    match &pending {
                        Some(x) if apply_record => {
                            db::apply_handoff(tx, &p, &n, &x.session_id, &x.role, now)?;
                        }
                        _ => {}
                    }
                    db::discard_pending(tx, &p, &n, now)?;
                    if let Some(k) = r2.section() {
                        if section_clean {
                            let s = summary.unwrap_or(AuditSummary { done: vec![], deviations: vec![], follow_ups: vec![] });
                            db::complete_section(tx, &p, &n, k, &s.done, &s.deviations, &s.follow_ups, checkpoint.as_deref(), now)?;
                        }
                    }
                    if t2.from == Phase::Auditing && matches!(t2.cause, "section-clean" | "audit-clear") {
                        set_latest_outcome(tx, &p, &n, &old_id, &r2, "clean", now)?;
                        if let Some(x) = pending.as_ref().filter(|x| x.role == "auditor") {
                            if let Some(text) = last_audit_text(tx, &r2, x, true)? {
                                db::set_large(tx, &p, &n, Some(&text), None)?;
                            }
                        }
                    }
                    if report.is_some() {
                        db::set_large(tx, &p, &n, None, report.as_deref())?;
                    }
                    let status = t2.status().map(|s| s.as_str()).unwrap_or("errored");
                    tx.execute(
                        "UPDATE loops SET status = ?3, termination_reason = ?4, completed_at = ?5, completion_summary = coalesce(?6, completion_summary),
                            audit_count = ?7, error_count = ?8, standby_session_id = NULL,
                            current_section_index = coalesce(?9, current_section_index),
                            failed_coding_turns = ?10, failed_audit_turns = ?11
                         WHERE project_id = ?1 AND loop_name = ?2",
                        rusqlite::params![
                            p,
                            n,
                            status,
                            t2.termination.as_ref().map(|r| r.to_stored()),
                            now,
                            completion,
                            t2.audit_count_after,
                            t2.error_count_after,
                            t2.section_after,
                            t2.failed_turns_after.coding,
                            t2.failed_turns_after.auditing
                        ],
                    )?;
                    db::delete_sessions(tx, &p, &n, None, now)?;
                    db::log_transition(tx, &p, &n, &t2, now)?;
                    forge_store::status::touch(tx, &p, &n, now)
            })
            .await;
        self.step = None;
        if written == Guarded::Lost {
            return;
        }
        self.engine.store.wrote.wake();
        if let Some(h) = self.live.handle.take() {
            h.abort();
        }
        if reason == TerminationReason::Completed {
            // Committed above; removed only if that took everything.
            let repo = self.repo_root.clone();
            remove_worktree_logged(self.engine.data_dir.clone(), repo, wt, None).await;
        }
    }
}

/// The checkpoint references of an attempt (all empty when git failed).
#[derive(Default)]
struct Snapshot {
    commit: Option<String>,
    ref_name: Option<String>,
    previous: Option<String>,
    diff: Option<String>,
}

/// `lastAuditResult`: the auditor's record and the store's verdict, rendered for display
/// (never decision input). Clean: no blocking finding; dirty: the blocking count now.
fn last_audit_text(
    tx: &rusqlite::Connection,
    row: &LoopRow,
    record: &db::Pending,
    clean: bool,
) -> rusqlite::Result<Option<String>> {
    let Ok(handoff::StoredHandoff::Auditor(a)) = handoff::parse_stored(Role::Auditor, &record.payload.to_string())
    else {
        return Ok(None);
    };
    let blocking = if clean { 0 } else { prompt_context::outstanding(tx, row)?.len().max(1) as u32 };
    Ok(Some(handoff::render_audit_result(&a, blocking)))
}

/// Records the audit outcome on the loop's latest attempt that has none.
fn set_latest_outcome(
    tx: &rusqlite::Connection,
    p: &str,
    n: &str,
    auditor: &str,
    row: &LoopRow,
    outcome: &str,
    now: i64,
) -> rusqlite::Result<()> {
    let id: Option<i64> = tx
        .query_row(
            "SELECT id FROM loop_attempts WHERE project_id = ?1 AND loop_name = ?2 AND outcome IS NULL ORDER BY id DESC LIMIT 1",
            rusqlite::params![p, n],
            |r| r.get(0),
        )
        .ok();
    if let Some(id) = id {
        let after = serde_json::to_value(prompt_context::outstanding(tx, row)?).unwrap_or(Value::Null);
        attempts::set_outcome(tx, id, outcome, auditor, &after, now)?;
    }
    Ok(())
}

/// `loop.postAction.enabled` with a non-empty skill or prompt.
pub fn post_action_configured(c: &Config) -> bool {
    c.post_action_enabled
        && (c.post_action_skill.as_deref().is_some_and(|s| !s.trim().is_empty())
            || c.post_action_prompt.as_deref().is_some_and(|s| !s.trim().is_empty()))
}

/// `Loop: <name> k/N #it`, `audit: ...`, `action: <name>` (at most 60 chars).
pub fn session_title(row: &LoopRow, role: Role) -> String {
    let sec = row.section().map(|k| format!(" {}/{}", k + 1, row.total_sections)).unwrap_or_default();
    let t = match role {
        Role::Coder => format!("Loop: {}{sec} #{}", row.loop_name, row.iteration),
        Role::Auditor => format!("audit: {}{sec} #{}", row.loop_name, row.iteration),
        Role::PostAction => format!("action: {}", row.loop_name),
    };
    if t.chars().count() > 60 {
        format!("{}...", t.chars().take(57).collect::<String>())
    } else {
        t
    }
}

fn cancelled_result(row: &LoopRow, iteration: i64) -> CommandResult {
    let mut text = format!(
        "Cancelled loop \"{}\" (was at iteration {iteration}).\nDirectory: {}",
        row.loop_name, row.worktree_dir
    );
    if let Some(b) = &row.worktree_branch {
        text.push_str(&format!("\nBranch: {b}"));
    }
    CommandResult {
        text,
        data: json!({ "loopName": row.loop_name, "iteration": iteration, "worktreeDir": row.worktree_dir, "branch": row.worktree_branch }).into(),
    }
}

/// The block of queued task messages put before a prompt.
fn queued_block(msgs: &[forge_store::task_messages::Queued]) -> String {
    let mut out = String::new();
    for m in msgs {
        out.push_str(&format!(
            "[Message from {} at {}]\n{}\n\n",
            m.sender,
            forge_domain::text::iso_millis(m.created_at),
            m.message.trim_end()
        ));
    }
    out.push_str("---\n\n");
    out
}

/// A task control (`forge.task-*`): through the loop's runner in this process. A loop run
/// by another process is refused with a message saying so (its runner holds the turn).
pub async fn task(
    engine: &Arc<Engine>,
    env: &ToolEnv,
    loop_name: &str,
    session: Option<String>,
    action: super::TaskAction,
) -> Result<CommandResult, ToolError> {
    let project = env.project.id.clone();
    let sender = match &env.caller.agent {
        a if a == "user" => "the user".to_string(),
        a => format!("agent {a} (session {})", env.caller.session_id),
    };
    if let Some(h) = engine.runner(&project, loop_name) {
        if let Some(r) = h.task(loop_name, session, action, sender).await {
            return r;
        }
    }
    // The runner ended as the request reached it (the loop completed, was cancelled):
    // said as for a loop that is not running (review YJ: "not run by this server process").
    let (p, n) = (project.clone(), loop_name.to_string());
    if let Ok(Some(row)) = engine.store.call(move |c| loops::get(c, &p, &n)).await {
        if row.status != "running" {
            return Err(ToolError::conflict(format!("Loop \"{loop_name}\" is not running ({}).", row.status)));
        }
    }
    // Run by another live server (two editors on the project, each with its own server):
    // its runner takes task controls; say which, and how to reach it (review YI: the
    // message said the loop's server may have died, and pointed at a takeover).
    let (p, n) = (project.clone(), loop_name.to_string());
    if let Ok(Some(pid)) = engine.store.call(move |c| loops::owner_pid(c, &p, &n)).await {
        if pid != i64::from(std::process::id()) {
            let sockets = engine.store.call(move |c| forge_store::servers::sockets_of_pid(c, pid)).await;
            // This user's sockets only: another user's server is not one to send a call to.
            let mine = |s: &String| {
                use std::os::unix::fs::MetadataExt;
                // SAFETY: geteuid has no preconditions and cannot fail.
                let me = unsafe { libc::geteuid() };
                std::fs::symlink_metadata(s).is_ok_and(|m| m.uid() == me)
            };
            let live: Vec<String> = sockets
                .unwrap_or_default()
                .into_iter()
                .filter(|s| mine(s) && !forge_core::paths::socket_is_dead(Path::new(s)))
                .collect();
            if let Some(sock) = live.first() {
                // The data directory too: the server opens the one each call names (review
                // YJ: without it the suggestion found no loop in the default one).
                // `runBy`: `forge-lsp call` and `forge-lsp mcp` send the call on there.
                return Err(ToolError::precondition(format!(
                    "Loop \"{loop_name}\" is run by another forge-lsp server (pid {pid}), which takes its task controls; call it there, from the project: `FORGE_LSP_SOCKET={sock} forge-lsp call --data-dir {} <tool> …` (or from the editor connected to that server).",
                    engine.data_dir.display()
                ))
                .with_data("runBy", serde_json::json!({ "pid": pid, "socket": sock })));
            }
        }
    }
    Err(ToolError::precondition(format!(
        "Loop \"{loop_name}\" is not run by this server process (it was started by another forge-lsp process, or that process died: `forge.loop-status` with restart resumes it here)."
    )))
}

/// What a restart of `row` could recover its work from: (its worktree directory exists,
/// its branch exists in `repo`). The one answer for the restart, loop-status's restart line
/// and loop-cancel's hint.
pub(crate) fn work_left(repo: &Path, row: &forge_store::loops::LoopRow) -> (bool, bool) {
    if Path::new(&row.worktree_dir).exists() {
        return (true, true);
    }
    let branch = row.worktree_branch.clone().unwrap_or_else(|| git::branch_for(&row.loop_name));
    (false, git::branch_exists(repo, &branch).unwrap_or(false))
}

/// Whether a restart of the ended loop `row` could recover its work (its worktree directory
/// or its branch is there), as the restart decides it; the project's repository is `env`'s.
pub fn work_recoverable(env: &ToolEnv, row: &forge_store::loops::LoopRow) -> bool {
    let repo = env.project.repo_root.clone().unwrap_or_else(|| env.project.root.clone());
    let (dir, branch) = work_left(&repo, row);
    dir || branch
}

/// `loop-cancel`: through the loop's runner when this process runs it, else directly in
/// the store (a loop whose process died).
pub async fn cancel(engine: &Arc<Engine>, env: &ToolEnv, loop_name: &str) -> Result<CommandResult, ToolError> {
    let project = env.project.id.clone();
    let read = || {
        let (engine, p, n) = (engine.clone(), project.clone(), loop_name.to_string());
        async move {
            engine.store.call(move |c| loops::get(c, &p, &n)).await.map_err(|e| ToolError::internal(e.to_string()))
        }
    };
    let ended = |row: &LoopRow| {
        ToolError::conflict(forge_domain::loop_status::already_ended(
            &row.loop_name,
            &row.status,
            row.termination_reason.as_deref(),
            work_recoverable(env, row),
        ))
    };
    // A lock held past its wait (an earlier cancel removing a large worktree): a loop that
    // has ended is said so, not "busy".
    let held = |why: String| {
        let (read, ended) = (&read, &ended);
        async move {
            Err(match read().await? {
                Some(row) if row.status != "running" => ended(&row),
                _ => ToolError::busy(format!("Cannot cancel \"{loop_name}\": {why}; retry the cancel")),
            })
        }
    };
    crate::pause::at("cancel.locking").await;
    // One at a time with this process's restarts of the loop, which hold this until their
    // runner is registered: a cancel sent during one reaches the restarted runner.
    let _one_at_a_time =
        match tokio::time::timeout(crate::loop_lock::WAIT, engine.restart_lock(&project, loop_name)).await {
            Ok(guard) => guard,
            Err(_) => {
                let wait = crate::loop_lock::WAIT;
                return held(format!("a restart or cancel of it in this process did not finish within {wait:?}")).await;
            }
        };
    if let Some(h) = engine.runner(&project, loop_name) {
        if let Some(r) = h.cancel().await {
            return r;
        }
    }
    // Not between another process's runner's ownership check and its write, nor in the
    // middle of another process's restart (`loop_lock`).
    let locked = match engine.loop_lock(&project, loop_name, crate::loop_lock::WAIT).await {
        Ok(lock) => lock,
        Err(e) => return held(e.to_string()).await,
    };
    let Some(row) = read().await? else {
        return Err(ToolError::not_found(format!("No loop found for loop \"{loop_name}\".")));
    };
    if row.status != "running" {
        return Err(ended(&row));
    }
    let facts = row.facts(false);
    let t = next_transition(&facts, &Event::Cancel);
    let now = now_ms();
    let (p, n) = (project, loop_name.to_string());
    engine
        .store
        .call(move |c| {
            forge_store::transact(c, |tx| -> rusqlite::Result<()> {
                db::discard_pending(tx, &p, &n, now)?;
                tx.execute(
                    "UPDATE loops SET status = 'cancelled', termination_reason = 'cancelled', completed_at = ?3 WHERE project_id = ?1 AND loop_name = ?2",
                    rusqlite::params![p, n, now],
                )?;
                db::delete_sessions(tx, &p, &n, None, now)?;
                db::log_transition(tx, &p, &n, &t, now)?;
                forge_store::status::touch(tx, &p, &n, now)
            })
        })
        .await
        .map_err(|e| ToolError::internal(e.to_string()))?;
    engine.store.wrote.wake();
    // Still under the loop lock: a restart waits until the worktree is gone (it then
    // reattaches it), never has it removed from under its new runner.
    // A loop another live process runs: that process's runner sees the cancel in the change
    // feed, kills its agent's turn and removes the worktree itself (`Runner::taken_over`);
    // removing it here could pull it from under a turn still running there.
    let owned_elsewhere = owned_elsewhere(engine, &env.project.id, loop_name).await;
    if !owned_elsewhere {
        // Its server died: what its last turn left running is ended here.
        end_orphaned_turns(engine, &env.project.id, loop_name).await;
    }
    if env.config.cleanup_worktree && !owned_elsewhere {
        if let Some(repo) = env.project.repo_root.clone() {
            // Its runner is gone: what its agent wrote is committed here, as a runner's
            // own cancel commits it, before the worktree may go.
            let wt = PathBuf::from(&row.worktree_dir);
            let commit = (cancel_message(&row), row.worktree_branch.clone());
            remove_worktree_logged(engine.data_dir.clone(), repo, wt, Some(commit)).await;
        }
    }
    if !owned_elsewhere {
        // No runner counts it: its last count, as its worktree is kept or was removed
        // (review XC: a loop cancelled after its server died kept none).
        count_ended(engine.store.clone(), row.clone());
    }
    drop(locked);
    Ok(cancelled_result(&row, row.iteration))
}

/// Whether another live server process runs the loop (its recorded owner, which then ends
/// its own agent's turn when it sees a cancel or restart in the change feed).
pub(crate) async fn owned_elsewhere(engine: &Arc<Engine>, project: &str, loop_name: &str) -> bool {
    let (p, n) = (project.to_string(), loop_name.to_string());
    match engine.store.call(move |c| loops::owner_pid(c, &p, &n)).await {
        Ok(Some(pid)) if pid != i64::from(std::process::id()) => owner_serves(engine, pid).await,
        Ok(_) => false,
        // Unreadable: counted as owned elsewhere (nothing is killed or removed under it).
        Err(_) => true,
    }
}

/// Ends what the turns of a loop that no live server runs left running: the recorded turn
/// leaders' process groups (`loop_sessions.agent_process`, `process::kill_orphaned`). A
/// server killed outright (SIGKILL, a crash) takes its agents with it
/// (`host::die_with_server`) but not what they started; without this, a restart would start
/// a new agent beside the old one's processes, and a cancel would leave them running.
/// The records are forgotten afterwards. Called by a cancel or restart that found no runner
/// of this process and no other live server running the loop.
pub(crate) async fn end_orphaned_turns(engine: &Arc<Engine>, project: &str, loop_name: &str) {
    let (p, n) = (project.to_string(), loop_name.to_string());
    let recorded = match engine.store.call(move |c| db::agent_processes(c, &p, &n)).await {
        Ok(r) if r.is_empty() => return,
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(loop_name, "cannot read the loop's recorded agent processes: {e}");
            return;
        }
    };
    let killed = tokio::task::spawn_blocking(move || {
        recorded
            .iter()
            .map(|(session, rec)| match crate::process::Leader::parse(rec) {
                Some(leader) => crate::process::kill_orphaned(&leader, session),
                // A turn claimed whose server died before it recorded its agent: what runs
                // with the session's mark (its agent, if it started) goes.
                None if rec.starts_with(CLAIM_PREFIX) => crate::process::kill_session_marked(session),
                None => 0,
            })
            .sum::<usize>()
    })
    .await
    .unwrap_or(0);
    if killed > 0 {
        tracing::info!(
            loop_name,
            "ended {killed} process(es) that a turn of the loop left running when its server died"
        );
    }
    let (p, n) = (project.to_string(), loop_name.to_string());
    if let Err(e) = engine.store.call(move |c| db::clear_agent_processes(c, &p, &n)).await {
        tracing::warn!(loop_name, "cannot clear the loop's recorded agent processes: {e}");
    }
}

/// Waits until the loop's recorded turns have ended: a restart of a loop another live
/// server runs writes the row, and that server then stops its agent's turn when it sees the
/// change (`loop_sessions.agent_process` is forgotten once the agent is dead). The restart's
/// own first agent starts only after that, so two agents never work in the worktree at
/// once. A server that has not stopped its turn within `bound` (stuck, or gone meanwhile)
/// has it ended here ([`end_orphaned_turns`]). A restart taken over meanwhile by another
/// (the loop's current session is no longer `own`, the restart's) stops waiting at once and
/// ends nothing: the turns recorded now may be the newer restart's own.
pub(crate) async fn await_turns_ended(
    engine: &Arc<Engine>,
    project: &str,
    loop_name: &str,
    own: &str,
    bound: Duration,
) {
    let deadline = tokio::time::Instant::now() + bound;
    // The other server claims each turn before its agent starts, in a transaction that
    // checks the loop is still its own ([`claim_turn`]): after the restart's row, a turn
    // that started is seen. No record is still believed only once seen twice, 150 ms apart,
    // as a margin for a server older than the claims.
    let mut empty_since: Option<tokio::time::Instant> = None;
    loop {
        crate::pause::at("restart.awaiting").await;
        let (p, n) = (project.to_string(), loop_name.to_string());
        let read = engine
            .store
            .call(move |c| {
                let current = loops::get(c, &p, &n)?.map(|r| r.current_session_id);
                Ok::<_, rusqlite::Error>((db::agent_processes(c, &p, &n)?, current))
            })
            .await;
        let read = match read {
            Ok((_, current)) if current.as_deref() != Some(own) => {
                tracing::info!(loop_name, "the restart was taken over by another before its agent started");
                return;
            }
            other => other.map(|(r, _)| r),
        };
        match read {
            Ok(r) if r.is_empty() => {
                let since = *empty_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= SETTLE {
                    return;
                }
            }
            Ok(_) => empty_since = None,
            Err(e) => {
                tracing::warn!(loop_name, "cannot read the loop's recorded agent processes: {e}");
                return;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                loop_name,
                "the server that ran the loop did not stop its agent within {bound:?} of the restart; ending it here"
            );
            end_orphaned_turns(engine, project, loop_name).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long [`await_turns_ended`] must see no recorded turn before it believes it.
const SETTLE: Duration = Duration::from_millis(150);

/// Whether the server process `pid` still serves: one of its registered private sockets
/// (`servers` table) accepts a connection. A process id alone could have been reused; a
/// socket that answers belongs to the live server that registered it.
async fn owner_serves(engine: &Arc<Engine>, pid: i64) -> bool {
    let sockets = engine.store.call(move |c| forge_store::servers::sockets_of_pid(c, pid)).await;
    // Unreadable: counted as serving (the worktree is kept, never removed under an agent).
    let Ok(sockets) = sockets else { return true };
    // Asked without waiting: a stuck owner (a full backlog) counts as serving at once, and
    // only a socket that is gone or refuses connections counts as dead (the one test
    // loop-status and `forge-lsp call` use too).
    sockets.iter().any(|s| !forge_core::paths::socket_is_dead(std::path::Path::new(s)))
}

/// The teardown commit's message: `loop: <name> <label> after <n> iteration(s)`.
fn teardown_message(row: &LoopRow, label: &str) -> String {
    format!(
        "loop: {} {label} after {} iteration{}",
        row.loop_name,
        row.iteration,
        if row.iteration == 1 { "" } else { "s" }
    )
}

/// The teardown commit's message of a cancelled loop.
fn cancel_message(row: &LoopRow) -> String {
    teardown_message(row, "cancelled")
}

/// Removes a loop's worktree and its sandbox shims, but never what it holds that its
/// branch does not: with `commit` (the message and the loop's branch) what is left is
/// committed first, as a teardown does; then the worktree is removed only when
/// [`git::left_behind`] finds nothing. A failed commit, an embedded repository (which a
/// checkpoint never stages) or a status git cannot read keeps it, logged with why; the
/// loop's state does not depend on it (`loop-status` marks a worktree kept where it would
/// have been removed). Returns whether it was removed.
pub(crate) async fn remove_worktree_logged(
    data_dir: PathBuf,
    repo: PathBuf,
    wt: PathBuf,
    commit: Option<(String, Option<String>)>,
) -> bool {
    let removed = tokio::task::spawn_blocking(move || {
        if let Some((message, branch)) = commit.filter(|_| wt.exists()) {
            if let Err(e) = git::checkpoint_on(&wt, branch.as_deref(), &message) {
                return Err((wt, format!("its work could not be committed to the branch ({e})")));
            }
        }
        match git::left_behind(&wt) {
            Ok(left) if left.is_empty() => {}
            Ok(left) => {
                let shown: Vec<&str> = left.iter().take(10).map(String::as_str).collect();
                let more = if left.len() > 10 { format!(" and {} more", left.len() - 10) } else { String::new() };
                return Err((wt, format!("it holds what is not committed to the branch: {}{more}", shown.join(", "))));
            }
            Err(e) => return Err((wt, format!("what it holds cannot be checked ({e})"))),
        }
        if let Err(e) = super::sandbox::remove_shims(&data_dir, &wt) {
            tracing::warn!("cannot remove the sandbox shims of {}: {e}", wt.display());
        }
        git::remove_worktree(&repo, &wt).map_err(|e| (wt, format!("cannot remove it: {e}")))
    })
    .await;
    match removed {
        Ok(Ok(())) => true,
        Ok(Err((wt, why))) => {
            tracing::warn!("worktree {} is kept: {why}", wt.display());
            false
        }
        Err(e) => {
            tracing::warn!("removing a worktree failed: {e}");
            false
        }
    }
}

/// Whether the session a rotation hands the phase to continues a conversation its agent
/// remembers: a resumed standby (`!fresh`), unless its preset CLI never recorded its
/// conversation (`unrecorded`, [`Runner::cli_conversation_unrecorded`]), so that its next
/// turn starts a new one.
fn continues_conversation(fresh: bool, unrecorded: bool) -> bool {
    !fresh && !unrecorded
}

/// The prompt a rotation into phase `to` builds: the follow-up prompts for a session that
/// continues its conversation ([`continues_conversation`]), the full ones otherwise.
fn prompt_kind(to: Phase, advances_section: bool, continues: bool) -> Kind {
    match to {
        Phase::Auditing if continues => Kind::AuditFollowUp,
        Phase::Auditing => Kind::Audit,
        Phase::PostAction => Kind::PostAction,
        Phase::Coding if advances_section => Kind::Initial,
        Phase::Coding if continues => Kind::CoderFollowUp,
        Phase::Coding => Kind::Continuation,
    }
}

/// The prompt of a turn: `prompt`, preceded by the phase prompt when the turn starts a
/// new CLI conversation (`fresh_cli`) and `prompt` is not the phase prompt itself (a
/// nudge, an instruction of task-revive).
fn with_phase_prompt(phase_prompt: &str, prompt: String, fresh_cli: bool) -> String {
    if !fresh_cli || phase_prompt.is_empty() || prompt == phase_prompt || prompt.contains(phase_prompt) {
        return prompt;
    }
    format!("{phase_prompt}\n\n---\n\n{prompt}")
}

#[cfg(test)]
mod tests {
    use super::with_phase_prompt;

    /// A standby resumed by a preset whose CLI never recorded its conversation gets the
    /// full prompt of its phase, as a new session does (a review found the follow-up alone
    /// sent to a CLI conversation that had never seen the task).
    #[test]
    fn a_resumed_standby_without_a_recorded_conversation_gets_the_full_prompt() {
        use super::{continues_conversation, prompt_kind, Kind, Phase};
        // (fresh, unrecorded) → continues
        for (fresh, unrecorded, want) in
            [(true, false, false), (true, true, false), (false, false, true), (false, true, false)]
        {
            assert_eq!(continues_conversation(fresh, unrecorded), want, "{fresh} {unrecorded}");
        }
        // (phase, advances a section, continues) → prompt
        for (to, advances, continues, want) in [
            (Phase::Auditing, false, true, Kind::AuditFollowUp),
            (Phase::Auditing, false, false, Kind::Audit),
            (Phase::Coding, false, true, Kind::CoderFollowUp),
            (Phase::Coding, false, false, Kind::Continuation),
            (Phase::Coding, true, true, Kind::Initial),
            (Phase::Coding, true, false, Kind::Initial),
            (Phase::PostAction, false, true, Kind::PostAction),
            (Phase::PostAction, false, false, Kind::PostAction),
        ] {
            assert_eq!(prompt_kind(to, advances, continues), want, "{to:?} {advances} {continues}");
        }
    }

    #[test]
    fn a_turn_that_starts_a_new_cli_conversation_gets_the_phase_prompt_first() {
        let phase = "# Section 1\nDo the work.";
        let nudge = "Continue where you left off.".to_string();
        // (fresh CLI conversation, prompt, expected)
        let cases: Vec<(bool, String, String)> = vec![
            (false, nudge.clone(), nudge.clone()),
            (true, nudge.clone(), format!("{phase}\n\n---\n\n{nudge}")),
            (true, phase.to_string(), phase.to_string()),
            // Queued messages before the phase prompt: it is there already.
            (true, format!("[queued]\n{phase}"), format!("[queued]\n{phase}")),
        ];
        for (fresh, prompt, want) in cases {
            assert_eq!(with_phase_prompt(phase, prompt.clone(), fresh), want, "{fresh} {prompt:?}");
        }
        assert_eq!(with_phase_prompt("", nudge.clone(), true), nudge);
    }
}
