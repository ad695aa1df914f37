//! `forge.review-delete`: delete the finding(s) at file:line in the caller's loop
//! bucket (FORGE-REFERENCE.md §2.8). Extension: the `user` agent may name `loopName`.

use forge_domain::review::{self, delete_filter};
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use crate::loop_scope;
use forge_store::{findings, loops};

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Delete a review finding by file and line. Inside a sectioned loop the current section is searched unless sectionIndex names another or crossSection targets cross-section findings; elsewhere every finding at that file:line in the caller's scope is deleted. The user agent may pass loopName to delete in a specific loop: every finding at that file:line of the loop, unless sectionIndex or crossSection narrows it.";

pub type Input = forge_protocol::inputs::ReviewDeleteInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    if input.file.trim().is_empty() {
        return Err(ToolError::invalid_params("invalid argument `file`: must not be empty"));
    }
    if input.line < 1 {
        return Err(ToolError::invalid_params(format!("invalid argument `line`: must be 1 or more, got {}", input.line)));
    }
    let explicit = input.loop_name.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let row = match explicit {
        Some(name) => {
            if ctx.caller().agent != "user" || ctx.caller().binding.is_some() {
                return Err(ToolError::denied(format!(
                    "forge.review-delete with loopName is not available to agent `{}` (session {}): naming a loop is for the user agent only",
                    ctx.caller().agent,
                    ctx.caller().session_id
                )));
            }
            let Some(row) = loops::get(ctx.db, ctx.project_id(), name).db()? else {
                return Err(ToolError::not_found(format!("No loop found for loop \"{name}\".")));
            };
            Some(row)
        }
        None => loop_scope::caller_loop(ctx)?,
    };
    let scope = row.as_ref().map(loop_scope::scope);
    // The user naming a loop is not inside it: no current section narrows the delete
    // (`delete_filter`'s docs), only an explicit sectionIndex or crossSection does.
    let in_scope = if explicit.is_some() { None } else { scope.as_ref() };
    let filter = delete_filter(in_scope, input.cross_section.unwrap_or(false), input.section_index.as_ref())
        .map_err(ToolError::invalid)?;
    let bucket = scope.as_ref().map(|s| s.loop_name.clone()).unwrap_or_default();
    // The stored spelling (review-write's key). A finding stored before keys were
    // normalised keeps the spelling it was written with: the spelling given is tried first
    // (what a "Delete finding" on such a finding's diagnostic names), then the key.
    let key = loop_scope::finding_file(ctx, &input.file, row.as_ref())?;
    let mut gone = vec![];
    // In the project `global` (folders without a commit) keys are absolute paths: a
    // relative spelling stored before names no folder, and another folder's finding stored
    // that way must not go before the caller's own (review CC). The key is tried first.
    let global = ctx.env.project.is_global();
    if key != input.file && !global {
        gone = findings::delete(ctx.db, ctx.project_id(), &bucket, &input.file, input.line, &filter, ctx.now).db()?;
    }
    if gone.is_empty() {
        gone = findings::delete(ctx.db, ctx.project_id(), &bucket, &key, input.line, &filter, ctx.now).db()?;
    }
    if gone.is_empty() && key != input.file && global {
        gone = findings::delete(ctx.db, ctx.project_id(), &bucket, &input.file, input.line, &filter, ctx.now).db()?;
    }
    if gone.is_empty() {
        return Err(ToolError::not_found(review::deleted_message(&input.file, input.line, 0)));
    }
    ok(
        review::deleted_message(&input.file, input.line, gone.len()),
        json!({ "deleted": gone.len(), "findings": gone }),
    )
}
