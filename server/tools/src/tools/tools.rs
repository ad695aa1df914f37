//! `forge.tools`: the tool offers, derived from the registry.

use forge_protocol::{CommandResult, ToolError};

use super::{ok, ToolCtx};

pub const NEEDS_SERVER: bool = false;

pub const DESCRIPTION: &str = "List every Forge tool with its command, description and input JSON Schema.";

pub type Input = forge_protocol::inputs::NoInput;

pub fn execute(_input: Input, _ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let offers = super::offers();
    let mut text = format!("{} tools:\n", offers.len());
    for o in &offers {
        text.push_str(&format!("- {}: {}\n", o.command, o.description));
    }
    ok(text.trim_end(), serde_json::json!({ "tools": offers }))
}
