//! `forge.task-cancel`: stop the running turn of a loop's current phase session, keeping
//! the session (the loop waits for `forge.task-revive`). For the loop's owner.

use forge_engine::TaskAction;
use forge_protocol::{CommandResult, ToolError};

use super::ToolCtx;
use crate::task_control;

pub const NEEDS_SERVER: bool = true;

/// Runs on the store's writer thread as one grouped write (crate docs); its store part
/// only reads, and the engine carries out its effect after the commit (`ctx.effect`).
pub const READ_ONLY: bool = false;

/// Given up on a cancel: one its loop's runner has not taken yet is never acted on
/// (review YJ).
pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::StopOnCancel;

pub const DESCRIPTION: &str = "Stop the running turn of a loop's current phase session while keeping the session: its process group is killed, the loop keeps running and waits; task-revive resumes the session with an instruction. A no-op when no turn is running. For the loop's owner.";

pub type Input = forge_protocol::inputs::TaskCancelInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    task_control::control(ctx, "task-cancel", input.name.as_deref(), input.session_id, TaskAction::Cancel)
}
