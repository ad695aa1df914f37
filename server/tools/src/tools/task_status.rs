//! `forge.task-status`: what a loop session is doing (running, stopped, idle), its last
//! activity and that activity's source, and its queued messages. For the loop's owner.

use forge_engine::TaskAction;
use forge_protocol::{CommandResult, ToolError};

use super::ToolCtx;
use crate::task_control;

pub const NEEDS_SERVER: bool = true;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

/// Given up on a cancel: one its loop's runner has not taken yet is never acted on
/// (review YJ).
pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::StopOnCancel;

pub const DESCRIPTION: &str = "Status of a loop's agent session (default: the current phase session): running a turn, stopped, idle or standby; the last activity and its source (output, tool-call, turn-start, unknown); queued messages. For the loop's owner (the user or the session that started it).";

pub type Input = forge_protocol::inputs::TaskStatusInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    task_control::control(ctx, "task-status", input.name.as_deref(), input.session_id, TaskAction::Status)
}
