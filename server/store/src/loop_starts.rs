//! Loop starts in progress (migration 012): what `execute-plan` is about to create, kept
//! until the loop's rows are written, so that a start killed in between (its branch and
//! worktree made, no loop row) can be found and undone by a later start.
//!
//! Invariant: a row exists from before its branch and worktree are created until the
//! transaction that writes its loop's rows ([`end`] in it), or until a failed start is
//! rolled back. A row whose owner process is gone therefore names a branch and a worktree
//! that no loop row knows.

use rusqlite::{params, Connection};

/// A loop start in progress, or left by a process that was killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopStart {
    pub worktree_dir: String,
    pub project_id: String,
    pub loop_name: String,
    pub repo_dir: String,
    pub branch: String,
    pub owner_pid: i64,
    pub started_at: i64,
    /// The commit the branch is made at: read before the branch is made, recorded again
    /// once its worktree exists ([`created`]).
    pub base_commit: Option<String>,
}

/// Records a start; `false` when another start holds the same worktree folder.
pub fn begin(conn: &Connection, s: &LoopStart) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "INSERT INTO loop_starts (worktree_dir, project_id, loop_name, repo_dir, branch, owner_pid, started_at, base_commit)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (worktree_dir) DO NOTHING",
        params![s.worktree_dir, s.project_id, s.loop_name, s.repo_dir, s.branch, s.owner_pid, s.started_at, s.base_commit],
    )?;
    Ok(n == 1)
}

/// Records the commit the start's branch and worktree were made at.
pub fn created(conn: &Connection, worktree_dir: &str, base_commit: &str) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE loop_starts SET base_commit = ?2 WHERE worktree_dir = ?1",
        params![worktree_dir, base_commit],
    )?;
    Ok(())
}

/// Forgets a start: its loop's rows are written, or it was rolled back.
pub fn end(conn: &Connection, worktree_dir: &str) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM loop_starts WHERE worktree_dir = ?1", [worktree_dir])?;
    Ok(())
}

/// Takes over the record of a start whose process is gone, to undo it: it names `pid` at
/// `at` from now on, so no other process takes it for dead, nor starts a loop in its
/// folder, while it is undone. `false` when the record is no longer `s` as read (another
/// process took it over, undid it, or a new start holds the folder).
pub fn claim(conn: &Connection, s: &LoopStart, pid: i64, at: i64) -> rusqlite::Result<bool> {
    let n = conn.execute(
        "UPDATE loop_starts SET owner_pid = ?4, started_at = ?5 WHERE worktree_dir = ?1 AND owner_pid = ?2 AND started_at = ?3",
        params![s.worktree_dir, s.owner_pid, s.started_at, pid, at],
    )?;
    Ok(n == 1)
}

/// Forgets a claimed record ([`claim`]) once undone, if it is still that claim.
pub fn end_claimed(conn: &Connection, worktree_dir: &str, pid: i64, at: i64) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM loop_starts WHERE worktree_dir = ?1 AND owner_pid = ?2 AND started_at = ?3",
        params![worktree_dir, pid, at],
    )?;
    Ok(())
}

/// Every recorded start of the data directory, oldest first.
pub fn all(conn: &Connection) -> rusqlite::Result<Vec<LoopStart>> {
    let mut st = conn.prepare(
        "SELECT worktree_dir, project_id, loop_name, repo_dir, branch, owner_pid, started_at, base_commit FROM loop_starts ORDER BY started_at",
    )?;
    let rows = st.query_map([], |r| {
        Ok(LoopStart {
            worktree_dir: r.get(0)?,
            project_id: r.get(1)?,
            loop_name: r.get(2)?,
            repo_dir: r.get(3)?,
            branch: r.get(4)?,
            owner_pid: r.get(5)?,
            started_at: r.get(6)?,
            base_commit: r.get(7)?,
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(dir: &str, pid: i64) -> LoopStart {
        LoopStart {
            worktree_dir: dir.into(),
            project_id: "p".into(),
            loop_name: "n".into(),
            repo_dir: "/r".into(),
            branch: "forge/n".into(),
            owner_pid: pid,
            started_at: 5,
            base_commit: None,
        }
    }

    #[test]
    fn a_start_is_held_once_per_worktree_folder_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let c = crate::open_connection(&dir.path().join("forge.db")).unwrap();
        assert!(begin(&c, &start("/w/a", 1)).unwrap());
        assert!(!begin(&c, &start("/w/a", 2)).unwrap(), "the same folder is held");
        assert!(begin(&c, &start("/w/b", 2)).unwrap());
        assert_eq!(
            all(&c).unwrap().iter().map(|s| (s.worktree_dir.as_str(), s.owner_pid)).collect::<Vec<_>>(),
            [("/w/a", 1), ("/w/b", 2)]
        );
        created(&c, "/w/a", "abc").unwrap();
        assert_eq!(all(&c).unwrap()[0].base_commit.as_deref(), Some("abc"));
        end(&c, "/w/a").unwrap();
        assert_eq!(all(&c).unwrap(), [start("/w/b", 2)]);
        // A claim takes the record as read, once; a stale one changes nothing.
        let b = start("/w/b", 2);
        assert!(claim(&c, &b, 9, 50).unwrap());
        assert!(!claim(&c, &b, 10, 60).unwrap(), "claimed already");
        end_claimed(&c, "/w/b", 10, 60).unwrap();
        assert_eq!(all(&c).unwrap().len(), 1, "not the other claim's");
        end_claimed(&c, "/w/b", 9, 50).unwrap();
        assert!(all(&c).unwrap().is_empty());
    }
}
