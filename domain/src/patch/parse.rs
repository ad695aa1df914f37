//! The strict parser of the patch format.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: path          then one or more `+` lines
//! *** Delete File: path       no lines
//! *** Update File: path
//! *** Move to: other/path     optional, directly after its Update File line
//! @@ optional anchor line     a hunk: ` ` context, `-` removed, `+` added lines
//! *** End of File             optional: the hunk ends at the end of the file
//! *** End Patch
//! ```
//!
//! Every malformed patch is refused here, before any file is looked at. Lines of the
//! patch may end in `\r\n`; the `\r` belongs to the patch, not to the authored text.
//! Besides the format itself, the parser accepts a few habits of model-written patches
//! that have exactly one reading:
//!
//! * a heredoc wrapper (`<<'EOF'` ... `EOF`) around the patch;
//! * blank lines between file sections;
//! * an empty line inside a hunk as an empty context line (trailing empty lines of a
//!   hunk are dropped as separators);
//! * unified-diff range headers (`@@ -3,7 +3,8 @@`): the numbers are ignored, the line
//!   is a bare `@@`;
//! * `\ No newline at end of file` lines, which are ignored (the file's final-newline
//!   state is kept anyway).
//!
//! The first hunk of an `Update File` may start without `@@`; every later hunk, and a
//! hunk after `*** End of File`, must start with an `@@` line.

use super::error::PatchError;

/// A parsed patch: the file operations in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub ops: Vec<PatchOp>,
}

/// One file section of a patch. Paths are as written (trimmed); [`super::plan_patch`]
/// checks and normalises them. `line` is the 1-based patch line of the section header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    /// `*** Add File:` with the text of its `+` lines (without the `+`).
    Add { line: usize, path: String, lines: Vec<String> },
    /// `*** Delete File:`.
    Delete { line: usize, path: String },
    /// `*** Update File:`, an optional `*** Move to:` and the hunks.
    Update { line: usize, path: String, move_to: Option<MoveTo>, hunks: Vec<Hunk> },
}

/// The `*** Move to:` line of an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTo {
    pub line: usize,
    pub path: String,
}

/// One hunk of an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// 1-based patch line where the hunk starts (its first `@@` line, or its first line).
    pub line: usize,
    /// The texts of its `@@ text` lines, outermost first (a bare `@@` adds none).
    pub anchors: Vec<String>,
    pub lines: Vec<HunkLine>,
    /// Followed by `*** End of File`: the hunk's old lines end the file.
    pub at_eof: bool,
}

/// A line of a hunk, without its one-character prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

impl Hunk {
    /// The lines the hunk expects in the file (context and removed), in order, with a
    /// flag telling the removed ones.
    pub fn old_lines(&self) -> Vec<(&str, bool)> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(s) => Some((s.as_str(), false)),
                HunkLine::Remove(s) => Some((s.as_str(), true)),
                HunkLine::Add(_) => None,
            })
            .collect()
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const EOF_MARK: &str = "*** End of File";

/// Parse and validate a patch. Errors name the 1-based patch line.
pub fn parse_patch(text: &str) -> Result<Patch, PatchError> {
    let mut lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let blank = |l: &&str| l.trim().is_empty();
    let Some(mut first) = lines.iter().position(|l| !blank(l)) else {
        return Err(PatchError::malformed(1, "the patch is empty (it must start with '*** Begin Patch')"));
    };
    let mut last = lines.iter().rposition(|l| !blank(l)).unwrap_or(first);
    if let Some(tag) = heredoc_tag(lines[first]) {
        if last > first && lines[last].trim() == tag {
            first += 1;
            last -= 1;
            while first <= last && blank(&lines[first]) {
                first += 1;
            }
            while last > first && blank(&lines[last]) {
                last -= 1;
            }
        }
    }
    if first > last || lines[first].trim() != BEGIN {
        let at = first.min(lines.len().saturating_sub(1));
        return Err(PatchError::malformed(
            at + 1,
            format!("the patch must start with '{BEGIN}', found '{}'", shorten(lines.get(at).copied().unwrap_or(""))),
        ));
    }
    // An `*** End Patch` at column 0 before the last line ends the patch early; indented
    // ones are hunk lines (a context line of a file that mentions the marker).
    if let Some(early) = (first + 1..last).find(|&i| lines[i].trim_end() == END) {
        return Err(PatchError::malformed(early + 2, format!("text after '{END}' (line {})", early + 1)));
    }
    if last == first || lines[last].trim() != END {
        return Err(PatchError::malformed(last + 1, format!("missing '{END}' (the last line must be '{END}')")));
    }
    let mut parser = Parser { lines: &lines, i: first + 1, end: last };
    let ops = parser.sections()?;
    if ops.is_empty() {
        return Err(PatchError::malformed(first + 1, "the patch contains no file operations"));
    }
    Ok(Patch { ops })
}

/// `<<'EOF'`, `<<"EOF"`, `<<EOF`, `<<-EOF` at the end of a line (for example after
/// `apply_patch `): the tag.
fn heredoc_tag(line: &str) -> Option<&str> {
    let at = line.rfind("<<")?;
    let tag = line[at + 2..].trim().trim_start_matches('-').trim_matches(|c| c == '\'' || c == '"');
    (!tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(tag)
}

fn shorten(line: &str) -> String {
    const MAX: usize = 60;
    if line.chars().count() <= MAX {
        line.to_string()
    } else {
        format!("{}...", line.chars().take(MAX).collect::<String>())
    }
}

/// `@@ -3,7 +3,8 @@ ...`: a unified-diff range header.
fn is_unified_range(anchor: &str) -> bool {
    let Some(rest) = anchor.strip_prefix('-') else { return false };
    let digits =
        |s: &str| !s.is_empty() && s.split(',').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let mut parts = rest.splitn(3, ' ');
    let (Some(old), Some(new)) = (parts.next(), parts.next()) else { return false };
    let tail = parts.next().unwrap_or("");
    digits(old) && new.strip_prefix('+').is_some_and(digits) && tail.starts_with("@@")
}

fn header<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
    line.strip_prefix(tag).map(str::trim)
}

struct Parser<'a> {
    lines: &'a [&'a str],
    i: usize,
    /// Index of the `*** End Patch` line.
    end: usize,
}

impl Parser<'_> {
    fn sections(&mut self) -> Result<Vec<PatchOp>, PatchError> {
        let mut ops = Vec::new();
        while self.i < self.end {
            let line = self.lines[self.i];
            let at = self.i + 1;
            if line.trim().is_empty() {
                self.i += 1;
            } else if let Some(path) = header(line, ADD) {
                let path = self.path(at, path, ADD)?;
                self.i += 1;
                ops.push(self.add(at, path)?);
            } else if let Some(path) = header(line, DELETE) {
                let path = self.path(at, path, DELETE)?;
                self.i += 1;
                self.no_body(at, &path)?;
                ops.push(PatchOp::Delete { line: at, path });
            } else if let Some(path) = header(line, UPDATE) {
                let path = self.path(at, path, UPDATE)?;
                self.i += 1;
                ops.push(self.update(at, path)?);
            } else if line.starts_with(MOVE) {
                return Err(PatchError::malformed(at, format!("'{MOVE}' must directly follow its '{UPDATE}' line")));
            } else if line.starts_with("***") {
                return Err(unknown_header(at, line));
            } else {
                return Err(PatchError::malformed(
                    at,
                    format!("expected a file header ('{ADD}', '{UPDATE}' or '{DELETE}'), found '{}'", shorten(line)),
                ));
            }
        }
        Ok(ops)
    }

    fn path(&self, at: usize, path: &str, tag: &str) -> Result<String, PatchError> {
        if path.is_empty() {
            return Err(PatchError::malformed(at, format!("'{tag}' needs a path")));
        }
        Ok(path.to_string())
    }

    /// A line that starts a new file section (or is any other `***` line).
    fn at_header(&self) -> bool {
        self.i >= self.end || self.lines[self.i].starts_with("***")
    }

    /// Only blank lines remain before the next header.
    fn blank_until_header(&self) -> bool {
        self.lines[self.i..self.end].iter().take_while(|l| !l.starts_with("***")).all(|l| l.trim().is_empty())
    }

    fn add(&mut self, at: usize, path: String) -> Result<PatchOp, PatchError> {
        let mut body = Vec::new();
        while !self.at_header() {
            let line = self.lines[self.i];
            if let Some(text) = line.strip_prefix('+') {
                body.push(text.to_string());
            } else if line.trim().is_empty() && self.blank_until_header() {
                self.i = self.next_header();
                break;
            } else {
                return Err(PatchError::malformed(
                    self.i + 1,
                    format!("every line of '{ADD} {path}' must start with '+', found '{}'", shorten(line)),
                ));
            }
            self.i += 1;
        }
        if body.is_empty() {
            return Err(PatchError::malformed(
                at,
                format!("'{ADD} {path}' has no lines (an added file needs at least one '+' line)"),
            ));
        }
        Ok(PatchOp::Add { line: at, path, lines: body })
    }

    fn next_header(&self) -> usize {
        (self.i..self.end).find(|&k| self.lines[k].starts_with("***")).unwrap_or(self.end)
    }

    fn no_body(&mut self, at: usize, path: &str) -> Result<(), PatchError> {
        if !self.blank_until_header() {
            let bad = (self.i..self.end).find(|&k| !self.lines[k].trim().is_empty()).unwrap_or(self.i);
            return Err(PatchError::malformed(
                bad + 1,
                format!("'{DELETE} {path}' (line {at}) takes no lines, found '{}'", shorten(self.lines[bad])),
            ));
        }
        self.i = self.next_header();
        Ok(())
    }

    fn update(&mut self, at: usize, path: String) -> Result<PatchOp, PatchError> {
        let mut move_to = None;
        if self.i < self.end {
            if let Some(dest) = header(self.lines[self.i], MOVE) {
                let dest = self.path(self.i + 1, dest, MOVE)?;
                move_to = Some(MoveTo { line: self.i + 1, path: dest });
                self.i += 1;
            }
        }
        let mut hunks: Vec<Hunk> = Vec::new();
        let mut current: Option<Builder> = None;
        // After `*** End of File` a new hunk must open with `@@`.
        let mut need_marker = false;
        while self.i < self.end {
            let line = self.lines[self.i];
            let here = self.i + 1;
            if header(line, ADD).is_some() || header(line, DELETE).is_some() || header(line, UPDATE).is_some() {
                break;
            }
            if let Some(anchor) = line.strip_prefix("@@") {
                let anchor = anchor.trim();
                match current.as_mut() {
                    Some(b) if b.body.is_empty() => b.push_anchor(anchor),
                    _ => {
                        if let Some(b) = current.take() {
                            hunks.push(b.finish(&path)?);
                        }
                        let mut b = Builder::new(here);
                        b.push_anchor(anchor);
                        current = Some(b);
                    }
                }
                need_marker = false;
            } else if line.trim_end() == EOF_MARK {
                let Some(mut b) = current.take() else {
                    return Err(PatchError::malformed(here, format!("'{EOF_MARK}' outside a hunk")));
                };
                b.at_eof = true;
                hunks.push(b.finish(&path)?);
                need_marker = true;
            } else if line.starts_with(MOVE) {
                return Err(PatchError::malformed(here, format!("'{MOVE}' must directly follow its '{UPDATE}' line")));
            } else if line.starts_with("***") {
                return Err(unknown_header(here, line));
            } else if line.starts_with('\\') {
                // `\ No newline at end of file`: the final-newline state is kept anyway.
            } else if is_bare_empty(line) && current.is_none() {
                // A separator line between hunks or before the first one.
            } else if let Some(parsed) = hunk_line(line) {
                let b = match current.as_mut() {
                    Some(b) => b,
                    None if hunks.is_empty() && !need_marker => current.insert(Builder::new(here)),
                    None => {
                        return Err(PatchError::malformed(
                            here,
                            format!(
                                "hunk without @@ in '{UPDATE} {path}': every hunk after the first (and any after \
                                 '{EOF_MARK}') must start with an '@@' line"
                            ),
                        ))
                    }
                };
                b.bare_empty_tail = if is_bare_empty(line) { b.bare_empty_tail + 1 } else { 0 };
                b.body.push(parsed);
            } else {
                return Err(PatchError::malformed(
                    here,
                    format!(
                        "unexpected line in '{UPDATE} {path}': hunk lines start with ' ', '-', '+' or '@@', found '{}'",
                        shorten(line)
                    ),
                ));
            }
            self.i += 1;
        }
        if let Some(b) = current.take() {
            hunks.push(b.finish(&path)?);
        }
        if hunks.is_empty() && move_to.is_none() {
            return Err(PatchError::malformed(
                at,
                format!("'{UPDATE} {path}' has no hunks (give '@@' hunks, or a '{MOVE}' line to rename)"),
            ));
        }
        Ok(PatchOp::Update { line: at, path, move_to, hunks })
    }
}

fn unknown_header(at: usize, line: &str) -> PatchError {
    PatchError::malformed(
        at,
        format!(
            "unknown header '{}' (known: '{ADD}', '{UPDATE}', '{MOVE}', '{DELETE}', '{EOF_MARK}', '{END}')",
            shorten(line)
        ),
    )
}

/// Whitespace only and no prefix: an empty context line whose space was lost.
fn is_bare_empty(line: &str) -> bool {
    line.trim().is_empty() && !line.starts_with([' ', '+', '-'])
}

fn hunk_line(line: &str) -> Option<HunkLine> {
    if is_bare_empty(line) {
        return Some(HunkLine::Context(String::new()));
    }
    if let Some(rest) = line.strip_prefix(' ') {
        Some(HunkLine::Context(rest.to_string()))
    } else if let Some(rest) = line.strip_prefix('-') {
        Some(HunkLine::Remove(rest.to_string()))
    } else {
        line.strip_prefix('+').map(|rest| HunkLine::Add(rest.to_string()))
    }
}

struct Builder {
    line: usize,
    anchors: Vec<String>,
    body: Vec<HunkLine>,
    at_eof: bool,
    /// How many of the last body lines were bare empty lines (not `" "`).
    bare_empty_tail: usize,
}

impl Builder {
    fn new(line: usize) -> Self {
        Builder { line, anchors: Vec::new(), body: Vec::new(), at_eof: false, bare_empty_tail: 0 }
    }

    fn push_anchor(&mut self, anchor: &str) {
        if !anchor.is_empty() && !is_unified_range(anchor) {
            self.anchors.push(anchor.to_string());
        }
    }

    fn finish(mut self, path: &str) -> Result<Hunk, PatchError> {
        let keep = self.body.len() - self.bare_empty_tail;
        self.body.truncate(keep);
        if self.body.is_empty() {
            return Err(PatchError::malformed(self.line, format!("empty hunk in '{UPDATE} {path}': no lines follow")));
        }
        if !self.body.iter().any(|l| !matches!(l, HunkLine::Context(_))) {
            return Err(PatchError::malformed(
                self.line,
                format!("hunk in '{UPDATE} {path}' changes nothing: it has no '+' or '-' lines"),
            ));
        }
        Ok(Hunk { line: self.line, anchors: self.anchors, lines: self.body, at_eof: self.at_eof })
    }
}
