//! Search patterns as Forge reads them (ECMAScript regular expressions, no flags), run by
//! the `regex` crate, whose matching takes linear time whatever the pattern: a pattern an
//! agent sends can never hold a server thread (an ECMAScript engine backtracks).
//!
//! [`translate`] rewrites the constructs whose meaning differs between the two syntaxes:
//!
//! - `\d`, `\w`, `\D`, `\W` are ASCII classes in ECMAScript (`[0-9]`, `[0-9A-Za-z_]` and
//!   their complements), Unicode classes in `regex`; `\b` and `\B` are ASCII word
//!   boundaries (`(?-u:\b)`, `(?-u:\B)`).
//! - A `{` that does not start a quantifier (`{n}`, `{n,}`, `{n,m}`) is a literal in
//!   ECMAScript, an error in `regex`; so is a `}` that closes none.
//! - Inside a class, `[` is a literal in ECMAScript and a nested class in `regex`, and `&&`,
//!   `--` and `~~` are set operations in `regex` only: they are escaped. `[]` (nothing) and
//!   `[^]` (any character) are spelled out.
//!
//! - Escapes: `\<`, `\/`, `\p` and every other escaped character that has no meaning of
//!   its own in ECMAScript is that character; `\xHH`, `\uHHHH`, `\0`, `\cX`, `\v` and `[\b]`
//!   are spelled for `regex`. `.` stops at `\r`, U+2028 and U+2029 too; `\s` is ECMAScript's
//!   set (the BOM included). A `-` next to a class escape inside a class is a literal.
//! - A group with inline flags (`(?i)`, `(?P<n>...)`) is refused: ECMAScript has none.
//!
//! What stays different: look-around and back-references are refused (the error names
//! them); characters outside the Basic Multilingual Plane are one character here, where
//! ECMAScript without the `u` flag sees two UTF-16 units (`^.$` matches an emoji here);
//! a quantifier after a quantifier (`a++`) is accepted here.

/// ECMAScript's `\s` (`WhiteSpace` and `LineTerminator`), as the members of a class.
const JS_SPACE: &str =
    r"\t\n\x0B\x0C\r \u{A0}\u{1680}\u{2000}-\u{200A}\u{2028}\u{2029}\u{202F}\u{205F}\u{3000}\u{FEFF}";

/// What an escape `\<c>` (and what follows it, `rest`) means, in `regex` syntax; and how
/// many characters after the backslash it used. `Err` for a named back-reference.
fn escape(c: char, rest: &[char], in_class: bool) -> Result<(String, usize), String> {
    let hex_at = |from: usize, n: usize| -> Option<u32> {
        let digits: String = rest.get(from..from + n)?.iter().collect();
        (digits.chars().count() == n && digits.chars().all(|d| d.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(&digits, 16).ok())?
    };
    let class = |members: &str, negated: bool| match (in_class, negated) {
        (false, false) => format!("[{members}]"),
        (false, true) => format!("[^{members}]"),
        // Inside a class a complement is a nested class (`regex` has them).
        (true, false) => members.to_string(),
        (true, true) => format!("[^{members}]"),
    };
    let code = |v: u32| format!("\\x{{{v:X}}}");
    Ok(match c {
        'd' => (class("0-9", false), 1),
        'D' => (class("0-9", true), 1),
        'w' => (class("0-9A-Za-z_", false), 1),
        'W' => (class("0-9A-Za-z_", true), 1),
        's' => (class(JS_SPACE, false), 1),
        'S' => (class(JS_SPACE, true), 1),
        'b' if in_class => (code(8), 1),
        'b' => (r"(?-u:\b)".to_string(), 1),
        'B' if !in_class => (r"(?-u:\B)".to_string(), 1),
        'f' => (code(0x0C), 1),
        'n' => (code(0x0A), 1),
        'r' => (code(0x0D), 1),
        't' => (code(0x09), 1),
        'v' => (code(0x0B), 1),
        // `\0` and legacy octal (`\01`, `\377`); `\08` is NUL then `8`.
        '0' => {
            let octal: String = rest.iter().take(2).take_while(|d| ('0'..='7').contains(d)).collect();
            let value = u32::from_str_radix(&format!("0{octal}"), 8).unwrap_or(0);
            (code(value), 1 + octal.len())
        }
        'x' => match hex_at(0, 2) {
            Some(v) => (code(v), 3),
            None => ("x".to_string(), 1),
        },
        'u' => match hex_at(0, 4) {
            // A surrogate pair written as two escapes is one character.
            Some(hi @ 0xD800..=0xDBFF) if rest.get(4) == Some(&'\\') && rest.get(5) == Some(&'u') => {
                match hex_at(6, 4) {
                    // A quantifier after the pair applies to its second half alone in
                    // ECMAScript, which has no spelling here.
                    Some(0xDC00..=0xDFFF)
                        if !in_class
                            && (rest.get(10).is_some_and(|q| matches!(q, '*' | '+' | '?'))
                                || quantifier_len(&rest[10.min(rest.len())..]).is_some()) =>
                    {
                        // As the caller wrote them: the pair and its quantifier.
                        let pair: String = rest[..10].iter().collect();
                        let len = match rest[10] {
                            '*' | '+' | '?' => 1,
                            _ => quantifier_len(&rest[10..]).unwrap_or(1),
                        };
                        let lazy = usize::from(rest.get(10 + len) == Some(&'?'));
                        let q: String = rest[10..10 + len + lazy].iter().collect();
                        return Err(format!("a quantifier after a surrogate pair (\\u{pair}{q}) repeats only its second half in ECMAScript, which cannot be searched for here; put the pair in a group: (?:\\u{pair}){q}"));
                    }
                    Some(lo @ 0xDC00..=0xDFFF) => (code(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)), 11),
                    _ => (format!("\\u{{{hi:X}}}"), 5),
                }
            }
            // A lone surrogate half has no `regex` spelling: left for the engine to refuse.
            Some(v) if (0xD800..0xE000).contains(&v) => (format!("\\u{{{v:X}}}"), 5),
            Some(v) => (code(v), 5),
            None => ("u".to_string(), 1),
        },
        'c' => match rest.first() {
            Some(l) if l.is_ascii_alphabetic() || (in_class && (l.is_ascii_digit() || *l == '_')) => {
                (code(*l as u32 % 32), 2)
            }
            // Not a control escape: the backslash itself, then `c`.
            _ => (r"\\c".to_string(), 1),
        },
        'k' if rest.first() == Some(&'<') => {
            return Err("back-references (\\k<name>) are not supported: no linear-time engine runs them".to_string())
        }
        // Numbered back-references: left for the engine to refuse, naming them.
        '1'..='9' if !in_class => (format!("\\{c}"), 1),
        // Any other escaped character is that character (`\<`, `\/`, `\é`, `\p`, `\z`, `\k`).
        other => (regex::escape(other.encode_utf8(&mut [0; 4])), 1),
    })
}

/// One member of a class as written: a character or an escape, as `regex` text; whether
/// it is a class escape (`\d`, `\w`, `\s` and their complements), which ends no range.
struct Atom {
    text: String,
    class_escape: bool,
    dash: bool,
}

/// The class that starts at `chars[start]` (a `[`): its `regex` spelling and the index after
/// its `]`; `None` when it is not closed (left for the engine to refuse).
///
/// ECMAScript's class grammar (with the web-compatibility rules): `a-b` is a range unless
/// one end is a class escape, where it is the two members and a `-`; a `-` first, last or
/// right after a range is a member.
fn class(chars: &[char], start: usize) -> Result<Option<(String, usize)>, String> {
    let mut i = start + 1;
    let negated = chars.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut atoms: Vec<Atom> = vec![];
    loop {
        let Some(&c) = chars.get(i) else { return Ok(None) };
        match c {
            ']' => break,
            '\\' => {
                let Some(&next) = chars.get(i + 1) else { return Ok(None) };
                let (text, used) = escape(next, &chars[i + 2..], true)?;
                atoms.push(Atom { text, class_escape: matches!(next, 'd' | 'D' | 'w' | 'W' | 's' | 'S'), dash: false });
                i += 1 + used;
            }
            _ => {
                let text = if matches!(c, '[' | ']' | '&' | '~' | '-' | '^' | '\\') {
                    format!("\\{c}")
                } else {
                    c.to_string()
                };
                atoms.push(Atom { text, class_escape: false, dash: c == '-' });
                i += 1;
            }
        }
    }
    let mut out = String::from(if negated { "[^" } else { "[" });
    let mut k = 0;
    while k < atoms.len() {
        let a = &atoms[k];
        let range = atoms.get(k + 1).is_some_and(|d| d.dash) && k + 2 < atoms.len() && !a.dash;
        if range {
            let b = &atoms[k + 2];
            out.push_str(&a.text);
            // A range between two members; next to a class escape, a literal `-`.
            out.push_str(if a.class_escape || b.class_escape { "\\-" } else { "-" });
            out.push_str(&b.text);
            k += 3;
        } else {
            out.push_str(&a.text);
            k += 1;
        }
    }
    out.push(']');
    Ok(Some((out, i + 1)))
}

/// The `regex` crate's spelling of an ECMAScript pattern (see the module docs), or why it
/// has none: a group with flags (`(?i)`, `(?P<n>...)`), which ECMAScript does not have, or
/// a named back-reference.
pub fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                let Some(&next) = chars.get(i + 1) else {
                    // A trailing backslash: left for the engine to refuse.
                    out.push(c);
                    break;
                };
                let (text, used) = escape(next, &chars[i + 2..], false)?;
                out.push_str(&text);
                i += 1 + used;
                continue;
            }
            // `[]` matches nothing and `[^]` any character in ECMAScript (a `]` right after
            // the bracket closes the class); `regex` reads a literal `]` there.
            '[' if chars.get(i + 1) == Some(&']') => {
                out.push_str(r"[^\s\S]");
                i += 2;
                continue;
            }
            '[' if chars.get(i + 1) == Some(&'^') && chars.get(i + 2) == Some(&']') => {
                out.push_str(r"[\s\S]");
                i += 3;
                continue;
            }
            '[' => match class(&chars, i)? {
                Some((text, next)) => {
                    out.push_str(&text);
                    i = next;
                    continue;
                }
                // Not closed: the rest as written, for the engine to refuse.
                None => {
                    out.extend(&chars[i..]);
                    break;
                }
            },
            // A group with flags, or `(?P<`: `regex` syntax only.
            '(' if chars.get(i + 1) == Some(&'?')
                && chars.get(i + 2).is_some_and(|f| f.is_ascii_alphabetic() || *f == '-') =>
            {
                return Err(format!(
                    "inline flags such as (?i) and (?P<name>...) are not ECMAScript syntax (at character {})",
                    i + 1
                ));
            }
            // ECMAScript's `.` stops at every line terminator, not only `\n`.
            '.' => out.push_str(r"[^\n\r\u{2028}\u{2029}]"),
            '{' if quantifier_len(&chars[i..]).is_none() => out.push_str("\\{"),
            '{' => {
                let n = quantifier_len(&chars[i..]).unwrap_or(1);
                out.extend(&chars[i..i + n]);
                i += n;
                continue;
            }
            '}' => out.push_str("\\}"),
            _ => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// The length of the quantifier `{n}`, `{n,}` or `{n,m}` at the start of `s`, if it is one.
fn quantifier_len(s: &[char]) -> Option<usize> {
    let mut i = 1;
    let digits = |i: &mut usize| {
        let start = *i;
        while s.get(*i).is_some_and(char::is_ascii_digit) {
            *i += 1;
        }
        *i > start
    };
    if !digits(&mut i) {
        return None;
    }
    if s.get(i) == Some(&',') {
        i += 1;
        digits(&mut i);
    }
    (s.get(i) == Some(&'}')).then_some(i + 1)
}

/// Compiles an ECMAScript search pattern ([`translate`]); the error says on one line what
/// cannot be used.
pub fn compile(pattern: &str) -> Result<regex::Regex, String> {
    let translated = translate(pattern)?;
    regex::Regex::new(&translated).map_err(|e| one_line(&e))
}

/// The engine's error on one line: its header and its reason (the crate's message spans a
/// caret diagram over several lines).
pub fn one_line(e: &regex::Error) -> String {
    let full = e.to_string();
    let first = full.lines().next().unwrap_or("").trim().to_string();
    let reason = full.lines().map(str::trim).find_map(|l| l.strip_prefix("error:")).map(str::trim);
    match reason {
        Some(reason) if !reason.is_empty() && first != reason => {
            if first.is_empty() {
                reason.to_string()
            } else {
                format!("{first} {reason}")
            }
        }
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translations() {
        let cases = [
            (r"^\w+$", r"^[0-9A-Za-z_]+$"),
            (r"\d\D\W", r"[0-9][^0-9][^0-9A-Za-z_]"),
            (r"\bword\B", r"(?-u:\b)word(?-u:\B)"),
            (r"[\w-]", r"[0-9A-Za-z_\-]"),
            (r"[\\-\d]", r"[\\\-0-9]"),
            (r"[\d-a-z]", r"[0-9\-a\-z]"),
            (r"[a-c-e]", r"[a-c\-e]"),
            (r"[\d.]", r"[0-9.]"),
            (r"[\w-.]", r"[0-9A-Za-z_\-.]"),
            (r"[.-\w]", r"[.\-0-9A-Za-z_]"),
            (r"[^\W_]", r"[^[^0-9A-Za-z_]_]"),
            (r"Phase{", r"Phase\{"),
            (r"a{2}b{1,}c{1,3}", r"a{2}b{1,}c{1,3}"),
            (r"a{x}", r"a\{x\}"),
            (r"[a[b]", r"[a\[b]"),
            (r"[a&&b]", r"[a\&\&b]"),
            (r"[]a", r"[^\s\S]a"),
            (r"[^]a", r"[\s\S]a"),
            (r"\\d", r"\\d"),
            (r"\.", r"\."),
            (r"Vec\<T\>", r"Vec<T>"),
            (r"\x41\u00e9\0", r"\x{41}\x{E9}\x{0}"),
            (r"\01\08", r"\x{1}\x{0}8"),
            (r"\uD83D\uDE00", r"\x{1F600}"),
            (r"[\c1]", r"[\x{11}]"),
            (r"\k", r"k"),
            (r"\xZ", r"xZ"),
            (r"[\b]", r"[\x{8}]"),
            (r"é+", r"é+"),
        ];
        for (js, rust) in cases {
            assert_eq!(translate(js).unwrap(), rust, "{js}");
        }
    }

    #[test]
    fn matches_as_ecmascript_does() {
        let m = |p: &str, s: &str| compile(p).unwrap_or_else(|e| panic!("{p}: {e}")).is_match(s);
        // ASCII classes: an Arabic-Indic digit is not \d, é is not \w.
        assert!(!m(r"^\d$", "٣"));
        assert!(m(r"^\d$", "3"));
        assert!(!m(r"^\w$", "é"));
        assert!(m(r"^\W$", "é"));
        assert!(!m(r"^[^\W_]+$", "é"));
        assert!(m(r"^[^\W_]+$", "ab1"));
        assert!(m(r"\bx\b", "a x b"));
        assert!(m(r"éx\b", "éx"));
        // A `-` next to a class escape is a literal.
        assert!(m(r"^[\w-.]+$", "a-b.c"));
        assert!(!m(r"^[\w-z]$", "`"));
        // A lone brace is a literal; escaped punctuation is the character.
        assert!(m(r"Phase{", "Phase{ 1"));
        assert!(m(r"^a{2}$", "aa"));
        assert!(m(r"Vec\<String\>", "Vec<String>"));
        assert!(m(r"\p{L}", "p{L}"));
        assert!(!m(r"\p{L}", "a"));
        // `.` stops at \r; `\s` knows the BOM.
        assert!(!m(r"^.*$", "foo\r"));
        assert!(m(r"^\s*#", "\u{FEFF}# Title"));
        // Errors name the construct.
        let e = compile(r"(?=Phase)").unwrap_err();
        assert!(e.contains("look-around"), "{e}");
        let e = compile(r"(P)\1").unwrap_err();
        assert!(e.contains("backreference"), "{e}");
        let e = compile(r"(?i)phase").unwrap_err();
        assert!(e.contains("(?i)"), "{e}");
        let e = compile(r"(?<n>a)\k<n>").unwrap_err();
        assert!(e.contains("back-references"), "{e}");
        // Ranges next to class escapes, and what JS reads after a range.
        assert!(m(r"^[\\-\d]+$", "\\-5"));
        assert!(!m(r"^[\d-a-z]$", "b"));
        assert!(m(r"^[\d-a-z]$", "z"));
        assert!(m(r"^\01$", "\u{1}"));
        assert!(m(r"^\uD83D\uDE00$", "😀"));
        assert!(m(r"^(?:\uD83D\uDE00)+$", "😀😀"));
        let e = compile(r"\uD83D\uDE00*").unwrap_err();
        assert!(e.contains("surrogate pair"), "{e}");
        // The message quotes the caller's pair and quantifier.
        for (pattern, quoted, grouped) in [
            (r"x\uD83D\uDE00+", r"(\uD83D\uDE00+)", r"(?:\uD83D\uDE00)+"),
            (r"\uD83C\uDF89{2,3}?", r"(\uD83C\uDF89{2,3}?)", r"(?:\uD83C\uDF89){2,3}?"),
        ] {
            let e = compile(pattern).unwrap_err();
            assert!(e.contains(quoted) && e.contains(grouped), "{pattern}: {e}");
        }
    }
}
