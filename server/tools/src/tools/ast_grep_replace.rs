//! `forge.ast-grep-replace`: structural rewrite with `ast-grep-core` over the files of one
//! language under the caller's root. A dry run (the default) reports each change and
//! writes nothing. A real run writes every changed file or none: each new content goes to
//! a temporary file beside its target, and only when all are staged are they renamed into
//! place; a file that cannot be written (including a read-only one: its mode is respected
//! even for root) fails the call before any rename, and the report never says `[APPLIED]`
//! for a file that was not written. Denied to auditors (`forge_domain::permissions`).
//! Runs off the store thread ([`ToolCtx::after`]).

use std::path::{Path, PathBuf};

use ast_grep_core::Pattern;
use ast_grep_language::SupportLang;
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::ToolCtx;
use crate::files::{caller_root, resolved_rel, search_path};
use forge_core::beneath::{self, Staged};
use crate::structural;

pub const NEEDS_SERVER: bool = false;

/// Runs on the store's writer thread as one grouped write (crate docs); its store part
/// only reads, and its file edits run after the commit (`ctx.after`).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Structural rewrite (ast-grep) of code under your root (the project, or your loop's worktree), respecting .gitignore. pattern as in ast-grep-search ($NAME one node, $$$ARGS any number); rewrite is the replacement and may use the pattern's metavariables (e.g. pattern `console.log($MSG)`, rewrite `logger.info($MSG)`). lang is one of rust, python, typescript, tsx, javascript, go, java, c, cpp; path narrows it to a directory or file. dryRun defaults to true: the result previews every change ([DRY RUN]) and nothing is written. With dryRun false every changed file is written or none ([APPLIED] only after all writes succeeded); a file that cannot be written, including a read-only one, is an error.";

pub type Input = forge_protocol::inputs::AstGrepReplaceInput;

/// Changes shown in the report; every change is applied whatever this says.
const MAX_SHOWN: usize = 200;

/// The report shows no more changes once it holds this much (bytes): 200 changes of a long
/// rewrite were a reply of 20 MB.
const MAX_SHOWN_BYTES: usize = 256 << 10;

/// The most the rewritten files may hold in all (bytes, before line endings are matched to
/// each file's): a rewrite is written all or nothing, so every new content is kept until
/// the renames. A dry run is held to it too, so that it says what the real run would.
const MAX_REWRITTEN_BYTES: usize = 256 << 20;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let (lang, exts) = structural::language(&input.lang)?;
    let pat = structural::pattern(&input.pattern, lang)?;
    check_rewrite(&input.pattern, &pat, &input.rewrite)?;
    let root = caller_root(ctx)?;
    let start = search_path(&root, input.path.as_deref())?;
    crate::files::outside_git(&root, &start, input.path.as_deref())?;
    let dry = input.dry_run.unwrap_or(true);
    let rewrite = input.rewrite;
    let places = crate::files::forge_config_places(ctx, &root);
    ctx.after = Some(Box::new(move || {
        replace(Scope { root: &root, start: &start, config_places: &places }, lang, exts, &pat, &rewrite, dry)
    }));
    Ok(CommandResult { text: String::new(), data: forge_protocol::Data::default() })
}

struct FileEdit {
    path: PathBuf,
    shown: String,
    new: String,
    count: usize,
}

/// Where a rewrite looks: its root, where its walk starts, and the places it never writes.
struct Scope<'a> {
    root: &'a Path,
    start: &'a Path,
    config_places: &'a [PathBuf],
}

fn replace(
    scope: Scope<'_>,
    lang: SupportLang,
    exts: &[&str],
    pat: &Pattern,
    rewrite: &str,
    dry: bool,
) -> Result<CommandResult, ToolError> {
    let Scope { root, start, config_places } = scope;
    // A rewrite reads and writes under the root's edit lock (as apply-patch); a dry run
    // only reads.
    let _lock = if dry { None } else { Some(crate::files::lock_edits(root)?) };
    let files = structural::files(root, start, exts);
    let mut edits: Vec<FileEdit> = vec![];
    let mut preview: Vec<String> = vec![];
    let mut shown_changes = 0usize;
    let mut preview_bytes = 0usize;
    let mut shown_files = 0usize;
    let mut skipped = vec![];
    let mut budget = MAX_REWRITTEN_BYTES;
    for path in &files {
        let shown = path.strip_prefix(root).unwrap_or(path).display().to_string();
        // forge-lsp's project configuration (a project tool's script) is never rewritten:
        // left out of a walk and named, refused when named directly (`stage`).
        if start != path.as_path() && is_config(root, path, config_places) {
            skipped.push(format!("{shown} (forge-lsp's project configuration, not rewritten)"));
            continue;
        }
        let budget_before = budget;
        let src = match structural::source(root, path) {
            Ok(s) => s,
            Err(e) => {
                skipped.push(format!("{shown} ({e})"));
                continue;
            }
        };
        let too_much = || {
            ToolError::invalid(format!(
                "ast-grep-replace failed: the rewritten files would hold more than {} MiB (reached at {shown}); nothing was written. Narrow `pattern` or `path`, or shorten `rewrite`",
                MAX_REWRITTEN_BYTES >> 20
            ))
        };
        let hits = structural::matches_within(&src, lang, pat, Some(rewrite), &mut budget).ok_or_else(too_much)?;
        let hits: Vec<_> = hits.into_iter().filter(|h| h.replacement.as_deref() != Some(h.text.as_str())).collect();
        if hits.is_empty() {
            // Its replacements are not kept: given back.
            budget = budget_before;
            continue;
        }
        // What the file keeps of its text is rewritten too.
        let kept = src.len() - hits.iter().map(|h| h.end - h.start).sum::<usize>();
        budget = budget.checked_sub(kept).ok_or_else(too_much)?;
        // A file's line only while its changes are shown: 20,000 files made a reply over
        // the 64 MiB a message may hold, and an applied rewrite came back as a failure
        // (review YB).
        if shown_changes < MAX_SHOWN && preview_bytes < MAX_SHOWN_BYTES {
            let line = format!(
                "{}: {} change{}",
                forge_domain::text::on_one_line(&shown),
                hits.len(),
                if hits.len() == 1 { "" } else { "s" }
            );
            preview_bytes += line.len() + 1;
            preview.push(line);
            shown_files += 1;
        }
        for h in &hits {
            if shown_changes == MAX_SHOWN || preview_bytes >= MAX_SHOWN_BYTES {
                break;
            }
            show_change(&mut preview, &mut preview_bytes, &shown, h);
            shown_changes += 1;
        }
        // A dry run builds no file: it shows the changes only.
        let new = if dry { String::new() } else { structural::rewritten(&src, &hits) };
        edits.push(FileEdit { path: path.clone(), shown, new, count: hits.len() });
    }
    let total: usize = edits.iter().map(|e| e.count).sum();
    let truncated = total > shown_changes || edits.len() > shown_files;
    let files_json: Vec<_> =
        crate::files::listed(&edits).iter().map(|e| json!({ "path": e.shown, "changes": e.count })).collect();
    let files_total = edits.len();
    let data = |applied: bool| {
        json!({ "dryRun": dry, "applied": applied, "files": files_json, "filesTotal": files_total, "total": total,
            "skipped": crate::files::listed(&skipped), "skippedTotal": skipped.len() })
    };
    if edits.is_empty() {
        let mut text = format!(
            "No matches found in {} {} file(s); nothing to change.",
            files.len() - skipped.len(),
            structural::lang_name(lang)
        );
        if !skipped.is_empty() {
            text.push_str(&format!("\n{}", structural::not_searched(&skipped)));
        }
        return Ok(CommandResult {
            text,
            data: data(false).into(),
        });
    }
    let mut body = preview.join("\n");
    if truncated {
        body.push_str(&format!(
            "\n… (the first {shown_changes} of {total} changes shown, in {shown_files} of {files_total} files)"
        ));
    }
    if !skipped.is_empty() {
        body.push_str(&format!("\n\n{}", structural::not_searched(&skipped)));
    }
    if dry {
        let text = format!(
            "[DRY RUN] {total} change{} in {} file{} would be made; nothing was written (call again with dryRun false to apply).\n\n{body}",
            if total == 1 { "" } else { "s" },
            edits.len(),
            if edits.len() == 1 { "" } else { "s" },
        );
        return Ok(CommandResult {
            text,
            data: data(false).into(),
        });
    }
    write_all(root, &edits, config_places)?;
    let text = format!(
        "[APPLIED] {total} change{} written to {} file{}.\n\n{body}",
        if total == 1 { "" } else { "s" },
        edits.len(),
        if edits.len() == 1 { "" } else { "s" },
    );
    Ok(CommandResult {
        text,
        data: data(true).into(),
    })
}

/// Adds one change to the report (`@@ file:line`, `-` old and `+` new lines), counting its
/// bytes in `bytes`; the change is cut where the report reaches [`MAX_SHOWN_BYTES`]: one
/// change alone can be the size of the whole rewrite.
fn show_change(preview: &mut Vec<String>, bytes: &mut usize, shown: &str, h: &structural::Hit) {
    let head = format!("@@ {}:{}", forge_domain::text::on_one_line(shown), h.line);
    *bytes += head.len() + 1;
    preview.push(head);
    let old = h.text.lines().map(|l| ('-', l));
    let new = h.replacement.as_deref().unwrap_or("").lines().map(|l| ('+', l));
    for (sign, line) in old.chain(new) {
        let room = MAX_SHOWN_BYTES.saturating_sub(*bytes);
        if line.len() + 2 > room {
            let cut = forge_domain::text::prefix(line, room.saturating_sub(2));
            preview.push(format!(
                "{sign}{cut}… (this change is cut here: the report shows {} KiB of changes)",
                MAX_SHOWN_BYTES >> 10
            ));
            *bytes = MAX_SHOWN_BYTES;
            return;
        }
        preview.push(format!("{sign}{line}"));
        *bytes += line.len() + 2;
    }
}

/// Whether `path` (under `root`) is forge-lsp's project configuration, by name or by place.
fn is_config(root: &Path, path: &Path, config_places: &[PathBuf]) -> bool {
    resolved_rel(root, path).is_ok_and(|under| crate::files::writes_forge_config(config_places, root, &under))
}

/// Writes every edit or none: stage all, then rename all.
fn write_all(root: &Path, edits: &[FileEdit], config_places: &[PathBuf]) -> Result<(), ToolError> {
    let fail = |m: String| ToolError::invalid(format!("ast-grep-replace failed, nothing was written: {m}"));
    // Dropping what was staged removes its temporaries.
    let mut stager = beneath::Stager::new(root);
    let staged =
        edits.iter().map(|e| stage(&mut stager, root, e, config_places)).collect::<Result<Vec<_>, _>>().map_err(fail)?;
    beneath::commit_all(staged).map_err(|(i, err)| {
        let done: Vec<String> = edits[..i].iter().map(|e| e.shown.clone()).collect();
        ToolError::invalid(format!(
            "ast-grep-replace failed: cannot write {}: {err}; written before the failure: {}",
            edits[i].path.display(),
            if done.is_empty() { "none".to_string() } else { done.join(", ") }
        ))
    })
}

/// The new content staged beside the target (same mode) through `forge_core::beneath`,
/// after checking the target can be written.
fn stage(stager: &mut beneath::Stager, root: &Path, e: &FileEdit, config_places: &[PathBuf]) -> Result<Staged, String> {
    // A link named as `path` is searched through, but the write would replace the link
    // with a file (as apply-patch, refused: edit the file it points to).
    // Checked relative to the root without following a link (as the stager writes): a
    // directory swapped for a link since the read is refused, never looked through.
    let under = resolved_rel(root, &e.path)?;
    if crate::files::writes_forge_config(config_places, root, &under) {
        return Err(format!("{} {}", e.shown, forge_domain::patch::FORGE_CONFIG_REFUSAL));
    }
    let (Some(dir), Some(name)) = (under.parent(), under.file_name()) else {
        return Err(format!("{} names no file", e.shown));
    };
    let dir = beneath::open_dir(root, dir, false).map_err(|err| format!("{}: {err}", e.shown))?;
    let own = beneath::stat_at(&dir, name).map_err(|err| format!("{}: {err}", e.shown))?;
    if own.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("{} is not a regular file (a symbolic link?); name the file it points to", e.shown));
    }
    if beneath::read_only_mode(&own) {
        return Err(format!("{} is read-only", e.shown));
    }
    beneath::check_writable_at(&dir, name).map_err(|err| format!("{} cannot be written: {err}", e.shown))?;
    stager.stage(&under, e.new.as_bytes(), beneath::Mode::KeepOr(0o666), false, false)
        .map_err(|err| format!("{}: {err}", e.shown))
}

/// Refuses a `rewrite` that uses a metavariable the pattern does not capture in the same
/// form: ast-grep replaces such a name with nothing (`bar($B)` for a pattern without `$B`
/// deletes what the match held), and writes an anonymous `$$$` as it is. `$NAME` needs a
/// `$NAME` in the pattern, `$$$NAME` a `$$$NAME`. The names used are read as ast-grep's
/// replacer reads them (one, two or three `$`, then a name of capitals, digits and `_`
/// that does not start with a digit); the names bound are the pattern's own
/// ([`Pattern::defined_vars`]).
fn check_rewrite(pattern_src: &str, pat: &Pattern, rewrite: &str) -> Result<(), ToolError> {
    let bound = pat.defined_vars();
    let uses = |text: &str| -> Vec<(bool, String)> {
        let mut out = vec![];
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            let after = &rest[at..];
            let dollars = after.chars().take(3).take_while(|&c| c == '$').count();
            let tail = &after[dollars..];
            let len =
                tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
            let name = &tail[..len];
            if name.starts_with(|c: char| c.is_ascii_uppercase() || c == '_') || (dollars == 3 && name.is_empty()) {
                out.push((dollars == 3, name.to_string()));
            }
            // At least the `$` found is behind: the scan moves on.
            rest = &tail[len..];
        }
        out
    };
    let multi_in_pattern: std::collections::HashSet<String> =
        uses(pattern_src).into_iter().filter(|(multi, _)| *multi).map(|(_, n)| n).collect();
    for (multi, name) in uses(rewrite) {
        let shown = if multi { format!("$$${name}") } else { format!("${name}") };
        let problem = if name.is_empty() || name.starts_with('_') {
            Some(
                "captures nothing (only a named metavariable of the pattern, like $$$ARGS or $A, is replaced; a literal `$$$` cannot be written with this tool)"
                    .to_string(),
            )
        } else if !bound.contains(name.as_str()) {
            Some("is not a metavariable of the pattern, so it would be replaced with nothing".to_string())
        } else if multi != multi_in_pattern.contains(&name) {
            let other = if multi { format!("${name}") } else { format!("$$${name}") };
            Some(format!("is written {other} in the pattern; use the same form in the rewrite"))
        } else {
            None
        };
        if let Some(why) = problem {
            return Err(ToolError::invalid(format!("invalid argument `rewrite`: {shown} {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_uses_only_what_the_pattern_captures_in_the_same_form() {
        let check = |pattern_src: &str, lang: &str, rewrite: &str| {
            let (l, _) = structural::language(lang).unwrap();
            check_rewrite(pattern_src, &structural::pattern(pattern_src, l).unwrap(), rewrite)
        };
        for (p, lang, rw) in [
            ("foo($A, $B)", "js", "bar($B, $A)"),
            ("console.log($$$ARGS)", "js", "logger.info($$$ARGS)"),
            ("foo($A)", "js", "bar($A) // costs $5, `$` and $$"),
            ("foo($A)", "js", "bar($A, 'literal')"),
            ("$X.unwrap()", "rust", "$X.expect(\"why\")"),
            ("foo($$$)", "js", "bar()"),
        ] {
            assert!(check(p, lang, rw).is_ok(), "{p} -> {rw}: {:?}", check(p, lang, rw).err());
        }
        for (p, lang, rw, says) in [
            ("foo($A)", "js", "bar($B)", "$B is not a metavariable of the pattern"),
            ("foo($$$ARGS)", "js", "bar($ARGS)", "$ARGS is written $$$ARGS in the pattern"),
            ("foo($A)", "js", "bar($$$A)", "$$$A is written $A in the pattern"),
            ("foo($$$)", "js", "bar($$$)", "$$$ captures nothing"),
            ("foo($_)", "js", "bar($_)", "$_ captures nothing"),
        ] {
            let e = check(p, lang, rw).expect_err(rw);
            assert_eq!(e.kind.code(), 1006, "{e:?}");
            assert!(e.message.contains(says), "{p} -> {rw}: {}", e.message);
        }
    }
}
