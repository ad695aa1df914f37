//! Editor features of plan documents: symbols, folding ranges, code lenses and the
//! structure warnings as diagnostics. Built from the domain's decomposition of the
//! plan text; the results are LSP-shaped JSON.

use forge_domain::diagnostics::{line_range, PositionEncoding};
use forge_domain::plan::{decompose::decompose, fences::fenced_lines, structure};
use serde_json::{json, Value};

use crate::to_proto::diagnostic;

/// A block of lines `[start, end)` with a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub name: String,
    pub kind: u8,
    pub start: usize,
    pub end: usize,
    /// The line that names the block (its heading), for selection ranges and lenses.
    pub heading: usize,
    /// The section index for sections.
    pub section: Option<usize>,
}

fn h2(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("##")?;
    if rest.starts_with('#') {
        return None;
    }
    let t = rest.trim();
    (!t.is_empty() && rest.starts_with(char::is_whitespace)).then_some(t)
}

/// The plan's blocks: preamble, sections, trailing headings.
pub fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = forge_domain::text::split_lines(text);
    let fenced = fenced_lines(&lines);
    let d = decompose(text);
    let mut out = vec![];
    // Blocks outside sections are split at unfenced level-2 headings.
    let push_free = |out: &mut Vec<Block>, from: usize, to: usize, first_name: &str| {
        let mut start = from;
        let mut name = first_name.to_string();
        for i in from..to.min(lines.len()) {
            if fenced.get(i).copied().unwrap_or(false) {
                continue;
            }
            if let Some(t) = h2(lines[i]) {
                if i > start && lines[start..i].iter().any(|l| !l.trim().is_empty()) {
                    out.push(Block { name: name.clone(), kind: 2, start, end: i, heading: start, section: None });
                }
                start = i;
                name = t.to_string();
            }
        }
        if to > start && lines[start..to.min(lines.len())].iter().any(|l| !l.trim().is_empty()) {
            out.push(Block { name, kind: 2, start, end: to.min(lines.len()), heading: start, section: None });
        }
    };
    let first = d.sections.first().map(|s| s.marker_line).unwrap_or(lines.len());
    push_free(&mut out, 0, first, "Preamble");
    for s in &d.sections {
        let heading = (s.start_line..s.end_line)
            .find(|&i| lines.get(i).is_some_and(|l| h2(l).is_some()))
            .unwrap_or(s.marker_line);
        out.push(Block {
            name: format!("{}. {}", s.index + 1, s.title),
            kind: 3,
            start: s.marker_line,
            end: s.end_line.max(s.marker_line + 1),
            heading,
            section: Some(s.index),
        });
    }
    if let Some(last) = d.sections.last() {
        push_free(&mut out, last.end_line, lines.len(), "Trailing");
    }
    out
}

fn range(text_lines: &[&str], start: usize, end: usize, enc: PositionEncoding) -> Value {
    let last = end.saturating_sub(1).max(start);
    let end_char = text_lines.get(last).map(|l| char_len(l, enc)).unwrap_or(0);
    json!({ "start": { "line": start, "character": 0 }, "end": { "line": last, "character": end_char } })
}

fn char_len(line: &str, enc: PositionEncoding) -> usize {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match enc {
        PositionEncoding::Utf8 => line.len(),
        PositionEncoding::Utf16 => line.encode_utf16().count(),
    }
}

/// `textDocument/documentSymbol` result.
pub fn symbols(text: &str, enc: PositionEncoding) -> Vec<Value> {
    let lines: Vec<&str> = forge_domain::text::split_lines(text);
    blocks(text)
        .into_iter()
        .map(|b| {
            json!({
                "name": b.name,
                "kind": b.kind,
                "range": range(&lines, b.start, b.end, enc),
                "selectionRange": range(&lines, b.heading, b.heading + 1, enc),
            })
        })
        .collect()
}

/// `textDocument/foldingRange` result.
pub fn folding(text: &str) -> Vec<Value> {
    let lines: Vec<&str> = forge_domain::text::split_lines(text);
    blocks(text)
        .into_iter()
        .filter_map(|b| {
            // Do not fold trailing blank lines.
            let mut end = b.end.min(lines.len());
            while end > b.start + 1 && lines[end - 1].trim().is_empty() {
                end -= 1;
            }
            (end - 1 > b.start).then(|| json!({ "startLine": b.start, "endLine": end - 1, "kind": "region" }))
        })
        .collect()
}

/// The structure warnings as diagnostics (severity Warning, source `forge`).
pub fn warning_diagnostics(text: &str, enc: PositionEncoding) -> Vec<Value> {
    structure::warnings(text)
        .into_iter()
        .map(|w| {
            let line = w.line.unwrap_or(0) as i64 + 1;
            let (l, s, e) = line_range(text, line, enc).unwrap_or((0, 0, 0));
            diagnostic(l, s, e, 2, &w.message, None, None)
        })
        .collect()
}

/// Section status lens titles for a loop plan: `(heading line, title)`.
pub fn section_lenses(text: &str, statuses: &[(usize, String)], total: usize) -> Vec<(usize, String)> {
    blocks(text)
        .into_iter()
        .filter_map(|b| {
            let idx = b.section?;
            let status = statuses.iter().find(|(i, _)| *i == idx).map(|(_, s)| s.as_str()).unwrap_or("pending");
            Some((b.heading, format!("Section {}/{} · {}", idx + 1, total.max(idx + 1), status.replace('_', " "))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "# Plan\n\n## Objective\nDo it.\n\nLoop Name: x\n\n<!-- forge-section -->\n## Phase 1: a\n### Files\n- a\n\n<!-- forge-section -->\n## Phase 2: b\nbody\n\n## Decisions\n- d\n";

    #[test]
    fn blocks_cover_preamble_sections_trailing() {
        let b = blocks(PLAN);
        let names: Vec<_> = b.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["Preamble", "Objective", "1. Phase 1: a", "2. Phase 2: b", "Decisions"]);
        assert_eq!(b[2].start, 7);
        assert_eq!(b[2].heading, 8);
        assert_eq!(b[3].start, 12);
    }

    #[test]
    fn folding_and_symbols() {
        let f = folding(PLAN);
        assert!(f.iter().any(|r| r["startLine"] == 7 && r["endLine"] == 10), "{f:?}");
        let s = symbols(PLAN, PositionEncoding::Utf16);
        assert_eq!(s.len(), 5);
        assert_eq!(s[2]["selectionRange"]["start"]["line"], 8);
    }
}
