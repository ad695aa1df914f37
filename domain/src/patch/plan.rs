//! From a parsed patch and the current files to the net file changes.
//!
//! The sections are replayed in order over a virtual view of the files: a path a
//! section touches is looked up once, and later sections see what earlier ones did
//! (several `Update File` sections on one path accumulate; a file added earlier can be
//! updated later; a moved file is found at its new path). At the end each touched path
//! is compared with what was there: the result is one change per path.

use super::apply::{apply_hunks, HunkNote};
use super::error::PatchError;
use super::parse::{Patch, PatchOp};
use super::path::normalize_path;
use serde::Serialize;
use std::collections::HashMap;

/// What to do to the files; paths are root-relative with `/`. A caller that writes the
/// plan must write all of it or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum FileChange {
    /// Create `path` (it does not exist).
    Add { path: String, content: String },
    /// Replace the content of `path` (it exists).
    Update { path: String, content: String },
    /// Remove `path`.
    Delete { path: String },
    /// Write `content` to `to` (which does not exist) and remove `from`.
    Move { from: String, to: String, content: String },
}

impl FileChange {
    /// The path written, or removed for a delete.
    pub fn path(&self) -> &str {
        match self {
            FileChange::Add { path, .. } | FileChange::Update { path, .. } | FileChange::Delete { path } => path,
            FileChange::Move { to, .. } => to,
        }
    }
}

/// A hunk of one file that was matched tolerantly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchNote {
    pub path: String,
    #[serde(flatten)]
    pub hunk: HunkNote,
}

/// The result of planning a patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchPlan {
    /// In the order the paths first appear in the patch.
    pub changes: Vec<FileChange>,
    /// The rescues: hunks found only by a tolerant match.
    pub notes: Vec<MatchNote>,
}

impl PatchPlan {
    /// One line per change (`A path`, `M path`, `D path`, `R from -> to`), then one per
    /// rescued hunk.
    pub fn summary(&self) -> String {
        let mut lines: Vec<String> = self
            .changes
            .iter()
            .map(|c| match c {
                FileChange::Add { path, .. } => format!("A {path}"),
                FileChange::Update { path, .. } => format!("M {path}"),
                FileChange::Delete { path } => format!("D {path}"),
                FileChange::Move { from, to, .. } => format!("R {from} -> {to}"),
            })
            .collect();
        lines.extend(self.notes.iter().map(|n| {
            format!(
                "note: {} hunk at patch line {} matched line {} ({})",
                n.path, n.hunk.patch_line, n.hunk.file_line, n.hunk.level
            )
        }));
        lines.join("\n")
    }
}

/// A file of the virtual view.
#[derive(Clone)]
struct Entry {
    /// The path the content was first read from; `None` for content the patch added.
    origin: Option<String>,
    content: String,
    /// Why the file's content cannot be patched, for a file that exists but can only be
    /// deleted ([`Unreadable::removable`]): its `content` is empty and must not be used.
    unreadable: Option<String>,
}

/// A path the caller's lookup could not give the content of: why, and whether the patch
/// may still delete it (a symbolic link: `Delete File` removes the link; `Update File`
/// and a move are refused with `message`). A plain `String` error converts to one that
/// cannot be deleted either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub message: String,
    pub removable: bool,
}

impl From<String> for Unreadable {
    fn from(message: String) -> Self {
        Unreadable { message, removable: false }
    }
}

struct View<F> {
    read: F,
    /// Whether each touched path existed before the patch.
    existed: HashMap<String, bool>,
    current: HashMap<String, Option<Entry>>,
    /// Touched paths in first-touch order.
    order: Vec<String>,
}

impl<E: Into<Unreadable>, F: FnMut(&str) -> Result<Option<String>, E>> View<F> {
    fn load(&mut self, path: &str) -> Result<(), PatchError> {
        if self.current.contains_key(path) {
            return Ok(());
        }
        let origin = Some(path.to_string());
        let entry = match (self.read)(path).map_err(Into::into) {
            Ok(found) => found.map(|content| Entry { origin, content, unreadable: None }),
            Err(Unreadable { message, removable: true }) => {
                Some(Entry { origin, content: String::new(), unreadable: Some(message) })
            }
            Err(Unreadable { message, removable: false }) => {
                return Err(PatchError::Read { path: path.to_string(), message })
            }
        };
        self.existed.insert(path.to_string(), entry.is_some());
        self.current.insert(path.to_string(), entry);
        self.order.push(path.to_string());
        Ok(())
    }

    /// The current state of a loaded path (taken out; put it back with `set`).
    fn take(&mut self, path: &str) -> Option<Entry> {
        self.current.get_mut(path).and_then(Option::take)
    }

    fn exists(&self, path: &str) -> bool {
        matches!(self.current.get(path), Some(Some(_)))
    }

    fn set(&mut self, path: &str, entry: Option<Entry>) {
        self.current.insert(path.to_string(), entry);
    }
}

/// Check every path, then replay the patch over the files `read` returns
/// (`Ok(None)` = no such file; `Err` = it cannot be read, with why). `read` gets
/// root-relative paths and is called at most once per path. `root` lets absolute
/// paths inside it through (made relative); without it absolute paths are refused.
pub fn plan_patch<F, E>(patch: &Patch, root: Option<&str>, read: F) -> Result<PatchPlan, PatchError>
where
    F: FnMut(&str) -> Result<Option<String>, E>,
    E: Into<Unreadable>,
{
    let norm = |line: usize, raw: &str| {
        normalize_path(raw, root).map_err(|reason| PatchError::BadPath { line, path: raw.to_string(), reason })
    };
    // All paths first: a bad path is reported before any file is looked at.
    let mut paths: Vec<(String, Option<String>)> = Vec::with_capacity(patch.ops.len());
    for op in &patch.ops {
        paths.push(match op {
            PatchOp::Add { line, path, .. } | PatchOp::Delete { line, path } => (norm(*line, path)?, None),
            PatchOp::Update { line, path, move_to, .. } => {
                let dest = match move_to {
                    Some(m) => Some(norm(m.line, &m.path)?),
                    None => None,
                };
                (norm(*line, path)?, dest)
            }
        });
    }

    let mut view = View { read, existed: HashMap::new(), current: HashMap::new(), order: Vec::new() };
    let mut notes = Vec::new();
    for (op, (path, dest)) in patch.ops.iter().zip(paths) {
        view.load(&path)?;
        match op {
            PatchOp::Add { line, lines, .. } => {
                if view.exists(&path) {
                    return Err(PatchError::AlreadyExists { line: *line, path });
                }
                let mut content = lines.join("\n");
                content.push('\n');
                view.set(&path, Some(Entry { origin: None, content, unreadable: None }));
            }
            PatchOp::Delete { line, .. } => {
                if view.take(&path).is_none() {
                    return Err(PatchError::Missing { line: *line, path });
                }
            }
            PatchOp::Update { line, hunks, move_to, .. } => {
                let Some(mut entry) = view.take(&path) else {
                    return Err(PatchError::Missing { line: *line, path });
                };
                if let Some(message) = entry.unreadable {
                    return Err(PatchError::Read { path, message });
                }
                if !hunks.is_empty() {
                    let applied = apply_hunks(&path, &entry.content, hunks)?;
                    entry.content = applied.content;
                    notes.extend(applied.notes.into_iter().map(|hunk| MatchNote { path: path.clone(), hunk }));
                }
                match dest.filter(|d| *d != path) {
                    Some(dest) => {
                        view.load(&dest)?;
                        if view.exists(&dest) {
                            let at = move_to.as_ref().map_or(*line, |m| m.line);
                            return Err(PatchError::AlreadyExists { line: at, path: dest });
                        }
                        view.set(&dest, Some(entry));
                    }
                    None => view.set(&path, Some(entry)),
                }
            }
        }
    }
    let changes = net_changes(&view);
    file_and_directory(&changes)?;
    Ok(PatchPlan { changes, notes })
}

/// Refuses a plan that writes a file beneath another file it writes (`d` and `d/f`): the
/// two cannot both exist, and writing one would fail only after the other was written.
fn file_and_directory(changes: &[FileChange]) -> Result<(), PatchError> {
    let written: std::collections::HashSet<&str> = changes
        .iter()
        .filter_map(|c| match c {
            FileChange::Add { path, .. } | FileChange::Update { path, .. } => Some(path.as_str()),
            FileChange::Move { to, .. } => Some(to.as_str()),
            FileChange::Delete { .. } => None,
        })
        .collect();
    let mut sorted: Vec<&str> = written.iter().copied().collect();
    sorted.sort_unstable();
    for inside in sorted {
        let mut at = inside.len();
        while let Some(slash) = inside[..at].rfind('/') {
            if written.contains(&inside[..slash]) {
                return Err(PatchError::FileAndDirectory {
                    file: inside[..slash].to_string(),
                    inside: inside.to_string(),
                });
            }
            at = slash;
        }
    }
    Ok(())
}

/// Compare the final view with what existed: one change per touched path.
fn net_changes<F>(view: &View<F>) -> Vec<FileChange> {
    let existed = |p: &str| view.existed.get(p).copied().unwrap_or(false);
    let gone = |p: &str| matches!(view.current.get(p), Some(None));
    // A moved file: its content came from another path that is gone now.
    let mut moved_from: HashMap<&str, &str> = HashMap::new();
    for path in &view.order {
        if let Some(Some(Entry { origin: Some(origin), .. })) = view.current.get(path) {
            if origin != path && gone(origin) && existed(origin) && !moved_from.values().any(|o| o == origin) {
                moved_from.insert(path, origin);
            }
        }
    }
    let mut changes = Vec::new();
    for path in &view.order {
        match view.current.get(path) {
            // Only ever deleted: one still here is unchanged.
            Some(Some(Entry { unreadable: Some(_), .. })) => {}
            Some(Some(entry)) => {
                let content = entry.content.clone();
                let path = path.clone();
                changes.push(match moved_from.get(path.as_str()) {
                    Some(from) => FileChange::Move { from: from.to_string(), to: path, content },
                    None if existed(&path) => FileChange::Update { path, content },
                    None => FileChange::Add { path, content },
                });
            }
            _ if existed(path) && !moved_from.values().any(|o| o == path) => {
                changes.push(FileChange::Delete { path: path.clone() })
            }
            _ => {}
        }
    }
    changes
}
