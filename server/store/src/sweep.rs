//! The TTL sweep of terminal loops (reference §3.7; seeds "Management" → Cleanup and
//! "Stale Workspace Sweep").
//!
//! Terminal loops (completed, cancelled, errored, stalled) whose `completed_at` lies more
//! than `completedLoopTtlMs` in the past are deleted together with their loop-scoped plan;
//! their child rows (sessions, sections, handoffs, attempts, usage, transitions,
//! amendments, large fields) go with them through `ON DELETE CASCADE`. Review findings
//! are kept. Running loops are never touched.
//!
//! The sweep only touches the database. Worktrees are left alone: a completed loop's
//! worktree was already removed when it completed, and a cancelled, errored or stalled
//! loop keeps its worktree (and branch) so the work stays available for a manual
//! restart. `forge-lsp cleanup loop` removes those on request.
//!
//! It runs once per opened store, when the first connection of the user's initializes (a
//! loop agent's connection never runs it: `requests::initialize` in the LSP front end), for
//! that connection's project and TTL; a TTL of 0 disables it.

use std::sync::atomic::Ordering;

use forge_protocol::uri::ForgeUri;
use rusqlite::{params, Connection};

use super::changes::{self, Kind};
use super::Store;

/// How long rows of the change feed are kept (epoch ms): every server tails the feed
/// continuously, so an hour-old row has been read by everyone who will ever read it.
pub const CHANGES_KEEP_MS: i64 = 60 * 60 * 1000;

/// Deletes the terminal loops whose `completed_at < now - ttl_ms` (of `project`, or of
/// every project with `None`), with their loop-scoped plans, in one transaction; returns
/// the deleted loop names (oldest completion first). A `changes` row (kind `loop`, and
/// kind `plan` for a deleted plan) is recorded per deletion so editors refresh. `ttl_ms`
/// 0 disables the sweep. Also prunes change-feed rows older than [`CHANGES_KEEP_MS`].
pub fn sweep_terminal_loops(
    conn: &mut Connection,
    project: Option<&str>,
    ttl_ms: u64,
    now: i64,
) -> rusqlite::Result<Vec<String>> {
    Ok(super::transact(conn, |tx| sweep_in(tx, project, ttl_ms, now))?.into_iter().map(|s| s.name).collect())
}

/// A loop the sweep deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    pub name: String,
    pub status: String,
    /// Its worktree folder as stored (it may still be there: module docs).
    pub worktree_dir: String,
}

fn sweep_in(conn: &Connection, project: Option<&str>, ttl_ms: u64, now: i64) -> rusqlite::Result<Vec<Swept>> {
    changes::prune(conn, now.saturating_sub(CHANGES_KEEP_MS))?;
    if ttl_ms == 0 {
        return Ok(vec![]);
    }
    let cutoff = now.saturating_sub(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let expired: Vec<(String, Swept)> = {
        let mut st = conn.prepare(
            "SELECT project_id, loop_name, status, worktree_dir FROM loops
             WHERE status != 'running' AND completed_at IS NOT NULL AND completed_at < ?1
               AND (?2 IS NULL OR project_id = ?2)
             ORDER BY completed_at, project_id, loop_name",
        )?;
        let rows = st.query_map(params![cutoff, project], |r| {
            Ok((r.get(0)?, Swept { name: r.get(1)?, status: r.get(2)?, worktree_dir: r.get(3)? }))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut swept = Vec::with_capacity(expired.len());
    for (p, row) in expired {
        let n = row.name.clone();
        let plans = conn.execute("DELETE FROM plans WHERE project_id = ?1 AND loop_name = ?2", params![p, n])?;
        // Children cascade (foreign_keys=ON); review_findings has no foreign key and stays.
        conn.execute(
            "DELETE FROM loops WHERE project_id = ?1 AND loop_name = ?2 AND status != 'running'",
            params![p, n],
        )?;
        if plans > 0 {
            changes::record(conn, &p, Kind::Plan, &ForgeUri::LoopPlan(n.clone()).to_uri(), now)?;
        }
        changes::record(conn, &p, Kind::Loop, &n, now)?;
        swept.push(row);
    }
    Ok(swept)
}

impl Store {
    /// Runs the TTL sweep for `project` with `ttl_ms` the first time it is called on this
    /// store (the first user connection of the workspace); later calls do nothing. Failures
    /// are logged, never returned: a sweep that could not run leaves everything in place.
    /// Returns the swept loops.
    pub async fn sweep_once(&self, project: &str, ttl_ms: u64) -> Vec<Swept> {
        if self.swept.swap(true, Ordering::SeqCst) {
            return vec![];
        }
        let p = project.to_string();
        let swept = self
            .call(move |c| super::transact(c, |tx| sweep_in(tx, Some(&p), ttl_ms, super::now_ms())))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(project, "the terminal-loop sweep failed: {e}");
                vec![]
            });
        if !swept.is_empty() {
            let names: Vec<&str> = swept.iter().map(|s| s.name.as_str()).collect();
            tracing::info!(project, loops = ?names, "swept terminal loops older than {ttl_ms} ms");
        }
        // The change-feed prune and any deletion are announced like every other write.
        self.wrote.wake();
        swept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::open_connection;

    const NOW: i64 = 1_700_000_000_000;
    const DAY: i64 = 86_400_000;
    const TTL: u64 = 7 * DAY as u64;
    /// Child tables that reference `loops` with ON DELETE CASCADE.
    const CHILDREN: &[&str] = &[
        "loop_large_fields",
        "loop_sessions",
        "section_plans",
        "loop_handoffs",
        "loop_attempts",
        "loop_session_usage",
        "loop_transitions",
        "plan_amendments",
    ];

    fn db() -> (tempfile::TempDir, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forge.db");
        let conn = open_connection(&path).unwrap();
        (dir, path, conn)
    }

    /// A loop with one row in every child table, its loop plan and one review finding.
    fn add_loop(c: &Connection, project: &str, name: &str, status: &str, completed_at: Option<i64>) {
        c.execute(
            "INSERT INTO loops (project_id, loop_name, status, phase, current_session_id, project_dir, worktree_dir,
                worktree_branch, started_at, completed_at)
             VALUES (?1, ?2, ?3, 'coding', ?1 || '-' || ?2 || '-s', '/repo', '/data/worktrees/' || ?2, 'forge/' || ?2, 1, ?4)",
            params![project, name, status, completed_at],
        )
        .unwrap();
        let pn = params![project, name];
        for sql in [
            "INSERT INTO loop_large_fields (project_id, loop_name, last_audit_result) VALUES (?1, ?2, 'audit')",
            "INSERT INTO loop_sessions (session_id, project_id, loop_name, role, token_hash, created_at)
             VALUES (?1 || '-' || ?2 || '-s', ?1, ?2, 'coder', 'h', 1)",
            "INSERT INTO section_plans (project_id, loop_name, section_index, title, content, created_at)
             VALUES (?1, ?2, 0, 'Phase 1', 'body', 1)",
            "INSERT INTO loop_handoffs (project_id, loop_name, session_id, role, phase, iteration, payload, created_at)
             VALUES (?1, ?2, 's', 'coder', 'coding', 1, '{}', 1)",
            "INSERT INTO loop_attempts (project_id, loop_name, scope, attempt_number, source_session_id, completion_key,
                iteration, findings_before, created_at)
             VALUES (?1, ?2, 'section:0', 1, 's', 'k', 1, '[]', 1)",
            "INSERT INTO loop_session_usage (project_id, loop_name, session_id, model, role, captured_at)
             VALUES (?1, ?2, 's', 'm', 'code', 1)",
            "INSERT INTO loop_transitions (project_id, loop_name, event_type, transition_kind, from_phase, iteration, created_at)
             VALUES (?1, ?2, 'e', 'terminate', 'coding', 1, 1)",
            "INSERT INTO plan_amendments (project_id, loop_name, rationale, applied_at_section, sections_before,
                sections_after, created_at)
             VALUES (?1, ?2, 'r', 0, '[]', '[]', 1)",
            "INSERT INTO plans (project_id, loop_name, content, created_at, updated_at) VALUES (?1, ?2, 'plan', 1, 1)",
            "INSERT INTO review_findings (project_id, loop_name, file, line, severity, description, created_at)
             VALUES (?1, ?2, 'src/a.rs', 1, 'bug', 'd', 1)",
        ] {
            c.execute(sql, pn).unwrap();
        }
    }

    fn count(c: &Connection, table: &str, project: &str, name: &str) -> i64 {
        c.query_row(
            &format!("SELECT count(*) FROM {table} WHERE project_id = ?1 AND loop_name = ?2"),
            params![project, name],
            |r| r.get(0),
        )
        .unwrap()
    }

    fn exists(c: &Connection, project: &str, name: &str) -> bool {
        count(c, "loops", project, name) == 1
    }

    /// Every child row, the loop plan and the finding are present.
    fn assert_whole(c: &Connection, project: &str, name: &str) {
        assert!(exists(c, project, name), "loop {project}/{name} must remain");
        for t in CHILDREN.iter().chain(&["plans", "review_findings"]) {
            assert_eq!(count(c, t, project, name), 1, "{t} of {project}/{name}");
        }
    }

    fn assert_swept(c: &Connection, project: &str, name: &str) {
        assert!(!exists(c, project, name), "loop {project}/{name} must be swept");
        for t in CHILDREN.iter().chain(&["plans"]) {
            assert_eq!(count(c, t, project, name), 0, "{t} of swept {project}/{name} must cascade");
        }
        assert_eq!(count(c, "review_findings", project, name), 1, "findings of {project}/{name} are kept");
    }

    #[test]
    fn ttl_boundary_is_strict() {
        let (_d, _p, mut c) = db();
        let ttl = TTL as i64;
        add_loop(&c, "p", "older", "completed", Some(NOW - ttl - 1));
        add_loop(&c, "p", "exact", "completed", Some(NOW - ttl));
        add_loop(&c, "p", "younger", "completed", Some(NOW - ttl + 1));
        let swept = sweep_terminal_loops(&mut c, Some("p"), TTL, NOW).unwrap();
        assert_eq!(swept, vec!["older".to_string()]);
        assert_swept(&c, "p", "older");
        assert_whole(&c, "p", "exact");
        assert_whole(&c, "p", "younger");
    }

    #[test]
    fn every_terminal_status_is_swept_and_running_never() {
        let (_d, path, mut c) = db();
        let old = Some(NOW - 30 * DAY);
        for s in ["completed", "cancelled", "errored", "stalled"] {
            add_loop(&c, "p", s, s, old);
        }
        // A running loop with a (stale) completed_at from an earlier run, and one without.
        add_loop(&c, "p", "running-old", "running", old);
        add_loop(&c, "p", "running", "running", None);
        // A terminal loop without completed_at cannot be aged: kept.
        add_loop(&c, "p", "no-time", "cancelled", None);
        let mut swept = sweep_terminal_loops(&mut c, Some("p"), TTL, NOW).unwrap();
        swept.sort();
        assert_eq!(swept, ["cancelled", "completed", "errored", "stalled"]);
        drop(c);
        // Committed to the file.
        let c = open_connection(&path).unwrap();
        for s in ["completed", "cancelled", "errored", "stalled"] {
            assert_swept(&c, "p", s);
        }
        for s in ["running-old", "running", "no-time"] {
            assert_whole(&c, "p", s);
        }
    }

    #[test]
    fn cascade_needs_and_has_foreign_keys() {
        let (_d, _p, mut c) = db();
        let fk: i64 = c.query_row("PRAGMA foreign_keys", [], |r| r.get(0)).unwrap();
        assert_eq!(fk, 1, "open_connection enables foreign keys");
        add_loop(&c, "p", "gone", "completed", Some(NOW - 30 * DAY));
        sweep_terminal_loops(&mut c, None, TTL, NOW).unwrap();
        for t in CHILDREN {
            let all: i64 = c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0)).unwrap();
            assert_eq!(all, 0, "{t} must be empty after the cascade");
        }
    }

    #[test]
    fn plans_of_the_loop_go_findings_and_other_plans_stay() {
        let (_d, _p, mut c) = db();
        add_loop(&c, "p", "shared", "completed", Some(NOW - 30 * DAY));
        // Same loop name in another project (still running there), and a session plan.
        add_loop(&c, "q", "shared", "running", None);
        c.execute(
            "INSERT INTO plans (project_id, session_id, content, created_at, updated_at) VALUES ('p', 'ses', 'x', 1, 1)",
            [],
        )
        .unwrap();
        let swept = sweep_terminal_loops(&mut c, Some("p"), TTL, NOW).unwrap();
        assert_eq!(swept, ["shared"]);
        assert_swept(&c, "p", "shared");
        assert_whole(&c, "q", "shared");
        let session_plans: i64 =
            c.query_row("SELECT count(*) FROM plans WHERE session_id = 'ses'", [], |r| r.get(0)).unwrap();
        assert_eq!(session_plans, 1, "session plans have no TTL");
    }

    #[test]
    fn project_scope() {
        let (_d, _p, mut c) = db();
        let old = Some(NOW - 30 * DAY);
        add_loop(&c, "p", "a", "completed", old);
        add_loop(&c, "q", "b", "errored", old);
        assert_eq!(sweep_terminal_loops(&mut c, Some("p"), TTL, NOW).unwrap(), ["a"]);
        assert_whole(&c, "q", "b");
        assert_eq!(sweep_terminal_loops(&mut c, None, TTL, NOW).unwrap(), ["b"]);
        assert_swept(&c, "q", "b");
    }

    #[test]
    fn ttl_zero_disables() {
        let (_d, _p, mut c) = db();
        add_loop(&c, "p", "ancient", "completed", Some(0));
        assert!(sweep_terminal_loops(&mut c, Some("p"), 0, NOW).unwrap().is_empty());
        assert!(sweep_terminal_loops(&mut c, None, 0, NOW).unwrap().is_empty());
        assert_whole(&c, "p", "ancient");
    }

    #[test]
    fn records_changes_and_prunes_old_ones() {
        let (_d, _p, mut c) = db();
        let old = NOW - CHANGES_KEEP_MS - 1;
        let recent = NOW - CHANGES_KEEP_MS;
        changes::record(&c, "p", Kind::Plan, "old", old).unwrap();
        changes::record(&c, "p", Kind::Plan, "recent", recent).unwrap();
        add_loop(&c, "p", "done", "completed", Some(NOW - 30 * DAY));
        sweep_terminal_loops(&mut c, Some("p"), TTL, NOW).unwrap();
        let feed = changes::since(&c, 0, 100).unwrap();
        let got: Vec<(Kind, &str, i64)> = feed.iter().map(|ch| (ch.kind, ch.key.as_str(), ch.at)).collect();
        let plan_uri = ForgeUri::LoopPlan("done".into()).to_uri();
        assert_eq!(
            got,
            vec![(Kind::Plan, "recent", recent), (Kind::Plan, plan_uri.as_str(), NOW), (Kind::Loop, "done", NOW)]
        );
        assert!(feed.iter().all(|ch| ch.project_id == "p"));
    }

    #[test]
    fn prunes_the_feed_even_when_disabled() {
        let (_d, _p, mut c) = db();
        changes::record(&c, "p", Kind::Loop, "x", 0).unwrap();
        sweep_terminal_loops(&mut c, Some("p"), 0, NOW).unwrap();
        assert!(changes::since(&c, 0, 10).unwrap().is_empty());
    }

    #[tokio::test]
    async fn sweep_once_runs_only_for_the_first_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forge.db");
        let store = Store::open(&path).unwrap();
        store.call(|c| add_loop(c, "p", "first", "cancelled", Some(1))).await;
        store.call(|c| add_loop(c, "q", "other-project", "cancelled", Some(1))).await;
        let swept = store.sweep_once("p", TTL).await;
        assert_eq!(
            swept.iter().map(|s| (s.name.as_str(), s.status.as_str())).collect::<Vec<_>>(),
            [("first", "cancelled")]
        );
        store.call(|c| add_loop(c, "p", "second", "cancelled", Some(1))).await;
        assert!(store.sweep_once("p", TTL).await.is_empty(), "once per store");
        assert!(store.clone().sweep_once("p", TTL).await.is_empty(), "clones share the flag");
        store
            .call(|c| {
                assert_swept(c, "p", "first");
                assert_whole(c, "p", "second");
                assert_whole(c, "q", "other-project");
            })
            .await;
    }
}
