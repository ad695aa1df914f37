//! `forge.plan-write`: create or overwrite the caller's session plan and report its
//! structure (FORGE-REFERENCE.md §2.2, §3.6).

use std::borrow::Cow;

use forge_domain::plan::{normalize::normalize_plan, structure};
use forge_protocol::{CommandResult, ToolError};

use super::{ok, Db, ToolCtx};
use crate::plan_ops;
use forge_store::plans;

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Create or overwrite the plan stored for the current session (the plan of record read by plan-read and execute-plan). Returns a structure report: line and char counts, the detected Loop Name, the section outline and any structural warnings. Use <!-- forge-section --> markers before each ## Phase heading; use plan-edit for small revisions. Denied inside loop sessions and while the session runs a loop.";

pub type Input = forge_protocol::inputs::PlanWriteInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let session = plan_ops::target_session(ctx, "plan-write", input.session_id.as_deref())?;
    plan_ops::running_loop_guard(ctx, &session)?;
    let normalized = normalize_plan(&input.content).map_err(|m| ToolError::invalid(format!("plan-write failed: {m}")))?;
    // The submitted text itself when normalizing kept all of it (no copy of the plan).
    let text = match normalized {
        Cow::Borrowed(kept) if kept.len() == input.content.len() => input.content,
        other => other.into_owned(),
    };
    // Shared with the plan cache: read, not copied.
    let existing = plans::session_shared(ctx.db, ctx.project_id(), &session).db()?;
    let (stored, written) = plan_ops::write_session_plan(ctx, &session, existing.as_deref(), text)?;
    let report = plan_ops::report(&stored, structure::Outline::Full);
    ok(report.render(), plan_ops::report_data(&session, &report, written))
}
