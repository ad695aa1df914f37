//! The one error type of the patch module. Every message says where the problem is:
//! the line of the patch, the path, or both.

use std::fmt;

/// Why a patch was refused. Nothing is written when any of these is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// The patch text does not follow the format (1-based patch line).
    Malformed { line: usize, message: String },
    /// A path is empty, absolute outside the root, or escapes the root with `..`.
    BadPath { line: usize, path: String, reason: String },
    /// `Add File` (or `Move to`) names a path that already exists.
    AlreadyExists { line: usize, path: String },
    /// `Update File` or `Delete File` names a path that does not exist.
    Missing { line: usize, path: String },
    /// A hunk's lines were not found in the file, even tolerantly.
    ContextNotFound { line: usize, path: String, detail: String },
    /// A hunk (or its first `@@` anchor) fits more than one place. `what` says which
    /// (`hunk` or `@@ line '...'`); `candidates` are 1-based file lines.
    Ambiguous { line: usize, path: String, what: String, candidates: Vec<usize> },
    /// The caller's file lookup failed (unreadable, not UTF-8, ...).
    Read { path: String, message: String },
    /// After the patch, `file` would be a file and a directory at once: `inside` is a
    /// file the patch writes beneath it.
    FileAndDirectory { file: String, inside: String },
}

impl PatchError {
    pub(crate) fn malformed(line: usize, message: impl Into<String>) -> Self {
        PatchError::Malformed { line, message: message.into() }
    }
}

fn join_lines(candidates: &[usize]) -> String {
    candidates.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchError::Malformed { line, message } => write!(f, "patch line {line}: {message}"),
            PatchError::BadPath { line, path, reason } => write!(f, "patch line {line}: path '{path}' {reason}"),
            PatchError::AlreadyExists { line, path } => {
                write!(f, "patch line {line}: '{path}' already exists (use Update File to change it)")
            }
            PatchError::Missing { line, path } => write!(f, "patch line {line}: '{path}' does not exist"),
            PatchError::ContextNotFound { line, path, detail } => {
                write!(f, "patch line {line}: hunk does not match '{path}': {detail}")
            }
            PatchError::Ambiguous { line, path, what, candidates } => write!(
                f,
                "patch line {line}: the {what} matches '{path}' at several places (lines {}); add context lines or \
                 an @@ line to say which one is meant",
                join_lines(candidates)
            ),
            PatchError::Read { path, message } => write!(f, "cannot patch '{path}': {message}"),
            PatchError::FileAndDirectory { file, inside } => {
                write!(f, "'{file}' would be both a file and the directory of '{inside}'; nothing was changed")
            }
        }
    }
}

impl std::error::Error for PatchError {}
