//! The open-findings block of `forge://index.md` (filled by the findings work).

use forge_protocol::ToolError;
use rusqlite::Connection;

pub fn render(_db: &Connection, _project: &str) -> Result<String, ToolError> {
    Ok(String::new())
}

/// Publishes every open finding on `initialized` (filled by the findings work).
pub async fn publish_initial(_conn: &crate::lsp::conn::Conn) {}
