//! The sweep of agents' files in the data directory: what a turn or a session leaves
//! there outlives nothing it belongs to.
//!
//! Every turn writes its prompt (`prompts/<loop>/<session>-<turn>.md`, or
//! `prompts/sessions/…` for a session outside loops); a session keeps its CLI's session id
//! (`agent-sessions/<session>.id`), Gemini's settings of earlier versions (`agent-sessions/<session>.gemini.json`)
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
//! Only plain files with the names above are removed. Every directory is opened without
//! following a link and entries are removed relative to it, so a link at any of these
//! names (a `prompts` planted in a shared data directory) is skipped and nothing outside
//! the data directory is touched. A loop's folder left empty under `prompts/` goes too
//! (not `prompts/sessions`). Anything else in those directories is left alone.
//!
//! The TTL is the one of the first host connection that is not a loop session (a loop's
//! agent never chooses it), and it governs the whole data directory: the files of
//! sessions outside loops carry no project.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

use forge_core::beneath;
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
///
/// Every directory below `data_dir` is opened relative to its parent without following a
/// link (`forge_core::beneath`), and entries are removed relative to the directory that
/// was listed: a `prompts`, a loop's folder or an `agent-sessions` that is a symbolic link
/// (planted in a shared data directory, say) is skipped, and nothing outside is touched.
pub fn sweep(data_dir: &Path, live: &HashSet<String>, ttl_ms: u64, now: SystemTime) -> Swept {
    let mut swept = Swept::default();
    if ttl_ms == 0 {
        return swept;
    }
    let Some(cutoff) = now.checked_sub(Duration::from_millis(ttl_ms)) else { return swept };
    let data = match beneath::open_dir(data_dir, Path::new(""), false) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("the sweep of agents' files cannot open {}: {e}", data_dir.display());
            return swept;
        }
    };
    if let Some(prompts) = subdir(&data, data_dir, "prompts") {
        for name in names(&prompts, &data_dir.join("prompts")) {
            let shown = data_dir.join("prompts").join(&name);
            let Some(dir) = subdir(&prompts, &data_dir.join("prompts"), &name) else { continue };
            sweep_in(&dir, &shown, live, cutoff, prompt_session, &mut swept);
            // A loop's folder once its turns are all gone (only when empty). Not the
            // sessions' folder, which every new session outside loops writes into.
            if name != "sessions" {
                let _ = beneath::unlink_at(&prompts, &name, true);
            }
        }
    }
    for (folder, session_of) in [("agent-sessions", agent_session as SessionOf), ("usage", usage_session)] {
        if let Some(dir) = subdir(&data, data_dir, folder) {
            sweep_in(&dir, &data_dir.join(folder), live, cutoff, session_of, &mut swept);
        }
    }
    swept
}

type SessionOf = fn(&str) -> Option<&str>;

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

/// The directory `name` in `parent` (shown as `parent_shown/name`); `None` when it is
/// absent, a link or not a directory (logged unless absent).
fn subdir(parent: &OwnedFd, parent_shown: &Path, name: impl AsRef<OsStr>) -> Option<OwnedFd> {
    let name = name.as_ref();
    match beneath::open_subdir(parent, name) {
        Ok(d) => Some(d),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        // A link (skipped, never followed) or a file: nothing of the engine's.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) => {
            tracing::debug!("the sweep of agents' files skips {}: not a directory", parent_shown.join(name).display());
            None
        }
        Err(e) => {
            tracing::warn!("the sweep of agents' files skips {}: {e}", parent_shown.join(name).display());
            None
        }
    }
}

fn names(dir: &OwnedFd, shown: &Path) -> Vec<OsString> {
    beneath::list_dir(dir).unwrap_or_else(|e| {
        tracing::warn!("cannot list {}: {e}", shown.display());
        vec![]
    })
}

fn sweep_in(
    dir: &OwnedFd,
    shown: &Path,
    live: &HashSet<String>,
    cutoff: SystemTime,
    session_of: SessionOf,
    swept: &mut Swept,
) {
    let cutoff_secs = cutoff.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    for name in names(dir, shown) {
        let Some(session) = name.to_str().and_then(session_of) else { continue };
        if live.contains(session) {
            continue;
        }
        // The entry itself, not what a link points to: only a plain file is removed.
        let Ok(st) = beneath::stat_at(dir, &name) else { continue };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mtime >= cutoff_secs {
            continue;
        }
        match beneath::unlink_at(dir, &name, false) {
            Ok(()) => {
                swept.files += 1;
                swept.bytes += st.st_size as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove {}: {e}", shown.join(&name).display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;

    #[test]
    fn file_names_give_their_session() {
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

    /// A `prompts`, a loop's folder or an `agent-sessions` that is a link (planted in a
    /// shared data directory, say) is skipped: nothing it leads to is removed, files or
    /// empty directories. The sessions' folder stays when emptied.
    #[test]
    fn links_at_the_folders_are_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let (dd, victim) = (d.path().join("data"), d.path().join("victim"));
        for f in ["notes/meeting-2024.md", "loop/s-1.md", "agent/s.id", "usage/s.jsonl"] {
            touch(&victim.join(f), 10);
        }
        std::fs::create_dir_all(victim.join("Music")).unwrap();
        std::fs::create_dir_all(dd.join("prompts")).unwrap();
        std::os::unix::fs::symlink(victim.join("loop"), dd.join("prompts/linked-loop")).unwrap();
        std::os::unix::fs::symlink(victim.join("agent"), dd.join("agent-sessions")).unwrap();
        std::os::unix::fs::symlink(victim.join("usage"), dd.join("usage")).unwrap();
        touch(&dd.join("prompts/sessions/s2-1.md"), 10);
        sweep(&dd, &HashSet::new(), 7 * DAY, SystemTime::now());
        assert!(!dd.join("prompts/sessions/s2-1.md").exists());
        assert!(dd.join("prompts/sessions").is_dir(), "the sessions' folder stays");
        // prompts itself a link to the victim's folder.
        std::fs::remove_dir_all(dd.join("prompts")).unwrap();
        std::os::unix::fs::symlink(&victim, dd.join("prompts")).unwrap();
        let swept = sweep(&dd, &HashSet::new(), 7 * DAY, SystemTime::now());
        assert_eq!(swept, Swept::default());
        for f in ["notes/meeting-2024.md", "loop/s-1.md", "agent/s.id", "usage/s.jsonl", "Music"] {
            assert!(victim.join(f).exists(), "{f} was removed through a link");
        }
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
