//! Editor features of plan documents: symbols, folding ranges, code lenses and the
//! structure warnings as diagnostics. Built from the domain's decomposition of the
//! plan text; the results are LSP-shaped JSON.

use forge_domain::diagnostics::PositionEncoding;
use forge_domain::plan::{decompose::decompose, fences::fenced_lines};
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
    blocks_of(text, &decompose(text))
}

/// [`blocks`] of `text`, given its decomposition `d`.
fn blocks_of(text: &str, d: &forge_domain::plan::decompose::Decomposition) -> Vec<Block> {
    let lines: Vec<&str> = forge_domain::text::split_lines(text);
    let fenced = fenced_lines(&lines);
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

/// The plan's lines (split at `\n`, as its structure is read) placed in the client's
/// lines, which LSP also ends at a lone `\r`: a plan holding one would otherwise put every
/// symbol, fold, lens and warning after it on the wrong line.
struct ClientLines<'a> {
    text: &'a str,
    /// Byte offset where each plan line starts.
    plan: Vec<usize>,
    /// Byte offset where each client line starts.
    client: Vec<usize>,
}

impl<'a> ClientLines<'a> {
    fn new(text: &'a str) -> Self {
        let b = text.as_bytes();
        let mut plan = vec![0];
        let mut client = vec![0];
        for (i, &c) in b.iter().enumerate() {
            if c == b'\n' {
                plan.push(i + 1);
                client.push(i + 1);
            } else if c == b'\r' && b.get(i + 1) != Some(&b'\n') {
                client.push(i + 1);
            }
        }
        ClientLines { text, plan, client }
    }

    /// The client position (line, character) of byte `at`.
    fn pos(&self, at: usize, enc: PositionEncoding) -> (usize, usize) {
        let line = self.client.partition_point(|&s| s <= at).saturating_sub(1);
        let part = &self.text[self.client[line]..at];
        let ch = match enc {
            PositionEncoding::Utf8 => part.len(),
            PositionEncoding::Utf16 => part.encode_utf16().count(),
        };
        (line, ch)
    }

    /// The client line where plan line `i` starts.
    fn line(&self, i: usize) -> usize {
        let at = self.plan.get(i).copied().unwrap_or(self.text.len());
        self.pos(at, PositionEncoding::Utf8).0
    }

    /// The client position of the end of plan line `i` (before its line break).
    fn end(&self, i: usize, enc: PositionEncoding) -> (usize, usize) {
        let mut at = self.plan.get(i + 1).map_or(self.text.len(), |n| n - 1);
        at = at.min(self.text.len());
        if self.text[..at].ends_with('\r') && self.text.as_bytes().get(at) == Some(&b'\n') {
            at -= 1;
        }
        self.pos(at, enc)
    }
}

fn range(lines: &ClientLines, start: usize, end: usize, enc: PositionEncoding) -> Value {
    let last = end.saturating_sub(1).max(start);
    let (end_line, end_char) = lines.end(last, enc);
    json!({ "start": { "line": lines.line(start), "character": 0 }, "end": { "line": end_line, "character": end_char } })
}

/// `textDocument/documentSymbol` result.
pub fn symbols(text: &str, enc: PositionEncoding) -> Vec<Value> {
    let lines = ClientLines::new(text);
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
    let client = ClientLines::new(text);
    blocks(text)
        .into_iter()
        .filter_map(|b| {
            // Do not fold trailing blank lines.
            let mut end = b.end.min(lines.len());
            while end > b.start + 1 && lines[end - 1].trim().is_empty() {
                end -= 1;
            }
            let (first, last) = (client.line(b.start), client.end(end - 1, PositionEncoding::Utf8).0);
            (last > first).then(|| json!({ "startLine": first, "endLine": last, "kind": "region" }))
        })
        .collect()
}

/// The structure warnings as diagnostics (severity Warning, source `forge`).
pub fn warning_diagnostics(text: &str, enc: PositionEncoding) -> Vec<Value> {
    let warnings = forge_tools::plan_ops::warnings(text);
    if warnings.is_empty() {
        // The common case: no line table of the whole plan to build.
        return vec![];
    }
    let lines = ClientLines::new(text);
    warnings
        .iter()
        .map(|w| {
            // The warning's plan line, on the client line it starts on.
            let i = w.line.unwrap_or(0);
            let line = lines.line(i);
            let (end_line, end_char) = lines.end(i, enc);
            let e = if end_line == line {
                end_char
            } else {
                let next = lines.client.get(line + 1).map_or(text.len(), |n| n.saturating_sub(1));
                lines.pos(next, enc).1
            };
            diagnostic(line as u32, 0, e as u32, 2, &w.message, None, None)
        })
        .collect()
}

/// A stored section of a loop, as its lens shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionRow {
    pub index: usize,
    pub status: String,
    pub title: String,
}

/// The longest section title a lens shows, in characters (plan-adjust takes titles of up
/// to 200; the master plan's are cut at about 60).
const LENS_TITLE_CHARS: usize = 60;

/// Section status lens titles for a loop plan `text` (the master plan, which never
/// changes): `(heading line, title)`, given the loop's stored sections `rows`, its `total`,
/// and the section indexes plan-adjust touched (`adjusted`: those in the before and after
/// snapshots of its amendments). A touched section says what it is now, or that it was
/// removed; sections appended past the master's get lenses on the last section's heading
/// (the master text has no place of theirs), in order. What was not touched shows its
/// status only, whatever the master text decomposes to today (a loop started by an older
/// server, a client's buffer with other line endings). With no row for an untouched
/// section (not read), it reads as pending.
pub fn section_lenses(
    text: &str,
    rows: &[SectionRow],
    adjusted: &std::collections::HashSet<usize>,
    total: usize,
) -> Vec<(usize, String)> {
    let lines = ClientLines::new(text);
    let d = decompose(text);
    let total = total.max(rows.iter().map(|r| r.index + 1).max().unwrap_or(0));
    let status = |r: &SectionRow| r.status.replace('_', " ");
    let head = |idx: usize, st: &str| format!("Section {}/{} · {st}", idx + 1, total.max(idx + 1));
    let shown = |title: &str| match title.char_indices().nth(LENS_TITLE_CHARS) {
        Some((at, _)) => format!("{}…", &title[..at]),
        None => title.to_string(),
    };
    let mut out = vec![];
    let mut last = None;
    for b in blocks_of(text, &d) {
        let Some(idx) = b.section else { continue };
        let line = lines.line(b.heading);
        last = Some(line);
        let row = rows.iter().find(|r| r.index == idx);
        let title = match (row, adjusted.contains(&idx)) {
            (Some(r), false) => head(idx, &status(r)),
            (Some(r), true) => format!("{} · adjusted: {}", head(idx, &status(r)), shown(&r.title)),
            (None, false) => head(idx, "pending"),
            (None, true) => format!("Section {} · removed by plan-adjust", idx + 1),
        };
        out.push((line, title));
    }
    if let Some(line) = last {
        let mut beyond: Vec<&SectionRow> = rows.iter().filter(|r| r.index >= d.sections.len()).collect();
        beyond.sort_by_key(|r| r.index);
        for r in beyond {
            out.push((
                line,
                match adjusted.contains(&r.index) {
                    true => format!("{} · added by plan-adjust: {}", head(r.index, &status(r)), shown(&r.title)),
                    false => head(r.index, &status(r)),
                },
            ));
        }
    }
    out
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

    /// A lone `\r` ends a line for the client (LSP), not for the plan's structure: the
    /// features land on the client's lines. CRLF is one break for both.
    #[test]
    fn a_lone_carriage_return_is_a_client_line_break() {
        let text = "# Plan\n\n## Objective\rx\n<!-- forge-section -->\n## Phase 1: a long heading title here\r\nbody\n";
        let s = symbols(text, PositionEncoding::Utf16);
        let objective = s.iter().find(|x| x["name"].as_str().unwrap().starts_with("Objective")).unwrap();
        // Plan line 2 is `## Objective\rx`: the client's lines 2 and 3.
        assert_eq!(objective["selectionRange"]["start"]["line"], 2);
        assert_eq!(objective["selectionRange"]["end"], json!({ "line": 3, "character": 1 }));
        let phase = s.iter().find(|x| x["name"].as_str().unwrap().starts_with("1. ")).unwrap();
        assert_eq!(phase["selectionRange"]["start"]["line"], 5);
        assert_eq!(phase["selectionRange"]["end"], json!({ "line": 5, "character": 37 }));
        let lenses = section_lenses(text, &[], &Default::default(), 1);
        assert_eq!(lenses[0].0, 5);
        for w in warning_diagnostics(text, PositionEncoding::Utf16) {
            assert!(w["range"]["start"]["line"].as_u64().unwrap() <= 6, "{w}");
        }
        // Without a lone `\r` nothing moves.
        let plain = symbols(PLAN, PositionEncoding::Utf8);
        assert_eq!(plain[2]["range"]["end"], json!({ "line": 11, "character": 0 }));
    }

    /// What plan-adjust did shows on the master plan's lenses: a touched section says
    /// what it is now or that it was removed, appended ones follow on the last section; an
    /// untouched one shows its status only, whatever its stored title.
    #[test]
    fn loop_plan_lenses_say_what_plan_adjust_changed() {
        let row = |i: usize, status: &str, title: &str| SectionRow {
            index: i,
            status: status.to_string(),
            title: title.to_string(),
        };
        let (p1, p2) = (line_of("## Phase 1: a"), line_of("## Phase 2: b"));
        let long = "x".repeat(80);
        let cut = format!("Section 2/2 · pending · adjusted: {}…", "x".repeat(60));
        type Case<'a> = (Vec<SectionRow>, Vec<usize>, usize, Vec<(usize, &'a str)>);
        let cases: Vec<Case> = vec![
            // No rows known (not read): pending.
            (vec![], vec![], 2, vec![(p1, "Section 1/2 · pending"), (p2, "Section 2/2 · pending")]),
            // Not adjusted: the status only, even when a stored title is not what the
            // master decomposes to today (a loop started by an older server).
            (
                vec![row(0, "completed", "Section 1"), row(1, "in_progress", "Phase 2: b")],
                vec![],
                2,
                vec![(p1, "Section 1/2 · completed"), (p2, "Section 2/2 · in progress")],
            ),
            // The section under audit revised, two appended.
            (
                vec![
                    row(0, "completed", "Phase 1: a"),
                    row(1, "in_progress", "Phase 2: b"),
                    row(2, "pending", "Phase 3: c"),
                    row(3, "pending", "Phase 4: d"),
                ],
                vec![1, 2, 3],
                4,
                vec![
                    (p1, "Section 1/4 · completed"),
                    (p2, "Section 2/4 · in progress · adjusted: Phase 2: b"),
                    (p2, "Section 3/4 · pending · added by plan-adjust: Phase 3: c"),
                    (p2, "Section 4/4 · pending · added by plan-adjust: Phase 4: d"),
                ],
            ),
            // The pending suffix replaced by nothing.
            (
                vec![row(0, "in_progress", "Phase 1: a")],
                vec![1],
                1,
                vec![(p1, "Section 1/1 · in progress"), (p2, "Section 2 · removed by plan-adjust")],
            ),
            // A long title is cut.
            (
                vec![row(0, "completed", "Phase 1: a"), row(1, "pending", &long)],
                vec![1],
                2,
                vec![(p1, "Section 1/2 · completed"), (p2, &cut)],
            ),
        ];
        for (rows, adjusted, total, want) in cases {
            let got = section_lenses(PLAN, &rows, &adjusted.into_iter().collect(), total);
            let got: Vec<(usize, &str)> = got.iter().map(|(l, t)| (*l, t.as_str())).collect();
            assert_eq!(got, want, "{rows:?}");
        }
    }

    fn line_of(needle: &str) -> usize {
        PLAN.split('\n').position(|l| l == needle).unwrap()
    }
}
