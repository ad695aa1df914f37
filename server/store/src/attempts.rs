//! Durable audit-attempt history (`loop_attempts`): what the coder handed off, the
//! checkpoint it was audited at, the outcome, and the findings before and after.
//! The loop engine records attempts; `review-read attempts: true` pages through them.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::{json, Value};

/// What the engine records when a coder turn hands off.
pub struct NewAttempt<'a> {
    pub loop_name: &'a str,
    /// `section:<k>` or `plan`.
    pub scope: &'a str,
    pub section_index: Option<i64>,
    pub source_session_id: &'a str,
    /// Identity of the handoff; recording the same key twice returns the first row.
    pub completion_key: &'a str,
    pub iteration: i64,
    pub worktree_dir: Option<&'a str>,
    pub plan_hash: Option<&'a str>,
    pub coder_decisions: Option<&'a str>,
    pub snapshot_commit: Option<&'a str>,
    pub snapshot_ref: Option<&'a str>,
    pub previous_commit: Option<&'a str>,
    pub diff_summary: Option<&'a str>,
    pub fallback_reason: Option<&'a str>,
    /// JSON array of the findings open when the audit starts.
    pub findings_before: &'a Value,
}

/// The scope string of a section or of a non-sectioned plan.
pub fn scope_of(section: Option<u32>) -> String {
    match section {
        Some(k) => format!("section:{k}"),
        None => "plan".into(),
    }
}

/// Records an attempt (idempotent on `completion_key`); returns its id. Only while the
/// loop runs and the source session is its current session.
pub fn record(conn: &Connection, project: &str, a: &NewAttempt, now: i64) -> rusqlite::Result<Option<i64>> {
    let live: Option<String> = conn
        .query_row(
            "SELECT current_session_id FROM loops WHERE project_id = ?1 AND loop_name = ?2 AND status = 'running'",
            params![project, a.loop_name],
            |r| r.get(0),
        )
        .optional()?;
    if live.as_deref() != Some(a.source_session_id) {
        return Ok(None);
    }
    if let Some(id) = conn
        .query_row(
            "SELECT id FROM loop_attempts WHERE project_id = ?1 AND loop_name = ?2 AND scope = ?3 AND completion_key = ?4",
            params![project, a.loop_name, a.scope, a.completion_key],
            |r| r.get(0),
        )
        .optional()?
    {
        return Ok(Some(id));
    }
    let number: i64 = conn.query_row(
        "SELECT coalesce(max(attempt_number), 0) + 1 FROM loop_attempts WHERE project_id = ?1 AND loop_name = ?2 AND scope = ?3",
        params![project, a.loop_name, a.scope],
        |r| r.get(0),
    )?;
    conn.execute(
        "INSERT INTO loop_attempts (project_id, loop_name, scope, attempt_number, section_index, source_session_id, completion_key,
            iteration, worktree_dir, plan_hash, coder_decisions, snapshot_commit, snapshot_ref, previous_commit, diff_summary,
            fallback_reason, findings_before, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        params![
            project,
            a.loop_name,
            a.scope,
            number,
            a.section_index,
            a.source_session_id,
            a.completion_key,
            a.iteration,
            a.worktree_dir,
            a.plan_hash,
            a.coder_decisions,
            a.snapshot_commit,
            a.snapshot_ref,
            a.previous_commit,
            a.diff_summary,
            a.fallback_reason,
            a.findings_before.to_string(),
            now
        ],
    )?;
    Ok(Some(conn.last_insert_rowid()))
}

/// Records the audit outcome of an attempt (once).
pub fn set_outcome(
    conn: &Connection,
    id: i64,
    outcome: &str,
    auditor_session_id: &str,
    findings_after: &Value,
    now: i64,
) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "UPDATE loop_attempts SET outcome = ?2, auditor_session_id = ?3, findings_after = ?4, audited_at = ?5
         WHERE id = ?1 AND outcome IS NULL",
        params![id, outcome, auditor_session_id, findings_after.to_string(), now],
    )?;
    Ok(n == 1)
}

fn attempt_json(r: &Row) -> rusqlite::Result<Value> {
    let parse = |s: Option<String>| s.and_then(|t| serde_json::from_str::<Value>(&t).ok());
    Ok(json!({
        "id": r.get::<_, i64>(0)?,
        "loopName": r.get::<_, String>(1)?,
        "scope": r.get::<_, String>(2)?,
        "attemptNumber": r.get::<_, i64>(3)?,
        "sectionIndex": r.get::<_, Option<i64>>(4)?,
        "sourceSessionId": r.get::<_, String>(5)?,
        "auditorSessionId": r.get::<_, Option<String>>(6)?,
        "iteration": r.get::<_, i64>(7)?,
        "coderDecisions": r.get::<_, Option<String>>(8)?,
        "snapshotCommit": r.get::<_, Option<String>>(9)?,
        "snapshotRef": r.get::<_, Option<String>>(10)?,
        "previousCommit": r.get::<_, Option<String>>(11)?,
        "diffSummary": r.get::<_, Option<String>>(12)?,
        "fallbackReason": r.get::<_, Option<String>>(13)?,
        "findingsBefore": parse(r.get(14)?).unwrap_or(Value::Array(vec![])),
        "findingsAfter": parse(r.get(15)?),
        "outcome": r.get::<_, Option<String>>(16)?,
        "createdAt": r.get::<_, i64>(17)?,
        "auditedAt": r.get::<_, Option<i64>>(18)?,
    }))
}

/// A page of attempts, newest page first, returned oldest → newest, with the cursor for
/// the next (older) page: `Some(first returned id)` when older rows exist.
pub fn page(
    conn: &Connection,
    project: &str,
    loop_name: &str,
    scope: Option<&str>,
    limit: usize,
    before_id: Option<i64>,
) -> rusqlite::Result<(Vec<Value>, Option<i64>)> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT id, loop_name, scope, attempt_number, section_index, source_session_id, auditor_session_id, iteration,
                coder_decisions, snapshot_commit, snapshot_ref, previous_commit, diff_summary, fallback_reason,
                findings_before, findings_after, outcome, created_at, audited_at
         FROM loop_attempts
         WHERE project_id = ?1 AND loop_name = ?2 AND (?3 IS NULL OR scope = ?3) AND (?4 IS NULL OR id < ?4)
         ORDER BY id DESC {}",
        crate::limit(limit + 1)
    ))?;
    let mut rows: Vec<Value> =
        st.query_map(params![project, loop_name, scope, before_id], attempt_json)?.collect::<rusqlite::Result<_>>()?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    rows.reverse();
    let next = if more { rows.first().and_then(|r| r["id"].as_i64()) } else { None };
    Ok((rows, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_idempotent_and_pages_backward() {
        let d = tempfile::tempdir().unwrap();
        let c = crate::test_store_with_loop(d.path());
        let before = json!([]);
        let mk = |key: &'static str| NewAttempt {
            loop_name: "l",
            scope: "section:0",
            section_index: Some(0),
            source_session_id: "s1",
            completion_key: key,
            iteration: 1,
            worktree_dir: None,
            plan_hash: None,
            coder_decisions: Some("did things"),
            snapshot_commit: None,
            snapshot_ref: None,
            previous_commit: None,
            diff_summary: None,
            fallback_reason: None,
            findings_before: &before,
        };
        let a = record(&c, "p", &mk("k1"), 1).unwrap().unwrap();
        assert_eq!(record(&c, "p", &mk("k1"), 2).unwrap(), Some(a));
        let wrong = NewAttempt { source_session_id: "other", ..mk("k9") };
        assert_eq!(record(&c, "p", &wrong, 2).unwrap(), None, "only the current session records");
        for k in ["k2", "k3", "k4", "k5"] {
            record(&c, "p", &mk(k), 3).unwrap().unwrap();
        }
        assert!(set_outcome(&c, a, "dirty", "aud", &json!([{"id": 1}]), 4).unwrap());
        assert!(!set_outcome(&c, a, "clean", "aud", &json!([]), 5).unwrap(), "outcome is set once");
        let (p1, next) = page(&c, "p", "l", None, 2, None).unwrap();
        assert_eq!(p1.iter().map(|r| r["attemptNumber"].as_i64().unwrap()).collect::<Vec<_>>(), [4, 5]);
        let (p2, next2) = page(&c, "p", "l", None, 2, next).unwrap();
        assert_eq!(p2.iter().map(|r| r["attemptNumber"].as_i64().unwrap()).collect::<Vec<_>>(), [2, 3]);
        let (p3, next3) = page(&c, "p", "l", None, 2, next2).unwrap();
        assert_eq!(p3.len(), 1);
        assert_eq!(p3[0]["outcome"], "dirty");
        assert_eq!(next3, None);
    }
}
