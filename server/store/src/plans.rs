//! Plan rows: session plans and loop-scoped master plans.

use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::changes::{self, Kind};
use cache::Which;

pub mod cache;
use forge_protocol::uri::ForgeUri;

/// A stored plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRow {
    pub id: i64,
    pub project_id: String,
    pub loop_name: Option<String>,
    pub session_id: Option<String>,
    pub content: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl PlanRow {
    /// `loop: <name>` or `session: <id>`, as plan-read lists it.
    pub fn label(&self) -> String {
        match (&self.loop_name, &self.session_id) {
            (Some(l), _) => format!("loop: {l}"),
            (_, Some(s)) => format!("session: {s}"),
            _ => String::new(),
        }
    }
    /// The plan's virtual document.
    pub fn uri(&self) -> ForgeUri {
        match (&self.loop_name, &self.session_id) {
            (Some(l), _) => ForgeUri::LoopPlan(l.clone()),
            (_, Some(s)) => ForgeUri::SessionPlan(s.clone()),
            _ => ForgeUri::Index,
        }
    }
}

const COLS: &str = "id, project_id, loop_name, session_id, content, created_at, updated_at";

fn row(r: &Row) -> rusqlite::Result<PlanRow> {
    Ok(PlanRow {
        id: r.get(0)?,
        project_id: r.get(1)?,
        loop_name: r.get(2)?,
        session_id: r.get(3)?,
        content: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
    })
}

/// A session's plan (from [`cache`] when it holds the committed row).
pub fn get_session(conn: &Connection, project: &str, session: &str) -> rusqlite::Result<Option<PlanRow>> {
    Ok(session_shared(conn, project, session)?.map(Arc::unwrap_or_clone))
}

/// A loop's master plan (from [`cache`] when it holds the committed row).
pub fn get_loop(conn: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Option<PlanRow>> {
    Ok(loop_shared(conn, project, loop_name)?.map(Arc::unwrap_or_clone))
}

/// [`get_session`] without a copy of the text, for readers that only look at it.
pub fn session_shared(conn: &Connection, project: &str, session: &str) -> rusqlite::Result<Option<Arc<PlanRow>>> {
    get(conn, project, Which::Session(session.to_string()))
}

/// [`get_loop`] without a copy of the text, for readers that only look at it.
pub fn loop_shared(conn: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Option<Arc<PlanRow>>> {
    get(conn, project, Which::Loop(loop_name.to_string()))
}

fn get(conn: &Connection, project: &str, which: Which) -> rusqlite::Result<Option<Arc<PlanRow>>> {
    if let Some(kept) = cache::lookup(conn, project, &which) {
        return Ok(Some(kept));
    }
    let found = conn
        .prepare_cached(&format!("SELECT {COLS} FROM plans WHERE project_id = ?1 AND {} = ?2", which.column()))?
        .query_row(params![project, which.name()], row)
        .optional()?
        .map(Arc::new);
    if let Some(r) = &found {
        cache::record_read(conn, which, r);
    }
    Ok(found)
}

/// Newest first.
pub fn recent(conn: &Connection, project: &str, limit: usize) -> rusqlite::Result<Vec<PlanRow>> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM plans WHERE project_id = ?1 ORDER BY updated_at DESC, id DESC {}",
        crate::limit(limit)
    ))?;
    let rows = st.query_map(params![project], row)?;
    rows.collect()
}

/// Writes a session plan. Identical content is not rewritten (`updated_at` kept);
/// returns whether a write happened. `existing`: what [`get_session`] returned for the
/// session in the same transaction (the caller has read it; it is not read again).
pub fn put_session(
    conn: &Connection,
    project: &str,
    session: &str,
    existing: Option<&PlanRow>,
    content: &str,
    now: i64,
) -> rusqlite::Result<bool> {
    let (id, created_at) = if let Some(existing) = existing {
        if existing.content == content {
            return Ok(false);
        }
        conn.prepare_cached("UPDATE plans SET content = ?1, updated_at = ?2 WHERE id = ?3")?.execute(params![
            content,
            now,
            existing.id
        ])?;
        (existing.id, existing.created_at)
    } else {
        conn.prepare_cached(
            "INSERT INTO plans (project_id, session_id, content, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)",
        )?
        .execute(params![project, session, content, now])?;
        (conn.last_insert_rowid(), now)
    };
    let which = Which::Session(session.to_string());
    changes::record(conn, project, Kind::Plan, &which.uri(), now)?;
    if cache::recording() {
        cache::record_write(
            conn,
            which,
            PlanRow {
                id,
                project_id: project.to_string(),
                loop_name: None,
                session_id: Some(session.to_string()),
                content: content.to_string(),
                created_at,
                updated_at: now,
            },
        );
    }
    Ok(true)
}

/// Writes a loop's master plan.
pub fn put_loop(conn: &Connection, project: &str, loop_name: &str, content: &str, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO plans (project_id, loop_name, content, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (project_id, loop_name) WHERE loop_name IS NOT NULL DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at",
    )?
    .execute(params![project, loop_name, content, now])?;
    changes::record(conn, project, Kind::Plan, &Which::Loop(loop_name.to_string()).uri(), now)?;
    Ok(())
}
