//! The loop state machine: `phase × event → transition`, as one pure function.
//!
//! A loop lives in one of three persisted phases — `coding`, `auditing`, `post_action` —
//! and moves only when a phase turn ends (through an applied handoff record, an assistant
//! error, a missing handoff) or when something outside the turn happens (cancel, shutdown,
//! stall timeout, a worktree failure, a failed prompt send). The runner gathers the facts
//! (the loop row as [`LoopFacts`], the turn-end situation as an [`Event`]) and
//! [`next_transition`] decides; the runner then persists the result and acts on it.
//!
//! Decisions made here rather than in the runner:
//!
//! * the audit verdict: a sectioned audit is clean when no blocking bug finding remains and
//!   the auditor's record carries a summary; a non-sectioned audit is clean when no finding
//!   remains. The runner counts the findings (from the findings store, never from the
//!   payload) and says whether a summary is present;
//! * the iteration cap, checked by every transition that increments the iteration (section
//!   advance, section retry, dirty non-sectioned audit, audit-error recovery): when
//!   `max_iterations > 0` and the next iteration would exceed it, the loop terminates with
//!   `max_iterations` instead;
//! * the error budget ([`MAX_RETRIES`]) for assistant errors and failed prompt sends;
//! * the failed-turn streaks ([`FailedTurns`]): a phase whose turns fail [`MAX_RETRIES`]
//!   times in a row ends the loop even when the other phase's passes clear the error
//!   budget in between (an auditor that fails every turn would otherwise send the loop
//!   round without bound, each round a real coder turn);
//! * the handoff nudge budget ([`MAX_HANDOFF_NUDGES`]) per phase turn;
//! * post-action best effort: its assistant errors, aborts, missing records and session
//!   failures complete the loop instead of failing it.
//!
//! Every [`Transition`] says which row, if any, goes into the transition log
//! ([`Transition::is_logged`]): `event_type` is the log's event column — the terminate rows
//! carry the reason kind there, as the log invariants require — and `cause` names the exact
//! trigger (`section-clean`, `audit-dirty`, `post-action-complete`, …) for the runner's own
//! bookkeeping and display.
//!
//! Restart is separate from the turn machine: [`restartable`] says whether a stopped loop
//! may be restarted, [`restart`] gives the field resets, and [`restart_failed`] the row
//! to write when the restart prompt cannot be sent.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Handoff nudges (or full-prompt re-sends) a phase turn gets before the next idle ends it.
pub const MAX_HANDOFF_NUDGES: u32 = 3;

/// The error budget: the third consecutive error (assistant error or failed prompt send)
/// terminates the loop with `error_max_retries`.
pub const MAX_RETRIES: u32 = 3;

/// A loop's persisted phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Coding,
    Auditing,
    PostAction,
}

impl Phase {
    /// Every phase, in lifecycle order.
    pub const ALL: [Phase; 3] = [Phase::Coding, Phase::Auditing, Phase::PostAction];

    /// The stored name: `coding`, `auditing` or `post_action`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Coding => "coding",
            Phase::Auditing => "auditing",
            Phase::PostAction => "post_action",
        }
    }

    /// Parses a stored name; anything else (including 0.9.1's `final_auditing` and
    /// `final_audit_fix`, which this project does not have) is `None`.
    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A loop's status column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    #[default]
    Running,
    Completed,
    Cancelled,
    Errored,
    Stalled,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 5] =
        [Status::Running, Status::Completed, Status::Cancelled, Status::Errored, Status::Stalled];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Cancelled => "cancelled",
            Status::Errored => "errored",
            Status::Stalled => "stalled",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the loop has stopped (anything but `running`).
    pub fn is_terminal(self) -> bool {
        self != Status::Running
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a loop stopped. Three reasons carry an optional message and are stored as
/// `kind: message`; the rest are stored as their kind alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TerminationReason {
    /// A clean final audit (or a finished post-action).
    Completed,
    /// `loop-cancel`, a user abort of the coding session, or progress cancellation.
    Cancelled,
    /// The server shut down under a running loop.
    Shutdown,
    /// The watchdog's consecutive-stall limit was reached.
    StallTimeout,
    /// The next iteration would exceed `max_iterations`.
    MaxIterations,
    /// Three nudges passed without a `loop-handoff` record in coding or auditing.
    HandoffMissing,
    /// The worktree directory disappeared under the loop.
    MissingWorktreeDir,
    /// A phase session could not be created.
    SessionCreationFailed,
    /// A force restart of a running loop could not send its prompt.
    RestartPromptFailed,
    /// The error budget ran out.
    ErrorMaxRetries(Option<String>),
    /// The provider refused for quota/auth reasons (no auditor fallback left).
    ProviderLimit(Option<String>),
    /// The worktree reported a failure.
    WorktreeFailed(Option<String>),
}

impl TerminationReason {
    /// The stored kind (without any message).
    pub fn as_str(&self) -> &'static str {
        match self {
            TerminationReason::Completed => "completed",
            TerminationReason::Cancelled => "cancelled",
            TerminationReason::Shutdown => "shutdown",
            TerminationReason::StallTimeout => "stall_timeout",
            TerminationReason::MaxIterations => "max_iterations",
            TerminationReason::HandoffMissing => "handoff_missing",
            TerminationReason::MissingWorktreeDir => "missing_worktree_dir",
            TerminationReason::SessionCreationFailed => "session_creation_failed",
            TerminationReason::RestartPromptFailed => "restart_prompt_failed",
            TerminationReason::ErrorMaxRetries(_) => "error_max_retries",
            TerminationReason::ProviderLimit(_) => "provider_limit",
            TerminationReason::WorktreeFailed(_) => "worktree_failed",
        }
    }

    /// The message of a message-carrying reason.
    pub fn message(&self) -> Option<&str> {
        match self {
            TerminationReason::ErrorMaxRetries(m)
            | TerminationReason::ProviderLimit(m)
            | TerminationReason::WorktreeFailed(m) => m.as_deref(),
            _ => None,
        }
    }

    /// The status a loop ends in for this reason.
    pub fn status(&self) -> Status {
        match self {
            TerminationReason::Completed => Status::Completed,
            TerminationReason::Cancelled | TerminationReason::Shutdown => Status::Cancelled,
            TerminationReason::StallTimeout => Status::Stalled,
            _ => Status::Errored,
        }
    }

    /// The stored form: the kind, or `kind: message` when a message is present.
    pub fn to_stored(&self) -> String {
        match self.message() {
            Some(m) => format!("{}: {m}", self.as_str()),
            None => self.as_str().to_string(),
        }
    }

    /// Parses a stored `termination_reason`: `kind` or `kind: message`.
    ///
    /// A known kind that does not carry messages keeps its kind and drops the text after the
    /// colon. 0.9.1's `user_aborted` reads as `cancelled`. An unknown or empty string reads
    /// as `error_max_retries` with the whole (trimmed) text as its message, so an
    /// unrecognized row still ends up `errored`.
    pub fn parse(stored: &str) -> TerminationReason {
        let text = stored.trim();
        let (kind, message) = match text.split_once(':') {
            Some((k, m)) => (k.trim(), non_blank(m)),
            None => (text, None),
        };
        match kind {
            "completed" => TerminationReason::Completed,
            "cancelled" | "user_aborted" => TerminationReason::Cancelled,
            "shutdown" => TerminationReason::Shutdown,
            "stall_timeout" => TerminationReason::StallTimeout,
            "max_iterations" => TerminationReason::MaxIterations,
            "handoff_missing" => TerminationReason::HandoffMissing,
            "missing_worktree_dir" => TerminationReason::MissingWorktreeDir,
            "session_creation_failed" => TerminationReason::SessionCreationFailed,
            "restart_prompt_failed" => TerminationReason::RestartPromptFailed,
            "error_max_retries" => TerminationReason::ErrorMaxRetries(message),
            "provider_limit" => TerminationReason::ProviderLimit(message),
            "worktree_failed" => TerminationReason::WorktreeFailed(message),
            _ => TerminationReason::ErrorMaxRetries(non_blank(text)),
        }
    }
}

impl fmt::Display for TerminationReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_stored())
    }
}

fn non_blank(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// What a transition does. The first seven kinds are the transition-log kinds; the rest
/// keep the phase and are never logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransitionKind {
    /// Phase switch within the same scope: coding → auditing, or a dirty section audit back
    /// to coding on the same section (the standby session may be resumed).
    Rotate,
    /// A dirty non-sectioned audit back to coding.
    Continue,
    /// A clean section audit: on to the next section's coding, in a fresh session.
    AdvanceSection,
    /// A plain phase change: post_action entry, or a restart that changed the phase.
    Phase,
    /// An audit session failed (error or abort without a record): back to coding.
    ErrorRecovery,
    /// A restart whose prompt could not be sent puts the stopped loop's phase back.
    Rollback,
    /// The loop stops; `termination` says why.
    Terminate,
    /// Same session, short handoff nudge (or, for a clean section audit without a summary,
    /// the summary nudge; the pending record is discarded).
    Nudge,
    /// Same session, the full phase prompt again (the turn produced no reply at all).
    Resend,
    /// A prompt send failed within the error budget: retry the send.
    Retry,
    /// Provider limit on the audit session with a fallback model left: advance the auditor
    /// fallback chain, discard the pending record, abort and re-send the audit prompt.
    AuditorFallback,
    /// Nothing to do (the event does not apply in this phase).
    Noop,
    /// A task control by the loop's owner (cancel, revive or message a session): the phase
    /// and counters stay; logged so the history shows who intervened when.
    Control,
}

impl TransitionKind {
    /// Every kind.
    pub const ALL: [TransitionKind; 13] = [
        TransitionKind::Rotate,
        TransitionKind::Continue,
        TransitionKind::AdvanceSection,
        TransitionKind::Phase,
        TransitionKind::ErrorRecovery,
        TransitionKind::Rollback,
        TransitionKind::Terminate,
        TransitionKind::Nudge,
        TransitionKind::Resend,
        TransitionKind::Retry,
        TransitionKind::AuditorFallback,
        TransitionKind::Noop,
        TransitionKind::Control,
    ];

    /// The stored name (`transition_kind` column).
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionKind::Rotate => "rotate",
            TransitionKind::Continue => "continue",
            TransitionKind::AdvanceSection => "advance-section",
            TransitionKind::Phase => "phase",
            TransitionKind::ErrorRecovery => "error-recovery",
            TransitionKind::Rollback => "rollback",
            TransitionKind::Terminate => "terminate",
            TransitionKind::Nudge => "nudge",
            TransitionKind::Resend => "resend",
            TransitionKind::Retry => "retry",
            TransitionKind::AuditorFallback => "auditor-fallback",
            TransitionKind::Noop => "noop",
            TransitionKind::Control => "control",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<TransitionKind> {
        TransitionKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether a transition of this kind writes a `loop_transitions` row.
    pub fn is_logged(self) -> bool {
        matches!(
            self,
            TransitionKind::Rotate
                | TransitionKind::Continue
                | TransitionKind::AdvanceSection
                | TransitionKind::Phase
                | TransitionKind::ErrorRecovery
                | TransitionKind::Rollback
                | TransitionKind::Terminate
                | TransitionKind::Control
        )
    }
}

impl fmt::Display for TransitionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The loop row's facts the machine decides on. The runner reads them fresh (in particular
/// `total_sections`, which a plan amendment may have grown) before each decision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoopFacts {
    pub phase: Phase,
    /// Current iteration, starting at 1.
    pub iteration: u32,
    /// Iteration cap; 0 = unlimited.
    pub max_iterations: u32,
    /// Current section (0-based); `None` for a non-sectioned plan loop.
    pub section_index: Option<u32>,
    /// Number of sections; 0 for a non-sectioned plan loop.
    pub total_sections: u32,
    /// Audits applied so far.
    pub audit_count: u32,
    /// Consecutive errors so far (the error budget spent).
    pub error_count: u32,
    /// Failed turns in a row, per phase.
    pub failed_turns: FailedTurns,
    /// `loop.postAction.enabled` with a non-empty skill or prompt.
    pub post_action_configured: bool,
}

/// Turns of each phase that failed in a row: an assistant error in coding or auditing, or
/// an auditor session aborted by a signal forge-lsp did not send. The other phase's turns
/// in between do not break a streak; only a turn of the same phase that ends in its
/// handoff does. The error budget (`error_count`) is cleared by every clean pass, as the
/// seeds say, so it alone never stops a phase that fails on every turn while the other
/// succeeds: the seeds' "3 consecutive errors in either phase" is this streak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailedTurns {
    pub coding: u32,
    pub auditing: u32,
}

impl FailedTurns {
    /// The streak of `phase` (post-action turns are best effort and never counted).
    pub fn of(self, phase: Phase) -> u32 {
        match phase {
            Phase::Coding => self.coding,
            Phase::Auditing => self.auditing,
            Phase::PostAction => 0,
        }
    }

    /// These streaks with `phase`'s set to `n`.
    pub fn with(self, phase: Phase, n: u32) -> FailedTurns {
        match phase {
            Phase::Coding => FailedTurns { coding: n, ..self },
            Phase::Auditing => FailedTurns { auditing: n, ..self },
            Phase::PostAction => self,
        }
    }
}

impl LoopFacts {
    /// A loop is sectioned when it has a current section and at least one section.
    pub fn is_sectioned(&self) -> bool {
        self.section_index.is_some() && self.total_sections > 0
    }

    /// Whether no section is left after the current one (always true when non-sectioned).
    pub fn is_last_section(&self) -> bool {
        match self.section_index {
            Some(i) => i.saturating_add(1) >= self.total_sections,
            None => true,
        }
    }

    /// Whether incrementing the iteration would exceed the cap.
    pub fn iteration_cap_reached(&self) -> bool {
        self.max_iterations > 0 && self.iteration.saturating_add(1) > self.max_iterations
    }
}

/// Something that happened at a turn end or from outside the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Coding turn ended with an applied coder record.
    CoderHandoff,
    /// Auditing turn ended with an auditor record. `blocking_findings` is the count from the
    /// findings store: blocking bug findings (current section, earlier sections,
    /// cross-section) for a sectioned loop, open findings of any severity otherwise.
    /// `nudges_sent` is this turn's nudges so far (a clean section audit without a summary
    /// is nudged, and that uses the turn's nudge budget).
    AuditorHandoff { blocking_findings: u32, has_summary: bool, nudges_sent: u32 },
    /// Post-action turn ended with an applied `loop-complete` record.
    PostActionComplete,
    /// The turn went idle with no record for this role. `replied` is false when the last
    /// message is not an assistant reply (role none or user). `nudges_sent` counts the
    /// nudges and full-prompt re-sends already spent in this turn.
    NoHandoff { replied: bool, nudges_sent: u32 },
    /// The nudge budget is known to be spent (same as `NoHandoff` at the budget).
    HandoffMissing,
    /// The turn ended on a persisted assistant error that is not a provider limit.
    /// `model_error` marks the model as failed.
    AssistantError { message: String, model_error: bool },
    /// The phase session was aborted by someone other than Forge, with no record to apply.
    SessionAborted,
    /// Sending a prompt failed (not a provider limit). `context` describes the send.
    PromptFailed { context: String },
    /// A provider limit (quota/auth) was detected on the current phase session or a send.
    ProviderLimit { message: String, fallback_available: bool },
    /// The error budget was exhausted elsewhere.
    ErrorMaxRetries { message: String },
    /// The iteration cap was found reached elsewhere.
    IterationCapReached,
    /// The watchdog reached its consecutive-stall limit.
    StallTimeout,
    /// `loop-cancel`, `/loop-cancel` or a cancelled progress.
    Cancel,
    /// The server is shutting down.
    Shutdown,
    /// The worktree reported a failure.
    WorktreeFailed { message: String },
    /// The worktree directory is gone.
    MissingWorktreeDir,
    /// The next phase session could not be created.
    SessionCreationFailed,
    /// Task control (`forge.task-cancel`): the owner stopped the running turn of a loop
    /// session; the session is kept and the loop waits for a revive.
    TaskCancel,
    /// Task control (`forge.task-revive`): the owner resumed a session with an instruction.
    TaskRevive,
    /// Task control (`forge.task-message`): the owner queued a message into a session's
    /// next turn.
    TaskMessage,
}

impl Event {
    /// A short kebab-case name for logs and noop transitions.
    pub fn name(&self) -> &'static str {
        match self {
            Event::CoderHandoff => "coder-handoff",
            Event::AuditorHandoff { .. } => "auditor-handoff",
            Event::PostActionComplete => "post-action-complete",
            Event::NoHandoff { .. } => "no-handoff",
            Event::HandoffMissing => "handoff-missing",
            Event::AssistantError { .. } => "assistant-error",
            Event::SessionAborted => "session-aborted",
            Event::PromptFailed { .. } => "prompt-failed",
            Event::ProviderLimit { .. } => "provider-limit",
            Event::ErrorMaxRetries { .. } => "error-max-retries",
            Event::IterationCapReached => "iteration-cap",
            Event::StallTimeout => "stall-timeout",
            Event::Cancel => "cancel",
            Event::Shutdown => "shutdown",
            Event::WorktreeFailed { .. } => "worktree-failed",
            Event::MissingWorktreeDir => "missing-worktree-dir",
            Event::SessionCreationFailed => "session-creation-failed",
            Event::TaskCancel => "task-cancel",
            Event::TaskRevive => "task-revive",
            Event::TaskMessage => "task-message",
        }
    }
}

/// The decision for one event. Counters are the values to persist afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub kind: TransitionKind,
    /// The `loop_transitions.event_type` value: the reason kind for terminate rows, else
    /// `coder-handoff`, `auditor-handoff`, `coder-error`, `audit-error`,
    /// `audit-session-aborted`, `restart`, … (non-logged kinds repeat `cause`).
    pub event_type: &'static str,
    /// The exact trigger: `coder-handoff`, `coder-error`, `section-clean`,
    /// `section-dirty`, `audit-clear`, `audit-dirty`, `summary-missing`, `audit-error`,
    /// `audit-session-aborted`, `post-action-complete`, `post-action-error`,
    /// `post-action-aborted`, `no-handoff`, `handoff-missing`, `prompt-failed`,
    /// `provider-limit`, `restart`, or the event name for external terminators and noops.
    pub cause: &'static str,
    pub from: Phase,
    /// The phase afterwards; `None` when the loop terminates.
    pub to: Option<Phase>,
    pub termination: Option<TerminationReason>,
    /// Iteration for the log row (the pre-transition value; 1 for a restart row).
    pub iteration: u32,
    /// Section for the log row (pre-transition; `None` when non-sectioned).
    pub section: Option<u32>,
    pub iteration_after: u32,
    pub section_after: Option<u32>,
    pub audit_count_after: u32,
    pub error_count_after: u32,
    pub failed_turns_after: FailedTurns,
    /// `Some(true)`: mark the model failed; `Some(false)`: clear the mark; `None`: keep.
    pub model_failed: Option<bool>,
    /// What happened, for the log row's `reason` when the transition ends nothing: an
    /// assistant error's message (before, only its count was kept: a review).
    pub detail: Option<String>,
}

impl Transition {
    /// Whether this transition writes a `loop_transitions` row.
    pub fn is_logged(&self) -> bool {
        self.kind.is_logged()
    }

    /// The loop status afterwards, for terminate transitions.
    pub fn status(&self) -> Option<Status> {
        self.termination.as_ref().map(TerminationReason::status)
    }

    /// Whether the phase changes (terminations count as a change).
    pub fn changes_phase(&self) -> bool {
        self.to != Some(self.from)
    }
}

/// A transition that keeps everything as it is; the builders below adjust it.
fn stay(facts: &LoopFacts, kind: TransitionKind, cause: &'static str) -> Transition {
    Transition {
        kind,
        event_type: cause,
        cause,
        from: facts.phase,
        to: Some(facts.phase),
        termination: None,
        iteration: facts.iteration,
        section: section_for_log(facts),
        iteration_after: facts.iteration,
        section_after: facts.section_index,
        audit_count_after: facts.audit_count,
        error_count_after: facts.error_count,
        failed_turns_after: facts.failed_turns,
        model_failed: None,
        detail: None,
    }
}

fn section_for_log(facts: &LoopFacts) -> Option<u32> {
    if facts.is_sectioned() {
        facts.section_index
    } else {
        None
    }
}

/// A phase-changing transition.
fn go(facts: &LoopFacts, kind: TransitionKind, event_type: &'static str, cause: &'static str, to: Phase) -> Transition {
    Transition { event_type, to: Some(to), ..stay(facts, kind, cause) }
}

/// A terminate transition; its log event type is the reason kind.
fn terminate(facts: &LoopFacts, reason: TerminationReason, cause: &'static str) -> Transition {
    Transition {
        event_type: reason.as_str(),
        to: None,
        termination: Some(reason),
        ..stay(facts, TransitionKind::Terminate, cause)
    }
}

/// An assistant error's message as a transition row keeps it: trimmed, at most 500 bytes.
fn error_detail(message: &str) -> String {
    // One line: the history shows the reason inline (a review: an agent's multi-line
    // error broke it, and could start a heading).
    let one_line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let m = one_line.as_str();
    if m.len() <= 500 {
        return format!("assistant error: {m}");
    }
    let mut end = 500;
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    format!("assistant error: {}…", &m[..end])
}

/// Applies the iteration increment of `t`, or turns it into a `max_iterations` termination
/// (keeping its counters and its section: a clean section audit that hits the cap has
/// completed its section, so a restart resumes at the next one) when the cap would be
/// exceeded.
fn next_iteration(facts: &LoopFacts, t: Transition) -> Transition {
    if facts.iteration_cap_reached() {
        return Transition {
            audit_count_after: t.audit_count_after,
            error_count_after: t.error_count_after,
            failed_turns_after: t.failed_turns_after,
            model_failed: t.model_failed,
            section_after: t.section_after,
            ..terminate(facts, TerminationReason::MaxIterations, t.cause)
        };
    }
    Transition { iteration_after: facts.iteration.saturating_add(1), ..t }
}

/// A successful pass: the error budget and the model-failed mark are cleared.
fn clean_pass(t: Transition) -> Transition {
    Transition { error_count_after: 0, model_failed: Some(false), ..t }
}

/// Decides what `event` does to a loop described by `facts`. Total: every phase × event
/// pair yields a transition (a `Noop` when the event does not apply in that phase).
pub fn next_transition(facts: &LoopFacts, event: &Event) -> Transition {
    use Phase::*;
    use TransitionKind as K;
    let phase = facts.phase;
    match event {
        Event::CoderHandoff => match phase {
            Coding => Transition {
                failed_turns_after: facts.failed_turns.with(Coding, 0),
                ..clean_pass(go(facts, K::Rotate, "coder-handoff", "coder-handoff", Auditing))
            },
            Auditing | PostAction => stay(facts, K::Noop, event.name()),
        },

        Event::AuditorHandoff { blocking_findings, has_summary, nudges_sent } => match phase {
            Auditing => auditor_handoff(facts, *blocking_findings, *has_summary, *nudges_sent),
            Coding | PostAction => stay(facts, K::Noop, event.name()),
        },

        Event::PostActionComplete => match phase {
            PostAction => terminate(facts, TerminationReason::Completed, "post-action-complete"),
            Coding | Auditing => stay(facts, K::Noop, event.name()),
        },

        Event::NoHandoff { replied, nudges_sent } => {
            if *nudges_sent >= MAX_HANDOFF_NUDGES {
                handoff_missing(facts)
            } else {
                let kind = if *replied { K::Nudge } else { K::Resend };
                stay(facts, kind, "no-handoff")
            }
        }

        Event::HandoffMissing => handoff_missing(facts),

        Event::AssistantError { message, model_error } => match phase {
            // Post-action is best effort: the runner applies any pending record, and the
            // loop completes either way.
            PostAction => terminate(facts, TerminationReason::Completed, "post-action-error"),
            Coding | Auditing => {
                let cause = if phase == Coding { "coder-error" } else { "audit-error" };
                let errors = facts.error_count.saturating_add(1);
                let failed = facts.failed_turns.of(phase).saturating_add(1);
                let failed_turns_after = facts.failed_turns.with(phase, failed);
                let marked = model_error.then_some(true);
                if errors >= MAX_RETRIES || failed >= MAX_RETRIES {
                    let message = format!("assistant error: {}", message.trim());
                    let message = if errors >= MAX_RETRIES { message } else { streak_message(phase, failed, &message) };
                    return Transition {
                        error_count_after: errors,
                        failed_turns_after,
                        model_failed: marked,
                        ..terminate(facts, TerminationReason::ErrorMaxRetries(Some(message)), cause)
                    };
                }
                let t = if phase == Coding {
                    // An errored coding turn still goes to audit, with no decisions.
                    go(facts, K::Rotate, cause, cause, Auditing)
                } else {
                    // The audit is not counted; back to coding on the next iteration.
                    go(facts, K::ErrorRecovery, cause, cause, Coding)
                };
                let t = Transition {
                    error_count_after: errors,
                    failed_turns_after,
                    model_failed: marked,
                    detail: Some(error_detail(message)),
                    ..t
                };
                if phase == Auditing {
                    next_iteration(facts, t)
                } else {
                    t
                }
            }
        },

        Event::SessionAborted => match phase {
            Coding => terminate(facts, TerminationReason::Cancelled, "coder-session-aborted"),
            Auditing => {
                let failed = facts.failed_turns.auditing.saturating_add(1);
                let failed_turns_after = facts.failed_turns.with(Auditing, failed);
                if failed >= MAX_RETRIES {
                    let message = streak_message(Auditing, failed, "the auditor's session was aborted");
                    return Transition {
                        failed_turns_after,
                        ..terminate(facts, TerminationReason::ErrorMaxRetries(Some(message)), "audit-session-aborted")
                    };
                }
                let t = go(facts, K::ErrorRecovery, "audit-session-aborted", "audit-session-aborted", Coding);
                next_iteration(facts, Transition { failed_turns_after, ..t })
            }
            PostAction => terminate(facts, TerminationReason::Completed, "post-action-aborted"),
        },

        Event::PromptFailed { context } => {
            let errors = facts.error_count.saturating_add(1);
            let t = if errors >= MAX_RETRIES {
                terminate(facts, TerminationReason::ErrorMaxRetries(non_blank(context)), "prompt-failed")
            } else {
                stay(facts, K::Retry, "prompt-failed")
            };
            Transition { error_count_after: errors, ..t }
        }

        Event::ProviderLimit { message, fallback_available } => {
            if phase == Auditing && *fallback_available {
                stay(facts, K::AuditorFallback, "provider-limit")
            } else {
                terminate(facts, TerminationReason::ProviderLimit(non_blank(message)), "provider-limit")
            }
        }

        Event::ErrorMaxRetries { message } => {
            terminate(facts, TerminationReason::ErrorMaxRetries(non_blank(message)), event.name())
        }
        Event::IterationCapReached => terminate(facts, TerminationReason::MaxIterations, event.name()),
        Event::StallTimeout => terminate(facts, TerminationReason::StallTimeout, event.name()),
        Event::Cancel => terminate(facts, TerminationReason::Cancelled, event.name()),
        Event::Shutdown => terminate(facts, TerminationReason::Shutdown, event.name()),
        Event::WorktreeFailed { message } => {
            terminate(facts, TerminationReason::WorktreeFailed(non_blank(message)), event.name())
        }
        Event::MissingWorktreeDir => terminate(facts, TerminationReason::MissingWorktreeDir, event.name()),
        Event::SessionCreationFailed => match phase {
            // A post-action session that cannot be created completes the loop, no retry.
            PostAction => terminate(facts, TerminationReason::Completed, event.name()),
            Coding | Auditing => terminate(facts, TerminationReason::SessionCreationFailed, event.name()),
        },

        // Task controls change no phase or counter; they are logged (kind `control`).
        Event::TaskCancel | Event::TaskRevive | Event::TaskMessage => stay(facts, K::Control, event.name()),
    }
}

/// The termination message when `phase`'s failed-turn streak reached `failed`; `last`
/// says how the last turn failed.
fn streak_message(phase: Phase, failed: u32, last: &str) -> String {
    let turns = if phase == Phase::Coding { "coding turns" } else { "audit turns" };
    format!("{failed} {turns} in a row failed; the last: {last}")
}

/// The turn's nudge budget is spent: coding and auditing fail, post-action completes.
fn handoff_missing(facts: &LoopFacts) -> Transition {
    let reason = match facts.phase {
        Phase::PostAction => TerminationReason::Completed,
        Phase::Coding | Phase::Auditing => TerminationReason::HandoffMissing,
    };
    terminate(facts, reason, "handoff-missing")
}

/// An applied auditor record in the auditing phase.
fn auditor_handoff(facts: &LoopFacts, blocking_findings: u32, has_summary: bool, nudges_sent: u32) -> Transition {
    use TransitionKind as K;
    const EVENT: &str = "auditor-handoff";
    let clean = blocking_findings == 0;

    if facts.is_sectioned() && clean && !has_summary {
        // The record is discarded and the auditor asked for the summary; the audit is
        // not counted. This spends the turn's nudge budget like a missing handoff.
        if nudges_sent >= MAX_HANDOFF_NUDGES {
            return terminate(facts, TerminationReason::HandoffMissing, "summary-missing");
        }
        return stay(facts, K::Nudge, "summary-missing");
    }

    let counted = |t: Transition| {
        clean_pass(Transition {
            audit_count_after: facts.audit_count.saturating_add(1),
            failed_turns_after: facts.failed_turns.with(Phase::Auditing, 0),
            ..t
        })
    };
    let (clean_cause, dirty_cause) =
        if facts.is_sectioned() { ("section-clean", "section-dirty") } else { ("audit-clear", "audit-dirty") };

    if !clean {
        let kind = if facts.is_sectioned() { K::Rotate } else { K::Continue };
        return next_iteration(facts, counted(go(facts, kind, EVENT, dirty_cause, Phase::Coding)));
    }

    if facts.is_sectioned() && !facts.is_last_section() {
        let next = facts.section_index.map(|i| i.saturating_add(1));
        let t = counted(go(facts, K::AdvanceSection, EVENT, clean_cause, Phase::Coding));
        // A finished section is progress: the next starts with no failed turns.
        let t = Transition { failed_turns_after: FailedTurns::default(), ..t };
        return next_iteration(facts, Transition { section_after: next, ..t });
    }

    // No section left open: the loop's work is done (and no failed turn counts any more).
    let done = if facts.post_action_configured {
        counted(go(facts, K::Phase, EVENT, clean_cause, Phase::PostAction))
    } else {
        counted(terminate(facts, TerminationReason::Completed, clean_cause))
    };
    Transition { failed_turns_after: FailedTurns::default(), ..done }
}

/// Whether a stopped (or running) loop may be restarted. `Err` carries a sentence the
/// caller prefixes with the loop's name. A running loop is restartable; requiring `force`
/// for it is the caller's rule.
pub fn restartable(
    status: Status,
    worktree_dir: &str,
    worktree_exists: bool,
    branch_exists: bool,
) -> Result<(), String> {
    if status == Status::Completed {
        return Err("the loop completed successfully and cannot be restarted; \
                    completed loops are history only."
            .to_string());
    }
    if !worktree_exists && !branch_exists {
        // Forge's words (FORGE-REFERENCE §4.10).
        return Err(format!("worktree directory no longer exists at {worktree_dir} and its branch is gone."));
    }
    Ok(())
}

/// The prompt a restarted loop starts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RestartPrompt {
    /// The current section's initial prompt.
    SectionInitial,
    /// The section continuation prompt, with the current section's bug findings in full.
    SectionContinuation,
    /// A non-sectioned plan loop's initial prompt (plan text + coder handoff instruction).
    PlanInitial,
    /// The post-action prompt.
    PostAction,
}

/// The loop-row changes a restart makes. Everything not listed (identity, plan, worktree
/// path, section rows and progress, findings, sandbox settings, base commit, transition
/// history) is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartPlan {
    /// `auditing` restarts as `coding`; `coding` and an enabled `post_action` are kept.
    pub phase: Phase,
    /// Always 1.
    pub iteration: u32,
    /// Error budget cleared.
    pub error_count: u32,
    /// Both streaks cleared.
    pub failed_turns: FailedTurns,
    pub audit_count: u32,
    pub model_failed: bool,
    pub auditor_fallback_index: u32,
    /// Kept.
    pub section_index: Option<u32>,
    /// Kept.
    pub total_sections: u32,
    /// A restart always starts in a fresh session.
    pub fresh_session: bool,
    /// Any standby session is released and deleted.
    pub drop_standby: bool,
    /// The pending handoff (if any) is marked discarded.
    pub discard_pending_handoff: bool,
    /// The loop stopped in `post_action` but post-action is no longer configured: nothing
    /// is left to run, so the loop is marked completed instead (see `transition`).
    pub finish_instead: bool,
    /// The log row to write: a `phase`/`restart` row when the phase changed, the
    /// terminate row when `finish_instead`, else `None`.
    pub transition: Option<Transition>,
}

impl RestartPlan {
    /// Which prompt the restarted session receives. `current_section_bugs` is the number of
    /// open bug findings attributed to the current section.
    pub fn prompt(&self, current_section_bugs: u32) -> RestartPrompt {
        match self.phase {
            Phase::PostAction => RestartPrompt::PostAction,
            Phase::Coding | Phase::Auditing => {
                if self.section_index.is_none() || self.total_sections == 0 {
                    RestartPrompt::PlanInitial
                } else if current_section_bugs > 0 {
                    RestartPrompt::SectionContinuation
                } else {
                    RestartPrompt::SectionInitial
                }
            }
        }
    }
}

/// The restart resets for a loop described by `facts` (its stored row and the current
/// post-action configuration).
pub fn restart(facts: &LoopFacts) -> RestartPlan {
    let (phase, finish_instead) = match facts.phase {
        Phase::Coding | Phase::Auditing => (Phase::Coding, false),
        Phase::PostAction => (Phase::PostAction, !facts.post_action_configured),
    };
    let transition = if finish_instead {
        Some(terminate(facts, TerminationReason::Completed, "restart"))
    } else if phase != facts.phase {
        Some(Transition {
            iteration: 1,
            iteration_after: 1,
            error_count_after: 0,
            audit_count_after: 0,
            failed_turns_after: FailedTurns::default(),
            model_failed: Some(false),
            ..go(facts, TransitionKind::Phase, "restart", "restart", phase)
        })
    } else {
        None
    };
    RestartPlan {
        phase,
        iteration: 1,
        error_count: 0,
        failed_turns: FailedTurns::default(),
        audit_count: 0,
        model_failed: false,
        auditor_fallback_index: 0,
        section_index: facts.section_index,
        total_sections: facts.total_sections,
        fresh_session: true,
        drop_standby: true,
        discard_pending_handoff: true,
        finish_instead,
        transition,
    }
}

/// The restart prompt could not be sent (not a provider limit, which is an ordinary
/// `ProviderLimit` event). `previous` is the row before the restart. A force-restarted
/// running loop terminates `errored` with `restart_prompt_failed`; a stopped loop is put
/// back unchanged, with a `rollback` row when the restart had changed its phase, and a
/// `Noop` otherwise.
pub fn restart_failed(previous: &LoopFacts, plan: &RestartPlan, was_running: bool) -> Transition {
    let restarted = LoopFacts {
        phase: plan.phase,
        iteration: plan.iteration,
        error_count: plan.error_count,
        failed_turns: plan.failed_turns,
        audit_count: plan.audit_count,
        ..previous.clone()
    };
    if was_running {
        return terminate(&restarted, TerminationReason::RestartPromptFailed, "restart-prompt-failed");
    }
    if plan.phase != previous.phase {
        return Transition {
            iteration_after: previous.iteration,
            audit_count_after: previous.audit_count,
            error_count_after: previous.error_count,
            failed_turns_after: previous.failed_turns,
            ..go(&restarted, TransitionKind::Rollback, "restart_prompt_failed", "restart-prompt-failed", previous.phase)
        };
    }
    stay(previous, TransitionKind::Noop, "restart-prompt-failed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use TransitionKind as K;

    fn facts(phase: Phase) -> LoopFacts {
        LoopFacts {
            phase,
            iteration: 2,
            max_iterations: 0,
            section_index: Some(1),
            total_sections: 3,
            audit_count: 4,
            error_count: 1,
            failed_turns: FailedTurns::default(),
            post_action_configured: false,
        }
    }

    fn unsectioned(phase: Phase) -> LoopFacts {
        LoopFacts { section_index: None, total_sections: 0, ..facts(phase) }
    }

    fn audit(blocking: u32, summary: bool) -> Event {
        Event::AuditorHandoff { blocking_findings: blocking, has_summary: summary, nudges_sent: 0 }
    }

    fn err(model: bool) -> Event {
        Event::AssistantError { message: " boom ".into(), model_error: model }
    }

    /// One sample of every event.
    fn all_events() -> Vec<Event> {
        vec![
            Event::CoderHandoff,
            audit(0, true),
            Event::PostActionComplete,
            Event::NoHandoff { replied: true, nudges_sent: 0 },
            Event::HandoffMissing,
            err(false),
            Event::SessionAborted,
            Event::PromptFailed { context: "send".into() },
            Event::ProviderLimit { message: "quota exceeded".into(), fallback_available: false },
            Event::ErrorMaxRetries { message: "x".into() },
            Event::IterationCapReached,
            Event::StallTimeout,
            Event::Cancel,
            Event::Shutdown,
            Event::WorktreeFailed { message: "gone".into() },
            Event::MissingWorktreeDir,
            Event::SessionCreationFailed,
            Event::TaskCancel,
            Event::TaskRevive,
            Event::TaskMessage,
        ]
    }

    /// Expected (kind, to, termination kind) for every phase × event sample, with a
    /// sectioned middle section, no cap, no post-action.
    fn expected(phase: Phase, event: &Event) -> (TransitionKind, Option<Phase>, Option<&'static str>) {
        use Phase::*;
        let term = |r: &'static str| (K::Terminate, None, Some(r));
        match (phase, event) {
            (Coding, Event::CoderHandoff) => (K::Rotate, Some(Auditing), None),
            (_, Event::CoderHandoff) => (K::Noop, Some(phase), None),
            (Auditing, Event::AuditorHandoff { .. }) => (K::AdvanceSection, Some(Coding), None),
            (_, Event::AuditorHandoff { .. }) => (K::Noop, Some(phase), None),
            (PostAction, Event::PostActionComplete) => term("completed"),
            (_, Event::PostActionComplete) => (K::Noop, Some(phase), None),
            (_, Event::NoHandoff { .. }) => (K::Nudge, Some(phase), None),
            (PostAction, Event::HandoffMissing) => term("completed"),
            (_, Event::HandoffMissing) => term("handoff_missing"),
            (Coding, Event::AssistantError { .. }) => (K::Rotate, Some(Auditing), None),
            (Auditing, Event::AssistantError { .. }) => (K::ErrorRecovery, Some(Coding), None),
            (PostAction, Event::AssistantError { .. }) => term("completed"),
            (Coding, Event::SessionAborted) => term("cancelled"),
            (Auditing, Event::SessionAborted) => (K::ErrorRecovery, Some(Coding), None),
            (PostAction, Event::SessionAborted) => term("completed"),
            (_, Event::PromptFailed { .. }) => (K::Retry, Some(phase), None),
            (_, Event::ProviderLimit { .. }) => term("provider_limit"),
            (_, Event::ErrorMaxRetries { .. }) => term("error_max_retries"),
            (_, Event::IterationCapReached) => term("max_iterations"),
            (_, Event::StallTimeout) => term("stall_timeout"),
            (_, Event::Cancel) => term("cancelled"),
            (_, Event::Shutdown) => term("shutdown"),
            (_, Event::WorktreeFailed { .. }) => term("worktree_failed"),
            (_, Event::MissingWorktreeDir) => term("missing_worktree_dir"),
            (PostAction, Event::SessionCreationFailed) => term("completed"),
            (_, Event::SessionCreationFailed) => term("session_creation_failed"),
            (_, Event::TaskCancel | Event::TaskRevive | Event::TaskMessage) => (K::Control, Some(phase), None),
        }
    }

    #[test]
    fn every_phase_event_pair() {
        let mut pairs = 0;
        for phase in Phase::ALL {
            for event in all_events() {
                let f = facts(phase);
                let t = next_transition(&f, &event);
                let (kind, to, term) = expected(phase, &event);
                assert_eq!(t.kind, kind, "{phase} × {event:?}");
                assert_eq!(t.to, to, "{phase} × {event:?}");
                assert_eq!(t.termination.as_ref().map(TerminationReason::as_str), term, "{phase} × {event:?}");
                assert_eq!(t.from, phase);
                if t.kind == K::Terminate {
                    assert_eq!(t.event_type, t.termination.as_ref().unwrap().as_str());
                    assert!(t.is_logged());
                }
                if t.kind == K::Noop {
                    assert_eq!(t.iteration_after, f.iteration);
                    assert_eq!(t.section_after, f.section_index);
                    assert_eq!(t.audit_count_after, f.audit_count);
                    assert_eq!(t.error_count_after, f.error_count);
                    assert!(!t.is_logged());
                }
                pairs += 1;
            }
        }
        assert_eq!(pairs, 3 * 20);
    }

    #[test]
    fn coder_handoff_rotates_to_audit_without_iteration() {
        let t = next_transition(&facts(Phase::Coding), &Event::CoderHandoff);
        assert_eq!(t.event_type, "coder-handoff");
        assert_eq!(t.cause, "coder-handoff");
        assert_eq!(t.iteration_after, 2);
        assert_eq!(t.section_after, Some(1));
        assert_eq!(t.error_count_after, 0);
        assert_eq!(t.model_failed, Some(false));
        assert_eq!(t.audit_count_after, 4);
        assert!(t.is_logged());
    }

    #[test]
    fn section_clean_advances() {
        let t = next_transition(&facts(Phase::Auditing), &audit(0, true));
        assert_eq!(t.kind, K::AdvanceSection);
        assert_eq!(t.event_type, "auditor-handoff");
        assert_eq!(t.cause, "section-clean");
        assert_eq!(t.iteration, 2);
        assert_eq!(t.iteration_after, 3);
        assert_eq!(t.section, Some(1));
        assert_eq!(t.section_after, Some(2));
        assert_eq!(t.audit_count_after, 5);
        assert_eq!(t.error_count_after, 0);
    }

    #[test]
    fn section_dirty_retries_same_section() {
        let t = next_transition(&facts(Phase::Auditing), &audit(2, false));
        assert_eq!(t.kind, K::Rotate);
        assert_eq!(t.to, Some(Phase::Coding));
        assert_eq!(t.cause, "section-dirty");
        assert_eq!(t.event_type, "auditor-handoff");
        assert_eq!(t.iteration_after, 3);
        assert_eq!(t.section_after, Some(1));
        assert_eq!(t.audit_count_after, 5);
    }

    #[test]
    fn last_section_clean_completes_or_enters_post_action() {
        let last = LoopFacts { section_index: Some(2), ..facts(Phase::Auditing) };
        let t = next_transition(&last, &audit(0, true));
        assert_eq!(t.kind, K::Terminate);
        assert_eq!(t.termination, Some(TerminationReason::Completed));
        assert_eq!(t.status(), Some(Status::Completed));
        assert_eq!(t.cause, "section-clean");
        assert_eq!(t.event_type, "completed");
        assert_eq!(t.audit_count_after, 5);

        let with_post = LoopFacts { post_action_configured: true, ..last.clone() };
        let t = next_transition(&with_post, &audit(0, true));
        assert_eq!(t.kind, K::Phase);
        assert_eq!(t.to, Some(Phase::PostAction));
        assert_eq!(t.event_type, "auditor-handoff");
        assert_eq!(t.cause, "section-clean");
        assert_eq!(t.iteration_after, 2, "post_action entry keeps the iteration");
        assert_eq!(t.section_after, Some(2));

        // A plan amendment that appended sections makes the same index no longer last.
        let grown = LoopFacts { total_sections: 5, ..last };
        assert_eq!(next_transition(&grown, &audit(0, true)).kind, K::AdvanceSection);
    }

    #[test]
    fn last_section_clean_is_not_capped() {
        let last = LoopFacts { section_index: Some(2), iteration: 5, max_iterations: 5, ..facts(Phase::Auditing) };
        let t = next_transition(&last, &audit(0, true));
        assert_eq!(t.termination, Some(TerminationReason::Completed));
    }

    #[test]
    fn clean_section_without_summary_nudges_then_fails() {
        let f = facts(Phase::Auditing);
        let t = next_transition(&f, &audit(0, false));
        assert_eq!(t.kind, K::Nudge);
        assert_eq!(t.cause, "summary-missing");
        assert_eq!(t.to, Some(Phase::Auditing));
        assert_eq!(t.audit_count_after, 4, "a discarded record is not an audit");
        assert!(!t.is_logged());
        let t = next_transition(
            &f,
            &Event::AuditorHandoff { blocking_findings: 0, has_summary: false, nudges_sent: MAX_HANDOFF_NUDGES },
        );
        assert_eq!(t.termination, Some(TerminationReason::HandoffMissing));
        assert_eq!(t.status(), Some(Status::Errored));
    }

    #[test]
    fn non_sectioned_audits() {
        let f = unsectioned(Phase::Auditing);
        let t = next_transition(&f, &audit(0, false));
        assert_eq!(t.termination, Some(TerminationReason::Completed));
        assert_eq!(t.cause, "audit-clear");
        assert_eq!(t.section, None);

        let t = next_transition(&LoopFacts { post_action_configured: true, ..f.clone() }, &audit(0, false));
        assert_eq!((t.kind, t.to), (K::Phase, Some(Phase::PostAction)));
        assert_eq!(t.cause, "audit-clear");

        let t = next_transition(&f, &audit(1, false));
        assert_eq!(t.kind, K::Continue);
        assert_eq!(t.to, Some(Phase::Coding));
        assert_eq!(t.cause, "audit-dirty");
        assert_eq!(t.event_type, "auditor-handoff");
        assert_eq!(t.iteration_after, 3);
        assert_eq!(t.section_after, None);
        assert_eq!(t.audit_count_after, 5);
    }

    #[test]
    fn iteration_cap_on_every_incrementing_transition() {
        let capped = |f: LoopFacts| LoopFacts { iteration: 4, max_iterations: 4, ..f };
        let cases = [
            (capped(facts(Phase::Auditing)), audit(0, true), "section-clean"),
            (capped(facts(Phase::Auditing)), audit(3, false), "section-dirty"),
            (capped(unsectioned(Phase::Auditing)), audit(3, false), "audit-dirty"),
            (capped(facts(Phase::Auditing)), err(false), "audit-error"),
            (capped(facts(Phase::Auditing)), Event::SessionAborted, "audit-session-aborted"),
        ];
        for (f, event, cause) in cases {
            let t = next_transition(&f, &event);
            assert_eq!(t.kind, K::Terminate, "{cause}");
            assert_eq!(t.termination, Some(TerminationReason::MaxIterations));
            assert_eq!(t.event_type, "max_iterations");
            assert_eq!(t.cause, cause);
            assert_eq!(t.to, None);
            assert_eq!(t.iteration_after, 4);
            assert_eq!(t.status(), Some(Status::Errored));
            // The completed section is left behind: the next one is current.
            let section_after = if cause == "section-clean" { f.section_index.map(|i| i + 1) } else { f.section_index };
            assert_eq!(t.section_after, section_after, "{cause}");
        }
        // Below the cap, and unlimited: no termination.
        let below = LoopFacts { iteration: 3, max_iterations: 4, ..facts(Phase::Auditing) };
        assert_eq!(next_transition(&below, &audit(1, false)).iteration_after, 4);
        let unlimited = LoopFacts { iteration: u32::MAX, max_iterations: 0, ..facts(Phase::Auditing) };
        let t = next_transition(&unlimited, &audit(1, false));
        assert_eq!(t.kind, K::Rotate);
        assert_eq!(t.iteration_after, u32::MAX);
        // Transitions that do not increment ignore the cap.
        let at_cap = capped(facts(Phase::Coding));
        assert_eq!(next_transition(&at_cap, &Event::CoderHandoff).kind, K::Rotate);
    }

    /// Drives `events` from `start` through the machine, applying each transition to the
    /// facts as the runner does, and returns the transitions.
    fn drive(start: LoopFacts, events: &[Event]) -> Vec<Transition> {
        let mut f = start;
        let mut out = vec![];
        for e in events {
            let t = next_transition(&f, e);
            f = LoopFacts {
                phase: t.to.unwrap_or(f.phase),
                iteration: t.iteration_after,
                section_index: t.section_after,
                audit_count: t.audit_count_after,
                error_count: t.error_count_after,
                failed_turns: t.failed_turns_after,
                ..f
            };
            out.push(t);
        }
        out
    }

    #[test]
    fn a_phase_failing_every_turn_ends_the_loop_although_the_other_phase_passes() {
        let aborted = Event::SessionAborted;
        // (start phase, the round's events, what the failing turns look like in the log)
        let cases: [(Phase, Vec<Event>, &str); 4] = [
            // An auditor that errors on every turn: each coder handoff clears the error
            // budget, the audit streak still grows.
            (
                Phase::Coding,
                vec![Event::CoderHandoff, err(false)],
                "3 audit turns in a row failed; the last: assistant error: boom",
            ),
            // An auditor killed on every turn.
            (
                Phase::Coding,
                vec![Event::CoderHandoff, aborted.clone()],
                "3 audit turns in a row failed; the last: the auditor's session was aborted",
            ),
            // A coder that errors on every turn while the auditor finds work left.
            (
                Phase::Coding,
                vec![err(false), audit(1, false)],
                "3 coding turns in a row failed; the last: assistant error: boom",
            ),
            // The same with a dirty section audit that carries a summary.
            (
                Phase::Coding,
                vec![err(false), audit(2, true)],
                "3 coding turns in a row failed; the last: assistant error: boom",
            ),
        ];
        for (phase, round, message) in cases {
            let start = LoopFacts { error_count: 0, ..unsectioned(phase) };
            let events: Vec<Event> = round.iter().cycle().take(round.len() * 4).cloned().collect();
            let ts = drive(start, &events);
            let end = ts.iter().position(|t| t.termination.is_some()).expect("the loop ends");
            let failing = if matches!(round[0], Event::CoderHandoff) { 1 } else { 0 };
            assert_eq!(end, round.len() * 2 + failing, "{message}: ends on the third failed turn");
            assert_eq!(ts[end].termination, Some(TerminationReason::ErrorMaxRetries(Some(message.into()))));
            assert_eq!(ts[end].status(), Some(Status::Errored));
            assert!(
                ts[..end].iter().all(|t| t.error_count_after < MAX_RETRIES),
                "{message}: the budget alone never ran out"
            );
        }
    }

    #[test]
    fn a_passing_turn_of_the_same_phase_ends_its_streak_only() {
        let two = FailedTurns { coding: 2, auditing: 2 };
        let (f, a) = (
            LoopFacts { failed_turns: two, ..facts(Phase::Coding) },
            LoopFacts { failed_turns: two, ..facts(Phase::Auditing) },
        );
        // (facts, event, streaks after)
        let table = [
            (&f, Event::CoderHandoff, FailedTurns { coding: 0, auditing: 2 }),
            (&a, audit(1, true), FailedTurns { coding: 2, auditing: 0 }),
            // A clean section audit advances to the next section: both streaks end.
            (&a, audit(0, true), FailedTurns::default()),
            // The last section's clean audit: the loop's work is done.
            (&LoopFacts { section_index: Some(2), ..a.clone() }, audit(0, true), FailedTurns::default()),
            // A summary-missing nudge is not a finished audit.
            (&a, audit(0, false), two),
            // A failed prompt send charges the budget, not a streak.
            (&f, Event::PromptFailed { context: String::new() }, two),
            (&f, Event::NoHandoff { replied: true, nudges_sent: 0 }, two),
        ];
        for (facts, event, after) in table {
            let t = next_transition(facts, &event);
            assert_eq!(t.failed_turns_after, after, "{} in {}", event.name(), facts.phase.as_str());
        }
        // A restart clears both.
        let plan = restart(&LoopFacts { failed_turns: two, ..facts(Phase::Auditing) });
        assert_eq!(plan.failed_turns, FailedTurns::default());
        assert_eq!(plan.transition.map(|t| t.failed_turns_after), Some(FailedTurns::default()));
        // The budget's own message wins when both run out on the same turn.
        let both = LoopFacts { error_count: MAX_RETRIES - 1, ..a };
        let t = next_transition(&both, &err(false));
        assert_eq!(t.termination, Some(TerminationReason::ErrorMaxRetries(Some("assistant error: boom".into()))));
    }

    #[test]
    fn assistant_errors_charge_the_budget() {
        let t = next_transition(&facts(Phase::Coding), &err(true));
        assert_eq!(t.kind, K::Rotate);
        assert_eq!(t.to, Some(Phase::Auditing));
        assert_eq!(t.cause, "coder-error");
        assert_eq!(t.error_count_after, 2);
        assert_eq!(t.model_failed, Some(true));
        assert_eq!(t.iteration_after, 2);

        let t = next_transition(&facts(Phase::Auditing), &err(false));
        assert_eq!(t.kind, K::ErrorRecovery);
        assert_eq!(t.event_type, "audit-error");
        assert_eq!(t.iteration_after, 3);
        assert_eq!(t.audit_count_after, 4, "an errored audit is not counted");
        assert_eq!(t.model_failed, None);
        // The message is kept for the log row.
        assert_eq!(t.detail.as_deref(), Some("assistant error: boom"));
        let lines = Event::AssistantError { message: "first\n## second\r\nthird".into(), model_error: false };
        let d = next_transition(&facts(Phase::Coding), &lines).detail.unwrap_or_default();
        assert_eq!(d, "assistant error: first ## second third");
        let long = Event::AssistantError { message: "é".repeat(400), model_error: false };
        let d = next_transition(&facts(Phase::Coding), &long).detail.unwrap_or_default();
        assert!(d.len() <= 500 + "assistant error: …".len() && d.ends_with('…'), "{}", d.len());

        for phase in [Phase::Coding, Phase::Auditing] {
            let f = LoopFacts { error_count: MAX_RETRIES - 1, ..facts(phase) };
            let t = next_transition(&f, &err(true));
            assert_eq!(t.termination, Some(TerminationReason::ErrorMaxRetries(Some("assistant error: boom".into()))));
            assert_eq!(t.error_count_after, MAX_RETRIES);
            assert_eq!(t.model_failed, Some(true));
        }

        // Post-action never charges: it completes.
        let f = LoopFacts { error_count: MAX_RETRIES - 1, ..facts(Phase::PostAction) };
        let t = next_transition(&f, &err(true));
        assert_eq!(t.termination, Some(TerminationReason::Completed));
        assert_eq!(t.cause, "post-action-error");
    }

    #[test]
    fn prompt_failures_retry_within_budget() {
        let f = LoopFacts { error_count: 0, ..facts(Phase::PostAction) };
        let ev = Event::PromptFailed { context: "post-action nudge".into() };
        let t = next_transition(&f, &ev);
        assert_eq!(t.kind, K::Retry);
        assert_eq!(t.error_count_after, 1);
        assert!(!t.is_logged());
        let f = LoopFacts { error_count: 2, ..f };
        let t = next_transition(&f, &ev);
        assert_eq!(t.termination, Some(TerminationReason::ErrorMaxRetries(Some("post-action nudge".into()))));
        assert_eq!(t.error_count_after, 3);
    }

    #[test]
    fn missing_handoff_nudges_then_ends_turn() {
        for phase in Phase::ALL {
            let f = facts(phase);
            for n in 0..MAX_HANDOFF_NUDGES {
                let t = next_transition(&f, &Event::NoHandoff { replied: true, nudges_sent: n });
                assert_eq!(t.kind, K::Nudge);
                let t = next_transition(&f, &Event::NoHandoff { replied: false, nudges_sent: n });
                assert_eq!(t.kind, K::Resend);
            }
            let t = next_transition(&f, &Event::NoHandoff { replied: true, nudges_sent: MAX_HANDOFF_NUDGES });
            let want = if phase == Phase::PostAction {
                TerminationReason::Completed
            } else {
                TerminationReason::HandoffMissing
            };
            assert_eq!(t.termination, Some(want));
            assert_eq!(t.cause, "handoff-missing");
        }
    }

    #[test]
    fn provider_limit_falls_back_only_for_the_auditor() {
        let ev = Event::ProviderLimit { message: "usage limit".into(), fallback_available: true };
        let t = next_transition(&facts(Phase::Auditing), &ev);
        assert_eq!(t.kind, K::AuditorFallback);
        assert!(!t.is_logged());
        let t = next_transition(&facts(Phase::Coding), &ev);
        assert_eq!(t.termination, Some(TerminationReason::ProviderLimit(Some("usage limit".into()))));
        assert_eq!(t.termination.map(|r| r.to_stored()).as_deref(), Some("provider_limit: usage limit"));
    }

    #[test]
    fn degenerate_facts_do_not_panic() {
        let odd = [
            LoopFacts {
                section_index: Some(u32::MAX),
                total_sections: 1,
                iteration: u32::MAX,
                max_iterations: u32::MAX,
                audit_count: u32::MAX,
                error_count: u32::MAX,
                ..facts(Phase::Auditing)
            },
            LoopFacts { section_index: Some(7), total_sections: 0, ..facts(Phase::Auditing) },
            LoopFacts::default(),
        ];
        for f in odd {
            for phase in Phase::ALL {
                let f = LoopFacts { phase, ..f.clone() };
                for e in all_events() {
                    let _ = next_transition(&f, &e);
                }
                let _ = restart(&f);
            }
        }
        // An index past the end counts as the last section.
        let past = LoopFacts { section_index: Some(9), total_sections: 3, ..facts(Phase::Auditing) };
        assert_eq!(next_transition(&past, &audit(0, true)).termination, Some(TerminationReason::Completed));
        // A section index with zero sections is non-sectioned.
        let zero = LoopFacts { section_index: Some(0), total_sections: 0, ..facts(Phase::Auditing) };
        assert_eq!(next_transition(&zero, &audit(1, false)).kind, K::Continue);
    }

    #[test]
    fn termination_reason_status_mapping() {
        use TerminationReason as R;
        let cases = [
            (R::Completed, Status::Completed),
            (R::Cancelled, Status::Cancelled),
            (R::Shutdown, Status::Cancelled),
            (R::StallTimeout, Status::Stalled),
            (R::MaxIterations, Status::Errored),
            (R::HandoffMissing, Status::Errored),
            (R::MissingWorktreeDir, Status::Errored),
            (R::SessionCreationFailed, Status::Errored),
            (R::RestartPromptFailed, Status::Errored),
            (R::ErrorMaxRetries(None), Status::Errored),
            (R::ProviderLimit(None), Status::Errored),
            (R::WorktreeFailed(None), Status::Errored),
        ];
        for (reason, status) in cases {
            assert_eq!(reason.status(), status, "{reason}");
            assert_eq!(R::parse(reason.as_str()), reason);
            assert_eq!(R::parse(&reason.to_stored()), reason);
        }
    }

    #[test]
    fn termination_reason_parse() {
        use TerminationReason as R;
        assert_eq!(
            R::parse("error_max_retries: assistant error: model: x"),
            R::ErrorMaxRetries(Some("assistant error: model: x".into()))
        );
        assert_eq!(R::parse("worktree_failed:  disk full "), R::WorktreeFailed(Some("disk full".into())));
        assert_eq!(R::parse("provider_limit:"), R::ProviderLimit(None));
        assert_eq!(R::parse("user_aborted"), R::Cancelled);
        assert_eq!(R::parse("cancelled: by user"), R::Cancelled);
        assert_eq!(R::parse("audit_retry_exhausted"), R::ErrorMaxRetries(Some("audit_retry_exhausted".into())));
        assert_eq!(R::parse("something: odd"), R::ErrorMaxRetries(Some("something: odd".into())));
        assert_eq!(R::parse(""), R::ErrorMaxRetries(None));
        assert_eq!(R::parse("  ").status(), Status::Errored);
        assert_eq!(R::WorktreeFailed(Some("x".into())).to_stored(), "worktree_failed: x");
        assert_eq!(R::StallTimeout.to_string(), "stall_timeout");
    }

    #[test]
    fn names_round_trip() {
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
        }
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        for k in TransitionKind::ALL {
            assert_eq!(TransitionKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Phase::parse("final_auditing"), None);
        assert_eq!(Phase::parse("Coding"), None);
        assert_eq!(Status::parse("done"), None);
        assert!(!Status::Running.is_terminal());
        assert!(Status::Stalled.is_terminal());
        assert_eq!(serde_json::to_string(&Phase::PostAction).unwrap(), "\"post_action\"");
        assert_eq!(serde_json::to_string(&TransitionKind::AdvanceSection).unwrap(), "\"advance-section\"");
    }

    #[test]
    fn restart_resets() {
        let mut f = LoopFacts { iteration: 7, error_count: 2, audit_count: 5, ..facts(Phase::Auditing) };
        let plan = restart(&f);
        assert_eq!(plan.phase, Phase::Coding);
        assert_eq!(plan.iteration, 1);
        assert_eq!(plan.error_count, 0);
        assert_eq!(plan.audit_count, 0);
        assert!(!plan.model_failed);
        assert_eq!(plan.auditor_fallback_index, 0);
        assert_eq!(plan.section_index, Some(1));
        assert_eq!(plan.total_sections, 3);
        assert!(plan.fresh_session && plan.drop_standby && plan.discard_pending_handoff);
        assert!(!plan.finish_instead);
        let row = plan.transition.clone().expect("phase changed");
        assert_eq!(row.kind, K::Phase);
        assert_eq!(row.event_type, "restart");
        assert_eq!((row.from, row.to), (Phase::Auditing, Some(Phase::Coding)));
        assert_eq!(row.iteration, 1);
        assert_eq!(row.section, Some(1));

        f.phase = Phase::Coding;
        let plan = restart(&f);
        assert_eq!(plan.phase, Phase::Coding);
        assert_eq!(plan.transition, None, "no row when the phase is unchanged");

        f.phase = Phase::PostAction;
        f.post_action_configured = true;
        let plan = restart(&f);
        assert_eq!(plan.phase, Phase::PostAction);
        assert_eq!(plan.transition, None);
        assert_eq!(plan.prompt(3), RestartPrompt::PostAction);

        f.post_action_configured = false;
        let plan = restart(&f);
        assert!(plan.finish_instead);
        let row = plan.transition.expect("completion row");
        assert_eq!(row.termination, Some(TerminationReason::Completed));
    }

    #[test]
    fn restart_prompt_choice() {
        let plan = restart(&facts(Phase::Auditing));
        assert_eq!(plan.prompt(0), RestartPrompt::SectionInitial);
        assert_eq!(plan.prompt(2), RestartPrompt::SectionContinuation);
        let plan = restart(&unsectioned(Phase::Auditing));
        assert_eq!(plan.prompt(2), RestartPrompt::PlanInitial);
    }

    #[test]
    fn restart_failure() {
        let before = LoopFacts { iteration: 6, ..facts(Phase::Auditing) };
        let plan = restart(&before);
        let t = restart_failed(&before, &plan, true);
        assert_eq!(t.termination, Some(TerminationReason::RestartPromptFailed));
        assert_eq!(t.status(), Some(Status::Errored));
        assert_eq!(t.from, Phase::Coding);

        let t = restart_failed(&before, &plan, false);
        assert_eq!(t.kind, K::Rollback);
        assert_eq!((t.from, t.to), (Phase::Coding, Some(Phase::Auditing)));
        assert_eq!(t.iteration_after, 6);
        assert_eq!(t.event_type, "restart_prompt_failed");

        let coding = facts(Phase::Coding);
        let t = restart_failed(&coding, &restart(&coding), false);
        assert_eq!(t.kind, K::Noop);
    }

    #[test]
    fn restartability() {
        for s in [Status::Running, Status::Cancelled, Status::Errored, Status::Stalled] {
            assert_eq!(restartable(s, "/w", true, true), Ok(()));
            assert_eq!(restartable(s, "/w", false, true), Ok(()), "branch recreates it");
            assert_eq!(restartable(s, "/w", true, false), Ok(()));
            let e = restartable(s, "/w/x", false, false).unwrap_err();
            assert_eq!(e, "worktree directory no longer exists at /w/x and its branch is gone.");
        }
        let e = restartable(Status::Completed, "/w", true, true).unwrap_err();
        assert!(e.contains("cannot be restarted"), "{e}");
    }
}
