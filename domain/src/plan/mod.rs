//! The plan domain: everything Forge does with plan text, as pure functions.
//!
//! A plan is markdown. `<!-- forge-section -->` markers split it into executable
//! sections ([`decompose`]), a `Loop Name:` line names the loop ([`loop_name`]), and
//! authoring feedback is a structure report with warnings ([`structure`]). The tools
//! that store plans use [`normalize`] and [`sanitize`] on the way in, [`edit`] for
//! exact-string edits and [`read`] for paging, searching and listing.
//!
//! Every function mirrors the JavaScript semantics the formats were defined in:
//! "chars" are UTF-16 code units, lines are `split('\n')` (so a trailing newline
//! yields one more, empty, line), `trim` strips JavaScript whitespace, and a
//! fenced code block hides markers, headings and `Loop Name:` lines.

pub mod decompose;
pub mod edit;
pub mod fences;
pub mod loop_name;
pub mod normalize;
pub mod read;
pub mod sanitize;
pub mod structure;

/// Most executable sections a plan may have; markers past it are dropped.
pub const MAX_TOTAL_SECTIONS: usize = 24;

/// A regex class equal to JavaScript's `\s` (the Rust `\s` also matches U+0085 and
/// misses U+FEFF).
pub(crate) const WS: &str =
    r"[\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}]";

/// A regex class equal to JavaScript's `.` without the `s` flag.
pub(crate) const DOT: &str = r"[^\n\r\x{2028}\x{2029}]";

/// JavaScript `\s` for one character.
pub(crate) fn is_js_space(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{FEFF}'
}

/// Whether `b` is a printable ASCII byte other than space: never [`is_js_space`], and
/// never part of a longer UTF-8 sequence. Lets the trims below skip decoding characters
/// for the common line that neither starts nor ends with white space.
fn is_ascii_graphic(b: Option<&u8>) -> bool {
    b.is_some_and(|b| b.is_ascii_graphic())
}

/// JavaScript `String.prototype.trim`.
pub(crate) fn js_trim(s: &str) -> &str {
    if is_ascii_graphic(s.as_bytes().first()) && is_ascii_graphic(s.as_bytes().last()) {
        return s;
    }
    s.trim_matches(is_js_space)
}

/// JavaScript `String.prototype.trimStart`.
pub(crate) fn js_trim_start(s: &str) -> &str {
    if is_ascii_graphic(s.as_bytes().first()) {
        return s;
    }
    s.trim_start_matches(is_js_space)
}

/// JavaScript `String.prototype.trimEnd`.
pub(crate) fn js_trim_end(s: &str) -> &str {
    if is_ascii_graphic(s.as_bytes().last()) {
        return s;
    }
    s.trim_end_matches(is_js_space)
}

/// JavaScript `s.substring(0, n)`: the longest prefix of at most `n` UTF-16 code
/// units. A character that would be split in half is left out whole.
pub(crate) fn cut_utf16(s: &str, n: usize) -> &str {
    let mut units = 0;
    for (at, c) in s.char_indices() {
        units += c.len_utf16();
        if units > n {
            return &s[..at];
        }
    }
    s
}

/// The heading level and the text after the `#` run, for a line (already trimmed
/// when the caller wants indented headings) matching `^#{1,6}\s+`.
pub(crate) fn atx_heading(line: &str) -> Option<(usize, &str)> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.starts_with(is_js_space) {
        return None;
    }
    Some((hashes, js_trim_start(rest)))
}

/// Whether `text` is `<!--`, optional whitespace, `word`, optional whitespace, `-->`
/// (the shape of every Forge marker comment). `text` must already be trimmed.
fn is_marker_comment(text: &str, word: &str) -> bool {
    let Some(rest) = text.strip_prefix("<!--") else {
        return false;
    };
    let Some(rest) = js_trim_start(rest).strip_prefix(word) else {
        return false;
    };
    js_trim_start(rest) == "-->"
}

/// A section marker line: trimmed text `<!-- forge-section -->` (whitespace inside
/// optional).
pub(crate) fn is_section_marker(line: &str) -> bool {
    is_marker_comment(js_trim(line), "forge-section")
}

/// A legacy paired marker line: `<!-- forge-section:start -->` or
/// `<!-- forge-section:end -->`. These never split a plan.
pub(crate) fn is_legacy_section_marker(line: &str) -> bool {
    let t = js_trim(line);
    is_marker_comment(t, "forge-section:start") || is_marker_comment(t, "forge-section:end")
}

/// Compiles one of this module's constant patterns.
pub(crate) fn static_regex(pattern: &str) -> regex::Regex {
    // The patterns are constants of this crate and covered by tests; failing to
    // compile one is a programming error, not a user-data condition.
    regex::Regex::new(pattern).expect("constant plan regex must compile")
}

/// Compiles a user-supplied search pattern (ECMAScript, as Forge reads it:
/// [`crate::ecma_regex`]), with Forge's error text.
pub(crate) fn user_regex(pattern: &str) -> Result<regex::Regex, String> {
    crate::ecma_regex::compile(pattern).map_err(|e| format!("Invalid regex pattern: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_utf16_counts_code_units_and_never_splits() {
        assert_eq!(cut_utf16("abcdef", 3), "abc");
        assert_eq!(cut_utf16("ab", 3), "ab");
        assert_eq!(cut_utf16("a😀b", 2), "a");
        assert_eq!(cut_utf16("a😀b", 3), "a😀");
        assert_eq!(cut_utf16("é", 0), "");
    }

    #[test]
    fn trims_like_javascript() {
        assert_eq!(js_trim("\u{feff} x \u{3000}"), "x");
        assert_eq!(js_trim("\u{85}x"), "\u{85}x");
    }

    #[test]
    fn the_ascii_shortcut_trims_as_the_full_trims() {
        // Every ASCII character and some others at either end of a word.
        let ends: Vec<char> =
            (0u8..128).map(char::from).chain(['\u{85}', '\u{a0}', '\u{feff}', '\u{3000}', 'é']).collect();
        for &first in &ends {
            for &last in &ends {
                let s = format!("{first}x{last}");
                assert_eq!(js_trim(&s), s.trim_matches(is_js_space), "{s:?}");
                assert_eq!(js_trim_start(&s), s.trim_start_matches(is_js_space), "{s:?}");
                assert_eq!(js_trim_end(&s), s.trim_end_matches(is_js_space), "{s:?}");
            }
            let one = first.to_string();
            assert_eq!(js_trim(&one), one.trim_matches(is_js_space), "{one:?}");
        }
        assert_eq!(js_trim(""), "");
    }

    #[test]
    fn the_ws_class_is_is_js_space() {
        // `decompose::title_heading` reads the title pattern's `WS` as `is_js_space`.
        let ws = static_regex(&format!("^{WS}$"));
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            assert_eq!(ws.is_match(c.encode_utf8(&mut [0; 4])), is_js_space(c), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn marker_shapes() {
        assert!(is_section_marker("<!-- forge-section -->"));
        assert!(is_section_marker("  <!--forge-section-->  "));
        assert!(!is_section_marker("<!-- forge-section --> x"));
        assert!(!is_section_marker("<!-- forge-sections -->"));
        assert!(is_legacy_section_marker("<!-- forge-section:start -->"));
        assert!(is_legacy_section_marker("<!--forge-section:end-->"));
        assert!(!is_legacy_section_marker("<!-- forge-section -->"));
    }

    #[test]
    fn atx_heading_levels() {
        assert_eq!(atx_heading("## Phase 1"), Some((2, "Phase 1")));
        assert_eq!(atx_heading("###### x"), Some((6, "x")));
        assert_eq!(atx_heading("####### x"), None);
        assert_eq!(atx_heading("##x"), None);
        assert_eq!(atx_heading("##"), None);
    }

    #[test]
    fn regex_errors_are_one_line() {
        let err = user_regex("(").err().unwrap_or_default();
        assert!(err.starts_with("Invalid regex pattern: "), "{err}");
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains("unclosed group"), "{err}");
    }
}
