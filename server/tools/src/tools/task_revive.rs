//! `forge.task-revive`: resume a stopped loop session with an instruction (a new turn of
//! the same session, with the instruction as its prompt). For the loop's owner.

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

pub const DESCRIPTION: &str = "Resume a loop's current phase session that is not running a turn (stopped with task-cancel) with an instruction: a new turn of the same session starts with the instruction as its prompt (queued messages first). For the loop's owner.";

pub type Input = forge_protocol::inputs::TaskReviveInput;

/// Longest instruction accepted (bytes).
pub const MAX_INSTRUCTION: usize = 64 * 1024;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let instruction = task_control::text_arg("instruction", &input.instruction, MAX_INSTRUCTION)?;
    task_control::control(ctx, "task-revive", input.name.as_deref(), input.session_id, TaskAction::Revive(instruction))
}
