//! Paths of the file tools (`apply-patch`, `grep`, `glob`): the caller's root and the
//! guards that keep every path inside it.
//!
//! The root is the loop worktree for a loop session, else the project root. A path is
//! relative to the root (an absolute path must lie inside it); `..` may not leave it, and
//! the deepest existing directory of a path, with symlinks resolved, must still be inside
//! it, so a committed symlink cannot lead a write or a search elsewhere.

use std::path::{Component, Path, PathBuf};

use forge_protocol::ToolError;

use crate::{loop_scope, ToolCtx};

/// The directory the caller's file tools work in.
pub fn caller_root(ctx: &ToolCtx) -> Result<PathBuf, ToolError> {
    let root = match loop_scope::caller_loop(ctx)? {
        Some(row) if ctx.caller().binding.is_some() => PathBuf::from(row.worktree_dir),
        _ => ctx.env.project.root.clone(),
    };
    root.canonicalize().map_err(|e| ToolError::precondition(format!("the root {} cannot be used: {e}", root.display())))
}

/// `rel` as a path inside `root` (which is canonical), or an error naming the path.
pub fn within(root: &Path, rel: &str) -> Result<PathBuf, ToolError> {
    let bad = |why: &str| ToolError::invalid_params(format!("path {rel:?} {why}"));
    if rel.is_empty() || rel.contains('\0') {
        return Err(bad("is empty or contains NUL"));
    }
    let raw = Path::new(rel);
    let rel_part: PathBuf = if raw.is_absolute() {
        raw.strip_prefix(root)
            .map(Path::to_path_buf)
            .map_err(|_| bad(&format!("is outside the root {}", root.display())))?
    } else {
        raw.to_path_buf()
    };
    let mut out = root.to_path_buf();
    for c in rel_part.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if out == root || !out.pop() || !out.starts_with(root) {
                    return Err(bad(&format!("leads out of the root {}", root.display())));
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(bad("is not a relative path")),
        }
    }
    // The deepest existing ancestor, symlinks resolved, must be inside the root.
    let mut probe = out.clone();
    loop {
        if let Ok(real) = probe.canonicalize() {
            if !real.starts_with(root) {
                return Err(bad(&format!("leads out of the root {} through a symlink", root.display())));
            }
            break;
        }
        if !probe.pop() {
            break;
        }
    }
    Ok(out)
}

/// Slim's path guard for searches: `rel` (default: the root) must exist, and every
/// component before the last must be a directory; the error names the first component
/// that is missing or not a directory, never a silent search of a parent.
pub fn search_path(root: &Path, rel: Option<&str>) -> Result<PathBuf, ToolError> {
    let Some(rel) = rel.filter(|r| !r.trim().is_empty() && *r != ".") else { return Ok(root.to_path_buf()) };
    let full = within(root, rel)?;
    let mut at = root.to_path_buf();
    let tail = full.strip_prefix(root).unwrap_or(&full).to_path_buf();
    let parts: Vec<_> = tail.components().collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        let shown = at.strip_prefix(root).unwrap_or(&at).display().to_string();
        match std::fs::metadata(&at) {
            Err(_) => {
                return Err(ToolError::not_found(format!(
                    "path {rel:?}: {shown} does not exist under {}",
                    root.display()
                )))
            }
            Ok(m) if i + 1 < parts.len() && !m.is_dir() => {
                return Err(ToolError::invalid_params(format!("path {rel:?}: {shown} is not a directory")))
            }
            Ok(_) => {}
        }
    }
    Ok(full)
}

/// A file's text, or why it cannot be read as UTF-8.
pub fn read_utf8(p: &Path) -> Result<String, String> {
    let bytes = std::fs::read(p).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// Renames staged temporaries onto their targets, in order (the last step of an
/// all-or-nothing multi-file write: every file is staged beside its target first). On a
/// failed rename the temporaries not yet renamed are removed and the error says which
/// target failed, by index: the targets before it already have their new content.
pub fn rename_staged(staged: &[(PathBuf, PathBuf)]) -> Result<(), (usize, std::io::Error)> {
    for (i, (tmp, target)) in staged.iter().enumerate() {
        if let Err(e) = std::fs::rename(tmp, target) {
            discard_staged(&staged[i..]);
            return Err((i, e));
        }
    }
    Ok(())
}

/// Writes `content` to a new temporary file beside `target` and returns its path: the
/// first step of an all-or-nothing write (then [`rename_staged`]). The file is created
/// with `O_CREAT | O_EXCL`, so nothing already at its name (a file, or a symbolic link a
/// repository committed or a sandboxed command planted) is ever opened or written
/// through, and its name has a random part, so it cannot be planted in advance. It gets
/// `mode` when given (the mode of the file it replaces), else the default mode of a new
/// file under the process's umask. Nothing is left behind when writing fails.
pub fn write_temp_beside(target: &Path, tag: &str, content: &[u8], mode: Option<u32>) -> Result<PathBuf, String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = target.parent().ok_or_else(|| format!("{}: no parent directory", target.display()))?;
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.forge-{tag}-{}", ulid::Ulid::new()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let written = f.write_all(content).and_then(|()| match mode {
        // On the open file (fchmod), not by name.
        Some(m) => f.set_permissions(std::fs::Permissions::from_mode(m)),
        None => Ok(()),
    });
    if let Err(e) = written {
        drop(f);
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", tmp.display()));
    }
    Ok(tmp)
}

/// Removes staged temporaries (a multi-file write that is given up before any rename).
pub fn discard_staged(staged: &[(PathBuf, PathBuf)]) {
    for (tmp, _) in staged {
        let _ = std::fs::remove_file(tmp);
    }
}
