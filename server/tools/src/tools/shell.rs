//! `forge.shell`: run a shell command in the caller's loop worktree, inside the loop's
//! sandbox when the loop has one (engine/sandbox.rs). Loop sessions only.
//!
//! The tool validates in its transaction and hands the run to the engine
//! (`Effect::Shell`): the process must not hold the store thread.

use forge_protocol::{CommandResult, ToolError};

use super::{ok, ToolCtx};
use forge_engine::sandbox::{normalize_cwd, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS};
use forge_engine::Effect;
use crate::loop_scope;

pub const NEEDS_SERVER: bool = true;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

/// Its command is killed when its caller gives up or goes away (nobody would read its
/// result, and it would run on to its time limit: review AA).
pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::StopOnCancelOrClose;

pub const DESCRIPTION: &str = "Run a shell command (sh -c) in your loop's worktree, inside the loop's sandbox when it has one (worktree writable at its host path, the rest read-only, private /tmp, no network unless the loop enables it). command is required; cwd is relative to the worktree (default: its root); timeoutMs defaults to 120000, at most 600000 (the process group is killed on timeout). Returns the exit code, stdout and stderr (each capped at 1 MiB). Loop sessions only.";

pub type Input = forge_protocol::inputs::ShellInput;

/// Linux's limit on one argument of a program (`MAX_ARG_STRLEN`, 32 pages), with its NUL.
const MAX_COMMAND_BYTES: usize = 128 * 1024;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    if input.command.trim().is_empty() {
        return Err(ToolError::invalid_params("invalid argument `command`: must not be empty"));
    }
    // What `sh -c` can be given (review YI: both were internal errors, 1007, from the
    // spawn): no NUL byte, and one argument of at most the kernel's 128 KiB.
    if input.command.contains('\0') {
        return Err(ToolError::invalid_params("invalid argument `command`: must not contain a NUL byte (\\u0000)"));
    }
    if input.command.len() >= MAX_COMMAND_BYTES {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `command`: {} bytes, over the {} bytes one argument of `sh -c` may have; write the script to a file in the worktree and run that",
            input.command.len(),
            MAX_COMMAND_BYTES - 1
        )));
    }
    let timeout_ms = input.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `timeoutMs`: must be between 1 and {MAX_TIMEOUT_MS} (10 minutes), got {timeout_ms}"
        )));
    }
    let cwd = normalize_cwd(input.cwd.as_deref())
        .map_err(|e| ToolError::invalid_params(format!("invalid argument `cwd`: {e}")))?;
    let Some(row) = loop_scope::caller_loop(ctx)? else {
        return Err(ToolError::denied(format!(
            "forge.shell is not available to session {}: it is not a session of a running loop (the tool is for loop sessions only).",
            ctx.caller().session_id
        )));
    };
    if !ctx.has_engine {
        return Err(ToolError::precondition("forge.shell needs a running forge-lsp server (it runs processes)."));
    }
    ctx.effect = Some(Effect::Shell { loop_name: row.loop_name, command: input.command, cwd, timeout_ms });
    ok("running", serde_json::Value::Null)
}
