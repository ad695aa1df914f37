//! `forge.task-message`: queue a message into a loop session's next turn without starting
//! one. For the loop's owner.

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

pub const DESCRIPTION: &str = "Queue a message into a loop session's next turn (default: the current phase session) without starting or interrupting a turn; it is put before that session's next prompt and delivered once. For the loop's owner.";

pub type Input = forge_protocol::inputs::TaskMessageInput;

/// Longest message accepted (bytes).
pub const MAX_MESSAGE: usize = 16 * 1024;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let message = task_control::text_arg("message", &input.message, MAX_MESSAGE)?;
    task_control::control(ctx, "task-message", input.name.as_deref(), input.session_id, TaskAction::Message(message))
}
