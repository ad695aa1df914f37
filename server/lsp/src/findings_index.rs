//! Findings outside the tools: the open-findings block of `forge://index.md` and the
//! initial diagnostics publication.

use std::collections::BTreeMap;

use forge_protocol::ToolError;
use rusqlite::Connection;

use crate::conn::Conn;
use crate::diagnostics::{file_uri, normalize};
use crate::state::{CountsWork, Work};
use forge_store::findings;
use forge_tools::Db;

/// `## Open findings`: per file, a link and the counts.
pub fn render(db: &Connection, project: &str, root: &std::path::Path) -> Result<String, ToolError> {
    let rows = findings::counts_per_file(db, project).db()?;
    Ok(render_rows(rows, root))
}

/// Brings counts up to date: all of them when there are none yet, else only the dirty
/// files'.
pub fn update(db: &Connection, project: &str, work: CountsWork) -> Result<BTreeMap<String, (i64, i64)>, ToolError> {
    match work.counts {
        None => Ok(findings::counts_per_file(db, project).db()?.into_iter().map(|(f, b, w)| (f, (b, w))).collect()),
        Some(mut counts) => {
            for f in &work.dirty {
                counts.remove(f);
            }
            for (f, b, w) in findings::counts_of_files(db, project, &work.dirty).db()? {
                counts.insert(f, (b, w));
            }
            Ok(counts)
        }
    }
}

/// `## Open findings` from counts (see [`render`]).
pub fn render_counts(counts: &BTreeMap<String, (i64, i64)>, root: &std::path::Path) -> String {
    render_rows(counts.iter().map(|(f, &(b, w))| (f.clone(), b, w)), root)
}

fn render_rows(rows: impl IntoIterator<Item = (String, i64, i64)>, root: &std::path::Path) -> String {
    let mut rows = rows.into_iter().peekable();
    let mut out = String::from("\n## Open findings\n\n");
    if rows.peek().is_none() {
        out.push_str("No open findings.\n");
    }
    for (file, bugs, warnings) in rows {
        let p = std::path::Path::new(&file);
        let abs = if p.is_absolute() { normalize(p) } else { normalize(&root.join(p)) };
        let n = bugs + warnings;
        let mut parts = vec![];
        if bugs > 0 {
            parts.push(format!("{bugs} bug{}", if bugs == 1 { "" } else { "s" }));
        }
        if warnings > 0 {
            parts.push(format!("{warnings} warning{}", if warnings == 1 { "" } else { "s" }));
        }
        out.push_str(&format!(
            "- [{}]({}) · {n} ({})\n",
            forge_domain::text::md_inline(&file),
            file_uri(&abs),
            parts.join(", ")
        ));
    }
    out
}

/// Publishes every open finding of the project (after `initialized`).
pub async fn publish_initial(conn: &Conn) {
    conn.queue_diagnostics(Work::All);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::IndexCounts;
    use forge_protocol::inputs::Severity;
    use forge_store::findings::NewFinding;

    fn add(db: &Connection, file: &str, line: i64, severity: Severity) {
        let f = NewFinding { bucket: "", file, line, section: None, severity, description: "d", scenario: None };
        findings::insert(db, "p", &f, 0).unwrap();
    }

    #[test]
    fn incremental_counts_render_what_a_full_count_renders() {
        let dir = tempfile::tempdir().unwrap();
        let db = forge_store::open_connection(&dir.path().join("forge.db")).unwrap();
        let root = std::path::Path::new("/p");
        add(&db, "src/a.rs", 1, Severity::Bug);
        add(&db, "src/b.rs", 1, Severity::Warning);
        let mut state = IndexCounts::default();
        let counts = update(&db, "p", state.take()).unwrap();
        state.put(counts);
        // Changes: a new file, one more in a, b emptied.
        add(&db, "src/c.rs", 2, Severity::Bug);
        add(&db, "src/a.rs", 5, Severity::Warning);
        db.execute("DELETE FROM review_findings WHERE file = 'src/b.rs'", []).unwrap();
        for f in ["src/c.rs", "src/a.rs", "src/b.rs"] {
            state.file_changed(f);
        }
        let work = state.take();
        assert_eq!(work.dirty.len(), 3);
        let counts = update(&db, "p", work).unwrap();
        assert_eq!(render_counts(&counts, root), render(&db, "p", root).unwrap());
        assert!(!render_counts(&counts, root).contains("b.rs"));
        // An untold change is invisible to the increment; `all_changed` recounts.
        add(&db, "src/d.rs", 1, Severity::Bug);
        state.put(counts);
        state.all_changed();
        let counts = update(&db, "p", state.take()).unwrap();
        assert_eq!(render_counts(&counts, root), render(&db, "p", root).unwrap());
    }
}
