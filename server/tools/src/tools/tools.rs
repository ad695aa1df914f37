//! `forge.tools`: the tool offers, derived from the registry.

use forge_protocol::{CommandResult, ToolError};

use super::ToolCtx;

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "List every Forge tool (built-in and plugin tools from files) with its command, description and input JSON Schema.";

pub type Input = forge_protocol::inputs::NoInput;

pub fn execute(_input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    // The built-in tools, then the plugin tools found on disk (PROTOCOL.md 10.4).
    let trusted = crate::plugins::project_trusted(ctx.env);
    let plugins = crate::plugins::offers(&crate::plugins::project_dir(ctx.env), trusted);
    if plugins.is_empty() {
        // The common case: the built-in offers never change, so their reply is built once.
        static BUILTIN: std::sync::OnceLock<CommandResult> = std::sync::OnceLock::new();
        return Ok(BUILTIN.get_or_init(|| reply(super::offers())).clone());
    }
    Ok(reply(crate::plugins::merge(super::offers(), plugins)))
}

fn reply(offers: Vec<forge_protocol::ToolOffer>) -> CommandResult {
    let mut text = format!("{} tools:\n", offers.len());
    for o in &offers {
        // The name an MCP client or `forge-lsp call` uses, and the command an editor runs.
        text.push_str(&format!("- {} ({}): {}\n", o.name, o.command, o.description));
    }
    let text = text.trim_end().to_string();
    // Serialized once, not kept as a tree: the cached reply is cloned per call (a copy of
    // its text) and written as it is.
    CommandResult { text, data: forge_protocol::Data::serialized(&serde_json::json!({ "tools": offers })) }
}
