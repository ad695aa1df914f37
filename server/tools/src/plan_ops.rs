//! Operations the plan tools share: the session-scoped write path, the running-loop
//! guard, and the structure report with its warnings remembered. (Each tool's own logic
//! stays in its file under `tools/`.)

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use forge_domain::plan::{sanitize::sanitize_paths, structure};
use forge_protocol::uri::ForgeUri;
use forge_protocol::ToolError;
use serde_json::{json, Value};

use crate::{Db, ToolCtx};
use forge_store::{loops, plans};

/// Whose plan a plan-write / plan-edit targets: the caller's session, or (agent `user`
/// only) an explicit `session_id`.
pub fn target_session(ctx: &ToolCtx, tool: &str, explicit: Option<&str>) -> Result<String, ToolError> {
    match explicit {
        None => Ok(ctx.caller().session_id.clone()),
        Some(s) if s.trim().is_empty() => {
            Err(ToolError::invalid_params("invalid argument `session_id`: must not be empty"))
        }
        Some(s) if s == ctx.caller().session_id => Ok(s.to_string()),
        Some(s) if forge_protocol::uri::session_id_problem(s).is_some() => Err(ToolError::invalid_params(format!(
            "invalid argument `session_id`: it {}",
            forge_protocol::uri::session_id_problem(s).unwrap_or_default()
        ))),
        Some(s) => {
            if ctx.caller().agent != "user" {
                return Err(ToolError::denied(format!(
                    "forge.{tool} is not available to agent `{}` (session {}) with session_id: writing another session's plan is for the user agent only",
                    ctx.caller().agent,
                    ctx.caller().session_id
                )));
            }
            Ok(s.to_string())
        }
    }
}

/// Refuses a write when `session` is the current session of a running loop.
pub fn running_loop_guard(ctx: &ToolCtx, session: &str) -> Result<(), ToolError> {
    if let Some(l) = loops::running_for_session(ctx.db, ctx.project_id(), session).db()? {
        return Err(ToolError::denied(format!(
            "Cannot modify the plan from an active loop session: session {session} runs loop \"{}\". A running loop's plan is amended only with plan-adjust during a section audit.",
            l.loop_name
        )));
    }
    Ok(())
}

/// The single session write path: sanitise project paths, skip identical content,
/// store. `existing`: the session's stored plan, read by the caller in this call's
/// transaction. Returns the stored text (`text` itself when sanitizing removed nothing)
/// and whether it was written.
pub fn write_session_plan(
    ctx: &ToolCtx,
    session: &str,
    existing: Option<&plans::PlanRow>,
    text: String,
) -> Result<(String, bool), ToolError> {
    check_plan_size(ctx, &text)?;
    let root = ctx.env.project.root.display().to_string();
    let stored = match sanitize_paths(&text, &root, ctx.env.home.as_deref()) {
        Cow::Borrowed(_) => text,
        Cow::Owned(sanitized) => sanitized,
    };
    let written = plans::put_session(ctx.db, ctx.project_id(), session, existing, &stored, ctx.now).db()?;
    Ok((stored, written))
}

/// Refuses a plan over `documents.maxPlanBytes` (1006, naming the size and the key),
/// measured as the JSON text it is sent as: a control character takes six bytes there,
/// and a plan of them within the limit as raw bytes made a `textDocumentContent` reply of
/// ~100 MB that clients refuse (a review). Measured only when it could matter (six times
/// the raw size over the limit).
pub fn check_plan_size(ctx: &ToolCtx, text: &str) -> Result<(), ToolError> {
    let max = ctx.env.config.max_plan_bytes;
    let raw = text.len() as u64;
    let sent = if raw.saturating_mul(6) > max { forge_protocol::json::escaped_len(text) as u64 } else { raw };
    if sent > max {
        let how = if sent > raw.saturating_add(raw / 8) {
            format!("{raw} bytes, {sent} as JSON text (a control character takes six there)")
        } else {
            format!("{sent} bytes")
        };
        return Err(ToolError::invalid(format!(
            "the plan is {how}, over the limit of {max} bytes (documents.maxPlanBytes); split it or raise the limit"
        )));
    }
    Ok(())
}

/// The structured form of a structure report.
pub fn report_data(session: &str, report: &structure::StructureReport, written: bool) -> Value {
    json!({
        "sessionId": session,
        "uri": ForgeUri::SessionPlan(session.to_string()).to_uri(),
        "written": written,
        "lines": report.lines,
        "chars": report.chars,
        "loopName": report.loop_name,
        "sectionCount": report.section_count,
        "sections": report.outline.iter().map(|(i, t)| json!({ "index": i, "title": t })).collect::<Vec<_>>(),
        "warnings": report.warnings.iter().map(|w| json!({ "message": w.message, "line": w.line })).collect::<Vec<_>>(),
    })
}

/// The structure report of a plan just stored ([`structure::report`]); its warnings are
/// remembered for [`warnings`] (the editors' diagnostics of the same text).
pub fn report(stored: &str, outline: structure::Outline) -> structure::StructureReport {
    let report = structure::report(stored, outline);
    remember(stored, Arc::new(report.warnings.clone()));
    report
}

/// The structure warnings of `plan` ([`structure::warnings`]), taken from the last texts
/// the plan tools reported when `plan` is one of them: a plan written by a tool is
/// checked once, not again for each connection that publishes its warnings. A pure
/// function's results kept by their whole input (compared in full, a few microseconds for
/// a 2,000-line plan against tens for the checks): never stale. Texts checked here are
/// not kept (each keystroke in an open plan would push the written ones out).
pub fn warnings(plan: &str) -> Arc<Vec<structure::Warning>> {
    let found = memo().iter().find(|(text, _)| **text == *plan).map(|(_, w)| w.clone());
    found.unwrap_or_else(|| Arc::new(structure::warnings(plan)))
}

/// Texts whose warnings are kept, and the largest kept.
const MEMO_KEEP: usize = 4;
const MEMO_MAX_BYTES: usize = 2 << 20;

type Memo = VecDeque<(Arc<str>, Arc<Vec<structure::Warning>>)>;

static MEMO: Mutex<Memo> = Mutex::new(VecDeque::new());

fn memo() -> std::sync::MutexGuard<'static, Memo> {
    MEMO.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn remember(text: &str, warnings: Arc<Vec<structure::Warning>>) {
    if text.len() > MEMO_MAX_BYTES {
        return;
    }
    let mut m = memo();
    if m.iter().any(|(t, _)| **t == *text) {
        return;
    }
    if m.len() >= MEMO_KEEP {
        m.pop_front();
    }
    m.push_back((Arc::from(text), warnings));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_warnings_are_those_of_the_same_text() {
        let plans =
            ["# Quick idea\n\nJust do it.", "# Plan\n\n## Objective\nDo it.\n", "", "# Quick idea\n\nJust do it!"];
        for _ in 0..3 {
            for p in plans {
                assert_eq!(*warnings(p), structure::warnings(p), "{p:?}");
                let r = report(p, structure::Outline::Full);
                assert_eq!(r.warnings, structure::warnings(p));
            }
        }
        // More texts than are kept: still each its own.
        for i in 0..MEMO_KEEP * 3 {
            let p = format!("# Plan {i}\n\n## Objective\nDo {i}.\n");
            assert_eq!(report(&p, structure::Outline::Full).warnings, structure::warnings(&p));
            assert_eq!(*warnings(&p), structure::warnings(&p));
        }
        assert!(memo().len() <= MEMO_KEEP);
    }
}
