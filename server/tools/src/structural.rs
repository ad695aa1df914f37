//! What `forge.ast-grep-search` and `forge.ast-grep-replace` share: the languages forge
//! offers (a subset of `ast-grep-language`, compiled with only these grammars), the
//! pattern check and the gitignore-aware walk of a language's files under a start path.

use std::path::{Path, PathBuf};

use ast_grep_core::tree_sitter::LanguageExt;
use ast_grep_core::Pattern;
use ast_grep_language::SupportLang;
use forge_protocol::ToolError;

/// (names accepted, the grammar, file extensions searched). Only these grammars are
/// compiled in (the `tree-sitter-*` features of `ast-grep-language` in Cargo.toml); the
/// other `SupportLang` variants would panic, so they are never reachable from input.
const LANGS: &[(&[&str], SupportLang, &[&str])] = &[
    (&["rust", "rs"], SupportLang::Rust, &["rs"]),
    (&["python", "py"], SupportLang::Python, &["py", "pyi"]),
    (&["typescript", "ts"], SupportLang::TypeScript, &["ts", "mts", "cts"]),
    (&["tsx"], SupportLang::Tsx, &["tsx"]),
    (&["javascript", "js", "jsx"], SupportLang::JavaScript, &["js", "mjs", "cjs", "jsx"]),
    (&["go", "golang"], SupportLang::Go, &["go"]),
    (&["java"], SupportLang::Java, &["java"]),
    (&["c"], SupportLang::C, &["c", "h"]),
    (&["cpp", "c++", "cc", "cxx"], SupportLang::Cpp, &["cpp", "cc", "cxx", "c++", "hpp", "hh", "hxx", "h++"]),
];

/// The language named by `lang`, with its file extensions, or -32602 naming the
/// supported ones.
pub fn language(lang: &str) -> Result<(SupportLang, &'static [&'static str]), ToolError> {
    let l = lang.trim().to_ascii_lowercase();
    LANGS.iter().find(|(names, _, _)| names.contains(&l.as_str())).map(|(_, sl, ext)| (*sl, *ext)).ok_or_else(|| {
        let names: Vec<&str> = LANGS.iter().map(|(n, _, _)| n[0]).collect();
        ToolError::invalid_params(format!(
            "invalid argument `lang`: {lang:?} is not supported; supported: {}",
            names.join(", ")
        ))
    })
}

/// The deepest syntax tree a pattern may have. ast-grep builds and matches a pattern by
/// recursion over its tree: a pattern of a few thousand nested brackets overflowed the
/// stack of the thread it ran on and aborted the process (the server, with every client
/// on it). Patterns people and agents write are a few dozen levels deep.
pub const MAX_PATTERN_DEPTH: usize = 256;

/// The depth of `src`'s syntax tree in `lang`, counted without recursion, up to one past
/// [`MAX_PATTERN_DEPTH`] (tree-sitter parses and frees a tree without recursion). The
/// text measured is the one ast-grep parses: `$A` rewritten to the language's
/// metavariable character first (in Rust or Go `$A.$A.…` is a flat error tree, its
/// rewritten `µA.µA.…` a chain thousands of levels deep).
fn pattern_depth(src: &str, lang: SupportLang) -> usize {
    let tree = lang.ast_grep(ast_grep_core::Language::pre_process_pattern(&lang, src));
    let mut stack = vec![(tree.root(), 1usize)];
    let mut deepest = 0;
    while let Some((node, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        if deepest > MAX_PATTERN_DEPTH {
            break;
        }
        stack.extend(node.children().map(|c| (c, depth + 1)));
    }
    deepest
}

/// The compiled pattern. An empty one does not match the input schema (-32602); one that
/// does not parse as the language, or nests deeper than [`MAX_PATTERN_DEPTH`], is
/// semantically invalid (1006, as a bad regex is).
pub fn pattern(src: &str, lang: SupportLang) -> Result<Pattern, ToolError> {
    if src.trim().is_empty() {
        return Err(ToolError::invalid_params("invalid argument `pattern`: must not be empty"));
    }
    if pattern_depth(src, lang) > MAX_PATTERN_DEPTH {
        return Err(ToolError::invalid(format!(
            "invalid argument `pattern`: its {} syntax tree nests more than {MAX_PATTERN_DEPTH} levels deep; write a shallower pattern, with $NAME or $$$ for the nested parts",
            lang_name(lang)
        )));
    }
    let pattern = Pattern::try_new(src, lang)
        .map_err(|e| ToolError::invalid(format!("invalid argument `pattern` for {}: {e}", lang_name(lang))))?;
    // The grammar recovers from what it cannot parse with ERROR nodes; a pattern that is
    // one matches nothing useful: say so instead of "no matches".
    if pattern.has_error() {
        return Err(ToolError::invalid(format!(
            "invalid argument `pattern`: it does not parse as {}; write it as code of the language, with $NAME or $$$ for what varies",
            lang_name(lang)
        )));
    }
    Ok(pattern)
}

/// The canonical name of a language.
pub fn lang_name(lang: SupportLang) -> &'static str {
    LANGS.iter().find(|(_, sl, _)| *sl == lang).map(|(n, _, _)| n[0]).unwrap_or("?")
}

/// The files under `start` (a file or a directory) with one of `exts`, gitignore-aware,
/// every `.git` skipped, in a stable order. A file named directly is searched whatever its
/// extension.
pub fn files(root: &Path, start: &Path, exts: &[&str]) -> Vec<PathBuf> {
    if start.is_file() {
        return vec![start.to_path_buf()];
    }
    let mut out = vec![];
    // Every `.git` skipped, nested repositories' included (a rewrite must never reach a
    // git directory).
    let walk = crate::files::walk(root, start);
    for entry in walk.flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()).is_some_and(|e| exts.contains(&e)) {
            out.push(path.to_path_buf());
        }
    }
    out.sort();
    out
}

/// The largest file the structural tools parse: 1 MiB. A syntax tree takes about 90 times
/// its file's size in memory (a 24 MB bundle took 2 GB and 30 s), and the tools run in
/// the server's process; source files a person writes are far smaller, generated bundles
/// are not worth a structural search. Larger files are reported as not searched.
pub const MAX_PARSED_BYTES: u64 = 1 << 20;

/// The text of `path` for parsing, or why it is not parsed (not UTF-8, over
/// [`MAX_PARSED_BYTES`], unreadable).
pub fn source(root: &Path, path: &Path) -> Result<String, String> {
    crate::files::read_utf8_within(root, path, MAX_PARSED_BYTES).map_err(|e| {
        if e.contains("over the limit") {
            format!("{e}: the structural tools parse files of up to 1 MiB")
        } else {
            e
        }
    })
}

/// The `not searched: …` line of the structural tools (at most ten files named).
pub fn not_searched(skipped: &[String]) -> String {
    format!("not searched: {}", crate::files::some_of(skipped))
}

/// A match: its 1-based line, its byte range and text.
pub struct Hit {
    pub line: usize,
    pub start: usize,
    pub end: usize,
    pub text: String,
    /// The replacement, when a rewrite was given.
    pub replacement: Option<String>,
}

/// The matches of `pat` in `src` (outermost first; a match inside an earlier one is
/// dropped so that rewrites never overlap), with each replacement when `rewrite` is set.
pub fn matches(src: &str, lang: SupportLang, pat: &Pattern, rewrite: Option<&str>) -> Vec<Hit> {
    let mut unbounded = usize::MAX;
    matches_within(src, lang, pat, rewrite, &mut unbounded).unwrap_or_default()
}

/// [`matches`], taking each replacement's length from `budget` (bytes); `None`, as soon as
/// the replacements would take more than is left: a short pattern's matches multiply a
/// long rewrite (a review's 100,000 matches of `1` with a 10,000-byte rewrite held 2.9 GB).
pub fn matches_within(
    src: &str,
    lang: SupportLang,
    pat: &Pattern,
    rewrite: Option<&str>,
    budget: &mut usize,
) -> Option<Vec<Hit>> {
    let grep = lang.ast_grep(src);
    let root = grep.root();
    let mut out: Vec<Hit> = vec![];
    // What a replacement can hold at most, before it is made: the template and, for each
    // metavariable, the whole match's text; every line of it indented by at most the
    // template's deepest indentation plus that of the match's own line (ast-grep indents the
    // replacement to where the match stands). A metavariable used many times multiplies the
    // match (a review's `$A` written 300 times peaked at 699 MB before the budget saw it).
    let (vars, indent, template_lines) = rewrite.map_or((0, 0, 0), |rw| {
        let deepest = rw.lines().map(|l| l.len() - l.trim_start().len()).max().unwrap_or(0);
        // A metavariable starts `$` then a capital, `_` or `$` (`$$$ARGS` counts three):
        // a literal `$this` is none.
        let b = rw.as_bytes();
        let starts =
            |i: usize| b[i] == b'$' && b.get(i + 1).is_some_and(|c| c.is_ascii_uppercase() || matches!(c, b'_' | b'$'));
        ((0..b.len()).filter(|&i| starts(i)).count(), deepest, rw.lines().count().max(1))
    });
    for m in root.find_all(pat) {
        let r = m.range();
        if out.last().is_some_and(|h| r.start < h.end) {
            continue;
        }
        if let Some(rw) = rewrite {
            let text = &src[r.start..r.end];
            let before = &src[src[..r.start].rfind('\n').map_or(0, |i| i + 1)..r.start];
            let own = before.len() - before.trim_start().len();
            let lines = text.matches('\n').count() + 1;
            let per_line = indent.saturating_add(own);
            let most = vars
                .saturating_mul(text.len())
                .saturating_add(template_lines.saturating_add(vars.saturating_mul(lines)).saturating_mul(per_line))
                .saturating_add(rw.len());
            if most > *budget {
                return None;
            }
        }
        let replacement = rewrite.map(|rw| {
            let edit = m.replace_by(rw);
            String::from_utf8(edit.inserted_text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        });
        let taken = replacement.as_ref().map_or(0, String::len);
        *budget = budget.checked_sub(taken)?;
        out.push(Hit {
            line: m.start_pos().line() + 1,
            start: r.start,
            end: r.end,
            text: m.text().into_owned(),
            replacement,
        });
    }
    Some(out)
}

/// `src` with every hit replaced by its replacement.
///
/// A file whose lines end mostly in CRLF gets its replacements' line breaks as CRLF too (a
/// rewrite template is written with `\n`).
pub fn rewritten(src: &str, hits: &[Hit]) -> String {
    let crlf = src.matches("\r\n").count();
    let crlf_file = crlf > 0 && crlf * 2 >= src.matches('\n').count();
    let mut out = String::with_capacity(src.len());
    let mut at = 0;
    for h in hits {
        out.push_str(&src[at..h.start]);
        let text = h.replacement.as_deref().unwrap_or(&h.text);
        if crlf_file && text.contains('\n') {
            out.push_str(&text.replace("\r\n", "\n").replace('\n', "\r\n"));
        } else {
            out.push_str(text);
        }
        at = h.end;
    }
    out.push_str(&src[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacements_take_the_files_line_breaks() {
        let hit = |start, end, r: &str| Hit { line: 1, start, end, text: String::new(), replacement: Some(r.into()) };
        let crlf = "a();\r\nb();\r\n";
        assert_eq!(rewritten(crlf, &[hit(0, 3, "x(\n  1\n)")]), "x(\r\n  1\r\n);\r\nb();\r\n");
        let lf = "a();\nb();\n";
        assert_eq!(rewritten(lf, &[hit(0, 3, "x(\n  1\n)")]), "x(\n  1\n);\nb();\n");
    }

    /// The replacements are taken from the budget as they are made; one that does not fit
    /// ends the matching.
    #[test]
    fn replacements_stop_at_the_budget() {
        let (lang, _) = language("python").unwrap();
        let pat = pattern("1", lang).unwrap();
        let src = "x = [1, 1, 1, 1]\n";
        let mut budget = 10;
        let hits = matches_within(src, lang, &pat, Some("22"), &mut budget).unwrap();
        assert_eq!((hits.len(), budget), (4, 2));
        let mut budget = 7;
        assert!(matches_within(src, lang, &pat, Some("22"), &mut budget).is_none());
        // A metavariable written many times multiplies the match: refused before the
        // replacement is made, by what it could hold, with nothing taken.
        let call = format!("f({})\n", "a".repeat(1000));
        let f = pattern("f($A)", lang).unwrap();
        let mut budget = 50_000;
        assert!(matches_within(&call, lang, &f, Some(&"$A".repeat(100)), &mut budget).is_none());
        assert_eq!(budget, 50_000);
        let mut budget = 200_000;
        let hits = matches_within(&call, lang, &f, Some(&"$A".repeat(100)), &mut budget).unwrap();
        assert_eq!(hits[0].replacement.as_ref().map(String::len), Some(100_000));
        assert_eq!(budget, 100_000);
        // The match's own indentation counts: every line of the replacement is indented to
        // where the match stands.
        let deep = format!("{}f([\n{}])\n", " ".repeat(500), "\n".repeat(2000));
        let js = language("javascript").unwrap().0;
        let fj = pattern("f($A)", js).unwrap();
        let mut budget = 900_000;
        assert!(matches_within(&deep, js, &fj, Some("g($A, $A)"), &mut budget).is_none(), "2 x 2,000 lines x 500");
        let mut budget = 3_000_000;
        let hits = matches_within(&deep, js, &fj, Some("g($A, $A)"), &mut budget).unwrap();
        assert!(hits[0].replacement.as_ref().is_some_and(|r| r.len() < 3_000_000));
        // A literal `$this` is no metavariable.
        let mut budget = 500;
        let hits = matches_within(&call, lang, &f, Some("$this.g()"), &mut budget).expect("not counted as the match");
        assert_eq!(hits[0].replacement.as_deref(), Some("$this.g()"));
        // Without a rewrite nothing is taken.
        let mut budget = 0;
        assert_eq!(matches_within(src, lang, &pat, None, &mut budget).map(|h| h.len()), Some(4));
    }

    /// Deep patterns are refused before ast-grep recurses over them: without the check,
    /// each of these overflowed the test thread's stack and aborted the test binary.
    #[test]
    fn patterns_nested_too_deep_are_refused_not_a_stack_overflow() {
        let n = 20_000;
        let cases = [
            ("javascript", format!("{}{}", "[".repeat(n), "]".repeat(n))),
            ("python", format!("{}a{}", "(".repeat(n), ")".repeat(n))),
            ("rust", format!("{}x{}", "{".repeat(n), "}".repeat(n))),
            // Deep only once `$A` is rewritten to the metavariable character (review Y).
            ("rust", vec!["$A"; 5_000].join(".")),
            ("go", vec!["$A"; 5_000].join(".")),
            ("c", vec!["$A"; 5_000].join("+")),
        ];
        for (name, src) in cases {
            let lang = language(name).unwrap().0;
            let e = pattern(&src, lang).err().unwrap_or_else(|| panic!("{name}: accepted"));
            assert_eq!(e.kind.code(), 1006, "{name}");
            assert!(e.message.contains("nests more than 256 levels deep"), "{name}: {}", e.message);
        }
        // Nesting a person writes is taken.
        let js = language("javascript").unwrap().0;
        assert!(pattern(&format!("f({}$A{})", "[".repeat(40), "]".repeat(40)), js).is_ok());
    }

    #[test]
    fn patterns_that_do_not_parse_are_refused() {
        let ok = [
            ("console.log($$$ARGS)", "js"),
            ("foo($A)", "ts"),
            ("fn $F() {}", "rust"),
            ("$A.unwrap()", "rust"),
            ("foo($A)", "c"),
            ("def $F($$$ARGS): $$$BODY", "python"),
            ("if err != nil { $$$ }", "go"),
            ("System.out.println($A)", "java"),
            ("std::move($A)", "cpp"),
        ];
        for (src, lang) in ok {
            let (l, _) = language(lang).unwrap();
            assert!(pattern(src, l).is_ok(), "{lang}: {src}: {:?}", pattern(src, l).err());
        }
        for (src, lang) in [("{{{", "js"), ("fn (", "rust"), ("def (:", "python")] {
            let (l, _) = language(lang).unwrap();
            let e = pattern(src, l).err().unwrap_or_else(|| panic!("{lang}: {src} accepted"));
            assert_eq!(e.kind.code(), 1006, "{e:?}");
            assert!(e.message.contains("does not parse"), "{}", e.message);
        }
    }
}
