//! The deterministic decomposer (FORGE-REFERENCE §3.2): plan text to sections.
//!
//! 1. The first `<!-- forge-plan:start -->` (with the whitespace after it) and the
//!    first `<!-- forge-plan:end -->` (with the whitespace before it) are removed,
//!    and unfenced legacy `<!-- forge-section:start|end -->` lines are dropped.
//! 2. Every unfenced `<!-- forge-section -->` line is a marker.
//! 3. A marker's body runs to the next marker, cut at the first unfenced line whose
//!    trimmed text starts with `## Verification`, `## Decisions`, `## Conventions`
//!    or `## Key Context`.
//! 4. An empty body is skipped without using a number. The title is the first
//!    unfenced `## ` heading of the body that is not structural, cut to 60
//!    UTF-16 units, else `Section <k>`.
//! 5. Only the first [`MAX_TOTAL_SECTIONS`] sections are kept.
//!
//! Line numbers in the result refer to the text passed in: removing the plan
//! wrapper or legacy lines does not renumber the lines after them.

use std::sync::LazyLock;

use regex::Regex;

use super::fences::fenced_lines;
use super::{
    cut_utf16, is_js_space, is_legacy_section_marker, is_section_marker, js_trim, static_regex, MAX_TOTAL_SECTIONS, WS,
};
use crate::text::split_lines;

/// One executable section of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// 0-based position among the produced sections.
    pub index: usize,
    /// Display title (first non-structural `## ` heading, or `Section <k>`).
    pub title: String,
    /// The body text, trimmed.
    pub content: String,
    /// 0-based line of the `<!-- forge-section -->` marker.
    pub marker_line: usize,
    /// 0-based first line of the body (the line after the marker).
    pub start_line: usize,
    /// 0-based line where the body stops, exclusive: the next marker, a stop
    /// heading, or the line count of the text.
    pub end_line: usize,
}

/// The decomposer's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decomposition {
    /// The produced sections, at most [`MAX_TOTAL_SECTIONS`].
    pub sections: Vec<Section>,
    /// Every marker found, empty ones included, before the cap.
    pub marker_count: usize,
    /// Sections with a non-empty body, before the cap.
    pub uncapped_count: usize,
}

static PLAN_START: LazyLock<Regex> =
    LazyLock::new(|| static_regex(&format!(r"<!--{WS}*forge-plan:start{WS}*-->{WS}*\n?")));
static PLAN_END: LazyLock<Regex> = LazyLock::new(|| static_regex(&format!(r"\n?{WS}*<!--{WS}*forge-plan:end{WS}*-->")));
/// The pattern [`title_heading`] implements (a test compares the two).
#[cfg(test)]
static SECTION_TITLE: LazyLock<Regex> = LazyLock::new(|| static_regex(&format!(r"^##{WS}+({}+)$", super::DOT)));

/// The text of a `## ` heading line, as `^##{WS}+({DOT}+)$` captures it (`WS` is
/// [`is_js_space`], `DOT` any character but `\n`, `\r`, U+2028 and U+2029): the greedy
/// white space run takes every space after `##`, so the capture is the rest of the line
/// when it is not empty and holds no line terminator. (For a rest of white space only the
/// regex captures its last character, which trims to nothing, or does not match when that
/// character is a line terminator: no title either way, so `None`.)
/// By hand: the regex was a twentieth of a plan-edit's time, searching for this once per
/// section.
fn title_heading(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("##")?;
    let text = rest.trim_start_matches(is_js_space);
    let terminator = |c: char| matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}');
    (text.len() < rest.len() && !text.is_empty() && !text.contains(terminator)).then_some(text)
}

const STOP_HEADINGS: [&str; 4] = ["## Verification", "## Decisions", "## Conventions", "## Key Context"];

const STRUCTURAL_TITLES: [&str; 6] =
    ["verification", "decisions", "conventions", "key context", "objective", "loop name"];

/// Whether a line (any indentation) starts a block that belongs to no section.
pub(crate) fn is_stop_heading(line: &str) -> bool {
    let t = js_trim(line);
    STOP_HEADINGS.iter().any(|h| t.starts_with(h))
}

/// The text after step 1, split into lines, each paired with its line number in
/// the original text. Legacy marker lines are already left out.
struct Prepared<'a> {
    lines: Vec<(usize, &'a str)>,
    fenced: Vec<bool>,
    /// The text's own line count (legacy marker lines included).
    raw_count: usize,
}

/// Removes `start..end` from `text` and keeps `origin` (the original line of each
/// current line) in step. The line the removal joins together keeps the number of
/// the line its text comes from: the first one when text precedes the removed span
/// on it, else the last one.
fn remove_span(text: &mut String, origin: &mut Vec<usize>, start: usize, end: usize) {
    let line_start = text[..start].rfind('\n').map_or(0, |p| p + 1);
    let line_of_start = text[..start].matches('\n').count();
    let newlines_removed = text[start..end].matches('\n').count();
    let prefix_blank = js_trim(&text[line_start..start]).is_empty();
    let from = if prefix_blank { line_of_start } else { line_of_start + 1 };
    let from = from.min(origin.len());
    let to = (from + newlines_removed).min(origin.len());
    origin.drain(from..to);
    text.replace_range(start..end, "");
}

/// Step 1: the plan without its plan start and end markers (borrowed when it has
/// none) and the original line of each of its lines (the plan's own line count is
/// `split_lines(plan).len()`). A borrowed plan keeps its lines: its origin is empty,
/// which [`prepare`] reads as every line being its own.
fn strip_plan_markers(plan: &str) -> (std::borrow::Cow<'_, str>, Vec<usize>) {
    // Both markers hold this literal; a plan without it is scanned once, by memmem.
    if memchr::memmem::find(plan.as_bytes(), b"forge-plan:").is_none()
        || (!PLAN_START.is_match(plan) && !PLAN_END.is_match(plan))
    {
        return (std::borrow::Cow::Borrowed(plan), Vec::new());
    }
    let mut origin: Vec<usize> = (0..crate::text::line_count(plan)).collect();
    let mut text = plan.to_string();
    if let Some(m) = PLAN_START.find(&text) {
        let (s, e) = (m.start(), m.end());
        remove_span(&mut text, &mut origin, s, e);
    }
    if let Some(m) = PLAN_END.find(&text) {
        let (s, e) = (m.start(), m.end());
        remove_span(&mut text, &mut origin, s, e);
    }
    (std::borrow::Cow::Owned(text), origin)
}

fn prepare<'a>(text: &'a str, origin: &[usize]) -> Prepared<'a> {
    let raw: Vec<&str> = split_lines(text);
    let raw_fenced = fenced_lines(&raw);
    // Every legacy marker holds this literal; a plan without it keeps all its lines.
    let keep_all = memchr::memmem::find(text.as_bytes(), b"forge-section:").is_none();
    let lines: Vec<(usize, &str)> = raw
        .iter()
        .enumerate()
        .filter(|&(i, line)| keep_all || raw_fenced[i] || !is_legacy_section_marker(line))
        .map(|(i, line)| (origin.get(i).copied().unwrap_or(i), *line))
        .collect();
    // Without legacy marker lines left out, the lines are the raw ones and so is their
    // fence state.
    let fenced = if lines.len() == raw.len() {
        raw_fenced
    } else {
        fenced_lines(&lines.iter().map(|(_, l)| *l).collect::<Vec<_>>())
    };
    Prepared { lines, fenced, raw_count: raw.len() }
}

/// The title of a section body: the first unfenced `## ` heading that is not
/// structural, cut to 60 UTF-16 units. The `\r` of a CRLF line is not part of the line
/// here: Forge's pattern, which cannot match across a `\r`, named every section of a
/// CRLF plan (one saved by a Windows editor) "Section k".
fn section_title(body: &[(usize, &str)], fenced: &[bool]) -> Option<String> {
    body.iter().zip(fenced).find_map(|((_, line), &in_fence)| {
        if in_fence {
            return None;
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let candidate = js_trim(title_heading(line)?);
        // A heading of whitespace only (`## \u{feff}`) names nothing: look further.
        if candidate.is_empty() || STRUCTURAL_TITLES.contains(&candidate.to_lowercase().as_str()) {
            return None;
        }
        Some(cut_utf16(candidate, 60).to_string())
    })
}

/// Every section with a non-empty body (no cap) and the original line of every
/// marker: the one scan that [`decompose`], [`marker_lines`] and the structure
/// warnings share.
pub(crate) struct Scan<'a> {
    /// The sections (their `content` is empty in a plain [`scan_for_checks`]).
    pub(crate) all: Vec<Section>,
    pub(crate) markers: Vec<usize>,
    /// The plan's own lines and their fence state, when the scan read the plan as it is
    /// (no plan markers stripped, no legacy marker line left out): the structure
    /// warnings reuse them instead of splitting and fencing the plan again.
    pub(crate) plain: Option<(Vec<&'a str>, Vec<bool>)>,
}

pub(crate) fn scan(plan: &str) -> Scan<'_> {
    scan_with(plan, true)
}

/// [`scan`] for the structure checks: a plain scan leaves every section's `content` empty
/// (the checks read the section's lines from `plain`, and a copy of every body was a
/// twentieth of a plan-edit's samples); a scan that is not plain keeps them.
pub(crate) fn scan_for_checks(plan: &str) -> Scan<'_> {
    scan_with(plan, false)
}

fn scan_with(plan: &str, contents: bool) -> Scan<'_> {
    match strip_plan_markers(plan) {
        (std::borrow::Cow::Borrowed(text), origin) => scan_text(text, &origin, None, contents),
        (std::borrow::Cow::Owned(text), origin) => {
            let original_line_count = crate::text::line_count(plan);
            let Scan { all, markers, .. } = scan_text(&text, &origin, Some(original_line_count), true);
            Scan { all, markers, plain: None }
        }
    }
}

/// `original_line_count`: the plan's line count when `text` is not the plan itself
/// (`None`: it is, and the count is `text`'s). `contents`: false leaves the sections'
/// `content` empty when the scan is plain ([`scan_for_checks`]).
fn scan_text<'t>(text: &'t str, origin: &[usize], original_line_count: Option<usize>, contents: bool) -> Scan<'t> {
    let Prepared { lines, fenced, raw_count } = prepare(text, origin);
    let original_line_count = original_line_count.unwrap_or(raw_count);
    // Every line kept: the lines are the plan's (`text` is the plan when called from
    // `scan` with nothing stripped; with markers stripped, `scan` drops this).
    let plain = lines.len() == original_line_count;
    let contents = contents || !plain;

    let markers: Vec<usize> = (0..lines.len()).filter(|&i| !fenced[i] && is_section_marker(lines[i].1)).collect();

    let mut all: Vec<Section> = Vec::new();
    for (n, &marker) in markers.iter().enumerate() {
        let start = marker + 1;
        let next = markers.get(n + 1).copied().unwrap_or(lines.len());
        let end = (start..next).find(|&j| !fenced[j] && is_stop_heading(lines[j].1)).unwrap_or(next);
        let start = start.min(end);
        let body = &lines[start..end];
        let joined = joined_lines(text, body);
        let content = js_trim(&joined);
        if content.is_empty() {
            continue;
        }
        let index = all.len();
        let title = section_title(body, &fenced[start..end]).unwrap_or_else(|| format!("Section {}", index + 1));
        let marker_line = lines[marker].0;
        let end_line = lines.get(end).map(|(orig, _)| *orig).unwrap_or(original_line_count);
        all.push(Section {
            index,
            title,
            content: if contents { content.to_string() } else { String::new() },
            marker_line,
            start_line: marker_line + 1,
            end_line,
        });
    }

    let markers = markers.iter().map(|&i| lines[i].0).collect();
    let plain = plain.then(|| (lines.into_iter().map(|(_, l)| l).collect(), fenced));
    Scan { all, markers, plain }
}

/// `body`'s lines joined with `\n`. Every line is a slice of `text`; lines that follow each
/// other in it (all of them, unless a legacy marker line was left out between two) are
/// already joined there, and are borrowed instead of copied.
fn joined_lines<'a>(text: &'a str, body: &[(usize, &'a str)]) -> std::borrow::Cow<'a, str> {
    let offset = |line: &str| line.as_ptr() as usize - text.as_ptr() as usize;
    let consecutive = body.windows(2).all(|w| offset(w[0].1) + w[0].1.len() + 1 == offset(w[1].1));
    match (body.first(), body.last()) {
        (Some(first), Some(last)) if consecutive => {
            std::borrow::Cow::Borrowed(&text[offset(first.1)..offset(last.1) + last.1.len()])
        }
        _ => std::borrow::Cow::Owned(body.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("\n")),
    }
}

/// Splits a plan into its executable sections.
pub fn decompose(plan: &str) -> Decomposition {
    let Scan { mut all, markers, .. } = scan(plan);
    let uncapped_count = all.len();
    all.truncate(MAX_TOTAL_SECTIONS);
    Decomposition { sections: all, marker_count: markers.len(), uncapped_count }
}

/// Line numbers (0-based, of `plan`) of the unfenced section markers, after the
/// same preparation the decomposer applies.
pub fn marker_lines(plan: &str) -> Vec<usize> {
    scan(plan).markers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_lines_borrow_consecutive_lines_and_join_the_others() {
        let text = "a\nb\n<!-- legacy -->\nc";
        let lines = split_lines(text);
        let all: Vec<(usize, &str)> = lines.iter().copied().enumerate().collect();
        let j = joined_lines(text, &all[..2]);
        assert!(matches!(j, std::borrow::Cow::Borrowed("a\nb")), "{j:?}");
        let gap = [all[1], all[3]];
        let j = joined_lines(text, &gap);
        assert!(matches!(&j, std::borrow::Cow::Owned(s) if s == "b\nc"), "{j:?}");
        assert_eq!(joined_lines(text, &[]), "");
        assert_eq!(joined_lines(text, &all[3..]), "c");
    }

    #[test]
    fn the_title_heading_is_what_the_pattern_captures() {
        let pieces = [
            "##", "#", " ", "\t", "\u{a0}", "\u{feff}", "\r", "\u{2028}", "\u{2029}", "\u{85}", "x", "Phase 1", "é",
            "😀",
        ];
        let mut lines = vec![String::new()];
        for _ in 0..4 {
            lines = lines.iter().flat_map(|l| pieces.iter().map(move |p| format!("{l}{p}"))).collect();
        }
        for line in &lines {
            let want = SECTION_TITLE.captures(line).and_then(|c| c.get(1)).map(|m| js_trim(m.as_str()));
            let got = title_heading(line).map(js_trim);
            // Both name the same title; a capture that trims to nothing names none.
            assert_eq!(got.filter(|t| !t.is_empty()), want.filter(|t| !t.is_empty()), "{line:?}");
        }
        assert_eq!(lines.len(), 14usize.pow(4));
    }

    fn titles(plan: &str) -> Vec<String> {
        decompose(plan).sections.into_iter().map(|s| s.title).collect()
    }

    #[test]
    fn a_crlf_plan_has_the_titles_of_its_lf_twin() {
        let lf = "# Plan\n\n<!-- forge-section -->\n## Phase 1: tokens\n- one\n\n<!-- forge-section -->\n## Phase 2 😀\n- two\n";
        let crlf = lf.replace('\n', "\r\n");
        assert_eq!(titles(&crlf), ["Phase 1: tokens", "Phase 2 😀"]);
        assert_eq!(titles(&crlf), titles(lf));
        // A lone CR inside the heading is still no title (a line terminator in it).
        assert_eq!(titles("<!-- forge-section -->\n## A\rB\n- x"), ["Section 1"]);
    }

    #[test]
    fn splits_on_markers_with_titles_and_lines() {
        let plan = "# Plan\n\n<!-- forge-section -->\n## Phase 1\n- one\n\n<!-- forge-section -->\n## Phase 2\n- two\n";
        let d = decompose(plan);
        assert_eq!(d.marker_count, 2);
        assert_eq!(d.uncapped_count, 2);
        assert_eq!(d.sections.len(), 2);
        let a = &d.sections[0];
        assert_eq!((a.index, a.title.as_str(), a.content.as_str()), (0, "Phase 1", "## Phase 1\n- one"));
        assert_eq!((a.marker_line, a.start_line, a.end_line), (2, 3, 6));
        let b = &d.sections[1];
        assert_eq!(b.content, "## Phase 2\n- two");
        // The trailing newline gives a 10th (empty) line: the last body runs to 10.
        assert_eq!((b.marker_line, b.start_line, b.end_line), (6, 7, 10));
    }

    #[test]
    fn a_heading_of_whitespace_only_names_nothing() {
        // Found by the fuzz harness: `##` followed by whitespace (here a BOM) was a title "".
        let plan = "<!-- forge-section -->\n##\r\u{feff}\nbody\n<!-- forge-section -->\n## \u{3000}\n## Real\nbody\n";
        assert_eq!(titles(plan), vec!["Section 1".to_string(), "Real".to_string()]);
    }

    #[test]
    fn no_markers_no_sections() {
        let d = decompose("# Plan\n## Phase 1\nx");
        assert_eq!(d.marker_count, 0);
        assert!(d.sections.is_empty());
    }

    #[test]
    fn empty_markers_are_skipped_without_using_a_number() {
        let plan = "<!-- forge-section -->\n\n<!-- forge-section -->\nbody\n<!-- forge-section -->\n   \n";
        let d = decompose(plan);
        assert_eq!(d.marker_count, 3);
        assert_eq!(d.uncapped_count, 1);
        assert_eq!(d.sections.len(), 1);
        assert_eq!(d.sections[0].index, 0);
        assert_eq!(d.sections[0].title, "Section 1");
        assert_eq!(d.sections[0].marker_line, 2);
    }

    #[test]
    fn cap_keeps_24_and_drops_the_rest() {
        let mut plan = String::new();
        for i in 1..=26 {
            plan.push_str(&format!("<!-- forge-section -->\n## Phase {i}\nbody\n"));
        }
        let d = decompose(&plan);
        assert_eq!(d.marker_count, 26);
        assert_eq!(d.uncapped_count, 26);
        assert_eq!(d.sections.len(), 24);
        assert_eq!(d.sections[23].title, "Phase 24");
        // The 24th section stops at the 25th marker, not merged with the tail.
        assert_eq!(d.sections[23].end_line, 24 * 3);
    }

    #[test]
    fn markers_inside_fences_are_ignored() {
        let plan = "<!-- forge-section -->\n## Phase 1\n```md\n<!-- forge-section -->\n## Decisions\n```\nafter\n~~~\n<!-- forge-section -->\n";
        let d = decompose(plan);
        assert_eq!(d.marker_count, 1);
        assert_eq!(d.sections.len(), 1);
        // The fenced stop heading does not cut, and the unclosed tilde fence hides
        // the last marker.
        assert!(d.sections[0].content.contains("after"));
        assert!(d.sections[0].content.ends_with("<!-- forge-section -->"));
        assert_eq!(d.sections[0].end_line, 10);
    }

    #[test]
    fn stop_headings_cut_every_section() {
        let plan = "<!-- forge-section -->\n## Phase 1\na\n## Verification\nrun\n<!-- forge-section -->\n## Phase 2\nb\n  ## Decisions\nd\n## Other\n";
        let d = decompose(plan);
        assert_eq!(d.sections.len(), 2);
        assert_eq!(d.sections[0].content, "## Phase 1\na");
        assert_eq!(d.sections[0].end_line, 3);
        assert_eq!(d.sections[1].content, "## Phase 2\nb");
        assert_eq!(d.sections[1].end_line, 8);
    }

    #[test]
    fn stop_heading_prefix_matches_longer_headings_but_not_h3() {
        let plan = "<!-- forge-section -->\n## Phase 1\n### Verification\nx\n## Verification steps\ny";
        let d = decompose(plan);
        assert_eq!(d.sections[0].content, "## Phase 1\n### Verification\nx");
    }

    #[test]
    fn non_stop_h2_after_last_phase_stays_in_last_section() {
        let plan = "<!-- forge-section -->\n## Phase 1\na\n## Notes\nn";
        assert!(decompose(plan).sections[0].content.ends_with("## Notes\nn"));
    }

    #[test]
    fn titles_skip_h3_structural_and_fenced_headings() {
        assert_eq!(titles("<!-- forge-section -->\n### Phase 1\ntext"), vec!["Section 1"]);
        assert_eq!(titles("<!-- forge-section -->\n## Objective\n## Loop Name\n## Real one\n"), vec!["Real one"]);
        assert_eq!(titles("<!-- forge-section -->\n```\n## Fenced\n```\n## Real"), vec!["Real"]);
        assert_eq!(titles("<!-- forge-section -->\n ## Indented\n"), vec!["Section 1"]);
    }

    #[test]
    fn title_is_cut_to_60_without_ellipsis() {
        let long = "x".repeat(80);
        let t = titles(&format!("<!-- forge-section -->\n## {long}\n"));
        assert_eq!(t, vec!["x".repeat(60)]);
        let emoji = format!("{}😀tail", "y".repeat(59));
        let t = titles(&format!("<!-- forge-section -->\n## {emoji}\n"));
        assert_eq!(t, vec!["y".repeat(59)]);
    }

    #[test]
    fn section_fallback_titles_count_produced_sections() {
        let plan = "<!-- forge-section -->\n## A\nx\n<!-- forge-section -->\n<!-- forge-section -->\nplain\n";
        assert_eq!(titles(plan), vec!["A", "Section 2"]);
    }

    #[test]
    fn plan_wrapper_is_removed_but_lines_keep_their_numbers() {
        let plan = "<!-- forge-plan:start -->\n\n# Plan\n<!-- forge-section -->\n## Phase 1\nx\n<!-- forge-plan:end -->\ntrailing";
        let d = decompose(plan);
        assert_eq!(d.sections.len(), 1);
        let s = &d.sections[0];
        assert_eq!(s.marker_line, 3);
        assert_eq!(s.start_line, 4);
        assert_eq!(s.end_line, 8);
        assert_eq!(s.content, "## Phase 1\nx\ntrailing");
    }

    #[test]
    fn legacy_pair_markers_never_split_and_are_dropped() {
        let plan = "<!-- forge-section -->\n## Phase 1\n<!-- forge-section:start -->\na\n<!-- forge-section:end -->\nb\n<!-- forge-section -->\n## Phase 2\nc";
        let d = decompose(plan);
        assert_eq!(d.marker_count, 2);
        assert_eq!(d.sections[0].content, "## Phase 1\na\nb");
        assert_eq!(d.sections[0].end_line, 6);
        assert_eq!(d.sections[1].marker_line, 6);
        assert_eq!(d.sections[1].start_line, 7);
        // Only legacy markers: no sections at all.
        let d = decompose("<!-- forge-section:start -->\nx\n<!-- forge-section:end -->");
        assert_eq!(d.marker_count, 0);
    }

    #[test]
    fn marker_lines_use_original_numbering() {
        let plan = "<!-- forge-plan:start -->\n<!-- forge-section -->\na\n```\n<!-- forge-section -->\n```\n<!-- forge-section -->\nb";
        assert_eq!(marker_lines(plan), vec![1, 6]);
    }

    #[test]
    fn never_panics_on_odd_input() {
        for plan in [
            "",
            "\n",
            "<!-- forge-plan:start -->",
            "<!-- forge-plan:end -->",
            "<!-- forge-plan:start --><!-- forge-plan:end -->",
            "<!-- forge-section -->",
            "é<!-- forge-plan:start -->\r\n😀\n<!-- forge-section -->\n## 😀",
        ] {
            let _ = decompose(plan);
            let _ = marker_lines(plan);
        }
    }
}
