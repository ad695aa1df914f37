//! The caller's loop, as the review and section tools see it.

use forge_domain::review::LoopScope;
use forge_protocol::ToolError;

use crate::store::loops::{self, LoopRow};
use crate::tools::{Db, ToolCtx};

/// The caller's active loop: the loop its authenticated loop session belongs to, or a
/// running loop whose current session is the caller's session.
pub fn caller_loop(ctx: &ToolCtx) -> Result<Option<LoopRow>, ToolError> {
    if let Some(b) = &ctx.caller().binding {
        if let Some(row) = loops::get(ctx.db, ctx.project_id(), &b.loop_name).db()? {
            if row.status == "running" {
                return Ok(Some(row));
            }
        }
        return Ok(None);
    }
    loops::running_for_session(ctx.db, ctx.project_id(), &ctx.caller().session_id).db()
}

/// The scoping view of a loop row.
pub fn scope(row: &LoopRow) -> LoopScope {
    LoopScope {
        loop_name: row.loop_name.clone(),
        running: row.status == "running",
        phase: row.phase.clone(),
        total_sections: row.total_sections.max(0) as u32,
        current_section: row.current_section_index.max(0) as u32,
    }
}
