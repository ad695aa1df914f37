//! Interview rows (`forge.interview-submit-state`): one per session of a project.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::changes::{self, Kind};
use forge_protocol::uri::ForgeUri;

/// A stored interview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterviewRow {
    pub session_id: String,
    pub status: String,
    pub spec: String,
    pub questions: Vec<String>,
    pub turns: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

const COLS: &str = "session_id, status, spec, questions, turns, created_at, updated_at";

fn row(r: &Row) -> rusqlite::Result<InterviewRow> {
    let q: String = r.get(3)?;
    Ok(InterviewRow {
        session_id: r.get(0)?,
        status: r.get(1)?,
        spec: r.get(2)?,
        questions: serde_json::from_str(&q).unwrap_or_default(),
        turns: r.get(4)?,
        created_at: r.get(5)?,
        updated_at: r.get(6)?,
    })
}

pub fn get(conn: &Connection, project: &str, session: &str) -> rusqlite::Result<Option<InterviewRow>> {
    conn.prepare_cached(&format!("SELECT {COLS} FROM interviews WHERE project_id = ?1 AND session_id = ?2"))?
        .query_row(params![project, session], row)
        .optional()
}

/// Newest first.
pub fn recent(conn: &Connection, project: &str, limit: usize) -> rusqlite::Result<Vec<InterviewRow>> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM interviews WHERE project_id = ?1 ORDER BY updated_at DESC, session_id {}",
        crate::limit(limit)
    ))?;
    let rows = st.query_map(params![project], row)?;
    rows.collect()
}

/// Stores a turn (the first creates the row, later ones count up `turns`); returns the
/// turn number. The change feed gets the document's URI (refreshed like a plan's).
pub fn put(
    conn: &Connection,
    project: &str,
    session: &str,
    status: &str,
    spec: &str,
    questions: &[String],
    now: i64,
) -> rusqlite::Result<i64> {
    let q = serde_json::to_string(questions).unwrap_or_else(|_| "[]".to_string());
    let turns: i64 = conn
        .prepare_cached(
            "INSERT INTO interviews (project_id, session_id, status, spec, questions, turns, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6)
             ON CONFLICT (project_id, session_id) DO UPDATE SET status = excluded.status, spec = excluded.spec,
               questions = excluded.questions, turns = turns + 1, updated_at = excluded.updated_at
             RETURNING turns",
        )?
        .query_row(params![project, session, status, spec, q, now], |r| r.get(0))?;
    changes::record(conn, project, Kind::Plan, &ForgeUri::Interview(session.to_string()).to_uri(), now)?;
    Ok(turns)
}
