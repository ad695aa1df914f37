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
/// many characters after the backslash it used.
fn escape(c: char, rest: &[char], in_class: bool) -> (String, usize) {
    let hex = |n: usize| -> Option<u32> {
        let digits: String = rest.get(..n)?.iter().collect();
        (digits.len() == n && digits.chars().all(|d| d.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(&digits, 16).ok())?
    };
    let class = |members: &str, negated: bool| match (in_class, negated) {
        (false, false) => format!("[{members}]"),
        (false, true) => format!("[^{members}]"),
        // Inside a class a complement is a nested class (`regex` has them).
        (true, false) => members.to_string(),
        (true, true) => format!("[^{members}]"),
    };
    match c {
        'd' => (class("0-9", false), 1),
        'D' => (class("0-9", true), 1),
        'w' => (class("0-9A-Za-z_", false), 1),
        'W' => (class("0-9A-Za-z_", true), 1),
        's' => (class(JS_SPACE, false), 1),
        'S' => (class(JS_SPACE, true), 1),
        'b' if in_class => (r"\x08".to_string(), 1),
        'b' => (r"(?-u:\b)".to_string(), 1),
        'B' if !in_class => (r"(?-u:\B)".to_string(), 1),
        'f' | 'n' | 'r' | 't' => (format!("\\{c}"), 1),
        'v' => (r"\x0B".to_string(), 1),
        '0' if !rest.first().is_some_and(char::is_ascii_digit) => (r"\x00".to_string(), 1),
        'x' => match hex(2) {
            Some(v) => (format!("\\x{{{v:X}}}"), 3),
            None => ("x".to_string(), 1),
        },
        'u' => match hex(4) {
            // A lone surrogate half has no `regex` spelling: left for the engine to refuse.
            Some(v) if (0xD800..0xE000).contains(&v) => (format!("\\u{{{v:X}}}"), 5),
            Some(v) => (format!("\\x{{{v:X}}}"), 5),
            None => ("u".to_string(), 1),
        },
        'c' => match rest.first().filter(|l| l.is_ascii_alphabetic()) {
            Some(l) => (format!("\\x{{{:X}}}", (*l as u32) % 32), 2),
            None => (r"\\c".to_string(), 1),
        },
        // Back-references (`\1`, `\k<name>`): left for the engine to refuse, naming them.
        '1'..='9' | 'k' => (format!("\\{c}"), 1),
        // Any other escaped character is that character (`\<`, `\/`, `\é`, `\p`, `\z`).
        other => (regex_syntax_escape(other), 1),
    }
}

/// `c` as a literal in `regex` syntax.
fn regex_syntax_escape(c: char) -> String {
    regex::escape(c.encode_utf8(&mut [0; 4]))
}

/// The `regex` crate's spelling of an ECMAScript pattern (see the module docs), or why it
/// has none: a group with flags (`(?i)`, `(?P<n>...)`), which ECMAScript does not have.
pub fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut in_class = false;
    // Inside a class: the previous member was a class escape, or a `-` follows one (a `-`
    // next to a class escape is a literal in ECMAScript, a bad range in `regex`).
    let mut after_class_escape = false;
    // The previous character inside the current class (for `--`, `&&`, `~~`).
    let mut class_prev: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            let Some(&next) = chars.get(i + 1) else {
                // A trailing backslash: left for the engine to refuse.
                out.push(c);
                break;
            };
            let (text, used) = escape(next, &chars[i + 2..], in_class);
            let is_class_escape = matches!(next, 'd' | 'D' | 'w' | 'W' | 's' | 'S');
            if in_class && is_class_escape && out.ends_with('-') && !out.ends_with("\\-") {
                out.pop();
                out.push_str("\\-");
            }
            out.push_str(&text);
            after_class_escape = in_class && is_class_escape;
            class_prev = None;
            i += 1 + used;
            continue;
        }
        if in_class {
            match c {
                ']' => {
                    in_class = false;
                    out.push(c);
                }
                '[' | '&' | '~' => out.push_str(&format!("\\{c}")),
                '-' if class_prev == Some('-') || after_class_escape => out.push_str("\\-"),
                _ => out.push(c),
            }
            after_class_escape = false;
            class_prev = Some(c);
            i += 1;
            continue;
        }
        match c {
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
            '[' => {
                in_class = true;
                class_prev = None;
                after_class_escape = false;
                out.push(c);
                if chars.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
            }
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
            (r"[\d.]", r"[0-9.]"),
            (r"[\w-.]", r"[0-9A-Za-z_\-.]"),
            (r"[.-\w]", r"[.\-0-9A-Za-z_]"),
            (r"[^\W_]", r"[^[^0-9A-Za-z_]_]"),
            (r"Phase{", r"Phase\{"),
            (r"a{2}b{1,}c{1,3}", r"a{2}b{1,}c{1,3}"),
            (r"a{x}", r"a\{x\}"),
            (r"[a[b]", r"[a\[b]"),
            (r"[a&&b]", r"[a\&\&b]"),
            (r"[a--b]", r"[a-\-b]"),
            (r"[]a", r"[^\s\S]a"),
            (r"[^]a", r"[\s\S]a"),
            (r"\\d", r"\\d"),
            (r"\.", r"\."),
            (r"Vec\<T\>", r"Vec<T>"),
            (r"\x41\u00e9\0", r"\x{41}\x{E9}\x00"),
            (r"\xZ", r"xZ"),
            (r"[\b]", r"[\x08]"),
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
    }
}
