//! The caller's loop, as the review and section tools see it.

use forge_domain::review::LoopScope;
use forge_protocol::ToolError;

use crate::{Db, ToolCtx};
use forge_store::loops::{self, LoopRow};

/// The caller's active loop: the loop its authenticated loop session belongs to, or a
/// running loop whose current session is the caller's session.
pub fn caller_loop(ctx: &ToolCtx) -> Result<Option<LoopRow>, ToolError> {
    if let Some(b) = &ctx.caller().binding {
        if let Some(row) = loops::get(ctx.db, ctx.project_id(), &b.loop_name).db()? {
            if row.status == "running" {
                return Ok(Some(row));
            }
        }
        return Ok(None);
    }
    loops::running_for_session(ctx.db, ctx.project_id(), &ctx.caller().session_id).db()
}

/// The scoping view of a loop row.
pub fn scope(row: &LoopRow) -> LoopScope {
    LoopScope {
        loop_name: row.loop_name.clone(),
        running: row.status == "running",
        phase: row.phase.clone(),
        total_sections: row.total_sections.max(0) as u32,
        current_section: row.current_section_index.max(0) as u32,
    }
}

/// How a name that matches no loop, or several, is answered: each tool words it as
/// Forge's does (FORGE-REFERENCE.md §6, §2.11, §2.12).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wording {
    /// `loop-status` with a name, the task controls (§6): `Multiple loops match "<x>":`,
    /// the names, a blank line, `Be more specific.`; `No loop found for loop "<x>".`
    Status,
    /// `loop-cancel` (§2.11): `Multiple loops match "<x>". Be more specific.` and the
    /// names; `No active loop found for loop "<x>".`
    Cancel,
    /// `loop-status` with `restart` (§2.12): the message, a blank line, `Matches:` or
    /// `Available loops:` and the names; `No loop found for "<x>".`
    Restart,
}

/// Finds a loop by (partial) name or branch, newest first (FORGE-REFERENCE.md §4.11).
pub fn find_loop(ctx: &ToolCtx, query: &str) -> Result<LoopRow, ToolError> {
    find_loop_worded(ctx, query, Wording::Status)
}

/// [`find_loop`] with the words of another tool ([`Wording`]).
pub fn find_loop_worded(ctx: &ToolCtx, query: &str, wording: Wording) -> Result<LoopRow, ToolError> {
    use forge_domain::naming::{partial_match, Match};
    let all = loops::list(ctx.db, ctx.project_id()).db()?;
    let cands: Vec<(usize, String, Option<String>)> =
        all.iter().enumerate().map(|(i, l)| (i, l.loop_name.clone(), l.worktree_branch.clone())).collect();
    let list = |rows: &mut dyn Iterator<Item = &LoopRow>| {
        rows.map(|l| format!("- {}", l.loop_name)).collect::<Vec<_>>().join("\n")
    };
    match partial_match(query, &cands) {
        Match::One(i) => Ok(all[i].clone()),
        Match::Ambiguous(v) => {
            let names = list(&mut v.iter().map(|&i| &all[i]));
            Err(ToolError::conflict(match wording {
                Wording::Status => format!("Multiple loops match \"{query}\":\n{names}\n\nBe more specific."),
                Wording::Cancel => format!("Multiple loops match \"{query}\". Be more specific.\n{names}"),
                Wording::Restart => format!("Multiple loops match \"{query}\". Be more specific.\n\nMatches:\n{names}"),
            }))
        }
        Match::None => Err(ToolError::not_found(match wording {
            Wording::Status => format!("No loop found for loop \"{query}\"."),
            Wording::Cancel => format!("No active loop found for loop \"{query}\"."),
            Wording::Restart if all.is_empty() => format!("No loop found for \"{query}\"."),
            Wording::Restart => {
                format!("No loop found for \"{query}\".\n\nAvailable loops:\n{}", list(&mut all.iter()))
            }
        })),
    }
}

/// The caller's direct loop (running, current session = caller), or an error naming the
/// rule: section tools and handoffs are for the loop's current session only.
pub fn direct_loop(ctx: &ToolCtx, tool: &str) -> Result<LoopRow, ToolError> {
    let caller = ctx.caller();
    let row = match &caller.binding {
        Some(b) => loops::get(ctx.db, ctx.project_id(), &b.loop_name).db()?,
        None => loops::running_for_session(ctx.db, ctx.project_id(), &caller.session_id).db()?,
    };
    match row {
        Some(r) if r.status == "running" && r.current_session_id == caller.session_id => Ok(r),
        Some(r) if r.status != "running" => Err(ToolError::denied(format!(
            "forge.{tool} is not available to session {}: loop \"{}\" is not running ({}).",
            caller.session_id, r.loop_name, r.status
        ))),
        Some(r) => Err(ToolError::denied(format!(
            "forge.{tool} is not available to session {}: only the current session of loop \"{}\" may call it.",
            caller.session_id, r.loop_name
        ))),
        None => Err(ToolError::denied(format!(
            "forge.{tool} is not available to session {}: not in a loop session.",
            caller.session_id
        ))),
    }
}

/// Refuses a handoff while another session of the loop is busy or retrying (error 1005
/// naming them).
pub fn others_settled(ctx: &ToolCtx, row: &LoopRow, tool: &str) -> Result<(), ToolError> {
    let busy =
        forge_store::loop_db::busy_others(ctx.db, ctx.project_id(), &row.loop_name, &ctx.caller().session_id).db()?;
    if busy.is_empty() {
        return Ok(());
    }
    Err(ToolError::busy(format!(
        "forge.{tool} refused: other sessions of loop \"{}\" are busy ({}). Retry after they finish.",
        row.loop_name,
        busy.join(", ")
    )))
}

/// The key `file` is stored and looked up by for review findings
/// (`forge_domain::path::finding_file`): one spelling per file. `row` is the loop whose
/// findings are meant (the caller's, or the one a user names): its worktree is a root an
/// absolute path is made relative to, beside the project's work tree (each as given and as
/// the file system resolves it), and the base of a relative path for the loop's session.
pub fn finding_file(ctx: &ToolCtx, file: &str, row: Option<&LoopRow>) -> Result<String, ToolError> {
    let key = finding_key(ctx, file, row)?;
    // The key, not the input, is stored (review YK: `../` + 4,093 bytes became 4,107), and
    // a decoded URI may hold what its text did not.
    forge_domain::review::validate_file(&key)
        .map_err(|e| ToolError::invalid_params(format!("invalid argument `file`: {e}")))?;
    Ok(key)
}

/// `abs` with its longest existing part resolved (links followed), the rest as named;
/// `None` when nothing of it exists.
fn through_links(abs: &std::path::Path) -> Option<std::path::PathBuf> {
    abs.ancestors().find_map(|a| {
        let real = a.canonicalize().ok()?;
        let rest = abs.strip_prefix(a).ok()?;
        // `join("")` would add a trailing `/`.
        Some(if rest.as_os_str().is_empty() { real } else { real.join(rest) })
    })
}

fn finding_key(ctx: &ToolCtx, file: &str, row: Option<&LoopRow>) -> Result<String, ToolError> {
    use std::path::{Path, PathBuf};
    // A `file:` URI (an editor's spelling) is the path it names (review Z: it was stored
    // as a relative path `file:/…`).
    let decoded = forge_protocol::uri::local_path(file)
        .map_err(|e| ToolError::invalid_params(format!("invalid argument `file`: {e}")))?;
    let file = decoded.as_deref().unwrap_or(file);
    // Folders without a commit share the project `global`: a relative path would name a
    // file in whichever such folder an editor has open (review BB: a finding written in one
    // folder was shown on a file of the same name in another). Its findings are keyed by
    // their absolute path, the file they are about.
    if ctx.env.project.is_global() {
        let base = ctx.env.project.findings_root();
        let key = forge_domain::path::finding_file(&base.join(file).to_string_lossy(), None, &[]);
        // Through a link too, the file's one key: its resolved path (review YL: a folder
        // opened through a link stored a second key, whose diagnostics replaced the other's).
        return Ok(through_links(Path::new(&key)).and_then(|r| r.to_str().map(str::to_string)).unwrap_or(key));
    }
    // The common case: a relative path that stays inside its root needs no file-system call.
    let path = Path::new(file);
    if !path.is_absolute() && !forge_domain::path::lexical(path).starts_with("..") {
        return Ok(forge_domain::path::finding_file(file, None, &[]));
    }
    let project = ctx.env.project.findings_root().to_path_buf();
    let worktree = row.map(|r| PathBuf::from(&r.worktree_dir));
    // Relative paths name the caller's root: its loop's worktree for a loop session.
    let base = match (&worktree, ctx.caller().binding.is_some()) {
        (Some(w), true) => w.clone(),
        _ => project.clone(),
    };
    let mut roots: Vec<PathBuf> = std::iter::once(project).chain(worktree).collect();
    let resolved: Vec<PathBuf> = roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
    roots.extend(resolved);
    let roots: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
    let mut key = forge_domain::path::finding_file(file, Some(&base), &roots);
    if Path::new(&key).is_absolute() {
        // Outside the roots by name: maybe inside them through a link (the editor opened the
        // project through `~/link`, a shell's `$PWD` went through it). Its longest existing
        // part resolved, the rest kept (review YK: the link's spelling was a second key of
        // the file, whose diagnostics replaced the other's in the editor).
        let abs = PathBuf::from(&key);
        if let Some(resolved) = through_links(&abs).filter(|r| *r != abs).and_then(|r| r.to_str().map(str::to_string)) {
            let inside = forge_domain::path::finding_file(&resolved, None, &roots);
            if !Path::new(&inside).is_absolute() {
                key = inside;
            }
        }
    }
    Ok(key)
}
