//! Review findings as diagnostics (PROTOCOL.md §6).
//!
//! Every connection has a publisher task. Feed entries mark files dirty; a burst is
//! coalesced (published once the feed has been quiet for 50 ms, or after 5 s of
//! continuous writes), then each affected URI is published once with every finding that
//! resolves to it (an empty list when none is left).
//!
//! Paths: a relative `file` resolves against the loop's worktree (loop findings) or the
//! project root; with `diagnostics.mirrorLoopFindings` a loop finding is also published
//! under the project root. Ranges cover the whole line, measured in the client's position
//! encoding from the open buffer or the file on disk; a file outside the project, the
//! loop worktrees and the data directory is never read (its range is 0..0).

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use forge_domain::diagnostics::{self as dmap};
use forge_domain::review::Finding;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::conn::Conn;
use crate::state::Work;
use crate::to_proto::diagnostic;
use forge_store::findings;

/// Quiet period that ends a burst.
pub const QUIET: Duration = Duration::from_millis(50);
/// Longest a continuous burst is held back (a stream of writes that never pauses for
/// 50 ms is still published every 5 s).
pub const MAX_HOLD: Duration = Duration::from_secs(5);

/// Starts the publisher of a connection; returns its queue.
pub fn start(conn: Weak<Conn>) -> mpsc::UnboundedSender<Work> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Work>();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut batch: HashSet<Work> = HashSet::from([first]);
            let start = Instant::now();
            loop {
                match tokio::time::timeout(QUIET, rx.recv()).await {
                    Ok(Some(w)) => {
                        batch.insert(w);
                        if start.elapsed() >= MAX_HOLD {
                            break;
                        }
                    }
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let Some(conn) = conn.upgrade() else { return };
            publish(&conn, batch).await;
        }
    });
    tx
}

/// Loop name → worktree, for the project's loops that are not completed.
type Worktrees = HashMap<String, PathBuf>;

async fn publish(conn: &Arc<Conn>, batch: HashSet<Work>) {
    let env = conn.env();
    let project = env.project.id.clone();
    let root = env.project.root.clone();
    let mirror = env.config.mirror_loop_findings;
    let all = batch.contains(&Work::All);
    let mut files: HashSet<String> = HashSet::new();
    let mut loops_dirty = vec![];
    for w in batch {
        match w {
            Work::File(f) => {
                files.insert(f);
            }
            Work::Loop(l) => loops_dirty.push(l),
            Work::All => {}
        }
    }
    // Files whose URIs may be affected: the dirty ones plus every file string that
    // contributed to one of their previously published URIs.
    let extra: HashSet<String> = {
        let p = conn.published.lock().expect("published");
        files
            .iter()
            .flat_map(|f| p.file_uris.get(f).into_iter().flatten())
            .flat_map(|u| p.uri_files.get(u).into_iter().flatten())
            .cloned()
            .collect()
    };
    files.extend(extra);
    let query_files: Option<Vec<String>> = (!all).then(|| files.iter().cloned().collect());
    let p2 = project.clone();
    let result = conn
        .ws
        .store
        .call(move |db| -> rusqlite::Result<(Vec<Finding>, Worktrees, Vec<String>)> {
            let mut loop_files = vec![];
            for l in &loops_dirty {
                loop_files.extend(findings::files_of_loop(db, &p2, l)?);
            }
            let mut q = query_files.clone();
            if let Some(q) = q.as_mut() {
                q.extend(loop_files.iter().cloned());
            }
            let rows = findings::open(db, &p2, q.as_deref())?;
            let mut st = db.prepare_cached(
                "SELECT loop_name, worktree_dir FROM loops WHERE project_id = ?1 AND status != 'completed'",
            )?;
            let wts = st
                .query_map([&p2], |r| Ok((r.get::<_, String>(0)?, PathBuf::from(r.get::<_, String>(1)?))))?
                .collect::<rusqlite::Result<Worktrees>>()?;
            Ok((rows, wts, loop_files))
        })
        .await;
    let (rows, worktrees, loop_files) = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("cannot read findings for diagnostics: {e}");
            return;
        }
    };
    files.extend(loop_files);

    // Group by target URI.
    let mut by_uri: HashMap<String, Vec<(&Finding, PathBuf)>> = HashMap::new();
    for f in &rows {
        for path in targets(f, &root, &worktrees, mirror) {
            by_uri.entry(file_uri(&path)).or_default().push((f, path));
        }
    }
    // URIs to publish: every URI that now has findings of the affected files, plus every
    // URI previously published for them (so removed findings are cleared).
    let mut uris: HashSet<String> = by_uri.keys().cloned().collect();
    {
        let p = conn.published.lock().expect("published");
        if all {
            uris.extend(p.uri_files.keys().cloned());
        } else {
            for f in &files {
                uris.extend(p.file_uris.get(f).into_iter().flatten().cloned());
            }
        }
    }

    let allowed = allowed_roots(&root, &worktrees, &conn.ws.data_dir);
    let enc = conn.caps.encoding;
    // Line lengths per file (or open buffer), computed once per publication.
    let mut lengths: HashMap<PathBuf, Option<Vec<u32>>> = HashMap::new();
    let mut open_lengths: HashMap<String, Option<Vec<u32>>> = HashMap::new();
    let mut out: Vec<(String, Vec<Value>, HashSet<String>)> = vec![];
    for uri in uris {
        let entries = by_uri.get(&uri).map(Vec::as_slice).unwrap_or(&[]);
        let mut diags = Vec::with_capacity(entries.len());
        let mut contributing = HashSet::new();
        for (f, path) in entries {
            contributing.insert(f.file.clone());
            let open = open_lengths
                .entry(uri.clone())
                .or_insert_with(|| conn.open_text(&uri).map(|t| dmap::line_lengths(&t, enc)));
            let lens: Option<&[u32]> = match open {
                Some(l) => Some(l.as_slice()),
                None => lengths
                    .entry(path.clone())
                    .or_insert_with(|| read_allowed(path, &allowed).map(|t| dmap::line_lengths(&t, enc)))
                    .as_deref(),
            };
            let measured = lens.and_then(|l| {
                let i = usize::try_from(f.line.checked_sub(1)?).ok()?;
                l.get(i).map(|&end| (i as u32, 0, end))
            });
            // LSP positions are `uinteger` (0..=2^31-1): a line beyond that is shown on the
            // last representable line, or clients reject the whole publication.
            let (line, start, end) = measured.unwrap_or(((f.line.max(1) - 1).min(i64::from(i32::MAX)) as u32, 0, 0));
            let mut data = dmap::data(f);
            data["file"] = Value::from(f.file.clone());
            data["line"] = Value::from(f.line);
            diags.push(diagnostic(
                line,
                start,
                end,
                dmap::severity_code(f.severity),
                &dmap::message(f),
                Some(Value::from(f.id)),
                Some(data),
            ));
        }
        out.push((uri, diags, contributing));
    }
    {
        let mut p = conn.published.lock().expect("published");
        for (uri, _, contributing) in &out {
            if let Some(old) = p.uri_files.remove(uri) {
                for f in old {
                    if let Some(s) = p.file_uris.get_mut(&f) {
                        s.remove(uri);
                    }
                }
            }
            if !contributing.is_empty() {
                for f in contributing {
                    p.file_uris.entry(f.clone()).or_default().insert(uri.clone());
                }
                p.uri_files.insert(uri.clone(), contributing.clone());
            }
        }
        p.file_uris.retain(|_, s| !s.is_empty());
    }
    for (uri, diags, _) in out {
        conn.publish(&uri, diags).await;
    }
}

/// The paths a finding is published on.
pub fn targets(f: &Finding, root: &Path, worktrees: &Worktrees, mirror: bool) -> Vec<PathBuf> {
    let p = Path::new(&f.file);
    if p.is_absolute() {
        return vec![normalize(p)];
    }
    match f.loop_name.as_deref() {
        None => vec![normalize(&root.join(p))],
        Some(l) => {
            let mut v = vec![];
            if let Some(wt) = worktrees.get(l) {
                v.push(normalize(&wt.join(p)));
            }
            if mirror || v.is_empty() {
                let r = normalize(&root.join(p));
                if !v.contains(&r) {
                    v.push(r);
                }
            }
            v
        }
    }
}

/// Lexical normalisation (`.` and `..`), without touching the file system.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `file://` URI of an absolute path.
pub fn file_uri(p: &Path) -> String {
    let mut s = String::from("file://");
    for b in p.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

fn allowed_roots(root: &Path, worktrees: &Worktrees, data_dir: &Path) -> Vec<PathBuf> {
    std::iter::once(root)
        .chain(worktrees.values().map(PathBuf::as_path))
        .chain(std::iter::once(data_dir))
        .filter_map(|p| p.canonicalize().ok())
        .collect()
}

/// Reads a file only when it (symlinks resolved) lies inside an allowed root.
fn read_allowed(path: &Path, allowed: &[PathBuf]) -> Option<String> {
    let real = path.canonicalize().ok()?;
    if !allowed.iter().any(|a| real.starts_with(a)) {
        return None;
    }
    let meta = std::fs::metadata(&real).ok()?;
    if !meta.is_file() || meta.len() > 16 * 1024 * 1024 {
        return None;
    }
    let bytes = std::fs::read(&real).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_protocol::inputs::Severity;

    fn f(file: &str, loop_name: Option<&str>) -> Finding {
        Finding {
            id: 1,
            file: file.into(),
            line: 1,
            severity: Severity::Bug,
            description: "d".into(),
            scenario: None,
            loop_name: loop_name.map(Into::into),
            section_index: None,
            created_at: 0,
        }
    }

    #[test]
    fn resolution_and_mirroring() {
        let root = Path::new("/p");
        let wts = Worktrees::from([("l".to_string(), PathBuf::from("/d/worktrees/l"))]);
        assert_eq!(targets(&f("src/a.rs", None), root, &wts, true), [PathBuf::from("/p/src/a.rs")]);
        assert_eq!(
            targets(&f("src/a.rs", Some("l")), root, &wts, true),
            [PathBuf::from("/d/worktrees/l/src/a.rs"), PathBuf::from("/p/src/a.rs")]
        );
        assert_eq!(targets(&f("src/a.rs", Some("l")), root, &wts, false), [PathBuf::from("/d/worktrees/l/src/a.rs")]);
        assert_eq!(targets(&f("../../etc/passwd", None), root, &wts, true), [PathBuf::from("/etc/passwd")]);
        assert_eq!(file_uri(Path::new("/p/a b/ü.rs")), "file:///p/a%20b/%C3%BC.rs");
    }

    #[test]
    fn never_reads_outside_allowed_roots() {
        let d = tempfile::tempdir().unwrap();
        let inside = d.path().join("in");
        std::fs::create_dir(&inside).unwrap();
        std::fs::write(inside.join("a.txt"), "x").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), inside.join("link")).unwrap();
        let allowed = vec![inside.canonicalize().unwrap()];
        assert_eq!(read_allowed(&inside.join("a.txt"), &allowed).as_deref(), Some("x"));
        assert_eq!(read_allowed(&outside.path().join("secret"), &allowed), None);
        assert_eq!(read_allowed(&inside.join("link"), &allowed), None, "symlink escaping the project");
    }
}
