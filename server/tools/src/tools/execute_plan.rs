//! `forge.execute-plan`: start a coding/auditing loop in an isolated git worktree, or
//! (`mode: "new-session"`) one untracked agent session with the plan.

use forge_protocol::inputs::ExecuteMode;
use forge_protocol::{CommandResult, ToolError};

use super::{ok, Db, ToolCtx};
use forge_engine::Effect;
use forge_store::{loops, plans};

pub const NEEDS_SERVER: bool = true;

/// Runs on the store's writer thread as one grouped write (crate docs); its store part
/// only reads, and the engine carries out its effect after the commit (`ctx.effect`).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Start an iterative development loop for a plan in an isolated git worktree (branch forge/<name>): a coder agent implements each section and hands off, an auditor reviews it, and a clean audit advances to the next section. title is required; plan defaults to the session's stored plan; loopName is slugified and made unique. branch names a new git branch to use instead of forge/<name>. mode: \"new-session\" instead starts one untracked agent session with the plan (no worktree, no loop). Denied inside loop sessions.";

pub type Input = forge_protocol::inputs::ExecutePlanInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let title = input.title.trim().to_string();
    if title.is_empty() {
        return Err(ToolError::invalid_params("invalid argument `title`: must not be empty"));
    }
    if let Some(l) = loops::running_for_session(ctx.db, ctx.project_id(), &ctx.caller().session_id).db()? {
        return Err(ToolError::denied(format!(
            "forge.execute-plan is not available to session {}: it runs loop \"{}\", and a loop cannot start more loops.",
            ctx.caller().session_id,
            l.loop_name
        )));
    }
    let plan = match input.plan {
        Some(p) => p,
        None => plans::get_session(ctx.db, ctx.project_id(), &ctx.caller().session_id)
            .db()?
            .map(|p| p.content)
            .ok_or_else(|| ToolError::not_found("No plan found. Author it with the plan-write tool or pass it directly as the plan argument."))?,
    };
    // Forge's failure prefix names what failed to start (FORGE-REFERENCE §2.5).
    let failed = match input.mode {
        Some(ExecuteMode::NewSession) => "Failed to start new session",
        _ => "Failed to start loop",
    };
    if plan.trim().is_empty() {
        return Err(ToolError::invalid(format!("{failed}: the plan is empty.")));
    }
    crate::plan_ops::check_plan_size(ctx, &plan).map_err(|e| ToolError::invalid(format!("{failed}: {}", e.message)))?;
    if !ctx.has_engine {
        return Err(ToolError::precondition(
            "forge.execute-plan needs a running forge-lsp server (it runs agent processes); start it from your editor or with `forge-lsp serve --listen unix:PATH`.",
        ));
    }
    let mode = input.mode.unwrap_or(ExecuteMode::Loop);
    let branch = match input.branch.as_deref().map(str::trim) {
        None => None,
        Some("") => return Err(ToolError::invalid_params("invalid argument `branch`: must not be empty")),
        Some(_) if mode == ExecuteMode::NewSession => {
            return Err(ToolError::invalid_params(
                "invalid argument `branch`: only a loop has a branch (mode: \"new-session\" runs in the project root)",
            ))
        }
        Some(b) => Some(b.to_string()),
    };
    ctx.effect = Some(match mode {
        ExecuteMode::NewSession => Effect::NewSession { title, plan },
        ExecuteMode::Loop => Effect::StartLoop { title, plan, loop_name: input.loop_name, branch },
    });
    ok("starting", serde_json::Value::Null)
}
