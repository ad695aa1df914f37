//! `plan-edit` matching and messages (FORGE-REFERENCE §2.3).
//!
//! An edit replaces exact, literal text (no pattern syntax), like an editor's
//! find-and-replace: `oldString` must occur exactly once unless `replaceAll` is
//! set. Checks run in this order, and the first failure wins:
//!
//! 1. `oldString` equal to `newString`;
//! 2. no stored plan: an empty `oldString` creates the plan from `newString`
//!    (normalized like `plan-write`), anything else fails;
//! 3. an empty `oldString` on an existing plan;
//! 4. no occurrence; more than one without `replaceAll`;
//! 5. a result that is empty after trimming.
//!
//! Nothing else is normalized. Storing (and the running-loop guard) is the
//! caller's; this module returns the new text and the lines each replacement covers
//! in it, so the report can list only the sections those lines touch
//! ([`touches`], applied by the structure report to its own scan of the stored text).

use super::decompose::Section;
use super::js_trim;
use super::normalize::normalize_plan;

/// The result of an accepted edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditOutcome {
    /// No plan was stored and `oldString` was empty: `text` is the normalized
    /// `newString`, to store as the new plan (report: `Created plan.`).
    Created { text: String },
    /// The replaced plan text, the number of occurrences replaced, and the lines of the
    /// new text the replacements cover (`first..=last`, 0-based, ascending; the ranges of
    /// replacements on the same or neighbouring lines are one range).
    Replaced { text: String, count: usize, lines: Vec<(usize, usize)> },
}

/// Prefix of every failure.
const FAILED: &str = "plan-edit failed: ";

/// Why an edit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditErrorKind {
    /// `oldString` is not in the stored plan: the plan is not what the caller read (a
    /// stale edit; re-read it and retry).
    Stale,
    /// The edit itself cannot be used (identical strings, an empty `oldString` on a plan,
    /// several matches without `replaceAll`, an empty result, no plan to edit).
    Invalid,
}

/// A refused edit: its kind and the complete failure text, starting `plan-edit failed: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EditError {
    pub kind: EditErrorKind,
    pub message: String,
}

impl EditError {
    fn invalid(reason: impl std::fmt::Display) -> Self {
        EditError { kind: EditErrorKind::Invalid, message: format!("{FAILED}{reason}") }
    }
}

/// Applies one edit to the stored plan `existing` (`None` when the session has no
/// plan).
pub fn apply_edit(existing: Option<&str>, old: &str, new: &str, replace_all: bool) -> Result<EditOutcome, EditError> {
    apply_edit_within(existing, old, new, replace_all, usize::MAX)
}

/// [`apply_edit`], refusing a replacement whose result would be over `max_len` bytes
/// before building it: with `replaceAll`, a short `oldString` and a long `newString`
/// multiply (a 4 MB plan of `x` with a 1,000-byte `newString` is 4 GB), and the
/// configured plan size is checked only once the text exists.
pub fn apply_edit_within(
    existing: Option<&str>,
    old: &str,
    new: &str,
    replace_all: bool,
    max_len: usize,
) -> Result<EditOutcome, EditError> {
    if old == new {
        return Err(EditError::invalid("oldString and newString are identical."));
    }
    let Some(existing) = existing else {
        if old.is_empty() {
            return normalize_plan(new)
                .map(|text| EditOutcome::Created { text: text.into_owned() })
                .map_err(EditError::invalid);
        }
        return Err(EditError::invalid("no plan stored for this session. Use plan-write to create it first."));
    };
    if old.is_empty() {
        return Err(EditError::invalid(
            "oldString cannot be empty when editing an existing plan. \
             Quote the exact text to change (plan-read shows it), or use plan-write to replace the whole plan.",
        ));
    }

    // Non-overlapping, left to right, as `str::match_indices`, with memchr's vector search;
    // counted first, so that nothing the size of the matches is kept before the size check.
    let finder = memchr::memmem::Finder::new(old.as_bytes());
    let count = finder.find_iter(existing.as_bytes()).count();
    if count == 0 {
        return Err(EditError {
            kind: EditErrorKind::Stale,
            message: format!(
                "{FAILED}oldString not found in the stored plan. \
                 Copy it from plan-read output without the \"N: \" line-number prefixes; \
                 spaces, tabs, indentation and line breaks must match the plan exactly."
            ),
        });
    }
    if count > 1 && !replace_all {
        return Err(EditError::invalid(format!(
            "found {count} matches for oldString. \
             Add surrounding context to make it unique, or set replaceAll: true."
        )));
    }

    // The result's length, in u128: no count and lengths overflow it.
    let len = existing.len() as u128 - count as u128 * old.len() as u128 + count as u128 * new.len() as u128;
    if len > max_len as u128 {
        return Err(EditError::invalid(format!(
            "the edited plan would be {len} bytes ({count} replacement(s)), over the limit of {max_len} bytes \
             (documents.maxPlanBytes); nothing was changed. Split the plan or raise the limit."
        )));
    }

    // Build the new text and remember which lines each replacement covers in it:
    // from the line it starts on to the line of its last character (a deletion
    // covers the line it sits on). Ranges that overlap or adjoin are kept as one.
    let new_newlines = new.matches('\n').count();
    let covered_below = if new.ends_with('\n') { new_newlines - 1 } else { new_newlines };
    let mut text = String::with_capacity(usize::try_from(len).unwrap_or(usize::MAX).max(existing.len()));
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut line = 0;
    let mut copied = 0;
    for at in finder.find_iter(existing.as_bytes()) {
        let kept = &existing[copied..at];
        line += kept.matches('\n').count();
        text.push_str(kept);
        text.push_str(new);
        let range = (line, line + covered_below);
        match ranges.last_mut() {
            Some(last) if range.0 <= last.1 + 1 => last.1 = last.1.max(range.1),
            _ => ranges.push(range),
        }
        line += new_newlines;
        copied = at + old.len();
    }
    text.push_str(&existing[copied..]);

    if js_trim(&text).is_empty() {
        return Err(EditError::invalid(
            "replacement would leave the plan empty. \
             Leave some non-whitespace text in the plan, or use plan-write to replace it entirely.",
        ));
    }

    Ok(EditOutcome::Replaced { text, count, lines: ranges })
}

/// Whether a section's `[start_line, end_line)` shares a line with one of the replaced
/// line ranges (`first..=last`).
pub fn touches(section: &Section, ranges: &[(usize, usize)]) -> bool {
    ranges.iter().any(|&(first, last)| first < section.end_line && last >= section.start_line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::decompose::decompose;

    const BASE: &str =
        "# Plan\n\n<!-- forge-section -->\n## Phase 1\n- do one\n\n<!-- forge-section -->\n## Phase 2\n- do two\n";

    /// Indexes of the sections of `text` an edit's replaced `ranges` touch.
    fn touched_sections(text: &str, ranges: &[(usize, usize)]) -> Vec<usize> {
        decompose(text).sections.iter().filter(|s| touches(s, ranges)).map(|s| s.index).collect()
    }

    fn replaced(outcome: Result<EditOutcome, EditError>) -> (String, usize, Vec<usize>) {
        match outcome {
            Ok(EditOutcome::Replaced { text, count, lines }) => {
                let touched = touched_sections(&text, &lines);
                (text, count, touched)
            }
            other => panic!("expected a replacement, got {other:?}"),
        }
    }

    #[test]
    fn identical_strings_fail_first() {
        assert_eq!(
            apply_edit(None, "x", "x", false).unwrap_err().message,
            "plan-edit failed: oldString and newString are identical."
        );
        assert_eq!(
            apply_edit(Some(BASE), "", "", false).unwrap_err().message,
            "plan-edit failed: oldString and newString are identical."
        );
    }

    #[test]
    fn no_plan_and_empty_old_creates_normalized() {
        let out = apply_edit(None, "", "\n<!-- forge-plan:start -->\n# New\n<!-- forge-plan:end -->\n", false);
        assert_eq!(out, Ok(EditOutcome::Created { text: "# New".to_string() }));
        assert_eq!(apply_edit(None, "", "   ", false).unwrap_err().message, "plan-edit failed: content is empty.");
        assert_eq!(
            apply_edit(None, "", "<!-- forge-plan:start -->\nx", false).unwrap_err().message,
            "plan-edit failed: content contains an unbalanced <!-- forge-plan:start --> / <!-- forge-plan:end --> marker."
        );
    }

    #[test]
    fn no_plan_with_old_text_fails() {
        assert_eq!(
            apply_edit(None, "foo", "bar", false).unwrap_err().message,
            "plan-edit failed: no plan stored for this session. Use plan-write to create it first."
        );
    }

    #[test]
    fn empty_old_on_existing_plan_fails() {
        let err = apply_edit(Some(BASE), "", "more", false).unwrap_err().message;
        assert!(err.starts_with("plan-edit failed: oldString cannot be empty when editing an existing plan"));
    }

    #[test]
    fn not_found_gives_whitespace_advice() {
        let err = apply_edit(Some(BASE), "no such text", "x", false).unwrap_err();
        assert_eq!(err.kind, EditErrorKind::Stale);
        assert!(err.message.starts_with("plan-edit failed: oldString not found in the stored plan. "));
        assert!(err.message.contains("indentation"));
    }

    #[test]
    fn only_a_missing_old_string_is_stale() {
        let invalid = [
            apply_edit(None, "x", "x", false),
            apply_edit(None, "", "   ", false),
            apply_edit(None, "foo", "bar", false),
            apply_edit(Some(BASE), "", "more", false),
            apply_edit(Some("a a"), "a", "b", false),
            apply_edit(Some("# Plan"), "# Plan", " ", false),
        ];
        for out in invalid {
            let err = out.unwrap_err();
            assert_eq!(err.kind, EditErrorKind::Invalid, "{err}");
            assert!(err.to_string().starts_with(FAILED), "{err}");
        }
        assert_eq!(apply_edit(Some("# Plan"), "Phase", "x", false).unwrap_err().kind, EditErrorKind::Stale);
    }

    #[test]
    fn several_matches_need_replace_all() {
        let plan = "# Plan\n\nline\nline\nline\n";
        assert_eq!(
            apply_edit(Some(plan), "line", "replaced", false).unwrap_err().message,
            "plan-edit failed: found 3 matches for oldString. Add surrounding context to make it unique, or set replaceAll: true."
        );
        let (text, count, touched) = replaced(apply_edit(Some(plan), "line", "replaced", true));
        assert_eq!(text, "# Plan\n\nreplaced\nreplaced\nreplaced\n");
        assert_eq!(count, 3);
        assert!(touched.is_empty());
    }

    #[test]
    fn occurrences_do_not_overlap() {
        let (text, count, _) = replaced(apply_edit(Some("aaaa"), "aa", "b", true));
        assert_eq!((text.as_str(), count), ("bb", 2));
        assert!(apply_edit(Some("aaa"), "aa", "b", false).is_ok());
    }

    #[test]
    fn unique_match_changes_only_the_span() {
        let (text, count, touched) = replaced(apply_edit(Some(BASE), "- do one", "- do one (revised)", false));
        assert_eq!(text, BASE.replace("- do one", "- do one (revised)"));
        assert_eq!(count, 1);
        assert_eq!(touched, vec![0]);
    }

    #[test]
    fn regex_characters_are_literal() {
        let plan = "# Plan\n\n[Phase 1] (a|b) $x is a.*(b) special\n";
        let (text, _, _) = replaced(apply_edit(Some(plan), "[Phase 1] (a|b) $x is a.*(b)", "[Phase 2] $1 $$", false));
        assert_eq!(text, "# Plan\n\n[Phase 2] $1 $$ special\n");
        assert!(apply_edit(Some("abcb"), "a.*(b)", "x", false).is_err());
    }

    #[test]
    fn emptying_the_plan_fails() {
        let err = apply_edit(Some("# The entire plan"), "# The entire plan", "   ", false).unwrap_err().message;
        assert!(err.starts_with("plan-edit failed: replacement would leave the plan empty."));
        let (text, _, _) = replaced(apply_edit(Some("# Plan\n\nLine A\nLine B"), "Line B", "", false));
        assert_eq!(text, "# Plan\n\nLine A\n");
    }

    #[test]
    fn touched_sections_in_new_text() {
        // An edit that adds a section touches the old one and the new one.
        let (text, _, touched) = replaced(apply_edit(
            Some(BASE),
            "- do one",
            "- do one\n\n<!-- forge-section -->\n## Phase 1b\n- more",
            false,
        ));
        assert_eq!(decompose(&text).sections.len(), 3);
        assert_eq!(touched, vec![0, 1]);
        // Preamble edits touch nothing.
        let (_, _, touched) = replaced(apply_edit(Some(BASE), "# Plan", "# Better plan", false));
        assert!(touched.is_empty());
        // replaceAll across sections.
        let (_, count, touched) = replaced(apply_edit(Some(BASE), "- do", "- really do", true));
        assert_eq!((count, touched), (2, vec![0, 1]));
        // A deletion touches the section it happens in.
        let (_, _, touched) = replaced(apply_edit(Some(BASE), "- do two", "", false));
        assert_eq!(touched, vec![1]);
        // A replacement ending in a newline does not reach into the next line.
        let (_, _, touched) = replaced(apply_edit(Some(BASE), "- do one\n\n", "- one\n\n", false));
        assert_eq!(touched, vec![0]);
        let (_, _, touched) = replaced(apply_edit(Some(BASE), "- do one\n", "- one\n", false));
        assert_eq!(touched, vec![0]);
        // Multi-byte text at the end of the replacement.
        let (_, _, touched) = replaced(apply_edit(Some(BASE), "- do two", "- ünïcødé 😀", false));
        assert_eq!(touched, vec![1]);
        // Many occurrences on earlier lines shift later ranges correctly.
        let plan = "x\nx\nx\n<!-- forge-section -->\n## Phase 1\nx y\n";
        let (_, count, touched) = replaced(apply_edit(Some(plan), "x", "z\nz", true));
        assert_eq!((count, touched), (4, vec![0]));
    }

    /// Replacements on the same or neighbouring lines give one range (a replaceAll of a
    /// short string keeps a range per line block, not one per match).
    #[test]
    fn neighbouring_replacements_share_a_range() {
        let Ok(EditOutcome::Replaced { lines, count, .. }) = apply_edit(Some("aa\na\nb\na a"), "a", "c", true) else {
            panic!("not replaced")
        };
        assert_eq!((count, lines), (5, vec![(0, 1), (3, 3)]));
        let Ok(EditOutcome::Replaced { lines, .. }) = apply_edit(Some("a\nb\nb\na"), "a", "c\nc", true) else {
            panic!("not replaced")
        };
        assert_eq!(lines, vec![(0, 1), (4, 5)]);
    }

    /// A result over the bound is refused before it is built, naming its size.
    #[test]
    fn a_result_over_the_bound_is_refused_before_it_is_built() {
        let plan = "x".repeat(1000);
        let e = apply_edit_within(Some(&plan), "x", &"y".repeat(1000), true, 999_999).unwrap_err();
        assert_eq!(e.kind, EditErrorKind::Invalid);
        assert!(e.message.starts_with("plan-edit failed: the edited plan would be 1000000 bytes (1000 replacement(s)), over the limit of 999999 bytes (documents.maxPlanBytes)"), "{}", e.message);
        // At the bound: accepted; shrinking edits are never refused for size.
        assert!(apply_edit_within(Some(&plan), "x", &"y".repeat(1000), true, 1_000_000).is_ok());
        assert!(apply_edit_within(Some(&plan), "xx", "", true, 10).is_err_and(|e| e.message.contains("empty")));
        assert!(apply_edit_within(Some(&plan), "xx", "y", true, 500).is_ok());
        // No overflow whatever the sizes.
        let e = apply_edit_within(Some(&plan), "x", &"y".repeat(1 << 20), true, usize::MAX >> 40).unwrap_err();
        assert!(e.message.contains("1048576000 bytes"), "{}", e.message);
    }
}
