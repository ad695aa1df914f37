//! `forge.apply-patch`: applies an agent's patch to the caller's root (the project, or the
//! loop worktree for loop sessions), with the rescue rules of `forge_domain::patch` (stale
//! context and unicode/whitespace drift matched tolerantly, authored lines written exactly,
//! EOL style and final newline kept, ambiguity an error that names the candidates).
//!
//! All files of a patch are written or none: every new content goes to a temporary file
//! beside its target first, then all are renamed into place; any failure before the
//! renames removes the temporaries and changes nothing. The files are touched off the store
//! thread ([`ToolCtx::after`]), under the root's edit lock ([`crate::files::lock_edits`]):
//! two patches of one file at once both land.

use std::path::{Path, PathBuf};

use forge_domain::patch::{parse_patch, plan_patch, FileChange, Patch, PatchError, PatchOp, Unreadable};
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::ToolCtx;
use crate::files::{caller_root, read_utf8_within, resolved_rel, within, within_unfollowed};
use forge_core::beneath::{self, Staged};

pub const NEEDS_SERVER: bool = false;

/// Runs on the store's writer thread as one grouped write (crate docs); its store part
/// only reads, and its file edits run after the commit (`ctx.after`).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Apply a patch to files under your root (the project, or your loop's worktree). Format: *** Begin Patch / *** Add File: <path> (+ lines) / *** Update File: <path> (optional *** Move to: <path>) with @@ hunks of ' ' context, '-' removed and '+' added lines / *** Delete File: <path> / *** End Patch. Stale context and whitespace or unicode drift (curly quotes, dashes, non-breaking spaces, trailing blanks) are matched tolerantly; your + lines are written exactly; each file keeps its line endings and final-newline state. A malformed patch, a path outside the root or an ambiguous hunk is refused before anything is written; all files are written or none.";

pub type Input = forge_protocol::inputs::ApplyPatchInput;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let root = caller_root(ctx)?;
    // Parsed once, now: a malformed patch fails before anything else happens.
    let mut patch = parse_patch(&input.patch).map_err(|e| ToolError::invalid(format!("apply-patch failed: {e}")))?;
    // An absolute path through another name of the root (a linked folder) is the path
    // under the root: the domain compares paths as text.
    for op in &mut patch.ops {
        let paths: Vec<&mut String> = match op {
            PatchOp::Add { path, .. } | PatchOp::Delete { path, .. } => vec![path],
            PatchOp::Update { path, move_to, .. } => std::iter::once(path).chain(move_to.as_mut().map(|m| &mut m.path)).collect(),
        };
        for path in paths {
            if let Some(real) = crate::files::through_root_alias(&root, path).and_then(|r| r.to_str().map(str::to_string)) {
                *path = real;
            }
        }
    }
    let places = crate::files::forge_config_places(ctx, &root);
    ctx.after = Some(Box::new(move || apply(&root, &patch, &places)));
    Ok(CommandResult { text: String::new(), data: forge_protocol::Data::default() })
}

fn apply(root: &Path, patch: &Patch, config_places: &[PathBuf]) -> Result<CommandResult, ToolError> {
    let fail = |m: String| ToolError::invalid(format!("apply-patch failed: {m}"));
    let root_text = root.to_string_lossy().into_owned();
    check_paths(root, &root_text, patch, config_places)?;
    // From the first read to the last rename: another edit of the root waits.
    let _lock = crate::files::lock_edits(root)?;
    let plan = plan_patch(patch, Some(&root_text), |rel| {
        // The last component unfollowed: a link is found as a link (and may be deleted);
        // anything else at the name is checked as `within` checks it.
        let p = within_unfollowed(root, rel).map_err(|e| Unreadable::from(e.message))?;
        match std::fs::symlink_metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{e}").into()),
            // The link itself may be deleted (it is renamed aside in its directory, never
            // followed); what it points to is not edited through it.
            Ok(m) if m.file_type().is_symlink() => Err(Unreadable {
                message: "a symbolic link: apply-patch edits regular files only (Delete File removes the link)".into(),
                removable: true,
            }),
            Ok(m) if !m.file_type().is_file() => Err("not a regular file".to_string().into()),
            Ok(_) => within(root, rel)
                .map_err(|e| Unreadable::from(e.message))
                .and_then(|p| {
                    read_utf8_within(root, &p, MAX_FILE_BYTES).map(Some).map_err(|m| {
                        // Too large to edit in memory, or not text (an image, an archive):
                        // it may still be deleted (not read).
                        if m.contains("over the limit of") {
                            Unreadable {
                                message: format!("{m} bytes apply-patch edits (Delete File still removes it)"),
                                removable: true,
                            }
                        } else if m.contains("not UTF-8") {
                            Unreadable {
                                message: format!("{m}: apply-patch edits and moves text files only (Delete File still removes it)"),
                                removable: true,
                            }
                        } else {
                            Unreadable { message: m, removable: false }
                        }
                    })
                }),
        }
    })
    .map_err(|e| match e {
        // Checked above already; a path the domain refuses is the caller's parameter too.
        PatchError::BadPath { .. } => ToolError::invalid_params(format!("apply-patch failed: {e}")),
        e => fail(e.to_string()),
    })?;
    // Stage every write, then commit them all.
    let mut stager = beneath::Stager::new(root);
    let mut staged: Vec<Staged> = vec![];
    let mut removals: Vec<(PathBuf, PathBuf)> = vec![];
    for change in &plan.changes {
        let step = match change {
            FileChange::Add { path, content } | FileChange::Update { path, content } => {
                stage(&mut stager, root, path, content, beneath::Mode::KeepOr(0o666)).map(|s| staged.push(s))
            }
            // A moved file keeps its mode (an executable stays one, a private file private).
            FileChange::Move { from, to, content } => mode_of(root, from)
                .and_then(|mode| read_only_unchanged(root, from, mode, content).map(|()| mode))
                .and_then(|mode| stage(&mut stager, root, to, content, mode))
                .map(|s| staged.push(s))
                .and_then(|()| removal(root, from).map(|r| removals.push(r))),
            FileChange::Delete { path } => removal(root, path).map(|r| removals.push(r)),
        };
        // Dropping what was staged removes its temporaries: nothing is written.
        step.map_err(fail)?;
    }
    // Files to remove are moved aside first: one that cannot be removed fails the patch
    // before any file changes (dropping what was set aside puts it back).
    let mut aside = vec![];
    for (shown, rel) in &removals {
        match stager.set_aside(rel) {
            Ok(Some(a)) => aside.push((a, shown)),
            Ok(None) => {}
            Err(e) => return Err(fail(format!("cannot remove {}: {e}; nothing was changed", shown.display()))),
        }
    }
    // Renames within one directory do not fail for space; report what happened.
    let targets: Vec<PathBuf> = staged.iter().map(|s| s.target().to_path_buf()).collect();
    let committed = beneath::commit_all(staged);
    if committed.is_ok() {
        stager.keep_made_dirs();
    }
    if let Err((i, e)) = committed {
        let shown = |p: &PathBuf| p.strip_prefix(root).unwrap_or(p).display().to_string();
        let written: Vec<String> = targets[..i].iter().map(shown).collect();
        let kept = if written.is_empty() {
            "no file was changed".to_string()
        } else {
            format!("already written with their new content: {}", written.join(", "))
        };
        return Err(fail(format!(
            "cannot write {}: {e} ({kept}; files to remove were kept)",
            shown(&targets[i])
        )));
    }
    let mut left_behind = vec![];
    for (a, shown) in aside {
        if let Err(e) = a.finish() {
            tracing::warn!("apply-patch: {} was removed but its moved-aside copy could not be unlinked: {e}", shown.display());
            left_behind.push(format!("{} ({e})", shown.display()));
        }
    }
    let mut text = format!("Patch applied.\n{}", plan.summary());
    if !left_behind.is_empty() {
        text.push_str(&format!(
            "\nNote: removed, but a hidden `.forge-*.removed` copy could not be unlinked beside: {}",
            left_behind.join(", ")
        ));
    }
    // Paths only: the contents are in the files now.
    let changes: Vec<_> = plan
        .changes
        .iter()
        .map(|c| match c {
            FileChange::Add { path, .. } => json!({ "kind": "add", "path": path }),
            FileChange::Update { path, .. } => json!({ "kind": "update", "path": path }),
            FileChange::Delete { path } => json!({ "kind": "delete", "path": path }),
            FileChange::Move { from, to, .. } => json!({ "kind": "move", "path": to, "from": from }),
        })
        .collect();
    Ok(CommandResult { text, data: json!({ "changes": changes, "notes": plan.notes }).into() })
}

/// Every path of the patch inside the root, before anything is read or written: a path
/// that leaves the root (`..`, an absolute path elsewhere, a symlinked directory) is an
/// invalid parameter (-32602) naming it, as for the other file tools.
fn check_paths(root: &Path, root_text: &str, patch: &Patch, config_places: &[PathBuf]) -> Result<(), ToolError> {
    use forge_domain::patch::{normalize_path, PatchOp};
    // (path, whether its last component is left unfollowed: a deleted path may be a link
    // to anywhere, which is removed, not followed).
    let paths = patch.ops.iter().flat_map(|op| match op {
        PatchOp::Add { path, .. } => vec![(path, false)],
        PatchOp::Delete { path, .. } => vec![(path, true)],
        PatchOp::Update { path, move_to, .. } => {
            std::iter::once((path, false)).chain(move_to.as_ref().map(|m| (&m.path, false))).collect()
        }
    });
    // The file each path names, with its directories' links resolved: two spellings of one
    // file (`src/a` and `alias/a`, where `alias` links to `src`) would each be planned on
    // their own, and one's change lost.
    let mut files: std::collections::HashMap<PathBuf, String> = std::collections::HashMap::new();
    // (relative path, deleted) of each path: none may lie beneath a deleted one.
    let mut named: Vec<(String, bool)> = vec![];
    let hidden = crate::files::git_dirs_within(root);
    for (raw, unfollowed) in paths {
        let rel = normalize_path(raw, Some(root_text))
            .map_err(|why| ToolError::invalid_params(format!("apply-patch failed: path {}: {why}", forge_domain::text::echo(raw))))?;
        let checked = if unfollowed { within_unfollowed(root, &rel) } else { within(root, &rel) };
        let target =
            checked.map_err(|e| ToolError::invalid_params(format!("apply-patch failed: {}", e.message)))?;
        let file = resolved_rel(root, &target).map_err(|e| ToolError::invalid_params(format!("apply-patch failed: {e}")))?;
        // A link on the way to git's directory is that directory (the lexical check is the
        // domain's, in `normalize_path`).
        if crate::files::in_git_dir(&file) {
            return Err(ToolError::invalid_params(format!(
                "apply-patch failed: path {} leads into a git directory (.git) through a symbolic link, which apply-patch does not change",
                forge_domain::text::echo(raw)
            )));
        }
        // forge-lsp's project configuration: of the tool root, of the folder the editor
        // opened inside the repository, reached through a link (`cfg` -> `.forge`, or a
        // `.forge` that is a link).
        if crate::files::writes_forge_config(config_places, root, &file) {
            return Err(ToolError::invalid_params(format!(
                "apply-patch failed: path {} {}",
                forge_domain::text::echo(raw),
                forge_domain::patch::FORGE_CONFIG_REFUSAL
            )));
        }
        // The repository's own git directory under another name (`--separate-git-dir`).
        if crate::files::in_git_dir_of(root, &file, &hidden) {
            return Err(ToolError::invalid_params(format!(
                "apply-patch failed: path {} is inside the repository's git directory, which apply-patch does not change",
                forge_domain::text::echo(raw)
            )));
        }
        match files.get(&file) {
            Some(other) if *other != rel => {
                return Err(ToolError::invalid_params(format!(
                    "apply-patch failed: '{other}' and '{rel}' are the same file (a directory on the way is a symlink); name it one way in the patch"
                )))
            }
            _ => {
                files.insert(file, rel.clone());
            }
        }
        named.push((rel, unfollowed));
    }
    // A path beneath one the patch deletes (a link to a directory, or a file that would
    // become one) would be written through what is removed, or not at all. Compared by
    // place, not spelling: each directory on a path, its own directories' links resolved,
    // against each deleted path resolved the same way (`alias/link/f` where `alias` leads
    // to `real` lies beneath a deleted `real/link`).
    let place = |rel: &str| within_unfollowed(root, rel).ok().and_then(|t| resolved_rel(root, &t).ok());
    let deleted: Vec<(PathBuf, &String)> =
        named.iter().filter(|(_, d)| *d).filter_map(|(rel, _)| place(rel).map(|p| (p, rel))).collect();
    if deleted.is_empty() {
        return Ok(());
    }
    for (rel, _) in &named {
        // A deleted link that the lookup of this path's directories goes through, however
        // it is spelled (`alias2/f` where `alias2` leads to a deleted `dir-link`).
        let through = links_on_the_way(root, rel);
        if let Some((_, name)) = deleted.iter().find(|(d, _)| through.contains(d)) {
            return Err(ToolError::invalid(format!(
                "apply-patch failed: '{rel}' is reached through '{name}', which this patch deletes; nothing was changed"
            )));
        }
        let mut dir = rel.as_str();
        while let Some((parent, _)) = dir.rsplit_once('/') {
            dir = parent;
            if let Some((_, name)) = place(dir).and_then(|p| deleted.iter().find(|(d, _)| *d == p).cloned()) {
                return Err(ToolError::invalid(format!(
                    "apply-patch failed: '{rel}' lies beneath '{name}', which this patch deletes; nothing was changed"
                )));
            }
        }
    }
    Ok(())
}

/// Largest file apply-patch reads to edit: it holds a file's text a few times over while
/// it plans and writes the change (a 175 MB file took 700 MB), in the server every editor
/// and agent shares.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Stages `content` for `rel` (creating its directories inside the root) through
/// `forge_core::beneath`: written and later renamed relative to directories opened
/// without following links, so a directory swapped for a link after the checks cannot
/// redirect the write.
fn stage(stager: &mut beneath::Stager, root: &Path, rel: &str, content: &str, mode: beneath::Mode) -> Result<Staged, String> {
    let target = within(root, rel).map_err(|e| e.message)?;
    let under = resolved_rel(root, &target)?;
    // A file there that cannot be replaced (append-only or immutable) fails the patch now,
    // before anything is written, not when it is renamed over. So does a read-only file (no
    // write permission bit), even for root, as ast-grep-replace refuses one: its mode says
    // not to write it, though the rename would need only the directory's permission.
    if let (Some(dir), Some(name)) = (under.parent(), under.file_name()) {
        if let Ok(d) = beneath::open_dir(root, dir, false) {
            if let Some(st) = beneath::stat_at(&d, name).ok().filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG) {
                if beneath::read_only_mode(&st) {
                    return Err(format!("cannot write {}: it is read-only (no write permission bit)", target.display()));
                }
                beneath::check_replaceable_at(&d, name)
                    .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
            }
        }
    }
    stager
        .stage(&under, content.as_bytes(), mode, true, false)
        .map_err(|e| format!("cannot write {}: {e}", target.display()))
}

/// The permission bits of the file a move takes its content from, for its new name:
/// read, write and execute for each class. Not its set-id bits: the new file belongs to
/// the server's user (a server running as root would make a user's set-uid program a
/// root one).
fn mode_of(root: &Path, rel: &str) -> Result<beneath::Mode, String> {
    let path = within(root, rel).map_err(|e| e.message)?;
    let resolved = resolved_rel(root, &path)?;
    // Read as `read_utf8` reads: directories opened without following links, and the file
    // itself never through one (a link swapped in since would give its own 0777).
    let (dir, name) = match (resolved.parent(), resolved.file_name()) {
        (Some(d), Some(n)) => (d, n),
        _ => return Err(format!("{} names no file", path.display())),
    };
    let st = beneath::open_dir(root, dir, false)
        .and_then(|d| beneath::stat_at(&d, name))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("cannot read {}: not a regular file", path.display()));
    }
    Ok(beneath::Mode::Exact(st.st_mode & 0o777))
}

/// A read-only file (no write permission bit) may be moved, not changed on the way: its
/// mode says not to write it, as an update of it is refused (review YO: `Move to` with hunks
/// rewrote a 0444 file's content under its new name).
fn read_only_unchanged(root: &Path, from: &str, mode: beneath::Mode, content: &str) -> Result<(), String> {
    let beneath::Mode::Exact(bits) = mode else { return Ok(()) };
    if bits & 0o222 != 0 {
        return Ok(());
    }
    let path = within(root, from).map_err(|e| e.message)?;
    let old = read_utf8_within(root, &path, MAX_FILE_BYTES)?;
    if old == content {
        return Ok(());
    }
    Err(format!(
        "cannot write {}: it is read-only (no write permission bit); a read-only file may be moved, not changed",
        path.display()
    ))
}

/// A file to remove: (as shown, relative to the root with its directories resolved).
fn removal(root: &Path, rel: &str) -> Result<(PathBuf, PathBuf), String> {
    // A link is removed, not followed (the moved-from file was read: a regular file).
    let target = within_unfollowed(root, rel).map_err(|e| e.message)?;
    let under = resolved_rel(root, &target)?;
    Ok((target, under))
}

/// The places (relative to `root`, canonical: each link's directory resolved, its own name
/// kept) of the symbolic links that looking up the directories of `rel` passes through,
/// chains of links included, one hop at a time (at most 40, as the kernel allows).
/// The last component of `rel` is not looked up.
fn links_on_the_way(root: &Path, rel: &str) -> Vec<PathBuf> {
    use std::collections::VecDeque;
    let mut found = vec![];
    let mut pending: VecDeque<std::ffi::OsString> =
        Path::new(rel).parent().map(|p| p.components().map(|c| c.as_os_str().to_owned()).collect()).unwrap_or_default();
    let mut cur = root.to_path_buf();
    let mut hops = 0;
    while let Some(comp) = pending.pop_front() {
        match comp.to_str() {
            Some(".") | Some("") => continue,
            Some("..") => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        let next = cur.join(&comp);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                let Ok(target) = std::fs::read_link(&next) else { break };
                if hops > 40 {
                    break;
                }
                if let Ok(place) = next.strip_prefix(root) {
                    found.push(place.to_path_buf());
                }
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                for c in target.components().rev() {
                    if !matches!(c, std::path::Component::RootDir) {
                        pending.push_front(c.as_os_str().to_owned());
                    }
                }
            }
            Ok(_) => cur = next,
            Err(_) => break,
        }
    }
    found
}
