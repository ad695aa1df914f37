//! The sweep of agents' files in the data directory: what a turn or a session leaves
//! there outlives nothing it belongs to.
//!
//! Every turn writes its prompt (`prompts/<loop>/<session>-<turn>.md`, or
//! `prompts/sessions/…` for a session outside loops); a session keeps its CLI's session id
//! (`agent-sessions/<session>.id`), Gemini's settings (`agent-sessions/<session>.gemini.json`)
//! and its usage log (`usage/<session>.jsonl`). They are the record of what a loop sent
//! its agents while the loop is kept, and are needed by its later turns (a resumed CLI
//! session), so none of them is removed at the end of a turn or of a loop.
//!
//! Invariant: a file is removed only when it was last written more than the terminal-loop
//! TTL ago (`completedLoopTtlMs`, the time the loop's own rows are kept after it ends)
//! **and** its session is not a session of a loop that is still stored. A loop's rows go
//! with the TTL sweep of the store ([`forge_store::sweep`]); the next sweep of files
//! after that takes its files. A session outside loops has no row: its files go once
//! they are that old. A TTL of 0 keeps everything (the store's sweep is off too).
//!
//! Only plain files with the names above are removed, never followed through a symlink;
//! a directory left empty under `prompts/` goes too. Anything else in those directories
//! is left alone.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rusqlite::Connection;

/// The sessions of every stored loop (any project): their files are kept whatever their age.
pub fn live_sessions(db: &Connection) -> rusqlite::Result<HashSet<String>> {
    let mut st = db.prepare("SELECT session_id FROM loop_sessions")?;
    let ids = st.query_map([], |r| r.get::<_, String>(0))?;
    ids.collect()
}

/// What one sweep removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub files: usize,
    pub bytes: u64,
}

/// Removes the agents' files under `data_dir` older than `ttl_ms` (at `now`) whose session
/// is not in `live` (module docs). Errors are logged and skipped: a sweep never fails a
/// caller.
pub fn sweep(data_dir: &Path, live: &HashSet<String>, ttl_ms: u64, now: SystemTime) -> Swept {
    let mut swept = Swept::default();
    if ttl_ms == 0 {
        return swept;
    }
    let Some(cutoff) = now.checked_sub(Duration::from_millis(ttl_ms)) else { return swept };
    let prompts = data_dir.join("prompts");
    for dir in entries(&prompts) {
        if !is_plain_dir(&dir) {
            continue;
        }
        sweep_dir(&dir, live, cutoff, prompt_session, &mut swept);
        // Only when empty (a loop's directory whose turns are all gone).
        let _ = std::fs::remove_dir(&dir);
    }
    sweep_dir(&data_dir.join("agent-sessions"), live, cutoff, agent_session, &mut swept);
    sweep_dir(&data_dir.join("usage"), live, cutoff, usage_session, &mut swept);
    swept
}

/// `<session>-<turn>.md` → the session.
fn prompt_session(name: &str) -> Option<&str> {
    let (session, turn) = name.strip_suffix(".md")?.rsplit_once('-')?;
    (!session.is_empty() && !turn.is_empty() && turn.bytes().all(|b| b.is_ascii_digit())).then_some(session)
}

/// `<session>.id` or `<session>.gemini.json` → the session.
fn agent_session(name: &str) -> Option<&str> {
    name.strip_suffix(".gemini.json").or_else(|| name.strip_suffix(".id")).filter(|s| !s.is_empty())
}

/// `<session>.jsonl` → the session.
fn usage_session(name: &str) -> Option<&str> {
    name.strip_suffix(".jsonl").filter(|s| !s.is_empty())
}

fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => {
            tracing::warn!("cannot list {}: {e}", dir.display());
            vec![]
        }
    }
}

fn is_plain_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn sweep_dir(
    dir: &Path,
    live: &HashSet<String>,
    cutoff: SystemTime,
    session_of: fn(&str) -> Option<&str>,
    swept: &mut Swept,
) {
    if !is_plain_dir(dir) {
        return;
    }
    for path in entries(dir) {
        let Some(session) = path.file_name().and_then(|n| n.to_str()).and_then(session_of) else { continue };
        if live.contains(session) {
            continue;
        }
        // Not followed: a symlink or a directory with such a name is not ours to remove.
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !meta.is_file() || meta.modified().map_or(true, |m| m >= cutoff) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                swept.files += 1;
                swept.bytes += meta.len();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;

    #[test]
    fn file_names_give_their_session() {
        type SessionOf = fn(&str) -> Option<&str>;
        let cases: &[(SessionOf, &str, Option<&str>)] = &[
            (prompt_session, "ses_a-b-3.md", Some("ses_a-b")),
            (prompt_session, "s-12.md", Some("s")),
            (prompt_session, "s-x.md", None),
            (prompt_session, "-3.md", None),
            (prompt_session, "s-3.txt", None),
            (agent_session, "s.id", Some("s")),
            (agent_session, "s.gemini.json", Some("s")),
            (agent_session, ".id", None),
            (agent_session, "s.json", None),
            (usage_session, "s.jsonl", Some("s")),
            (usage_session, "notes.txt", None),
        ];
        for (f, name, want) in cases {
            assert_eq!(f(name), *want, "{name}");
        }
    }

    fn touch(p: &Path, age_days: u64) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
        let t = SystemTime::now() - Duration::from_millis(age_days * DAY);
        std::fs::File::options().write(true).open(p).unwrap().set_modified(t).unwrap();
    }

    #[test]
    fn old_files_of_gone_sessions_go_and_everything_else_stays() {
        let d = tempfile::tempdir().unwrap();
        let dd = d.path();
        let old_gone = [
            "prompts/done-loop/s1-1.md",
            "prompts/done-loop/s1-2.md",
            "prompts/sessions/s2-1.md",
            "agent-sessions/s1.id",
            "agent-sessions/s1.gemini.json",
            "usage/s1.jsonl",
        ];
        let kept = [
            // A stored loop's session, however old (a loop that runs for weeks resumes it).
            "prompts/running/live-1.md",
            "agent-sessions/live.id",
            "usage/live.jsonl",
            // Recent.
            "prompts/done-loop/s3-1.md",
            "agent-sessions/s3.id",
            // Not a name the engine writes.
            "prompts/done-loop/notes.txt",
            "agent-sessions/README",
        ];
        for f in old_gone {
            touch(&dd.join(f), 10);
        }
        for f in kept {
            let age = if f.contains("s3") { 1 } else { 10 };
            touch(&dd.join(f), age);
        }
        // A symlink named like a prompt, to a file outside: neither is removed.
        let outside = dd.join("outside.md");
        touch(&outside, 10);
        std::os::unix::fs::symlink(&outside, dd.join("prompts/sessions/s9-1.md")).unwrap();
        let live: HashSet<String> = ["live".to_string()].into();

        let swept = sweep(dd, &live, 7 * DAY, SystemTime::now());
        assert_eq!(swept, Swept { files: old_gone.len(), bytes: old_gone.len() as u64 });
        for f in old_gone {
            assert!(!dd.join(f).exists(), "{f} was kept");
        }
        for f in kept {
            assert!(dd.join(f).exists(), "{f} was removed");
        }
        assert!(outside.exists() && dd.join("prompts/sessions/s9-1.md").symlink_metadata().is_ok());
        // A loop directory left empty goes; one with files stays.
        touch(&dd.join("prompts/empty-after/s4-1.md"), 10);
        sweep(dd, &live, 7 * DAY, SystemTime::now());
        assert!(!dd.join("prompts/empty-after").exists());
        assert!(dd.join("prompts/done-loop").exists());
        // TTL 0: nothing.
        assert_eq!(sweep(dd, &HashSet::new(), 0, SystemTime::now()), Swept::default());
        assert!(dd.join("agent-sessions/live.id").exists());
    }

    #[test]
    fn the_live_sessions_are_every_stored_loops() {
        let d = tempfile::tempdir().unwrap();
        let c = forge_store::open_connection(&d.path().join("forge.db")).unwrap();
        c.execute_batch(
            "INSERT INTO loops (project_id, loop_name, status, phase, current_session_id, project_dir, worktree_dir, started_at)
               VALUES ('p', 'l', 'running', 'coding', 's1', '/p', '/w', 0);
             INSERT INTO loop_sessions (session_id, project_id, loop_name, role, token_hash, created_at) VALUES ('s1', 'p', 'l', 'coder', 'h', 0);",
        )
        .unwrap();
        assert_eq!(live_sessions(&c).unwrap(), ["s1".to_string()].into());
    }
}
