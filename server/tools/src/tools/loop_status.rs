//! `forge.loop-status`: list the project's loops, show one, or restart one.

use forge_domain::loop_status::{self, LoopView};
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use forge_engine::Effect;
use forge_store::loop_db as db;
use crate::loop_scope;
use forge_store::loops::{self, LoopRow};

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "List loops, inspect one loop (name, or a part of it), or restart a loop that is not completed (restart: true; force: true is required for a running loop). A restart keeps the plan, section progress, findings and worktree, resets the iteration to 1 and starts a fresh session.";

pub type Input = forge_protocol::inputs::LoopStatusInput;

fn view(ctx: &ToolCtx, l: &LoopRow) -> Result<LoopView, ToolError> {
    let section = if l.total_sections > 0 {
        let secs = db::sections(ctx.db, ctx.project_id(), &l.loop_name).db()?;
        let title = secs.iter().find(|s| i64::from(s.index) == l.current_section_index).map(|s| s.title.clone()).unwrap_or_default();
        Some((l.current_section_index, l.total_sections, title))
    } else {
        None
    };
    let (last_audit, report) = db::large(ctx.db, ctx.project_id(), &l.loop_name).db()?;
    let busy: i64 = ctx
        .db
        .query_row(
            "SELECT count(*) FROM loop_sessions WHERE project_id = ?1 AND loop_name = ?2 AND status IN ('busy','retry')",
            rusqlite::params![ctx.project_id(), l.loop_name],
            |r| r.get(0),
        )
        .db()?;
    let activity: Option<i64> = ctx
        .db
        .query_row("SELECT last_activity_at FROM loops WHERE project_id = ?1 AND loop_name = ?2", rusqlite::params![ctx.project_id(), l.loop_name], |r| r.get(0))
        .db()?;
    Ok(LoopView {
        name: l.loop_name.clone(),
        status: l.status.clone(),
        phase: l.phase.clone(),
        iteration: l.iteration,
        max_iterations: l.max_iterations,
        session: l.current_session_id.clone(),
        worktree: worktree_line(l, ctx.env.config.cleanup_worktree),
        branch: l.worktree_branch.clone(),
        started_at: l.started_at,
        completed_at: l.completed_at,
        termination_reason: l.termination_reason.clone(),
        section,
        audit_count: l.audit_count,
        error_count: l.error_count,
        failed_turns: (l.failed_coding_turns, l.failed_audit_turns),
        last_audit,
        post_action_report: report,
        completion_summary: l.completion_summary.clone(),
        execution_model: l.execution_model.clone(),
        auditor_model: l.auditor_model.clone(),
        busy: busy > 0,
        server_gone: server_gone(ctx, l)?,
        last_activity_at: activity,
        usage: Some(usage_rows(ctx, l, true)?).filter(|r| !r.is_empty()).map(|r| forge_domain::usage::total(&r)),
        prompt: None,
        recent_replies: vec![],
        files_changed: None,
    })
}

/// [`view`] with what only one loop's detail shows (`Session Output:`): its last replies
/// and the count of its changed files the runner took at its last turn's end (a count
/// reads the worktree, too slow for a request: a review had one take seconds).
fn detail_view(ctx: &ToolCtx, l: &LoopRow) -> Result<(LoopView, Vec<db::Reply>), ToolError> {
    let mut v = view(ctx, l)?;
    let replies = db::recent_replies(ctx.db, ctx.project_id(), &l.loop_name).db()?;
    v.recent_replies = replies.iter().map(|r| r.text.clone()).collect();
    v.files_changed = db::files_changed(ctx.db, ctx.project_id(), &l.loop_name).db()?;
    Ok((v, replies))
}

/// The recorded server of a running loop when that process has ended
/// ([`forge_engine::owner::server_gone`]). Not for this process's own loops.
fn server_gone(ctx: &ToolCtx, l: &LoopRow) -> Result<Option<i64>, ToolError> {
    forge_engine::owner::server_gone(ctx.db, ctx.project_id(), l).db()
}

/// Usage rows of a loop for display: (model, role, totals), the stored rows with the live
/// session's replaced by what its usage file reports now (seeds "Usage Tracking": merged
/// without counting the active session twice).
fn usage_rows(
    ctx: &ToolCtx,
    l: &LoopRow,
    with_live: bool,
) -> Result<Vec<(String, String, forge_domain::usage::Totals)>, ToolError> {
    let stored = stored_usage(ctx, &l.loop_name)?;
    let live: Option<Vec<(String, String, forge_domain::usage::Totals)>> = (with_live && l.status == "running")
        .then(|| ctx.db.path().map(std::path::PathBuf::from))
        .flatten()
        .and_then(|db| db.parent().map(|d| forge_engine::host::usage_file(d, &l.current_session_id)))
        .and_then(|f| std::fs::read_to_string(f).ok())
        .map(|text| {
            let (lines, _) = forge_domain::usage::parse(&text);
            let role = if l.phase == "auditing" { "auditor" } else { "code" };
            let fallback = if l.phase == "auditing" { l.auditor_model.clone().or(l.execution_model.clone()) } else { l.execution_model.clone() }
                .unwrap_or_else(|| "default".into());
            forge_domain::usage::per_model(&lines, &fallback).into_iter().map(|(m, t)| (m, role.to_string(), t)).collect()
        });
    Ok(forge_domain::usage::merge_live(&stored, live.as_deref().map(|rows| (l.current_session_id.as_str(), rows))))
}

/// Stored usage rows of a loop: (session, model, role, totals).
fn stored_usage(ctx: &ToolCtx, loop_name: &str) -> Result<Vec<(String, String, String, forge_domain::usage::Totals)>, ToolError> {
    let mut st = ctx
        .db
        .prepare(
            "SELECT session_id, model, role, cost, input_tokens, output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, message_count
             FROM loop_session_usage WHERE project_id = ?1 AND loop_name = ?2",
        )
        .db()?;
    let rows = st
        .query_map(rusqlite::params![ctx.project_id(), loop_name], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                forge_domain::usage::Totals {
                    cost: r.get(3)?,
                    input: r.get::<_, i64>(4)? as u64,
                    output: r.get::<_, i64>(5)? as u64,
                    reasoning: r.get::<_, i64>(6)? as u64,
                    cache_read: r.get::<_, i64>(7)? as u64,
                    cache_write: r.get::<_, i64>(8)? as u64,
                    messages: r.get::<_, i64>(9)? as u64,
                },
            ))
        })
        .db()?;
    rows.collect::<rusqlite::Result<Vec<_>>>().db()
}

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    // A blank name is refused, not taken for none, as loop-cancel refuses one (review YP:
    // `{"name": " ", "restart": true}` fell through to the list of loops).
    if input.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
        return Err(ToolError::invalid_params(
            "invalid argument `name`: must not be blank; omit it to list the loops",
        ));
    }
    let name = input.name.as_deref().map(str::trim);
    if input.restart == Some(true) {
        let Some(q) = name else {
            return Err(ToolError::invalid_params("Specify a loop name to restart. Use loop-status to see available loops."));
        };
        let row = loop_scope::find_loop_worded(ctx, q, loop_scope::Wording::Restart)?;
        if !ctx.has_engine {
            return Err(ToolError::precondition("Restarting a loop needs a running forge-lsp server (it runs agent processes)."));
        }
        ctx.effect = Some(Effect::Restart { loop_name: row.loop_name, force: input.force == Some(true) });
        return ok("restarting", serde_json::Value::Null);
    }
    match name {
        None => {
            let all = loops::list(ctx.db, ctx.project_id()).db()?;
            let views = all.iter().map(|l| view(ctx, l)).collect::<Result<Vec<_>, _>>()?;
            let data = json!({ "loops": all.iter().zip(&views).map(|(l, v)| json!({
                "loopName": l.loop_name, "status": l.status, "phase": l.phase, "iteration": l.iteration,
                "sectionIndex": (l.total_sections > 0).then_some(l.current_section_index), "totalSections": l.total_sections,
                "terminationReason": l.termination_reason, "startedAt": l.started_at, "completedAt": l.completed_at,
                "serverGone": v.server_gone,
            })).collect::<Vec<_>>() });
            ok(loop_status::render_list(&views, ctx.now), data)
        }
        Some(q) => {
            let row = loop_scope::find_loop(ctx, q)?;
            let (v, replies) = detail_view(ctx, &row)?;
            let restart = restart_line(ctx, &row);
            let data = json!({
                "loopName": row.loop_name, "status": row.status, "phase": row.phase, "iteration": row.iteration,
                "maxIterations": row.max_iterations, "sectionIndex": (row.total_sections > 0).then_some(row.current_section_index),
                "totalSections": row.total_sections, "worktreeDir": row.worktree_dir, "branch": row.worktree_branch,
                "sessionId": row.current_session_id, "terminationReason": row.termination_reason,
                "auditCount": row.audit_count, "errorCount": row.error_count,
                // A running loop whose server has ended: the process id it had (null else).
                "serverGone": v.server_gone,
                // `Session Output:`: the last replies (oldest first, with their turn's role),
                // and what the work changed since the loop's start commit as counted at its
                // last turn's end (null before any count; `error` when it could not be).
                "recentReplies": replies,
                "filesChanged": match &v.files_changed {
                    Some(Ok((files, added, deleted))) => json!({ "files": files, "added": added, "deleted": deleted }),
                    Some(Err(e)) => json!({ "error": e }),
                    None => serde_json::Value::Null,
                },
            });
            let (v, block) = with_prompt_and_usage(ctx, &row, v, false)?;
            ok(loop_status::render_detail(&v, &restart, &block, ctx.now), data)
        }
    }
}

/// The loop's status document (`forge://loop/<name>/status.md`, exactly `row`): the lines
/// of its `loop-status` detail ([`loop_status::render_document`]), with what is stored
/// only: the running turn's usage, which its agent reports to a file as it goes, is counted
/// from its end on (an open document is refreshed when the store changes: a review found it
/// showing costs that had grown since).
pub fn document(env: &super::ToolEnv, db: &rusqlite::Connection, row: &LoopRow) -> Result<String, ToolError> {
    let ctx = &ToolCtx::new(env, db, false);
    let (v, _) = detail_view(ctx, row)?;
    let restart = restart_line(ctx, row);
    let (v, block) = with_prompt_and_usage(ctx, row, v, true)?;
    Ok(loop_status::render_document(&v, &restart, &block))
}

/// The detail's `Restart...` line.
fn restart_line(ctx: &ToolCtx, row: &LoopRow) -> String {
    match row.status.as_str() {
        "completed" => "Restart: not available (completed)".to_string(),
        // Forge's lines (FORGE-REFERENCE §6).
        "running" => "Restart: available with force=true".to_string(),
        // As the restart itself decides (`loop_machine::restartable`): a loop whose
        // worktree and branch are both gone is not offered one it would refuse.
        _ if !forge_engine::runner::work_recoverable(ctx.env, row) => format!(
            "Restart blocked: worktree directory no longer exists at {} and its branch is gone.",
            row.worktree_dir
        ),
        _ => format!("Restart: available with loop-status name={} restart=true", row.loop_name),
    }
}

/// `v` with a running loop's `Prompt:` (the start of its plan), and the `Cumulative
/// Usage:` block: for the detail with the running turn's usage as its file says now, for
/// the status document (`document`) what is stored, in Markdown.
fn with_prompt_and_usage(
    ctx: &ToolCtx,
    row: &LoopRow,
    mut v: LoopView,
    document: bool,
) -> Result<(LoopView, String), ToolError> {
    if row.status == "running" {
        // The start of the plan: the `Prompt:` line shows at most 100 characters.
        v.prompt = forge_store::plans::loop_shared(ctx.db, ctx.project_id(), &row.loop_name)
            .db()?
            .map(|p| p.content.chars().take(101).collect());
    }
    let usage = usage_rows(ctx, row, !document)?;
    let block = if document { forge_domain::usage::render_markdown(&usage) } else { forge_domain::usage::render(&usage) };
    Ok((v, block))
}

/// The loop's worktree folder as the detail shows it, marked when it is no longer there: a
/// completed loop's is removed once its work is committed to the branch, and a path that
/// is gone was shown as if it were (found by a review).
fn worktree_line(l: &forge_store::loops::LoopRow, cleanup_worktree: bool) -> String {
    let dir = &l.worktree_dir;
    if dir.is_empty() {
        return dir.clone();
    }
    if std::path::Path::new(dir).exists() {
        // A completed loop's worktree (a cancelled one's too with `loop.cleanupWorktree`)
        // is removed only once everything in it is on the branch: one still there was kept.
        let removed_when_ended = l.status == "completed" || (l.status == "cancelled" && cleanup_worktree);
        return if removed_when_ended {
            format!("{dir} (kept when the loop ended: `git -C {dir} status` lists what it holds that the branch does not)")
        } else {
            dir.clone()
        };
    }
    // Not more than is known: a completed loop's worktree is removed after its work is
    // committed to the branch, but a folder deleted by hand took what it held with it.
    format!("{dir} ({})", if l.status == "running" { "missing" } else { "removed" })
}
