//! Review findings: write-once rows keyed by (project, loop bucket, file, line, section).

use forge_domain::review::{loop_from_db, section_from_db, section_to_db, DeleteFilter, Finding, SectionFilter};
use forge_protocol::inputs::Severity;
use rusqlite::{params, params_from_iter, Connection, Row};

use super::changes::{self, Kind};

const COLS: &str = "id, file, line, severity, description, scenario, loop_name, section_index, created_at";

fn row(r: &Row) -> rusqlite::Result<Finding> {
    // Read in place: only what the finding keeps is copied (a page has thousands of rows).
    // Not `as_str()?`: rusqlite's own conversion drops the column from the error.
    let text = |i: usize| {
        r.get_ref(i)?
            .as_str()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e)))
    };
    let severity = text(3)?;
    let bucket = text(6)?;
    Ok(Finding {
        id: r.get(0)?,
        file: r.get(1)?,
        line: r.get(2)?,
        severity: Severity::parse(severity).unwrap_or(Severity::Warning),
        description: r.get(4)?,
        scenario: r.get(5)?,
        loop_name: loop_from_db(bucket),
        section_index: section_from_db(r.get(7)?),
        created_at: r.get(8)?,
    })
}

/// The SQL condition of a section filter (on column `section_index`).
fn section_sql(filter: &SectionFilter) -> String {
    match *filter {
        SectionFilter::All => "1".into(),
        SectionFilter::CrossOnly => "section_index = -1".into(),
        SectionFilter::Only(k) => format!("section_index = {k}"),
        SectionFilter::ScopeOf(k) => format!("section_index <= {k}"),
    }
}

/// A new finding.
pub struct NewFinding<'a> {
    pub bucket: &'a str,
    pub file: &'a str,
    pub line: i64,
    pub section: Option<u32>,
    pub severity: Severity,
    pub description: &'a str,
    pub scenario: Option<&'a str>,
}

/// Inserts a finding; `None` when one exists at that identity (write-once).
pub fn insert(conn: &Connection, project: &str, f: &NewFinding, now: i64) -> rusqlite::Result<Option<Finding>> {
    let n = conn
        .prepare_cached(
            "INSERT INTO review_findings (project_id, loop_name, file, line, section_index, severity, description, scenario, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (project_id, loop_name, file, line, section_index) DO NOTHING",
        )?
        .execute(params![
            project,
            f.bucket,
            f.file,
            f.line,
            section_to_db(f.section),
            f.severity.as_str(),
            f.description,
            f.scenario,
            now
        ])?;
    if n == 0 {
        return Ok(None);
    }
    let id = conn.last_insert_rowid();
    changes::record(conn, project, Kind::Finding, &changes::finding_key(f.bucket, f.file), now)?;
    Ok(Some(Finding {
        id,
        file: f.file.to_string(),
        line: f.line,
        severity: f.severity,
        description: f.description.to_string(),
        scenario: f.scenario.map(str::to_string),
        loop_name: loop_from_db(f.bucket),
        section_index: f.section,
        created_at: now,
    }))
}

/// Findings of one loop bucket under a section filter, optionally of one file.
pub fn query(
    conn: &Connection,
    project: &str,
    bucket: &str,
    filter: &SectionFilter,
    file: Option<&str>,
) -> rusqlite::Result<Vec<Finding>> {
    // Separate statements, so the file filter uses the (project, loop, file, ...) index.
    let by_file = if file.is_some() { "AND file = ?3" } else { "" };
    let sql = format!(
        "SELECT {COLS} FROM review_findings WHERE project_id = ?1 AND loop_name = ?2 AND {} {by_file} ORDER BY file, line, section_index, id",
        section_sql(filter)
    );
    let mut st = conn.prepare_cached(&sql)?;
    let rows = match file {
        Some(f) => st.query_map(params![project, bucket, f], row)?.collect(),
        None => st.query_map(params![project, bucket], row)?.collect(),
    };
    rows
}

/// One page of [`query`] in id order, newest first: at most `limit` findings with an id
/// below `before`, and the id to pass as `before` for the next page (when there is one).
/// Only the page is read from the database.
pub fn query_page(
    conn: &Connection,
    project: &str,
    bucket: &str,
    filter: &SectionFilter,
    file: Option<&str>,
    limit: usize,
    before: Option<i64>,
) -> rusqlite::Result<(Vec<Finding>, Option<i64>)> {
    let mut st = conn.prepare_cached(&page_sql(filter, file.is_some(), limit))?;
    let below = before.unwrap_or(i64::MAX);
    let mut rows: Vec<Finding> = match file {
        Some(f) => st.query_map(params![project, bucket, below, f], row)?.collect::<rusqlite::Result<_>>()?,
        None => st.query_map(params![project, bucket, below], row)?.collect::<rusqlite::Result<_>>()?,
    };
    let next = (rows.len() > limit).then(|| {
        rows.truncate(limit);
        rows.last().map(|f| f.id)
    });
    Ok((rows, next.flatten()))
}

/// [`query_page`] of the findings `keep` takes: read newest first a row at a time, so only
/// the page is held, however many findings are passed over (a `pattern` search of
/// review-read loaded every finding in scope first: 195 MiB for twelve findings of 8 MiB).
#[allow(clippy::too_many_arguments)]
pub fn query_page_where(
    conn: &Connection,
    project: &str,
    bucket: &str,
    filter: &SectionFilter,
    file: Option<&str>,
    limit: usize,
    before: Option<i64>,
    keep: impl Fn(&Finding) -> bool,
) -> rusqlite::Result<(Vec<Finding>, Option<i64>)> {
    let sql = page_sql(filter, file.is_some(), usize::MAX);
    let mut st = conn.prepare_cached(&sql)?;
    let below = before.unwrap_or(i64::MAX);
    let mut rows = match file {
        Some(f) => st.query(params![project, bucket, below, f])?,
        None => st.query(params![project, bucket, below])?,
    };
    let mut page = Vec::new();
    while let Some(r) = rows.next()? {
        let f = row(r)?;
        if keep(&f) {
            page.push(f);
            if page.len() > limit {
                break;
            }
        }
    }
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|f| f.id)
    });
    Ok((page, next.flatten()))
}

/// The statement of [`query_page`] (`limit` `usize::MAX`: every row).
fn page_sql(filter: &SectionFilter, by_file: bool, limit: usize) -> String {
    // A bucket's page walks the (project, loop, id, section) index backwards, a section
    // filter checked on the index entry before the row is read (migration 007); one
    // file's findings are few, found through the (project, file) index and sorted.
    let (index, by_file) = if by_file { ("INDEXED BY idx_findings_file", "AND file = ?4") } else { ("", "") };
    format!(
        "SELECT {COLS} FROM review_findings {index} WHERE project_id = ?1 AND loop_name = ?2 AND {} {by_file}
         AND id < ?3 ORDER BY id DESC {}",
        section_sql(filter),
        if limit == usize::MAX { String::new() } else { crate::limit(limit + 1) }
    )
}

/// Deletes the findings at file:line of a bucket under a delete filter; returns them.
pub fn delete(
    conn: &Connection,
    project: &str,
    bucket: &str,
    file: &str,
    line: i64,
    filter: &DeleteFilter,
    now: i64,
) -> rusqlite::Result<Vec<Finding>> {
    let cond = section_sql(&filter.as_section_filter());
    let mut st = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM review_findings WHERE project_id = ?1 AND loop_name = ?2 AND file = ?3 AND line = ?4 AND {cond}"
    ))?;
    let gone: Vec<Finding> =
        st.query_map(params![project, bucket, file, line], row)?.collect::<rusqlite::Result<_>>()?;
    for f in &gone {
        conn.prepare_cached("DELETE FROM review_findings WHERE id = ?1")?.execute([f.id])?;
    }
    if !gone.is_empty() {
        changes::record(conn, project, Kind::Finding, &changes::finding_key(bucket, file), now)?;
    }
    Ok(gone)
}

/// Deletes every finding of a bucket (a swept loop's left behind when a new loop takes its
/// name), recording a change per file so that editors clear what they show of them.
pub fn delete_bucket(conn: &Connection, project: &str, bucket: &str, now: i64) -> rusqlite::Result<usize> {
    let files: Vec<String> = conn
        .prepare_cached("SELECT DISTINCT file FROM review_findings WHERE project_id = ?1 AND loop_name = ?2")?
        .query_map(params![project, bucket], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let n =
        conn.execute("DELETE FROM review_findings WHERE project_id = ?1 AND loop_name = ?2", params![project, bucket])?;
    for file in &files {
        changes::record(conn, project, Kind::Finding, &changes::finding_key(bucket, file), now)?;
    }
    Ok(n)
}

/// The findings of the project with these ids (those that still exist), in id order.
pub fn by_ids(conn: &Connection, project: &str, ids: &[i64]) -> rusqlite::Result<Vec<Finding>> {
    let mut out = Vec::new();
    let mut st =
        conn.prepare_cached(&format!("SELECT {COLS} FROM review_findings WHERE project_id = ?1 AND id = ?2"))?;
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        if let Some(f) = st.query_map(params![project, id], row)?.next() {
            out.push(f?);
        }
    }
    Ok(out)
}

/// The open findings of the project (outside loops, or of a loop that is not
/// completed), optionally only those whose `file` is one of `files`.
pub fn open(conn: &Connection, project: &str, files: Option<&[String]>) -> rusqlite::Result<Vec<Finding>> {
    let base = format!(
        "SELECT {} FROM review_findings f WHERE f.project_id = ?1 AND (f.loop_name = '' OR EXISTS (
            SELECT 1 FROM loops l WHERE l.project_id = f.project_id AND l.loop_name = f.loop_name AND l.status != 'completed'))",
        COLS.split(", ").map(|c| format!("f.{c}")).collect::<Vec<_>>().join(", ")
    );
    match files {
        None => {
            let mut st = conn.prepare_cached(&format!("{base} ORDER BY f.file, f.line, f.id"))?;
            let rows = st.query_map(params![project], row)?;
            rows.collect()
        }
        Some(files) => {
            by_files(conn, project, files, |m| format!("{base} AND f.file IN ({m}) ORDER BY f.file, f.line, f.id"), row)
        }
    }
}

/// The (loop bucket, file) pairs that have open findings (see [`open`]), with how many,
/// optionally only for `files`: what a publication of diagnostics has to cover.
pub fn open_files(
    conn: &Connection,
    project: &str,
    files: Option<&[String]>,
) -> rusqlite::Result<Vec<(String, String, i64)>> {
    let base = "SELECT f.loop_name, f.file, count(*) FROM review_findings f WHERE f.project_id = ?1 AND (f.loop_name = '' OR EXISTS (
            SELECT 1 FROM loops l WHERE l.project_id = f.project_id AND l.loop_name = f.loop_name AND l.status != 'completed'))";
    let row = |r: &rusqlite::Row| Ok((r.get(0)?, r.get(1)?, r.get(2)?));
    match files {
        None => {
            let mut st = conn.prepare_cached(&format!("{base} GROUP BY f.loop_name, f.file"))?;
            let rows = st.query_map(params![project], row)?;
            rows.collect()
        }
        Some(files) => {
            by_files(conn, project, files, |m| format!("{base} AND f.file IN ({m}) GROUP BY f.loop_name, f.file"), row)
        }
    }
}

/// Open-finding counts per file: (file, bugs, warnings), by file.
pub fn counts_per_file(conn: &Connection, project: &str) -> rusqlite::Result<Vec<(String, i64, i64)>> {
    let mut st = conn.prepare_cached(
        "SELECT f.file, sum(f.severity = 'bug'), sum(f.severity = 'warning') FROM review_findings f
         WHERE f.project_id = ?1 AND (f.loop_name = '' OR EXISTS (
            SELECT 1 FROM loops l WHERE l.project_id = f.project_id AND l.loop_name = f.loop_name AND l.status != 'completed'))
         GROUP BY f.file ORDER BY f.file",
    )?;
    let rows = st.query_map(params![project], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}

/// [`counts_per_file`] for some files only (a file without open findings is absent).
pub fn counts_of_files(
    conn: &Connection,
    project: &str,
    files: &[String],
) -> rusqlite::Result<Vec<(String, i64, i64)>> {
    by_files(
        conn,
        project,
        files,
        |m| {
            format!(
                "SELECT f.file, sum(f.severity = 'bug'), sum(f.severity = 'warning') FROM review_findings f
                 WHERE f.project_id = ?1 AND f.file IN ({m}) AND (f.loop_name = '' OR EXISTS (
                    SELECT 1 FROM loops l WHERE l.project_id = f.project_id AND l.loop_name = f.loop_name AND l.status != 'completed'))
                 GROUP BY f.file"
            )
        },
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// Runs the query `sql(marks)` for `files`, 500 at a time (`?1` is the project, `marks` the
/// `?2, ?3, ...` of a chunk's files), and collects the rows.
fn by_files<T>(
    conn: &Connection,
    project: &str,
    files: &[String],
    sql: impl Fn(&str) -> String,
    mut row: impl FnMut(&Row) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut out = vec![];
    for chunk in files.chunks(500) {
        let marks = (0..chunk.len()).map(|i| format!("?{}", i + 2)).collect::<Vec<_>>().join(", ");
        let mut st = conn.prepare(&sql(&marks))?;
        let args = std::iter::once(project.to_string()).chain(chunk.iter().cloned());
        out.extend(st.query_map(params_from_iter(args), &mut row)?.collect::<rusqlite::Result<Vec<_>>>()?);
    }
    Ok(out)
}

/// The distinct files of a loop's findings (to republish when the loop's status changes).
pub fn files_of_loop(conn: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Vec<String>> {
    let mut st =
        conn.prepare_cached("SELECT DISTINCT file FROM review_findings WHERE project_id = ?1 AND loop_name = ?2")?;
    let rows = st.query_map(params![project, loop_name], |r| r.get(0))?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column `column` of every row of `sql`.
    fn strings(conn: &Connection, sql: &str, column: usize) -> Vec<String> {
        conn.prepare(sql).unwrap().query_map([], |r| r.get(column)).unwrap().collect::<rusqlite::Result<_>>().unwrap()
    }

    fn index_columns(conn: &Connection, index: &str) -> Vec<String> {
        strings(conn, &format!("PRAGMA index_info('{index}')"), 2)
    }

    /// A bucket's findings go with a change per file, so editors showing them clear them.
    #[test]
    fn deleting_a_bucket_announces_each_of_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open_connection(&dir.path().join("forge.db")).unwrap();
        for (bucket, file, line) in [("l", "a.rs", 1), ("l", "a.rs", 2), ("l", "b.rs", 1), ("", "a.rs", 1)] {
            conn.execute(
                "INSERT INTO review_findings (project_id, loop_name, file, line, severity, description, created_at) VALUES ('p', ?1, ?2, ?3, 'bug', 'd', 0)",
                params![bucket, file, line],
            )
            .unwrap();
        }
        assert_eq!(delete_bucket(&conn, "p", "l", 5).unwrap(), 3);
        let mut keys = strings(&conn, "SELECT key FROM changes WHERE kind = 'finding'", 0);
        keys.sort();
        assert_eq!(keys, [changes::finding_key("l", "a.rs"), changes::finding_key("l", "b.rs")]);
        assert_eq!(strings(&conn, "SELECT loop_name FROM review_findings", 0), [""], "other buckets stay");
    }

    #[test]
    fn a_write_updates_three_indexes_and_a_section_page_walks_the_id_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open_connection(&dir.path().join("forge.db")).unwrap();
        let indexes = strings(
            &conn,
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'review_findings' ORDER BY name",
            0,
        );
        assert_eq!(indexes, ["idx_findings_file", "idx_findings_loop_id", "sqlite_autoindex_review_findings_1"]);
        assert_eq!(index_columns(&conn, "idx_findings_loop_id"), ["project_id", "loop_name", "id", "section_index"]);
        for filter in [SectionFilter::Only(3), SectionFilter::CrossOnly, SectionFilter::ScopeOf(3), SectionFilter::All]
        {
            let plan: String = conn
                .query_row(
                    &format!("EXPLAIN QUERY PLAN {}", page_sql(&filter, false, 100)),
                    params!["p", "l", 9],
                    |r| r.get(3),
                )
                .unwrap();
            assert!(
                plan.contains("idx_findings_loop_id (project_id=? AND loop_name=? AND id<?)"),
                "{filter:?}: {plan}"
            );
        }
    }

    #[test]
    fn a_store_of_version_6_pages_its_findings_by_section_after_migrating() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forge.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
            )
            .unwrap();
            for (v, name, sql) in crate::MIGRATIONS.iter().filter(|m| m.0 <= 6) {
                c.execute_batch(sql).unwrap();
                c.execute("INSERT INTO schema_migrations VALUES (?1, ?2, 0)", params![v, name]).unwrap();
            }
            for i in 0..30 {
                c.execute(
                    "INSERT INTO review_findings (project_id, loop_name, file, line, section_index, severity, description, created_at)
                     VALUES ('p', 'l', ?1, 1, ?2, 'bug', 'd', 0)",
                    params![format!("f{i}.rs"), i % 3],
                )
                .unwrap();
            }
        }
        let conn = crate::open_connection(&path).unwrap();
        let version: u32 = conn.query_row("SELECT max(version) FROM schema_migrations", [], |r| r.get(0)).unwrap();
        assert_eq!(version, crate::latest_version());
        assert!(version >= 7, "migration 007 is embedded");
        assert_eq!(index_columns(&conn, "idx_findings_loop_id"), ["project_id", "loop_name", "id", "section_index"]);
        let old: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE name = 'idx_findings_loop'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(old, 0, "the section index is gone");
        // Section 1 holds ids 2, 5, ..., 29; newest first, four to a page.
        let (page, next) = query_page(&conn, "p", "l", &SectionFilter::Only(1), None, 4, None).unwrap();
        assert_eq!(page.iter().map(|f| f.id).collect::<Vec<_>>(), [29, 26, 23, 20]);
        assert_eq!(next, Some(20));
        let (page, next) = query_page(&conn, "p", "l", &SectionFilter::ScopeOf(0), None, 4, Some(10)).unwrap();
        assert_eq!(page.iter().map(|f| f.id).collect::<Vec<_>>(), [7, 4, 1]);
        assert_eq!(next, None);
    }

    #[test]
    fn a_page_query_is_prepared_once_not_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open_connection(&dir.path().join("forge.db")).unwrap();
        for (file, before) in [(None, None), (Some("a.rs"), None), (None, Some(5)), (Some("b.rs"), Some(9))] {
            query_page(&conn, "p", "", &SectionFilter::All, file, 500, before).unwrap();
        }
        for by_file in [false, true] {
            let st = conn.prepare_cached(&page_sql(&SectionFilter::All, by_file, 500)).unwrap();
            // A bound `LIMIT ?` made SQLite prepare the statement again on every run.
            assert_eq!(st.get_status(rusqlite::StatementStatus::RePrepare), 0, "by_file={by_file}");
        }
    }
}
