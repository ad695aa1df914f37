//! Review findings: the pure rules behind `review-write`, `review-read`,
//! `review-delete` and the audit verdict.
//!
//! The server resolves the caller's loop, runs the SQL and calls these functions
//! for everything else:
//!
//! * [`scope`]: which section a new finding belongs to, which findings a read or a
//!   delete reaches, and which open findings block an audit (seed
//!   `blockingBugFindings`).
//! * [`format`]: pattern search, ordering, the finding listing and the one-line
//!   results of write and delete.
//! * [`validate`]: input checks beyond the JSON shape, and attempt-history paging.
//!
//! A finding's identity is (project, loop bucket, file, line, section): the loop
//! bucket is `''` outside loops, the section `-1` in storage for cross-section / none
//! (see [`section_to_db`] / [`section_from_db`]). Findings are write-once.

pub mod format;
pub mod scope;
pub mod validate;

pub use format::{
    deleted_message, duplicate_message, page_json, pattern_matcher, render_findings, sort_findings, stored_message,
};
pub use scope::{
    audit_is_clean, blocking, current_section_bugs, delete_filter, matches_filter, read_plan, write_section,
    DeleteFilter, LoopScope, ReadPlan, SectionFilter,
};
pub use validate::{
    attempts_exclusive, attempts_page, findings_page, validate_file, validate_write, MAX_FILE_BYTES, MAX_TEXT_BYTES,
};

use forge_protocol::inputs::Severity;
use serde::{Deserialize, Serialize};

/// A stored finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Row id (the diagnostic `code`).
    pub id: i64,
    /// The path as written: relative to the loop worktree or project root, or absolute.
    pub file: String,
    /// 1-based line.
    pub line: i64,
    /// `bug` or `warning`.
    pub severity: Severity,
    /// What is wrong.
    pub description: String,
    /// When it shows; `None` when absent or empty.
    pub scenario: Option<String>,
    /// The loop bucket; `None` for findings written outside loops.
    pub loop_name: Option<String>,
    /// 0-based section; `None` = cross-section / no section.
    pub section_index: Option<u32>,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// Storage form of a section: `-1` for none.
pub fn section_to_db(section: Option<u32>) -> i64 {
    section.map_or(-1, i64::from)
}

/// A stored section back: negative (and anything beyond `u32`) is none.
pub fn section_from_db(value: i64) -> Option<u32> {
    u32::try_from(value).ok()
}

/// Storage form of a loop bucket: `''` outside loops.
pub fn loop_to_db(loop_name: Option<&str>) -> &str {
    loop_name.unwrap_or("")
}

/// A stored loop bucket back: `''` is none.
pub fn loop_from_db(bucket: &str) -> Option<String> {
    (!bucket.is_empty()).then(|| bucket.to_string())
}

/// The stored scenario of a write: an empty scenario is stored as none.
pub fn normalize_scenario(scenario: Option<&str>) -> Option<String> {
    scenario.filter(|s| !s.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_forms() {
        assert_eq!(section_to_db(None), -1);
        assert_eq!(section_to_db(Some(3)), 3);
        assert_eq!(section_from_db(-1), None);
        assert_eq!(section_from_db(2), Some(2));
        assert_eq!(section_from_db(i64::MAX), None);
        assert_eq!(loop_to_db(None), "");
        assert_eq!(loop_from_db(""), None);
        assert_eq!(loop_from_db("feat"), Some("feat".to_string()));
        assert_eq!(normalize_scenario(Some("")), None);
        assert_eq!(normalize_scenario(Some("x")), Some("x".to_string()));
    }

    #[test]
    fn finding_serializes_camel_case() {
        let f = Finding {
            id: 7,
            file: "a.rs".into(),
            line: 2,
            severity: Severity::Bug,
            description: "d".into(),
            scenario: None,
            loop_name: Some("feat".into()),
            section_index: Some(1),
            created_at: 5,
        };
        let v = serde_json::to_value(&f).expect("serialize");
        assert_eq!(v["sectionIndex"], 1);
        assert_eq!(v["loopName"], "feat");
        assert_eq!(v["severity"], "bug");
        assert_eq!(v["createdAt"], 5);
    }
}
