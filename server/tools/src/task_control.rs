//! Shared by the task-control tools (`forge.task-status`, `-message`, `-cancel`,
//! `-revive`): which loop is meant, and whether the caller owns it.
//!
//! The owner of a loop is the user (any caller with agent `user` outside a loop session),
//! or the session that started it with `execute-plan` (the loop's `host_session_id`). Loop
//! sessions themselves may not control their loop.

use forge_engine::{Effect, TaskAction};
use forge_protocol::{CommandResult, ToolError};
use forge_store::loops::{self, LoopRow};

use crate::{loop_scope, Db, ToolCtx};

/// Whether the caller owns `row`; a denial (1001) names the tool, the caller and the rule.
pub fn check_owner(ctx: &ToolCtx, tool: &str, row: &LoopRow) -> Result<(), ToolError> {
    deny_loop_sessions(ctx, tool)?;
    let c = ctx.caller();
    if c.agent == "user" || row.host_session_id.as_deref() == Some(c.session_id.as_str()) {
        return Ok(());
    }
    Err(ToolError::denied(format!(
        "forge.{tool} is not available to agent `{}` (session {}): loop \"{}\" is controlled by the user and by the session that started it ({})",
        c.agent,
        c.session_id,
        row.loop_name,
        row.host_session_id.as_deref().unwrap_or("unknown")
    )))
}

/// Loop sessions may not control loops (their own or another).
fn deny_loop_sessions(ctx: &ToolCtx, tool: &str) -> Result<(), ToolError> {
    let c = ctx.caller();
    match &c.binding {
        Some(b) => Err(ToolError::denied(format!(
            "forge.{tool} is not available to the {} session {} of loop \"{}\": task controls are for the loop's owner (the user, or the session that started the loop), not loop sessions",
            b.role, c.session_id, b.loop_name
        ))),
        None => Ok(()),
    }
}

/// The running loop meant by `name` (default: the only running loop the caller owns).
pub fn target(ctx: &ToolCtx, tool: &str, name: Option<&str>) -> Result<LoopRow, ToolError> {
    deny_loop_sessions(ctx, tool)?;
    let row = match name.map(str::trim).filter(|s| !s.is_empty()) {
        Some(q) => loop_scope::find_loop(ctx, q)?,
        None => {
            let c = ctx.caller();
            let (running, others): (Vec<LoopRow>, Vec<LoopRow>) = loops::list(ctx.db, ctx.project_id())
                .db()?
                .into_iter()
                .filter(|l| l.status == "running")
                .partition(|l| c.agent == "user" || l.host_session_id.as_deref() == Some(c.session_id.as_str()));
            match running.len() {
                // Loops run, none of them the caller's: the denial says so (not "none").
                0 if !others.is_empty() => {
                    let names: Vec<&str> = others.iter().map(|l| l.loop_name.as_str()).collect();
                    return Err(ToolError::denied(format!(
                        "forge.{tool} is not available to agent `{}` (session {}): the running loops ({}) are controlled by the user and by the sessions that started them",
                        c.agent,
                        c.session_id,
                        names.join(", ")
                    )));
                }
                0 => return Err(ToolError::not_found("No active loops.")),
                1 => running.into_iter().next().expect("one"),
                _ => {
                    let names: Vec<String> = running.iter().map(|l| format!("- {}", l.loop_name)).collect();
                    return Err(ToolError::conflict(format!(
                        "Multiple active loops. Specify a name.\n{}",
                        names.join("\n")
                    )));
                }
            }
        }
    };
    check_owner(ctx, tool, &row)?;
    if row.status != "running" {
        return Err(ToolError::conflict(format!("Loop \"{}\" is not running ({}).", row.loop_name, row.status)));
    }
    Ok(row)
}

/// Finds the loop, checks ownership and leaves the control for the engine.
pub fn control(
    ctx: &mut ToolCtx,
    tool: &str,
    name: Option<&str>,
    session: Option<String>,
    action: TaskAction,
) -> Result<CommandResult, ToolError> {
    let row = target(ctx, tool, name)?;
    if !ctx.has_engine {
        return Err(ToolError::precondition(format!("forge.{tool} needs a running forge-lsp server.")));
    }
    let session = session.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    ctx.effect = Some(Effect::Task { loop_name: row.loop_name, session, action });
    crate::ok("", serde_json::Value::Null)
}

/// Checks a free-text argument: not blank, at most `max` bytes.
pub fn text_arg(field: &str, v: &str, max: usize) -> Result<String, ToolError> {
    if v.trim().is_empty() {
        return Err(ToolError::invalid_params(format!("invalid argument `{field}`: must not be empty")));
    }
    if v.len() > max {
        return Err(ToolError::invalid_params(format!("invalid argument `{field}`: {} bytes, at most {max}", v.len())));
    }
    Ok(v.to_string())
}
