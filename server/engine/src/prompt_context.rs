//! Gathers what a prompt needs from the store and the worktree, then calls the pure
//! builders of `forge_domain::prompts`.

use std::path::Path;

use forge_domain::prompts::{self, AttemptView, AuditScope, PromptContext, SectionView};
use forge_domain::review::{self, Finding, SectionFilter};
use rusqlite::Connection;

use super::git;
use forge_store::loop_db::{self as db, SectionRow};
use forge_store::{attempts, findings, loops::LoopRow, plans};

/// Which prompt to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// First coder turn of a section (or of a non-sectioned plan).
    Initial,
    /// Coder after a dirty audit or a failed audit.
    Continuation,
    Audit,
    PostAction,
    /// A resumed coder session (standby): loop notice, open findings, handoff instruction.
    CoderFollowUp,
    /// A resumed audit session: coder decisions, attempt history, re-verify findings.
    AuditFollowUp,
}

fn view(s: &SectionRow) -> SectionView {
    SectionView {
        index: s.index,
        title: s.title.clone(),
        content: s.content.clone(),
        status: s.status.clone(),
        done: s.done.clone(),
        deviations: s.deviations.clone(),
        follow_ups: s.follow_ups.clone(),
    }
}

/// Open findings that matter for the loop's current turn: blocking bugs of a sectioned
/// loop (current, earlier, cross-section), every finding of a non-sectioned loop.
pub fn outstanding(db: &Connection, row: &LoopRow) -> rusqlite::Result<Vec<Finding>> {
    match row.section() {
        Some(k) => {
            let all = findings::query(db, &row.project_id, &row.loop_name, &SectionFilter::ScopeOf(k), None)?;
            Ok(review::blocking(&all, Some(k)).into_iter().cloned().collect())
        }
        None => findings::query(db, &row.project_id, &row.loop_name, &SectionFilter::All, None),
    }
}

/// Reads the database part of a prompt context (git scope is added by [`with_scope`]).
pub fn load(
    db: &Connection,
    row: &LoopRow,
    config: &forge_core::config::Config,
    coder_decisions: Option<String>,
) -> rusqlite::Result<PromptContext> {
    let plan = plans::get_loop(db, &row.project_id, &row.loop_name)?.map(|p| p.content).unwrap_or_default();
    let secs = db::sections(db, &row.project_id, &row.loop_name)?;
    let current = row.section().and_then(|k| secs.iter().find(|s| s.index == k)).map(view);
    let completed =
        secs.iter().filter(|s| s.status == "completed" && Some(s.index) != row.section()).map(view).collect();
    let scope = attempts::scope_of(row.section());
    let (rows, _) = attempts::page(db, &row.project_id, &row.loop_name, Some(&scope), 20, None)?;
    let attempts = rows
        .iter()
        .map(|a| AttemptView {
            number: a["attemptNumber"].as_i64().unwrap_or(0),
            iteration: a["iteration"].as_i64().unwrap_or(0),
            outcome: a["outcome"].as_str().map(str::to_string),
            coder_decisions: a["coderDecisions"].as_str().map(str::to_string),
            findings_after: serde_json::from_value(a["findingsAfter"].clone()).unwrap_or_default(),
        })
        .collect();
    Ok(PromptContext {
        loop_name: row.loop_name.clone(),
        branch: row.worktree_branch.clone().unwrap_or_default(),
        worktree: row.worktree_dir.clone(),
        plan,
        iteration: row.iteration.max(0) as u32,
        max_iterations: row.max_iterations.max(0) as u32,
        total_sections: row.total_sections.max(0) as u32,
        current,
        completed,
        findings: outstanding(db, row)?,
        attempts,
        coder_decisions,
        scope: None,
        post_action_skill: config.post_action_skill.clone(),
        post_action_prompt: config.post_action_prompt.clone(),
    })
}

/// Adds the audit scope: changes since the last section checkpoint (or the base commit).
pub fn with_scope(mut ctx: PromptContext, row: &LoopRow) -> PromptContext {
    let wt = Path::new(&row.worktree_dir);
    let Some(base) = row.base_commit.clone() else { return ctx };
    let (since, label) = match git::last_checkpoint(wt, &base) {
        Ok(Some((id, msg))) => (id, format!("the checkpoint commit `{msg}`")),
        _ => (base, "the loop's base commit".to_string()),
    };
    let (changed, untracked) = git::changes_since(wt, &since).unwrap_or_default();
    ctx.scope = Some(AuditScope {
        since_label: label,
        since_commit: since,
        changed_files: changed,
        untracked_files: untracked,
    });
    ctx
}

/// Builds the prompt.
pub fn build(kind: Kind, ctx: &PromptContext) -> String {
    let sectioned = ctx.total_sections > 0;
    match kind {
        Kind::Initial if sectioned => prompts::section_initial(ctx),
        Kind::Initial => prompts::plan_initial(ctx),
        Kind::Continuation if sectioned => prompts::section_continuation(ctx),
        Kind::Continuation => prompts::plan_continuation(ctx),
        Kind::Audit => prompts::audit(ctx),
        Kind::PostAction => prompts::post_action(ctx),
        Kind::CoderFollowUp => prompts::coder_follow_up(ctx),
        Kind::AuditFollowUp => prompts::audit_follow_up(ctx),
    }
}
