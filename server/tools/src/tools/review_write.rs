//! `forge.review-write`: store a review finding (FORGE-REFERENCE.md §2.6, §5).
//! Findings are write-once per (loop bucket, file, line, section).

use forge_domain::review::{self, normalize_scenario, stored_message, write_section};
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use crate::loop_scope;
use forge_store::findings::{self, NewFinding};

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Store a review finding: file, line, severity (bug or warning), description and an optional scenario. Inside a loop the finding belongs to the loop and, in a sectioned loop, to the current section (crossSection: true for a cross-section finding, sectionIndex to name another section). Findings are write-once: a second finding at the same file:line and section is refused; remove one with review-delete.";

pub type Input = forge_protocol::inputs::ReviewWriteInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    review::validate_write(&input.file, input.line, &input.description, input.scenario.as_deref())
        .map_err(ToolError::invalid_params)?;
    let row = loop_scope::caller_loop(ctx)?;
    // One spelling per file (`./a.txt`, `a.txt/`, the absolute path in the project: `a.txt`).
    let file = loop_scope::finding_file(ctx, &input.file, row.as_ref())?;
    let scope = row.as_ref().map(loop_scope::scope);
    let section = write_section(scope.as_ref(), input.cross_section.unwrap_or(false), input.section_index.as_ref())
        .map_err(ToolError::invalid)?;
    let bucket = scope.as_ref().map(|s| s.loop_name.clone()).unwrap_or_default();
    let scenario = normalize_scenario(input.scenario.as_deref());
    let new = NewFinding {
        bucket: &bucket,
        file: &file,
        line: input.line,
        section,
        severity: input.severity,
        description: &input.description,
        scenario: scenario.as_deref(),
    };
    match findings::insert(ctx.db, ctx.project_id(), &new, ctx.now).db()? {
        None => Err(ToolError::conflict(review::duplicate_message(&file, input.line))),
        Some(f) => ok(stored_message(&f.file, f.line, f.severity, f.section_index), json!({ "finding": f })),
    }
}
