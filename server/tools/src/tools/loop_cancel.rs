//! `forge.loop-cancel`: cancel a running loop (status `cancelled`, pending handoff
//! discarded, the agent's turn killed, the worktree removed with `loop.cleanupWorktree`).

use forge_protocol::{CommandResult, ToolError};

use super::{ok, Db, ToolCtx};
use forge_engine::Effect;
use crate::loop_scope;
use forge_store::loops;

pub const NEEDS_SERVER: bool = true;

/// Runs on the store's writer thread as one grouped write (crate docs); its store part
/// only reads, and the engine carries out its effect after the commit (`ctx.effect`).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Cancel an active loop. name is a loop name or a part of it; without it, cancels the only active loop.";

pub type Input = forge_protocol::inputs::LoopCancelInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    // A blank name is no name given: a script's empty variable would otherwise cancel
    // whichever loop runs (review YM), as restart already refuses.
    if input.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
        return Err(ToolError::invalid_params(
            "invalid argument `name`: must not be blank; omit it to cancel the only active loop",
        ));
    }
    let name = match input.name.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => {
            let running: Vec<_> = loops::list(ctx.db, ctx.project_id()).db()?.into_iter().filter(|l| l.status == "running").collect();
            match running.len() {
                0 => return Err(ToolError::not_found("No active loops.")),
                1 => running[0].loop_name.clone(),
                _ => {
                    let names: Vec<String> = running.iter().map(|l| format!("- {}", l.loop_name)).collect();
                    return Err(ToolError::conflict(format!("Multiple active loops. Specify a name.\n{}", names.join("\n"))));
                }
            }
        }
        Some(q) => {
            let row = loop_scope::find_loop_worded(ctx, q, loop_scope::Wording::Cancel)?;
            // With a server, the engine checks again under the loop lock (`runner::cancel`):
            // a loop that a restart holds at this moment reads as ended here, and is running
            // once the restart lets go; the cancel must wait for it, not be refused.
            if row.status != "running" && !ctx.has_engine {
                let recoverable = forge_engine::runner::work_recoverable(ctx.env, &row);
                return Err(ToolError::conflict(forge_domain::loop_status::already_ended(
                    &row.loop_name,
                    &row.status,
                    row.termination_reason.as_deref(),
                    recoverable,
                )));
            }
            row.loop_name
        }
    };
    if !ctx.has_engine {
        return Err(ToolError::precondition("forge.loop-cancel needs a running forge-lsp server."));
    }
    ctx.effect = Some(Effect::Cancel { loop_name: name });
    ok("cancelling", serde_json::Value::Null)
}
