//! `forge.loop-handoff`: record the coder's or the auditor's handoff for the current
//! phase; the loop applies it when the turn ends (seeds: "Handoff-Driven Turn Ends").

use forge_domain::handoff::{self, AuditContext, Role};
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use forge_engine::prompt_context;
use forge_store::loop_db as db;
use crate::loop_scope;

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Record the handoff of the current loop phase, then end your turn. Coder (coding phase): changes [{summary, reason}] (at least one), deviations [{planItem, actual, reason}], verification [{command, cwd, outcome: pass|fail|not-run, changedAfter}] (at least one), notes. Auditor (auditing phase): summary {done, deviations, followUps} when no blocking bug finding remains in a sectioned loop (forbidden otherwise), notes. Only the loop's current session may call it; the last call in a turn wins.";

pub type Input = forge_protocol::inputs::LoopHandoffInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let row = loop_scope::direct_loop(ctx, "loop-handoff")?;
    let role = match row.phase.as_str() {
        "coding" => Role::Coder,
        "auditing" => Role::Auditor,
        _ => {
            return Err(ToolError::denied(
                "forge.loop-handoff is not used in the post_action phase: record the post-action report with loop-complete.",
            ))
        }
    };
    if let Some(b) = &ctx.caller().binding {
        if b.role != role.as_str() {
            return Err(ToolError::denied(format!(
                "forge.loop-handoff: this is the {} session, but loop \"{}\" is in the {} phase.",
                b.role, row.loop_name, row.phase
            )));
        }
    }
    let blocking = prompt_context::outstanding(ctx.db, &row).db()?.len() as u32;
    let actx = AuditContext { sectioned: row.total_sections > 0, blocking_bug_count: blocking };
    // A field of the other role, a missing required one or an empty list the schema needs
    // entries in: invalid parameters (-32602).
    if let Some(e) = handoff::schema_error(role, &input, &actx) {
        return Err(ToolError::invalid_params(e));
    }
    let payload = handoff::validate_handoff(role, &input, &actx).map_err(ToolError::invalid)?;
    // After the input's checks, as in loop-complete: a bad input gets the same answer
    // whether or not other sessions are busy.
    loop_scope::others_settled(ctx, &row, "loop-handoff")?;
    let replaced = db::record_handoff(
        ctx.db,
        ctx.project_id(),
        &row.loop_name,
        &ctx.caller().session_id,
        role.as_str(),
        &row.phase,
        row.section(),
        row.iteration,
        &payload,
        ctx.now,
    )
    .db()?;
    let text = if replaced { handoff::HANDOFF_REPLACED } else { handoff::HANDOFF_RECORDED };
    ok(text, json!({ "loopName": row.loop_name, "role": role.as_str(), "replaced": replaced, "payload": payload }))
}
