//! Text helpers with the JavaScript semantics Forge's formats are defined in:
//! "chars" are UTF-16 code units, lines are `split('\n')` (a trailing newline gives
//! an extra empty line), timestamps are `toISOString()`.

/// Length in UTF-16 code units (JavaScript `string.length`): one per character, two for
/// a character beyond U+FFFF. Counted on the bytes (every byte that is not a UTF-8
/// continuation byte starts a character; a lead byte of 0xF0 or more starts a four-byte
/// one): decoding character by character took a tenth of a 2,000-line plan-write.
pub fn js_len(s: &str) -> usize {
    if s.is_ascii() {
        return s.len();
    }
    s.bytes().map(|b| usize::from(b & 0xC0 != 0x80) + usize::from(b >= 0xF0)).sum()
}

/// JavaScript `s.split("\n")`. The newlines are found with the `memchr` crate's vector
/// search: plans are split many times and their lines are short, where the standard
/// library's `split('\n')` spends most of its time starting a search per line.
pub fn split_lines(s: &str) -> Vec<&str> {
    let mut out = Vec::with_capacity(line_count(s));
    let mut start = 0;
    for at in memchr::memchr_iter(b'\n', s.as_bytes()) {
        out.push(&s[start..at]);
        start = at + 1;
    }
    out.push(&s[start..]);
    out
}

/// The byte offset in `text` of the LSP position (`line`, `character`), the character
/// counted in `enc`'s code units. Lines end at `\n`, `\r\n` or `\r`, as LSP counts them. A
/// character past its line's end is the line's end (LSP: it "defaults back to the line
/// length"), a line past the last is the end of the text, and a position inside a
/// character (between the two halves of a UTF-16 surrogate pair) is that character's start.
pub fn offset_at(text: &str, line: u32, character: u32, enc: crate::diagnostics::PositionEncoding) -> usize {
    let bytes = text.as_bytes();
    let mut start = 0;
    for _ in 0..line {
        match memchr::memchr2(b'\n', b'\r', &bytes[start..]) {
            Some(i) => {
                let at = start + i;
                start = if bytes[at] == b'\r' && bytes.get(at + 1) == Some(&b'\n') { at + 2 } else { at + 1 };
            }
            None => return text.len(),
        }
    }
    let end = memchr::memchr2(b'\n', b'\r', &bytes[start..]).map_or(text.len(), |i| start + i);
    let mut units = 0u32;
    for (i, ch) in text[start..end].char_indices() {
        if units >= character {
            return start + i;
        }
        let n = match enc {
            crate::diagnostics::PositionEncoding::Utf8 => ch.len_utf8(),
            crate::diagnostics::PositionEncoding::Utf16 => ch.len_utf16(),
        } as u32;
        if units + n > character {
            return start + i;
        }
        units += n;
    }
    end
}

/// Replaces the part of `text` from `from` to `to` (LSP positions, see [`offset_at`]) by
/// `new`: one ranged change of `textDocument/didChange`. A range whose end comes before
/// its start replaces nothing at its start. In place: no copy of the text beyond moving what follows the range (a notification of
/// thousands of ranged changes to a large buffer made a new copy of it for each, and held
/// the connection for minutes: review YC).
pub fn replace_range_in(
    text: &mut String,
    from: (u32, u32),
    to: (u32, u32),
    new: &str,
    enc: crate::diagnostics::PositionEncoding,
) {
    let a = offset_at(text, from.0, from.1, enc);
    let b = offset_at(text, to.0, to.1, enc).max(a);
    text.replace_range(a..b, new);
}

/// Longest part of a caller's input [`echo`] shows.
const ECHO_MAX: usize = 200;

/// The longest start of `s` of at most `max` bytes that ends on a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` quoted (as `{:?}` shows it) for an error message that names a caller's input; past
/// [`ECHO_MAX`] bytes only its start, and how long it is: a 1 MB pattern must not come
/// back as a 2 MB message.
pub fn echo(s: &str) -> String {
    if s.len() <= ECHO_MAX {
        return format!("{s:?}");
    }
    format!("{:?}… ({} bytes in all)", prefix(s, ECHO_MAX), s.len())
}

/// A library's error text, cut after 1,000 bytes (a regex syntax error repeats the whole
/// pattern).
pub fn cut_error(e: impl std::fmt::Display) -> String {
    let t = e.to_string();
    if t.len() <= 1000 {
        return t;
    }
    format!("{}… [cut]", prefix(&t, 1000))
}

/// The characters an editor or a markdown reader breaks a line at (LSP counts a lone `\r`
/// too; `\r\n` is one break of two).
pub const LINE_BREAKS: [char; 5] = ['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'];

/// `dest` as a Markdown link destination: as it is when it has nothing a destination cannot
/// hold bare, else in angle brackets (CommonMark: a bracketed destination may hold spaces
/// and parentheses), with `<`, `>` and `\` escaped. For the copies' absolute paths in the
/// generated documents: a project under `my proj/` gave `(…/my proj/…)`, which is no link.
pub fn md_link_destination(dest: &str) -> std::borrow::Cow<'_, str> {
    let bare = !dest.is_empty() && !dest.chars().any(|c| c.is_whitespace() || c.is_control() || "()<>\\".contains(c));
    if bare {
        return std::borrow::Cow::Borrowed(dest);
    }
    let mut out = String::with_capacity(dest.len() + 2);
    out.push('<');
    for c in dest.chars() {
        match c {
            '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('>');
    std::borrow::Cow::Owned(out)
}

/// A file path as a Markdown link destination: `%`, `#` and `?` percent-encoded first (a
/// reader takes the destination as a URL, where `%41` is `A`, `#` starts a fragment and `?`
/// a query, so a project under `100%/` or `C#/` linked to another file), then
/// [`md_link_destination`]. Not for URIs, which are encoded already.
pub fn md_path_destination(path: &str) -> String {
    let mut encoded = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '%' => encoded.push_str("%25"),
            '#' => encoded.push_str("%23"),
            '?' => encoded.push_str("%3F"),
            c => encoded.push(c),
        }
    }
    md_link_destination(&encoded).into_owned()
}

/// POSIX single-quoting: `'` becomes `'\''`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` on one line: each line break (`\r\n`, `\n`, `\r`, U+0085, U+2028, U+2029) written
/// `\n` (a backslash and `n`); borrowed when it has none. For a name put on one line of a
/// plain text (a finding's file in review-read and in the agents' prompts: a path may hold
/// a line break, and it split the entry).
pub fn on_one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(LINE_BREAKS) {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(s.replace("\r\n", "\n").replace(LINE_BREAKS, "\\n"))
}

/// `s` as literal markdown text inside a line (never at its start): each character that
/// could start markup there is backslash-escaped (so a stored name such as
/// `x](http://e/)` is not a link, and `<b>` not HTML), and each line break (`\r\n`, `\n`,
/// `\r`, U+0085, U+2028, U+2029) is shown as `\n` (so it cannot end a list item). An `_`
/// between two ASCII letters or digits is left as it is (it cannot emphasize: `snake_case` stays
/// readable in the source). For names and first lines the server puts into the documents
/// it generates, which editors mostly show as source.
pub fn md_inline(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if LINE_BREAKS.contains(&c) => {
                if c == '\r' && chars.get(i + 1) == Some(&'\n') {
                    i += 1;
                }
                out.push_str("\\\\n");
            }
            // ASCII only: CommonMark counts some characters Rust calls alphanumeric (`Ⓐ`) as
            // punctuation, around which `_` emphasizes (review XC).
            '_' if i > 0
                && chars[i - 1].is_ascii_alphanumeric()
                && chars.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric()) =>
            {
                out.push('_');
            }
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '&' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// `split_lines(s).len()`, without building the lines.
pub fn line_count(s: &str) -> usize {
    memchr::memchr_iter(b'\n', s.as_bytes()).count() + 1
}

/// JavaScript `new Date(ms).toISOString()`: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn iso_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z", sod / 3600, (sod % 3600) / 60, sod % 60)
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// For each prefix `needle[..=i]`, the length of its longest proper prefix that is also its
/// suffix (the failure function of Knuth-Morris-Pratt).
pub fn kmp_failure<T: PartialEq>(needle: &[T]) -> Vec<usize> {
    let mut fail = vec![0; needle.len()];
    let mut k = 0;
    for i in 1..needle.len() {
        while k > 0 && needle[i] != needle[k] {
            k = fail[k - 1];
        }
        if needle[i] == needle[k] {
            k += 1;
        }
        fail[i] = k;
    }
    fail
}

/// `s` on one line as a terminal shows it: each line break (`\r\n` as one), tab and other
/// control character a space, terminal escape sequences left out (colours and cursor moves,
/// `ESC [ …` or `U+009B …`; titles and links, `ESC ] …` or `U+009D …` up to `BEL`, `ESC \\`
/// or the line's end; character-set choices, `ESC ( B`; and `ESC` with one more character),
/// and the bidirectional controls too (`U+202E` turns the rest of a line around).
pub fn one_line(s: &str) -> String {
    plain_text(s, false)
}

/// [`one_line`] keeping the line breaks (each as `\n`) and tabs: for blocks an agent wrote
/// (an audit's notes, a report) shown in a terminal (a review had one set the window's
/// title and clear the screen).
pub fn plain_lines(s: &str) -> String {
    plain_text(s, true)
}

/// The bidirectional formatting characters (embeddings, overrides, isolates, marks).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// [`one_line`] (`keep_breaks` false) or [`plain_lines`].
fn plain_text(s: &str, keep_breaks: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    // Up to a final byte in @..~ (CSI's parameters and intermediates before it).
    fn csi(it: &mut std::iter::Peekable<std::str::Chars<'_>>) {
        for x in it.by_ref() {
            if ('@'..='~').contains(&x) {
                break;
            }
        }
    }
    // Up to BEL or ESC \ (left out), or a line break (kept), at most 4,096 characters.
    fn osc(it: &mut std::iter::Peekable<std::str::Chars<'_>>) {
        for _ in 0..4096 {
            match it.peek() {
                None | Some('\n' | '\r') => return,
                Some('\u{7}') => {
                    it.next();
                    return;
                }
                Some('\u{1b}') => {
                    it.next();
                    it.next_if_eq(&'\\');
                    return;
                }
                Some(_) => {
                    it.next();
                }
            }
        }
    }
    while let Some(c) = it.next() {
        match c {
            '\u{1b}' => match it.next() {
                Some('[') => csi(&mut it),
                Some(']') => osc(&mut it),
                // Intermediates, then one final character (`ESC ( B`).
                Some(' '..='/') => {
                    while it.next_if(|x| (' '..='/').contains(x)).is_some() {}
                    it.next();
                }
                _ => {}
            },
            '\u{9b}' => csi(&mut it),
            '\u{9d}' => osc(&mut it),
            '\r' => {
                it.next_if_eq(&'\n');
                out.push(if keep_breaks { '\n' } else { ' ' });
            }
            _ if keep_breaks && (c == '\t' || LINE_BREAKS.contains(&c)) => out.push(if c == '\t' { c } else { '\n' }),
            _ if c.is_control() || LINE_BREAKS.contains(&c) => out.push(' '),
            _ if is_bidi_control(c) => {}
            _ => out.push(c),
        }
    }
    out
}

/// A fixed-seed xorshift: `next(n)` is a pseudo-random number below `n`, the same sequence
/// every run (the property tests' inputs).
#[cfg(test)]
pub(crate) fn test_rng() -> impl FnMut(usize) -> usize {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_one_line_writes_every_line_break_as_backslash_n() {
        assert!(matches!(on_one_line("src/a.rs"), std::borrow::Cow::Borrowed("src/a.rs")));
        assert_eq!(on_one_line("a\r\nb\nc\rd\u{85}e\u{2028}f\u{2029}g"), "a\\nb\\nc\\nd\\ne\\nf\\ng");
    }

    #[test]
    fn a_link_destination_is_bracketed_only_when_it_must_be() {
        for (dest, want) in [
            ("/p/.forge/view/index.md", "/p/.forge/view/index.md"),
            ("forge://loop/x/status.md", "forge://loop/x/status.md"),
            ("/tmp/my proj/.forge/view/a.md", "</tmp/my proj/.forge/view/a.md>"),
            ("/tmp/a(1)/b.md", "</tmp/a(1)/b.md>"),
            ("/tmp/a<b>\\c.md", "</tmp/a\\<b\\>\\\\c.md>"),
            ("", "<>"),
        ] {
            assert_eq!(md_link_destination(dest), want, "{dest}");
        }
    }

    #[test]
    fn a_path_destination_encodes_what_a_url_reads_otherwise() {
        for (path, want) in [
            ("/p/.forge/view/index.md", "/p/.forge/view/index.md"),
            ("/p/100%/.forge/view/a.md", "/p/100%25/.forge/view/a.md"),
            ("/p/C#/x?.md", "/p/C%23/x%3F.md"),
            ("/tmp/my 50%/a.md", "</tmp/my 50%25/a.md>"),
        ] {
            assert_eq!(md_path_destination(path), want, "{path}");
        }
    }

    #[test]
    fn ranged_changes_count_positions_in_the_negotiated_units() {
        use crate::diagnostics::PositionEncoding::{Utf16, Utf8};
        // (text, from, to, new, encoding, result)
        type Row<'a> = (&'a str, (u32, u32), (u32, u32), &'a str, crate::diagnostics::PositionEncoding, &'a str);
        let table: &[Row] = &[
            ("ab\ncd", (1, 1), (1, 1), "X", Utf16, "ab\ncXd"),
            ("ab\r\ncd", (1, 0), (1, 2), "", Utf16, "ab\r\n"),
            ("ab\rcd", (1, 0), (1, 1), "Z", Utf16, "ab\rZd"),
            // A character past the line's end is the line's end; a line past the last the text's end.
            ("ab\ncd", (0, 99), (0, 99), "!", Utf16, "ab!\ncd"),
            ("ab\ncd", (9, 0), (9, 0), "\nef", Utf16, "ab\ncd\nef"),
            // Across lines.
            ("one\ntwo\nthree", (0, 1), (2, 2), "-", Utf16, "o-ree"),
            // 😀 is two UTF-16 units and four bytes; é one unit, two bytes.
            ("é😀x", (0, 3), (0, 4), "y", Utf16, "é😀y"),
            ("é😀x", (0, 6), (0, 7), "y", Utf8, "é😀y"),
            // Inside the surrogate pair: the character's start.
            ("😀x", (0, 1), (0, 1), "|", Utf16, "|😀x"),
            // End before start: an insertion at the start.
            ("abc", (0, 2), (0, 1), "-", Utf16, "ab-c"),
        ];
        for (text, from, to, new, enc, want) in table {
            let mut out = text.to_string();
            replace_range_in(&mut out, *from, *to, new, *enc);
            assert_eq!(out, *want, "{text:?} {from:?}-{to:?}");
        }
    }

    #[test]
    fn echo_quotes_short_input_whole_and_long_input_by_its_start() {
        assert_eq!(echo("a\"b"), "\"a\\\"b\"");
        let long = "é".repeat(150);
        let e = echo(&long);
        assert!(e.starts_with("\"éé") && e.ends_with("… (300 bytes in all)"), "{e}");
        assert!(e.len() < 230, "{e}");
        let cut = cut_error("x".repeat(5000));
        assert_eq!(cut.len(), 1000 + "… [cut]".len());
        assert_eq!(cut_error("short"), "short");
    }

    #[test]
    fn js_semantics() {
        assert_eq!(js_len("a😀"), 3);
        assert_eq!(split_lines("a\nb\n"), vec!["a", "b", ""]);
        assert_eq!(iso_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_millis(1_733_150_000_123), "2024-12-02T14:33:20.123Z");
    }

    #[test]
    fn js_len_counts_utf16_units() {
        let long = "ascii ".repeat(100) + "é漢😀" + &"\u{10ffff}".repeat(3);
        for s in ["", "a", "é", "漢", "😀", "a😀b", "\u{7f}\u{80}\u{7ff}\u{800}\u{ffff}\u{10000}", long.as_str()]
        {
            assert_eq!(js_len(s), s.encode_utf16().count(), "{s:?}");
        }
    }

    #[test]
    fn lines_are_those_of_split_on_newline() {
        let long = "x".repeat(100) + "\n" + &"é".repeat(50);
        for s in ["", "\n", "\n\n", "a", "a\n", "\na", "a\r\nb", "é😀\nü\n", "\r", long.as_str()] {
            assert_eq!(split_lines(s), s.split('\n').collect::<Vec<_>>(), "{s:?}");
            assert_eq!(line_count(s), s.split('\n').count(), "{s:?}");
        }
    }

    #[test]
    fn md_inline_is_literal_text_on_one_line() {
        let cases: &[(&str, &str)] = &[
            ("plain name-1.rs", "plain name-1.rs"),
            ("x](http://evil.example/).rs", "x\\](http://evil.example/).rs"),
            ("<img src=x>", "\\<img src=x\\>"),
            ("a\nb\r\nc\rd\u{2028}e", "a\\\\nb\\\\nc\\\\nd\\\\ne"),
            ("*`~&\\", "\\*\\`\\~\\&\\\\"),
            ("snake_case_1.rs", "snake_case_1.rs"),
            ("_private_.rs", "\\_private\\_.rs"),
            ("ü ok", "ü ok"),
            // Between characters CommonMark counts as punctuation it could emphasize.
            ("Ⓐ_em_Ⓐ", "Ⓐ\\_em\\_Ⓐ"),
            ("é_x", "é\\_x"),
        ];
        for (given, want) in cases {
            assert_eq!(md_inline(given), *want, "{given:?}");
        }
    }
}
