//! Paths of the file tools (`apply-patch`, `grep`, `glob`): the caller's root and the
//! guards that keep every path inside it.
//!
//! The root is the loop worktree for a loop session, else the project root. A path is
//! relative to the root (an absolute path must lie inside it); `..` may not leave it, and
//! the deepest existing directory of a path, with symlinks resolved, must still be inside
//! it, so a committed symlink cannot lead a write or a search elsewhere.

use std::path::{Component, Path, PathBuf};

use forge_domain::text::echo;
use forge_protocol::ToolError;

/// `s` for an error message, cut after 200 bytes (a path derived from a caller's input).
fn cut(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= 200 {
        return s.into();
    }
    format!("{}… ({} bytes in all)", forge_domain::text::prefix(s, 200), s.len()).into()
}

use crate::{loop_scope, ToolCtx};

/// The edit lock of a root (the project or a loop's worktree), held while it lives:
/// [`lock_edits`]. Empty where the root's file system cannot lock it.
pub struct EditLock {
    _dir: Option<std::fs::File>,
}

/// How long an edit waits for the edit that holds its root's lock.
pub const EDIT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Takes `root`'s edit lock, waiting up to [`EDIT_LOCK_WAIT`] for the edit that holds it
/// (then 1005, busy: nothing was changed). The tools that write files (apply-patch,
/// ast-grep-replace) read the files, work out their new content and rename it into place;
/// two such calls at once on one file left only the later one's content, though both said
/// they had applied theirs (found by a review: 20 patches sent at once, 3 landed). Under the
/// lock a call reads what the previous one wrote. It is the kernel's `flock` of the root
/// directory: across threads and processes (each `forge-lsp call` in its own, servers of
/// the same project), released when its holder ends however it ends. A file system that
/// cannot lock a directory so (NFS emulates `flock` with byte-range locks, which need a
/// file open for writing) gives no lock: the edit goes on without it, as before, and the
/// log says so once. Readers (grep, glob, searches, dry runs) do not take it.
pub fn lock_edits(root: &Path) -> Result<EditLock, ToolError> {
    lock_edits_within(root, EDIT_LOCK_WAIT)
}

fn lock_edits_within(root: &Path, wait: std::time::Duration) -> Result<EditLock, ToolError> {
    let dir = std::fs::File::open(root).map_err(|e| {
        ToolError::internal(format!(
            "cannot open {} to lock it for the edit (no file was changed): {e}",
            root.display()
        ))
    })?;
    let deadline = std::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match dir.try_lock() {
            Ok(()) => return Ok(EditLock { _dir: Some(dir) }),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::warn!(
                        "cannot lock {} for file edits ({e}); edits of it at the same moment are not kept apart",
                        root.display()
                    )
                });
                return Ok(EditLock { _dir: None });
            }
        }
        if std::time::Instant::now() >= deadline {
            return Err(ToolError::busy(format!(
                "another edit of {} has held its lock for {} s; nothing was changed, try again",
                root.display(),
                wait.as_secs_f64()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    }
}

/// The directory the caller's file tools work in.
pub fn caller_root(ctx: &ToolCtx) -> Result<PathBuf, ToolError> {
    let root = match loop_scope::caller_loop(ctx)? {
        Some(row) if ctx.caller().binding.is_some() => PathBuf::from(row.worktree_dir),
        // A project of a repository without a work tree (a bare one) is rooted in git's
        // own directory: its files are hooks and objects, not code to edit.
        _ if ctx.env.project.repo_root.is_none() && !ctx.env.project.is_global() => {
            return Err(ToolError::precondition(format!(
                "{} is in a git repository without a work tree (a bare repository); the file tools work in a work tree: run from a clone",
                ctx.env.project.root.display()
            )))
        }
        // The repository's work tree, also for an editor opened on a folder inside it: the
        // paths these tools take and print are the ones the review tools store
        // (`Project::findings_root`), one base for every path of a connection.
        _ => ctx.env.project.findings_root().to_path_buf(),
    };
    let root = root
        .canonicalize()
        .map_err(|e| ToolError::precondition(format!("the root {} cannot be used: {e}", root.display())))?;
    // A folder inside a git directory (an editor opened `.git`) is git's files too, also
    // when its repository's work tree would be the root.
    for dir in [&root, &ctx.env.project.root] {
        if in_git_dir(dir) {
            return Err(ToolError::precondition(format!(
                "{} is inside a git directory (.git); the file tools work in the project's work tree, not in git's own files",
                dir.display()
            )));
        }
    }
    Ok(root)
}

/// The answer of a search whose caller gave up on it ([`crate::ToolCtx::cancel_flag`]):
/// nobody reads it; the walk stopped early.
pub fn search_cancelled(tool: &str) -> ToolError {
    ToolError::internal(format!("forge.{tool} was cancelled by its caller"))
}

/// Whether the caller of a search gave up on it.
pub fn gave_up(flag: &std::sync::atomic::AtomicBool) -> bool {
    flag.load(std::sync::atomic::Ordering::Acquire)
}

/// An absolute path spelled through another name of the root (a symbolic link to the
/// project's folder or above it: the caller's working directory as its shell names it,
/// macOS's `/tmp` for `/private/tmp`), as the same path under `root` (canonical); `None`
/// for any other path. Only the directories are resolved: the last component is kept as
/// named (a link there is the link, not what it points to), and a path with `..` is left
/// as it is (refused as outside the root by the caller, as before).
pub fn through_root_alias(root: &Path, raw: &str) -> Option<PathBuf> {
    let p = Path::new(raw);
    if !p.is_absolute() || p.starts_with(root) || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return None;
    }
    // The path names the root itself (the link to it): only when its directory is not in
    // the root, where its last component is a name in the project (a link there to the
    // root is a link to delete, not the root).
    let whole = || p.canonicalize().ok().filter(|real| real == root);
    let Some(name) = p.file_name() else { return whole() };
    let mut dir = p.parent()?.to_path_buf();
    let mut below: Vec<std::ffi::OsString> = vec![];
    loop {
        if let Ok(real) = dir.canonicalize() {
            if !real.starts_with(root) {
                return whole();
            }
            let mut out = real;
            out.extend(below.iter().rev());
            out.push(name);
            return Some(out);
        }
        let Some(last) = dir.file_name() else { return whole() };
        below.push(last.to_owned());
        if !dir.pop() {
            return whole();
        }
    }
}

/// `rel` as a path inside `root` (which is canonical), or an error naming the path.
pub fn within(root: &Path, rel: &str) -> Result<PathBuf, ToolError> {
    within_from(root, rel, false)
}

/// [`within`] without following the path's last component: its directory must be inside
/// the root, the name itself may be a symbolic link to anywhere. For a link that is
/// removed (renamed in its directory, never followed), not for anything read or written.
pub fn within_unfollowed(root: &Path, rel: &str) -> Result<PathBuf, ToolError> {
    within_from(root, rel, true)
}

fn within_from(root: &Path, rel: &str, unfollowed: bool) -> Result<PathBuf, ToolError> {
    let bad = |why: &str| ToolError::invalid_params(format!("path {} {why}", echo(rel)));
    if rel.is_empty() || rel.contains('\0') {
        return Err(bad("is empty or contains NUL"));
    }
    let raw = Path::new(rel);
    let rel_part: PathBuf = if raw.is_absolute() {
        let aliased = through_root_alias(root, rel);
        aliased
            .as_deref()
            .unwrap_or(raw)
            .strip_prefix(root)
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
    let mut probe = if unfollowed { out.parent().map_or_else(|| out.clone(), Path::to_path_buf) } else { out.clone() };
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
                    "path {}: {} does not exist under {}",
                    echo(rel),
                    cut(&shown),
                    root.display()
                )))
            }
            Ok(m) if i + 1 < parts.len() && !m.is_dir() => {
                return Err(ToolError::invalid_params(format!(
                    "path {}: {} is not a directory",
                    echo(rel),
                    cut(&shown)
                )))
            }
            // `a.txt/` names a directory: a file there is a non-directory component too.
            Ok(m) if i + 1 == parts.len() && !m.is_dir() && rel.trim_end().ends_with('/') => {
                return Err(ToolError::invalid_params(format!(
                    "path {}: {} is not a directory (the path ends with /)",
                    echo(rel),
                    cut(&shown)
                )))
            }
            // A FIFO, socket or device is never read by the searches: named as the path,
            // it is refused by name, not answered with "no matches".
            Ok(m) if i + 1 == parts.len() && !m.is_dir() && !m.is_file() => {
                return Err(ToolError::invalid_params(format!(
                    "path {}: {} is not a regular file or a directory",
                    echo(rel),
                    cut(&shown)
                )))
            }
            Ok(_) => {}
        }
    }
    Ok(full)
}

/// The gitignore-aware walk the file tools share: hidden files included, git's own
/// directories (the root's and nested repositories') never entered, symlinked directories
/// not followed.
pub fn walk(root: &Path, start: &Path) -> ignore::Walk {
    use std::os::unix::fs::MetadataExt;
    // Told apart by device and inode, not by name: a start reached through a link
    // (`alias/meta`) names the same directory another way.
    let hidden: Vec<(u64, u64)> =
        git_dirs_within(root).iter().filter_map(|d| std::fs::metadata(d).ok()).map(|m| (m.dev(), m.ino())).collect();
    // What git ignores, and nothing more: `.gitignore` files up to the repository's root
    // and `.git/info/exclude` (not above the root, which git never reads: `require_git`;
    // not ripgrep's `.ignore` files). Review YB: a `~/.gitignore` of `*` hid every project
    // in the home folder, and a `.ignore` hid committed files.
    ignore::WalkBuilder::new(start)
        .hidden(false)
        .git_global(false)
        .ignore(false)
        .require_git(true)
        .filter_entry(move |e| {
            !forge_domain::path::is_git_dir_name(e.file_name().as_encoded_bytes())
                && (hidden.is_empty()
                    || !e.file_type().is_some_and(|t| t.is_dir())
                    || !std::fs::metadata(e.path()).is_ok_and(|m| hidden.contains(&(m.dev(), m.ino()))))
        })
        .build()
}

/// The git directories of the repository whose work tree is `root` that lie inside it
/// under a name other than `.git` (`git init --separate-git-dir=<root>/meta`, or
/// `GIT_DIR` set up by hand), as paths under `root`: the file tools treat them as they
/// treat `.git`. Found from `<root>/.git` when it is a file (`gitdir: <path>`), and the
/// `commondir` beside that; nothing for a usual `.git` directory (no cost but one stat).
pub fn git_dirs_within(root: &Path) -> Vec<PathBuf> {
    let dot_git = root.join(".git");
    if !std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        return vec![];
    }
    let Ok(text) = std::fs::read_to_string(&dot_git) else { return vec![] };
    let Some(gitdir) = text.lines().find_map(|l| l.strip_prefix("gitdir:")).map(str::trim) else { return vec![] };
    let gitdir = root.join(gitdir);
    let mut dirs = vec![gitdir.clone()];
    if let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) {
        dirs.push(gitdir.join(common.trim()));
    }
    let canon_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .filter_map(|d| d.strip_prefix(&canon_root).ok().map(|rel| root.join(rel)))
        .filter(|d| d != root)
        .collect();
    out.dedup();
    out
}

/// Whether `rel` (relative to `root`, its links resolved) is, or lies in, a git directory:
/// a `.git` component, or one of [`git_dirs_within`] `root`.
pub fn in_git_dir_of(root: &Path, rel: &Path, hidden: &[PathBuf]) -> bool {
    in_git_dir(rel) || hidden.iter().any(|h| h.strip_prefix(root).is_ok_and(|h| rel.starts_with(h)))
}

/// Whether `p` has a `.git` component: it is, or lies in, a git directory (the file tools
/// never read or write git's own files).
pub fn in_git_dir(p: &Path) -> bool {
    p.components().any(|c| forge_domain::path::is_git_dir_name(c.as_os_str().as_encoded_bytes()))
}

/// Refuses a start path inside a git directory (`.git`, the project's or a nested
/// repository's): the file tools never look there, whatever their walk's start (the walk
/// skips `.git` below its start, not the start itself).
pub fn outside_git(root: &Path, start: &Path, rel: Option<&str>) -> Result<(), ToolError> {
    // Resolved: a committed symlink to `.git` is the git directory too.
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (root, start) = (canon(root), canon(start));
    let tail = start.strip_prefix(&root).unwrap_or(&start);
    if in_git_dir_of(&root, tail, &git_dirs_within(&root)) {
        return Err(ToolError::invalid_params(format!(
            "path {} is inside a git directory (.git); grep, glob and the ast-grep tools do not look there",
            echo(rel.unwrap_or_default())
        )));
    }
    Ok(())
}

/// The regular file `p` opened for reading, as [`read_utf8`] opens it: its links resolved
/// once and inside `root` (canonical), then opened through `forge_core::beneath` without
/// following any.
fn open_inside(root: &Path, p: &Path) -> Result<std::fs::File, String> {
    let rel = real_rel(root, p)?;
    forge_core::beneath::open_file(root, &rel).map_err(|e| e.to_string())
}

/// `p`'s real place relative to `root` (canonical), its links resolved; an error names
/// it when that is outside the root.
pub fn real_rel(root: &Path, p: &Path) -> Result<PathBuf, String> {
    let real = p.canonicalize().map_err(|e| format!("{}: {e}", p.display()))?;
    real.strip_prefix(root)
        .map(Path::to_path_buf)
        .map_err(|_| format!("{} leads out of the root {} through a symlink", p.display(), root.display()))
}

/// The first ten of `names` (paths a file tool's answer names), comma separated, with
/// `, …` when there are more: one reply must not list ten thousand unreadable files.
pub fn some_of(names: &[String]) -> String {
    // Each on one line of the text (a name may hold a line break).
    let shown: Vec<_> = names.iter().take(10).map(|n| forge_domain::text::on_one_line(n)).collect();
    let more = if names.len() > shown.len() { ", …" } else { "" };
    format!("{}{more}", shown.join(", "))
}

/// How many names a file tool's `data` lists at most in one list (files not searched,
/// files changed); the count of all of them is beside it (`<list>Total`). One reply must
/// stay far under the 64 MiB a message may hold: 20,000 long paths did not (review YB).
pub const MAX_LISTED: usize = 1000;

/// The first [`MAX_LISTED`] of `items`.
pub fn listed<T>(items: &[T]) -> &[T] {
    &items[..items.len().min(MAX_LISTED)]
}

/// A file's text, or why it cannot be read as UTF-8.
///
/// Its links (a link inside the root named as the path included) are resolved once and
/// must stay inside `root` (canonical); the file is then read relative to the root
/// through `forge_core::beneath`, never following a link: a file or directory swapped
/// for a link after that (by a command racing the tool) is refused, never read through
/// to a file outside the root.
pub fn read_utf8(root: &Path, p: &Path) -> Result<String, String> {
    read_utf8_within(root, p, u64::MAX)
}

/// [`read_utf8`] for a file of at most `max` bytes; a larger one (also one that grows past
/// `max` while it is read) is an error that gives its size.
pub fn read_utf8_within(root: &Path, p: &Path, max: u64) -> Result<String, String> {
    use std::io::Read;
    let file = open_inside(root, p)?;
    let too_big = |n: u64| format!("{n} bytes, over the limit of {max}");
    match file.metadata() {
        Ok(m) if m.len() > max => return Err(too_big(m.len())),
        _ => {}
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        // It grew while it was read: its size is not known.
        return Err(format!("more than {max} bytes, over the limit of {max}"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// The places forge-lsp reads its trusted project configuration from, resolved:
/// `.forge/config.toml` and `.forge/tools/` of the tool root, of the project (the folder the
/// editor opened, which may lie inside the repository) and of the plugin tools' project
/// (`plugins::project_dir`), and where the links in them lead. (Any `.forge/config.toml`
/// or `.forge/tools/` by name is refused too: `forge_domain::path::is_forge_config`.) The file tools never write there ([`writes_forge_config`]):
/// the server trusts such files when they are not committed.
pub fn forge_config_places(ctx: &ToolCtx, root: &Path) -> Vec<PathBuf> {
    let bases = [root.to_path_buf(), ctx.env.project.root.clone(), crate::plugins::project_dir(ctx.env)];
    let mut out = vec![];
    for base in bases {
        let base = base.canonicalize().unwrap_or(base);
        // `.forge` itself may be a link (to `conf/`): what it leads to is the place.
        let dir = base.join(".forge");
        let dir = dir.canonicalize().unwrap_or(dir);
        let mut places = vec![dir.join("config.toml"), dir.join("tools")];
        // A link in there (the configuration file, the tools folder, a tool's script)
        // leads to a file the server reads as configuration too.
        places.extend(links_within(&dir.join("config.toml"), 0));
        places.extend(links_within(&dir.join("tools"), 0));
        for p in places {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Where the links at or under `p` lead (resolved), a few folders deep: what the plugin
/// loader, which follows links, reads through them.
fn links_within(p: &Path, depth: usize) -> Vec<PathBuf> {
    const DEPTH: usize = 3;
    const MAX_ENTRIES: usize = 256;
    let mut out = vec![];
    let Ok(meta) = std::fs::symlink_metadata(p) else { return out };
    if meta.file_type().is_symlink() {
        if let Ok(real) = p.canonicalize() {
            out.push(real);
        }
    }
    if depth < DEPTH && p.is_dir() {
        if let Ok(entries) = std::fs::read_dir(p) {
            for e in entries.flatten().take(MAX_ENTRIES) {
                out.extend(links_within(&e.path(), depth + 1));
            }
        }
    }
    out
}

/// Whether a write of `rel` (relative to the canonical `root`, its directories' links
/// resolved: [`resolved_rel`]) would change forge-lsp's project configuration: by name
/// (`forge_domain::path::is_forge_config`) or by place (one of [`forge_config_places`] or
/// under one).
pub fn writes_forge_config(places: &[PathBuf], root: &Path, rel: &Path) -> bool {
    let target = root.join(rel);
    forge_domain::path::is_forge_config(rel) || places.iter().any(|p| target == *p || target.starts_with(p))
}

/// `path` (a path inside the canonical `root`, as [`within`] returns it) relative to the
/// root, with the links of its directories resolved: what a write relative to the root
/// through `forge_core::beneath` walks, which refuses any link on the way. A link inside
/// the root to a directory inside it is followed here, once, after [`within`] checked it;
/// a link at the file's own name is kept (a write replaces it). An error names the path
/// when its directories lead out of the root.
pub fn resolved_rel(root: &Path, path: &Path) -> Result<PathBuf, String> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(format!("{} names no file", path.display()));
    };
    // The deepest existing directory, resolved, then the components still to be created.
    let mut probe = dir.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = vec![name.to_os_string()];
    let real = loop {
        match probe.canonicalize() {
            Ok(real) => break real,
            Err(_) => match (probe.file_name().map(|n| n.to_os_string()), probe.parent()) {
                (Some(n), Some(p)) => {
                    rest.push(n);
                    probe = p.to_path_buf();
                }
                _ => return Err(format!("{} has no existing directory", path.display())),
            },
        }
    };
    let mut rel = real
        .strip_prefix(root)
        .map(Path::to_path_buf)
        .map_err(|_| format!("{} leads out of the root {} through a symlink", path.display(), root.display()))?;
    rel.extend(rest.iter().rev());
    Ok(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_directory_is_one_in_any_case() {
        for (p, is) in
            [(".git/config", true), ("a/.GIT/hooks/x", true), (".Git", true), ("x.git/a", false), ("a/b", false)]
        {
            assert_eq!(in_git_dir(Path::new(p)), is, "{p}");
        }
    }

    /// One edit lock of a root at a time: another waits for it, and past its wait is told
    /// the root is busy; another root's lock is its own.
    #[test]
    fn an_edit_waits_for_the_roots_lock_then_is_told_busy() {
        use std::time::{Duration, Instant};
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let held = lock_edits(&a).unwrap();
        assert!(held._dir.is_some(), "this file system locks directories");
        let e = lock_edits_within(&a, Duration::from_millis(100)).err().expect("busy");
        assert_eq!(e.kind.code(), 1005, "{e:?}");
        assert!(e.message.contains("has held its lock") && e.message.contains("nothing was changed"), "{e:?}");
        let _other = lock_edits_within(&b, Duration::from_millis(100)).expect("another root");
        // Released by another thread while this one waits: taken then.
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                drop(held);
            });
            lock_edits_within(&a, Duration::from_secs(20)).expect("taken once released");
        });
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    /// A file is read through a link inside the root, never through one that leads out,
    /// and not when it is not UTF-8.
    #[test]
    fn files_are_read_only_inside_the_root() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let root = root.canonicalize().unwrap();
        std::fs::write(root.join("a.rs"), "fn a() {}").unwrap();
        std::fs::write(d.path().join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink("a.rs", root.join("in.rs")).unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), root.join("out.rs")).unwrap();
        std::fs::write(root.join("bin"), [0xff, 0xfe]).unwrap();
        assert_eq!(read_utf8(&root, &root.join("a.rs")).unwrap(), "fn a() {}");
        assert_eq!(read_utf8(&root, &root.join("in.rs")).unwrap(), "fn a() {}");
        let e = read_utf8(&root, &root.join("out.rs")).unwrap_err();
        assert!(e.contains("leads out of the root"), "{e}");
        assert_eq!(read_utf8(&root, &root.join("bin")).unwrap_err(), "not UTF-8 text");
    }
}
