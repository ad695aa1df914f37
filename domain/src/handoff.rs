//! Handoff records: the strict role schemas of `loop-handoff` and `loop-complete`, and
//! their markdown renderings.
//!
//! A phase turn ends only through a persisted handoff row. The payload is validated
//! against its role's schema when it is written ([`validate_handoff`],
//! [`validate_complete`]) and again whenever a stored row is read ([`parse_stored`]); an
//! invalid stored row is an error the caller logs and skips, never coerced or partially
//! applied. Validation normalizes the payload (text trimmed, blank optional notes dropped,
//! defaults filled in), and the normalized JSON is what gets stored.
//!
//! Roles follow the phase: `coding` → coder, `auditing` → auditor, `post_action` →
//! post-action. The coder reports `changes`, `deviations`, `verification`, `notes`; the
//! auditor an optional `summary` and `notes`; the post-action agent `outcome`, `steps`,
//! `followUps`, `notes`. Each role rejects the other role's fields by name.
//!
//! The write-time rules that need the loop's state (the auditor `summary` is forbidden in
//! non-sectioned loops and while blocking bug findings remain) come in an
//! [`AuditContext`]; a stored payload is re-checked against the schema only, because that
//! state has moved on since the write.

use std::fmt;

use forge_protocol::inputs::{
    AuditSummary, HandoffChange, HandoffDeviation, HandoffVerification, LoopCompleteInput, LoopHandoffInput,
    PostActionOutcome, PostActionStep, StepStatus, VerificationOutcome,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::loop_machine::Phase;

/// The reply of a successful `loop-handoff` / `loop-complete` call.
pub const HANDOFF_RECORDED: &str = "Handoff recorded — end your turn now; make no further changes.";

/// The reply when the call replaced an earlier pending record of the same turn.
pub const HANDOFF_REPLACED: &str = "Handoff recorded; it replaces the record you made earlier \
     in this turn — end your turn now; make no further changes.";

/// The short nudge for a turn that ended without a handoff record.
pub const HANDOFF_NUDGE: &str =
    "You ended your turn without calling loop-handoff/loop-complete. Finish the work, then call it.";

/// The nudge for a clean section audit whose auditor record carried no summary (the record
/// is discarded).
pub const SUMMARY_NUDGE: &str = "No blocking bug findings remain, so this section audit is \
     clean, but your loop-handoff had no summary. Call loop-handoff again with summary \
     { done, deviations, followUps } describing the section, then end your turn.";

/// Who wrote a handoff row (`loop_handoffs.role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Coder,
    Auditor,
    PostAction,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Coder, Role::Auditor, Role::PostAction];

    /// The stored name: `coder`, `auditor` or `post_action`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Coder => "coder",
            Role::Auditor => "auditor",
            Role::PostAction => "post_action",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The tool that records this role's handoff.
    pub fn tool(self) -> &'static str {
        match self {
            Role::Coder | Role::Auditor => "loop-handoff",
            Role::PostAction => "loop-complete",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The role whose handoff ends a turn in `phase`.
pub fn role_for_phase(phase: Phase) -> Role {
    match phase {
        Phase::Coding => Role::Coder,
        Phase::Auditing => Role::Auditor,
        Phase::PostAction => Role::PostAction,
    }
}

/// A handoff row's lifecycle (`loop_handoffs.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffStatus {
    Pending,
    Applied,
    Discarded,
}

impl HandoffStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffStatus::Pending => "pending",
            HandoffStatus::Applied => "applied",
            HandoffStatus::Discarded => "discarded",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<HandoffStatus> {
        [HandoffStatus::Pending, HandoffStatus::Applied, HandoffStatus::Discarded]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

/// The loop state the auditor's write-time rules depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AuditContext {
    /// The loop runs a sectioned plan.
    pub sectioned: bool,
    /// Open blocking bug findings (current section, earlier sections, cross-section).
    pub blocking_bug_count: u32,
}

/// The stored coder payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoderPayload {
    pub changes: Vec<HandoffChange>,
    #[serde(default)]
    pub deviations: Vec<HandoffDeviation>,
    pub verification: Vec<HandoffVerification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// The stored auditor payload.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditorPayload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<AuditSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// The stored post-action payload: the `loop-complete` input, normalized.
pub type PostActionPayload = LoopCompleteInput;

/// A stored handoff, re-validated for its role.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredHandoff {
    Coder(CoderPayload),
    Auditor(AuditorPayload),
    PostAction(PostActionPayload),
}

impl StoredHandoff {
    /// The role of the record.
    pub fn role(&self) -> Role {
        match self {
            StoredHandoff::Coder(_) => Role::Coder,
            StoredHandoff::Auditor(_) => Role::Auditor,
            StoredHandoff::PostAction(_) => Role::PostAction,
        }
    }

    /// The payload as stored JSON.
    pub fn to_value(&self) -> Value {
        let v = match self {
            StoredHandoff::Coder(p) => serde_json::to_value(p),
            StoredHandoff::Auditor(p) => serde_json::to_value(p),
            StoredHandoff::PostAction(p) => serde_json::to_value(p),
        };
        v.unwrap_or(Value::Null)
    }
}

/// Validates a `loop-handoff` call for `role` and returns the normalized payload to store.
/// The error says which rule failed and names the field.
pub fn validate_handoff(role: Role, input: &LoopHandoffInput, ctx: &AuditContext) -> Result<Value, String> {
    let stored = match role {
        Role::Coder => StoredHandoff::Coder(coder_from_input(input)?),
        Role::Auditor => StoredHandoff::Auditor(auditor_from_input(input, ctx)?),
        Role::PostAction => {
            return Err("loop-handoff is not available in the post_action phase: finish the \
                 post-action by calling loop-complete with outcome, steps (one per workflow \
                 step) and followUps."
                .to_string())
        }
    };
    bounded(stored.to_value())
}

/// The most bytes a handoff (or a post-action report) may take as JSON: it goes into the
/// next agent's prompt (review YU: a 30 MiB summary made 31 MB audit prompts, which no
/// agent CLI could send).
pub const MAX_HANDOFF_BYTES: usize = 1 << 20;

/// `payload` when it is at most [`MAX_HANDOFF_BYTES`] as JSON and holds no NUL character
/// (an agent CLI given its prompt as an argument cannot start with one).
fn bounded(payload: Value) -> Result<Value, String> {
    let text = serde_json::to_string(&payload).map_err(|e| e.to_string())?;
    if text.len() > MAX_HANDOFF_BYTES {
        return Err(format!(
            "the handoff is {} bytes as JSON, over the {MAX_HANDOFF_BYTES} a handoff may have (it goes into the next agent's prompt): summarize it, and leave the detail in the worktree's files",
            text.len()
        ));
    }
    fn has_nul(v: &Value) -> bool {
        match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(a) => a.iter().any(has_nul),
            Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            _ => false,
        }
    }
    if has_nul(&payload) {
        return Err(
            "the handoff holds a NUL character (\\u0000), which an agent's prompt cannot carry: remove it".to_string()
        );
    }
    Ok(payload)
}

/// Validates a `loop-complete` call made in `phase` and returns the normalized payload.
pub fn validate_complete(phase: Phase, input: &LoopCompleteInput) -> Result<Value, String> {
    if phase != Phase::PostAction {
        return Err(format!(
            "loop-complete is only valid in the post_action phase (the loop is in {phase}); \
             end a coding or auditing turn with loop-handoff."
        ));
    }
    let payload = normalize_post_action(input)?;
    bounded(StoredHandoff::PostAction(payload).to_value())
}

/// Parses a stored payload for `role`, re-validating it strictly against the role schema
/// (unknown fields, missing or empty required fields, empty lists all fail).
pub fn parse_stored(role: Role, payload: &str) -> Result<StoredHandoff, String> {
    let fail = |e: String| format!("stored {role} handoff is invalid: {e}");
    match role {
        Role::Coder => {
            let p: CoderPayload = serde_json::from_str(payload).map_err(|e| fail(e.to_string()))?;
            let input = LoopHandoffInput {
                changes: Some(p.changes),
                deviations: Some(p.deviations),
                verification: Some(p.verification),
                summary: None,
                notes: p.notes,
            };
            coder_from_input(&input).map(StoredHandoff::Coder).map_err(fail)
        }
        Role::Auditor => {
            let p: AuditorPayload = serde_json::from_str(payload).map_err(|e| fail(e.to_string()))?;
            Ok(StoredHandoff::Auditor(AuditorPayload {
                summary: match &p.summary {
                    Some(s) => Some(normalize_summary(s).map_err(fail)?),
                    None => None,
                },
                notes: optional_text(p.notes.as_deref()),
            }))
        }
        Role::PostAction => {
            let p: PostActionPayload = serde_json::from_str(payload).map_err(|e| fail(e.to_string()))?;
            normalize_post_action(&p).map(StoredHandoff::PostAction).map_err(fail)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Schema checks
// ---------------------------------------------------------------------------------------

/// The handoff's schema errors for `role`: a field of the other role, a required field
/// that is missing, or a list the schema requires entries in (`minItems: 1`) that is
/// empty. They are invalid parameters (-32602, PROTOCOL.md §3: input that does not match
/// the tool's schema, as the seed's zod schemas refuse an empty `changes`, `verification`
/// and `summary.done`); every other refusal of [`validate_handoff`] (a blank text, a
/// verdict the loop does not allow) is a tool error (1006). [`validate_handoff`] checks
/// these first, with the same messages. An empty `summary.done` is the schema's error only
/// where a summary is allowed (`ctx`): where none is, "forbidden" is what the auditor must
/// hear first, not to add an entry to a summary it then may not send (a review).
pub fn schema_error(role: Role, input: &LoopHandoffInput, ctx: &AuditContext) -> Option<String> {
    match role {
        Role::Coder => {
            if input.summary.is_some() {
                return Some(
                    "summary is an auditor field and is not accepted from the coder: the coder \
                     handoff takes changes, deviations, verification and notes."
                        .to_string(),
                );
            }
            if input.changes.is_none() {
                return Some(
                    "changes is required: list at least one { summary, reason } entry \
                     saying what changed and why."
                        .to_string(),
                );
            }
            if input.verification.is_none() {
                return Some(
                    "verification is required: list at least one check { command, cwd, \
                     outcome, changedAfter } (outcome \"not-run\" for a check you could not run)."
                        .to_string(),
                );
            }
            if input.changes.as_ref().is_some_and(Vec::is_empty) {
                return Some(EMPTY_CHANGES.to_string());
            }
            if input.verification.as_ref().is_some_and(Vec::is_empty) {
                return Some(EMPTY_VERIFICATION.to_string());
            }
            None
        }
        Role::Auditor => {
            let coder_fields: Vec<&str> = [
                ("changes", input.changes.is_some()),
                ("deviations", input.deviations.is_some()),
                ("verification", input.verification.is_some()),
            ]
            .into_iter()
            .filter_map(|(name, present)| present.then_some(name))
            .collect();
            if coder_fields.is_empty() {
                let empty_done = input.summary.as_ref().is_some_and(|s| s.done.is_empty());
                return (empty_done && summary_forbidden(ctx).is_none()).then(|| EMPTY_DONE.to_string());
            }
            let (list, verb) = if coder_fields.len() == 1 {
                (coder_fields[0].to_string(), "is a coder field")
            } else {
                (coder_fields.join(", "), "are coder fields")
            };
            let hint = if coder_fields.contains(&"deviations") {
                " (auditor deviations go in summary.deviations)"
            } else {
                ""
            };
            Some(format!(
                "{list} {verb} and not accepted from the auditor: the auditor handoff takes only \
                 summary and notes{hint}."
            ))
        }
        Role::PostAction => None,
    }
}

/// An empty `changes` (the schema's `minItems: 1`).
const EMPTY_CHANGES: &str = "changes needs at least one { summary, reason } entry.";
/// An empty `verification`.
const EMPTY_VERIFICATION: &str = "verification needs at least one { command, cwd, outcome, changedAfter } entry.";
/// An empty `summary.done`.
const EMPTY_DONE: &str = "summary.done needs at least one entry: what the section delivered.";
/// An empty `steps` of `loop-complete`.
const EMPTY_STEPS: &str = "steps needs at least one { name, status, detail? } entry, one per workflow step.";

/// `loop-complete`'s schema error, as [`schema_error`]'s: an empty `steps` (-32602).
pub fn complete_schema_error(input: &LoopCompleteInput) -> Option<String> {
    input.steps.is_empty().then(|| EMPTY_STEPS.to_string())
}

fn coder_from_input(input: &LoopHandoffInput) -> Result<CoderPayload, String> {
    if let Some(e) = schema_error(Role::Coder, input, &AuditContext::default()) {
        return Err(e);
    }

    let changes = match &input.changes {
        None => return Err("changes is required.".to_string()),
        Some(c) if c.is_empty() => return Err(EMPTY_CHANGES.to_string()),
        Some(c) => c,
    };
    let changes = changes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Ok(HandoffChange {
                summary: required_text(&format!("changes[{i}].summary"), &c.summary)?,
                reason: required_text(&format!("changes[{i}].reason"), &c.reason)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;

    let deviations = input
        .deviations
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Ok(HandoffDeviation {
                plan_item: required_text(&format!("deviations[{i}].planItem"), &d.plan_item)?,
                actual: required_text(&format!("deviations[{i}].actual"), &d.actual)?,
                reason: required_text(&format!("deviations[{i}].reason"), &d.reason)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;

    let verification = match &input.verification {
        None => return Err("verification is required.".to_string()),
        Some(v) if v.is_empty() => return Err(EMPTY_VERIFICATION.to_string()),
        Some(v) => v,
    };
    let verification = verification
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Ok(HandoffVerification {
                command: required_text(&format!("verification[{i}].command"), &v.command)?,
                cwd: worktree_relative(&format!("verification[{i}].cwd"), &v.cwd)?,
                outcome: v.outcome,
                changed_after: v.changed_after,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;

    Ok(CoderPayload { changes, deviations, verification, notes: optional_text(input.notes.as_deref()) })
}

fn auditor_from_input(input: &LoopHandoffInput, ctx: &AuditContext) -> Result<AuditorPayload, String> {
    if let Some(e) = schema_error(Role::Auditor, input, ctx) {
        return Err(e);
    }

    let summary = match &input.summary {
        None => None,
        Some(s) => {
            if let Some(why) = summary_forbidden(ctx) {
                return Err(why);
            }
            Some(normalize_summary(s)?)
        }
    };

    Ok(AuditorPayload { summary, notes: optional_text(input.notes.as_deref()) })
}

/// Why the auditor may not send a summary in this loop, if it may not.
fn summary_forbidden(ctx: &AuditContext) -> Option<String> {
    if !ctx.sectioned {
        return Some(
            "summary is forbidden in non-sectioned loops: the verdict comes from \
             the open findings alone. Call loop-handoff again without summary."
                .to_string(),
        );
    }
    if ctx.blocking_bug_count > 0 {
        let n = ctx.blocking_bug_count;
        let findings = if n == 1 {
            "1 blocking bug finding remains".to_string()
        } else {
            format!("{n} blocking bug findings remain")
        };
        return Some(format!(
            "summary is forbidden while blocking bug findings remain open ({findings}): \
             a summary records a clean section audit. Call loop-handoff again without \
             summary, or first delete the findings that are resolved."
        ));
    }
    None
}

fn normalize_summary(s: &AuditSummary) -> Result<AuditSummary, String> {
    if s.done.is_empty() {
        return Err(EMPTY_DONE.to_string());
    }
    Ok(AuditSummary {
        done: text_list("summary.done", &s.done)?,
        deviations: text_list("summary.deviations", &s.deviations)?,
        follow_ups: text_list("summary.followUps", &s.follow_ups)?,
    })
}

fn normalize_post_action(input: &LoopCompleteInput) -> Result<PostActionPayload, String> {
    if input.steps.is_empty() {
        return Err(EMPTY_STEPS.to_string());
    }
    let steps = input
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Ok(PostActionStep {
                name: required_text(&format!("steps[{i}].name"), &s.name)?,
                status: s.status,
                detail: optional_text(s.detail.as_deref()),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(LoopCompleteInput {
        outcome: input.outcome,
        steps,
        follow_ups: text_list("followUps", &input.follow_ups)?,
        notes: optional_text(input.notes.as_deref()),
    })
}

fn required_text(field: &str, value: &str) -> Result<String, String> {
    let t = value.trim();
    if t.is_empty() {
        Err(format!("{field} must not be empty."))
    } else {
        Ok(t.to_string())
    }
}

fn optional_text(value: Option<&str>) -> Option<String> {
    value.map(str::trim).filter(|t| !t.is_empty()).map(str::to_string)
}

fn text_list(field: &str, items: &[String]) -> Result<Vec<String>, String> {
    items.iter().enumerate().map(|(i, s)| required_text(&format!("{field}[{i}]"), s)).collect()
}

/// A non-empty path that stays inside the worktree: not absolute, no `..` component.
fn worktree_relative(field: &str, value: &str) -> Result<String, String> {
    let t = value.trim();
    if t.is_empty() {
        return Err(format!("{field} must not be empty (use \".\" for the worktree root)."));
    }
    let bytes = t.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    let absolute = t.starts_with('/') || t.starts_with('\\') || t.starts_with('~') || drive;
    let escapes = t.split(['/', '\\']).any(|part| part == "..");
    if absolute || escapes {
        return Err(format!(
            "{field} must be relative to the worktree (got \"{t}\"; use \".\" for the \
             worktree root)."
        ));
    }
    Ok(t.to_string())
}

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

/// The coder's decisions as markdown, for the audit prompt and the attempt history.
pub fn render_coder_handoff(payload: &CoderPayload) -> String {
    let mut out = String::from("**Changes**\n");
    for c in &payload.changes {
        bullet(&mut out, &format!("{} — {}", c.summary, c.reason));
    }

    out.push_str("\n**Deviations from the plan**\n");
    if payload.deviations.is_empty() {
        bullet(&mut out, "None reported.");
    }
    for d in &payload.deviations {
        bullet(&mut out, &format!("Plan: {} → Actual: {} (why: {})", d.plan_item, d.actual, d.reason));
    }

    out.push_str("\n**Verification**\n");
    for v in &payload.verification {
        let outcome = match v.outcome {
            VerificationOutcome::Pass => "pass",
            VerificationOutcome::Fail => "FAIL",
            VerificationOutcome::NotRun => "not run",
        };
        let mut line = format!("{} in {}: {outcome}", code_span(&v.command), code_span(&v.cwd));
        if v.changed_after {
            line.push_str(" (code changed after this check)");
        }
        bullet(&mut out, &line);
    }

    if let Some(notes) = &payload.notes {
        out.push_str("\n**Notes for the auditor**\n");
        out.push_str(notes);
        out.push('\n');
    }
    out.trim_end().to_string()
}

/// The auditor's record plus the store's verdict, as display text (`lastAuditResult`).
/// `blocking_findings` is the count the verdict was decided on.
pub fn render_audit_result(payload: &AuditorPayload, blocking_findings: u32) -> String {
    let mut out = if blocking_findings == 0 {
        String::from("**Audit verdict:** clean — no blocking findings remain.\n")
    } else {
        let noun = if blocking_findings == 1 { "finding remains" } else { "findings remain" };
        format!("**Audit verdict:** changes needed — {blocking_findings} blocking {noun} open.\n")
    };
    if let Some(s) = &payload.summary {
        list_block(&mut out, "Done", &s.done);
        list_block(&mut out, "Deviations", &s.deviations);
        list_block(&mut out, "Follow-ups", &s.follow_ups);
    }
    if let Some(notes) = &payload.notes {
        out.push_str("\n**Auditor notes**\n");
        out.push_str(notes);
        out.push('\n');
    }
    out.trim_end().to_string()
}

fn outcome_label(outcome: PostActionOutcome) -> &'static str {
    match outcome {
        PostActionOutcome::Completed => "completed",
        PostActionOutcome::CompletedWithIssues => "completed with issues",
        PostActionOutcome::Failed => "failed",
    }
}

fn step_label(status: StepStatus) -> &'static str {
    match status {
        StepStatus::Done => "done",
        StepStatus::Skipped => "skipped",
        StepStatus::Failed => "failed",
    }
}

/// The full post-action report (`postActionReport`).
pub fn render_post_action_report(payload: &PostActionPayload) -> String {
    let mut out = format!("**Post-action outcome:** {}\n\n**Steps**\n", outcome_label(payload.outcome));
    for s in &payload.steps {
        let mut line = format!("[{}] {}", step_label(s.status), s.name);
        if let Some(d) = &s.detail {
            line.push_str(" — ");
            line.push_str(d);
        }
        bullet(&mut out, &line);
    }
    list_block(&mut out, "Follow-ups", &payload.follow_ups);
    if let Some(notes) = &payload.notes {
        out.push_str("\n**Notes**\n");
        out.push_str(notes);
        out.push('\n');
    }
    out.trim_end().to_string()
}

/// A short post-action summary (`completion_summary`): outcome, step tally, follow-ups.
pub fn render_post_action_summary(payload: &PostActionPayload) -> String {
    let count = |st: StepStatus| payload.steps.iter().filter(|s| s.status == st).count();
    let mut tally = Vec::new();
    for (st, label) in [(StepStatus::Done, "done"), (StepStatus::Skipped, "skipped"), (StepStatus::Failed, "failed")] {
        let n = count(st);
        if n > 0 {
            tally.push(format!("{n} {label}"));
        }
    }
    let steps = payload.steps.len();
    let noun = if steps == 1 { "step" } else { "steps" };
    let mut out = format!("Post-action {}: {steps} {noun}", outcome_label(payload.outcome));
    if !tally.is_empty() {
        out.push_str(&format!(" ({})", tally.join(", ")));
    }
    out.push('.');
    let failed: Vec<&str> =
        payload.steps.iter().filter(|s| s.status == StepStatus::Failed).map(|s| s.name.as_str()).collect();
    if !failed.is_empty() {
        out.push_str(&format!(" Failed: {}.", one_line(&failed.join("; "))));
    }
    if !payload.follow_ups.is_empty() {
        let list: Vec<String> = payload.follow_ups.iter().map(|f| one_line(f)).collect();
        out.push_str(&format!(" Follow-ups: {}.", list.join("; ")));
    }
    out
}

/// Appends a list item; continuation lines of multi-line text are indented under it.
fn bullet(out: &mut String, text: &str) {
    out.push_str("- ");
    out.push_str(&text.replace('\n', "\n  "));
    out.push('\n');
}

/// Appends `**title**` and a bulleted list, or nothing for an empty list.
fn list_block(out: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("\n**{title}**\n"));
    for i in items {
        bullet(out, i);
    }
}

/// Collapses whitespace runs (newlines included) to single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An inline code span that survives backticks in the text.
fn code_span(s: &str) -> String {
    let text = one_line(s);
    let mut longest = 0;
    let mut run = 0;
    for ch in text.chars() {
        if ch == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest + 1);
    if longest > 0 || text.starts_with('`') || text.ends_with('`') {
        format!("{fence} {text} {fence}")
    } else {
        format!("{fence}{text}{fence}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change() -> HandoffChange {
        HandoffChange { summary: " Added token refresh ".into(), reason: "Plan step 2".into() }
    }

    fn check(cwd: &str) -> HandoffVerification {
        HandoffVerification {
            command: "cargo test".into(),
            cwd: cwd.into(),
            outcome: VerificationOutcome::Pass,
            changed_after: false,
        }
    }

    fn coder_input() -> LoopHandoffInput {
        LoopHandoffInput { changes: Some(vec![change()]), verification: Some(vec![check(".")]), ..Default::default() }
    }

    fn summary(done: &[&str]) -> AuditSummary {
        AuditSummary { done: done.iter().map(|s| s.to_string()).collect(), deviations: vec![], follow_ups: vec![] }
    }

    const SECTIONED: AuditContext = AuditContext { sectioned: true, blocking_bug_count: 0 };

    fn complete() -> LoopCompleteInput {
        LoopCompleteInput {
            outcome: PostActionOutcome::CompletedWithIssues,
            steps: vec![
                PostActionStep {
                    name: "Run review".into(),
                    status: StepStatus::Done,
                    detail: Some("  3 comments ".into()),
                },
                PostActionStep { name: "Push".into(), status: StepStatus::Failed, detail: Some("  ".into()) },
            ],
            follow_ups: vec!["Check CI".into()],
            notes: None,
        }
    }

    #[test]
    fn role_names_and_phase_mapping() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("Coder"), None);
        assert_eq!(role_for_phase(Phase::Coding), Role::Coder);
        assert_eq!(role_for_phase(Phase::Auditing), Role::Auditor);
        assert_eq!(role_for_phase(Phase::PostAction), Role::PostAction);
        assert_eq!(Role::PostAction.tool(), "loop-complete");
        for st in [HandoffStatus::Pending, HandoffStatus::Applied, HandoffStatus::Discarded] {
            assert_eq!(HandoffStatus::parse(st.as_str()), Some(st));
        }
    }

    #[test]
    fn coder_payload_is_normalized() {
        let v = validate_handoff(Role::Coder, &coder_input(), &AuditContext::default()).unwrap();
        assert_eq!(
            v,
            json!({
                "changes": [{"summary": "Added token refresh", "reason": "Plan step 2"}],
                "deviations": [],
                "verification": [{"command": "cargo test", "cwd": ".", "outcome": "pass", "changedAfter": false}]
            })
        );
        let with_notes = LoopHandoffInput { notes: Some("  see x  ".into()), ..coder_input() };
        let v = validate_handoff(Role::Coder, &with_notes, &SECTIONED).unwrap();
        assert_eq!(v["notes"], "see x");
        let blank_notes = LoopHandoffInput { notes: Some(" \n ".into()), ..coder_input() };
        let v = validate_handoff(Role::Coder, &blank_notes, &SECTIONED).unwrap();
        assert!(v.get("notes").is_none());
    }

    #[test]
    fn schema_errors_are_the_other_roles_fields_missing_required_ones_and_empty_lists() {
        let ctx = AuditContext::default();
        let auditor_input = || LoopHandoffInput { summary: Some(summary(&["x"])), ..Default::default() };
        // (role, input, a schema error starting with this, or None: a valid input or a 1006 refusal)
        let cases: Vec<(Role, LoopHandoffInput, Option<&str>)> = vec![
            (Role::Coder, coder_input(), None),
            (Role::Coder, LoopHandoffInput { changes: None, ..coder_input() }, Some("changes is required")),
            (Role::Coder, LoopHandoffInput { verification: None, ..coder_input() }, Some("verification is required")),
            // Empty lists the schema requires entries in (`minItems: 1`).
            (
                Role::Coder,
                LoopHandoffInput { changes: Some(vec![]), ..coder_input() },
                Some("changes needs at least one"),
            ),
            (
                Role::Coder,
                LoopHandoffInput { verification: Some(vec![]), ..coder_input() },
                Some("verification needs at least one"),
            ),
            (
                Role::Auditor,
                LoopHandoffInput { summary: Some(summary(&[])), ..Default::default() },
                Some("summary.done needs"),
            ),
            // A blank entry is a tool error (1006), not the schema's.
            (Role::Coder, LoopHandoffInput { notes: Some(" ".into()), ..coder_input() }, None),
            (
                Role::Coder,
                LoopHandoffInput { summary: auditor_input().summary, ..coder_input() },
                Some("summary is an auditor field"),
            ),
            (Role::Auditor, auditor_input(), None),
            (
                Role::Auditor,
                LoopHandoffInput { deviations: Some(vec![]), ..auditor_input() },
                Some("deviations is a coder field"),
            ),
            (
                Role::Auditor,
                LoopHandoffInput {
                    changes: coder_input().changes,
                    verification: coder_input().verification,
                    ..auditor_input()
                },
                Some("changes, verification are coder fields"),
            ),
            (Role::PostAction, LoopHandoffInput::default(), None),
        ];
        for (i, (role, input, want)) in cases.iter().enumerate() {
            let got = schema_error(*role, input, &SECTIONED);
            match want {
                Some(prefix) => {
                    let got = got.unwrap_or_else(|| panic!("case {i}: no schema error"));
                    assert!(got.starts_with(prefix), "case {i}: {got}");
                    // validate_handoff refuses it with the same message.
                    assert_eq!(validate_handoff(*role, input, &SECTIONED).unwrap_err(), got, "case {i}");
                }
                None => assert_eq!(got, None, "case {i}"),
            }
        }
        // Where no summary is allowed, an empty `done` hears "forbidden" (1006) first.
        let empty_done = LoopHandoffInput { summary: Some(summary(&[])), ..Default::default() };
        let blocked = AuditContext { sectioned: true, blocking_bug_count: 2 };
        for (ctx, why) in [
            (ctx, "summary is forbidden in non-sectioned loops"),
            (blocked, "summary is forbidden while blocking bug findings remain open (2 blocking"),
        ] {
            assert_eq!(schema_error(Role::Auditor, &empty_done, &ctx), None);
            let e = validate_handoff(Role::Auditor, &empty_done, &ctx).unwrap_err();
            assert!(e.starts_with(why), "{e}");
        }
    }

    #[test]
    fn coder_requires_changes() {
        let ctx = AuditContext::default();
        let none = LoopHandoffInput { changes: None, ..coder_input() };
        let e = validate_handoff(Role::Coder, &none, &ctx).unwrap_err();
        assert!(e.starts_with("changes is required"), "{e}");
        let empty = LoopHandoffInput { changes: Some(vec![]), ..coder_input() };
        let e = validate_handoff(Role::Coder, &empty, &ctx).unwrap_err();
        assert!(e.contains("changes needs at least one"), "{e}");
    }

    #[test]
    fn coder_requires_verification() {
        let ctx = AuditContext::default();
        let none = LoopHandoffInput { verification: None, ..coder_input() };
        let e = validate_handoff(Role::Coder, &none, &ctx).unwrap_err();
        assert!(e.starts_with("verification is required"), "{e}");
        let empty = LoopHandoffInput { verification: Some(vec![]), ..coder_input() };
        let e = validate_handoff(Role::Coder, &empty, &ctx).unwrap_err();
        assert!(e.contains("verification needs at least one"), "{e}");
    }

    #[test]
    fn coder_rejects_blank_text_naming_the_field() {
        let ctx = AuditContext::default();
        let mut input = coder_input();
        input.changes = Some(vec![change(), HandoffChange { summary: "x".into(), reason: "   ".into() }]);
        let e = validate_handoff(Role::Coder, &input, &ctx).unwrap_err();
        assert_eq!(e, "changes[1].reason must not be empty.");

        let mut input = coder_input();
        input.verification = Some(vec![HandoffVerification { command: "\t".into(), ..check(".") }]);
        let e = validate_handoff(Role::Coder, &input, &ctx).unwrap_err();
        assert_eq!(e, "verification[0].command must not be empty.");

        let mut input = coder_input();
        input.deviations =
            Some(vec![HandoffDeviation { plan_item: "step 3".into(), actual: "".into(), reason: "r".into() }]);
        let e = validate_handoff(Role::Coder, &input, &ctx).unwrap_err();
        assert_eq!(e, "deviations[0].actual must not be empty.");
    }

    #[test]
    fn coder_cwd_must_be_worktree_relative() {
        let ctx = AuditContext::default();
        for bad in ["/abs/path", "~/x", "C:\\repo", "../outside", "a/../../b", ""] {
            let mut input = coder_input();
            input.verification = Some(vec![check(bad)]);
            let e = validate_handoff(Role::Coder, &input, &ctx).unwrap_err();
            assert!(e.starts_with("verification[0].cwd must"), "{bad}: {e}");
        }
        for good in [".", "server", "crates/a", "./x", "a..b"] {
            let mut input = coder_input();
            input.verification = Some(vec![check(good)]);
            assert!(validate_handoff(Role::Coder, &input, &ctx).is_ok(), "{good}");
        }
    }

    #[test]
    fn coder_rejects_auditor_fields() {
        let input = LoopHandoffInput { summary: Some(summary(&["x"])), ..coder_input() };
        let e = validate_handoff(Role::Coder, &input, &SECTIONED).unwrap_err();
        assert!(e.starts_with("summary is an auditor field"), "{e}");
    }

    #[test]
    fn auditor_rejects_coder_fields_by_name() {
        let e = validate_handoff(Role::Auditor, &coder_input(), &SECTIONED).unwrap_err();
        assert!(e.starts_with("changes, verification are coder fields"), "{e}");
        let input = LoopHandoffInput { deviations: Some(vec![]), ..Default::default() };
        let e = validate_handoff(Role::Auditor, &input, &SECTIONED).unwrap_err();
        assert!(e.starts_with("deviations is a coder field"), "{e}");
        assert!(e.contains("summary.deviations"), "{e}");
    }

    #[test]
    fn auditor_summary_is_optional() {
        let v = validate_handoff(Role::Auditor, &LoopHandoffInput::default(), &SECTIONED).unwrap();
        assert_eq!(v, json!({}));
        let input = LoopHandoffInput { notes: Some("dirty: see findings".into()), ..Default::default() };
        let ctx = AuditContext { sectioned: false, blocking_bug_count: 4 };
        let v = validate_handoff(Role::Auditor, &input, &ctx).unwrap();
        assert_eq!(v, json!({"notes": "dirty: see findings"}));
    }

    #[test]
    fn auditor_summary_needs_done() {
        let input = LoopHandoffInput { summary: Some(summary(&[])), ..Default::default() };
        let e = validate_handoff(Role::Auditor, &input, &SECTIONED).unwrap_err();
        assert!(e.starts_with("summary.done needs at least one entry"), "{e}");
        let input = LoopHandoffInput { summary: Some(summary(&["ok", " "])), ..Default::default() };
        let e = validate_handoff(Role::Auditor, &input, &SECTIONED).unwrap_err();
        assert_eq!(e, "summary.done[1] must not be empty.");
        let input = LoopHandoffInput {
            summary: Some(AuditSummary { follow_ups: vec!["".into()], ..summary(&["ok"]) }),
            ..Default::default()
        };
        let e = validate_handoff(Role::Auditor, &input, &SECTIONED).unwrap_err();
        assert_eq!(e, "summary.followUps[0] must not be empty.");
    }

    #[test]
    fn auditor_summary_forbidden_in_non_sectioned_loops() {
        let input = LoopHandoffInput { summary: Some(summary(&["x"])), ..Default::default() };
        let e = validate_handoff(Role::Auditor, &input, &AuditContext::default()).unwrap_err();
        assert!(e.starts_with("summary is forbidden in non-sectioned loops"), "{e}");
    }

    #[test]
    fn auditor_summary_forbidden_with_blocking_bugs() {
        let input = LoopHandoffInput { summary: Some(summary(&["x"])), ..Default::default() };
        for (n, words) in [(1, "1 blocking bug finding remains"), (3, "3 blocking bug findings remain")] {
            let ctx = AuditContext { sectioned: true, blocking_bug_count: n };
            let e = validate_handoff(Role::Auditor, &input, &ctx).unwrap_err();
            assert!(e.starts_with("summary is forbidden while blocking bug findings remain open"), "{e}");
            assert!(e.contains(words), "{e}");
        }
    }

    #[test]
    fn auditor_clean_summary_is_stored() {
        let input = LoopHandoffInput {
            summary: Some(AuditSummary {
                done: vec![" Endpoint added ".into()],
                deviations: vec!["Used a cache".into()],
                follow_ups: vec![],
            }),
            notes: None,
            ..Default::default()
        };
        let v = validate_handoff(Role::Auditor, &input, &SECTIONED).unwrap();
        assert_eq!(
            v,
            json!({"summary": {"done": ["Endpoint added"], "deviations": ["Used a cache"], "followUps": []}})
        );
    }

    /// Review YU: a handoff is bounded (it goes into a prompt) and carries no NUL.
    #[test]
    fn a_handoff_is_bounded_and_without_nul() {
        let ctx = AuditContext { sectioned: false, blocking_bug_count: 0 };
        let with = |summary: String| -> LoopHandoffInput {
            serde_json::from_value(serde_json::json!({
                "changes": [{ "summary": summary, "reason": "r" }],
                "verification": [{ "command": "true", "cwd": ".", "outcome": "pass", "changedAfter": false }]
            }))
            .unwrap()
        };
        assert!(validate_handoff(Role::Coder, &with("x".repeat(1000)), &ctx).is_ok());
        let e = validate_handoff(Role::Coder, &with("x".repeat(MAX_HANDOFF_BYTES)), &ctx).unwrap_err();
        assert!(e.contains("over the 1048576"), "{e}");
        let e = validate_handoff(Role::Coder, &with("a\0b".into()), &ctx).unwrap_err();
        assert!(e.contains("NUL"), "{e}");
        // The text `\u0000` is no NUL.
        assert!(validate_handoff(Role::Coder, &with("escaped as \\u0000".into()), &ctx).is_ok());
    }

    #[test]
    fn post_action_role_must_use_loop_complete() {
        let e = validate_handoff(Role::PostAction, &coder_input(), &SECTIONED).unwrap_err();
        assert!(e.contains("call"), "{e}");
        assert!(e.contains("loop-complete"), "{e}");
    }

    #[test]
    fn complete_only_in_post_action() {
        for phase in [Phase::Coding, Phase::Auditing] {
            let e = validate_complete(phase, &complete()).unwrap_err();
            assert!(e.starts_with("loop-complete is only valid in the post_action phase"), "{e}");
            assert!(e.contains(phase.as_str()), "{e}");
        }
        let v = validate_complete(Phase::PostAction, &complete()).unwrap();
        assert_eq!(
            v,
            json!({
                "outcome": "completed_with_issues",
                "steps": [
                    {"name": "Run review", "status": "done", "detail": "3 comments"},
                    {"name": "Push", "status": "failed"}
                ],
                "followUps": ["Check CI"]
            })
        );
    }

    #[test]
    fn complete_requires_steps_and_text() {
        let mut input = complete();
        input.steps.clear();
        let e = validate_complete(Phase::PostAction, &input).unwrap_err();
        assert!(e.starts_with("steps needs at least one"), "{e}");
        let mut input = complete();
        input.steps[1].name = " ".into();
        let e = validate_complete(Phase::PostAction, &input).unwrap_err();
        assert_eq!(e, "steps[1].name must not be empty.");
        let mut input = complete();
        input.follow_ups = vec!["ok".into(), "".into()];
        let e = validate_complete(Phase::PostAction, &input).unwrap_err();
        assert_eq!(e, "followUps[1] must not be empty.");
    }

    #[test]
    fn stored_payloads_round_trip() {
        let v = validate_handoff(Role::Coder, &coder_input(), &SECTIONED).unwrap();
        let parsed = parse_stored(Role::Coder, &v.to_string()).unwrap();
        assert_eq!(parsed.role(), Role::Coder);
        assert_eq!(parsed.to_value(), v);

        let input = LoopHandoffInput { summary: Some(summary(&["done"])), ..Default::default() };
        let v = validate_handoff(Role::Auditor, &input, &SECTIONED).unwrap();
        assert_eq!(parse_stored(Role::Auditor, &v.to_string()).unwrap().to_value(), v);
        assert_eq!(parse_stored(Role::Auditor, "{}").unwrap(), StoredHandoff::Auditor(AuditorPayload::default()));

        let v = validate_complete(Phase::PostAction, &complete()).unwrap();
        let parsed = parse_stored(Role::PostAction, &v.to_string()).unwrap();
        assert_eq!(parsed.to_value(), v);
    }

    #[test]
    fn stored_payloads_are_revalidated_strictly() {
        let cases = [
            (Role::Coder, "not json"),
            (Role::Coder, "null"),
            (Role::Coder, "[]"),
            (
                Role::Coder,
                r#"{"changes":[],"verification":[{"command":"x","cwd":".","outcome":"pass","changedAfter":false}]}"#,
            ),
            (Role::Coder, r#"{"changes":[{"summary":"a","reason":"b"}]}"#),
            (
                Role::Coder,
                r#"{"changes":[{"summary":"a","reason":"b"}],"verification":[{"command":"x","cwd":".","outcome":"maybe","changedAfter":false}]}"#,
            ),
            (
                Role::Coder,
                r#"{"changes":[{"summary":"a","reason":"b"}],"verification":[{"command":"x","cwd":"/abs","outcome":"pass","changedAfter":false}]}"#,
            ),
            (
                Role::Coder,
                r#"{"changes":[{"summary":"a","reason":"b"}],"verification":[{"command":"x","cwd":".","outcome":"pass","changedAfter":false}],"summary":{"done":["x"]}}"#,
            ),
            (Role::Auditor, r#"{"changes":[{"summary":"a","reason":"b"}]}"#),
            (Role::Auditor, r#"{"summary":{"done":[]}}"#),
            (Role::Auditor, r#"{"summary":{"done":["x"],"extra":1}}"#),
            (Role::Auditor, r#"{"verdict":"clean"}"#),
            (Role::PostAction, r#"{"outcome":"completed","steps":[]}"#),
            (Role::PostAction, r#"{"outcome":"done","steps":[{"name":"a","status":"done"}]}"#),
            (Role::PostAction, r#"{"steps":[{"name":"a","status":"done"}]}"#),
            (Role::PostAction, r#"{"outcome":"failed","steps":[{"name":" ","status":"done"}]}"#),
        ];
        for (role, payload) in cases {
            let e = parse_stored(role, payload).unwrap_err();
            assert!(e.starts_with(&format!("stored {role} handoff is invalid: ")), "{role} {payload}: {e}");
        }
        // A stored coder payload without deviations gets the default.
        let ok = r#"{"changes":[{"summary":"a","reason":"b"}],"verification":[{"command":"x","cwd":".","outcome":"not-run","changedAfter":true}]}"#;
        match parse_stored(Role::Coder, ok).unwrap() {
            StoredHandoff::Coder(p) => assert!(p.deviations.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn renders_coder_handoff() {
        let payload = CoderPayload {
            changes: vec![HandoffChange { summary: "Added refresh".into(), reason: "Plan step 2\nand step 3".into() }],
            deviations: vec![HandoffDeviation {
                plan_item: "Use redis".into(),
                actual: "In-memory cache".into(),
                reason: "No redis in sandbox".into(),
            }],
            verification: vec![
                check("."),
                HandoffVerification {
                    command: "echo `date`".into(),
                    cwd: "server".into(),
                    outcome: VerificationOutcome::Fail,
                    changed_after: true,
                },
            ],
            notes: Some("Flaky test skipped.".into()),
        };
        let text = render_coder_handoff(&payload);
        assert_eq!(
            text,
            "**Changes**\n\
             - Added refresh — Plan step 2\n  and step 3\n\
             \n**Deviations from the plan**\n\
             - Plan: Use redis → Actual: In-memory cache (why: No redis in sandbox)\n\
             \n**Verification**\n\
             - `cargo test` in `.`: pass\n\
             - `` echo `date` `` in `server`: FAIL (code changed after this check)\n\
             \n**Notes for the auditor**\n\
             Flaky test skipped."
        );
        let bare = CoderPayload { deviations: vec![], notes: None, ..payload };
        let text = render_coder_handoff(&bare);
        assert!(text.contains("- None reported."));
        assert!(!text.contains("Notes"));
    }

    #[test]
    fn renders_audit_result() {
        let payload = AuditorPayload {
            summary: Some(AuditSummary {
                done: vec!["Endpoint".into()],
                deviations: vec![],
                follow_ups: vec!["Docs".into()],
            }),
            notes: Some("Looks good.".into()),
        };
        let text = render_audit_result(&payload, 0);
        assert!(text.starts_with("**Audit verdict:** clean"), "{text}");
        assert!(text.contains("**Done**\n- Endpoint"));
        assert!(!text.contains("**Deviations**"));
        assert!(text.contains("**Follow-ups**\n- Docs"));
        assert!(text.ends_with("**Auditor notes**\nLooks good."));
        let text = render_audit_result(&AuditorPayload::default(), 2);
        assert_eq!(text, "**Audit verdict:** changes needed — 2 blocking findings remain open.");
    }

    #[test]
    fn renders_post_action_report_and_summary() {
        let payload: PostActionPayload =
            serde_json::from_value(validate_complete(Phase::PostAction, &complete()).unwrap()).unwrap();
        assert_eq!(
            render_post_action_report(&payload),
            "**Post-action outcome:** completed with issues\n\
             \n**Steps**\n\
             - [done] Run review — 3 comments\n\
             - [failed] Push\n\
             \n**Follow-ups**\n\
             - Check CI"
        );
        assert_eq!(
            render_post_action_summary(&payload),
            "Post-action completed with issues: 2 steps (1 done, 1 failed). Failed: Push. \
             Follow-ups: Check CI."
        );
        let single = LoopCompleteInput {
            outcome: PostActionOutcome::Completed,
            steps: vec![PostActionStep { name: "Review".into(), status: StepStatus::Skipped, detail: None }],
            follow_ups: vec![],
            notes: Some("All fine.".into()),
        };
        assert_eq!(render_post_action_summary(&single), "Post-action completed: 1 step (1 skipped).");
        assert!(render_post_action_report(&single).ends_with("**Notes**\nAll fine."));
        let empty = LoopCompleteInput { steps: vec![], notes: None, ..single };
        assert_eq!(render_post_action_summary(&empty), "Post-action completed: 0 steps.");
    }

    #[test]
    fn code_spans_survive_backticks() {
        assert_eq!(code_span("ls"), "`ls`");
        assert_eq!(code_span("a``b"), "``` a``b ```");
        assert_eq!(code_span("`x"), "`` `x ``");
        assert_eq!(code_span("a\n b"), "`a b`");
    }

    #[test]
    fn constants() {
        assert_eq!(HANDOFF_RECORDED, "Handoff recorded — end your turn now; make no further changes.");
        assert!(HANDOFF_NUDGE.contains("loop-handoff/loop-complete"));
        assert!(SUMMARY_NUDGE.contains("summary"));
    }
}
