//! The loop prompts: what the coder, the auditor and the post-action agent are told at
//! the start of each phase turn.
//!
//! Every builder is a pure function of a [`PromptContext`] the engine gathers (loop row,
//! section rows, open findings, attempt history, the coder's rendered handoff, the audit
//! scope). Turns end with a tool call, never with a text block: each prompt closes with
//! the exact `forge-lsp call loop-handoff …` / `loop-complete …` instruction for its role
//! ([`handoff_instruction`]), with a concrete command line whose JSON the tool accepts.
//!
//! Which builder runs when:
//!
//! | situation | builder |
//! |---|---|
//! | first coder turn of a section (also a restart without current-section bugs) | [`section_initial`] |
//! | fresh coder session after a dirty section audit (or a restart with bugs) | [`section_continuation`] |
//! | first coder turn of a non-sectioned plan loop | [`plan_initial`] |
//! | fresh coder session after a dirty non-sectioned audit | [`plan_continuation`] |
//! | resumed (standby) coder session after a dirty audit | [`coder_follow_up`] |
//! | fresh audit session | [`audit`] |
//! | resumed (standby) audit session | [`audit_follow_up`] |
//! | post-action phase | [`post_action`] |
//!
//! Section numbers shown to agents are 1-based (`section 2/4`); the `sectionIndex` /
//! `section_index` tool arguments are 0-based, and the prompts spell out both where it
//! matters.

use std::fmt::Write as _;

use serde_json::json;

use crate::handoff::Role;
use crate::review::Finding;
use crate::text::shell_quote;

/// A finding that stayed open through this many consecutive dirty audits is called out
/// as recurring (coder: fix it differently or document it; auditor: re-evaluate it).
pub const RECURRENCE_ESCALATION_THRESHOLD: usize = 3;

/// At most this many changed or untracked files are listed in an audit prompt; the rest
/// are counted.
pub const MAX_LISTED_FILES: usize = 200;

/// One section of a sectioned plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SectionView {
    /// 0-based section index (shown to agents as `index + 1`).
    pub index: u32,
    /// Display label only.
    pub title: String,
    /// The executable requirement.
    pub content: String,
    /// `pending`, `in_progress`, `completed`, …
    pub status: String,
    /// Auditor summary of a completed section.
    pub done: Vec<String>,
    pub deviations: Vec<String>,
    pub follow_ups: Vec<String>,
}

/// One recorded attempt (a coder handoff and the audit that followed it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttemptView {
    pub number: i64,
    pub iteration: i64,
    /// `clean`, `dirty`, or `None` while not yet audited.
    pub outcome: Option<String>,
    /// The rendered coder handoff of the attempt.
    pub coder_decisions: Option<String>,
    /// The findings open after the attempt's audit.
    pub findings_after: Vec<Finding>,
}

/// What an audit looks at: everything changed since one commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditScope {
    /// How to name the commit, e.g. "the checkpoint commit `section 2: Add tokens`" or
    /// "the loop's base commit".
    pub since_label: String,
    /// The commit, in hex.
    pub since_commit: String,
    /// Tracked changes since that commit (with status letters if the caller likes).
    pub changed_files: Vec<String>,
    /// Untracked files in the worktree.
    pub untracked_files: Vec<String>,
}

/// Everything a prompt builder needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptContext {
    pub loop_name: String,
    pub branch: String,
    pub worktree: String,
    /// The master plan text.
    pub plan: String,
    pub iteration: u32,
    /// 0 = unlimited.
    pub max_iterations: u32,
    /// 0 = non-sectioned plan loop.
    pub total_sections: u32,
    /// The section being worked on or audited.
    pub current: Option<SectionView>,
    /// Earlier completed sections, with their summaries.
    pub completed: Vec<SectionView>,
    /// Outstanding findings rendered in full: the blocking bugs for sectioned loops, all
    /// open findings for non-sectioned ones.
    pub findings: Vec<Finding>,
    /// Attempt history of this section / plan, oldest first.
    pub attempts: Vec<AttemptView>,
    /// The rendered coder handoff of the turn being audited.
    pub coder_decisions: Option<String>,
    pub scope: Option<AuditScope>,
    pub post_action_skill: Option<String>,
    pub post_action_prompt: Option<String>,
}

impl PromptContext {
    /// The loop runs a sectioned plan.
    pub fn sectioned(&self) -> bool {
        self.total_sections > 0
    }

    fn is_last_section(&self) -> bool {
        self.sectioned() && self.current.as_ref().is_some_and(|s| s.index + 1 >= self.total_sections)
    }
}

// ---------------------------------------------------------------------------------------
// Example payloads (each is checked by the tests against the tool's validation)
// ---------------------------------------------------------------------------------------

const CODER_EXAMPLE: &str = r#"{"changes":[{"summary":"Added token refresh to the API client","reason":"The section requires expired tokens to be renewed without a new login"}],"deviations":[],"verification":[{"command":"cargo test -p client","cwd":".","outcome":"pass","changedAfter":false}],"notes":"Refresh is retried once; see client/src/auth.rs"}"#;

const AUDITOR_DIRTY_EXAMPLE: &str =
    r#"{"notes":"Deleted 1 resolved finding; 2 bugs remain: expiry is never checked, refresh has no test"}"#;

const AUDITOR_CLEAN_EXAMPLE: &str = r#"{"summary":{"done":["Token refresh in the API client, covered by tests"],"deviations":["Tokens are cached in memory instead of on disk"],"followUps":["Make the refresh margin configurable"]},"notes":"All section checks pass"}"#;

const AUDITOR_PLAN_EXAMPLE: &str = r#"{"notes":"Deleted 2 resolved findings; 1 bug remains open in src/auth.rs"}"#;

const POST_ACTION_EXAMPLE: &str = r#"{"outcome":"completed_with_issues","steps":[{"name":"Run the review workflow","status":"done","detail":"2 small fixes applied"},{"name":"Run the test suite","status":"failed","detail":"net::retry fails intermittently"}],"followUps":["Investigate the flaky net::retry test"],"notes":"No other problems found"}"#;

// ---------------------------------------------------------------------------------------
// Public builders
// ---------------------------------------------------------------------------------------

/// The header and standing rules of every loop prompt:
/// `[Forge loop <name> · section k/N · iteration i/max]`, who the agent is, that the loop
/// is unattended (no questions), and that work stays inside the worktree.
pub fn loop_notice(ctx: &PromptContext, role: Role) -> String {
    notice(ctx, role, false)
}

/// Coder, first turn of a section.
pub fn section_initial(ctx: &PromptContext) -> String {
    let blocks = vec![
        notice(ctx, Role::Coder, false),
        completed_sections(ctx),
        current_section(ctx, "Your task: "),
        plan_reference(ctx),
        coder_working_rules(ctx),
        handoff_instruction(Role::Coder, true),
    ];
    join(blocks)
}

/// Coder, fresh session after a dirty section audit (or a restart with open bugs).
pub fn section_continuation(ctx: &PromptContext) -> String {
    let blocks = vec![
        notice(ctx, Role::Coder, true),
        "The auditor reviewed the previous attempt at this section and left the findings below \
         open. This turn is about resolving them; the rest of the section's work is already in \
         the worktree."
            .to_string(),
        completed_sections(ctx),
        current_section(ctx, ""),
        plan_reference(ctx),
        coder_findings(ctx),
        recurring_block(ctx, Role::Coder),
        attempt_history(ctx),
        remediation_policy(),
        handoff_instruction(Role::Coder, true),
    ];
    join(blocks)
}

/// Coder, first turn of a non-sectioned plan loop: the plan text and the handoff.
pub fn plan_initial(ctx: &PromptContext) -> String {
    let blocks = vec![
        notice(ctx, Role::Coder, false),
        format!(
            "## Your task: implement this plan\n\nImplement the whole plan below in the worktree. \
             `forge-lsp call plan-read` prints it again.\n\n{}",
            fenced(&ctx.plan)
        ),
        coder_working_rules(ctx),
        handoff_instruction(Role::Coder, false),
    ];
    join(blocks)
}

/// Coder, fresh session after a dirty audit of a non-sectioned plan loop.
pub fn plan_continuation(ctx: &PromptContext) -> String {
    let blocks = vec![
        notice(ctx, Role::Coder, true),
        "The auditor reviewed the previous attempt at the plan and left the findings below open. \
         This turn is about resolving them; the earlier work is already in the worktree."
            .to_string(),
        format!("## The plan\n\n{}", fenced(&ctx.plan)),
        coder_findings(ctx),
        recurring_block(ctx, Role::Coder),
        attempt_history(ctx),
        remediation_policy(),
        handoff_instruction(Role::Coder, false),
    ];
    join(blocks)
}

/// Auditor, fresh audit session.
pub fn audit(ctx: &PromptContext) -> String {
    let sectioned = ctx.sectioned();
    let mut blocks = vec![notice(ctx, Role::Auditor, false)];
    if sectioned {
        blocks.push(completed_sections(ctx));
        blocks.push(current_section(ctx, "Under audit: "));
        blocks.push(plan_reference(ctx));
    } else {
        blocks.push(format!(
            "## Under audit: the plan\n\nThe change must implement this whole plan. \
             `forge-lsp call plan-read` prints it again.\n\n{}",
            fenced(&ctx.plan)
        ));
    }
    blocks.push(coder_decisions_block(ctx));
    blocks.push(scope_block(ctx));
    blocks.push(auditor_findings(ctx));
    blocks.push(recurring_block(ctx, Role::Auditor));
    blocks.push(audit_method(ctx));
    blocks.push(findings_management(ctx));
    blocks.push(plan_adjust_block(ctx));
    blocks.push(verdict_rule(ctx));
    blocks.push(handoff_instruction(Role::Auditor, sectioned));
    join(blocks)
}

/// The post-action phase: master plan, branch, the configured skill and prompt, then
/// `loop-complete`.
pub fn post_action(ctx: &PromptContext) -> String {
    let mut task = String::from("## Your task\n\n");
    let skill = ctx.post_action_skill.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let extra = ctx.post_action_prompt.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match skill {
        Some(skill) => {
            let _ = write!(
                task,
                "Load the `{skill}` skill and carry out its workflow on this branch, following its \
                 unattended path: wherever it would stop to ask, choose the conservative option and \
                 note the open point in `followUps`. The skill's workflow decides which fixes to make \
                 and how to validate them."
            );
        }
        None => task.push_str(
            "Carry out the instruction below on this branch. Make only safe, narrowly scoped fixes — \
             no refactors, no new features, no behaviour changes the plan did not ask for — and \
             validate every change you make.",
        ),
    }
    match extra {
        Some(extra) => {
            let _ = write!(task, "\n\n### Instruction\n\n{extra}");
        }
        None if skill.is_none() => task.push_str(
            "\n\n### Instruction\n\nNone was configured: check that the branch builds and its \
             tests pass, and fix only obvious, low-risk problems.",
        ),
        None => {}
    }

    let blocks = vec![
        notice(ctx, Role::PostAction, false),
        format!(
            "{} the loop's work is done on branch `{}` (worktree `{}`, including uncommitted \
             changes). This is a best-effort follow-up step: it is not audited again, and the loop \
             completes whatever you report.",
            if ctx.sectioned() {
                "Every section of the plan has passed its audit;"
            } else {
                "The plan has passed its audit;"
            },
            ctx.branch,
            ctx.worktree
        ),
        task,
        format!("## The master plan (for reference)\n\n{}", fenced(&ctx.plan)),
        "## Rules\n\n\
         - Finish every step before you report: wait for anything you started (subagents, \
         background jobs, merges, saved records) to complete.\n\
         - Anything that needs a human decision goes into `followUps`; do not guess at it.\n\
         - Keep fixes small and local; if a fix turns out risky or large, leave it and record it \
         as a follow-up instead."
            .to_string(),
        handoff_instruction(Role::PostAction, ctx.sectioned()),
    ];
    join(blocks)
}

/// The turn-ending instruction of a role: the tool, its JSON shape, a concrete command
/// line, and "end the turn once it succeeds". `sectioned` changes only the auditor's
/// `summary` rule.
pub fn handoff_instruction(role: Role, sectioned: bool) -> String {
    let mut out = String::new();
    match role {
        Role::Coder => {
            let unit = if sectioned { "section" } else { "plan" };
            let _ = write!(
                out,
                "## Ending your turn: `loop-handoff`\n\n\
                 Your turn counts only once you have recorded a handoff. When the work is done and \
                 verified, run:\n\n\
                 ```sh\nforge-lsp call loop-handoff '{CODER_EXAMPLE}'\n```\n\n\
                 The JSON object takes:\n\
                 - `changes` (required, at least one): `{{\"summary\", \"reason\"}}` — what you \
                 changed and why.\n\
                 - `deviations` (optional, default `[]`): `{{\"planItem\", \"actual\", \"reason\"}}` — \
                 every place where the implementation departs from the {unit} as written.\n\
                 - `verification` (required, at least one): `{{\"command\", \"cwd\", \"outcome\", \
                 \"changedAfter\"}}` — each check you ran: the exact command; its directory relative \
                 to the worktree (`\".\"` for the root); `outcome` `\"pass\"`, `\"fail\"` or \
                 `\"not-run\"`; `changedAfter` `true` if you edited code after running it.\n\
                 - `notes` (optional): anything else the auditor should know.\n\n\
                 Do not send `summary` — it belongs to the auditor. Report outcomes honestly: a \
                 failing check is `\"fail\"`, one you could not run is `\"not-run\"` (say why in \
                 `notes`)."
            );
        }
        Role::Auditor if sectioned => {
            let _ = write!(
                out,
                "## Ending your turn: `loop-handoff`\n\n\
                 Once the findings store holds your verdict, record the handoff. The verdict is read \
                 from the open findings, never from the handoff; the handoff carries the section \
                 summary, and the tool enforces when it is allowed:\n\n\
                 - **A blocking bug is still open** (a `bug` of this section, an earlier section, or \
                 cross-section): send **no** `summary` — `notes` is optional, `{{}}` is fine:\n\n\
                 ```sh\nforge-lsp call loop-handoff '{AUDITOR_DIRTY_EXAMPLE}'\n```\n\n\
                 - **No blocking bug is open:** `summary` is **required**: `{{\"done\": [...], \
                 \"deviations\": [...], \"followUps\": [...]}}` — `done` (at least one entry) is what \
                 the section delivered, `deviations` where it departs from the section text, \
                 `followUps` what is left for later:\n\n\
                 ```sh\nforge-lsp call loop-handoff '{AUDITOR_CLEAN_EXAMPLE}'\n```\n\n\
                 A `summary` sent while a blocking bug is open is rejected; a clean audit recorded \
                 without one is discarded and you will be asked again. `changes`, `deviations` and \
                 `verification` at the top level are coder fields and are rejected."
            );
        }
        Role::Auditor => {
            let _ = write!(
                out,
                "## Ending your turn: `loop-handoff`\n\n\
                 Once the findings store holds your verdict, record the handoff. This loop has no \
                 sections, so **never send `summary`** — the tool rejects it. The verdict comes only \
                 from the open findings: the loop finishes when none remain. The only field is the \
                 optional `notes` (`{{}}` is fine):\n\n\
                 ```sh\nforge-lsp call loop-handoff '{AUDITOR_PLAN_EXAMPLE}'\n```\n\n\
                 `changes`, `deviations` and `verification` are coder fields and are rejected."
            );
        }
        Role::PostAction => {
            let _ = write!(
                out,
                "## Ending your turn: `loop-complete`\n\n\
                 When every step is finished, report what happened:\n\n\
                 ```sh\nforge-lsp call loop-complete '{POST_ACTION_EXAMPLE}'\n```\n\n\
                 The JSON object takes:\n\
                 - `outcome` (required): `\"completed\"`, `\"completed_with_issues\"` or `\"failed\"`.\n\
                 - `steps` (required, at least one): `{{\"name\", \"status\", \"detail\"}}` — one entry \
                 per workflow step; `status` is `\"done\"`, `\"skipped\"` or `\"failed\"`; `detail` is \
                 optional.\n\
                 - `followUps` (optional, default `[]`): what a person should still look at.\n\
                 - `notes` (optional).\n\n\
                 `loop-handoff` is not available in this phase."
            );
        }
    }
    let tool = role.tool();
    let give_up = match role {
        Role::PostAction => "the loop completes without your report",
        _ => "the loop stops with an error",
    };
    let _ = write!(
        out,
        "\n\nIf any text contains a single quote, pass the JSON on standard input instead:\n\n\
         ```sh\nforge-lsp call {tool} - <<'JSON'\n{{ ...the same object... }}\nJSON\n```\n\n\
         On success the tool prints a line starting with `Handoff recorded`. Then **end your turn \
         immediately** — no further edits, commands or tool calls. If it prints an error instead, \
         fix the JSON and call it again; a later call in the same turn replaces the earlier \
         record. A turn that ends without a recorded `{tool}` gets a reminder; after three \
         reminders {give_up}."
    );
    out
}

/// A resumed coder session after a dirty audit: the notice, the open findings and the
/// handoff instruction (the session already holds the plan and its earlier work).
pub fn coder_follow_up(ctx: &PromptContext) -> String {
    let scope = if ctx.sectioned() { "section" } else { "plan" };
    let blocks = vec![
        notice(ctx, Role::Coder, true),
        format!(
            "The auditor reviewed your last handoff and left the findings below open. The {scope} \
             requirements are unchanged from earlier in this session (`forge-lsp call {}` prints \
             them again); this turn is about resolving these findings.",
            if ctx.sectioned() { "section-read" } else { "plan-read" }
        ),
        coder_findings(ctx),
        recurring_block(ctx, Role::Coder),
        remediation_policy(),
        handoff_instruction(Role::Coder, ctx.sectioned()),
    ];
    join(blocks)
}

/// A resumed audit session: the coder's new handoff, the attempt history, and the order
/// to re-read the diff and re-check every outstanding finding.
pub fn audit_follow_up(ctx: &PromptContext) -> String {
    let since = ctx
        .scope
        .as_ref()
        .map(|s| format!("git diff {}", s.since_commit))
        .unwrap_or_else(|| "git diff HEAD".to_string());
    let blocks = vec![
        notice(ctx, Role::Auditor, true),
        "The coder has worked on the findings you left open and handed off again. Your earlier \
         reading of the code is out of date: audit the current state, not your memory of it."
            .to_string(),
        coder_decisions_block(ctx),
        attempt_history(ctx),
        scope_block(ctx),
        auditor_findings(ctx),
        recurring_block(ctx, Role::Auditor),
        format!(
            "## What to do now\n\n\
             1. Re-read the changes: `git status --short` and `{since}`, then the changed and \
             untracked files themselves.\n\
             2. `forge-lsp call review-read` and verify **every** outstanding finding against the \
             current code. Delete each one that is resolved (see the delete commands above); leave \
             the ones that are not.\n\
             3. Where the coder explains a finding instead of changing code, run the verification \
             they give; delete the finding only if it really shows the problem is gone or was never \
             there.\n\
             4. Look for problems the new changes introduced and record them with `review-write`, \
             as in your first pass.\n\
             5. Record the handoff below."
        ),
        verdict_rule(ctx),
        handoff_instruction(Role::Auditor, ctx.sectioned()),
    ];
    join(blocks)
}

/// Findings that stayed open through at least [`RECURRENCE_ESCALATION_THRESHOLD`]
/// consecutive dirty audits, judged from the attempt history (same file, line and
/// section in each attempt's `findings_after`). Attempts not yet audited are skipped.
pub fn recurring_findings(ctx: &PromptContext) -> Vec<&Finding> {
    ctx.findings.iter().filter(|f| recurrence_count(f, &ctx.attempts) >= RECURRENCE_ESCALATION_THRESHOLD).collect()
}

// ---------------------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------------------

fn join(blocks: Vec<String>) -> String {
    let parts: Vec<String> = blocks.into_iter().map(|b| b.trim().to_string()).filter(|b| !b.is_empty()).collect();
    let mut out = parts.join("\n\n");
    out.push('\n');
    out
}

fn iteration_label(ctx: &PromptContext) -> String {
    if ctx.max_iterations == 0 {
        format!("iteration {} (no limit)", ctx.iteration)
    } else {
        format!("iteration {}/{}", ctx.iteration, ctx.max_iterations)
    }
}

fn section_number(ctx: &PromptContext) -> String {
    match &ctx.current {
        Some(s) => format!("{}/{}", s.index + 1, ctx.total_sections),
        None => format!("?/{}", ctx.total_sections),
    }
}

fn notice(ctx: &PromptContext, role: Role, continuation: bool) -> String {
    let mut parts = vec![format!("Forge loop `{}`", ctx.loop_name)];
    match role {
        Role::PostAction => parts.push("post-action".to_string()),
        Role::Auditor => {
            if ctx.sectioned() {
                parts.push(format!("section audit {}", section_number(ctx)));
            } else {
                parts.push("audit".to_string());
            }
            parts.push(iteration_label(ctx));
        }
        Role::Coder => {
            if ctx.sectioned() {
                parts.push(format!("section {}", section_number(ctx)));
            }
            parts.push(iteration_label(ctx));
        }
    }
    let mut header = format!("[{}]", parts.join(" · "));
    if continuation {
        header.push_str(" (continuation)");
    }

    let who = match role {
        Role::Coder => "You are the **coder** of this loop: you implement the work, then hand it to an auditor.",
        Role::Auditor => {
            "You are the **auditor** of this loop: you review the coder's work and record what is \
             wrong as findings. Do not change the code yourself — findings are how fixes happen."
        }
        Role::PostAction => "You are running the loop's **post-action** step.",
    };
    let limit = if role != Role::PostAction && ctx.max_iterations > 0 {
        format!(" The loop stops after iteration {}, finished or not.", ctx.max_iterations)
    } else {
        String::new()
    };
    let (record, rules) = match role {
        Role::PostAction => ("report", "do not touch files outside it or switch branches"),
        _ => ("handoff", "do not touch files outside it, do not switch branches, do not push"),
    };
    format!(
        "{header}\n\n{who}\n\n\
         This loop runs unattended: nobody reads this session while it runs, so you cannot ask \
         questions or wait for answers. Make reasonable decisions and record them in your \
         {record}.{limit} Work only inside the worktree `{worktree}` (branch `{branch}`): {rules}.",
        worktree = ctx.worktree,
        branch = ctx.branch,
    )
}

fn completed_sections(ctx: &PromptContext) -> String {
    if !ctx.sectioned() || ctx.completed.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Completed sections\n\nThese sections passed their audits and are committed. Build on \
         them rather than redoing them; their follow-ups are context, not part of this section \
         unless its text says so.",
    );
    for s in &ctx.completed {
        let _ = write!(out, "\n\n### Section {}: {}", s.index + 1, s.title.trim());
        let lists = [("Done", &s.done), ("Deviations", &s.deviations), ("Follow-ups", &s.follow_ups)];
        if lists.iter().all(|(_, items)| items.is_empty()) {
            out.push_str("\n\n_No summary recorded._");
        }
        for (label, items) in lists {
            if items.is_empty() {
                continue;
            }
            let _ = write!(out, "\n\n**{label}**");
            for item in items {
                let _ = write!(out, "\n- {}", indent_rest(item, "  "));
            }
        }
    }
    out
}

fn current_section(ctx: &PromptContext, lead: &str) -> String {
    let Some(s) = &ctx.current else {
        return format!(
            "## {lead}Section {}\n\nThe section text is not available here; read it with \
             `forge-lsp call section-read`.",
            section_number(ctx)
        );
    };
    let mut out = format!(
        "## {lead}Section {} — {}\n\nThe title is only a label; the text below is the \
         requirement, all of it.",
        section_number(ctx),
        s.title.trim()
    );
    if ctx.is_last_section() {
        out.push_str(
            " This is the **last** section: it also carries the master plan's top-level objective \
             and Verification, which must hold for the change as a whole.",
        );
    }
    let _ = write!(out, "\n\n{}", fenced(&s.content));
    out
}

fn plan_reference(ctx: &PromptContext) -> String {
    let index = ctx.current.as_ref().map_or(0, |s| s.index);
    format!(
        "## The master plan\n\n\
         This section is one part of a larger plan of {total} sections.\n\
         - `forge-lsp call plan-read` prints the whole master plan (`'{{\"offset\":N}}'` pages \
         through a long one).\n\
         - `forge-lsp call section-read` prints the current section; \
         `forge-lsp call section-read '{{\"section_index\":{index}}}'` a given one (0-based — this is \
         index {index}).\n\n\
         The master plan's objective and top-level Verification stay authoritative. The section \
         text may have been amended during the loop; where it differs from the master plan's \
         original per-section instructions, the section text wins.",
        total = ctx.total_sections,
    )
}

fn coder_working_rules(ctx: &PromptContext) -> String {
    let mut out = String::from("## How to work\n\n");
    out.push_str("- Read the code you are about to change and follow the project's existing conventions.\n");
    if ctx.sectioned() {
        out.push_str("- Stay within this section: later sections come later and are audited separately.\n");
    }
    out.push_str(
        "- Verify before you hand off: run the checks the text names, plus the build, tests and \
         linters that cover your change, and fix what fails.\n\
         - No need to commit: the loop checkpoints the worktree itself after a clean audit.\n\
         - An auditor reviews your work next; whatever is missing or broken comes back to you as \
         findings.",
    );
    out
}

fn coder_findings(ctx: &PromptContext) -> String {
    let sectioned = ctx.sectioned();
    let title = if sectioned { "Open blocking findings" } else { "Open findings" };
    if ctx.findings.is_empty() {
        return format!(
            "## {title}\n\nNo findings are open right now. Re-check the requirements against the \
             worktree, finish anything incomplete, and hand off."
        );
    }
    format!("## {title} ({})\n\n{}", ctx.findings.len(), render_findings_full(&ctx.findings, sectioned, false))
}

fn auditor_findings(ctx: &PromptContext) -> String {
    let sectioned = ctx.sectioned();
    if ctx.findings.is_empty() {
        let what = if sectioned { "No blocking bug findings were open" } else { "No findings were open" };
        return format!(
            "## Outstanding findings\n\n{what} when this audit started (`forge-lsp call review-read` \
             shows the current list)."
        );
    }
    let what = if sectioned {
        "These blocking bug findings were open when this audit started (warnings are not listed; \
         `forge-lsp call review-read` shows everything). Verify each one against the current code."
    } else {
        "These findings were open when this audit started. Verify each one against the current code."
    };
    format!(
        "## Outstanding findings ({})\n\n{what}\n\n{}",
        ctx.findings.len(),
        render_findings_full(&ctx.findings, sectioned, true)
    )
}

fn remediation_policy() -> String {
    "## How to resolve findings\n\n\
     Deal with every finding above, one by one:\n\
     - **Fix it** at its root, not just at the reported line, and check the fix with a command \
     that would have caught the problem.\n\
     - **Or explain it**, if you are convinced it needs no code change (already fixed, or not a \
     real problem): put the reasoning in the handoff `notes`, together with a verification the \
     auditor can reproduce — the exact command, its directory and the expected output — and list \
     that command under `verification`.\n\n\
     Never ignore a finding: one left unaddressed is simply reported again. You cannot delete \
     findings; the auditor removes those that are resolved."
        .to_string()
}

fn recurring_block(ctx: &PromptContext, role: Role) -> String {
    let recurring = recurring_findings(ctx);
    if recurring.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "## Recurring findings\n\nThese findings have stayed open through {RECURRENCE_ESCALATION_THRESHOLD} \
         or more audits in a row:\n"
    );
    for f in &recurring {
        let _ = write!(
            out,
            "\n- `{}:{}` — {} (open after the last {} audits)",
            crate::text::on_one_line(&f.file),
            f.line,
            one_line(&f.description, 160),
            recurrence_count(f, &ctx.attempts)
        );
    }
    out.push_str("\n\n");
    match role {
        Role::Auditor => out.push_str(
            "Re-evaluate each of them from scratch. If the coder's documented decision and its \
             reproducible verification show the problem is gone or not real, delete the finding. \
             Keep it only if you can state concretely what is still wrong; if the wording was \
             unclear, delete it and write a clearer finding in its place.",
        ),
        _ => out.push_str(
            "What was tried so far has not satisfied the auditor. Take a different approach, or — \
             if you are sure the code is right — document the decision in `notes` with a \
             reproducible verification that shows it.",
        ),
    }
    out
}

fn attempt_history(ctx: &PromptContext) -> String {
    if ctx.attempts.is_empty() {
        return String::new();
    }
    let sectioned = ctx.sectioned();
    let what = if sectioned { "this section" } else { "the plan" };
    let mut out = format!(
        "## Attempt history ({what}, oldest first)\n\nEarlier handoffs and what their audits left \
         open. Findings that no longer appear were resolved; do not reopen them."
    );
    for a in &ctx.attempts {
        let outcome = match a.outcome.as_deref() {
            Some(o) => format!("audit: {o}"),
            None => "not audited yet".to_string(),
        };
        let _ = write!(out, "\n\n### Attempt {} · iteration {} · {outcome}", a.number, a.iteration);
        match a.coder_decisions.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
            Some(d) => {
                let _ = write!(out, "\n\nCoder handoff:\n\n{}", quote(d));
            }
            None => out.push_str("\n\nNo coder handoff was recorded."),
        }
        if a.outcome.is_some() {
            if a.findings_after.is_empty() {
                out.push_str("\n\nOpen after the audit: none.");
            } else {
                out.push_str("\n\nOpen after the audit:");
                for f in &a.findings_after {
                    let section = match (sectioned, f.section_index) {
                        (false, _) => String::new(),
                        (true, Some(i)) => format!(", section {}", i + 1),
                        (true, None) => ", cross-section".to_string(),
                    };
                    let _ = write!(
                        out,
                        "\n- `{}:{}` ({}{section}) {}",
                        crate::text::on_one_line(&f.file),
                        f.line,
                        f.severity.as_str(),
                        one_line(&f.description, 160)
                    );
                }
            }
        }
    }
    out
}

fn coder_decisions_block(ctx: &PromptContext) -> String {
    let body = match ctx.coder_decisions.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => format!(
            "What the coder says they did. Treat it as claims to check, not as facts: confirm the \
             changes in the code and re-run the verification that matters.\n\n{}",
            quote(d)
        ),
        None => "The coder recorded no handoff for this turn. Judge the worktree on its own.".to_string(),
    };
    format!("## The coder's handoff\n\n{body}")
}

fn scope_block(ctx: &PromptContext) -> String {
    let Some(scope) = &ctx.scope else {
        return "## What to review\n\nEverything the coder changed in the worktree: `git status --short` \
                and `git diff HEAD`, plus any untracked files."
            .to_string();
    };
    let mut out = format!(
        "## What to review\n\nEverything changed since {label} (`{commit}`): committed, staged and \
         unstaged changes — `git diff {commit}` — plus the untracked files (`git status --short` \
         lists them too). Read changed files in full where the diff alone is not enough.",
        label = scope.since_label.trim(),
        commit = scope.since_commit.trim(),
    );
    if scope.changed_files.is_empty() && scope.untracked_files.is_empty() {
        out.push_str(
            "\n\nGit reported no changes since that commit when this audit started. If the work \
             needs code, that absence is itself a finding.",
        );
        return out;
    }
    file_list(&mut out, "Tracked changes", &scope.changed_files);
    file_list(&mut out, "Untracked files", &scope.untracked_files);
    out
}

fn file_list(out: &mut String, label: &str, files: &[String]) {
    if files.is_empty() {
        let _ = write!(out, "\n\n{label}: none.");
        return;
    }
    let _ = write!(out, "\n\n{label} ({}):", files.len());
    for f in files.iter().take(MAX_LISTED_FILES) {
        let _ = write!(out, "\n- `{}`", f.trim());
    }
    if files.len() > MAX_LISTED_FILES {
        let _ = write!(out, "\n- … and {} more", files.len() - MAX_LISTED_FILES);
    }
}

fn audit_method(ctx: &PromptContext) -> String {
    let what = if ctx.sectioned() { "section text" } else { "plan" };
    let mut out = format!(
        "## How to audit\n\n\
         - Check every requirement in the {what} against the code. Each one that is missing, \
         incomplete or wrong is a `bug`.\n\
         - Look for defects in what was written: incorrect behaviour, unhandled errors and edge \
         cases, broken tests or build, security problems, regressions, and departures from the \
         project's conventions.\n\
         - Run the verification yourself — the commands the {what} names, the build, the relevant \
         tests and linters. Do not rely on the outcomes the coder reported.\n\
         - Judge each declared deviation: acceptable only if the objective is still met."
    );
    if ctx.is_last_section() {
        out.push_str(
            "\n- This is the last section and no separate whole-change audit follows: also check the \
             master plan's top-level objective and Verification (`forge-lsp call plan-read`) across \
             the whole change, and attribute problems to the section they belong to.",
        );
    }
    out
}

fn findings_management(ctx: &PromptContext) -> String {
    let sectioned = ctx.sectioned();
    let mut out = String::from(
        "## Recording findings\n\n\
         The findings store is your verdict; keep it exact.\n\n\
         **Read.** `forge-lsp call review-read` lists the open findings",
    );
    if sectioned {
        out.push_str(" of this section, the earlier sections and cross-section (`'{\"allSections\":true}'` reads all)");
    }
    out.push_str(
        "; `forge-lsp call review-read '{\"attempts\":true}'` shows the attempt history.\n\n\
         **Delete what is resolved.** Check every open finding against the current code and delete \
         each one that no longer holds:\n\n\
         ```sh\nforge-lsp call review-delete '{\"file\":\"src/auth.rs\",\"line\":42}'\n```\n\n",
    );
    if sectioned {
        out.push_str(
            "Without more arguments this removes only the current section's finding at that location; \
             add `\"sectionIndex\":K` for a finding of an earlier section, or `\"crossSection\":true` \
             for a cross-section one (the outstanding findings above show the exact command). ",
        );
    }
    out.push_str(
        "Leave findings that still hold in place; findings are write-once, so do not write them \
         again.\n\n\
         **Write each new problem:**\n\n\
         ```sh\nforge-lsp call review-write '{\"file\":\"src/auth.rs\",\"line\":42,\"severity\":\"bug\",\
         \"description\":\"Expired tokens are sent as-is; the section requires a refresh first\",\
         \"scenario\":\"Call get_user with a token whose exp is in the past: the request fails with 401\"}'\n```\n\n\
         - `file` and `line` point where the fix belongs; for something missing, the file where it \
         should live (line 1 if it does not exist yet).\n\
         - `description` says what is wrong and what right looks like; `scenario` (optional) how \
         to see it: inputs, command, steps.\n",
    );
    if sectioned {
        let k = ctx.current.as_ref().map_or(0, |s| s.index);
        let _ = write!(
            out,
            "- `severity`: `\"bug\"` for an unmet requirement or a real defect — bugs block the \
             section; `\"warning\"` for something worth fixing that should not hold the section \
             back (warnings never block).\n\
             - Attribution: a finding goes to this section (`sectionIndex` {k}) by default. Pass \
             `\"sectionIndex\":J` for a problem in an earlier section's work (it still blocks), and \
             `\"crossSection\":true` only for a problem that spans several sections. Never file this \
             section's own requirements against a later section to get past the audit."
        );
    } else {
        out.push_str(
            "- `severity`: `\"bug\"` for an unmet requirement or a real defect, `\"warning\"` for a \
             lesser problem. In this loop **every** open finding keeps the work going, warnings \
             included: write a warning only for something that must change before the work is \
             done, and put mere suggestions in your handoff `notes`.",
        );
    }
    out
}

fn plan_adjust_block(ctx: &PromptContext) -> String {
    if !ctx.sectioned() {
        return String::new();
    }
    "## Adjusting the plan (rarely)\n\n\
     `forge-lsp call plan-adjust` revises the remaining plan. Use it only when the plan as written \
     cannot reach its objective — a section depends on something that does not exist, or the \
     remaining sections need a different split or order. Never use it to weaken or drop acceptance \
     criteria or verification so that an audit comes out clean.\n\
     - `currentSection` `{\"title\", \"content\"}` rewrites this section in place. If the new text \
     needs code, also write `bug` findings so the section is coded again.\n\
     - `sections` `[{\"title\", \"content\"}, …]` replaces **all** pending sections after this one: \
     any you leave out are deleted. Read them first with \
     `forge-lsp call section-read '{\"pending_suffix\":true}'` and include every one you keep.\n\
     - `rationale` is required.\n\n\
     ```sh\nforge-lsp call plan-adjust '{\"currentSection\":{\"title\":\"Add tokens\",\"content\":\"...the revised \
     requirement...\"},\"rationale\":\"The token store the section relies on does not exist yet\"}'\n```\n\n\
     Completed sections and the master plan itself cannot be changed."
        .to_string()
}

fn verdict_rule(ctx: &PromptContext) -> String {
    if ctx.sectioned() {
        let k = ctx.current.as_ref().map_or(0, |s| s.index);
        format!(
            "## When the audit is clean\n\n\
             The section passes only when no `bug` finding remains open for this section \
             (`sectionIndex` {k}), for any earlier section, or cross-section. Warnings never block, \
             and bugs filed against a later, not-yet-started section do not block yet. The verdict \
             is read from the findings store after your turn — not from anything you write. A clean \
             audit moves the loop on to the next section (or finishes it); otherwise the coder gets \
             the open findings and tries again."
        )
    } else {
        "## When the audit is clean\n\n\
         The loop finishes only when no finding of any severity remains open — warnings count too. \
         The verdict is read from the findings store after your turn — not from anything you write. \
         Otherwise the coder gets the open findings and tries again."
            .to_string()
    }
}

// ---------------------------------------------------------------------------------------
// Rendering helpers
// ---------------------------------------------------------------------------------------

/// Findings in full: location, severity, section, id, description, scenario; with
/// `delete_command` the exact `review-delete` call that removes each one.
fn render_findings_full(findings: &[Finding], sectioned: bool, delete_command: bool) -> String {
    let mut out = String::new();
    for (i, f) in findings.iter().enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        let _ = write!(
            out,
            "{}. **`{}:{}`** — {}{} · id {}",
            i + 1,
            crate::text::on_one_line(&f.file),
            f.line,
            f.severity.as_str(),
            section_tag(f, sectioned),
            f.id
        );
        let _ = write!(out, "\n   - Description: {}", indent_rest(f.description.trim(), "     "));
        let scenario = f.scenario.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("not given");
        let _ = write!(out, "\n   - Scenario: {}", indent_rest(scenario, "     "));
        if delete_command {
            let _ = write!(out, "\n   - Delete once resolved: `{}`", delete_call(f, sectioned));
        }
    }
    out
}

fn section_tag(f: &Finding, sectioned: bool) -> String {
    if !sectioned {
        return String::new();
    }
    match f.section_index {
        Some(i) => format!(" · section {} (sectionIndex {i})", i + 1),
        None => " · cross-section".to_string(),
    }
}

/// The `review-delete` command line for one finding, quoted for a POSIX shell.
fn delete_call(f: &Finding, sectioned: bool) -> String {
    let mut args = format!("{{\"file\":{},\"line\":{}", json!(f.file), f.line);
    if sectioned {
        match f.section_index {
            Some(i) => {
                let _ = write!(args, ",\"sectionIndex\":{i}");
            }
            None => args.push_str(",\"crossSection\":true"),
        }
    }
    args.push('}');
    format!("forge-lsp call review-delete {}", shell_quote(&args))
}

/// How many of the most recent audited attempts (consecutive, newest first) left this
/// finding open.
fn recurrence_count(f: &Finding, attempts: &[AttemptView]) -> usize {
    let mut count = 0;
    for a in attempts.iter().rev() {
        match a.outcome.as_deref() {
            None => continue,
            Some("dirty") => {
                let open = a
                    .findings_after
                    .iter()
                    .any(|g| g.file == f.file && g.line == f.line && g.section_index == f.section_index);
                if !open {
                    break;
                }
                count += 1;
            }
            Some(_) => break,
        }
    }
    count
}

/// Text in a fenced block whose fence is longer than any backtick run inside it.
fn fenced(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}markdown\n{}\n{fence}", text.trim_matches('\n'))
}

/// Text as a markdown block quote.
fn quote(text: &str) -> String {
    text.lines().map(|l| if l.is_empty() { ">".to_string() } else { format!("> {l}") }).collect::<Vec<_>>().join("\n")
}

/// Indents every line but the first, so multi-line text stays inside a list item.
fn indent_rest(text: &str, pad: &str) -> String {
    let mut lines = text.lines();
    let mut out = lines.next().unwrap_or("").to_string();
    for l in lines {
        out.push('\n');
        if !l.is_empty() {
            out.push_str(pad);
            out.push_str(l);
        }
    }
    out
}

/// The first line of `text`, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let first = text.trim().lines().next().unwrap_or("").trim();
    let more = text.trim().lines().nth(1).is_some();
    if first.chars().count() > max {
        let cut: String = first.chars().take(max).collect();
        format!("{}…", cut.trim_end())
    } else if more {
        format!("{first} …")
    } else {
        first.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::{validate_complete, validate_handoff, AuditContext};
    use crate::loop_machine::Phase;
    use forge_protocol::inputs::{
        LoopCompleteInput, LoopHandoffInput, PlanAdjustInput, PlanReadInput, ReviewDeleteInput, ReviewReadInput,
        ReviewWriteInput, SectionReadInput, Severity,
    };

    fn finding(
        id: i64,
        file: &str,
        line: i64,
        section: Option<u32>,
        description: &str,
        scenario: Option<&str>,
    ) -> Finding {
        Finding {
            id,
            file: file.into(),
            line,
            severity: Severity::Bug,
            description: description.into(),
            scenario: scenario.map(str::to_string),
            loop_name: Some("auth-tokens".into()),
            section_index: section,
            created_at: 0,
        }
    }

    fn section(index: u32, title: &str, content: &str) -> SectionView {
        SectionView {
            index,
            title: title.into(),
            content: content.into(),
            status: "in_progress".into(),
            ..Default::default()
        }
    }

    fn sectioned_ctx() -> PromptContext {
        let bug_a = finding(
            17,
            "src/auth.rs",
            42,
            Some(1),
            "Expired tokens are sent without refresh\nsecond line of detail",
            Some("Call get_user with an expired token: 401"),
        );
        let bug_b = finding(23, "src/it's.rs", 7, None, "Token store is not thread-safe", None);
        PromptContext {
            loop_name: "auth-tokens".into(),
            branch: "forge/auth-tokens".into(),
            worktree: "/tmp/wt/auth-tokens".into(),
            plan: "# Auth plan\n\n## Phase 1: Store\n\n## Phase 2: Tokens\n".into(),
            iteration: 3,
            max_iterations: 10,
            total_sections: 4,
            current: Some(section(
                1,
                "Add tokens",
                "Implement token refresh in `client/src/auth.rs`.\nRun `cargo test -p client`.",
            )),
            completed: vec![SectionView {
                status: "completed".into(),
                done: vec!["Token store with SQLite backend".into()],
                deviations: vec!["Used WAL mode".into()],
                follow_ups: vec!["Add store metrics".into()],
                ..section(0, "Store", "Build the store.")
            }],
            findings: vec![bug_a.clone(), bug_b.clone()],
            attempts: vec![
                AttemptView {
                    number: 1,
                    iteration: 2,
                    outcome: Some("dirty".into()),
                    coder_decisions: Some("**Changes**\n- First try — plan".into()),
                    findings_after: vec![bug_a.clone()],
                },
                AttemptView {
                    number: 2,
                    iteration: 3,
                    outcome: Some("dirty".into()),
                    coder_decisions: None,
                    findings_after: vec![bug_a.clone(), bug_b.clone()],
                },
            ],
            coder_decisions: Some("**Changes**\n- Added refresh — section step 2".into()),
            scope: Some(AuditScope {
                since_label: "the checkpoint commit `section 1: Store`".into(),
                since_commit: "0123abcd4567ef".into(),
                changed_files: vec!["M client/src/auth.rs".into()],
                untracked_files: vec!["client/src/token.rs".into()],
            }),
            post_action_skill: Some("pr-review".into()),
            post_action_prompt: Some("Also run the linters.".into()),
        }
    }

    fn plan_ctx() -> PromptContext {
        PromptContext {
            total_sections: 0,
            current: None,
            completed: vec![],
            max_iterations: 0,
            iteration: 2,
            findings: vec![finding(
                5,
                "PLAN",
                1,
                None,
                "Phase 2 is not implemented",
                Some("Run the CLI: no tokens command"),
            )],
            ..sectioned_ctx()
        }
    }

    fn empty_ctx(total_sections: u32) -> PromptContext {
        PromptContext {
            loop_name: "empty".into(),
            branch: "forge/empty".into(),
            worktree: "/wt/empty".into(),
            plan: "Do the thing.".into(),
            iteration: 1,
            max_iterations: 0,
            total_sections,
            current: (total_sections > 0).then(|| section(0, "Only", "Do the only thing.")),
            ..Default::default()
        }
    }

    /// Minimal POSIX word splitting of the text after `forge-lsp call `: single quotes,
    /// backslash escapes, and an unquoted backtick (end of an inline code span) ends it.
    fn shell_words(s: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut cur = String::new();
        let mut in_word = false;
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    in_word = true;
                    for q in chars.by_ref() {
                        if q == '\'' {
                            break;
                        }
                        cur.push(q);
                    }
                }
                '\\' => {
                    in_word = true;
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                '`' => break,
                c if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut cur));
                        in_word = false;
                    }
                }
                c => {
                    in_word = true;
                    cur.push(c);
                }
            }
        }
        if in_word {
            words.push(cur);
        }
        words
    }

    /// Every `forge-lsp call <tool> '<json>'` in `text`: (tool, parsed JSON).
    fn calls(text: &str) -> Vec<(String, serde_json::Value)> {
        let mut out = Vec::new();
        for line in text.lines() {
            let mut rest = line;
            while let Some(at) = rest.find("forge-lsp call ") {
                let after = &rest[at + "forge-lsp call ".len()..];
                let words = shell_words(after);
                if let (Some(tool), Some(arg)) = (words.first(), words.get(1)) {
                    if arg.starts_with('{') {
                        let v: serde_json::Value =
                            serde_json::from_str(arg).unwrap_or_else(|e| panic!("bad JSON in {line:?}: {e}"));
                        out.push((tool.clone(), v));
                    }
                }
                rest = after;
            }
        }
        out
    }

    /// Every command line in a prompt names a real tool and its JSON fits the tool's input type.
    fn check_calls(text: &str) -> Vec<(String, serde_json::Value)> {
        let found = calls(text);
        for (tool, v) in &found {
            let s = v.to_string();
            let ok = match tool.as_str() {
                "plan-read" => serde_json::from_str::<PlanReadInput>(&s).is_ok(),
                "section-read" => serde_json::from_str::<SectionReadInput>(&s).is_ok(),
                "plan-adjust" => serde_json::from_str::<PlanAdjustInput>(&s).is_ok(),
                "review-read" => serde_json::from_str::<ReviewReadInput>(&s).is_ok(),
                "review-write" => serde_json::from_str::<ReviewWriteInput>(&s).is_ok(),
                "review-delete" => serde_json::from_str::<ReviewDeleteInput>(&s).is_ok(),
                "loop-handoff" => serde_json::from_str::<LoopHandoffInput>(&s).is_ok(),
                "loop-complete" => serde_json::from_str::<LoopCompleteInput>(&s).is_ok(),
                other => panic!("unknown tool {other}"),
            };
            assert!(ok, "{tool} does not accept {s}");
        }
        found
    }

    fn handoffs(text: &str) -> Vec<LoopHandoffInput> {
        calls(text)
            .into_iter()
            .filter(|(t, _)| t == "loop-handoff")
            .map(|(_, v)| serde_json::from_value(v).expect("LoopHandoffInput"))
            .collect()
    }

    fn completes(text: &str) -> Vec<LoopCompleteInput> {
        calls(text)
            .into_iter()
            .filter(|(t, _)| t == "loop-complete")
            .map(|(_, v)| serde_json::from_value(v).expect("LoopCompleteInput"))
            .collect()
    }

    fn assert_has(text: &str, needles: &[&str]) {
        for n in needles {
            assert!(text.contains(n), "missing {n:?} in:\n{text}");
        }
    }

    fn assert_lacks(text: &str, needles: &[&str]) {
        for n in needles {
            assert!(!text.contains(n), "unexpected {n:?} in:\n{text}");
        }
    }

    fn sectioned_audit_ctx(blocking: u32) -> AuditContext {
        AuditContext { sectioned: true, blocking_bug_count: blocking }
    }

    #[test]
    fn notice_headers() {
        let c = sectioned_ctx();
        let coder = loop_notice(&c, Role::Coder);
        assert!(coder.starts_with("[Forge loop `auth-tokens` · section 2/4 · iteration 3/10]\n"), "{coder}");
        assert_has(
            &coder,
            &["**coder**", "unattended", "cannot ask", "/tmp/wt/auth-tokens", "forge/auth-tokens", "iteration 10"],
        );
        let auditor = loop_notice(&c, Role::Auditor);
        assert!(auditor.starts_with("[Forge loop `auth-tokens` · section audit 2/4 · iteration 3/10]\n"), "{auditor}");
        assert_has(&auditor, &["**auditor**", "Do not change the code yourself", "unattended"]);
        let post = loop_notice(&c, Role::PostAction);
        assert!(post.starts_with("[Forge loop `auth-tokens` · post-action]\n"), "{post}");
        assert_has(&post, &["**post-action**", "unattended", "/tmp/wt/auth-tokens"]);
        assert_lacks(&post, &["iteration", "do not push"]);

        let p = plan_ctx();
        assert!(loop_notice(&p, Role::Coder).starts_with("[Forge loop `auth-tokens` · iteration 2 (no limit)]\n"));
        assert!(
            loop_notice(&p, Role::Auditor).starts_with("[Forge loop `auth-tokens` · audit · iteration 2 (no limit)]\n")
        );
        assert_lacks(&loop_notice(&p, Role::Coder), &["section", "stops after iteration"]);
    }

    #[test]
    fn section_initial_has_the_pieces() {
        let c = sectioned_ctx();
        let t = section_initial(&c);
        assert!(t.starts_with("[Forge loop `auth-tokens` · section 2/4 · iteration 3/10]\n"), "{t}");
        assert_has(
            &t,
            &[
                "## Your task: Section 2/4 — Add tokens",
                "The title is only a label",
                "Implement token refresh in `client/src/auth.rs`.\nRun `cargo test -p client`.",
                "### Section 1: Store",
                "- Token store with SQLite backend",
                "- Used WAL mode",
                "- Add store metrics",
                "forge-lsp call plan-read",
                "forge-lsp call section-read",
                "\"section_index\":1",
                "forge-lsp call loop-handoff '{\"changes\"",
                "end your turn",
            ],
        );
        // The initial prompt carries no findings or history.
        assert_lacks(&t, &["id 17", "Attempt history", "(continuation)", "src/auth.rs:42", "\"summary\":{"]);
        assert!(!t.contains("**last** section"));
        check_calls(&t);
    }

    #[test]
    fn last_section_carries_the_top_level_checks() {
        let mut c = sectioned_ctx();
        c.current = Some(section(3, "Wrap up", "Finish."));
        let t = section_initial(&c);
        assert_has(&t, &["Section 4/4 — Wrap up", "**last** section", "top-level objective"]);
        let a = audit(&c);
        assert_has(&a, &["section audit 4/4", "no separate whole-change audit"]);
    }

    #[test]
    fn section_continuation_has_findings_in_full() {
        let c = sectioned_ctx();
        let t = section_continuation(&c);
        assert!(t.starts_with("[Forge loop `auth-tokens` · section 2/4 · iteration 3/10] (continuation)\n"), "{t}");
        assert_has(
            &t,
            &[
                "## Section 2/4 — Add tokens",
                "Implement token refresh in `client/src/auth.rs`.",
                "### Section 1: Store",
                "## Open blocking findings (2)",
                "**`src/auth.rs:42`** — bug · section 2 (sectionIndex 1) · id 17",
                "Description: Expired tokens are sent without refresh\n     second line of detail",
                "Scenario: Call get_user with an expired token: 401",
                "**`src/it's.rs:7`** — bug · cross-section · id 23",
                "Description: Token store is not thread-safe",
                "Scenario: not given",
                "## Attempt history",
                "### Attempt 1 · iteration 2 · audit: dirty",
                "> - First try — plan",
                "### Attempt 2 · iteration 3 · audit: dirty",
                "No coder handoff was recorded.",
                "- `src/auth.rs:42` (bug, section 2) Expired tokens are sent without refresh …",
                "## How to resolve findings",
                "**Fix it**",
                "**Or explain it**",
                "reproduce",
                "forge-lsp call loop-handoff '",
            ],
        );
        // The coder gets no delete commands.
        assert_lacks(&t, &["review-delete", "Recurring findings"]);
        check_calls(&t);
    }

    #[test]
    fn plan_initial_is_the_plan_and_the_handoff() {
        let p = plan_ctx();
        let t = plan_initial(&p);
        assert!(t.starts_with("[Forge loop `auth-tokens` · iteration 2 (no limit)]\n"), "{t}");
        assert_has(&t, &["# Auth plan\n\n## Phase 1: Store\n\n## Phase 2: Tokens", "forge-lsp call loop-handoff '"]);
        assert_lacks(&t, &["Section", "section-read", "PLAN:1", "Attempt history"]);
        assert_eq!(handoffs(&t).len(), 1);
        check_calls(&t);
    }

    #[test]
    fn plan_continuation_has_findings_and_history() {
        let mut p = plan_ctx();
        p.attempts = vec![AttemptView {
            number: 1,
            iteration: 1,
            outcome: Some("dirty".into()),
            coder_decisions: Some("**Changes**\n- Phase 1".into()),
            findings_after: p.findings.clone(),
        }];
        let t = plan_continuation(&p);
        assert!(t.starts_with("[Forge loop `auth-tokens` · iteration 2 (no limit)] (continuation)\n"), "{t}");
        assert_has(
            &t,
            &[
                "## Phase 2: Tokens",
                "## Open findings (1)",
                "**`PLAN:1`** — bug · id 5",
                "Description: Phase 2 is not implemented",
                "Scenario: Run the CLI: no tokens command",
                "### Attempt 1 · iteration 1 · audit: dirty",
                "- `PLAN:1` (bug) Phase 2 is not implemented",
                "## How to resolve findings",
                "forge-lsp call loop-handoff '",
            ],
        );
        assert_lacks(&t, &["sectionIndex", "cross-section"]);
        check_calls(&t);
    }

    #[test]
    fn section_audit_has_the_pieces() {
        let c = sectioned_ctx();
        let t = audit(&c);
        assert!(t.starts_with("[Forge loop `auth-tokens` · section audit 2/4 · iteration 3/10]\n"), "{t}");
        assert_has(
            &t,
            &[
                "## Under audit: Section 2/4 — Add tokens",
                "Implement token refresh in `client/src/auth.rs`.",
                "### Section 1: Store",
                "- Token store with SQLite backend",
                "## The coder's handoff",
                "> - Added refresh — section step 2",
                "the checkpoint commit `section 1: Store` (`0123abcd4567ef`)",
                "git diff 0123abcd4567ef",
                "- `M client/src/auth.rs`",
                "- `client/src/token.rs`",
                "**`src/auth.rs:42`** — bug · section 2 (sectionIndex 1) · id 17",
                "Scenario: Call get_user with an expired token: 401",
                "`forge-lsp call review-delete '{\"file\":\"src/auth.rs\",\"line\":42,\"sectionIndex\":1}'`",
                r#"`forge-lsp call review-delete '{"file":"src/it'\''s.rs","line":7,"crossSection":true}'`"#,
                "forge-lsp call review-read",
                "forge-lsp call review-write '",
                "\"sectionIndex\":J",
                "\"crossSection\":true",
                "forge-lsp call plan-adjust '",
                "Never use it to weaken",
                "\"pending_suffix\":true",
                "no `bug` finding remains open for this section (`sectionIndex` 1), for any earlier section, or cross-section",
                "Warnings never block",
                "send **no** `summary`",
                "`summary` is **required**",
            ],
        );
        assert_lacks(&t, &["never send `summary`", "(continuation)"]);

        // Every command line parses into its tool's input; the delete commands unquote correctly.
        let found = check_calls(&t);
        let deletes: Vec<_> =
            found.iter().filter(|(tool, _)| tool == "review-delete").map(|(_, v)| v.clone()).collect();
        assert!(deletes.contains(&json!({"file": "src/auth.rs", "line": 42, "sectionIndex": 1})), "{deletes:?}");
        assert!(deletes.contains(&json!({"file": "src/it's.rs", "line": 7, "crossSection": true})), "{deletes:?}");

        // The two auditor examples: the dirty one passes with blocking bugs, the clean one only without.
        let examples = handoffs(&t);
        assert_eq!(examples.len(), 2);
        let (dirty, clean) = (&examples[0], &examples[1]);
        assert!(dirty.summary.is_none());
        validate_handoff(Role::Auditor, dirty, &sectioned_audit_ctx(2)).expect("dirty example");
        assert!(clean.summary.is_some());
        validate_handoff(Role::Auditor, clean, &sectioned_audit_ctx(0)).expect("clean example");
        assert!(validate_handoff(Role::Auditor, clean, &sectioned_audit_ctx(1)).is_err());
    }

    #[test]
    fn plan_audit_never_sends_summary() {
        let p = plan_ctx();
        let t = audit(&p);
        assert!(t.starts_with("[Forge loop `auth-tokens` · audit · iteration 2 (no limit)]\n"), "{t}");
        assert_has(
            &t,
            &[
                "## Under audit: the plan",
                "## Phase 2: Tokens",
                "**`PLAN:1`** — bug · id 5",
                "Description: Phase 2 is not implemented",
                "`forge-lsp call review-delete '{\"file\":\"PLAN\",\"line\":1}'`",
                "**never send `summary`**",
                "no finding of any severity remains open",
                "warnings count too",
            ],
        );
        assert_lacks(&t, &["plan-adjust", "sectionIndex", "`summary` is **required**", "## Completed sections"]);
        check_calls(&t);
        let examples = handoffs(&t);
        assert_eq!(examples.len(), 1);
        assert!(examples[0].summary.is_none());
        validate_handoff(Role::Auditor, &examples[0], &AuditContext::default()).expect("non-sectioned example");
    }

    #[test]
    fn empty_cases() {
        for total in [0, 1] {
            let c = empty_ctx(total);
            for (name, t) in [
                ("section_initial", section_initial(&c)),
                ("section_continuation", section_continuation(&c)),
                ("plan_initial", plan_initial(&c)),
                ("plan_continuation", plan_continuation(&c)),
                ("audit", audit(&c)),
                ("post_action", post_action(&c)),
                ("coder_follow_up", coder_follow_up(&c)),
                ("audit_follow_up", audit_follow_up(&c)),
            ] {
                assert!(t.contains("(no limit)") || name == "post_action", "{name}: {t}");
                assert_lacks(&t, &["Attempt history", "Recurring findings", "## Completed sections", "\n\n\n"]);
                assert!(t.ends_with('\n') && !t.ends_with("\n\n"), "{name}");
                check_calls(&t);
            }
            let cont = if total > 0 { section_continuation(&c) } else { plan_continuation(&c) };
            assert!(cont.contains("No findings are open right now"), "{cont}");
            let a = audit(&c);
            assert_has(&a, &["The coder recorded no handoff", "git status --short", "git diff HEAD"]);
            assert!(a.contains("No blocking bug findings were open") || a.contains("No findings were open"), "{a}");
        }
        // A sectioned context without its current section still renders.
        let mut c = empty_ctx(3);
        c.current = None;
        assert_has(&section_initial(&c), &["section ?/3", "forge-lsp call section-read"]);
    }

    #[test]
    fn scope_without_changes_says_so() {
        let mut c = sectioned_ctx();
        c.scope = Some(AuditScope {
            since_label: "the loop's base commit".into(),
            since_commit: "abc123".into(),
            changed_files: vec![],
            untracked_files: vec![],
        });
        let t = audit(&c);
        assert_has(&t, &["the loop's base commit (`abc123`)", "git diff abc123", "no changes since that commit"]);
        c.scope.as_mut().unwrap().changed_files = (0..MAX_LISTED_FILES + 5).map(|i| format!("M f{i}.rs")).collect();
        let t = audit(&c);
        assert_has(&t, &["Tracked changes (205):", "- `M f199.rs`", "- … and 5 more", "Untracked files: none."]);
        assert!(!t.contains("f200.rs"));
    }

    #[test]
    fn handoff_instruction_examples_validate() {
        for sectioned in [true, false] {
            let coder = handoff_instruction(Role::Coder, sectioned);
            assert_has(&coder, &["`loop-handoff`", "changes", "verification", "changedAfter", "end your turn"]);
            let examples = handoffs(&coder);
            assert_eq!(examples.len(), 1, "{coder}");
            let ctx = AuditContext { sectioned, blocking_bug_count: 0 };
            validate_handoff(Role::Coder, &examples[0], &ctx).expect("coder example");
            assert!(completes(&coder).is_empty());

            let post = handoff_instruction(Role::PostAction, sectioned);
            assert_has(&post, &["`loop-complete`", "outcome", "steps", "followUps", "end your turn"]);
            let examples = completes(&post);
            assert_eq!(examples.len(), 1, "{post}");
            validate_complete(Phase::PostAction, &examples[0]).expect("post-action example");
            assert!(handoffs(&post).is_empty());
        }
        let sectioned = handoff_instruction(Role::Auditor, true);
        assert_has(&sectioned, &["summary", "done", "deviations", "followUps", "rejected"]);
        let plan = handoff_instruction(Role::Auditor, false);
        assert_has(&plan, &["never send `summary`"]);
        for e in handoffs(&plan) {
            assert!(e.summary.is_none());
            validate_handoff(Role::Auditor, &e, &AuditContext::default()).expect("plan auditor example");
        }
        // The examples are single-quoted in the shell, so they must not contain a quote.
        for ex in
            [CODER_EXAMPLE, AUDITOR_DIRTY_EXAMPLE, AUDITOR_CLEAN_EXAMPLE, AUDITOR_PLAN_EXAMPLE, POST_ACTION_EXAMPLE]
        {
            assert!(!ex.contains('\''), "{ex}");
        }
    }

    #[test]
    fn post_action_variants() {
        let c = sectioned_ctx();
        let t = post_action(&c);
        assert!(t.starts_with("[Forge loop `auth-tokens` · post-action]\n"), "{t}");
        assert_has(
            &t,
            &[
                "branch `forge/auth-tokens`",
                "Load the `pr-review` skill",
                "unattended path",
                "### Instruction\n\nAlso run the linters.",
                "# Auth plan",
                "followUps",
                "forge-lsp call loop-complete '",
                "the loop completes without your report",
            ],
        );
        assert_lacks(&t, &["forge-lsp call loop-handoff '", "review-write"]);
        assert_eq!(completes(&t).len(), 1);
        check_calls(&t);

        let prompt_only = PromptContext { post_action_skill: None, ..sectioned_ctx() };
        let t = post_action(&prompt_only);
        assert_has(&t, &["safe, narrowly scoped fixes", "Also run the linters."]);
        assert!(!t.contains("skill"), "{t}");

        let skill_only = PromptContext { post_action_prompt: Some("  ".into()), ..sectioned_ctx() };
        let t = post_action(&skill_only);
        assert_has(&t, &["Load the `pr-review` skill"]);
        assert!(!t.contains("### Instruction"), "{t}");

        let neither = PromptContext { post_action_skill: None, post_action_prompt: None, ..sectioned_ctx() };
        assert_has(&post_action(&neither), &["None was configured", "Every section of the plan has passed"]);
        let plan = PromptContext { post_action_skill: None, ..plan_ctx() };
        let t = post_action(&plan);
        assert_has(&t, &["The plan has passed its audit", "forge-lsp call loop-complete '"]);
        assert_eq!(completes(&t).len(), 1);
    }

    #[test]
    fn coder_follow_up_is_short() {
        let c = sectioned_ctx();
        let t = coder_follow_up(&c);
        assert!(t.starts_with("[Forge loop `auth-tokens` · section 2/4 · iteration 3/10] (continuation)\n"), "{t}");
        assert_has(
            &t,
            &[
                "**`src/auth.rs:42`** — bug · section 2 (sectionIndex 1) · id 17",
                "Scenario: Call get_user with an expired token: 401",
                "Description: Token store is not thread-safe",
                "How to resolve findings",
                "forge-lsp call section-read",
                "forge-lsp call loop-handoff '",
            ],
        );
        // Not the full plan, section text or history.
        assert_lacks(&t, &["# Auth plan", "Implement token refresh", "Attempt history", "## Completed sections"]);
        check_calls(&t);
        let p = coder_follow_up(&plan_ctx());
        assert_has(&p, &["forge-lsp call plan-read", "**`PLAN:1`** — bug · id 5"]);
        assert_lacks(&p, &["## Phase 2"]);
    }

    #[test]
    fn audit_follow_up_rechecks_everything() {
        let c = sectioned_ctx();
        let t = audit_follow_up(&c);
        assert!(
            t.starts_with("[Forge loop `auth-tokens` · section audit 2/4 · iteration 3/10] (continuation)\n"),
            "{t}"
        );
        assert_has(
            &t,
            &[
                "> - Added refresh — section step 2",
                "### Attempt 1 · iteration 2 · audit: dirty",
                "git status --short",
                "git diff 0123abcd4567ef",
                "verify **every** outstanding finding",
                "Delete each one that is resolved",
                "forge-lsp call review-delete '",
                "`summary` is **required**",
            ],
        );
        check_calls(&t);
        assert_eq!(handoffs(&t).len(), 2);
        let p = audit_follow_up(&plan_ctx());
        assert_has(&p, &["**never send `summary`**"]);
        assert_eq!(handoffs(&p).len(), 1);
    }

    #[test]
    fn recurring_findings_need_three_dirty_audits_in_a_row() {
        let mut c = sectioned_ctx();
        assert!(recurring_findings(&c).is_empty());
        let bug_a = c.findings[0].clone();
        c.attempts.push(AttemptView {
            number: 3,
            iteration: 4,
            outcome: Some("dirty".into()),
            coder_decisions: None,
            findings_after: vec![bug_a.clone()],
        });
        // A pending (not yet audited) attempt does not break the run.
        c.attempts.push(AttemptView { number: 4, iteration: 4, ..Default::default() });
        let rec = recurring_findings(&c);
        assert_eq!(rec.len(), 1);
        assert_eq!(rec[0].id, 17);
        let t = section_continuation(&c);
        assert_has(
            &t,
            &["## Recurring findings", "`src/auth.rs:42`", "open after the last 3 audits", "different approach"],
        );
        assert!(audit(&c).contains("Re-evaluate each of them"));
        assert!(coder_follow_up(&c).contains("## Recurring findings"));
        assert!(section_continuation(&c).contains("### Attempt 4 · iteration 4 · not audited yet"));

        // A clean audit in between resets the run; a different section is a different finding.
        c.attempts[1].outcome = Some("clean".into());
        assert!(recurring_findings(&c).is_empty());
        c.attempts[1].outcome = Some("dirty".into());
        c.attempts[0].findings_after[0].section_index = Some(0);
        c.attempts[1].findings_after[0].section_index = Some(0);
        assert!(recurring_findings(&c).is_empty());
    }

    #[test]
    fn fences_outgrow_backticks_in_the_text() {
        assert_eq!(fenced("plain"), "```markdown\nplain\n```");
        let t = fenced("before\n```rust\nfn x() {}\n```\nafter");
        assert!(t.starts_with("````markdown\n") && t.ends_with("\n````"), "{t}");
        let mut c = sectioned_ctx();
        c.current.as_mut().unwrap().content = "Use ````` five".into();
        assert!(section_initial(&c).contains("``````markdown\nUse ````` five\n``````"));
    }

    #[test]
    fn helpers() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
        assert_eq!(shell_words(&shell_quote("it's \"x\"")), vec!["it's \"x\"".to_string()]);
        assert_eq!(one_line("short", 10), "short");
        assert_eq!(one_line("first\nsecond", 10), "first …");
        assert_eq!(one_line("abcdefghijkl", 5), "abcde…");
        assert_eq!(quote("a\n\nb"), "> a\n>\n> b");
        assert_eq!(indent_rest("a\nb\n\nc", "  "), "a\n  b\n\n  c");
    }
}
