//! `forge.plan-edit`: exact string replacement in the caller's session plan
//! (FORGE-REFERENCE.md §2.3). Rejections never touch the stored plan.

use forge_domain::plan::{
    edit::{apply_edit_within, EditErrorKind, EditOutcome},
    structure,
};
use forge_protocol::{CommandResult, ToolError};

use super::{ok, Db, ToolCtx};
use crate::plan_ops;
use forge_store::plans;

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Edit the stored session plan by exact string replacement, like the Edit tool edits a file. oldString must match exactly once unless replaceAll is true; do not include plan-read's `N: ` line-number prefixes. An empty oldString creates the plan only when none exists. Returns `Replaced N occurrence(s).` and a structure report of the sections the edit touched.";

pub type Input = forge_protocol::inputs::PlanEditInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let session = plan_ops::target_session(ctx, "plan-edit", input.session_id.as_deref())?;
    plan_ops::running_loop_guard(ctx, &session)?;
    // Shared with the plan cache: read, not copied.
    let existing = plans::session_shared(ctx.db, ctx.project_id(), &session).db()?;
    if existing.is_none() && !input.old_string.is_empty() && input.old_string != input.new_string {
        return Err(ToolError::not_found(
            "plan-edit failed: no plan stored for this session. Use plan-write to create it first.",
        ));
    }
    // A result over the plan size limit is refused before it is built.
    let max = usize::try_from(ctx.env.config.max_plan_bytes).unwrap_or(usize::MAX);
    let outcome = apply_edit_within(
        existing.as_deref().map(|p| p.content.as_str()),
        &input.old_string,
        &input.new_string,
        input.replace_all.unwrap_or(false),
        max,
    )
    // oldString not found is a stale edit (1003, re-read the plan); anything else is input
    // that cannot be used (1006).
    .map_err(|e| match e.kind {
        EditErrorKind::Stale => ToolError::conflict(e.message),
        EditErrorKind::Invalid => ToolError::invalid(e.message),
    })?;
    let (prefix, text, outline, count) = match outcome {
        EditOutcome::Created { text } => ("Created plan.".to_string(), text, structure::Outline::Full, 0),
        EditOutcome::Replaced { text, count, lines } => (
            format!("Replaced {count} occurrence(s)."),
            text,
            structure::Outline::Touching(lines),
            count,
        ),
    };
    let (stored, written) = plan_ops::write_session_plan(ctx, &session, existing.as_deref(), text)?;
    let report = plan_ops::report(&stored, outline);
    let mut data = plan_ops::report_data(&session, &report, written);
    data["replaced"] = serde_json::json!(count);
    data["created"] = serde_json::json!(prefix == "Created plan.");
    ok(format!("{prefix}\n{}", report.render()), data)
}
