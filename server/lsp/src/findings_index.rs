//! Findings outside the tools: the open-findings block of `forge://index.md` and the
//! initial diagnostics publication.

use forge_protocol::ToolError;
use rusqlite::Connection;

use crate::conn::Conn;
use crate::diagnostics::{file_uri, normalize};
use crate::state::Work;
use forge_store::findings;
use forge_tools::Db;

/// `## Open findings`: per file, a link and the counts.
pub fn render(db: &Connection, project: &str, root: &std::path::Path) -> Result<String, ToolError> {
    let rows = findings::counts_per_file(db, project).db()?;
    let mut out = String::from("\n## Open findings\n\n");
    if rows.is_empty() {
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
        out.push_str(&format!("- [{file}]({}) · {n} ({})\n", file_uri(&abs), parts.join(", ")));
    }
    Ok(out)
}

/// Publishes every open finding of the project (after `initialized`).
pub async fn publish_initial(conn: &Conn) {
    conn.queue_diagnostics(Work::All);
}
