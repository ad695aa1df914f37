//! What a connection announces when the change feed moves: loop status and progress,
//! findings diagnostics, `forge:` document refreshes, plan warnings, and the read-only
//! `.forge/view/` copies. Each connection subscribes to its workspace's feed
//! ([`subscribe`]); nothing below calls into this module.

use std::sync::Arc;

use forge_core::Links;
use forge_protocol::uri::ForgeUri;
use forge_store::changes::{Change, Kind};
use serde_json::Value;

use crate::conn::Conn;
use crate::state::Work;
use crate::{documents, plan_features};

/// Turns the workspace's change-feed batches into this connection's announcements, in
/// feed order, until the connection is gone.
///
/// A connection that falls behind the feed (its client did not read for long enough, and
/// the feed dropped batches it had not taken) reads the changes it missed back from the
/// change table, from the last one it took ([`replay`]), and then skips what the feed still
/// delivers of them. Only when those rows are gone (pruned after an hour) or it had taken
/// none yet does it announce everything again instead ([`resync`]), as it does when the
/// process's watcher found rows pruned before it read them (`FeedBatch::missed`).
pub fn subscribe(conn: &Arc<Conn>) {
    let mut feed = conn.ws.subscribe();
    let mut alive = conn.alive();
    let weak = Arc::downgrade(conn);
    tokio::spawn(async move {
        // The id of the last change taken (ids are the feed table's, in commit order).
        let mut taken: Option<i64> = None;
        loop {
            let batch = tokio::select! {
                b = feed.recv() => b,
                _ = alive.changed() => return,
            };
            match batch {
                Ok(batch) if batch.missed => {
                    // The process read the feed too late: rows were pruned before it read
                    // them (it was stopped or suspended for longer than rows are kept).
                    tracing::warn!("changes were pruned before this process read them; announcing everything again");
                    let Some(conn) = weak.upgrade() else { return };
                    resync(&conn).await;
                    taken = batch.last().map(|c| c.id).or(taken);
                }
                Ok(batch) => {
                    let Some(conn) = weak.upgrade() else { return };
                    // After a replay, the feed still delivers some of what was replayed.
                    if let Some(t) = taken.filter(|t| batch.first().is_some_and(|c| c.id <= *t)) {
                        let fresh: Vec<Change> = batch.iter().filter(|c| c.id > t).cloned().collect();
                        if let Some(last) = fresh.last() {
                            taken = Some(last.id);
                            announce(&conn, &fresh).await;
                        }
                    } else if let Some(last) = batch.last() {
                        taken = Some(last.id);
                        announce(&conn, &batch).await;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!("connection fell {n} change batches behind; reading the changes it missed back");
                    let Some(conn) = weak.upgrade() else { return };
                    drop(conn);
                    let replayed = match taken {
                        Some(t) => replay(&weak, t).await,
                        None => Replayed::Unknown,
                    };
                    match replayed {
                        Replayed::UpTo(last) => taken = Some(last),
                        Replayed::Gone => return,
                        Replayed::Unknown => {
                            tracing::warn!(
                                "the changes this connection missed were pruned from the feed; announcing everything again"
                            );
                            let Some(conn) = weak.upgrade() else { return };
                            resync(&conn).await;
                        }
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// What [`replay`] did.
enum Replayed {
    /// Announced every change up to this id.
    UpTo(i64),
    /// The rows after the last change taken were pruned: what was missed is not known.
    Unknown,
    /// The connection ended meanwhile.
    Gone,
}

/// Announces the changes after `after` read back from the change table, a thousand at a
/// time, while the connection lives.
async fn replay(weak: &std::sync::Weak<Conn>, after: i64) -> Replayed {
    let mut last = after;
    loop {
        let Some(conn) = weak.upgrade() else { return Replayed::Gone };
        let from = last;
        let read = conn
            .ws
            .store
            .read(move |c| {
                let rows = forge_store::changes::since(c, from, 1000)?;
                // Nothing after `from` on the first read: taken up to the end, unless ids
                // past it were given and pruned since.
                let given = if rows.is_empty() { forge_store::changes::last_given(c)? } else { 0 };
                Ok::<_, rusqlite::Error>((rows, given))
            })
            .await;
        let Ok(Ok((rows, given))) = read else { return Replayed::Unknown };
        let Some(first) = rows.first() else {
            return if last == after && given > after { Replayed::Unknown } else { Replayed::UpTo(last) };
        };
        if last == after && first.id != after + 1 {
            return Replayed::Unknown;
        }
        last = rows.last().map_or(last, |c| c.id);
        announce(&conn, &rows).await;
    }
}

/// Announces everything again, for a connection that missed changes it cannot read back:
/// every finding republished, every loop's status sent (with its documents' view copies),
/// every known plan document refreshed with its warnings and copy, the index and the lenses
/// refreshed.
async fn resync(conn: &Arc<Conn>) {
    if let Ok(mut counts) = conn.index_counts.lock() {
        counts.all_changed();
    }
    conn.queue_diagnostics(Work::All);
    let p = conn.project_id();
    let names: Vec<String> = conn
        .ws
        .store
        .read(move |c| forge_store::loops::list(c, &p).map(|v| v.into_iter().map(|l| l.loop_name).collect::<Vec<_>>()))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    for name in &names {
        crate::loops::announce(conn, name, None, false).await;
        if conn.caps.materialize {
            for uri in loop_document_uris(conn, name).await {
                materialize(conn, &uri).await;
            }
        }
    }
    for k in conn.known_plans() {
        // `k` is a `forge:` URI or a view copy's file URI; both show the `forge:` document.
        if let Some(doc) = conn.document(&k) {
            let uri = doc.to_uri();
            conn.refresh(&uri);
            if conn.caps.materialize {
                materialize(conn, &uri).await;
            }
        }
        publish_plan_warnings(conn, &k).await;
    }
    conn.refresh(&ForgeUri::Index.to_uri());
    conn.refresh_code_lenses();
    if conn.caps.materialize {
        materialize_index_soon(conn);
    }
}

async fn announce(conn: &Arc<Conn>, batch: &[Change]) {
    let project = conn.project_id();
    let mut plan_uris: Vec<String> = vec![];
    let mut loop_changes: Vec<(String, Option<String>)> = vec![];
    // Loops whose output changed (replies, the count of changed files): their status
    // document only.
    let mut outputs: Vec<String> = vec![];
    for c in batch.iter().filter(|c| c.project_id == project) {
        match c.kind {
            Kind::Plan if !plan_uris.contains(&c.key) => plan_uris.push(c.key.clone()),
            Kind::Finding => {
                let (_, file) = forge_store::changes::split_finding_key(&c.key);
                if let Ok(mut counts) = conn.index_counts.lock() {
                    counts.file_changed(file);
                }
                conn.queue_diagnostics(Work::File(file.to_string()));
            }
            Kind::Loop if forge_store::changes::split_loop_key(&c.key).1 => {
                let (name, _) = forge_store::changes::split_loop_key(&c.key);
                if !outputs.iter().any(|n| n == name) {
                    outputs.push(name.to_string());
                }
            }
            Kind::Loop => {
                if let Ok(mut counts) = conn.index_counts.lock() {
                    counts.all_changed();
                }
                conn.queue_diagnostics(Work::Loop(c.key.clone()));
                loop_changes.push((c.key.clone(), c.payload.clone()));
            }
            _ => {}
        }
    }
    if batch.iter().any(|c| c.project_id == project && c.kind == Kind::Finding) {
        conn.refresh(&ForgeUri::Index.to_uri());
    }
    for name in outputs.iter().filter(|n| !loop_changes.iter().any(|(l, _)| l == *n)) {
        let uri = ForgeUri::LoopStatus(name.clone()).to_uri();
        conn.refresh(&uri);
        if conn.caps.materialize {
            materialize(conn, &uri).await;
        }
    }
    for (name, payload) in &loop_changes {
        crate::loops::announce(conn, name, payload.as_deref(), true).await;
    }
    if !loop_changes.is_empty() {
        conn.refresh(&ForgeUri::Index.to_uri());
    }
    // Lenses show plan actions and section status: stale once either changes.
    if !loop_changes.is_empty() || !plan_uris.is_empty() {
        conn.refresh_code_lenses();
    }
    if conn.caps.materialize {
        // Loop documents (status, sections, loop plan) and the index follow the loop and
        // the findings in the read-only copies too.
        let mut names: Vec<&String> = loop_changes.iter().map(|(n, _)| n).collect();
        names.dedup();
        for name in names {
            for uri in loop_document_uris(conn, name).await {
                materialize(conn, &uri).await;
            }
        }
        let findings_changed = batch.iter().any(|c| c.project_id == project && c.kind == Kind::Finding);
        if (!loop_changes.is_empty() || findings_changed) && plan_uris.is_empty() {
            materialize_index_soon(conn);
        }
    }
    if plan_uris.is_empty() {
        return;
    }
    for uri in &plan_uris {
        conn.refresh(uri);
    }
    // Republish warnings on every known document (forge:// or a materialized copy)
    // that shows one of the changed plans. Copies are rewritten first.
    if conn.caps.materialize {
        for uri in &plan_uris {
            materialize(conn, uri).await;
        }
        materialize_index_soon(conn);
    }
    let known = conn.known_plans();
    for k in known {
        let shows = conn.document(&k).is_some_and(|d| plan_uris.contains(&d.to_uri()));
        if shows {
            publish_plan_warnings(conn, &k).await;
        }
    }
    conn.refresh(&ForgeUri::Index.to_uri());
}

/// Publishes a plan document's structure warnings as diagnostics (on a `forge://` URI or
/// on a materialized copy under `.forge/view/`).
pub async fn publish_plan_warnings(conn: &Conn, uri: &str) {
    let Some(parsed) = conn.document(uri) else { return };
    if !parsed.is_plan() {
        return;
    }
    let text = match conn.open_text(uri) {
        Some(t) => Some(t),
        None => documents::render(conn, &parsed, Links::Forge).await.ok(),
    };
    publish_plan_warnings_of(conn, uri, text).await
}

/// [`publish_plan_warnings`] for the stored text of a plan document just rendered
/// (`None`: not found); an open buffer's text wins.
pub async fn publish_plan_warnings_of(conn: &Conn, uri: &str, stored: Option<String>) {
    let text = conn.open_text(uri).or(stored);
    let digest = text.as_deref().map_or(0, crate::conn::digest);
    // Unchanged text: its warnings were published already.
    if conn.ask_warnings(uri, digest) {
        return;
    }
    publish_warnings_for(conn, uri, text.as_deref(), digest).await
}

/// [`publish_plan_warnings_of`] right after a plan's stored text was read for a client:
/// the common case, text whose warnings were published already, costs a digest (no copy
/// of the text, no task).
pub fn plan_warnings_after_read(conn: &Arc<Conn>, uri: String, stored: &documents::Rendered) {
    let open = conn.open_text(&uri);
    let digest = crate::conn::digest(open.as_deref().unwrap_or(stored.as_str()));
    if conn.ask_warnings(&uri, digest) {
        return;
    }
    // The stored plan is shared with the store's plan cache, not copied.
    let (conn, text) = (conn.clone(), open.map_or_else(|| stored.clone(), documents::Rendered::Text));
    tokio::spawn(async move { publish_warnings_for(&conn, &uri, Some(text.as_str()), digest).await });
}

/// Publishes the warnings of `text` (digest `digest`; `None`: no plan) on `uri`
/// ([`Conn::publish_warnings`]: not if a newer text was asked for meanwhile).
/// The parse runs on a blocking thread, in the connection's one turn for work over a whole
/// plan (`requests::off_task`): on the runtime's threads, a large plan's warnings computed
/// on every keystroke took them from every other connection.
async fn publish_warnings_for(conn: &Conn, uri: &str, text: Option<&str>, digest: u64) {
    let diags: Vec<Value> = match text {
        Some(t) => {
            let (t, encoding) = (t.to_string(), conn.caps.encoding);
            // Typing in a large plan asks on every keystroke: only the text still wanted
            // when its turn comes is parsed.
            let wanted = || conn.warnings_wanted(uri, digest);
            match crate::requests::off_task_when(conn, wanted, move || {
                Ok(plan_features::warning_diagnostics(&t, encoding))
            })
            .await
            {
                Ok(Some(diags)) => diags,
                // Outdated: a newer text's warnings come.
                Ok(None) => return,
                // The parse failed: no warnings rather than the last text's, left standing
                // (this text counts as published).
                Err(e) => {
                    tracing::warn!("the warnings of {uri} could not be computed: {}", e.message);
                    vec![]
                }
            }
        }
        None => vec![],
    };
    conn.publish_warnings(uri, digest, &diags).await;
}

/// The documents of a loop: status, each section, its plan.
pub async fn loop_document_uris(conn: &Conn, name: &str) -> Vec<String> {
    let (p, n) = (conn.project_id(), name.to_string());
    let read: Result<Option<i64>, _> = conn
        .ws
        .store
        .call(move |c| {
            use rusqlite::OptionalExtension;
            c.query_row(
                "SELECT total_sections FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                rusqlite::params![p, n],
                |r| r.get(0),
            )
            .optional()
        })
        .await;
    // A loop whose row is gone has no sections; one whose row cannot be read keeps its
    // section copies (they are not known to be stale).
    let (total, known) = match read {
        Ok(t) => (t.unwrap_or(0), true),
        Err(_) => (0, false),
    };
    let mut v = vec![
        ForgeUri::LoopStatus(name.to_string()).to_uri(),
        ForgeUri::LoopHistory(name.to_string()).to_uri(),
        ForgeUri::LoopPlan(name.to_string()).to_uri(),
    ];
    v.extend((0..total.max(0)).map(|i| ForgeUri::LoopSection(name.to_string(), i as u32).to_uri()));
    // Copies of sections the loop no longer has (a plan-adjust removed them, the loop was
    // cleaned up): their documents are gone, so materializing them removes the copies
    // (before, they stayed and showed a stale "pending" section).
    let dir = conn.view_path(&ForgeUri::LoopSection(name.to_string(), 0));
    if let Some(dir) = dir.parent().map(std::path::Path::to_path_buf).filter(|_| known) {
        let listed = tokio::task::spawn_blocking(move || {
            std::fs::read_dir(&dir)
                .map(|d| d.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .await
        .unwrap_or_default();
        let mut gone: Vec<u32> = listed
            .iter()
            .filter_map(|f| f.strip_suffix(".md")?.parse::<u32>().ok())
            .filter(|k| i64::from(*k) >= total.max(0))
            .collect();
        gone.sort_unstable();
        v.extend(gone.into_iter().map(|k| ForgeUri::LoopSection(name.to_string(), k).to_uri()));
    }
    v
}

/// How long the index copy waits for more changes before it is rewritten: a burst of
/// writes (findings, plans) rewrites it once, not once per write.
pub const INDEX_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// Rewrites the index copy after [`INDEX_DELAY`], once for all the changes until then.
pub fn materialize_index_soon(conn: &Arc<Conn>) {
    if conn.index_pending.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(conn);
    tokio::spawn(async move {
        tokio::time::sleep(INDEX_DELAY).await;
        let Some(conn) = weak.upgrade() else { return };
        conn.index_pending.store(false, std::sync::atomic::Ordering::Release);
        materialize(&conn, &ForgeUri::Index.to_uri()).await;
    });
}

/// User edits of copies already handled by a save (`didSave`: adopted as a plan or kept
/// under `.forge/rejected/`), by copy path: the digests of the saved text and of what was
/// on disk then. Shared by the connections of this process, which share the copies: the
/// saving connection rewrites the copy after the save, and another connection that
/// materializes first must not take the saved text for a new edit (before, it said "not
/// applied" about a save that was applied, and kept a spurious copy of it).
static HANDLED_EDITS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Vec<u64>>>> =
    std::sync::LazyLock::new(Default::default);

/// How many handled edits are remembered per copy.
const HANDLED_PER_COPY: usize = 8;

/// Records that the texts `seen` of the copy at `path` were handled by a save.
pub fn note_handled_edit(path: &std::path::Path, seen: &[&[u8]]) {
    let mut m = HANDLED_EDITS.lock().unwrap_or_else(|p| p.into_inner());
    let v = m.entry(path.to_path_buf()).or_default();
    for b in seen {
        let d = crate::conn::digest_bytes(b);
        if !v.contains(&d) {
            v.push(d);
        }
    }
    let over = v.len().saturating_sub(HANDLED_PER_COPY);
    v.drain(..over);
}

fn was_handled(path: &std::path::Path, on_disk: &[u8]) -> bool {
    let m = HANDLED_EDITS.lock().unwrap_or_else(|p| p.into_inner());
    m.get(path).is_some_and(|v| v.contains(&crate::conn::digest_bytes(on_disk)))
}

/// Writes (or removes) the read-only copy of a virtual document. A `.forge`, `.forge/view`
/// or deeper component that is a symbolic link (a repository can commit one) is never
/// followed: the write is refused, logged, and the user told once per connection.
pub async fn materialize(conn: &Conn, uri: &str) {
    let Some(parsed) = ForgeUri::parse(uri) else { return };
    // One at a time per connection, each rendering what is stored when it starts: the
    // last one to write has the newest text (`Conn::materializing`).
    let _one_at_a_time = conn.materializing.lock().await;
    let path = conn.view_path(&parsed);
    // A copy is a file: its links point at the other copies.
    let mut text = documents::render_view(conn, &parsed).await.ok();
    // A copy the user changed on disk is never overwritten silently (PROTOCOL.md 10.2). A
    // copy that already shows the current text was written by another connection.
    let mut on_disk_copy = read_view(&conn.env().project.root, &path).await;
    if matches!(&on_disk_copy, Some((Err(bytes), _)) if was_handled(&path, bytes)) {
        // Kept already (by another connection of this server): only rewritten.
        on_disk_copy = None;
    }
    if let Some((Err(bytes), _)) = &on_disk_copy {
        note_handled_edit(&path, &[bytes.as_slice()]);
        // Not UTF-8 text (saved in another encoding): it cannot be compared or adopted, and
        // it is the user's. Its bytes are kept, they are told, and the copy is rewritten
        // (before, it was taken for no copy and overwritten silently).
        keep_and_tell(
            conn,
            &parsed,
            &path,
            bytes,
            "was changed on disk and is not UTF-8 text, so it could not be applied",
            "bytes are",
        )
        .await;
        on_disk_copy = None;
    }
    // A copy that still holds a save already handled is simply rewritten.
    let on_disk_copy = on_disk_copy.filter(|(t, _)| !matches!(t, Ok(t) if was_handled(&path, t.as_bytes())));
    if let Some((Ok(on_disk), read_only)) = on_disk_copy {
        // What this connection wrote there last; or, when another server process of the
        // data directory wrote what is there (two editors on the project, each with its
        // own server), that: it is no user's edit (a review found such copies kept under
        // .forge/rejected with a warning, several per minute).
        let on_disk_digest = crate::conn::digest(&on_disk);
        let recorded = match conn.view_digest(&path) {
            Some(d) if d == on_disk_digest => Some(d),
            // Only a copy still read-only, as servers write them: a user who made it writable
            // and wrote an earlier version back (a revert) edited it (a review).
            mine if !read_only => mine,
            mine => {
                let (data_dir, p2) = (conn.ws.data_dir.clone(), path.clone());
                let by_a_server =
                    tokio::task::spawn_blocking(move || written_by_a_server(&data_dir, &p2, on_disk_digest))
                        .await
                        .unwrap_or(false);
                if by_a_server {
                    Some(on_disk_digest)
                } else {
                    mine
                }
            }
        };
        // Unchanged and still as written (read-only): nothing to do; copies are rewritten
        // only when their text changes.
        if read_only && text.as_deref() == Some(on_disk.as_str()) && recorded == Some(crate::conn::digest(&on_disk)) {
            // This connection's record says so too, when another server process wrote it:
            // a buffer reloaded from it saves from this text (review YC: its save was
            // refused as stale, the record still at the text before).
            conn.wrote_view(&path, text.as_deref());
            return;
        }
        let user_changed =
            text.as_deref() != Some(on_disk.as_str()) && recorded.is_some_and(|d| d != crate::conn::digest(&on_disk));
        if user_changed && text.as_deref().map(crate::conn::digest) == recorded {
            // The document did not change: nothing to write. The user's text stays until
            // their editor saves it (didSave) or the document changes.
            return;
        }
        if user_changed && conn.claim_view_edit(&path, &on_disk, true) {
            // Not saved through the editor, and the document changed since: the stored
            // document wins; the user's text is kept, and they are told.
            adopt_view_edit(conn, &parsed, &path, on_disk, Edit::OnDisk).await;
            text = documents::render_view(conn, &parsed).await.ok();
        } else if recorded.is_none() && !read_only && text.as_deref() != Some(on_disk.as_str()) {
            // Not written by this connection (another one wrote it, or a server before a
            // restart), and writable: the server writes its copies read-only, so the user
            // changed it. It is rewritten from the stored document; their text is kept, and
            // they are told.
            conn.claim_view_edit(&path, &on_disk, false);
            let why = "was changed on disk without being saved through an editor connected to forge-lsp";
            keep_and_tell(conn, &parsed, &path, &on_disk, why, "text is").await;
        }
    }
    let root = conn.env().project.root.clone();
    let (p2, t2, data_dir) = (path.clone(), text.clone(), conn.ws.data_dir.clone());
    // Ends the record of the write in flight however this ends (dropped at the await too).
    struct Writing<'a>(&'a crate::conn::Conn, &'a std::path::Path);
    impl Drop for Writing<'_> {
        fn drop(&mut self) {
            self.0.writing_view(self.1, None);
        }
    }
    conn.writing_view(&path, text.as_deref());
    let writing = Writing(conn, &path);
    let r = tokio::task::spawn_blocking(move || {
        write_view(&root, &p2, t2.as_deref())?;
        if let Some(t) = &t2 {
            note_written(&data_dir, &p2, crate::conn::digest(t));
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    if matches!(r, Ok(Ok(()))) {
        conn.wrote_view(&path, text.as_deref());
    }
    drop(writing);
    let err = match r {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    tracing::warn!("not writing the read-only copy of {uri}: {err}");
    let digest = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        err.hash(&mut h);
        h.finish()
    };
    // Told once per connection and reason (the key cannot be a document URI).
    if !conn.warned(" materialize-refused", digest) {
        conn.client
            .show_message(
                tower_lsp_server::gen_lsp_types::MessageType::Warning,
                format!("forge-lsp: not writing the read-only copies under .forge/view ({}): {err}", path.display()),
            )
            .await;
    }
}

/// Keeps the user's content of the copy at `path` under `.forge/rejected/` and tells them
/// why (`why`, after the path) and where their content is (`what`: "text is", "bytes are"), before the copy
/// is rewritten from the stored document.
async fn keep_and_tell(
    conn: &Conn,
    doc: &ForgeUri,
    path: &std::path::Path,
    content: &(impl AsRef<[u8]> + ?Sized),
    why: &str,
    what: &str,
) {
    let kept = keep_rejected(conn, doc, content).await.unwrap_or_else(|e| format!("no file: keeping it failed ({e})"));
    conn.client
        .show_message(
            tower_lsp_server::gen_lsp_types::MessageType::Warning,
            format!(
                "forge-lsp: {} {why}; it was rewritten from the stored document. Your {what} in {kept}.",
                path.display()
            ),
        )
        .await;
}

/// How many texts of each copy [`note_written`] remembers.
const WRITTEN_KEPT: usize = 16;

/// The file, relative to the data directory, that records the digests of the last texts
/// any server process wrote into the copy at `path`: `view-digests/<digest of the path>`,
/// one hex digest a line.
fn written_record(path: &std::path::Path) -> std::path::PathBuf {
    std::path::Path::new(WRITTEN_DIR)
        .join(format!("{:016x}", crate::conn::digest_bytes(path.as_os_str().as_encoded_bytes())))
}

/// The data directory's folder of [`written_record`]s.
const WRITTEN_DIR: &str = "view-digests";

/// Records that a server wrote the text with digest `d` into the copy at `path`, for every
/// server process of the data directory ([`written_by_a_server`]). Two processes writing at
/// once may lose one's line: the copy is then taken for the user's, as before the record.
fn note_written(data_dir: &std::path::Path, path: &std::path::Path, d: u64) {
    let record = written_record(path);
    let line = format!("{d:016x}");
    let old = std::fs::read_to_string(data_dir.join(&record)).unwrap_or_default();
    let mut lines: Vec<&str> = old.lines().filter(|l| *l != line).collect();
    lines.push(&line);
    let keep = lines.len().saturating_sub(WRITTEN_KEPT);
    let text = lines[keep..].join("\n") + "\n";
    if let Err(e) = forge_core::paths::create_private_dirs(&data_dir.join(WRITTEN_DIR))
        .and_then(|()| forge_core::beneath::write_file(data_dir, &record, text.as_bytes(), 0o600))
    {
        tracing::debug!("cannot record the copy written to {}: {e}", path.display());
    }
}

/// Whether a server process of the data directory wrote the text with digest `d` into the
/// copy at `path` (one of its last [`WRITTEN_KEPT`] texts).
fn written_by_a_server(data_dir: &std::path::Path, path: &std::path::Path, d: u64) -> bool {
    let line = format!("{d:016x}");
    std::fs::read_to_string(data_dir.join(written_record(path))).is_ok_and(|t| t.lines().any(|l| l == line))
}

/// Writes a read-only view file (mode 0444), replacing any previous one; `None` removes
/// it. Never follows a symbolic link below the project root (`forge_core::beneath`).
fn write_view(root: &std::path::Path, path: &std::path::Path, text: Option<&str>) -> std::io::Result<()> {
    // Never recreate a project directory that is gone (e.g. a removed loop worktree).
    if !root.is_dir() {
        return Ok(());
    }
    let rel = path.strip_prefix(root).map_err(|_| {
        std::io::Error::other(format!("{} is not inside the project {}", path.display(), root.display()))
    })?;
    forge_engine::git::exclude_forge_dir(root);
    match text {
        None => forge_core::beneath::remove_file(root, rel),
        Some(text) => {
            // The copies hold what the private database holds (every session's plans):
            // their folder is the user's alone (made 0700, or narrowed to it when an
            // older version made it 0755). Found by a review: others could read them.
            forge_core::beneath::make_private_dir(root, std::path::Path::new(".forge/view"))?;
            forge_core::beneath::write_file(root, rel, text.as_bytes(), 0o444)
        }
    }
}

/// The text of a copy on disk (its bytes when they are not UTF-8) and whether it is still
/// read-only, if it is a regular file beneath the project `root`, reached without following
/// a link (review YD: a linked `.forge/view/plan` was read through, and an outside file
/// kept under `.forge/rejected` as the user's text).
async fn read_view(root: &std::path::Path, path: &std::path::Path) -> Option<(Result<String, Vec<u8>>, bool)> {
    let (root, path) = (root.to_path_buf(), path.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let (bytes, read_only) = read_copy(&root, &path)?;
        Some((String::from_utf8(bytes).map_err(|e| e.into_bytes()), read_only))
    })
    .await
    .ok()
    .flatten()
}

/// The bytes of the copy at `path`, a regular file beneath the project `root` reached
/// without following a link (`forge_core::beneath`), and whether it is still read-only.
pub fn read_copy(root: &std::path::Path, path: &std::path::Path) -> Option<(Vec<u8>, bool)> {
    use std::io::Read;
    let rel = path.strip_prefix(root).ok()?;
    let mut file = forge_core::beneath::open_file(root, rel).ok()?;
    let read_only = std::os::unix::fs::PermissionsExt::mode(&file.metadata().ok()?.permissions()) & 0o222 == 0;
    let mut bytes = vec![];
    file.read_to_end(&mut bytes).ok()?;
    Some((bytes, read_only))
}

/// How the user's text of a copy reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// Saved through the editor, from the copy's current version.
    Saved,
    /// Saved through the editor from an older version of the copy: the document changed
    /// after the buffer last held it.
    SavedStale,
    /// Changed on disk, not through an editor's save, while the document changed too.
    OnDisk,
}

/// The user changed the read-only copy of `doc`. [`Edit::Saved`]: a session plan becomes a
/// `plan-write` of that session where the caller may write it; otherwise the stored
/// document wins. Whatever is not applied is restored by the caller's next
/// materialization, and the user's text is kept under `.forge/rejected/` with a message
/// saying why and where: never lost, never silently.
pub async fn adopt_view_edit(conn: &Conn, doc: &ForgeUri, path: &std::path::Path, text: String, how: Edit) {
    use tower_lsp_server::gen_lsp_types::MessageType;
    let shown = path.display().to_string();
    let refused = match doc {
        _ if how == Edit::OnDisk => {
            "the copy was changed on disk while the document changed too, and the document was kept".to_string()
        }
        _ if how == Edit::SavedStale => "the document changed after your buffer last held it (another tool or session wrote it), and saving would undo that change; reload the file to see it".to_string(),
        ForgeUri::SessionPlan(session) => {
            let env = conn.env();
            let mut input = serde_json::json!({ "content": text });
            if *session != env.caller.session_id {
                input["session_id"] = Value::String(session.clone());
            }
            match forge_tools::call(&conn.ws.store, &conn.ws.engine, env, "forge.plan-write", input).await {
                Ok(_) => {
                    conn.client
                        .show_message(
                            MessageType::Info,
                            format!("forge-lsp: your change to {shown} was saved as the plan of session {session}."),
                        )
                        .await;
                    return;
                }
                Err(e) => format!("it could not be saved as the plan of session {session}: {}", e.message),
            }
        }
        _ => "it is a read-only view of a forge document (loop plans, sections, status and the index change only through the Forge tools)".to_string(),
    };
    let kept = match keep_rejected(conn, doc, &text).await {
        Ok(file) => file,
        Err(e) if how == Edit::OnDisk => format!("no file: keeping it failed ({e})"),
        Err(e) => format!("no file (keeping it failed: {e}); it is still in your editor's buffer"),
    };
    conn.client
        .show_message(
            MessageType::Warning,
            format!("forge-lsp: your change to {shown} was not applied: {refused}. The copy was restored; your text is in {kept}."),
        )
        .await;
}

/// Keeps a rejected edit under `<project>/.forge/rejected/` (directory 0700, file 0600),
/// else, when that cannot be written (a committed link there, a full disk), under the data
/// directory's `rejected/` (the same modes); returns where, or why neither worked.
/// Before, a kept edit whose file name was too long (a long session id) was lost: its
/// copy was rewritten all the same (review YC).
async fn keep_rejected(conn: &Conn, doc: &ForgeUri, text: &(impl AsRef<[u8]> + ?Sized)) -> Result<String, String> {
    let root = conn.env().project.root.clone();
    let data_dir = conn.ws.data_dir.clone();
    let name = rejected_name(forge_core::now_ms(), &doc.view_path());
    let body = text.as_ref().to_vec();
    let keep = move || {
        let rel = std::path::Path::new(".forge/rejected").join(&name);
        // The directory is private too: the file names say which documents were edited.
        let in_project = forge_core::beneath::make_private_dir(&root, std::path::Path::new(".forge/rejected"))
            .and_then(|()| forge_core::beneath::write_file(&root, &rel, &body, 0o600));
        let first = match in_project {
            Ok(()) => return Ok(root.join(rel).display().to_string()),
            Err(e) => e,
        };
        let rel = std::path::Path::new("rejected").join(&name);
        match forge_core::paths::create_private_dirs(&data_dir.join("rejected"))
            .and_then(|()| forge_core::beneath::write_file(&data_dir, &rel, &body, 0o600))
        {
            Ok(()) => Ok(data_dir.join(rel).display().to_string()),
            Err(e) => Err(format!("{first} under .forge/rejected, {e} under {}", data_dir.join("rejected").display())),
        }
    };
    tokio::task::spawn_blocking(keep).await.unwrap_or_else(|e| Err(e.to_string()))
}

/// The file name a rejected edit of the document at `view_path` is kept under: the time,
/// then the path with `/` as `_`, cut with a digest of the whole to stay within a file
/// name's 255 bytes.
fn rejected_name(now: i64, view_path: &str) -> String {
    const MAX: usize = 200;
    let flat = view_path.replace('/', "_");
    let name = format!("{now}-{flat}");
    if name.len() <= MAX {
        return name;
    }
    let digest = crate::conn::digest_bytes(flat.as_bytes());
    let mut cut = MAX - 24;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{digest:016x}.md", &name[..cut])
}

#[cfg(test)]
mod tests {
    use super::rejected_name;

    #[test]
    fn a_rejected_edit_is_kept_under_a_name_that_fits() {
        assert_eq!(rejected_name(7, "plan/session/abc.md"), "7-plan_session_abc.md");
        for id in ["s".repeat(250), "ü".repeat(125), "日本".repeat(40) + "x"] {
            let name = rejected_name(1_796_670_871_520, &format!("plan/session/{id}.md"));
            assert!(name.len() <= 200 && name.ends_with(".md"), "{name}");
            assert!(name.starts_with("1796670871520-plan_session_"), "{name}");
        }
        // Two long names that differ only at their end are kept apart.
        let (a, b) = (format!("plan/session/{}a.md", "s".repeat(240)), format!("plan/session/{}b.md", "s".repeat(240)));
        assert_ne!(rejected_name(1, &a), rejected_name(1, &b));
    }
}
