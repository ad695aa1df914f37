//! `forge.review-read`: read findings in the caller's scope, of a named loop, or the
//! durable audit-attempt history (FORGE-REFERENCE.md §2.7, §3b.1; the seeds win).

use forge_domain::review::{self, read_plan};
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use crate::loop_scope;
use forge_store::{attempts, findings, loops};

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Read review findings. Inside a sectioned loop the default scope is the current and earlier sections plus cross-section findings; allSections reads every section, crossSection only cross-section ones, loopName a specific loop (completed ones too). file filters by path and pattern searches descriptions and scenarios (regex). Findings come in pages, newest first: limit (default 100, at most 5000; a page also ends after 16 MiB of finding text) and beforeId (the reply's nextBeforeId) page back; the text says when there are more. attempts: true returns the durable audit-attempt history { attempts, nextBeforeId } instead (limit 1-100, beforeId to page back); it cannot be combined with file, pattern or crossSection.";

pub type Input = forge_protocol::inputs::ReviewReadInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let explicit = input.loop_name.as_deref().map(str::trim).filter(|s| !s.is_empty());
    let caller = loop_scope::caller_loop(ctx)?;
    if input.attempts == Some(true) {
        return read_attempts(&input, explicit, caller.as_ref(), ctx);
    }
    let (limit, before) = review::findings_page(input.limit, input.before_id).map_err(ToolError::invalid_params)?;
    // The loop a user names (read once: its worktree is also a root of the file key).
    let named = match explicit {
        Some(name) => loops::get(ctx.db, ctx.project_id(), name).db()?,
        None => None,
    };
    // A loop name that names no loop (and no findings) reads none: `No review findings
    // found.`, a success, as Forge answers it (FORGE-REFERENCE §2.7).
    let scope = caller.as_ref().map(loop_scope::scope);
    let plan = read_plan(scope.as_ref(), explicit, input.cross_section.unwrap_or(false), input.all_sections.unwrap_or(false));
    // The stored spelling of `file` (review-write's key), with the worktree of the loop
    // whose findings are read (none for a named loop whose row is gone); a finding stored
    // before keys were normalised is found by the spelling given.
    let keyed_by = if explicit.is_some() { named.as_ref() } else { caller.as_ref() };
    let key = input.file.as_deref().map(|f| loop_scope::finding_file(ctx, f, keyed_by)).transpose()?;
    let file = match (&key, input.file.as_deref()) {
        (Some(k), Some(given)) if k != given => {
            let any = findings::query_page(ctx.db, ctx.project_id(), &plan.loop_bucket, &plan.section, Some(k), 1, None).db()?;
            if any.0.is_empty() {
                Some(given)
            } else {
                Some(k.as_str())
            }
        }
        (k, _) => k.as_deref(),
    };
    // Pages newest first (bounded memory and reply); each page is shown sorted.
    let (mut rows, next) = match input.pattern.as_deref() {
        None => findings::query_page(
            ctx.db,
            ctx.project_id(),
            &plan.loop_bucket,
            &plan.section,
            file,
            limit,
            before,
        )
        .db()?,
        // Tested as read, newest first: only the page is held (review YK).
        Some(pattern) => {
            let matches = review::pattern_matcher(Some(pattern)).map_err(ToolError::invalid)?;
            findings::query_page_where(
                ctx.db,
                ctx.project_id(),
                &plan.loop_bucket,
                &plan.section,
                file,
                limit,
                before,
                matches,
            )
            .db()?
        }
    };
    // A page also ends at PAGE_BYTES of finding text (each finding may hold 8 MiB): the reply
    // carries the text twice (the text and `data`) and must stay under the 64 MiB message
    // limit (PROTOCOL.md §8), which nine large findings went over.
    let next = match fit_bytes(&rows) {
        Some(k) => {
            rows.truncate(k);
            rows.last().map(|f| f.id)
        }
        None => next,
    };
    review::sort_findings(&mut rows);
    let mut text = review::render_findings(&rows);
    if let Some(n) = next {
        text.push_str(&format!(
            "\n\nShowing {} findings, the newest first page of more. For the next page pass beforeId: {n} (limit up to {}).",
            rows.len(),
            review::validate::MAX_FINDINGS_LIMIT
        ));
    }
    // Written straight from the rows: a page may hold 5,000 findings (forge_protocol::Data),
    // and serde's escaping was a tenth of a default page's time (review::page_json).
    let data = forge_protocol::Data::written(review::page_json(&rows, next));
    Ok(CommandResult { text, data })
}

/// The most bytes of finding text (description, scenario, file) one page carries as JSON
/// text (escapes counted), past its first finding.
const PAGE_BYTES: usize = 16 << 20;

/// How many of `rows` (newest first) fit in [`PAGE_BYTES`], when not all do (at least one).
fn fit_bytes(rows: &[review::Finding]) -> Option<usize> {
    use forge_protocol::json::escaped_len;
    // An escape takes at most six bytes: a page whose raw text is under a sixth of the
    // bound fits whatever it holds, and its texts need not be walked a byte at a time.
    let raw: usize = rows.iter().map(|f| f.description.len() + f.scenario.as_deref().map_or(0, str::len) + f.file.len()).sum();
    if raw.saturating_mul(6) <= PAGE_BYTES {
        return None;
    }
    let mut total = 0usize;
    for (i, f) in rows.iter().enumerate() {
        total += escaped_len(&f.description) + f.scenario.as_deref().map_or(0, escaped_len) + escaped_len(&f.file);
        if total > PAGE_BYTES && i > 0 {
            return Some(i);
        }
    }
    None
}

fn read_attempts(
    input: &Input,
    explicit: Option<&str>,
    caller: Option<&loops::LoopRow>,
    ctx: &ToolCtx,
) -> Result<CommandResult, ToolError> {
    review::attempts_exclusive(input.file.as_deref(), input.pattern.as_deref(), input.cross_section.unwrap_or(false))
        .map_err(ToolError::invalid_params)?;
    let (limit, before) = review::attempts_page(input.limit, input.before_id).map_err(ToolError::invalid_params)?;
    let (loop_name, scope) = match (explicit, caller) {
        (Some(name), _) => {
            if loops::get(ctx.db, ctx.project_id(), name).db()?.is_none() {
                return Err(ToolError::not_found(format!("No loop found for loop \"{name}\".")));
            }
            (name.to_string(), None)
        }
        (None, Some(row)) => {
            let s = loop_scope::scope(row);
            let scope = if input.all_sections == Some(true) {
                None
            } else {
                Some(attempts::scope_of(s.section_in_scope()))
            };
            (row.loop_name.clone(), scope)
        }
        (None, None) => {
            return Err(ToolError::not_found(
                "No loop: attempt history belongs to a loop. Pass loopName, or call from a loop session.",
            ))
        }
    };
    let (rows, next) = attempts::page(ctx.db, ctx.project_id(), &loop_name, scope.as_deref(), limit, before).db()?;
    let data = json!({ "attempts": rows, "nextBeforeId": next });
    ok(serde_json::to_string_pretty(&data).unwrap_or_default(), data)
}
