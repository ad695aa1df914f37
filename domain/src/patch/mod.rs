//! The pure part of `forge.apply-patch`: parse a patch, check its paths, find its hunks
//! in the real files (tolerantly, refusing ambiguity) and compute the new file contents.
//!
//! No I/O happens here. The caller passes the patch text and a way to read a file
//! (root-relative path in, `Ok(Some(text))`, `Ok(None)` for a missing file, or `Err`),
//! and gets either a [`PatchPlan`] (the net [`FileChange`]s, to be written all or none)
//! or a [`PatchError`] whose message names the patch line and/or the path.
//!
//! * [`parse`]: the strict parser; every malformed patch is refused before any file is read.
//! * [`path`]: absolute paths outside the root and `..` escaping it are refused.
//! * [`matching`]: exact, then trailing-whitespace, indentation and unicode-tolerant
//!   matching, then a bounded stale-context (LCS) fallback.
//! * [`apply`]: one file's hunks applied, EOL style and final newline kept, authored
//!   lines byte-exact.
//! * [`plan`]: sections replayed in order (same-path updates accumulate, `Move to`),
//!   then reduced to one change per path.
//!
//! ```
//! use forge_domain::patch::{apply_patch, FileChange};
//! let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+uno\n two\n*** End Patch\n";
//! let plan = apply_patch(patch, None, |_| Ok::<_, String>(Some("one\r\ntwo\r\n".to_string()))).unwrap();
//! assert_eq!(plan.changes, vec![FileChange::Update { path: "a.txt".into(), content: "uno\r\ntwo\r\n".into() }]);
//! ```

pub mod apply;
pub mod error;
pub mod matching;
pub mod parse;
pub mod path;
pub mod plan;

#[cfg(test)]
mod tests;

pub use apply::{apply_hunks, Applied, HunkNote};
pub use error::PatchError;
pub use matching::{fold, MatchLevel};
pub use parse::{parse_patch, Hunk, HunkLine, MoveTo, Patch, PatchOp};
pub use path::{normalize_path, FORGE_CONFIG_REFUSAL};
pub use plan::{plan_patch, FileChange, MatchNote, PatchPlan, Unreadable};

/// [`parse_patch`] then [`plan_patch`].
pub fn apply_patch<F, E>(text: &str, root: Option<&str>, read: F) -> Result<PatchPlan, PatchError>
where
    F: FnMut(&str) -> Result<Option<String>, E>,
    E: Into<Unreadable>,
{
    let patch = parse_patch(text)?;
    plan_patch(&patch, root, read)
}
