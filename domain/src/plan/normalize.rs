//! Normalizing submitted plan text (FORGE-REFERENCE §2.2 step 2).
//!
//! `plan-write` (and `plan-edit` when it creates a plan) accept either a bare plan
//! or a plan wrapped in `<!-- forge-plan:start -->` / `<!-- forge-plan:end -->`
//! lines, as the architect renders it in chat. The text is trimmed; when it holds
//! exactly one pair of wrapper lines (outside code fences) only the trimmed body
//! between them is kept.

use std::borrow::Cow;

use super::fences::fenced_lines;
use super::js_trim;
use crate::text::split_lines;

const PLAN_START: &str = "<!-- forge-plan:start -->";
const PLAN_END: &str = "<!-- forge-plan:end -->";

/// Failure: content empty (or an empty wrapped body).
pub const EMPTY: &str = "content is empty.";
/// Failure: more than one start or end line.
pub const MULTIPLE: &str = "content contains more than one <!-- forge-plan:start --> / <!-- forge-plan:end --> pair.";
/// Failure: a start without an end after it, or an end without a start.
pub const UNBALANCED: &str =
    "content contains an unbalanced <!-- forge-plan:start --> / <!-- forge-plan:end --> marker.";

/// The text to store for submitted `content`. `Err` holds the failure text without
/// the tool prefix (e.g. `"content is empty."`); callers prepend
/// `"plan-write failed: "` or `"plan-edit failed: "`.
/// The text is borrowed from `content` unless a plan wrapper was removed.
pub fn normalize_plan(content: &str) -> Result<Cow<'_, str>, String> {
    let trimmed = js_trim(content);
    if trimmed.is_empty() {
        return Err(EMPTY.to_string());
    }
    // Both wrapper lines hold this literal: a plan without it has none to remove.
    if !trimmed.contains("forge-plan:") {
        return Ok(Cow::Borrowed(trimmed));
    }
    let lines = split_lines(trimmed);
    let fenced = fenced_lines(&lines);
    let unfenced_equal = |marker: &str| -> Vec<usize> {
        (0..lines.len()).filter(|&i| !fenced[i] && js_trim(lines[i]) == marker).collect()
    };
    let starts = unfenced_equal(PLAN_START);
    let ends = unfenced_equal(PLAN_END);

    if starts.is_empty() && ends.is_empty() {
        return Ok(Cow::Borrowed(trimmed));
    }
    if starts.len() > 1 || ends.len() > 1 {
        return Err(MULTIPLE.to_string());
    }
    let Some(&start) = starts.first() else {
        // An end line with no start line.
        return Err(UNBALANCED.to_string());
    };
    // The end before the start (FORGE-REFERENCE §2.2), even when a fenced end line follows
    // the start (review YP: the body was cut there).
    if ends.iter().any(|&e| e < start) {
        return Err(UNBALANCED.to_string());
    }
    // The pair is the unfenced start and the unfenced end after it. When no
    // unfenced end follows the start, an end line inside a fence still counts (the
    // search for it ignores fences), so a wrapped plan whose last code block was
    // left open still closes.
    let end = ends
        .iter()
        .copied()
        .find(|&e| e > start)
        .or_else(|| (start + 1..lines.len()).find(|&i| js_trim(lines[i]) == PLAN_END))
        .ok_or_else(|| UNBALANCED.to_string())?;
    let body = lines[start + 1..end].join("\n");
    let body = js_trim(&body);
    if body.is_empty() {
        return Err(EMPTY.to_string());
    }
    Ok(Cow::Owned(body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_text_is_trimmed() {
        assert_eq!(normalize_plan("\n  # Plan\nx\n\n").as_deref(), Ok("# Plan\nx"));
    }

    #[test]
    fn empty_content() {
        assert_eq!(normalize_plan("   \n\t").unwrap_err(), "content is empty.");
        assert_eq!(
            normalize_plan("<!-- forge-plan:start -->\n  \n<!-- forge-plan:end -->").unwrap_err(),
            "content is empty."
        );
    }

    #[test]
    fn one_pair_keeps_trimmed_body() {
        let text = "intro\n<!-- forge-plan:start -->\n\n# Plan\n- a\n\n  <!-- forge-plan:end -->  \noutro";
        assert_eq!(normalize_plan(text).as_deref(), Ok("# Plan\n- a"));
    }

    #[test]
    fn unbalanced_markers() {
        for text in [
            "<!-- forge-plan:start -->\n# Plan\n- no end marker",
            "# Plan\n<!-- forge-plan:end -->",
            "<!-- forge-plan:end -->\n# Plan\n<!-- forge-plan:start -->",
            // Review YP: the end before the start, with a fenced end after it.
            "<!-- forge-plan:end -->\n<!-- forge-plan:start -->\n# Plan\n```\n<!-- forge-plan:end -->\n```\ntail",
        ] {
            assert_eq!(normalize_plan(text).unwrap_err(), UNBALANCED, "{text}");
        }
    }

    #[test]
    fn more_than_one_pair() {
        let text = "<!-- forge-plan:start -->\na\n<!-- forge-plan:end -->\n<!-- forge-plan:start -->\nb\n<!-- forge-plan:end -->";
        assert_eq!(normalize_plan(text).unwrap_err(), MULTIPLE);
        let two_ends = "<!-- forge-plan:start -->\na\n<!-- forge-plan:end -->\n<!-- forge-plan:end -->";
        assert_eq!(normalize_plan(two_ends).unwrap_err(), MULTIPLE);
    }

    #[test]
    fn fenced_markers_are_ignored() {
        let text = "# Plan\n```md\n<!-- forge-plan:start -->\n<!-- forge-plan:start -->\n```\nbody";
        assert_eq!(normalize_plan(text).as_deref(), Ok(text));
        let wrapped = "<!-- forge-plan:start -->\n# Plan\n~~~\n<!-- forge-plan:end -->\n~~~\n<!-- forge-plan:end -->";
        assert_eq!(normalize_plan(wrapped).as_deref(), Ok("# Plan\n~~~\n<!-- forge-plan:end -->\n~~~"));
    }

    #[test]
    fn end_inside_an_unclosed_fence_still_closes() {
        let text = "<!-- forge-plan:start -->\n# Plan\n```\ncode\n<!-- forge-plan:end -->";
        assert_eq!(normalize_plan(text).as_deref(), Ok("# Plan\n```\ncode"));
    }

    #[test]
    fn inline_markers_are_not_lines() {
        let text = "say <!-- forge-plan:start --> here";
        assert_eq!(normalize_plan(text).as_deref(), Ok(text));
    }
}
