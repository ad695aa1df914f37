//! `forge.ast-grep-search`: structural search with `ast-grep-core` over the files of one
//! language under the caller's root (gitignore-aware, the path guard of
//! [`crate::files::search_path`]). Runs off the store thread ([`ToolCtx::after`]).

use std::path::{Path, PathBuf};

use ast_grep_core::Pattern;
use ast_grep_language::SupportLang;
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::ToolCtx;
use crate::files::{caller_root, search_path};
use crate::structural;

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Structural code search (ast-grep) under your root (the project, or your loop's worktree), respecting .gitignore. pattern is code of the language with metavariables: $NAME matches one node, $$$ARGS any number (e.g. `console.log($MSG)`, `fn $F($$$P) -> Result<$T> { $$$B }`). lang is one of rust, python, typescript, tsx, javascript, go, java, c, cpp. path narrows the search to a directory or file (it must exist). Output: one `path:line: matched text` line per match (first line of multi-line matches, at most 500 bytes), then a count.";

pub type Input = forge_protocol::inputs::AstGrepSearchInput;

/// Matches listed in the result; the count is always complete.
const MAX_LISTED: usize = 500;

/// Longest first line of a match shown in the text, in bytes (grep's bound): one minified
/// file could otherwise make a reply of megabytes.
const LINE_BYTES: usize = 500;

/// Longest match text kept in `data` (`textCut` says when it was cut): 500 listed matches
/// hold at most about 4 MiB.
const DATA_TEXT_BYTES: usize = 8 * 1024;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let (lang, exts) = structural::language(&input.lang)?;
    let pat = structural::pattern(&input.pattern, lang)?;
    let root = caller_root(ctx)?;
    let start = search_path(&root, input.path.as_deref())?;
    crate::files::outside_git(&root, &start, input.path.as_deref())?;
    let cancel = ctx.cancel_flag();
    ctx.after = Some(Box::new(move || search(&root, &start, lang, exts, &pat, &cancel)));
    Ok(CommandResult { text: String::new(), data: forge_protocol::Data::default() })
}

fn search(
    root: &Path,
    start: &Path,
    lang: SupportLang,
    exts: &[&str],
    pat: &Pattern,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<CommandResult, ToolError> {
    let files: Vec<PathBuf> = structural::files(root, start, exts);
    let mut lines = vec![];
    let mut hits = vec![];
    let mut total = 0usize;
    let mut skipped = vec![];
    for path in &files {
        if crate::files::gave_up(cancel) {
            return Err(crate::files::search_cancelled("ast-grep-search"));
        }
        let shown = path.strip_prefix(root).unwrap_or(path).display().to_string();
        let src = match structural::source(root, path) {
            Ok(s) => s,
            Err(e) => {
                skipped.push(format!("{shown} ({e})"));
                continue;
            }
        };
        for h in structural::matches(&src, lang, pat, None) {
            total += 1;
            if lines.len() < MAX_LISTED {
                let whole = h.text.lines().next().unwrap_or("");
                let first = forge_domain::text::prefix(whole, LINE_BYTES);
                let more = if first.len() < whole.len() || h.text.contains('\n') { " …" } else { "" };
                // The name on one line of the text (the data keeps it as it is).
                lines.push(format!("{}:{}: {first}{more}", forge_domain::text::on_one_line(&shown), h.line));
                let kept = forge_domain::text::prefix(&h.text, DATA_TEXT_BYTES);
                let mut hit = json!({ "path": shown, "line": h.line, "text": kept });
                if kept.len() < h.text.len() {
                    hit["textCut"] = json!(h.text.len());
                }
                hits.push(hit);
            }
        }
    }
    let searched = files.len() - skipped.len();
    let mut text = if lines.is_empty() { "No matches found.".to_string() } else { lines.join("\n") };
    text.push_str(&format!(
        "\n\n{total} match{} in {} {} file{} searched{}",
        if total == 1 { "" } else { "es" },
        searched,
        structural::lang_name(lang),
        if searched == 1 { "" } else { "s" },
        if total > lines.len() { format!(" (the first {} listed; narrow the search)", lines.len()) } else { String::new() }
    ));
    if !skipped.is_empty() {
        text.push_str(&format!("\n{}", structural::not_searched(&skipped)));
    }
    Ok(CommandResult {
        text,
        data: json!({ "matches": hits, "total": total, "filesSearched": searched, "truncated": total > lines.len(),
            "skipped": crate::files::listed(&skipped), "skippedTotal": skipped.len() }).into(),
    })
}
