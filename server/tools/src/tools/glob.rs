//! `forge.glob`: files under the caller's root whose path matches a glob, newest first,
//! gitignore-aware (`ignore` + `globset`), with the path guard of
//! [`crate::files::search_path`]. Runs off the store thread ([`ToolCtx::after`]).

use std::path::Path;
use std::time::SystemTime;

use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::ToolCtx;
use crate::files::{caller_root, search_path};

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "List files under your root (the project, or your loop's worktree) whose path, relative to the searched directory, matches a glob (e.g. **/*.rs, src/*.md), newest first, respecting .gitignore; at most 1000. path narrows the search to a directory (it must exist: a missing or non-directory component is an error naming it).";

pub type Input = forge_protocol::inputs::GlobInput;

const MAX_FILES: usize = 1000;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    if input.pattern.is_empty() {
        return Err(ToolError::invalid_params("invalid argument `pattern`: must not be empty"));
    }
    // Paths are matched as `src/a.rs`, never `./src/a.rs`: a leading `./` found nothing
    // (review YO).
    let mut pattern = input.pattern.as_str();
    while let Some(rest) = pattern.strip_prefix("./") {
        pattern = rest.trim_start_matches('/');
    }
    if pattern.is_empty() || pattern == "." {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `pattern`: {:?} names the searched directory itself, not files; use e.g. `**/*`",
            input.pattern
        )));
    }
    let glob = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .and_then(|g| globset::GlobSetBuilder::new().add(g).build())
        .map_err(|e| invalid_glob("glob failed: invalid glob", &input.pattern, e))?;
    let root = caller_root(ctx)?;
    let start = search_path(&root, input.path.as_deref())?;
    crate::files::outside_git(&root, &start, input.path.as_deref())?;
    if !start.is_dir() {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `path`: {} is not a directory",
            input.path.unwrap_or_default()
        )));
    }
    let cancel = ctx.cancel_flag();
    ctx.after = Some(Box::new(move || list(&root, &start, &glob, &cancel)));
    Ok(CommandResult { text: String::new(), data: forge_protocol::Data::default() })
}

/// A glob that cannot be compiled: a syntax error, or a pattern too large for its matcher
/// (compiled as a set, whose build says so, where a single matcher's panics).
pub(crate) fn invalid_glob(what: &str, pattern: &str, e: globset::Error) -> ToolError {
    use forge_domain::text::{cut_error, echo};
    let why = match e.kind() {
        globset::ErrorKind::Regex(_) => "it is too large to compile; use a shorter pattern".to_string(),
        _ => cut_error(e.kind()),
    };
    ToolError::invalid(format!("{what} {}: {why}", echo(pattern)))
}

fn list(
    root: &Path,
    start: &Path,
    glob: &globset::GlobSet,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<CommandResult, ToolError> {
    let mut found: Vec<(SystemTime, String)> = vec![];
    // Every `.git` skipped, nested repositories' included.
    let walk = crate::files::walk(root, start);
    for entry in walk.flatten() {
        if crate::files::gave_up(cancel) {
            return Err(crate::files::search_cancelled("glob"));
        }
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let under = path.strip_prefix(start).unwrap_or(path);
        if !glob.is_match(under) {
            continue;
        }
        let modified = entry.metadata().ok().and_then(|m| m.modified().ok()).unwrap_or(SystemTime::UNIX_EPOCH);
        found.push((modified, path.strip_prefix(root).unwrap_or(path).display().to_string()));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    found.truncate(MAX_FILES);
    let paths: Vec<String> = found.into_iter().map(|(_, p)| p).collect();
    // One name per line, a line break in a name written `\n` (it split the name in two;
    // the data keeps the names as they are).
    let mut text = if paths.is_empty() {
        "No files found.".to_string()
    } else {
        paths.iter().map(|p| forge_domain::text::on_one_line(p)).collect::<Vec<_>>().join("\n")
    };
    text.push_str(&format!(
        "\n\n{total} file{}{}",
        if total == 1 { "" } else { "s" },
        if total > MAX_FILES { format!(" (showing the newest {MAX_FILES})") } else { String::new() }
    ));
    Ok(CommandResult { text, data: json!({ "files": paths, "total": total }).into() })
}
