//! Fenced code blocks (FORGE-REFERENCE §3.1).
//!
//! A line whose text, after optional indentation, starts with three or more
//! backticks or three or more tildes opens a fence. The fence closes on a later line
//! made of the same character, at least as many of them as the opener, and nothing
//! but whitespace after them. The opening line and every line inside are "fenced";
//! the closing line is not. A fence that never closes runs to the end of the text.
//!
//! Plan scanners skip fenced lines, so a plan can quote markers, headings and
//! `Loop Name:` lines inside code blocks without them taking effect.

use super::{is_js_space, js_trim_start};

/// The fence run at the start of a line: its character, its length and the text
/// after it. `None` when the line does not start (after indentation) with three or
/// more backticks or tildes.
fn fence_run(line: &str) -> Option<(char, usize, &str)> {
    let text = js_trim_start(line);
    let ch = text.chars().next()?;
    if ch != '`' && ch != '~' {
        return None;
    }
    // Both fence characters are one byte, so the count is also a byte offset.
    let len = text.bytes().take_while(|&b| b == ch as u8).count();
    if len < 3 {
        return None;
    }
    Some((ch, len, &text[len..]))
}

/// Per line: `true` for a fence's opening line and the lines inside it, `false` for
/// everything else (closing lines included).
pub fn fenced_lines(lines: &[&str]) -> Vec<bool> {
    let mut mask = Vec::with_capacity(lines.len());
    let mut open: Option<(char, usize)> = None;
    for line in lines {
        match open {
            None => {
                let opens = fence_run(line);
                if let Some((ch, len, _)) = opens {
                    open = Some((ch, len));
                }
                mask.push(opens.is_some());
            }
            Some((ch, len)) => {
                let closes = matches!(
                    fence_run(line),
                    Some((c, l, rest)) if c == ch && l >= len && rest.chars().all(is_js_space)
                );
                if closes {
                    open = None;
                }
                mask.push(!closes);
            }
        }
    }
    mask
}

/// Per line: `true` for the fence delimiter lines (openers and closers), derived
/// from a [`fenced_lines`] mask: a line whose state differs from the line before.
pub fn fence_delimiters(mask: &[bool]) -> Vec<bool> {
    let mut previous = false;
    mask.iter()
        .map(|&fenced| {
            let delimiter = fenced != previous;
            previous = fenced;
            delimiter
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(text: &str) -> Vec<bool> {
        let lines: Vec<&str> = crate::text::split_lines(text);
        fenced_lines(&lines)
    }

    #[test]
    fn backtick_fence_marks_opener_and_inside_not_closer() {
        assert_eq!(mask("a\n```rust\nb\n```\nc"), vec![false, true, true, false, false]);
    }

    #[test]
    fn tilde_fence_and_indentation() {
        assert_eq!(mask("  ~~~\nx\n   ~~~  \ny"), vec![true, true, false, false]);
    }

    #[test]
    fn closer_must_match_char_and_be_at_least_as_long() {
        // A tilde line does not close a backtick fence, a shorter run does not close
        // a longer one, a longer run does.
        assert_eq!(mask("````\n~~~~\n```\n`````\nz"), vec![true, true, true, false, false]);
    }

    #[test]
    fn closer_with_text_after_is_inside() {
        assert_eq!(mask("```\n``` rust\n```"), vec![true, true, false]);
    }

    #[test]
    fn unclosed_fence_runs_to_eof() {
        assert_eq!(mask("a\n```\nb\nc"), vec![false, true, true, true]);
    }

    #[test]
    fn two_backticks_are_not_a_fence() {
        assert_eq!(mask("``\nx"), vec![false, false]);
    }

    #[test]
    fn delimiters_are_openers_and_closers() {
        let m = mask("a\n```\nb\n```\nc\n```\n```");
        assert_eq!(fence_delimiters(&m), vec![false, true, false, true, false, true, true]);
    }
}
