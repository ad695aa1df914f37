//! The plans this process last wrote or read, kept so that reading a plan again does not
//! copy its text out of the database (for a 2,000-line plan, some 45 overflow pages,
//! re-read from the log after every write, and a UTF-8 check of 180 KB).
//!
//! Invariants:
//! - **Every change to a plan's text appends a `plan` row to the change feed in the same
//!   transaction** ([`super::put_session`], [`super::put_loop`]: the only
//!   writers of `plans.content`). Deleting a plan need not: a deleted plan has no row, and
//!   a deleted and re-added one was added by one of those two.
//! - An entry is a plan's row as committed when the feed's highest id was `stamp`. It is
//!   served only after one statement, in the reader's snapshot, shows that: the plan's row
//!   has the entry's id; the feed still holds every row after `stamp` (it is pruned from
//!   its start only, so the lowest kept id is at most `stamp + 1`); the snapshot is not
//!   older than the entry (its highest id is at least `stamp`); and none of the next
//!   [`SCAN`] rows after `stamp` is a change of a plan with the entry's URI, and there are
//!   fewer than [`SCAN`] of them (more means "unknown": the row is read again and the entry
//!   renewed). Any process's writes count: they all append to the same feed.
//! - An entry comes from a read on a read-only connection inside a read transaction (the
//!   row and the stamp from one snapshot), or from a write, kept only once its group's
//!   `COMMIT` succeeded: a write records what it wrote as *pending* on its thread
//!   ([`record_write`]); `run_group` (crate docs) drops a rolled-back job's pending entries
//!   ([`pending_mark`], [`truncate_pending`]) and makes the group's live after its commit
//!   ([`commit_pending`]) or drops them when it fails. Writes outside a group (plain
//!   `Store::call` jobs, [`crate::transact`]) record nothing.
//! - Entries are keyed by the database's file name as SQLite reports it, so two stores of
//!   one process never share entries. Bounded per database: at most [`KEEP`] plans and
//!   [`KEEP_BYTES`] of text, the oldest kept going first; a plan of over half that is not
//!   kept.
//!
//! A database edited behind the feed's back (by hand, with the `sqlite3` shell) can be
//! served stale here, as it goes unannounced to editors: not supported.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, MAIN_DB};

use super::PlanRow;

/// How many feed rows after an entry's stamp a check reads before it gives up.
pub const SCAN: usize = 64;
/// Plans kept.
pub const KEEP: usize = 8;
/// Text kept, in bytes, all of a database's plans together.
pub const KEEP_BYTES: usize = 8 << 20;

/// Which plan: a session's or a loop's, in a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    Session(String),
    Loop(String),
}

impl Which {
    /// The `plans` column that names it.
    pub fn column(&self) -> &'static str {
        match self {
            Which::Session(_) => "session_id",
            Which::Loop(_) => "loop_name",
        }
    }

    /// The session id or the loop name.
    pub fn name(&self) -> &str {
        match self {
            Which::Session(s) | Which::Loop(s) => s,
        }
    }

    /// Its document: the key of its change-feed rows.
    pub fn uri(&self) -> String {
        use forge_protocol::uri::ForgeUri;
        match self {
            Which::Session(s) => ForgeUri::SessionPlan(s.clone()).to_uri(),
            Which::Loop(l) => ForgeUri::LoopPlan(l.clone()).to_uri(),
        }
    }
}

#[derive(Clone)]
struct Entry {
    db: Arc<str>,
    project: String,
    which: Which,
    /// The feed's highest id when the row was as kept.
    stamp: i64,
    row: Arc<PlanRow>,
}

static KEPT: Mutex<VecDeque<Entry>> = Mutex::new(VecDeque::new());

thread_local! {
    /// Writes of the group running on this thread, kept once it commits (`None`: no
    /// group is running here, writes record nothing).
    static PENDING: RefCell<Option<Vec<Entry>>> = const { RefCell::new(None) };
}

fn kept() -> std::sync::MutexGuard<'static, VecDeque<Entry>> {
    KEPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn db_name(conn: &Connection) -> Option<&str> {
    conn.path().filter(|p| !p.is_empty())
}

/// The kept row of `which`, if it is still the committed one in `conn`'s view (module
/// docs). `None`: not kept, not valid in this view, or the check failed (the caller reads
/// the row: a failing check never fails a read that would have worked without it).
pub fn lookup(conn: &Connection, project: &str, which: &Which) -> Option<Arc<PlanRow>> {
    let db = db_name(conn)?;
    let found = {
        let k = kept();
        k.iter().find(|e| &*e.db == db && e.project == project && &e.which == which).cloned()
    }?;
    match check(conn, project, which, &found) {
        Ok(true) => Some(found.row),
        Ok(false) => None,
        Err(e) => {
            tracing::debug!("plan cache check failed, reading the row: {e}");
            None
        }
    }
}

/// Whether `e` is the committed row in `conn`'s view; drops it when it is stale for every
/// later reader too.
fn check(conn: &Connection, project: &str, which: &Which, e: &Entry) -> rusqlite::Result<bool> {
    let column = which.column();
    let sql = format!(
        "SELECT (SELECT id FROM plans WHERE project_id = ?1 AND {column} = ?2),
                (SELECT min(id) FROM changes), (SELECT max(id) FROM changes), count(*),
                coalesce(sum(kind = 'plan' AND key = ?4), 0)
         FROM (SELECT kind, key FROM changes WHERE id > ?3 ORDER BY id LIMIT {SCAN})"
    );
    let (id, lowest, highest, after, changed): (Option<i64>, Option<i64>, Option<i64>, i64, i64) =
        conn.prepare_cached(&sql)?.query_row(params![project, which.name(), e.stamp, which.uri()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
    // `highest`: a snapshot older than the entry (a read transaction begun before the
    // write it came from committed) must not see it.
    let newer_view = highest.is_some_and(|h| h >= e.stamp);
    let valid = id == Some(e.row.id)
        && lowest.is_some_and(|l| l <= e.stamp + 1)
        && newer_view
        && (after as usize) < SCAN
        && changed == 0;
    // Dropped only when stale for later readers too: not for a view older than the entry,
    // nor for a write transaction's view (its changes may still roll back).
    let committed_view = conn.is_autocommit() || conn.is_readonly(MAIN_DB).unwrap_or(false);
    if !valid && newer_view && committed_view {
        kept().retain(|k| !(Arc::ptr_eq(&k.row, &e.row)));
    }
    Ok(valid)
}

/// Keeps `row`, just read on `conn`, if `conn` is a read-only connection inside a read
/// transaction (the stamp is then read in the same snapshot as the row). A failure keeps
/// nothing and does not fail the read.
pub fn record_read(conn: &Connection, which: Which, row: &Arc<PlanRow>) {
    if conn.is_autocommit() || !conn.is_readonly(MAIN_DB).unwrap_or(false) || !fits(row) {
        return;
    }
    let Some(db) = db_name(conn) else { return };
    let stamp =
        conn.prepare_cached("SELECT coalesce(max(id), 0) FROM changes").and_then(|mut s| s.query_row([], |r| r.get(0)));
    match stamp {
        Ok(stamp) => keep(Entry { db: db.into(), project: row.project_id.clone(), which, stamp, row: row.clone() }),
        Err(e) => tracing::debug!("plan cache: cannot read the feed's head, the row is not kept: {e}"),
    }
}

/// Whether a group is running on this thread, so that a write's row would be recorded
/// (the caller builds the row only then).
pub fn recording() -> bool {
    PENDING.with(|p| p.borrow().is_some())
}

/// Records `row` as written by the running group, its change row being the connection's
/// last insert (call right after [`crate::changes::record`]). Kept if the group commits.
pub fn record_write(conn: &Connection, which: Which, row: PlanRow) {
    let Some(db) = db_name(conn) else { return };
    if !fits(&row) {
        return;
    }
    let stamp = conn.last_insert_rowid();
    PENDING.with(|p| {
        if let Some(p) = p.borrow_mut().as_mut() {
            // Kept in order at the commit: a later write of the same plan replaces an
            // earlier one then (not now: the later one's savepoint may still roll back).
            p.push(Entry { db: db.into(), project: row.project_id.clone(), which, stamp, row: Arc::new(row) });
        }
    });
}

fn fits(row: &PlanRow) -> bool {
    row.content.len() <= KEEP_BYTES / 2
}

fn keep(e: Entry) {
    let mut k = kept();
    let same = |o: &Entry| o.db == e.db && o.project == e.project && o.which == e.which;
    // An entry of a later state is not replaced by one of an earlier (a read whose
    // snapshot began before a write committed may finish after it).
    if k.iter().any(|o| same(o) && o.stamp > e.stamp) {
        return;
    }
    k.retain(|o| !same(o));
    let db = e.db.clone();
    k.push_back(e);
    // The oldest of this database's entries go first; other databases' are not touched.
    loop {
        let (n, bytes) = k.iter().filter(|o| o.db == db).fold((0, 0), |(n, b), o| (n + 1, b + o.row.content.len()));
        if n <= KEEP && bytes <= KEEP_BYTES {
            break;
        }
        match k.iter().position(|o| o.db == db) {
            Some(i) => {
                k.remove(i);
            }
            None => break,
        }
    }
}

/// A group starts on this thread: its writes are recorded from now on.
pub(crate) fn begin_group() {
    PENDING.with(|p| *p.borrow_mut() = Some(Vec::new()));
}

/// How many writes the running group has recorded (before a job runs).
pub(crate) fn pending_mark() -> usize {
    PENDING.with(|p| p.borrow().as_ref().map_or(0, Vec::len))
}

/// A job's savepoint was rolled back: forgets what it recorded.
pub(crate) fn truncate_pending(mark: usize) {
    PENDING.with(|p| {
        if let Some(p) = p.borrow_mut().as_mut() {
            p.truncate(mark);
        }
    });
}

/// The group ended: keeps its writes if it committed, forgets them otherwise.
pub(crate) fn end_group(committed: bool) {
    let pending = PENDING.with(|p| p.borrow_mut().take()).unwrap_or_default();
    if committed {
        for e in pending {
            keep(e);
        }
    }
}

/// Whether `which` is kept for the database `conn` is open on (valid or not).
#[cfg(test)]
fn holds(conn: &Connection, project: &str, which: &Which) -> bool {
    let db = db_name(conn).unwrap_or_default();
    kept().iter().any(|e| &*e.db == db && e.project == project && &e.which == which)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::{self, Kind};
    use crate::{open_connection, open_reader, plans, transact, Store};

    const P: &str = "project";
    const S: &str = "s1";

    fn ses() -> Which {
        Which::Session(S.into())
    }

    async fn write(store: &Store, text: &str) {
        let text = text.to_string();
        store
            .write_grouped(
                move |c| {
                    let old = plans::get_session(c, P, S)?;
                    plans::put_session(c, P, S, old.as_ref(), &text, 1).map(|_| ())
                },
                |_| rusqlite::Error::InvalidQuery,
            )
            .await
            .unwrap();
    }

    async fn read(store: &Store) -> Option<String> {
        store.read(|c| plans::get_session(c, P, S).unwrap().map(|r| r.content)).await.unwrap()
    }

    async fn held(store: &Store) -> bool {
        store.read(|c| holds(c, P, &ses())).await.unwrap()
    }

    /// Another process's connection to the same file (its writes record nothing here).
    fn other(store: &Store) -> Connection {
        open_connection(store.path()).unwrap()
    }

    /// Changes the text behind the feed's back: a read that returns it did not use the
    /// kept entry.
    fn sneak(c: &Connection, text: &str) {
        c.execute("UPDATE plans SET content = ?1", [text]).unwrap();
    }

    fn finding_change(c: &Connection) {
        changes::record(c, P, Kind::Finding, "\u{1f}a.rs", 1).unwrap();
    }

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("forge.db")).unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn a_committed_write_is_served_until_its_plan_changes() {
        let (_d, store) = open();
        write(&store, "one").await;
        assert!(held(&store).await, "a committed write is kept");
        let o = other(&store);
        // Other writes, of findings, leave it valid: served from the cache.
        finding_change(&o);
        sneak(&o, "behind the feed");
        assert_eq!(read(&store).await.as_deref(), Some("one"), "served from the cache");
        // Another process writes the plan: its change row makes the entry stale.
        transact(&mut other(&store), |t| {
            let old = plans::get_session(t, P, S)?;
            plans::put_session(t, P, S, old.as_ref(), "two", 2).map(|_| ())
        })
        .unwrap();
        assert_eq!(read(&store).await.as_deref(), Some("two"));
        // The read kept what it read: served again without the row.
        sneak(&o, "behind again");
        assert_eq!(read(&store).await.as_deref(), Some("two"));
    }

    #[tokio::test]
    async fn a_rolled_back_write_is_never_served() {
        let (_d, store) = open();
        write(&store, "one").await;
        let r: Result<(), rusqlite::Error> = store
            .write_grouped(
                |c| {
                    let old = plans::get_session(c, P, S)?;
                    plans::put_session(c, P, S, old.as_ref(), "lost", 2)?;
                    Err(rusqlite::Error::InvalidQuery)
                },
                |_| rusqlite::Error::InvalidQuery,
            )
            .await;
        assert!(r.is_err());
        // A committed change takes the id the rolled-back one had.
        finding_change(&other(&store));
        assert_eq!(read(&store).await.as_deref(), Some("one"));
    }

    #[tokio::test]
    async fn a_failing_check_reads_the_row_and_keeps_the_entry() {
        let (_d, store) = open();
        write(&store, "one").await;
        let o = other(&store);
        sneak(&o, "behind the feed");
        // On this connection the check's `changes` is a view that fails when read (a temp
        // object shadows the table; `abs` of the smallest integer is an overflow error),
        // while the plan's row reads as usual.
        o.execute_batch("CREATE TEMP VIEW changes(id, kind, key) AS SELECT abs(-9223372036854775807 - 1), 'plan', ''")
            .unwrap();
        let db = db_name(&o).unwrap();
        let e = kept().iter().find(|e| &*e.db == db && e.project == P && e.which == ses()).cloned().expect("kept");
        assert!(check(&o, P, &ses(), &e).is_err(), "the check fails on this connection");
        // The read does not fail with it, nor answer from the entry: it reads the row.
        let row = plans::get_session(&o, P, S).unwrap().map(|r| r.content.clone());
        assert_eq!(row.as_deref(), Some("behind the feed"));
        // A failed check drops nothing: a working connection is still served from the entry.
        assert_eq!(read(&store).await.as_deref(), Some("one"));
    }

    #[tokio::test]
    async fn a_plan_deleted_without_a_feed_row_is_not_served() {
        let (_d, store) = open();
        write(&store, "one").await;
        other(&store).execute("DELETE FROM plans", []).unwrap();
        assert_eq!(read(&store).await, None);
    }

    #[tokio::test]
    async fn an_entry_whose_later_feed_rows_were_pruned_is_read_again() {
        let (_d, store) = open();
        write(&store, "one").await;
        let o = other(&store);
        transact(&mut other(&store), |t| {
            let old = plans::get_session(t, P, S)?;
            plans::put_session(t, P, S, old.as_ref(), "two", 2).map(|_| ())
        })
        .unwrap();
        finding_change(&o);
        let last = changes::head(&o).unwrap();
        // As `changes::prune` deletes: a range from the start.
        o.execute("DELETE FROM changes WHERE id < ?1", [last]).unwrap();
        assert_eq!(read(&store).await.as_deref(), Some("two"));
    }

    #[tokio::test]
    async fn a_plan_change_past_the_scan_is_found() {
        let (_d, store) = open();
        write(&store, "one").await;
        let o = other(&store);
        for _ in 0..SCAN + 6 {
            finding_change(&o);
        }
        transact(&mut other(&store), |t| {
            let old = plans::get_session(t, P, S)?;
            plans::put_session(t, P, S, old.as_ref(), "two", 2).map(|_| ())
        })
        .unwrap();
        assert_eq!(read(&store).await.as_deref(), Some("two"));
    }

    #[tokio::test]
    async fn a_snapshot_older_than_an_entry_does_not_see_it() {
        let (_d, store) = open();
        write(&store, "one").await;
        let r = open_reader(store.path()).unwrap();
        r.execute_batch("BEGIN").unwrap();
        assert_eq!(plans::get_session(&r, P, S).unwrap().unwrap().content, "one");
        write(&store, "two").await;
        assert!(held(&store).await);
        assert_eq!(plans::get_session(&r, P, S).unwrap().unwrap().content, "one", "the old snapshot's text");
        r.execute_batch("COMMIT").unwrap();
        // Neither the old view's failed check nor its read (kept with an older stamp)
        // took the newer entry's place: served from the cache.
        sneak(&other(&store), "behind the feed");
        assert_eq!(plans::get_session(&r, P, S).unwrap().unwrap().content, "two");
        assert_eq!(read(&store).await.as_deref(), Some("two"));
    }

    /// The invariant the cache rests on, checked in the source: only `plans.rs` writes a
    /// plan's row (its two writers append the feed row). Deletes may be anywhere. The
    /// bench's fixture seeds a database before any server runs.
    #[test]
    fn only_the_plan_writers_write_plan_rows() {
        let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let allowed = ["store/src/plans.rs", "cli/src/bin/forge_bench/fixture.rs"];
        let mut found = vec![];
        let mut dirs = vec![server.to_path_buf()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                if p.is_dir() {
                    if name != "tests" && name != "target" {
                        dirs.push(p);
                    }
                    continue;
                }
                if !name.ends_with(".rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                // Unit tests at the end of a file write what they like.
                let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
                let flat = code.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_uppercase();
                let rel = p.strip_prefix(server).unwrap().to_string_lossy().into_owned();
                for stmt in ["INSERT INTO PLANS", "UPDATE PLANS", "REPLACE INTO PLANS", "INSERT OR REPLACE INTO PLANS"]
                {
                    if flat.contains(stmt) && !allowed.contains(&rel.as_str()) {
                        found.push(format!("{rel}: {stmt}"));
                    }
                }
            }
        }
        assert!(found.is_empty(), "plan rows written outside plans.rs (see plans::cache's invariant): {found:?}");
    }

    #[tokio::test]
    async fn reads_on_the_write_connection_keep_nothing_and_the_bound_holds() {
        let (_d, store) = open();
        // Read inside a write transaction: what it sees may not commit; not kept.
        store.call(|c| c.execute("INSERT INTO plans (project_id, session_id, content, created_at, updated_at) VALUES (?1, ?2, 'x', 1, 1)", [P, S])).await.unwrap();
        store
            .write_grouped(|c| plans::get_session(c, P, S).map(|_| ()), |_| rusqlite::Error::InvalidQuery)
            .await
            .unwrap();
        assert!(!held(&store).await);
        for i in 0..KEEP + 3 {
            let s = format!("other-{i}");
            store
                .write_grouped(
                    move |c| plans::put_session(c, P, &s, None, "text", 1).map(|_| ()),
                    |_| rusqlite::Error::InvalidQuery,
                )
                .await
                .unwrap();
        }
        let db = store.read(|c| db_name(c).unwrap().to_string()).await.unwrap();
        let n = kept().iter().filter(|e| *e.db == *db).count();
        assert_eq!(n, KEEP, "at most KEEP plans of one database");
    }
}
