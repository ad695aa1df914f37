//! Applying the hunks of one `Update File` section to a file's text.
//!
//! * The file is split into lines, each keeping its own line ending; a byte-order mark
//!   is set aside and put back.
//! * Hunks are located in order: each is searched after the end of the previous one.
//!   A hunk's `@@` anchors are located first: the first anchor must be unique from
//!   there on, each further anchor is taken at its next occurrence, and the hunk is then
//!   taken at its nearest place after the last anchor (at whichever tolerance level fits
//!   there). A hunk without anchors must fit exactly one place after the previous hunk
//!   (at the strictest level that fits anywhere). Ambiguity is an error that lists the
//!   candidate lines; nothing is guessed. A hunk that only adds lines goes right after
//!   its last anchor, or at the end with `*** End of File`, or into an empty file.
//! * A hunk found nowhere else goes to the stale-context fallback
//!   (`matching::fuzzy`); when that refuses too, the error says why, and points
//!   out hunks written out of file order.
//! * Context lines keep the file's bytes (a tolerant match never rewrites them with the
//!   patch's drifted version); added lines are written exactly as authored; file lines
//!   a stale hunk did not know about stay where they are.
//! * Added lines get the file's dominant line ending (CRLF when most lines use it), and
//!   the file keeps its final-newline state (or lack of one).

use super::error::PatchError;
use super::matching::{fuzzy, Found, Fuzzy, Haystack, MatchLevel};
use super::parse::{Hunk, HunkLine};
use serde::Serialize;

/// The new text of a file and how its hunks were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub content: String,
    /// One note per hunk that needed a tolerant match (exact matches are not noted).
    pub notes: Vec<HunkNote>,
}

/// A hunk that was matched tolerantly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HunkNote {
    /// 1-based patch line of the hunk.
    pub patch_line: usize,
    /// 1-based line of the file (as it was before this section) where the match starts.
    pub file_line: usize,
    pub level: MatchLevel,
}

/// A file's text as lines.
struct Doc<'a> {
    bom: bool,
    lines: Vec<&'a str>,
    /// Each line's own ending: `"\n"`, `"\r\n"`, or `""` for a last line without one.
    eols: Vec<&'a str>,
    /// The text ends with a line ending (an empty file counts as ending with one).
    final_newline: bool,
    /// The ending given to added lines.
    eol: &'static str,
}

impl<'a> Doc<'a> {
    fn split(content: &'a str) -> Self {
        let (bom, body) = match content.strip_prefix('\u{FEFF}') {
            Some(rest) => (true, rest),
            None => (false, content),
        };
        let mut lines = Vec::new();
        let mut eols = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            match rest.find('\n') {
                Some(k) => {
                    let line = &rest[..k];
                    match line.strip_suffix('\r') {
                        Some(text) => {
                            lines.push(text);
                            eols.push(&rest[k - 1..=k]);
                        }
                        None => {
                            lines.push(line);
                            eols.push(&rest[k..=k]);
                        }
                    }
                    rest = &rest[k + 1..];
                }
                None => {
                    lines.push(rest);
                    eols.push("");
                    rest = "";
                }
            }
        }
        let crlf = eols.iter().filter(|e| **e == "\r\n").count();
        let lf = eols.iter().filter(|e| **e == "\n").count();
        Doc {
            bom,
            lines,
            eols,
            final_newline: body.is_empty() || body.ends_with('\n'),
            eol: if crlf > lf { "\r\n" } else { "\n" },
        }
    }
}

/// One output line of a replaced region.
enum Out<'h> {
    File(usize),
    New(&'h str),
}

/// File lines `start..end` are replaced by `out`.
struct Edit<'h> {
    start: usize,
    end: usize,
    out: Vec<Out<'h>>,
}

/// Apply `hunks` (one section's, in order) to `content`. `path` is only used in errors.
pub fn apply_hunks(path: &str, content: &str, hunks: &[Hunk]) -> Result<Applied, PatchError> {
    let doc = Doc::split(content);
    let hay = Haystack::new(&doc.lines);
    let n = hay.len();
    let mut cursor = 0;
    let mut edits: Vec<Edit<'_>> = Vec::new();
    let mut notes = Vec::new();
    for hunk in hunks {
        let not_found =
            |detail: String| PatchError::ContextNotFound { line: hunk.line, path: path.to_string(), detail };
        let ambiguous = |what: String, starts: Vec<usize>| PatchError::Ambiguous {
            line: hunk.line,
            path: path.to_string(),
            what,
            candidates: starts.into_iter().map(|s| s + 1).collect(),
        };
        let after = |at: usize| if at == 0 { String::new() } else { format!(" after line {at}") };

        // The anchors narrow the search to what follows them.
        let mut lo = cursor;
        let mut anchor_level = None;
        for (k, anchor) in hunk.anchors.iter().enumerate() {
            let needle = [anchor.as_str()];
            let (p, level) = if k == 0 {
                match hay.unique(&needle, lo, n) {
                    Found::One(p, level) => (p, level),
                    Found::Many(starts) => return Err(ambiguous(format!("@@ line '{anchor}'"), starts)),
                    Found::None => return Err(not_found(format!("the @@ line '{anchor}' is not in it{}", after(lo)))),
                }
            } else {
                hay.first(&needle, lo, n)
                    .ok_or_else(|| not_found(format!("the @@ line '{anchor}' is not in it{}", after(lo))))?
            };
            lo = p + 1;
            anchor_level = Some(level);
        }

        let old: Vec<(&str, bool)> = hunk.old_lines();
        let old_text: Vec<&str> = old.iter().map(|(s, _)| *s).collect();
        let removed: Vec<bool> = old.iter().map(|(_, r)| *r).collect();
        let m = old.len();

        if m == 0 {
            // Only added lines: they go after the last anchor, or at the end.
            let pos = if hunk.at_eof {
                n
            } else if !hunk.anchors.is_empty() {
                lo
            } else if n == 0 {
                0
            } else {
                return Err(PatchError::malformed(
                    hunk.line,
                    format!(
                        "hunk in '{path}' only adds lines and has no @@ line: say where they go with an '@@ line' \
                         to insert after, context lines, or '*** End of File' to append"
                    ),
                ));
            };
            if let Some(level) = anchor_level.filter(|l| *l != MatchLevel::Exact) {
                notes.push(HunkNote { patch_line: hunk.line, file_line: pos + 1, level });
            }
            edits.push(Edit { start: pos, end: pos, out: added(hunk) });
            cursor = pos;
            continue;
        }

        let found = if hunk.at_eof {
            match n.checked_sub(m).filter(|&p| p >= lo) {
                Some(p) => hay.at(&old_text, p).map_or(Found::None, |level| Found::One(p, level)),
                None => Found::None,
            }
        } else if !hunk.anchors.is_empty() {
            // `lo` is the line after the last anchor.
            hay.nearest(&old_text, lo, n, hay.block_end(lo - 1))
        } else {
            hay.unique(&old_text, lo, n)
        };
        match found {
            Found::One(p, level) => {
                let alignment: Vec<Option<usize>> = (p..p + m).map(Some).collect();
                if level != MatchLevel::Exact {
                    notes.push(HunkNote { patch_line: hunk.line, file_line: p + 1, level });
                }
                edits.push(Edit { start: p, end: p + m, out: merge(hunk, &alignment, p, p + m) });
                cursor = p + m;
            }
            // After an anchor: the nearest place differs from the hunk in indentation (or
            // look-alikes), a later one in the anchor's block does not.
            Found::Many(starts) if !hunk.anchors.is_empty() && !hunk.at_eof => {
                let what =
                    format!("hunk (at line {} only with other indentation or look-alike characters)", starts[0] + 1);
                return Err(ambiguous(what, starts));
            }
            Found::Many(starts) => return Err(ambiguous("hunk".to_string(), starts)),
            Found::None => match fuzzy(&hay, &old_text, &removed, lo, n, hunk.at_eof) {
                Fuzzy::Found(fm) => {
                    let level = MatchLevel::Fuzzy { matched: fm.matched, total: fm.total };
                    notes.push(HunkNote { patch_line: hunk.line, file_line: fm.start + 1, level });
                    edits.push(Edit {
                        start: fm.start,
                        end: fm.end,
                        out: merge(hunk, &fm.alignment, fm.start, fm.end),
                    });
                    cursor = fm.end;
                }
                Fuzzy::Ambiguous(starts) => return Err(ambiguous("hunk".to_string(), starts)),
                Fuzzy::Weak(why) => {
                    if lo > 0 {
                        if let Some((p, _)) = hay.first(&old_text, 0, (lo + m - 1).min(n)) {
                            return Err(not_found(format!(
                                "its lines are at line {}, before line {} where the search starts (after the \
                                 previous hunk or the @@ line); hunks of one Update File must be in file order",
                                p + 1,
                                lo + 1
                            )));
                        }
                    }
                    let place = if hunk.at_eof { " at the end of the file" } else { " in it" };
                    return Err(not_found(format!(
                        "no place{place}{} has its context and removed lines (not even ignoring whitespace and \
                         unicode variants), and the stale-context fallback refused: {why}",
                        after(lo)
                    )));
                }
            },
        }
    }
    Ok(Applied { content: assemble(&doc, &edits), notes })
}

fn added(hunk: &Hunk) -> Vec<Out<'_>> {
    hunk.lines
        .iter()
        .filter_map(|l| match l {
            HunkLine::Add(s) => Some(Out::New(s.as_str())),
            _ => None,
        })
        .collect()
}

/// The output of a matched region `start..end`: walking the hunk, context lines are
/// the file lines they aligned with, removed lines vanish, added lines are written as
/// authored, and unaligned file lines in between are kept in place. A context line
/// with no alignment (stale) is skipped; removed lines always have one.
fn merge<'h>(hunk: &'h Hunk, alignment: &[Option<usize>], start: usize, end: usize) -> Vec<Out<'h>> {
    let mut out = Vec::with_capacity(end - start + hunk.lines.len());
    let mut next = start;
    let mut k = 0;
    for line in &hunk.lines {
        match line {
            HunkLine::Add(text) => out.push(Out::New(text.as_str())),
            HunkLine::Context(_) | HunkLine::Remove(_) => {
                if let Some(j) = alignment[k] {
                    out.extend((next..j).map(Out::File));
                    if matches!(line, HunkLine::Context(_)) {
                        out.push(Out::File(j));
                    }
                    next = j + 1;
                }
                k += 1;
            }
        }
    }
    out.extend((next..end).map(Out::File));
    out
}

fn assemble(doc: &Doc<'_>, edits: &[Edit<'_>]) -> String {
    let mut items: Vec<(&str, &str)> = Vec::with_capacity(doc.lines.len() + 16);
    let file = |i: usize| (doc.lines[i], doc.eols[i]);
    let mut next = 0;
    for edit in edits {
        items.extend((next..edit.start).map(file));
        items.extend(edit.out.iter().map(|o| match o {
            Out::File(i) => file(*i),
            Out::New(text) => (*text, ""),
        }));
        next = edit.end;
    }
    items.extend((next..doc.lines.len()).map(file));

    let mut text = String::with_capacity(items.iter().map(|(t, _)| t.len() + 2).sum::<usize>() + 3);
    if doc.bom {
        text.push('\u{FEFF}');
    }
    let count = items.len();
    for (idx, (line, eol)) in items.into_iter().enumerate() {
        text.push_str(line);
        let last = idx + 1 == count;
        if !last || doc.final_newline {
            text.push_str(if eol.is_empty() { doc.eol } else { eol });
        }
    }
    text
}
