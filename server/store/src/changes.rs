//! The change feed (`changes` table): every write appends a row in its own transaction;
//! every server process tails the feed to announce changes made by any process.

use rusqlite::{params, Connection, OptionalExtension};

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// key = the plan document's `forge://` URI.
    Plan,
    /// key = `<loop bucket>\u{1f}<file>` (loop bucket '' outside loops).
    Finding,
    /// key = the loop name.
    Loop,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Plan => "plan",
            Kind::Finding => "finding",
            Kind::Loop => "loop",
        }
    }
    fn parse(s: &str) -> Option<Self> {
        match s {
            "plan" => Some(Kind::Plan),
            "finding" => Some(Kind::Finding),
            "loop" => Some(Kind::Loop),
            _ => None,
        }
    }
}

/// One row of the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub id: i64,
    pub project_id: String,
    pub kind: Kind,
    pub key: String,
    pub at: i64,
    /// A snapshot taken when the change was written (loops: the status notification).
    pub payload: Option<String>,
}

/// The key of a finding change.
pub fn finding_key(loop_bucket: &str, file: &str) -> String {
    format!("{loop_bucket}\u{1f}{file}")
}

/// Splits a finding key into (loop bucket, file).
pub fn split_finding_key(key: &str) -> (&str, &str) {
    key.split_once('\u{1f}').unwrap_or(("", key))
}

/// The key of a change of a loop's output (its last replies, its count of changed files),
/// which only its status document shows: `<loop name>\u{1f}output`, a `loop` change
/// without a snapshot. No loop is named so (a loop name has no control character), so a
/// reader that looks loops up by the key finds none and announces nothing.
pub fn loop_output_key(loop_name: &str) -> String {
    format!("{loop_name}\u{1f}output")
}

/// The loop a `loop` change's key names, and whether the change is of its output only
/// ([`loop_output_key`]).
pub fn split_loop_key(key: &str) -> (&str, bool) {
    match key.strip_suffix("\u{1f}output") {
        Some(name) => (name, true),
        None => (key, false),
    }
}

pub fn record(conn: &Connection, project_id: &str, kind: Kind, key: &str, at: i64) -> rusqlite::Result<()> {
    record_with(conn, project_id, kind, key, at, None)
}

/// Records a change with a snapshot.
pub fn record_with(
    conn: &Connection,
    project_id: &str,
    kind: Kind,
    key: &str,
    at: i64,
    payload: Option<&str>,
) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO changes (project_id, kind, key, at, payload) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![project_id, kind.as_str(), key, at, payload])?;
    Ok(())
}

/// The newest change id (the feed position a new reader starts from).
pub fn head(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT coalesce(max(id), 0) FROM changes", [], |r| r.get(0))
}

/// The highest change id ever given, pruned rows included (the table's `AUTOINCREMENT`
/// counter, else its highest row): a reader that took changes up to an id below it and
/// finds no row after that id knows the rows it missed were pruned.
pub fn last_given(conn: &Connection) -> rusqlite::Result<i64> {
    let seq: Option<i64> =
        conn.query_row("SELECT seq FROM sqlite_sequence WHERE name = 'changes'", [], |r| r.get(0)).optional()?;
    Ok(seq.unwrap_or(0).max(head(conn)?))
}

/// Changes after `after`, oldest first, at most `limit`.
pub fn since(conn: &Connection, after: i64, limit: usize) -> rusqlite::Result<Vec<Change>> {
    // The limit is part of the SQL text, not a parameter: see `crate::limit`.
    let mut st = conn.prepare_cached(&format!(
        "SELECT id, project_id, kind, key, at, payload FROM changes WHERE id > ?1 ORDER BY id {}",
        crate::limit(limit)
    ))?;
    let rows = st.query_map(params![after], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, Option<String>>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, project_id, kind, key, at, payload) = row?;
        if let Some(kind) = Kind::parse(&kind) {
            out.push(Change { id, project_id, kind, key, at, payload });
        }
    }
    Ok(out)
}

/// [`since`] for a reader that tails the feed, and, when rows after `after` were pruned
/// before it read them, the highest id given (`Some`: what those rows announced is not
/// known, and the reader must treat everything as changed, then go on after that id).
/// Ids are given in commit order without gaps (the table's `AUTOINCREMENT` counter is
/// rolled back with a rolled-back insert), and the feed is pruned from its start only, so
/// a first row past `after + 1`, or none while a higher id was given, means rows were
/// pruned. One read transaction: a write committing between the reads can neither pass
/// for a gap nor be skipped by the id returned.
pub fn since_checked(conn: &Connection, after: i64, limit: usize) -> rusqlite::Result<(Vec<Change>, Option<i64>)> {
    let tx = conn.unchecked_transaction()?;
    let rows = since(&tx, after, limit)?;
    let gap = match rows.first() {
        Some(first) => first.id > after + 1,
        None => last_given(&tx)? > after,
    };
    let given = if gap { Some(last_given(&tx)?) } else { None };
    tx.finish()?;
    Ok((rows, given))
}

/// Deletes feed rows older than `before` (epoch ms): the rows before the first one (in id
/// order) that is not, found by walking the table from its start, and deleted as a range of
/// ids. `at` has no index (one more B-tree per write for a prune every few minutes), so
/// `WHERE at < ?` would read the whole table with the write lock held; this reads the old
/// rows only. (A row older than `before` after a newer one, from a clock set back, waits
/// for a later prune.)
pub fn prune(conn: &Connection, before: i64) -> rusqlite::Result<usize> {
    let first_kept: Option<i64> = conn
        .query_row("SELECT id FROM changes WHERE at >= ?1 ORDER BY id LIMIT 1", params![before], |r| r.get(0))
        .optional()?;
    match first_kept {
        Some(id) => conn.execute("DELETE FROM changes WHERE id < ?1", params![id]),
        None => conn.execute("DELETE FROM changes", []),
    }
}
