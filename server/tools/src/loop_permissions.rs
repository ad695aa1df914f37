//! Enforcement of `loop.permissions.deny` (rules: `forge_domain::loop_permissions`).
//!
//! The rules apply to authenticated loop phase sessions only; `tools::run_tx` calls
//! [`check`] after the agent and structural checks. The dropped-entry warnings are shown
//! once per connection after `initialized` ([`warnings`]).

use forge_domain::loop_permissions::{compile, denied};
use forge_protocol::ToolError;
use serde_json::Value;

use crate::ToolEnv;
use forge_core::config::Config;

/// Refuses (error 1001) a call of `tool` that a deny rule matches; forge.shell calls are
/// matched by their `command`, read from the raw input.
pub fn check(env: &ToolEnv, tool: &str, input: &Value) -> Result<(), ToolError> {
    let Some(binding) = &env.caller.binding else { return Ok(()) };
    if env.config.permissions_deny.is_empty() {
        return Ok(());
    }
    let (rules, _) = compile(&env.config.permissions_deny);
    let command = if tool == "shell" { input.get("command").and_then(Value::as_str) } else { None };
    let Some(rule) = denied(&rules, tool, command) else { return Ok(()) };
    let what = match command {
        Some(c) => format!("forge.{tool} command `{}`", c.trim()),
        None => format!("forge.{tool}"),
    };
    Err(ToolError::denied(format!(
        "{what} is not available to the {} session {} of loop \"{}\": denied by loop.permissions.deny: {rule}",
        binding.role, env.caller.session_id, binding.loop_name
    )))
}

/// Warnings about the configured entries: the dropped ones, and whole-tool denies of a
/// name that is no forge-lsp tool (forge-lsp enforces denies on its own tools and plugin
/// tools only; a plugin tool's `<plugin>__<Name>` is taken as it is, since which plugins
/// there are depends on the project).
pub fn warnings(config: &Config) -> Vec<String> {
    let (rules, mut warnings) = compile(&config.permissions_deny);
    for r in rules.iter().filter(|r| r.pattern.is_none() && crate::find(r.tool()).is_none() && !r.tool().contains("__"))
    {
        warnings.push(format!(
            "loop.permissions.deny entry {r} has no effect: `{}` is not a forge-lsp tool (forge.tools lists them; `bash` means forge.shell; a plugin tool is named `<plugin>__<Name>`)",
            r.permission
        ));
    }
    warnings
}
