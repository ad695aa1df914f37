//! `forge.section-read`: a section of the caller's loop with its status, or the ordered
//! pending suffix (FORGE-REFERENCE.md §2.4). Never changes loop state.

use forge_protocol::{CommandResult, ToolError};
use serde_json::{json, Value};

use super::{ok, Db, ToolCtx};
use forge_store::loop_db::{self as db, SectionRow};
use crate::loop_scope;

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Read a section (milestone) of your loop's plan with its status: without arguments the lowest-index incomplete section; section_index (0-based) picks one; pending_suffix: true returns every pending section after the current one, in order. Titles are labels; the content is the requirement.";

pub type Input = forge_protocol::inputs::SectionReadInput;

fn section_json(s: &SectionRow) -> Value {
    let done = s.status == "completed";
    json!({
        "index": s.index,
        "title": s.title,
        "content": s.content,
        "status": s.status,
        "summary_done": if done { json!(s.done) } else { Value::Null },
        "summary_deviations": if done { json!(s.deviations) } else { Value::Null },
        "summary_follow_ups": if done { json!(s.follow_ups) } else { Value::Null },
    })
}

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let row = loop_scope::direct_loop(ctx, "section-read")?;
    if input.pending_suffix == Some(true) && input.section_index.is_some() {
        return Err(ToolError::invalid_params("pending_suffix cannot be combined with section_index"));
    }
    let secs = db::sections(ctx.db, ctx.project_id(), &row.loop_name).db()?;
    let total = row.total_sections.max(0) as usize;
    if total == 0 || secs.is_empty() {
        return Err(ToolError::not_found("No sections available for this loop."));
    }
    let current = row.current_section_index.max(0) as u32;
    if input.pending_suffix == Some(true) {
        let pending: Vec<Value> = secs.iter().filter(|s| s.index > current && s.status == "pending").map(section_json).collect();
        let data = json!({ "from_index": current + 1, "sections": pending });
        return ok(serde_json::to_string_pretty(&data).unwrap_or_default(), data);
    }
    let index = match input.section_index {
        Some(i) if i < 0 || i as usize >= total => {
            return Err(ToolError::invalid(format!("Invalid section index {i}. Valid range: 0-{}", total - 1)))
        }
        Some(i) => i as u32,
        None => secs.iter().find(|s| s.status != "completed").map(|s| s.index).unwrap_or(current),
    };
    let Some(s) = secs.iter().find(|s| s.index == index) else {
        return Err(ToolError::not_found(format!("Section {index} not found in loop \"{}\".", row.loop_name)));
    };
    let data = section_json(s);
    ok(serde_json::to_string_pretty(&data).unwrap_or_default(), data)
}
