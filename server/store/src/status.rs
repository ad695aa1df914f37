//! A loop's status as `forge/loopStatus` reports it, read from the store. The snapshot
//! is taken inside the transaction that changed the loop and stored with its change-feed
//! entry, so each announcement reflects its own change.

use forge_protocol::notifications::{LastTransition, LoopStatusParams};
use rusqlite::Connection;
use serde_json::json;

use crate::loop_db as db;
use crate::loops;

/// The notification params of a loop, plus its host session.
pub fn params(
    db: &Connection,
    project: &str,
    name: &str,
) -> rusqlite::Result<Option<(LoopStatusParams, Option<String>)>> {
    let Some(l) = loops::get(db, project, name)? else { return Ok(None) };
    let section_title = if l.total_sections > 0 {
        db::sections(db, project, name)?
            .into_iter()
            .find(|s| i64::from(s.index) == l.current_section_index)
            .map(|s| s.title)
    } else {
        None
    };
    let last = db::last_transition(db, project, name)?.map(|(kind, event, from, to, at)| LastTransition {
        kind,
        event,
        from,
        to,
        at,
    });
    Ok(Some((
        LoopStatusParams {
            loop_name: l.loop_name.clone(),
            status: l.status.clone(),
            phase: l.phase.clone(),
            iteration: l.iteration,
            max_iterations: l.max_iterations,
            section_index: (l.total_sections > 0).then_some(l.current_section_index),
            total_sections: l.total_sections,
            section_title,
            audit_count: l.audit_count,
            error_count: l.error_count,
            termination_reason: l.termination_reason.clone(),
            worktree_dir: l.worktree_dir.clone(),
            branch: l.worktree_branch.clone(),
            session_id: l.current_session_id.clone(),
            started_at: l.started_at,
            completed_at: l.completed_at,
            last_transition: last,
            server_gone: None,
        },
        l.host_session_id,
    )))
}

/// The snapshot stored with a loop change: `{ status, hostSessionId, completedSections }`.
pub fn snapshot(db: &Connection, project: &str, name: &str) -> rusqlite::Result<Option<serde_json::Value>> {
    let Some((s, host)) = params(db, project, name)? else { return Ok(None) };
    let completed = db::sections(db, project, name)?.iter().filter(|s| s.status == "completed").count();
    Ok(Some(json!({ "status": s, "hostSessionId": host, "completedSections": completed })))
}

/// Announces a change of the loop's output (its replies, its count of changed files) on the
/// feed: its status document shows them, its status notification does not
/// ([`crate::changes::loop_output_key`]).
pub fn output_changed(db: &Connection, project: &str, loop_name: &str, now: i64) -> rusqlite::Result<()> {
    crate::changes::record(db, project, crate::changes::Kind::Loop, &crate::changes::loop_output_key(loop_name), now)
}

/// Announces a loop change on the feed, with a snapshot of its status notification taken
/// in this transaction (so each announcement reflects its own change).
pub fn touch(db: &Connection, project: &str, loop_name: &str, now: i64) -> rusqlite::Result<()> {
    db.execute(
        "UPDATE loops SET last_activity_at = ?3 WHERE project_id = ?1 AND loop_name = ?2",
        rusqlite::params![project, loop_name, now],
    )?;
    let snapshot = snapshot(db, project, loop_name)?;
    crate::changes::record_with(
        db,
        project,
        crate::changes::Kind::Loop,
        loop_name,
        now,
        snapshot.map(|s| s.to_string()).as_deref(),
    )
}
