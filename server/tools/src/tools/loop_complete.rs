//! `forge.loop-complete`: record the post-action report; the loop completes when the
//! post-action turn ends.

use forge_domain::handoff::{self, Role};
use forge_domain::loop_machine::Phase;
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use forge_store::loop_db as db;
use crate::loop_scope;

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Record the post-action report of the loop (post_action phase only), then end your turn: outcome (completed, completed_with_issues, failed), steps [{name, status: done|skipped|failed, detail?}] (at least one), followUps, notes.";

pub type Input = forge_protocol::inputs::LoopCompleteInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let row = loop_scope::direct_loop(ctx, "loop-complete")?;
    let phase = Phase::parse(&row.phase).unwrap_or(Phase::Coding);
    if phase != Phase::PostAction {
        return Err(ToolError::denied(format!(
            "forge.loop-complete is only valid in the post_action phase (loop \"{}\" is {}): end coding and auditing turns with loop-handoff.",
            row.loop_name, row.phase
        )));
    }
    if let Some(e) = handoff::complete_schema_error(&input) {
        return Err(ToolError::invalid_params(e));
    }
    let payload = handoff::validate_complete(phase, &input).map_err(ToolError::invalid)?;
    loop_scope::others_settled(ctx, &row, "loop-complete")?;
    let replaced = db::record_handoff(
        ctx.db,
        ctx.project_id(),
        &row.loop_name,
        &ctx.caller().session_id,
        Role::PostAction.as_str(),
        &row.phase,
        row.section(),
        row.iteration,
        &payload,
        ctx.now,
    )
    .db()?;
    let text = if replaced { handoff::HANDOFF_REPLACED } else { handoff::HANDOFF_RECORDED };
    ok(text, json!({ "loopName": row.loop_name, "replaced": replaced, "payload": payload }))
}
