//! Structure warnings and the structure report (FORGE-REFERENCE §3.5, §3.6).
//!
//! `plan-write` and `plan-edit` answer with a report of the stored plan: its size,
//! its loop name, its section outline and the authoring warnings below, always in
//! this order:
//!
//! 1. no section markers;
//! 2. more markers than the cap of 24;
//! 3. markers with empty bodies;
//! 4. the `Loop Name:` declaration is missing, not canonical, or repeated;
//! 5. a canonical loop name longer than 60 characters;
//! 6. no `Objective` heading before the first marker, or an empty one;
//! 7. per section: no leading `## Phase` heading, missing or empty `### Files`,
//!    `### Edits`, `### Acceptance Criteria`, `### Verification`, an absolute path
//!    under `### Files`;
//! 8. missing or empty trailing `## Decisions`, `## Conventions`, `## Key Context`.
//!
//! The server also publishes the warnings as editor diagnostics, so each carries
//! the line it is about when there is one.

#[cfg(test)]
use super::decompose::scan;
use super::decompose::{scan_for_checks, Scan, Section};
use super::fences::{fence_delimiters, fenced_lines};
use super::loop_name::{detect_with_canonical, LoopNameInfo, MAX_LOOP_NAME_LENGTH};
use super::{atx_heading, is_js_space, is_section_marker, js_trim, js_trim_end, MAX_TOTAL_SECTIONS};
use crate::text::{js_len, split_lines};

/// One authoring warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The warning text, as listed under `Warnings:`.
    pub message: String,
    /// 0-based line of the plan the warning is about, when there is one.
    pub line: Option<usize>,
}

impl Warning {
    fn new(message: impl Into<String>, line: Option<usize>) -> Self {
        Warning { message: message.into(), line }
    }
}

/// Which sections a report lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outline {
    /// Every section (plan-write).
    Full,
    /// Only the sections that share a line with one of these ranges (`first..=last`):
    /// plan-edit's replaced lines ([`super::edit::touches`]), so the edited plan is
    /// decomposed once, by the report. The stored text has the edited text's lines:
    /// sanitizing removes path prefixes inside lines (a project directory whose name
    /// holds a newline would shift them, and only which sections the report lists).
    Touching(Vec<(usize, usize)>),
}

/// The structure report of a stored plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructureReport {
    /// Line count of the stored text (`''` has 1 line).
    pub lines: usize,
    /// Length of the stored text in UTF-16 code units.
    pub chars: usize,
    /// The explicit loop name, when the plan declares one.
    pub loop_name: Option<String>,
    /// Produced sections, capped at 24.
    pub section_count: usize,
    /// The listed sections: (index, title).
    pub outline: Vec<(usize, String)>,
    /// The warnings, in order.
    pub warnings: Vec<Warning>,
}

impl StructureReport {
    /// The report text:
    ///
    /// ```text
    /// Plan stored: <L> lines, <C> chars.
    /// Loop Name: <name>
    /// Sections (<N>):
    ///   <i+1>. <title>
    /// Warnings:
    ///   - <warning>
    /// ```
    ///
    /// The `Loop Name:` line only when detected, `Sections (0): none detected` when
    /// there are none, `Sections (<N>): none changed by this edit` when a focused outline
    /// lists none, the `Warnings:` block only when there are warnings; no
    /// trailing newline.
    pub fn render(&self) -> String {
        let mut out = vec![format!("Plan stored: {} lines, {} chars.", self.lines, self.chars)];
        if let Some(name) = &self.loop_name {
            out.push(format!("Loop Name: {name}"));
        }
        if self.section_count == 0 {
            out.push("Sections (0): none detected".to_string());
        } else if self.outline.is_empty() {
            // A focused report (plan-edit) whose edit touched no section.
            out.push(format!("Sections ({}): none changed by this edit", self.section_count));
        } else {
            out.push(format!("Sections ({}):", self.section_count));
            for (index, title) in &self.outline {
                out.push(format!("  {}. {title}", index + 1));
            }
        }
        if !self.warnings.is_empty() {
            out.push("Warnings:".to_string());
            for w in &self.warnings {
                out.push(format!("  - {}", w.message));
            }
        }
        out.join("\n")
    }
}

/// The report of `stored` (the text as stored, after sanitizing).
pub fn report(stored: &str, outline: Outline) -> StructureReport {
    let scanned = scan_for_checks(stored);
    let sections: Vec<&Section> = scanned.all.iter().take(MAX_TOTAL_SECTIONS).collect();
    let listed = sections
        .iter()
        .filter(|s| match &outline {
            Outline::Full => true,
            Outline::Touching(ranges) => super::edit::touches(s, ranges),
        })
        .map(|s| (s.index, s.title.clone()))
        .collect();
    let (info, canonical) = loop_name_of(stored, &scanned);
    StructureReport {
        // A plain scan holds the plan's own lines.
        lines: scanned.plain.as_ref().map_or_else(|| crate::text::line_count(stored), |(lines, _)| lines.len()),
        chars: js_len(stored),
        loop_name: info.explicit.clone(),
        section_count: sections.len(),
        outline: listed,
        warnings: warnings_of(stored, &scanned, &info, &canonical),
    }
}

/// The structure warnings of a plan, in the order of FORGE-REFERENCE §3.5.
pub fn warnings(plan: &str) -> Vec<Warning> {
    let scanned = scan_for_checks(plan);
    let (info, canonical) = loop_name_of(plan, &scanned);
    warnings_of(plan, &scanned, &info, &canonical)
}

/// The loop name and canonical declarations of a plan, read from its scan's lines when
/// the scan has them.
fn loop_name_of(plan: &str, scanned: &Scan) -> (LoopNameInfo, Vec<(usize, String)>) {
    let plain = scanned.plain.as_ref().map(|(l, f)| (l.as_slice(), f.as_slice()));
    detect_with_canonical(plan, plain)
}

const REQUIRED_SECTION_HEADINGS: [&str; 4] = ["Files", "Edits", "Acceptance Criteria", "Verification"];
const REQUIRED_TRAILING_HEADINGS: [&str; 3] = ["Decisions", "Conventions", "Key Context"];

/// `canonical`: the plan's canonical `Loop Name:` declarations (read with `info`).
fn warnings_of(plan: &str, scanned: &Scan, info: &LoopNameInfo, canonical: &[(usize, String)]) -> Vec<Warning> {
    let mut out = Vec::new();
    let marker_count = scanned.markers.len();

    // 1-3: markers.
    if marker_count == 0 {
        out.push(Warning::new(
            "No <!-- forge-section --> markers found: the whole plan will run as a single section.",
            None,
        ));
    }
    if marker_count > MAX_TOTAL_SECTIONS {
        out.push(Warning::new(
            format!(
                "{marker_count} section markers exceed the cap of {MAX_TOTAL_SECTIONS}: sections beyond {MAX_TOTAL_SECTIONS} are dropped at loop start. Consolidate phases."
            ),
            scanned
                .all
                .get(MAX_TOTAL_SECTIONS)
                .map(|s| s.marker_line)
                .or_else(|| scanned.markers.get(MAX_TOTAL_SECTIONS).copied()),
        ));
    }
    let empty = marker_count.saturating_sub(scanned.all.len());
    if empty > 0 {
        let first_empty = scanned.markers.iter().copied().find(|m| !scanned.all.iter().any(|s| s.marker_line == *m));
        out.push(Warning::new(
            format!("{empty} section marker(s) have empty bodies and will be skipped."),
            first_empty,
        ));
    }

    // 4-5: loop name.
    if info.explicit.is_none() {
        out.push(Warning::new(
            "No \"Loop Name:\" line found: the loop name will be derived from the plan title.",
            None,
        ));
    } else if canonical.is_empty() {
        out.push(Warning::new(
            "Loop Name must be a plain \"Loop Name: short-slug\" line using lowercase letters, numbers, and hyphens.",
            info.line,
        ));
    } else if canonical.len() > 1 {
        out.push(Warning::new(
            "Plan must contain exactly one canonical \"Loop Name: short-slug\" line outside code fences.",
            canonical.get(1).map(|(line, _)| *line),
        ));
    }
    if let Some((line, _)) = canonical.iter().find(|(_, name)| js_len(name) > MAX_LOOP_NAME_LENGTH) {
        out.push(Warning::new(
            format!("Loop Name exceeds {MAX_LOOP_NAME_LENGTH} characters and will be truncated."),
            Some(*line),
        ));
    }

    // 6: objective.
    let plan_lines = match &scanned.plain {
        Some((lines, fenced)) => Scanned::from_parts(lines, fenced.clone()),
        None => Scanned::new(plan),
    };
    objective_warning(&plan_lines, &mut out);

    // 7: per section (the plan's raw lines only if a section names an absolute path).
    let raw_lines = std::cell::OnceCell::new();
    let raw_lines = || raw_lines.get_or_init(|| split_lines(plan)).as_slice();
    for section in scanned.all.iter().take(MAX_TOTAL_SECTIONS) {
        let copy;
        let body = match section_view(scanned, &plan_lines, section) {
            Some(view) => view,
            None => {
                // Only a scan that is not plain has no view, and it kept the contents.
                debug_assert!(scanned.plain.is_none(), "a plain scan has a view of every section");
                copy = Scanned::new(&section.content);
                &copy.lines
            }
        };
        section_warnings(section, body, raw_lines, &mut out);
    }

    // 8: trailing headings after the last marker.
    let last_marker = unfenced(&plan_lines.lines).filter(|(_, text)| is_section_marker(text)).map(|(i, _)| i).last();
    let trailing = heading_bodies(&plan_lines.lines, 2, last_marker.map_or(0, |m| m + 1));
    let missing: Vec<&str> =
        REQUIRED_TRAILING_HEADINGS.iter().copied().filter(|h| trailing.find(h).is_none()).collect();
    if !missing.is_empty() {
        out.push(Warning::new(format!("Plan is missing trailing headings: {}.", missing.join(", ")), None));
    }
    let empty: Vec<&HeadingBody> =
        REQUIRED_TRAILING_HEADINGS.iter().filter_map(|h| trailing.find(h)).filter(|b| b.lines.is_empty()).collect();
    if let Some(first) = empty.first() {
        let names: Vec<&str> = empty.iter().map(|b| b.name).collect();
        out.push(Warning::new(format!("Plan has empty trailing headings: {}.", names.join(", ")), Some(first.line)));
    }

    out
}

/// One line as every check below reads it: (trimmed text, fenced, fence delimiter).
type Line<'a> = (&'a str, bool, bool);

/// A text's lines, trimmed, with fence state: the view every check below uses.
struct Scanned<'a> {
    lines: Vec<Line<'a>>,
}

/// A section's body as the plan's own lines, `start_line..end_line` of the plan's view,
/// when the scan read the plan as it is (`scanned.plain`); `None` otherwise.
///
/// This is the view of the section's trimmed content ([`Scanned::new`] of
/// `section.content`) without splitting, fencing and trimming the body a second time,
/// and every check reads the same from both:
/// - trimming the content only drops its leading and trailing blank lines and the
///   whitespace at either end of its first and last lines, and every line is trimmed
///   anyway;
/// - fences are found after leading whitespace and close with only whitespace after
///   them, so the trimmed ends change no fence;
/// - the body follows an unfenced marker line, so the plan's fence state is closed at
///   its first line, as it is at the start of the content; the body ends before an
///   unfenced line (a marker or a stop heading) or at the end of the plan;
/// - the extra blank lines at either end are skipped by every check (they are neither
///   headings, nor content, nor fence delimiters).
///
/// A test compares the two views' warnings over generated plans.
fn section_view<'v, 'a>(scanned: &Scan<'_>, plan_lines: &'v Scanned<'a>, section: &Section) -> Option<&'v [Line<'a>]> {
    scanned.plain.as_ref()?;
    plan_lines.lines.get(section.start_line..section.end_line)
}

/// Lines that are neither inside a fence nor a fence delimiter.
fn unfenced<'s, 'a>(lines: &'s [Line<'a>]) -> impl Iterator<Item = (usize, &'a str)> + 's {
    lines
        .iter()
        .enumerate()
        .filter(|(_, (_, fenced, delimiter))| !fenced && !delimiter)
        .map(|(i, (text, _, _))| (i, *text))
}

impl<'a> Scanned<'a> {
    fn new(text: &'a str) -> Self {
        let raw = split_lines(text);
        let fenced = fenced_lines(&raw);
        Scanned::from_parts(&raw, fenced)
    }

    /// From a text's lines and their fence state ([`fenced_lines`] of them).
    fn from_parts(raw: &[&'a str], fenced: Vec<bool>) -> Self {
        let delimiters = fence_delimiters(&fenced);
        Scanned {
            lines: raw.iter().zip(fenced.iter().zip(delimiters)).map(|(line, (&f, d))| (js_trim(line), f, d)).collect(),
        }
    }
}

/// `^#{1,6}\s+Objective\s*$`, case-insensitive, on trimmed text.
fn is_objective_heading(text: &str) -> bool {
    atx_heading(text).is_some_and(|(_, rest)| js_trim_end(rest).eq_ignore_ascii_case("objective"))
}

fn objective_warning(plan: &Scanned<'_>, out: &mut Vec<Warning>) {
    let first_marker =
        unfenced(&plan.lines).find(|(_, text)| is_section_marker(text)).map_or(plan.lines.len(), |(i, _)| i);
    let heading = unfenced(&plan.lines).find(|&(i, text)| i < first_marker && is_objective_heading(text));
    let Some((heading_line, _)) = heading else {
        out.push(Warning::new("No Objective heading found before the first executable phase.", None));
        return;
    };
    let boundary = unfenced(&plan.lines)
        .find(|&(i, text)| {
            i > heading_line
                && (is_section_marker(text) || text.starts_with("Loop Name:") || atx_heading(text).is_some())
        })
        .map_or(first_marker, |(i, _)| i);
    let has_content = plan
        .lines
        .iter()
        .enumerate()
        .any(|(i, (text, _, delimiter))| i > heading_line && i < boundary && !delimiter && !text.is_empty());
    if !has_content {
        out.push(Warning::new(
            "Objective must include non-empty content before the Loop Name declaration.",
            Some(heading_line),
        ));
    }
}

/// `^##\s+Phase\b`, case-insensitive (ASCII word boundary), on trimmed text.
fn is_phase_heading(text: &str) -> bool {
    let Some(rest) = text.strip_prefix("##") else {
        return false;
    };
    if !rest.starts_with(is_js_space) {
        return false;
    }
    let rest = rest.trim_start_matches(is_js_space);
    let Some(word) = rest.get(..5) else {
        return false;
    };
    if !word.eq_ignore_ascii_case("phase") {
        return false;
    }
    !rest[5..].chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `body`: the section's lines ([`section_view`]).
fn section_warnings<'p>(
    section: &Section,
    body: &[Line<'_>],
    raw_lines: impl Fn() -> &'p [&'p str],
    out: &mut Vec<Warning>,
) {
    let k = section.index + 1;
    let at = Some(section.marker_line);

    let first = unfenced(body).find(|(_, text)| !text.is_empty());
    if !first.is_some_and(|(_, text)| is_phase_heading(text)) {
        out.push(Warning::new(
            format!("Section {k} must start with a \"## Phase ...\" heading immediately after its marker."),
            at,
        ));
    }

    let bodies = heading_bodies(body, 3, 0);
    let missing: Vec<&str> = REQUIRED_SECTION_HEADINGS.iter().copied().filter(|h| bodies.find(h).is_none()).collect();
    if !missing.is_empty() {
        out.push(Warning::new(format!("Section {k} is missing required headings: {}.", missing.join(", ")), at));
    }
    let empty: Vec<&str> = REQUIRED_SECTION_HEADINGS
        .iter()
        .copied()
        .filter(|h| bodies.find(h).is_some_and(|b| b.lines.is_empty()))
        .collect();
    if !empty.is_empty() {
        out.push(Warning::new(format!("Section {k} has empty required headings: {}.", empty.join(", ")), at));
    }

    if let Some(files) = bodies.find("Files") {
        if let Some(path) = find_absolute_path(&files.lines.join("\n")) {
            let line = raw_lines()
                .iter()
                .enumerate()
                .skip(section.start_line)
                .take(section.end_line.saturating_sub(section.start_line))
                .find(|(_, l)| l.contains(path))
                .map(|(i, _)| i)
                .or(at);
            out.push(Warning::new(
                format!("Plan contains a non-repo-relative path ({path}). Use repo-relative paths."),
                line,
            ));
        }
    }
}

/// The non-blank lines under one heading.
struct HeadingBody<'a> {
    name: &'a str,
    /// Line of the heading's first occurrence (in the scanned text).
    line: usize,
    lines: Vec<&'a str>,
}

/// The bodies in the order their headings first appear, and where each name's is: a plan
/// with tens of thousands of distinct headings is looked up by name, not searched (that was
/// quadratic: 80,000 `##` headings took 24 s to write).
struct HeadingBodies<'a> {
    list: Vec<HeadingBody<'a>>,
    at: std::collections::HashMap<&'a str, usize>,
}

impl<'a> HeadingBodies<'a> {
    fn find(&self, name: &str) -> Option<&HeadingBody<'a>> {
        self.at.get(name).map(|&i| &self.list[i])
    }
}

/// Collects, for every heading of exactly `level` from line `from` on, the non-blank
/// lines under it (fenced lines count, fence delimiters do not). A heading of the
/// same or a higher level, or a section marker, ends the current body; deeper
/// headings are skipped. A heading seen twice accumulates.
fn heading_bodies<'a>(lines: &[Line<'a>], level: usize, from: usize) -> HeadingBodies<'a> {
    let mut bodies: Vec<HeadingBody<'a>> = Vec::new();
    let mut at: std::collections::HashMap<&'a str, usize> = std::collections::HashMap::new();
    let mut current: Option<usize> = None;
    for (i, (line, fenced, delimiter)) in lines.iter().enumerate().skip(from) {
        if *delimiter {
            continue;
        }
        if !fenced {
            if let Some((found, name)) = atx_heading(line) {
                let name = js_trim_end(name);
                let plain = !name.contains(['\r', '\u{2028}', '\u{2029}']);
                if found == level && plain && !name.is_empty() {
                    current = Some(*at.entry(name).or_insert_with(|| {
                        bodies.push(HeadingBody { name, line: i, lines: Vec::new() });
                        bodies.len() - 1
                    }));
                } else if found <= level {
                    current = None;
                }
                continue;
            }
            if is_section_marker(line) {
                current = None;
                continue;
            }
        }
        if let Some(body) = current.and_then(|c| bodies.get_mut(c)) {
            if !line.is_empty() {
                body.lines.push(line);
            }
        }
    }
    HeadingBodies { list: bodies, at }
}

/// Characters a path may be preceded by.
fn opens_path(c: char) -> bool {
    matches!(c, '[' | '`' | '"' | '\'' | '(') || is_js_space(c)
}

/// Characters that end a path.
fn ends_path(c: char) -> bool {
    matches!(c, '`' | '"' | '\'' | ')' | ']') || is_js_space(c)
}

/// The length in bytes of an absolute-path prefix at the start of `s`: `~/`, `~\`,
/// a drive `C:\` or `C:/`, `\\`, or a single `/` not followed by another.
fn absolute_prefix(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let slash = |i: usize| matches!(b.get(i), Some(b'/' | b'\\'));
    match b.first()? {
        b'~' if slash(1) => Some(2),
        c if c.is_ascii_alphabetic() && b.get(1) == Some(&b':') && slash(2) => Some(3),
        b'\\' if b.get(1) == Some(&b'\\') => Some(2),
        b'/' if b.get(1) != Some(&b'/') => Some(1),
        _ => None,
    }
}

/// The first absolute path in `text`: a path prefix at the start or after
/// whitespace, a backtick, a quote, `(` or `[`, followed by at least one path
/// character.
fn find_absolute_path(text: &str) -> Option<&str> {
    let mut previous: Option<char> = None;
    for (at, c) in text.char_indices() {
        if previous.is_none_or(opens_path) {
            let rest = &text[at..];
            if let Some(prefix) = absolute_prefix(rest) {
                let tail: usize = rest[prefix..].chars().take_while(|&c| !ends_path(c)).map(char::len_utf8).sum();
                if tail > 0 {
                    return Some(&rest[..prefix + tail]);
                }
            }
        }
        previous = Some(c);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(plan: &str) -> Vec<String> {
        warnings(plan).into_iter().map(|w| w.message).collect()
    }

    const SECTION: &str = "## Phase 1: Build\n\n### Files\n- src/a.rs\n\n### Edits\n- change a\n\n### Acceptance Criteria\n- works\n\n### Verification\n- cargo test\n";

    fn complete_plan() -> String {
        format!(
            "# Big Plan\n\n## Objective\nDo the thing.\n\nLoop Name: big-plan\n\n<!-- forge-section -->\n{SECTION}\n## Decisions\n- d\n\n## Conventions\n- c\n\n## Key Context\n- k\n"
        )
    }

    #[test]
    fn complete_plan_has_no_warnings() {
        assert_eq!(messages(&complete_plan()), Vec::<String>::new());
    }

    #[test]
    fn empty_plan_report() {
        let r = report("", Outline::Full);
        assert_eq!((r.lines, r.chars, r.section_count), (1, 0, 0));
        assert_eq!(r.loop_name, None);
        let m = messages("");
        assert_eq!(
            m,
            vec![
                "No <!-- forge-section --> markers found: the whole plan will run as a single section.",
                "No \"Loop Name:\" line found: the loop name will be derived from the plan title.",
                "No Objective heading found before the first executable phase.",
                "Plan is missing trailing headings: Decisions, Conventions, Key Context.",
            ]
        );
    }

    #[test]
    fn cap_and_empty_marker_warnings_are_independent() {
        let mut plan = String::from("## Objective\nx\nLoop Name: cap\n");
        for i in 1..=26 {
            plan.push_str(&format!("<!-- forge-section -->\n{}\n", SECTION.replace("Phase 1", &format!("Phase {i}"))));
        }
        plan.push_str("<!-- forge-section -->\n\n## Decisions\nd\n## Conventions\nc\n## Key Context\nk\n");
        let w = warnings(&plan);
        let m: Vec<&str> = w.iter().map(|w| w.message.as_str()).collect();
        assert_eq!(
            m,
            vec![
                "27 section markers exceed the cap of 24: sections beyond 24 are dropped at loop start. Consolidate phases.",
                "1 section marker(s) have empty bodies and will be skipped.",
            ]
        );
        let r = report(&plan, Outline::Full);
        assert_eq!(r.section_count, 24);
        assert_eq!(r.outline.len(), 24);
        // The cap warning points at the first dropped section's marker.
        let markers = super::super::decompose::marker_lines(&plan);
        assert_eq!(w[0].line, Some(markers[24]));
        assert_eq!(w[1].line, Some(markers[26]));
    }

    #[test]
    fn twenty_six_markers() {
        let mut plan = String::new();
        for i in 1..=26 {
            plan.push_str(&format!("<!-- forge-section -->\n## Phase {i}\nx\n"));
        }
        let m = messages(&plan);
        assert!(m.contains(&"26 section markers exceed the cap of 24: sections beyond 24 are dropped at loop start. Consolidate phases.".to_string()));
        assert!(!m.iter().any(|w| w.contains("empty bodies")));
        let text = report(&plan, Outline::Full).render();
        assert!(text.contains("Sections (24):\n  1. Phase 1\n"));
        assert!(text.contains("  24. Phase 24\nWarnings:"));
        assert!(!text.contains("Phase 25"));
    }

    #[test]
    fn empty_markers_counted() {
        let plan = complete_plan().replace(
            "<!-- forge-section -->\n",
            "<!-- forge-section -->\n\n<!-- forge-section -->\n   \n<!-- forge-section -->\n",
        );
        let w = warnings(&plan);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].message, "2 section marker(s) have empty bodies and will be skipped.");
        assert_eq!(w[0].line, Some(7));
    }

    #[test]
    fn loop_name_warnings() {
        let base = complete_plan();
        let loose = base.replace("Loop Name: big-plan", "**Loop Name**: Big Plan");
        assert_eq!(
            messages(&loose),
            vec!["Loop Name must be a plain \"Loop Name: short-slug\" line using lowercase letters, numbers, and hyphens."]
        );
        let twice = base.replace("Loop Name: big-plan", "Loop Name: big-plan\nLoop Name: other");
        let w = warnings(&twice);
        assert_eq!(
            w.iter().map(|w| w.message.as_str()).collect::<Vec<_>>(),
            vec!["Plan must contain exactly one canonical \"Loop Name: short-slug\" line outside code fences."]
        );
        assert_eq!(w[0].line, Some(6));
        let fenced_twice = base.replace("Loop Name: big-plan", "Loop Name: big-plan\n```\nLoop Name: other\n```");
        assert_eq!(messages(&fenced_twice), Vec::<String>::new());
        let none = base.replace("Loop Name: big-plan\n", "");
        assert_eq!(
            messages(&none),
            vec!["No \"Loop Name:\" line found: the loop name will be derived from the plan title."]
        );
        let long = base.replace("big-plan", &"a".repeat(61));
        assert_eq!(messages(&long), vec!["Loop Name exceeds 60 characters and will be truncated."]);
    }

    #[test]
    fn objective_warnings() {
        let base = complete_plan();
        let none = base.replace("## Objective\nDo the thing.\n", "");
        assert_eq!(messages(&none), vec!["No Objective heading found before the first executable phase."]);
        let empty = base.replace("Do the thing.\n", "");
        let w = warnings(&empty);
        assert_eq!(
            w.iter().map(|w| w.message.as_str()).collect::<Vec<_>>(),
            vec!["Objective must include non-empty content before the Loop Name declaration."]
        );
        assert_eq!(w[0].line, Some(2));
        // Fenced content counts; fence lines alone do not.
        let fenced = base.replace("Do the thing.\n", "```\ncode\n```\n");
        assert_eq!(messages(&fenced), Vec::<String>::new());
        let only_fences = base.replace("Do the thing.\n", "```\n```\n");
        assert_eq!(messages(&only_fences).len(), 1);
        // Any heading level, any case, but only before the first marker.
        let h4 = base.replace("## Objective", "#### OBJECTIVE");
        assert_eq!(messages(&h4), Vec::<String>::new());
        let after = "Loop Name: x\n<!-- forge-section -->\n## Phase 1\n## Objective\nwhy\n";
        assert!(messages(after).contains(&"No Objective heading found before the first executable phase.".to_string()));
        let fenced_heading = base.replace("## Objective\n", "```\n## Objective\n```\n");
        assert_eq!(messages(&fenced_heading), vec!["No Objective heading found before the first executable phase."]);
    }

    #[test]
    fn section_warnings_in_order() {
        let base = complete_plan();
        let no_phase = base.replace("## Phase 1: Build\n", "Intro text\n## Phase 1: Build\n");
        let w = warnings(&no_phase);
        assert_eq!(
            w.iter().map(|w| w.message.as_str()).collect::<Vec<_>>(),
            vec!["Section 1 must start with a \"## Phase ...\" heading immediately after its marker."]
        );
        assert_eq!(w[0].line, Some(7));
        let phased = base.replace("## Phase 1: Build", "## phase one");
        assert_eq!(messages(&phased), Vec::<String>::new());
        let phaser = base.replace("## Phase 1: Build", "## Phaser");
        assert_eq!(messages(&phaser).len(), 1);

        let missing = base.replace("### Edits\n- change a\n\n", "").replace("### Verification\n- cargo test\n", "");
        assert_eq!(messages(&missing), vec!["Section 1 is missing required headings: Edits, Verification."]);
        let empty = base.replace("- change a\n", "").replace("- works\n", "#### Detail\n");
        assert_eq!(messages(&empty), vec!["Section 1 has empty required headings: Edits, Acceptance Criteria."]);
        let fenced_body = base.replace("- change a\n", "```\nfn x() {}\n```\n");
        assert_eq!(messages(&fenced_body), Vec::<String>::new());
        let wrong_case = base.replace("### Files", "### files");
        assert_eq!(messages(&wrong_case), vec!["Section 1 is missing required headings: Files."]);
    }

    #[test]
    fn absolute_paths_in_files() {
        let base = complete_plan();
        for (path, shown) in [
            ("/etc/hosts", "/etc/hosts"),
            ("`~/foo/bar.ts`", "~/foo/bar.ts"),
            ("\"/tmp/foo.ts\"", "/tmp/foo.ts"),
            ("C:\\project\\foo.ts", "C:\\project\\foo.ts"),
            ("c:/x", "c:/x"),
            ("\\\\server\\share\\foo.ts", "\\\\server\\share\\foo.ts"),
            ("[/abs/link](x)", "/abs/link"),
        ] {
            let plan = base.replace("- src/a.rs", &format!("- {path}"));
            let w = warnings(&plan);
            assert_eq!(
                w.iter().map(|w| w.message.as_str()).collect::<Vec<_>>(),
                vec![format!("Plan contains a non-repo-relative path ({shown}). Use repo-relative paths.")],
                "{path}"
            );
            assert_eq!(w[0].line, Some(11), "{path}");
        }
        for ok in ["src/a.rs", "//comment", "https://x.y/z", "a/b /", "x~/y"] {
            let plan = base.replace("- src/a.rs", &format!("- {ok}"));
            assert_eq!(messages(&plan), Vec::<String>::new(), "{ok}");
        }
        // Only the Files body is checked.
        let elsewhere = base.replace("- change a", "- edit /etc/hosts");
        assert_eq!(messages(&elsewhere), Vec::<String>::new());
    }

    #[test]
    fn trailing_heading_warnings() {
        let base = complete_plan();
        let missing = base.replace("## Conventions\n- c\n\n", "");
        assert_eq!(messages(&missing), vec!["Plan is missing trailing headings: Conventions."]);
        let empty = base.replace("- d\n", "").replace("- k\n", "");
        let w = warnings(&empty);
        assert_eq!(
            w.iter().map(|w| w.message.as_str()).collect::<Vec<_>>(),
            vec!["Plan has empty trailing headings: Decisions, Key Context."]
        );
        assert!(w[0].line.is_some());
        // Headings before the last marker do not count.
        let before = "## Decisions\nd\n## Conventions\nc\n## Key Context\nk\n<!-- forge-section -->\n## Phase 1\n";
        assert!(messages(before)
            .contains(&"Plan is missing trailing headings: Decisions, Conventions, Key Context.".to_string()));
    }

    #[test]
    fn all_warnings_in_order() {
        let mut plan = String::from("# T\n**Loop Name**: Loose Name\n");
        for _ in 0..25 {
            plan.push_str("<!-- forge-section -->\nbody /x\n");
        }
        plan.push_str("<!-- forge-section -->\n");
        let m = messages(&plan);
        assert!(m[0].starts_with("26 section markers exceed"));
        assert!(m[1].starts_with("1 section marker(s)"));
        assert!(m[2].starts_with("Loop Name must be a plain"));
        assert!(m[3].starts_with("No Objective heading"));
        assert!(m[4].starts_with("Section 1 must start"));
        assert!(m[5]
            .starts_with("Section 1 is missing required headings: Files, Edits, Acceptance Criteria, Verification."));
        assert!(m[6].starts_with("Section 2 must start"));
        assert!(m.last().is_some_and(|l| l.starts_with("Plan is missing trailing headings")));
        // 24 sections × 2 warnings + 4 others + trailing.
        assert_eq!(m.len(), 4 + 48 + 1);
    }

    #[test]
    fn render_full_and_focused() {
        let plan = "Loop Name: r\n<!-- forge-section -->\n## Phase 1\na\n<!-- forge-section -->\n## Phase 2\nb";
        let full = report(plan, Outline::Full);
        assert_eq!(full.loop_name.as_deref(), Some("r"));
        let text = full.render();
        assert!(text.starts_with(
            "Plan stored: 7 lines, 84 chars.\nLoop Name: r\nSections (2):\n  1. Phase 1\n  2. Phase 2\nWarnings:\n  - "
        ));
        assert!(!text.ends_with('\n'));
        // Line 6 is Phase 2's body.
        let focused = report(plan, Outline::Touching(vec![(6, 6)])).render();
        assert!(focused.contains("Sections (2):\n  2. Phase 2\nWarnings:"));
        let none = report(plan, Outline::Touching(vec![])).render();
        // An edit that touched no section says so instead of an empty list.
        assert!(none.contains("Sections (2): none changed by this edit\nWarnings:"), "{none}");
        // By replaced lines: line 6 is Phase 2's body, line 0 is the preamble, lines 3..=5
        // span the end of Phase 1 and the start of Phase 2.
        for (lines, want) in [(vec![(6, 6)], vec![1]), (vec![(0, 0)], vec![]), (vec![(3, 5)], vec![0, 1])] {
            let touching = report(plan, Outline::Touching(lines.clone())).outline;
            assert_eq!(touching.iter().map(|(i, _)| *i).collect::<Vec<_>>(), want, "{lines:?}");
        }
    }

    #[test]
    fn render_without_sections_name_or_warnings() {
        let r = StructureReport {
            lines: 3,
            chars: 10,
            loop_name: None,
            section_count: 0,
            outline: vec![],
            warnings: vec![],
        };
        assert_eq!(r.render(), "Plan stored: 3 lines, 10 chars.\nSections (0): none detected");
    }

    #[test]
    fn counts_lines_and_utf16_chars() {
        let r = report("a😀\n", Outline::Full);
        assert_eq!((r.lines, r.chars), (2, 4));
    }

    #[test]
    fn the_scans_lines_are_the_plans_own_when_it_read_the_plan_as_it_is() {
        let fenced = "# P\n```\n<!-- forge-section -->\n```\n<!-- forge-section -->\n## Phase 1\n~~~~\nx";
        let legacy = "# P\n<!-- forge-section:start -->\n<!-- forge-section -->\n## Phase 1\n- a";
        let wrapped = "<!-- forge-plan:start -->\n# P\n<!-- forge-section -->\n## Phase 1\n<!-- forge-plan:end -->";
        let names = "# P\n```\nLoop Name: fenced\n```\nLoop Name: real-one\nLoop Name: Not Canonical";
        let cases = [
            (complete_plan(), true),
            (fenced.into(), true),
            (names.into(), true),
            (legacy.into(), false),
            (wrapped.into(), false),
        ];
        for (plan, plain) in cases {
            let scan = scan(&plan);
            assert_eq!(scan.plain.is_some(), plain, "{plan:?}");
            if let Some((lines, fenced)) = &scan.plain {
                assert_eq!(Scanned::from_parts(lines, fenced.clone()).lines, Scanned::new(&plan).lines, "{plan:?}");
            }
            // The loop name read from the scan's lines is the one read from the plan.
            let parts = scan.plain.as_ref().map(|(l, f)| (l.as_slice(), f.as_slice()));
            let want = (super::super::loop_name::detect(&plan), super::super::loop_name::canonical_declarations(&plan));
            assert_eq!(detect_with_canonical(&plan, parts), want, "{plan:?}");
            assert_eq!(detect_with_canonical(&plan, None), want, "{plan:?}");
        }
    }

    #[test]
    fn a_sections_view_of_the_plans_lines_warns_as_its_own_content_does() {
        // Lines chosen to move the ends of a body: indentation and whitespace a trimmed
        // content loses, fences opened and closed with it, blank and whitespace lines,
        // CR and other line terminators, headings and absolute paths.
        const VOCABULARY: [&str; 34] = [
            "<!-- forge-section -->",
            "  <!-- forge-section -->",
            "## Phase 1: build",
            "   ## Phase 2",
            "\u{feff}## Phase 3",
            "## Other title",
            "### Files",
            "  ### Files",
            "### Edits",
            "### Acceptance Criteria\r",
            "\t### Verification",
            "## Verification",
            "## Decisions",
            "- src/a.rs",
            "- /abs/path.rs",
            "  - `~/x`",
            "```",
            "   ```",
            "````",
            "~~~",
            "```  ",
            "\t```rust",
            "```\u{a0}",
            "",
            "   ",
            "\t",
            "\u{a0}",
            "\r",
            "x\r",
            "\u{2028}",
            "text",
            "  indented text  ",
            "## Objective",
            "Loop Name: a-b",
        ];
        let mut next = crate::text::test_rng();
        let (mut compared, mut trimmed_ends) = (0, 0);
        for _ in 0..12_000 {
            let count = 3 + next(30);
            let plan: Vec<&str> = (0..count).map(|_| VOCABULARY[next(VOCABULARY.len())]).collect();
            let plan = plan.join("\n");
            let scanned = scan(&plan);
            let Some((lines, fenced)) = &scanned.plain else { continue };
            let plan_lines = Scanned::from_parts(lines, fenced.clone());
            let raw = split_lines(&plan);
            for section in &scanned.all {
                let view = section_view(&scanned, &plan_lines, section).expect("a plain scan has views");
                let copy = Scanned::new(&section.content);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                section_warnings(section, view, || raw.as_slice(), &mut a);
                section_warnings(section, &copy.lines, || raw.as_slice(), &mut b);
                assert_eq!(a, b, "{plan:?}, section {}", section.index);
                compared += 1;
                let body = &raw[section.start_line..section.end_line];
                trimmed_ends +=
                    usize::from(!body.iter().any(|l| *l == section.content.split('\n').next().unwrap_or("")));
            }
        }
        // The cases the views must agree on did occur.
        assert!(
            compared > 4000 && trimmed_ends > 1000,
            "{compared} sections, {trimmed_ends} with a trimmed first line"
        );
    }

    #[test]
    fn never_panics_on_odd_input() {
        let odd = [
            "",
            "\n\n",
            "```",
            "~~~\n<!-- forge-section -->",
            "## Objective\r\nx\r\n<!-- forge-section -->\r\n## Phase 1\r\n### Files\r\n- /é😀\r\n",
            "<!-- forge-section -->\n### Files\n`C:",
            "<!-- forge-section -->\n### Files\n\\\\",
            "# 😀😀😀\nLoop Name: ü\n**Loop Name**:\n## Loop Name\n",
            "<!-- forge-plan:start -->é<!-- forge-plan:end -->",
        ];
        for plan in odd {
            let _ = warnings(plan);
            let _ = report(plan, Outline::Touching(vec![(0, 0), (99, usize::MAX)])).render();
        }
    }
}
