//! The pure half of publishing review findings as LSP diagnostics (PROTOCOL.md §6):
//! the range of a finding's line, its message, severity and `data`.
//!
//! Lines are counted the way LSP clients count them: a line ends at `\r\n`, `\n` or
//! a lone `\r`. A text ending in a line break has one more, empty, line after it.
//! Positions are measured in the negotiated encoding's code units.

use crate::review::Finding;
use forge_protocol::inputs::Severity;

/// `source` of every published finding.
pub const SOURCE: &str = "forge";

/// The negotiated `positionEncoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionEncoding {
    /// `utf-8`: byte offsets.
    Utf8,
    /// `utf-16` (the LSP default): UTF-16 code units.
    Utf16,
}

impl PositionEncoding {
    /// Length of `s` in this encoding's code units, saturated to `u32`.
    pub fn units(self, s: &str) -> u32 {
        let n = match self {
            PositionEncoding::Utf8 => s.len(),
            PositionEncoding::Utf16 => s.encode_utf16().count(),
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

/// Range of the whole 1-based line `line` of `text`: `(line - 1, 0, end)` where
/// `end` is the line's length without its line break, in `enc` code units.
/// `None` when the line does not exist (line < 1 or past the end); the caller then
/// publishes `0..0` on that line as for an unreadable file.
pub fn line_range(text: &str, line: i64, enc: PositionEncoding) -> Option<(u32, u32, u32)> {
    let index = usize::try_from(line.checked_sub(1)?).ok()?;
    let line0 = u32::try_from(index).ok()?;
    let content = lsp_lines(text).nth(index)?;
    Some((line0, 0, enc.units(content)))
}

/// The lines of `text` without their breaks (`\r\n`, `\n`, `\r`).
fn lsp_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        match current.find(['\r', '\n']) {
            Some(at) => {
                let brk = if current[at..].starts_with("\r\n") { 2 } else { 1 };
                rest = current.get(at + brk..);
                current.get(..at)
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

/// The length of every line of `text` in the encoding's code units, with the same line
/// breaks as [`line_range`] (`\r\n`, `\n` and a lone `\r`): computed once per file, so a
/// file with many findings is walked once.
pub fn line_lengths(text: &str, enc: PositionEncoding) -> Vec<u32> {
    let mut out = Vec::new();
    let mut cur: u32 = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                out.push(cur);
                cur = 0;
            }
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push(cur);
                cur = 0;
            }
            c => {
                cur = cur.saturating_add(match enc {
                    PositionEncoding::Utf8 => c.len_utf8() as u32,
                    PositionEncoding::Utf16 => c.len_utf16() as u32,
                })
            }
        }
    }
    out.push(cur);
    out
}

/// The diagnostic message: the description; then a blank line and `Scenario: ...`
/// when there is one; then a blank line and `loop <name>, section <k>` when the
/// finding belongs to a loop (`, section <k>` only when it has a section).
///
/// `k` is the 1-based section number (the stored 0-based `sectionIndex` plus one), as
/// progress, lenses and status count sections (review YK: this comment said 0-based).
///
/// The description and the scenario are each cut at [`MESSAGE_PART_MAX`] bytes, saying so:
/// a diagnostic is for reading in a hover or a list, and every finding of a file goes out in
/// one `publishDiagnostics` (nine findings of the 8 MiB review-write allows made a 75 MB
/// message, over the 64 MiB any client of this protocol may refuse).
pub fn message(f: &Finding) -> String {
    let mut out = cut_part(&f.description);
    if let Some(scenario) = f.scenario.as_deref().filter(|s| !s.is_empty()) {
        out.push_str("\n\nScenario: ");
        out.push_str(&cut_part(scenario));
    }
    let origin = match (f.loop_name.as_deref().filter(|l| !l.is_empty()), f.section_index) {
        // People count sections from 1 (as progress, lenses and status do); a finding's
        // section may be any u32 (review-write), the last one included.
        (Some(name), Some(k)) => Some(format!("loop {name}, section {}", u64::from(k) + 1)),
        (Some(name), None) => Some(format!("loop {name}")),
        (None, Some(k)) => Some(format!("section {}", u64::from(k) + 1)),
        (None, None) => None,
    };
    if let Some(origin) = origin {
        out.push_str("\n\n");
        out.push_str(&origin);
    }
    out
}

/// The message of a finding published after its file's others took [`URI_MESSAGES_MAX`]:
/// what it is and where to read it, at a fixed small size.
pub fn short_message(f: &Finding) -> String {
    format!(
        "[Finding {}: not shown here, this file's findings are too large to publish whole; forge.review-read shows it.]",
        f.id
    )
}

/// The most bytes (as JSON text) the messages of one file's diagnostics take in full; the
/// findings after that get [`short_message`]. One `publishDiagnostics` carries them all.
pub const URI_MESSAGES_MAX: usize = 32 << 20;

/// The most bytes of a finding's description (and of its scenario) a diagnostic shows.
pub const MESSAGE_PART_MAX: usize = 16 * 1024;

/// `s`, or its first [`MESSAGE_PART_MAX`] bytes (at a character boundary) and a note.
fn cut_part(s: &str) -> String {
    if s.len() <= MESSAGE_PART_MAX {
        return s.to_string();
    }
    let mut end = MESSAGE_PART_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} bytes in all; forge.review-read shows it whole]", &s[..end], s.len())
}

/// LSP `DiagnosticSeverity`: bug → 1 (Error), warning → 2 (Warning).
pub fn severity_code(s: Severity) -> u8 {
    match s {
        Severity::Bug => 1,
        Severity::Warning => 2,
    }
}

/// The diagnostic `data`: `{ findingId, loopName, sectionIndex, crossSection, file, line }`;
/// `loopName` and `sectionIndex` are `null` when absent, `crossSection` is true exactly
/// when the finding has no section, and `file`/`line` are the finding's as written.
/// Serialized straight into the notification (no intermediate JSON value).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Data<'a> {
    pub finding_id: i64,
    pub loop_name: Option<&'a str>,
    pub section_index: Option<u32>,
    pub cross_section: bool,
    pub file: &'a str,
    pub line: i64,
}

/// The diagnostic `data` of a finding ([`Data`]).
pub fn data(f: &Finding) -> Data<'_> {
    Data {
        finding_id: f.id,
        loop_name: f.loop_name.as_deref().filter(|l| !l.is_empty()),
        section_index: f.section_index,
        cross_section: f.section_index.is_none(),
        file: &f.file,
        line: f.line,
    }
}

#[cfg(test)]
mod line_lengths_tests {
    use super::*;

    #[test]
    fn agrees_with_line_range() {
        for text in ["", "a", "a\nb", "héllo 😀 世界\r\nx\ry\n", "\n\n", "abc\r", "x\r\n\r\n"] {
            for enc in [PositionEncoding::Utf8, PositionEncoding::Utf16] {
                let lens = line_lengths(text, enc);
                for line in 0..(lens.len() as i64 + 2) {
                    let expected = line_range(text, line, enc);
                    let got =
                        (line >= 1).then(|| lens.get(line as usize - 1).map(|&e| ((line - 1) as u32, 0, e))).flatten();
                    assert_eq!(got, expected, "{text:?} line {line}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use PositionEncoding::{Utf16, Utf8};

    fn finding() -> Finding {
        Finding {
            id: 42,
            file: "src/a.rs".into(),
            line: 3,
            severity: Severity::Bug,
            description: "Leaks the handle.".into(),
            scenario: None,
            loop_name: None,
            section_index: None,
            created_at: 0,
        }
    }

    #[test]
    fn ascii_lines() {
        let text = "fn main() {\n    x();\n}\n";
        assert_eq!(line_range(text, 1, Utf16), Some((0, 0, 11)));
        assert_eq!(line_range(text, 2, Utf8), Some((1, 0, 8)));
        assert_eq!(line_range(text, 3, Utf16), Some((2, 0, 1)));
        // Trailing newline: one more, empty line.
        assert_eq!(line_range(text, 4, Utf16), Some((3, 0, 0)));
        assert_eq!(line_range(text, 5, Utf16), None);
    }

    #[test]
    fn emoji_and_cjk() {
        let text = "let s = \"😀😀\";\n漢字かな\nok";
        // `let s = "` is 9, two emoji, `";` is 2.
        assert_eq!(line_range(text, 1, Utf16), Some((0, 0, 9 + 4 + 2)));
        assert_eq!(line_range(text, 1, Utf8), Some((0, 0, 9 + 8 + 2)));
        assert_eq!(line_range(text, 2, Utf16), Some((1, 0, 4)));
        assert_eq!(line_range(text, 2, Utf8), Some((1, 0, 12)));
        assert_eq!(line_range(text, 3, Utf8), Some((2, 0, 2)));
    }

    #[test]
    fn crlf_and_lone_cr() {
        let text = "ab\r\n😀\r\ncd";
        assert_eq!(line_range(text, 1, Utf16), Some((0, 0, 2)));
        assert_eq!(line_range(text, 2, Utf16), Some((1, 0, 2)));
        assert_eq!(line_range(text, 2, Utf8), Some((1, 0, 4)));
        assert_eq!(line_range(text, 3, Utf16), Some((2, 0, 2)));
        assert_eq!(line_range(text, 4, Utf16), None);
        assert_eq!(line_range("a\rbcd\r\n", 2, Utf8), Some((1, 0, 3)));
        assert_eq!(line_range("a\rbcd\r\n", 3, Utf8), Some((2, 0, 0)));
        assert_eq!(line_range("\r\n\r\n", 2, Utf16), Some((1, 0, 0)));
    }

    #[test]
    fn missing_zero_and_negative_lines() {
        assert_eq!(line_range("one\ntwo", 3, Utf16), None);
        assert_eq!(line_range("one", 0, Utf16), None);
        assert_eq!(line_range("one", -1, Utf16), None);
        assert_eq!(line_range("one", i64::MIN, Utf16), None);
        assert_eq!(line_range("one", i64::MAX, Utf16), None);
        assert_eq!(line_range("", 1, Utf16), Some((0, 0, 0)));
        assert_eq!(line_range("", 2, Utf16), None);
    }

    #[test]
    fn odd_texts_never_panic() {
        let texts = ["\r", "\n", "\r\r\n", "\n\r", "é\r😀\n\r\n漢", "\u{feff}x", "a\0b"];
        for text in texts {
            let count = lsp_lines(text).count();
            for line in -2..=(count as i64 + 2) {
                for enc in [Utf8, Utf16] {
                    let got = line_range(text, line, enc);
                    assert_eq!(got.is_some(), line >= 1 && line <= count as i64, "{text:?} {line}");
                }
            }
        }
        assert_eq!(lsp_lines("\r\r\n").count(), 3);
        assert_eq!(lsp_lines("\n\r").count(), 3);
    }

    #[test]
    fn message_parts() {
        let mut f = finding();
        assert_eq!(message(&f), "Leaks the handle.");
        f.scenario = Some("On early return.".into());
        assert_eq!(message(&f), "Leaks the handle.\n\nScenario: On early return.");
        f.loop_name = Some("feat".into());
        f.section_index = Some(2);
        assert_eq!(message(&f), "Leaks the handle.\n\nScenario: On early return.\n\nloop feat, section 3");
        f.scenario = Some(String::new());
        f.section_index = None;
        assert_eq!(message(&f), "Leaks the handle.\n\nloop feat");
        f.loop_name = None;
        f.section_index = Some(0);
        assert_eq!(message(&f), "Leaks the handle.\n\nsection 1");
        // The largest section review-write takes: no overflow (it panicked the publisher).
        f.section_index = Some(u32::MAX);
        assert_eq!(message(&f), "Leaks the handle.\n\nsection 4294967296");
        // A long description and scenario are cut, at a character boundary, saying so.
        f.section_index = None;
        f.description = format!("{}é tail", "x".repeat(MESSAGE_PART_MAX - 1));
        f.scenario = Some("y".repeat(MESSAGE_PART_MAX + 5));
        let m = message(&f);
        let want = format!(
            "{}… [cut: {} bytes in all; forge.review-read shows it whole]\n\nScenario: {}… [cut: {} bytes in all; forge.review-read shows it whole]",
            "x".repeat(MESSAGE_PART_MAX - 1),
            MESSAGE_PART_MAX + 6,
            "y".repeat(MESSAGE_PART_MAX),
            MESSAGE_PART_MAX + 5
        );
        assert_eq!(m, want);
    }

    #[test]
    fn severity_and_data() {
        assert_eq!(severity_code(Severity::Bug), 1);
        assert_eq!(severity_code(Severity::Warning), 2);
        let mut f = finding();
        let as_json = |f: &Finding| serde_json::to_value(data(f)).unwrap();
        let (file, line) = (f.file.clone(), f.line);
        assert_eq!(
            as_json(&f),
            json!({"findingId": 42, "loopName": null, "sectionIndex": null, "crossSection": true, "file": file, "line": line})
        );
        f.loop_name = Some("feat".into());
        f.section_index = Some(1);
        assert_eq!(
            as_json(&f),
            json!({"findingId": 42, "loopName": "feat", "sectionIndex": 1, "crossSection": false, "file": file, "line": line})
        );
        f.loop_name = Some(String::new());
        assert_eq!(as_json(&f)["loopName"], json!(null), "an empty bucket is no loop");
    }
}
