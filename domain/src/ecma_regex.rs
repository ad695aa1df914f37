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
//! What stays different: look-around and back-references are refused (the error names
//! them); `\cX` control escapes are not read.

/// The `regex` crate's spelling of an ECMAScript pattern (see the module docs).
pub fn translate(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut in_class = false;
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
            let class = match (next, in_class) {
                ('d', false) => Some("[0-9]"),
                ('D', false) => Some("[^0-9]"),
                ('w', false) => Some("[0-9A-Za-z_]"),
                ('W', false) => Some("[^0-9A-Za-z_]"),
                ('b', false) => Some(r"(?-u:\b)"),
                ('B', false) => Some(r"(?-u:\B)"),
                ('d', true) => Some("0-9"),
                ('w', true) => Some("0-9A-Za-z_"),
                _ => None,
            };
            match class {
                Some(text) => out.push_str(text),
                None => {
                    out.push(c);
                    out.push(next);
                }
            }
            class_prev = None;
            i += 2;
            continue;
        }
        if in_class {
            match c {
                ']' => {
                    in_class = false;
                    out.push(c);
                }
                '[' | '&' | '~' => out.push_str(&format!("\\{c}")),
                '-' if class_prev == Some('-') => out.push_str("\\-"),
                _ => out.push(c),
            }
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
                out.push(c);
                if chars.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
            }
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
    out
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

/// Compiles an ECMAScript search pattern ([`translate`]); the error is the engine's, on one
/// line, naming what it cannot use.
pub fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&translate(pattern))
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
            (r"[\w-]", r"[0-9A-Za-z_-]"),
            (r"[\d.]", r"[0-9.]"),
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
            (r"é+", r"é+"),
        ];
        for (js, rust) in cases {
            assert_eq!(translate(js), rust, "{js}");
        }
    }

    #[test]
    fn matches_as_ecmascript_does() {
        let m = |p: &str, s: &str| compile(p).unwrap().is_match(s);
        // ASCII classes: an Arabic-Indic digit is not \d, é is not \w.
        assert!(!m(r"^\d$", "٣"));
        assert!(m(r"^\d$", "3"));
        assert!(!m(r"^\w$", "é"));
        assert!(m(r"^\W$", "é"));
        assert!(m(r"\bx\b", "a x b"));
        assert!(m(r"éx\b", "éx"));
        // A lone brace is a literal.
        assert!(m(r"Phase{", "Phase{ 1"));
        assert!(m(r"^a{2}$", "aa"));
        // Errors name the construct.
        let e = compile(r"(?=Phase)").unwrap_err().to_string();
        assert!(e.contains("look-around"), "{e}");
        let e = compile(r"(P)\1").unwrap_err().to_string();
        assert!(e.contains("backreference"), "{e}");
    }
}
