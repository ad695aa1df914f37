//! Loop rows and loop sessions, as far as the tools that do not run loops need them
//! (the caller's direct loop, session binding). The loop engine extends this module.

use rusqlite::{params, Connection, OptionalExtension, Row};

/// The columns of a loop the tools read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopRow {
    pub project_id: String,
    pub loop_name: String,
    pub status: String,
    pub phase: String,
    pub current_session_id: String,
    pub worktree_dir: String,
    pub worktree_branch: Option<String>,
    pub iteration: i64,
    pub max_iterations: i64,
    pub current_section_index: i64,
    pub total_sections: i64,
    pub started_at: i64,
    pub completed_at: Option<i64>,
    pub termination_reason: Option<String>,
    pub title: String,
    pub audit_count: i64,
    pub error_count: i64,
    pub base_commit: Option<String>,
    pub host_session_id: Option<String>,
    pub project_dir: String,
    pub model_failed: bool,
    pub completion_summary: Option<String>,
    pub standby_session_id: Option<String>,
    pub sandbox: bool,
    pub execution_model: Option<String>,
    pub auditor_model: Option<String>,
    pub auditor_fallback_index: i64,
    pub stall_count: i64,
    pub failed_coding_turns: i64,
    pub failed_audit_turns: i64,
}

impl LoopRow {
    /// The state machine's view of this row.
    pub fn facts(&self, post_action_configured: bool) -> forge_domain::loop_machine::LoopFacts {
        use forge_domain::loop_machine::{FailedTurns, LoopFacts, Phase};
        LoopFacts {
            phase: Phase::parse(&self.phase).unwrap_or(Phase::Coding),
            iteration: self.iteration.max(0) as u32,
            max_iterations: self.max_iterations.max(0) as u32,
            section_index: self.section(),
            total_sections: self.total_sections.max(0) as u32,
            audit_count: self.audit_count.max(0) as u32,
            error_count: self.error_count.max(0) as u32,
            failed_turns: FailedTurns {
                coding: self.failed_coding_turns.max(0) as u32,
                auditing: self.failed_audit_turns.max(0) as u32,
            },
            post_action_configured,
        }
    }

    /// The position in the auditor model fallback chain.
    pub fn auditor_fallback_index(&self) -> i64 {
        self.auditor_fallback_index
    }

    /// The section index for sectioned loops, `None` otherwise.
    pub fn section(&self) -> Option<u32> {
        (self.total_sections > 0).then_some(self.current_section_index.max(0) as u32)
    }
}

const COLS: &str = "project_id, loop_name, status, phase, current_session_id, worktree_dir, worktree_branch, iteration, max_iterations, current_section_index, total_sections, started_at, completed_at, termination_reason, title, audit_count, error_count, base_commit, host_session_id, project_dir, model_failed, completion_summary, standby_session_id, sandbox, execution_model, auditor_model, auditor_fallback_index, stall_count, failed_coding_turns, failed_audit_turns";

fn row(r: &Row) -> rusqlite::Result<LoopRow> {
    Ok(LoopRow {
        project_id: r.get(0)?,
        loop_name: r.get(1)?,
        status: r.get(2)?,
        phase: r.get(3)?,
        current_session_id: r.get(4)?,
        worktree_dir: r.get(5)?,
        worktree_branch: r.get(6)?,
        iteration: r.get(7)?,
        max_iterations: r.get(8)?,
        current_section_index: r.get(9)?,
        total_sections: r.get(10)?,
        started_at: r.get(11)?,
        completed_at: r.get(12)?,
        termination_reason: r.get(13)?,
        title: r.get(14)?,
        audit_count: r.get(15)?,
        error_count: r.get(16)?,
        base_commit: r.get(17)?,
        host_session_id: r.get(18)?,
        project_dir: r.get(19)?,
        model_failed: r.get::<_, i64>(20)? != 0,
        completion_summary: r.get(21)?,
        standby_session_id: r.get(22)?,
        sandbox: r.get::<_, i64>(23)? != 0,
        execution_model: r.get(24)?,
        auditor_model: r.get(25)?,
        auditor_fallback_index: r.get(26)?,
        stall_count: r.get(27)?,
        failed_coding_turns: r.get(28)?,
        failed_audit_turns: r.get(29)?,
    })
}

pub fn get(conn: &Connection, project: &str, name: &str) -> rusqlite::Result<Option<LoopRow>> {
    conn.prepare_cached(&format!("SELECT {COLS} FROM loops WHERE project_id = ?1 AND loop_name = ?2"))?
        .query_row(params![project, name], row)
        .optional()
}

/// The worktree folders of every stored loop, of any project, as stored (a folder may be
/// spelled another way elsewhere: compare them as files).
pub fn worktree_folders(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare("SELECT DISTINCT worktree_dir FROM loops")?;
    let rows = st.query_map([], |r| r.get(0))?;
    rows.collect()
}

/// The process id recorded as the loop's owner at its start or last restart, if any.
pub fn owner_pid(conn: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row(
        "SELECT owner_pid FROM loops WHERE project_id = ?1 AND loop_name = ?2",
        rusqlite::params![project, loop_name],
        |r| r.get(0),
    )
    .optional()
    .map(Option::flatten)
}

/// The running loop whose current session is `session` (the "direct loop").
pub fn running_for_session(conn: &Connection, project: &str, session: &str) -> rusqlite::Result<Option<LoopRow>> {
    conn.prepare_cached(&format!(
        "SELECT {COLS} FROM loops WHERE project_id = ?1 AND current_session_id = ?2 AND status = 'running'"
    ))?
    .query_row(params![project, session], row)
    .optional()
}

/// Every loop of the project, newest first.
pub fn list(conn: &Connection, project: &str) -> rusqlite::Result<Vec<LoopRow>> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM loops WHERE project_id = ?1 ORDER BY started_at DESC, loop_name"
    ))?;
    let rows = st.query_map(params![project], row)?;
    rows.collect()
}

/// A session a loop runs, with its hashed token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopSession {
    pub session_id: String,
    pub project_id: String,
    pub loop_name: String,
    pub role: String,
    pub token_hash: String,
    pub status: String,
}

pub fn session(conn: &Connection, session_id: &str) -> rusqlite::Result<Option<LoopSession>> {
    conn.prepare_cached(
        "SELECT session_id, project_id, loop_name, role, token_hash, status FROM loop_sessions WHERE session_id = ?1",
    )?
    .query_row(params![session_id], |r| {
        Ok(LoopSession {
            session_id: r.get(0)?,
            project_id: r.get(1)?,
            loop_name: r.get(2)?,
            role: r.get(3)?,
            token_hash: r.get(4)?,
            status: r.get(5)?,
        })
    })
    .optional()
}

/// Hex sha-256 of a session token (tokens are stored hashed).
pub fn hash_token(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(token.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}
