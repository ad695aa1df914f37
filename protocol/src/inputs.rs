//! Tool inputs. Each type is the single source of its tool's JSON Schema
//! (`forge.tools` → `inputSchema`) and of its parser: unknown fields are rejected.
//!
//! Field names follow `seeds/forge-tools.md` exactly (some tools use snake_case,
//! others camelCase, as Forge does).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `forge.plan-read`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanReadInput {
    /// When reading a plan: line number to start from, 1-indexed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// When reading a plan: maximum number of lines to return; defaults to 2000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// When recent is true: number of recent plans to list or search; defaults to 20, capped at 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Regex pattern to search plan content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Optional loop name to read a loop-scoped plan directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    /// Explicit session ID to read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// List or search recent project-scoped plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent: Option<bool>,
}

/// `forge.plan-write`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanWriteInput {
    /// Stored plan markdown. Use <!-- forge-section --> markers before each ## Phase heading.
    pub content: String,
    /// Extension (agent `user` only): write this session's plan instead of the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `forge.plan-edit`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanEditInput {
    /// Exact text to replace, including indentation. Must match exactly once unless replaceAll is true. An empty value creates the plan only when none exists.
    #[serde(rename = "oldString")]
    pub old_string: String,
    /// Replacement text. Must differ from oldString.
    #[serde(rename = "newString")]
    pub new_string: String,
    /// Replace every occurrence instead of requiring a unique match.
    #[serde(rename = "replaceAll", default, skip_serializing_if = "Option::is_none")]
    pub replace_all: Option<bool>,
    /// Extension (agent `user` only): edit this session's plan instead of the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `forge.section-read`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SectionReadInput {
    /// Optional 0-based section index. If omitted, returns the lowest-index incomplete section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_index: Option<i64>,
    /// When true, returns every pending section after the current one. Cannot be combined with section_index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_suffix: Option<bool>,
}

/// A section's title and executable content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SectionSpec {
    pub title: String,
    pub content: String,
}

/// `forge.plan-adjust`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanAdjustInput {
    /// Replacement list for the not-yet-started sections after the current one (destructive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sections: Option<Vec<SectionSpec>>,
    /// Revision of the section currently under audit, edited in place.
    #[serde(rename = "currentSection", default, skip_serializing_if = "Option::is_none")]
    pub current_section: Option<SectionSpec>,
    /// Why the plan needs adjustment. Required for every adjustment.
    pub rationale: String,
}

/// `bug` or `warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Bug,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Bug => "bug",
            Severity::Warning => "warning",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "bug" => Some(Severity::Bug),
            "warning" => Some(Severity::Warning),
            _ => None,
        }
    }
}

/// `forge.review-write`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewWriteInput {
    /// File path where the finding is located.
    pub file: String,
    /// Line number of the finding (1-based, at most 2^31, the last line an LSP position names).
    #[schemars(range(min = 1, max = 2147483648_i64))]
    pub line: i64,
    /// bug or warning.
    pub severity: Severity,
    /// Clear description of the issue.
    pub description: String,
    /// Optional conditions under which the issue manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Write as a cross-section finding with sectionIndex: null.
    #[serde(rename = "crossSection", default, skip_serializing_if = "Option::is_none")]
    pub cross_section: Option<bool>,
    /// Explicit section index override.
    #[serde(rename = "sectionIndex", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>")]
    pub section_index: Option<serde_json::Number>,
}

/// `forge.review-read`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewReadInput {
    /// Target a specific loop, including completed loops.
    #[serde(rename = "loopName", default, skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    /// Filter by file path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Regex search across finding descriptions and scenarios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Read only cross-section findings.
    #[serde(rename = "crossSection", default, skip_serializing_if = "Option::is_none")]
    pub cross_section: Option<bool>,
    /// Read findings from all sections instead of the current and earlier sections plus
    /// cross-section findings.
    #[serde(rename = "allSections", default, skip_serializing_if = "Option::is_none")]
    pub all_sections: Option<bool>,
    /// Return durable audit-attempt history instead of live findings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<bool>,
    /// Page size: findings 1 to 5000 (default 100); with attempts: true, 1 to 100 (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// Read findings (or attempts) older than this positive id: the previous reply's nextBeforeId.
    #[serde(rename = "beforeId", default, skip_serializing_if = "Option::is_none")]
    pub before_id: Option<i64>,
}

/// `forge.review-delete`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewDeleteInput {
    /// File path of the finding to delete.
    pub file: String,
    /// Line number of the finding to delete.
    #[schemars(range(min = 1))]
    pub line: i64,
    /// Explicit section index override.
    #[serde(rename = "sectionIndex", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>")]
    pub section_index: Option<serde_json::Number>,
    /// Delete cross-section findings.
    #[serde(rename = "crossSection", default, skip_serializing_if = "Option::is_none")]
    pub cross_section: Option<bool>,
    /// Extension (agent `user` only): delete in this loop's findings.
    #[serde(rename = "loopName", default, skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
}

/// `loop` (default) or `new-session`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ExecuteMode {
    Loop,
    NewSession,
}

/// `forge.execute-plan`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutePlanInput {
    /// Required short title for the session list.
    pub title: String,
    /// Optional inline plan. If omitted, the current session's stored plan is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Optional loop name, slugified and uniquified.
    #[serde(rename = "loopName", default, skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    /// Execution mode: loop (default) or new-session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ExecuteMode>,
    /// Optional git branch for the loop's worktree, used instead of `forge/<name>`. It must
    /// not exist yet (the loop creates it from HEAD); loop mode only. The loop name is
    /// still reserved against `forge/<name>`; `cleanup loop` keeps a branch outside `forge/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// `forge.loop-cancel`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoopCancelInput {
    /// Optional loop name. If omitted, cancels the only active loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `forge.loop-status`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoopStatusInput {
    /// Optional loop name for detailed status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Restart a non-completed loop by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<bool>,
    /// Force restart an active or stuck loop. Required for running loops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// Coder `changes` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffChange {
    pub summary: String,
    pub reason: String,
}

/// Coder `deviations` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HandoffDeviation {
    pub plan_item: String,
    pub actual: String,
    pub reason: String,
}

/// `pass`, `fail` or `not-run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum VerificationOutcome {
    Pass,
    Fail,
    NotRun,
}

/// Coder `verification` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HandoffVerification {
    pub command: String,
    /// Worktree-relative directory the command ran in.
    pub cwd: String,
    pub outcome: VerificationOutcome,
    /// Whether code changed after the check ran.
    pub changed_after: bool,
}

/// Auditor `summary`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditSummary {
    /// What the section delivered (at least one).
    #[schemars(length(min = 1))]
    pub done: Vec<String>,
    #[serde(default)]
    pub deviations: Vec<String>,
    #[serde(default)]
    pub follow_ups: Vec<String>,
}

/// `forge.loop-handoff`: the union of the coder and auditor fields; the loop's phase
/// decides which role schema applies (the other role's fields are rejected).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoopHandoffInput {
    /// Coder only. What changed and why (at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub changes: Option<Vec<HandoffChange>>,
    /// Coder only, optional. Where the implementation departed from the plan section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deviations: Option<Vec<HandoffDeviation>>,
    /// Coder only. Checks run (at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub verification: Option<Vec<HandoffVerification>>,
    /// Auditor only. Required for a clean section audit; forbidden otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<AuditSummary>,
    /// Optional free text for either role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// `completed`, `completed_with_issues` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PostActionOutcome {
    Completed,
    CompletedWithIssues,
    Failed,
}

/// `done`, `skipped` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Done,
    Skipped,
    Failed,
}

/// A post-action workflow step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostActionStep {
    pub name: String,
    pub status: StepStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `forge.loop-complete`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoopCompleteInput {
    pub outcome: PostActionOutcome,
    /// One entry per workflow step (at least one).
    #[schemars(length(min = 1))]
    pub steps: Vec<PostActionStep>,
    #[serde(default)]
    pub follow_ups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// `forge.shell`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShellInput {
    /// Shell command line, run with `sh -c` inside the loop's sandbox.
    pub command: String,
    /// Working directory relative to the worktree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Timeout in milliseconds (default 120000, max 600000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `forge.tools`: no input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoInput {}

/// `forge.apply-patch`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchInput {
    /// The patch: `*** Begin Patch`, then `*** Add File: <path>`, `*** Update File: <path>`
    /// (optionally `*** Move to: <path>`) with `@@` hunks, or `*** Delete File: <path>`, then
    /// `*** End Patch`. Paths are relative to the root (the project, or the loop worktree for
    /// loop sessions).
    pub patch: String,
}

/// `forge.grep`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrepInput {
    /// Regular expression (Rust `regex` syntax, as ripgrep).
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// A directory or file inside the root to search (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Only files whose path relative to the root matches this glob (e.g. `*.rs`, `src/**/*.ts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<String>,
    /// Match case exactly (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case_sensitive: Option<bool>,
    /// Most matching lines returned (default 200, at most 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 5000))]
    pub limit: Option<u32>,
}

/// `forge.glob`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobInput {
    /// Glob over paths relative to the searched directory (e.g. `**/*.rs`, `src/*.md`).
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// A directory inside the root to search (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `forge.ast-grep-search`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AstGrepSearchInput {
    /// An ast-grep pattern: code of the language with metavariables (`$NAME` one node,
    /// `$$$ARGS` any number), e.g. `console.log($MSG)`.
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// The language: rust, python, typescript, tsx, javascript, go, java, c, cpp (common
    /// aliases such as `rs`, `py`, `ts`, `js`, `c++` are accepted).
    pub lang: String,
    /// A directory or file inside the root to search (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `forge.ast-grep-replace`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AstGrepReplaceInput {
    /// An ast-grep pattern (see `forge.ast-grep-search`).
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// The replacement: code that may use the pattern's metavariables, e.g. `logger.info($MSG)`.
    pub rewrite: String,
    /// The language (see `forge.ast-grep-search`).
    pub lang: String,
    /// A directory or file inside the root to rewrite (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Preview only (default true); `false` writes every changed file, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
}

/// `forge.webfetch`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebfetchInput {
    /// An `http://` or `https://` URL.
    pub url: String,
    /// `markdown` (default: the main content of an HTML page converted to markdown, with
    /// `llms.txt` tried first for a site root), `text` (the main content as plain text) or
    /// `html` (the body as sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Seconds for the whole request (default 30, at most 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// `forge.interview-submit-state`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterviewSubmitStateInput {
    /// One-line status of this interview turn.
    pub status: String,
    /// The full specification (required on the first turn; on a later turn it replaces the stored spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// A unified diff (`@@ -a,b +c,d @@` hunks) against the stored spec body (later turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The questions still open for the user (replaces the stored list; omit to keep it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<String>>,
}

/// `forge.task-status`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskStatusInput {
    /// Loop name (or a part of it); default: the only running loop you own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A session of the loop; default: its current phase session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `forge.task-message`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskMessageInput {
    /// Loop name (or a part of it); default: the only running loop you own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A session of the loop (current or standby); default: its current phase session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The message (at most 16 KiB), put before the session's next prompt.
    pub message: String,
}

/// `forge.task-cancel`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskCancelInput {
    /// Loop name (or a part of it); default: the only running loop you own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The loop's current phase session (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `forge.task-revive`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskReviveInput {
    /// Loop name (or a part of it); default: the only running loop you own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The loop's current phase session (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The instruction the resumed turn starts with (at most 64 KiB).
    pub instruction: String,
}
