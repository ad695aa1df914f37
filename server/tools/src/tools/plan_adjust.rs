//! `forge.plan-adjust`: the current auditor revises the section under audit and/or
//! replaces the pending suffix of a sectioned loop (FORGE-REFERENCE.md §2.5). Completed
//! sections and the stored master plan never change; every adjustment is recorded in
//! `plan_amendments` with before/after snapshots.

use forge_protocol::{CommandResult, ToolError};
use serde_json::{json, Value};

use super::{ok, Db, ToolCtx};
use forge_store::loop_db as db;
use crate::loop_scope;

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

const CAP: usize = 24;

pub const DESCRIPTION: &str = "Auditor only, during a section audit of a sectioned loop: revise the section under audit (currentSection {title, content}, edited in place) and/or replace the whole pending suffix after it (sections [{title, content}]: destructive, omitted milestones are deleted; an empty list removes them all). rationale is required. Completed sections cannot change; at most 24 sections in total. Never weaken acceptance criteria to get a clean audit.";

pub type Input = forge_protocol::inputs::PlanAdjustInput;

fn snapshot(secs: &[db::SectionRow], from: u32) -> Value {
    Value::Array(
        secs.iter().filter(|s| s.index >= from).map(|s| json!({ "index": s.index, "title": s.title, "content": s.content })).collect(),
    )
}

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let row = loop_scope::direct_loop(ctx, "plan-adjust")?;
    if input.rationale.trim().is_empty() {
        return Err(ToolError::invalid("rationale must not be empty"));
    }
    if input.sections.is_none() && input.current_section.is_none() {
        return Err(ToolError::invalid("no changes specified: provide sections and/or currentSection"));
    }
    if row.total_sections == 0 {
        return Err(ToolError::invalid("loop has no sectioned plan"));
    }
    if row.phase != "auditing" {
        return Err(ToolError::denied(format!("adjustments are only allowed during auditing (current phase: {})", row.phase)));
    }
    if ctx.caller().binding.as_ref().is_some_and(|b| b.role != "auditor") {
        return Err(ToolError::denied(format!(
            "session mismatch: only the current auditor session may adjust the plan for loop {}",
            row.loop_name
        )));
    }
    let (p, n) = (ctx.project_id().to_string(), row.loop_name.clone());
    let current = row.current_section_index.max(0) as u32;
    let secs = db::sections(ctx.db, &p, &n).db()?;
    let from = if input.current_section.is_some() { current } else { current + 1 };
    let before = snapshot(&secs, from);
    if let Some(cs) = &input.current_section {
        let Some(s) = secs.iter().find(|s| s.index == current) else {
            return Err(ToolError::not_found(format!("current section {current} does not exist")));
        };
        if s.status == "completed" {
            return Err(ToolError::invalid(format!("cannot edit already-completed section {current}")));
        }
        if cs.title.trim().is_empty() || cs.content.trim().is_empty() {
            return Err(ToolError::invalid("currentSection needs a non-empty title and content"));
        }
        if let Some(why) = title_problem(&cs.title) {
            return Err(ToolError::invalid(format!("currentSection.title {why}")));
        }
    }
    let mut total = row.total_sections.max(0) as usize;
    if let Some(list) = &input.sections {
        let new_total = current as usize + 1 + list.len();
        if new_total > CAP {
            return Err(ToolError::invalid(format!("resulting total sections ({new_total}) would exceed cap {CAP}")));
        }
        if let Some(bad) = secs.iter().find(|s| s.index > current && s.status != "pending") {
            return Err(ToolError::invalid(format!("section {} is not pending (status={})", bad.index, bad.status)));
        }
        if let Some(i) = list.iter().position(|s| s.title.trim().is_empty() || s.content.trim().is_empty()) {
            return Err(ToolError::invalid(format!("sections[{i}] needs a non-empty title and content")));
        }
        if let Some((i, why)) = list.iter().enumerate().find_map(|(i, s)| Some((i, title_problem(&s.title)?))) {
            return Err(ToolError::invalid(format!("sections[{i}].title {why}")));
        }
        total = new_total;
    }
    // The sections' text after the change stays within the plan size limit, as a plan
    // written or started does (it was unbounded: a review stored 20 MiB).
    let kept = secs.iter().filter(|s| {
        (s.index < current)
            || (s.index == current && input.current_section.is_none())
            || (s.index > current && input.sections.is_none())
    });
    // Measured as the JSON text the sections are sent as (`plan_ops::check_plan_size`).
    let sent = |t: &str| forge_protocol::json::escaped_len(t);
    let bytes = kept.map(|s| sent(&s.content)).sum::<usize>()
        + input.current_section.as_ref().map_or(0, |c| sent(&c.content))
        + input.sections.iter().flatten().map(|s| sent(&s.content)).sum::<usize>();
    let max = ctx.env.config.max_plan_bytes;
    if bytes as u64 > max {
        return Err(ToolError::invalid(format!(
            "the sections would hold {bytes} bytes, over the limit of {max} bytes (documents.maxPlanBytes); nothing was changed"
        )));
    }
    if let Some(cs) = &input.current_section {
        ctx.db
            .execute(
                "UPDATE section_plans SET title = ?4, content = ?5 WHERE project_id = ?1 AND loop_name = ?2 AND section_index = ?3",
                rusqlite::params![p, n, current, cs.title.trim(), cs.content],
            )
            .db()?;
    }
    if let Some(list) = &input.sections {
        ctx.db
            .execute("DELETE FROM section_plans WHERE project_id = ?1 AND loop_name = ?2 AND section_index > ?3", rusqlite::params![p, n, current])
            .db()?;
        for (i, s) in list.iter().enumerate() {
            db::insert_section(ctx.db, &p, &n, current + 1 + i as u32, s.title.trim(), &s.content, ctx.now).db()?;
        }
        ctx.db
            .execute("UPDATE loops SET total_sections = ?3 WHERE project_id = ?1 AND loop_name = ?2", rusqlite::params![p, n, total as i64])
            .db()?;
    }
    let after = snapshot(&db::sections(ctx.db, &p, &n).db()?, from);
    ctx.db
        .execute(
            "INSERT INTO plan_amendments (project_id, loop_name, source, rationale, applied_at_section, sections_before, sections_after, created_at)
             VALUES (?1, ?2, 'auditor', ?3, ?4, ?5, ?6, ?7)",
            rusqlite::params![p, n, input.rationale.trim(), current, before.to_string(), after.to_string(), ctx.now],
        )
        .db()?;
    forge_store::status::touch(ctx.db, &p, &n, ctx.now).db()?;
    let data = json!({ "ok": true, "total_sections": total });
    ok(data.to_string(), data)
}

/// The longest section title plan-adjust takes, in characters (a title is a heading line).
const MAX_TITLE_CHARS: usize = 200;

/// Why `title` cannot be a section's title: it is the heading of the section's document,
/// its status line and its lens, so it is one line of at most [`MAX_TITLE_CHARS`].
fn title_problem(title: &str) -> Option<String> {
    let t = title.trim();
    // Editors and LSP clients break lines at U+0085, U+2028 and U+2029 too.
    if t.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']) {
        return Some("must be one line (it is the section's heading)".to_string());
    }
    if t.chars().any(char::is_control) {
        return Some("must not hold control characters (it is the section's heading)".to_string());
    }
    let n = t.chars().count();
    (n > MAX_TITLE_CHARS).then(|| format!("has {n} characters; at most {MAX_TITLE_CHARS} (it is the section's heading)"))
}
