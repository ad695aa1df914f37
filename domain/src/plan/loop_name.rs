//! Loop name detection (FORGE-REFERENCE §3.3).
//!
//! The *canonical* declaration is an unfenced line that starts exactly with
//! `Loop Name:` followed by a lowercase slug (`[a-z0-9]+(-[a-z0-9]+)*`). The
//! *explicit* name is, in order of preference:
//!
//! 1. the first canonical declaration;
//! 2. the first loose declaration: optional indentation and `- `, `Loop Name`
//!    optionally in `**`, a colon and any value;
//! 3. a heading `#… Loop Name: value`, then a heading `#… Loop Name` whose value is
//!    the next non-blank line (both case-insensitive);
//!
//! each cut to 60 UTF-16 units. Lines inside fenced code blocks never count.
//!
//! The *display name* is the explicit name, else the plan's title (the first
//! non-structural heading, the first line under `Objective`, the first non-empty
//! line, or `Implementation Plan`, cut to 60 with `...`). The *execution name* is
//! [`crate::naming::execution_name`] of the display name.

use std::sync::LazyLock;

use regex::Regex;

use super::fences::fenced_lines;
use super::{cut_utf16, js_trim, static_regex, DOT, WS};
use crate::naming::execution_name;
use crate::text::{js_len, split_lines};

/// Longest loop name taken from a plan.
pub const MAX_LOOP_NAME_LENGTH: usize = 60;

/// What a plan says about its loop name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopNameInfo {
    /// The declared name (canonical, loose or heading form), cut to 60.
    pub explicit: Option<String>,
    /// How many canonical `Loop Name: slug` lines the plan has outside fences.
    pub canonical_count: usize,
    /// Whether a canonical declaration is longer than 60 characters.
    pub canonical_too_long: bool,
    /// The name shown to people: explicit name, else the plan title.
    pub display_name: String,
    /// The sanitized display name, for worktrees and keys.
    pub execution_name: String,
    /// 0-based line of the explicit declaration.
    pub line: Option<usize>,
}

static CANONICAL: LazyLock<Regex> =
    LazyLock::new(|| static_regex(&format!(r"^Loop Name:{WS}*([a-z0-9]+(?:-[a-z0-9]+)*){WS}*$")));
static LOOSE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(&format!(r"^{WS}*(?:-{WS}*)?(?:\*\*)?Loop Name(?:\*\*)?:{WS}*({DOT}+)")));
static HEADING_INLINE: LazyLock<Regex> =
    LazyLock::new(|| static_regex(&format!(r"(?i)^#+{WS}*Loop Name:{WS}*({DOT}+)")));
static HEADING_BLOCK: LazyLock<Regex> = LazyLock::new(|| static_regex(&format!(r"(?i)^#+{WS}*Loop Name{WS}*$")));
static TITLE_HEADING: LazyLock<Regex> = LazyLock::new(|| static_regex(&format!(r"^#+{WS}+({DOT}+)$")));
static OBJECTIVE_HEADING: LazyLock<Regex> = LazyLock::new(|| static_regex(&format!(r"(?i)^#+{WS}+Objective{WS}*$")));

const STRUCTURAL_HEADINGS: [&str; 7] =
    ["objective", "loop name", "phases", "verification", "decisions", "conventions", "key context"];

/// The plan's lines with the fence mask, for the scans below.
struct Lines<'a> {
    lines: Vec<&'a str>,
    fenced: Vec<bool>,
}

impl<'a> Lines<'a> {
    fn new(plan: &'a str) -> Self {
        let lines = split_lines(plan);
        let fenced = fenced_lines(&lines);
        Lines { lines, fenced }
    }

    /// Unfenced lines with their 0-based numbers.
    fn unfenced(&self) -> impl Iterator<Item = (usize, &'a str)> + '_ {
        self.lines.iter().enumerate().filter(|&(i, _)| !self.fenced[i]).map(|(i, l)| (i, *l))
    }
}

/// Every canonical `Loop Name: slug` line outside fences: (0-based line, slug).
pub fn canonical_declarations(plan: &str) -> Vec<(usize, String)> {
    let lines = Lines::new(plan);
    canonical_in(&lines)
}

fn canonical_in(lines: &Lines<'_>) -> Vec<(usize, String)> {
    lines
        .unfenced()
        // The literal start of CANONICAL first: most lines are not declarations.
        .filter(|(_, line)| line.starts_with("Loop Name:"))
        .filter_map(|(i, line)| {
            let caps = CANONICAL.captures(line)?;
            Some((i, caps.get(1)?.as_str().to_string()))
        })
        .collect()
}

/// Whether `line` can match [`LOOSE`]: it names `Loop Name` (case-sensitive in it). The
/// searcher is built once: `str::contains` builds one per line.
fn has_loop_name(line: &str) -> bool {
    static FINDER: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new("Loop Name"));
    FINDER.find(line.as_bytes()).is_some()
}

/// Whether `line` can match a heading pattern: every one starts with `^#+`.
fn is_heading(line: &str) -> bool {
    line.starts_with('#')
}

/// The first unfenced line whose capture, trimmed, is non-empty.
///
/// `may_match` is a cheap test that every line `re` matches passes (the literal each
/// pattern starts with or contains; [`tests::prefilters_pass_every_match`]): a plan without
/// a declaration has its 2,000 lines tried with a plain search instead of the regex's
/// captures, which were a quarter of a `plan-write`'s time (docs/performance.md).
fn first_value(lines: &Lines<'_>, may_match: fn(&str) -> bool, re: &Regex) -> Option<(usize, String)> {
    lines.unfenced().find_map(|(i, line)| {
        if !may_match(line) {
            return None;
        }
        let caps = re.captures(line)?;
        let value = js_trim(caps.get(1)?.as_str());
        (!value.is_empty()).then(|| (i, value.to_string()))
    })
}

/// `#… Loop Name` on its own, with the value on the next non-blank line (text up to
/// a `#`). Returns the heading's line.
fn heading_block_value(lines: &Lines<'_>) -> Option<(usize, String)> {
    lines.unfenced().find_map(|(i, line)| {
        if !is_heading(line) || !HEADING_BLOCK.is_match(line) {
            return None;
        }
        let next = lines.lines.iter().skip(i + 1).find(|l| !js_trim(l).is_empty())?;
        let value = js_trim(next).split('#').next().unwrap_or("");
        let value = js_trim(value);
        (!value.is_empty()).then(|| (i, value.to_string()))
    })
}

fn explicit_in(lines: &Lines<'_>, canonical: &[(usize, String)]) -> Option<(usize, String)> {
    let found = canonical
        .first()
        .cloned()
        .or_else(|| first_value(lines, has_loop_name, &LOOSE))
        .or_else(|| first_value(lines, is_heading, &HEADING_INLINE))
        .or_else(|| heading_block_value(lines))?;
    Some((found.0, cut_utf16(&found.1, MAX_LOOP_NAME_LENGTH).to_string()))
}

/// Cuts a derived title to 60 UTF-16 units, ending it with `...` when cut.
fn ellipsize(text: &str) -> String {
    if js_len(text) > MAX_LOOP_NAME_LENGTH {
        format!("{}...", cut_utf16(text, MAX_LOOP_NAME_LENGTH - 3))
    } else {
        text.to_string()
    }
}

/// The plan's title when it declares no loop name.
fn derived_title(lines: &Lines<'_>) -> String {
    let heading = lines.unfenced().find_map(|(_, line)| {
        // The `\r` of a CRLF line is its line break, not part of it: Forge's pattern, which
        // cannot match across a `\r`, never found the title of a CRLF plan (saved by a
        // Windows editor), as it named its sections "Section k" (decompose.rs).
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !is_heading(line) {
            return None;
        }
        let caps = TITLE_HEADING.captures(line)?;
        let text = js_trim(caps.get(1)?.as_str());
        (!STRUCTURAL_HEADINGS.contains(&text.to_lowercase().as_str())).then_some(text)
    });
    if let Some(text) = heading {
        return ellipsize(text);
    }

    let objective = lines.unfenced().find_map(|(i, line)| {
        if !is_heading(line) || !OBJECTIVE_HEADING.is_match(line) {
            return None;
        }
        let next = lines.lines.iter().skip(i + 1).find(|l| !js_trim(l).is_empty())?;
        Some(js_trim(next))
    });
    if let Some(text) = objective {
        return ellipsize(text);
    }

    let first = lines.lines.iter().map(|l| js_trim(l)).find(|t| !t.is_empty() && !t.starts_with("---"));
    match first {
        Some(text) => ellipsize(text),
        None => "Implementation Plan".to_string(),
    }
}

/// Reads the loop name information of a plan.
pub fn detect(plan: &str) -> LoopNameInfo {
    let lines = Lines::new(plan);
    info_of(&lines, &canonical_in(&lines))
}

/// [`detect`] and [`canonical_declarations`] in one pass, from the plan's lines and their
/// fence state when the caller has them ([`fenced_lines`] of [`split_lines`] of `plan`).
pub(crate) fn detect_with_canonical(
    plan: &str,
    parts: Option<(&[&str], &[bool])>,
) -> (LoopNameInfo, Vec<(usize, String)>) {
    let lines = match parts {
        Some((lines, fenced)) => Lines { lines: lines.to_vec(), fenced: fenced.to_vec() },
        None => Lines::new(plan),
    };
    let canonical = canonical_in(&lines);
    (info_of(&lines, &canonical), canonical)
}

fn info_of(lines: &Lines<'_>, canonical: &[(usize, String)]) -> LoopNameInfo {
    let explicit = explicit_in(lines, canonical);
    let display_name = match &explicit {
        Some((_, name)) => name.clone(),
        None => derived_title(lines),
    };
    LoopNameInfo {
        canonical_count: canonical.len(),
        canonical_too_long: canonical.iter().any(|(_, name)| js_len(name) > MAX_LOOP_NAME_LENGTH),
        execution_name: execution_name(&display_name),
        display_name,
        line: explicit.as_ref().map(|(line, _)| *line),
        explicit: explicit.map(|(_, name)| name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pattern and the cheap test that must pass every line it matches.
    type Prefiltered<'a> = (&'a Regex, fn(&str) -> bool);

    /// The prefilters of [`first_value`] and the heading scans pass every line their
    /// patterns match: lines made of the pieces the patterns are built from, in every order.
    #[test]
    fn prefilters_pass_every_match() {
        let pieces = [
            "#",
            "##",
            " ",
            "\u{a0}",
            "\t",
            "-",
            "**",
            "Loop Name",
            "loop name",
            "LOOP NAME",
            "Loop",
            "Name",
            ":",
            "x",
            "Objective",
            "\r",
        ];
        let mut checked = 0;
        let mut matched = [0; 5];
        let mut line = String::new();
        // Every sequence of up to four pieces: 16^4 + 16^3 + … lines.
        let mut stack = vec![Vec::<usize>::new()];
        while let Some(seq) = stack.pop() {
            line.clear();
            seq.iter().for_each(|&k| line.push_str(pieces[k]));
            let cases: [Prefiltered<'_>; 5] = [
                (&LOOSE, has_loop_name),
                (&HEADING_INLINE, is_heading),
                (&HEADING_BLOCK, is_heading),
                (&TITLE_HEADING, is_heading),
                (&OBJECTIVE_HEADING, is_heading),
            ];
            for (k, (re, may_match)) in cases.iter().enumerate() {
                if re.is_match(&line) {
                    matched[k] += 1;
                    assert!(may_match(&line), "{:?} matches {line:?} but its prefilter refuses it", re.as_str());
                }
            }
            checked += 1;
            if seq.len() < 4 {
                stack.extend((0..pieces.len()).map(|k| seq.iter().copied().chain([k]).collect()));
            }
        }
        assert!(checked > 65_000, "{checked}");
        assert!(matched.iter().all(|&n| n > 0), "each pattern matched some line: {matched:?}");
    }

    #[test]
    fn canonical_form() {
        let info = detect("# Plan\n\nLoop Name: add-oauth\n");
        assert_eq!(info.explicit.as_deref(), Some("add-oauth"));
        assert_eq!(info.canonical_count, 1);
        assert_eq!(info.line, Some(2));
        assert_eq!(info.display_name, "add-oauth");
        assert_eq!(info.execution_name, "add-oauth");
        assert!(!info.canonical_too_long);
    }

    #[test]
    fn canonical_needs_column_zero_and_a_slug() {
        for plan in ["  Loop Name: abc", "Loop Name: Not A Slug", "Loop Name: a--b", "loop name: abc"] {
            assert_eq!(detect(plan).canonical_count, 0, "{plan}");
        }
        assert_eq!(detect("Loop Name:abc-1  ").canonical_count, 1);
    }

    #[test]
    fn loose_forms() {
        assert_eq!(detect("**Loop Name**: My Loop").explicit.as_deref(), Some("My Loop"));
        assert_eq!(detect("- **Loop Name**: x-y").explicit.as_deref(), Some("x-y"));
        assert_eq!(detect("   Loop Name: Spaced Out ").explicit.as_deref(), Some("Spaced Out"));
        let info = detect("Loop Name: Upper Case");
        assert_eq!(info.explicit.as_deref(), Some("Upper Case"));
        assert_eq!(info.canonical_count, 0);
        assert_eq!(info.execution_name, "upper-case");
    }

    #[test]
    fn heading_forms() {
        let info = detect("# Plan\n## Loop Name: heading-name\n");
        assert_eq!(info.explicit.as_deref(), Some("heading-name"));
        assert_eq!(info.line, Some(1));
        let info = detect("## loop name\n\n  block-value # comment\n");
        assert_eq!(info.explicit.as_deref(), Some("block-value"));
        assert_eq!(info.line, Some(0));
        // A heading right after the block heading is not a value.
        assert_eq!(detect("## Loop Name\n## Phases\n").explicit, None);
    }

    #[test]
    fn canonical_wins_over_earlier_loose_forms() {
        let info = detect("**Loop Name**: Loose\nLoop Name: canon");
        assert_eq!(info.explicit.as_deref(), Some("canon"));
        assert_eq!(info.line, Some(1));
    }

    #[test]
    fn fenced_declarations_are_ignored() {
        let info = detect("```\nLoop Name: fenced\n```\n# Title");
        assert_eq!(info.explicit, None);
        assert_eq!(info.canonical_count, 0);
        assert_eq!(info.display_name, "Title");
    }

    #[test]
    fn counts_every_canonical_line() {
        let info = detect("Loop Name: one\nLoop Name: two\n");
        assert_eq!(info.canonical_count, 2);
        assert_eq!(info.explicit.as_deref(), Some("one"));
    }

    #[test]
    fn long_canonical_is_flagged_and_cut() {
        let long = "a".repeat(70);
        let info = detect(&format!("Loop Name: {long}"));
        assert!(info.canonical_too_long);
        assert_eq!(info.explicit, Some("a".repeat(60)));
        let exact = "b".repeat(60);
        assert!(!detect(&format!("Loop Name: {exact}")).canonical_too_long);
    }

    #[test]
    fn display_name_fallbacks() {
        assert_eq!(detect("## Objective\n# My Feature\n").display_name, "My Feature");
        assert_eq!(detect("## Objective\n\n  Ship the thing.\n## Phases\n").display_name, "Ship the thing.");
        assert_eq!(detect("---\nfirst real line\n").display_name, "first real line");
        assert_eq!(detect("").display_name, "Implementation Plan");
        // A CRLF plan has its LF twin's title (review Z: it took the Objective's line).
        assert_eq!(detect("# Only\r\n\r\n## Objective\r\nok\r\n").display_name, "Only");
        assert_eq!(detect("# Only\r\n").execution_name, detect("# Only\n").execution_name);
        assert_eq!(detect("\n---\n").execution_name, "implementation-plan");
        let long = "t".repeat(70);
        let name = detect(&format!("# {long}")).display_name;
        assert_eq!(name, format!("{}...", "t".repeat(57)));
        assert_eq!(detect("# Title!").execution_name, "title");
    }

    #[test]
    fn structural_headings_are_not_titles() {
        let info = detect("# Objective\n## Verification\n## Key Context\n# Real\n");
        assert_eq!(info.display_name, "Real");
        assert_eq!(detect("## Phases\n").display_name, "## Phases");
    }
}
