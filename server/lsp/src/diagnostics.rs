//! Review findings as diagnostics (PROTOCOL.md §6).
//!
//! Every connection has a publisher task. Feed entries mark files dirty; a burst is
//! coalesced (published once the feed has been quiet for 50 ms, or after 5 s of
//! continuous writes), then each affected URI is published once with every finding that
//! resolves to it (an empty list when none is left). The first publication of everything
//! (after `initialized`) is not held back.
//!
//! A publication runs in steps of about [`STEP_FINDINGS`] findings (whole groups of file
//! strings that share a URI, so a URI is always published whole): each step reads its
//! findings on a read connection, builds every diagnostic straight into the bytes of its
//! notification ([`crate::to_proto::publish_diagnostics`]) and sends them. Memory is
//! bounded by a step, not by the store, and the first URIs go out before the rest is read.
//!
//! Paths: a relative `file` resolves against the loop's worktree (loop findings) or the
//! project root; with `diagnostics.mirrorLoopFindings` a loop finding is also published
//! under the project root. Ranges cover the whole line, measured in the client's position
//! encoding from the open buffer or the file on disk; a file outside the project, the
//! loop worktrees and the data directory is never read (its range is 0..0).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use forge_domain::diagnostics::{self as dmap};
use forge_domain::review::Finding;
use forge_protocol::json::escaped_len;

use crate::conn::Conn;
use crate::state::{Queue, Work};
use crate::to_proto::{publish_diagnostics, Diagnostic, Range};
use forge_store::findings;

/// Quiet period that ends a burst.
pub const QUIET: Duration = Duration::from_millis(50);
/// Longest a continuous burst is held back (a stream of writes that never pauses for
/// 50 ms is still published every 5 s).
pub const MAX_HOLD: Duration = Duration::from_secs(5);

/// Starts the publisher of a connection; returns its queue. The publisher ends with the
/// connection.
pub fn start(conn: Weak<Conn>) -> Arc<Queue> {
    let queue = Arc::new(Queue::default());
    let Some(mut alive) = conn.upgrade().map(|c| c.alive()) else { return queue };
    let q = queue.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = q.wake.notified() => {}
                _ = alive.changed() => return,
            }
            // The first publication of everything (after `initialized`) goes out at once;
            // later changes are coalesced.
            if !q.has_all() && !hold(&q, &mut alive).await {
                return;
            }
            let batch = q.take();
            if batch.is_empty() {
                continue;
            }
            let Some(conn) = conn.upgrade() else { return };
            publish(&conn, batch).await;
        }
    });
    queue
}

/// Waits for the rest of a burst: until no work arrives for [`QUIET`], or [`MAX_HOLD`]
/// passed. False when the connection ended.
async fn hold(q: &Queue, alive: &mut tokio::sync::watch::Receiver<()>) -> bool {
    let start = Instant::now();
    loop {
        tokio::select! {
            r = tokio::time::timeout(QUIET, q.wake.notified()) => {
                if r.is_err() || start.elapsed() >= MAX_HOLD {
                    return true;
                }
            }
            _ = alive.changed() => return false,
        }
    }
}

/// Loop name → worktree, for the project's loops that are not completed.
type Worktrees = HashMap<String, PathBuf>;

/// (loop bucket, file, open findings) pairs, the worktrees, and a dirty loop's files.
type Coverage = (Vec<(String, String, i64)>, Worktrees, Vec<String>);

/// About how many findings one publication step reads and builds at a time: memory
/// stays bounded by this, not by the store. The first step is smaller, so the first URIs
/// go out at once.
const STEP_FINDINGS: i64 = 1000;
const FIRST_STEP_FINDINGS: i64 = 100;

fn worktrees(db: &rusqlite::Connection, project: &str) -> rusqlite::Result<Worktrees> {
    let mut st =
        db.prepare_cached("SELECT loop_name, worktree_dir FROM loops WHERE project_id = ?1 AND status != 'completed'")?;
    let rows = st.query_map([project], |r| Ok((r.get::<_, String>(0)?, PathBuf::from(r.get::<_, String>(1)?))))?;
    rows.collect()
}

/// Groups of `file` strings that must be published together: strings whose findings
/// land on a common URI (now, or in the last publication) are in one group, since a
/// URI's publication replaces all of its diagnostics.
fn groups(files: &[String], edges: &[(String, String)]) -> Vec<Vec<String>> {
    // Union-find over the file strings, joined through the URIs they reach; a file that
    // reaches no URI is a group of its own.
    let mut index: HashMap<&str, usize> = HashMap::new();
    for f in files.iter().chain(edges.iter().map(|(f, _)| f)) {
        let n = index.len();
        index.entry(f.as_str()).or_insert(n);
    }
    let mut parent: Vec<usize> = (0..index.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut by_uri: HashMap<&str, usize> = HashMap::new();
    for (file, uri) in edges {
        let i = index[file.as_str()];
        match by_uri.get(uri.as_str()) {
            Some(&j) => {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a] = b;
            }
            None => {
                by_uri.insert(uri.as_str(), i);
            }
        }
    }
    let mut out: HashMap<usize, Vec<String>> = HashMap::new();
    for (file, &i) in &index {
        let r = root(&mut parent, i);
        out.entry(r).or_default().push(file.to_string());
    }
    let mut v: Vec<Vec<String>> = out.into_values().collect();
    for g in &mut v {
        g.sort();
    }
    v.sort();
    v
}

async fn publish(conn: &Arc<Conn>, batch: HashSet<Work>) {
    let env = conn.env();
    let project = env.project.id.clone();
    // Relative paths are the repository's (`Project::findings_root`), also for an editor
    // opened on a folder inside it.
    let root = env.project.findings_root().to_path_buf();
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
    // Files whose URIs may be affected: the dirty ones (every file for `All`) plus every
    // file string that contributed to one of their previously published URIs.
    {
        let p = conn.published.lock().expect("published");
        if all {
            files.extend(p.file_uris.keys().cloned());
        } else {
            let extra: Vec<String> = files
                .iter()
                .flat_map(|f| p.file_uris.get(f).into_iter().flatten())
                .flat_map(|u| p.uri_files.get(u).into_iter().flatten())
                .cloned()
                .collect();
            files.extend(extra);
        }
    }
    // What to cover: (bucket, file) pairs with open findings, and the worktrees.
    let (p2, asked) = (project.clone(), files.iter().cloned().collect::<Vec<_>>());
    let plan = conn
        .ws
        .store
        .read(move |db| -> rusqlite::Result<Coverage> {
            let mut loop_files = vec![];
            for l in &loops_dirty {
                loop_files.extend(findings::files_of_loop(db, &p2, l)?);
            }
            let mut q = asked;
            q.extend(loop_files.iter().cloned());
            let pairs = findings::open_files(db, &p2, (!all).then_some(q.as_slice()))?;
            Ok((pairs, worktrees(db, &p2)?, loop_files))
        })
        .await;
    let (pairs, worktrees, loop_files) = match plan {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::warn!("cannot read findings for diagnostics: {e}");
            return;
        }
        Err(e) => {
            tracing::warn!("cannot read findings for diagnostics: {e}");
            return;
        }
    };
    files.extend(loop_files);
    let mut counts: HashMap<String, i64> = HashMap::new();
    let mut edges: Vec<(String, String)> = vec![];
    for (bucket, file, n) in &pairs {
        files.insert(file.clone());
        *counts.entry(file.clone()).or_default() += n;
        let loop_name = forge_domain::review::loop_from_db(bucket);
        for path in targets(file, loop_name.as_deref(), &root, &worktrees, mirror) {
            edges.push((file.clone(), file_uri(&path)));
        }
    }
    {
        let p = conn.published.lock().expect("published");
        for f in &files {
            for u in p.file_uris.get(f).into_iter().flatten() {
                edges.push((f.clone(), u.clone()));
            }
        }
    }
    let files: Vec<String> = files.into_iter().collect();
    let allowed = allowed_roots(&root, &worktrees, &conn.ws.data_dir);
    let worktrees = Arc::new(worktrees);
    // Steps of whole groups, about STEP_FINDINGS findings each.
    let mut step: Vec<String> = vec![];
    let mut in_step = 0;
    let mut first_step = true;
    let groups = groups(&files, &edges);
    let last = groups.len();
    for (i, g) in groups.into_iter().enumerate() {
        in_step += g.iter().map(|f| counts.get(f).copied().unwrap_or(0)).sum::<i64>();
        step.extend(g);
        let size = if first_step { FIRST_STEP_FINDINGS } else { STEP_FINDINGS };
        if in_step >= size || i + 1 == last {
            first_step = false;
            let files = std::mem::take(&mut step);
            in_step = 0;
            if !publish_step(conn, &project, &root, mirror, &worktrees, &allowed, files).await {
                return;
            }
        }
    }
}

/// Reads, builds and sends the diagnostics of one step: every URI the step's files reach
/// now or reached in the last publication. False when the connection is gone.
async fn publish_step(
    conn: &Arc<Conn>,
    project: &str,
    root: &Path,
    mirror: bool,
    worktrees: &Worktrees,
    allowed: &[PathBuf],
    mut files: Vec<String>,
) -> bool {
    let rows = loop {
        let (p2, q) = (project.to_string(), files.clone());
        let rows = match conn.ws.store.read(move |db| findings::open(db, &p2, Some(&q))).await {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                tracing::warn!("cannot read findings for diagnostics: {e}");
                return true;
            }
            Err(e) => {
                tracing::warn!("cannot read findings for diagnostics: {e}");
                return true;
            }
        };
        // A client that named the project through a link sees two server spellings as one
        // URI: the files published on the other spelling of a URI this step publishes are
        // published with it, or this step's publication would replace theirs (review YL).
        let extra = if conn.spelling.is_identity() {
            vec![]
        } else {
            same_client_uri_files(conn, &rows, &files, root, worktrees, mirror)
        };
        if extra.is_empty() {
            break rows;
        }
        files.extend(extra);
    };
    // Group by target URI.
    let mut by_uri: HashMap<String, Vec<(&Finding, PathBuf)>> = HashMap::new();
    for f in &rows {
        for path in targets(&f.file, f.loop_name.as_deref(), root, worktrees, mirror) {
            by_uri.entry(file_uri(&path)).or_default().push((f, path));
        }
    }
    // URIs to publish: every URI that now has findings of these files, plus every URI
    // previously published for them (so removed findings are cleared).
    let mut uris: Vec<String> = by_uri.keys().cloned().collect();
    {
        let p = conn.published.lock().expect("published");
        let mut seen: HashSet<String> = uris.iter().cloned().collect();
        for f in &files {
            for u in p.file_uris.get(f).into_iter().flatten() {
                if seen.insert(u.clone()) {
                    uris.push(u.clone());
                }
            }
        }
    }
    uris.sort();
    // Two server spellings the client sees as one URI (a finding key stored through a link
    // before keys were resolved, a `global` project's folder opened through a link) are
    // published once, together: two publications of one client URI replace each other, and
    // the editor showed only the last (review YL). The first of them stands for the group;
    // the others are forgotten as published, and sent nothing.
    let mut groups: Vec<(String, Vec<String>)> = vec![];
    {
        let mut index: HashMap<String, usize> = HashMap::new();
        for uri in uris {
            let client = conn.spelling.to_client(&uri).into_owned();
            match index.get(&client) {
                // The server's own spelling stands for the group (open buffers are found by
                // it), not an old key's link spelling that happened to sort first (review YN).
                Some(&i) if uri == conn.spelling.to_server(client.clone()) && groups[i].0 != uri => {
                    groups[i].0 = uri.clone();
                    groups[i].1.insert(0, uri);
                }
                Some(&i) => groups[i].1.push(uri),
                None => {
                    index.insert(client, groups.len());
                    groups.push((uri.clone(), vec![uri]));
                }
            }
        }
    }
    let enc = conn.caps.encoding;
    // Line lengths per file (or open buffer), computed once per step.
    let mut lengths: HashMap<PathBuf, Option<Vec<u32>>> = HashMap::new();
    let mut messages: Vec<(String, Option<Vec<u8>>, HashSet<String>)> = Vec::with_capacity(groups.len());
    for (uri, members) in groups {
        let merged: Vec<(&Finding, PathBuf)>;
        let entries = if members.len() == 1 {
            by_uri.get(&uri).map(Vec::as_slice).unwrap_or(&[])
        } else {
            merged = members.iter().flat_map(|m| by_uri.get(m).into_iter().flatten().cloned()).collect();
            for other in &members[1..] {
                messages.push((other.clone(), None, HashSet::new()));
            }
            merged.as_slice()
        };
        let mut diags = Vec::with_capacity(entries.len());
        let mut contributing = HashSet::new();
        let open = if entries.is_empty() { None } else { conn.open_text(&uri).map(|t| dmap::line_lengths(&t, enc)) };
        // One message for the whole file: its findings' texts in full up to a budget,
        // counted as six bytes per byte (the most an escape takes) until that bound nears
        // the budget, and exactly from then on (measuring every message cost 6% of the first
        // publication of 100,000 findings).
        let (mut spent, mut exact) = (0usize, false);
        let mut size = PublishSize::default();
        let mut left_out = 0usize;
        for (f, path) in entries {
            contributing.insert(f.file.clone());
            if left_out > 0 {
                left_out += 1;
                continue;
            }
            let lens: Option<&[u32]> = match &open {
                Some(l) => Some(l.as_slice()),
                None => lengths
                    .entry(path.clone())
                    .or_insert_with(|| read_allowed(path, allowed).map(|t| dmap::line_lengths(&t, enc)))
                    .as_deref(),
            };
            let measured = lens.and_then(|l| {
                let i = usize::try_from(f.line.checked_sub(1)?).ok()?;
                l.get(i).map(|&end| (i as u32, 0, end))
            });
            // LSP positions are `uinteger` (0..=2^31-1): a line beyond that is shown on the
            // last representable line, or clients reject the whole publication.
            let (line, start, end) = measured.unwrap_or(((f.line.max(1) - 1).min(i64::from(i32::MAX)) as u32, 0, 0));
            let d = Entry::Finding(Diagnostic {
                range: Range::on_line(line, start, end),
                severity: dmap::severity_code(f.severity),
                source: "forge",
                message: if spent < dmap::URI_MESSAGES_MAX {
                    let m = dmap::message(f);
                    if !exact && spent + 6 * m.len() > dmap::URI_MESSAGES_MAX {
                        spent = diags
                            .iter()
                            .map(|d: &Entry| match d {
                                Entry::Finding(x) => escaped_len(&x.message),
                                Entry::Note(_) => 0,
                            })
                            .sum();
                        exact = true;
                    }
                    spent += if exact { escaped_len(&m) } else { 6 * m.len() };
                    m
                } else {
                    dmap::short_message(f)
                },
                code: f.id,
                data: dmap::data(f),
            });
            if size.admit(&d, &diags) {
                diags.push(d);
            } else {
                left_out = 1;
            }
        }
        if left_out > 0 {
            diags.push(Entry::Note(note_left_out(left_out)));
        }
        messages.push((uri.clone(), Some(publish_diagnostics(&conn.spelling.to_client(&uri), &diags)), contributing));
    }
    drop(by_uri);
    drop(rows);
    {
        let mut p = conn.published.lock().expect("published");
        for (uri, _, contributing) in &messages {
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
    for (_, body, _) in messages {
        if let Some(body) = body {
            if !conn.outbox.send_body(&body).await {
                return false;
            }
        }
    }
    true
}

/// The files, other than `files`, last published on a server URI that the client sees as
/// the same URI as one of `rows`' targets or of the URIs `files` were last published on.
fn same_client_uri_files(
    conn: &Conn,
    rows: &[Finding],
    files: &[String],
    root: &Path,
    worktrees: &Worktrees,
    mirror: bool,
) -> Vec<String> {
    let mut mine: HashSet<String> = HashSet::new();
    for f in rows {
        for path in targets(&f.file, f.loop_name.as_deref(), root, worktrees, mirror) {
            mine.insert(file_uri(&path));
        }
    }
    let p = conn.published.lock().expect("published");
    // And the URIs these files were last published on (a deleted finding's, to clear).
    for f in files {
        mine.extend(p.file_uris.get(f).into_iter().flatten().cloned());
    }
    let clients: HashSet<String> = mine.iter().map(|u| conn.spelling.to_client(u).into_owned()).collect();
    // Only a URI already in the client's spelling can be another spelling of one of these:
    // a prefix test first, the exact mapping after (review YN: every published URI was
    // mapped at every step).
    let Some(prefix) = conn.spelling.client_uri_prefix() else { return vec![] };
    let given: HashSet<&String> = files.iter().collect();
    let mut extra: Vec<String> = vec![];
    let mut seen: HashSet<&String> = HashSet::new();
    for (uri, published) in &p.uri_files {
        if !uri.starts_with(&prefix) || mine.contains(uri) || !clients.contains(conn.spelling.to_client(uri).as_ref()) {
            continue;
        }
        for f in published {
            if !given.contains(f) && seen.insert(f) {
                extra.push(f.clone());
            }
        }
    }
    extra
}

/// One diagnostic of a file's publication: a finding's, or the note that says how many
/// were left out ([`PublishSize`]).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Entry<'a> {
    Finding(Diagnostic<dmap::Data<'a>>),
    Note(Note),
}

/// A diagnostic that is no finding's: no `code`, no `data` (code actions pass it over).
#[derive(serde::Serialize)]
struct Note {
    range: Range,
    severity: u8,
    source: &'static str,
    message: String,
}

/// The most bytes one file's `publishDiagnostics` may take, well under the 64 MiB any
/// client of this protocol may refuse: the findings past it are left out, and a note says
/// how many. Past [`dmap::URI_MESSAGES_MAX`] each finding has a short message, but its
/// `data` still names its file (up to 4096 bytes, six on the wire for a control character).
const URI_PUBLISH_MAX: usize = 56 << 20;

/// More than a finding's diagnostic takes on the wire besides its message, its file (in
/// `data`) and its loop's name: the range, the numbers, the keys.
const DIAGNOSTIC_REST_MAX: usize = 512;

/// How many bytes of a file's publication are spent: an upper bound (six bytes per byte of
/// text) while it stays clear of [`URI_PUBLISH_MAX`], exactly (serialized into a counter)
/// from then on, so an ordinary file never pays for measuring.
#[derive(Default)]
struct PublishSize {
    bound: usize,
    exact: Option<usize>,
}

impl PublishSize {
    /// Whether `d` still fits after `before` (the entries admitted so far); counts it if so.
    fn admit(&mut self, d: &Entry, before: &[Entry]) -> bool {
        if self.exact.is_none() {
            let b = match d {
                Entry::Finding(x) => {
                    DIAGNOSTIC_REST_MAX
                        + 6 * (x.message.len() + x.data.file.len() + x.data.loop_name.map_or(0, str::len))
                }
                Entry::Note(n) => DIAGNOSTIC_REST_MAX + 6 * n.message.len(),
            };
            if self.bound + b <= URI_PUBLISH_MAX - NOTE_RESERVE {
                self.bound += b;
                return true;
            }
            self.exact = Some(before.iter().map(|e| json_len(e) + 1).sum());
        }
        let total = self.exact.get_or_insert(0);
        let n = json_len(d) + 1;
        if *total + n > URI_PUBLISH_MAX - NOTE_RESERVE {
            return false;
        }
        *total += n;
        true
    }
}

/// Room kept for the note and the notification around the diagnostics.
const NOTE_RESERVE: usize = 64 * 1024;

/// The note published in place of `n` findings left out of their file's publication.
fn note_left_out(n: usize) -> Note {
    Note {
        range: Range::on_line(0, 0, 0),
        severity: 3,
        source: "forge",
        message: format!(
            "{n} more {} on this file {} not shown: publishing them too would pass the 64 MiB message limit. forge.review-read with this file reads them all.",
            if n == 1 { "finding" } else { "findings" },
            if n == 1 { "is" } else { "are" }
        ),
    }
}

/// The bytes `v` takes as JSON, counted without keeping them.
fn json_len(v: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// The paths a finding (its `file` as written and its loop) is published on.
pub fn targets(file: &str, loop_name: Option<&str>, root: &Path, worktrees: &Worktrees, mirror: bool) -> Vec<PathBuf> {
    let p = Path::new(file);
    if p.is_absolute() {
        return vec![normalize(p)];
    }
    match loop_name {
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

pub use crate::uri::{file_uri, normalize};

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

    #[test]
    fn resolution_and_mirroring() {
        let root = Path::new("/p");
        let wts = Worktrees::from([("l".to_string(), PathBuf::from("/d/worktrees/l"))]);
        assert_eq!(targets("src/a.rs", None, root, &wts, true), [PathBuf::from("/p/src/a.rs")]);
        assert_eq!(
            targets("src/a.rs", Some("l"), root, &wts, true),
            [PathBuf::from("/d/worktrees/l/src/a.rs"), PathBuf::from("/p/src/a.rs")]
        );
        assert_eq!(targets("src/a.rs", Some("l"), root, &wts, false), [PathBuf::from("/d/worktrees/l/src/a.rs")]);
        assert_eq!(targets("../../etc/passwd", None, root, &wts, true), [PathBuf::from("/etc/passwd")]);
        assert_eq!(file_uri(Path::new("/p/a b/ü.rs")), "file:///p/a%20b/%C3%BC.rs");
    }

    #[test]
    fn file_strings_sharing_a_uri_are_published_together() {
        let e = |f: &str, u: &str| (f.to_string(), u.to_string());
        let g = groups(
            &["gone.rs".to_string()],
            &[
                e("src/a.rs", "file:///p/src/a.rs"),
                e("./src/a.rs", "file:///p/src/a.rs"),
                e("src/b.rs", "file:///wt/src/b.rs"),
                e("src/b.rs", "file:///p/src/b.rs"),
                e("/p/src/b.rs", "file:///p/src/b.rs"),
                e("src/c.rs", "file:///p/src/c.rs"),
            ],
        );
        assert_eq!(
            g,
            vec![
                vec!["./src/a.rs".to_string(), "src/a.rs".to_string()],
                vec!["/p/src/b.rs".to_string(), "src/b.rs".to_string()],
                vec!["gone.rs".to_string()],
                vec!["src/c.rs".to_string()],
            ]
        );
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

    /// A file whose diagnostics' `data` alone would pass the message limit (4096 control
    /// characters in its name, 24 KiB each on the wire): the publication stops short of
    /// [`URI_PUBLISH_MAX`], not far short, and a note counts what was left out. An
    /// ordinary file is never measured.
    #[test]
    fn a_files_publication_stays_under_its_limit() {
        let diag = |file: &'static str, id: i64| {
            Entry::Finding(Diagnostic {
                range: Range::on_line(0, 0, 0),
                severity: 1,
                source: "forge",
                message: "m".into(),
                code: id,
                data: dmap::Data {
                    finding_id: id,
                    loop_name: None,
                    section_index: None,
                    cross_section: true,
                    file,
                    line: 1,
                },
            })
        };
        let mut size = PublishSize::default();
        let mut diags = Vec::new();
        for id in 0..1000 {
            let d = diag("src/a.rs", id);
            assert!(size.admit(&d, &diags));
            diags.push(d);
        }
        assert!(size.exact.is_none(), "an ordinary file was measured");

        let long: &'static str = Box::leak("\u{1}".repeat(4096).into_boxed_str());
        let (mut size, mut diags, mut left_out) = (PublishSize::default(), Vec::new(), 0);
        for id in 0..3000 {
            let d = diag(long, id);
            if size.admit(&d, &diags) {
                diags.push(d);
            } else {
                left_out += 1;
            }
        }
        assert!(left_out > 0 && diags.len() > 2000, "{} admitted, {left_out} left out", diags.len());
        diags.push(Entry::Note(note_left_out(left_out)));
        let body = publish_diagnostics("file:///p/a.rs", &diags);
        assert!(body.len() < URI_PUBLISH_MAX && body.len() > URI_PUBLISH_MAX - (1 << 20), "{} bytes", body.len());
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let note = v["params"]["diagnostics"].as_array().unwrap().last().unwrap().clone();
        assert!(note["message"].as_str().unwrap().starts_with(&format!("{left_out} more findings")), "{note}");
        assert!(note.get("data").is_none() && note.get("code").is_none(), "{note}");
    }
}
