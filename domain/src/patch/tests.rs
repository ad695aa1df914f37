//! Table-driven tests of the patch module: malformed patches, every rescue rule, the
//! refusals, multi-file plans and paths.

use super::*;
use std::collections::HashMap;

fn wrap(body: &str) -> String {
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

fn run_with(patch: &str, root: Option<&str>, files: &[(&str, &str)]) -> Result<PatchPlan, PatchError> {
    let map: HashMap<String, String> = files.iter().map(|(p, c)| (p.to_string(), c.to_string())).collect();
    apply_patch(patch, root, |p| Ok::<_, String>(map.get(p).cloned()))
}

fn run(patch: &str, files: &[(&str, &str)]) -> Result<PatchPlan, PatchError> {
    run_with(patch, None, files)
}

/// Update `f.txt` (holding `file`) with `body` (the part after the Update File line).
fn update(file: &str, body: &str) -> Result<PatchPlan, PatchError> {
    run(&wrap(&format!("*** Update File: f.txt\n{body}")), &[("f.txt", file)])
}

fn updated(plan: &PatchPlan) -> &str {
    match &plan.changes[..] {
        [FileChange::Update { content, .. }] => content,
        other => panic!("expected one update, got {other:?}"),
    }
}

#[test]
fn malformed_patches_are_refused_with_their_line() {
    // (case, patch, line, part of the message)
    let cases: &[(&str, &str, usize, &str)] = &[
        ("empty", "", 1, "empty"),
        ("blank only", "\n  \n", 1, "empty"),
        ("missing begin", "*** Update File: a\n@@\n-x\n+y\n*** End Patch\n", 1, "must start with '*** Begin Patch'"),
        ("missing end", "*** Begin Patch\n*** Delete File: a\n", 2, "missing '*** End Patch'"),
        ("text after end", "*** Begin Patch\n*** Delete File: a\n*** End Patch\nmore\n", 4, "text after"),
        (
            "two patches in one",
            "*** Begin Patch\n*** Delete File: a\n*** End Patch\n*** Begin Patch\n*** Delete File: b\n*** End Patch\n",
            4,
            "text after",
        ),
        ("only the begin line", "*** Begin Patch\n", 1, "missing '*** End Patch'"),
        ("no operations", "*** Begin Patch\n\n*** End Patch\n", 1, "no file operations"),
        ("unknown header", "*** Begin Patch\n*** Rename File: a\n*** End Patch\n", 2, "unknown header"),
        (
            "unknown header inside update",
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n*** Copy File: b\n*** End Patch\n",
            6,
            "unknown header",
        ),
        ("stray text before a header", "*** Begin Patch\nhello\n*** End Patch\n", 2, "expected a file header"),
        ("header without path", "*** Begin Patch\n*** Add File:   \n+x\n*** End Patch\n", 2, "needs a path"),
        ("empty add file", "*** Begin Patch\n*** Add File: a\n*** End Patch\n", 2, "has no lines"),
        (
            "empty add file before another section",
            "*** Begin Patch\n*** Add File: a\n\n*** Delete File: b\n*** End Patch\n",
            2,
            "has no lines",
        ),
        ("add line without plus", "*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch\n", 4, "must start with '+'"),
        ("delete with lines", "*** Begin Patch\n*** Delete File: a\n-x\n*** End Patch\n", 3, "takes no lines"),
        ("update without hunks", "*** Begin Patch\n*** Update File: a\n*** End Patch\n", 2, "has no hunks"),
        (
            "move to not after its update line",
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n*** Move to: b\n*** End Patch\n",
            6,
            "must directly follow",
        ),
        (
            "hunk without @@ after end of file",
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n*** End of File\n z\n+w\n*** End Patch\n",
            7,
            "hunk without @@",
        ),
        (
            "end of file outside a hunk",
            "*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch\n",
            3,
            "outside a hunk",
        ),
        ("empty hunk", "*** Begin Patch\n*** Update File: a\n@@ fn main\n*** End Patch\n", 3, "empty hunk"),
        (
            "hunk that changes nothing",
            "*** Begin Patch\n*** Update File: a\n@@\n x\n y\n*** End Patch\n",
            3,
            "changes nothing",
        ),
        (
            "unprefixed line in a hunk",
            "*** Begin Patch\n*** Update File: a\n@@\n x\nfn main() {\n+y\n*** End Patch\n",
            5,
            "hunk lines start with",
        ),
    ];
    for (case, patch, line, fragment) in cases {
        let err = parse_patch(patch).expect_err(case);
        let PatchError::Malformed { line: got, .. } = &err else { panic!("{case}: {err:?}") };
        assert_eq!(got, line, "{case}: {err}");
        assert!(err.to_string().contains(fragment), "{case}: {err}");
        assert!(err.to_string().starts_with(&format!("patch line {line}:")), "{case}: {err}");
    }
}

#[test]
fn the_parser_reads_every_section_kind() {
    let patch = "*** Begin Patch\r\n*** Add File: n.txt\r\n+a\r\n+\r\n*** Delete File: d.txt\r\n\r\n*** Update File: u.txt\r\n\
                 *** Move to: v.txt\r\n@@ fn f\r\n@@ -1,2 +1,2 @@\r\n x\r\n-y\r\n+z\r\n\r\n@@\r\n-w\r\n*** End of File\r\n\
                 *** End Patch\r\n";
    let parsed = parse_patch(patch).unwrap();
    assert_eq!(
        parsed.ops,
        vec![
            PatchOp::Add { line: 2, path: "n.txt".into(), lines: vec!["a".into(), "".into()] },
            PatchOp::Delete { line: 5, path: "d.txt".into() },
            PatchOp::Update {
                line: 7,
                path: "u.txt".into(),
                move_to: Some(MoveTo { line: 8, path: "v.txt".into() }),
                hunks: vec![
                    Hunk {
                        line: 9,
                        anchors: vec!["fn f".into()],
                        lines: vec![
                            HunkLine::Context("x".into()),
                            HunkLine::Remove("y".into()),
                            HunkLine::Add("z".into())
                        ],
                        at_eof: false,
                    },
                    Hunk { line: 15, anchors: vec![], lines: vec![HunkLine::Remove("w".into())], at_eof: true },
                ],
            },
        ]
    );
}

#[test]
fn a_heredoc_wrapper_and_an_implicit_first_hunk_are_accepted() {
    let patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a\n-x\n+y\n*** End Patch\nEOF\n";
    let parsed = parse_patch(patch).unwrap();
    let PatchOp::Update { hunks, .. } = &parsed.ops[0] else { panic!() };
    assert_eq!(hunks[0].line, 4);
    assert_eq!(hunks[0].lines, vec![HunkLine::Remove("x".into()), HunkLine::Add("y".into())]);
}

#[test]
fn rescue_rules_apply_updates() {
    // (case, file, hunks, expected file, level of the (single) note: None = exact)
    let cases: &[(&str, &str, &str, &str, Option<MatchLevel>)] = &[
        ("exact", "a\nb\nc\n", "@@\n a\n-b\n+B\n c\n", "a\nB\nc\n", None),
        ("crlf file keeps crlf", "a\r\nb\r\nc\r\n", "@@\n a\n-b\n+B\n+B2\n c\n", "a\r\nB\r\nB2\r\nc\r\n", None),
        ("no final newline kept", "a\nb\nc", "@@\n b\n-c\n+C\n", "a\nb\nC", None),
        ("no final newline, append at end", "a\nb", "@@\n b\n+c\n*** End of File\n", "a\nb\nc", None),
        ("crlf, no final newline", "a\r\nb", "@@\n-a\n+A\n b\n", "A\r\nb", None),
        ("mixed endings: each kept, majority for new", "a\r\nb\r\nc\n", "@@\n a\n+n\n b\n", "a\r\nn\r\nb\r\nc\n", None),
        (
            "trailing spaces in the file",
            "fn a() {   \n    x();\t\n}\n",
            "@@\n fn a() {\n-    x();\n+    y();\n }\n",
            "fn a() {   \n    y();\n}\n",
            Some(MatchLevel::TrailingWhitespace),
        ),
        (
            "trailing spaces in the patch",
            "a\nb\nc\n",
            "@@\n a  \n-b\t\n+B\n c\n",
            "a\nB\nc\n",
            Some(MatchLevel::TrailingWhitespace),
        ),
        (
            "indentation drift",
            "if x {\n\tcall();\n}\n",
            "@@\n if x {\n-    call();\n+\tcall2();\n }\n",
            "if x {\n\tcall2();\n}\n",
            Some(MatchLevel::Indentation),
        ),
        (
            "curly quotes in the patch context",
            "say(\"it's\")\nnext\n",
            "@@\n say(\u{201C}it\u{2019}s\u{201D})\n-next\n+then\n",
            "say(\"it's\")\nthen\n",
            Some(MatchLevel::Unicode),
        ),
        (
            "curly quotes in the file, authored line kept byte-exact",
            "say(\u{201C}hi\u{201D})\nnext\n",
            "@@\n-say(\"hi\")\n+say(\u{2018}hey\u{2019})\n next\n",
            "say(\u{2018}hey\u{2019})\nnext\n",
            Some(MatchLevel::Unicode),
        ),
        (
            "non-breaking space in the file",
            "let\u{00A0}x = 1;\nlet y = 2;\n",
            "@@\n let x = 1;\n-let y = 2;\n+let y = 3;\n",
            "let\u{00A0}x = 1;\nlet y = 3;\n",
            Some(MatchLevel::Unicode),
        ),
        (
            "em dash in the file",
            "// a \u{2014} b\nx\n",
            "@@\n // a - b\n-x\n+y\n",
            "// a \u{2014} b\ny\n",
            Some(MatchLevel::Unicode),
        ),
        (
            "en dash and ellipsis in the patch",
            "range 1-2...\nx\n",
            "@@\n range 1\u{2013}2\u{2026}\n-x\n+y\n",
            "range 1-2...\ny\n",
            Some(MatchLevel::Unicode),
        ),
        (
            "zero-width space in the file",
            "a\u{200B}b\nx\n",
            "@@\n ab\n-x\n+y\n",
            "a\u{200B}b\ny\n",
            Some(MatchLevel::Unicode),
        ),
        (
            "stale context line (LCS)",
            "fn f() {\n    let a = 1;\n    let b = 2;\n    work(a, b);\n    done();\n}\n",
            "@@\n fn f() {\n     let a = 1;\n     let b = 20;\n-    work(a, b);\n+    work(b, a);\n     done();\n }\n",
            "fn f() {\n    let a = 1;\n    let b = 2;\n    work(b, a);\n    done();\n}\n",
            Some(MatchLevel::Fuzzy { matched: 5, total: 6 }),
        ),
        (
            "unknown line inside the region is kept (LCS)",
            "one\ntwo\nnew line\nthree\nfour\n",
            "@@\n one\n two\n-three\n+THREE\n four\n",
            "one\ntwo\nnew line\nTHREE\nfour\n",
            Some(MatchLevel::Fuzzy { matched: 4, total: 4 }),
        ),
        (
            "several hunks in one section",
            "a\nb\nc\nd\ne\nf\ng\n",
            "@@\n a\n-b\n+B\n c\n@@\n e\n-f\n+F\n g\n",
            "a\nB\nc\nd\ne\nF\ng\n",
            None,
        ),
        (
            "anchor disambiguates a repeated block",
            "fn a() {\n    x();\n}\nfn b() {\n    x();\n}\n",
            "@@ fn b() {\n-    x();\n+    y();\n",
            "fn a() {\n    x();\n}\nfn b() {\n    y();\n}\n",
            None,
        ),
        (
            "stacked anchors",
            "class A:\n  def f():\n    pass\nclass B:\n  def f():\n    pass\n",
            "@@ class B:\n@@   def f():\n-    pass\n+    return 1\n",
            "class A:\n  def f():\n    pass\nclass B:\n  def f():\n    return 1\n",
            None,
        ),
        (
            // `@@` lines are trimmed: an indented line is their usual match, and the nearest
            // one after the previous anchor is taken, not a later line that fits exactly.
            "a trimmed anchor takes the nearest indented line",
            "class A:\n  def g():\n    pass\ndef g():\n    pass\n",
            "@@ class A:\n@@ def g():\n-    pass\n+    return 1\n",
            "class A:\n  def g():\n    return 1\ndef g():\n    pass\n",
            None,
        ),
        ("unified range header is a bare @@", "a\nb\nc\n", "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", "a\nB\nc\n", None),
        (
            "an anchored hunk takes the nearest place, even a tolerant one",
            "fn a\n  x \nfn b\n  x\n",
            "@@ fn a\n-  x\n+  y\n",
            "fn a\n  y\nfn b\n  x\n",
            Some(MatchLevel::TrailingWhitespace),
        ),
        (
            "stale leading context line (LCS)",
            "b\nc\nd\n",
            "@@\n a\n b\n-c\n+C\n d\n",
            "b\nC\nd\n",
            Some(MatchLevel::Fuzzy { matched: 3, total: 4 }),
        ),
        (
            "end-of-file hunk before trailing blank lines (LCS)",
            "a\nb\n\n",
            "@@\n a\n-b\n+B\n*** End of File\n",
            "a\nB\n\n",
            Some(MatchLevel::Fuzzy { matched: 2, total: 2 }),
        ),
        (
            // The exact line is in another function, past the anchor's block: the nearest
            // place, nested deeper, is the one under the anchor (review Y).
            "an exact line past the anchor's block does not make it ambiguous",
            "fn a() {\n    if x {\n        y();\n    }\n}\n\nfn b() {\n    y();\n}\n",
            "@@ fn a() {\n-    y();\n+    z();\n",
            "fn a() {\n    if x {\n    z();\n    }\n}\n\nfn b() {\n    y();\n}\n",
            Some(MatchLevel::Indentation),
        ),
        ("insertion after an anchor", "a\nb\n", "@@ a\n+inserted\n", "a\ninserted\nb\n", None),
        ("insertion at the end of the file", "a\nb\n", "@@\n+c\n*** End of File\n", "a\nb\nc\n", None),
        ("insertion into an empty file", "", "@@\n+first\n", "first\n", None),
        (
            "a context line that looks like the end marker",
            "*** End Patch\nx\n",
            "@@\n *** End Patch\n-x\n+y\n",
            "*** End Patch\ny\n",
            None,
        ),
        ("removal at the end of the file", "x\ny\nx\n", "@@\n y\n-x\n*** End of File\n", "x\ny\n", None),
        ("empty context line without its space", "a\n\nb\n", "@@\n a\n\n-b\n+B\n", "a\n\nB\n", None),
        ("byte-order mark kept", "\u{FEFF}a\nb\n", "@@\n-a\n+A\n b\n", "\u{FEFF}A\nb\n", None),
        ("everything removed", "a\nb\n", "@@\n-a\n-b\n", "", None),
        ("added lines keep their trailing spaces and tabs", "a\nb\n", "@@\n a\n-b\n+b  \t\n", "a\nb  \t\n", None),
    ];
    for (case, file, body, expected, level) in cases {
        let plan = update(file, body).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(updated(&plan), *expected, "{case}");
        let levels: Vec<MatchLevel> = plan.notes.iter().map(|n| n.hunk.level).collect();
        assert_eq!(levels, level.iter().copied().collect::<Vec<_>>(), "{case}");
    }
}

#[test]
fn refusals_name_the_line_and_the_path() {
    let repeated = "a\nx\nb\nc\nx\nb\n";
    // (case, file, hunks, fragments of the message)
    let cases: &[(&str, &str, &str, &[&str])] = &[
        ("context not found", "a\nb\n", "@@\n-zzz\n+y\n", &["patch line 3", "'f.txt'", "no place in it has"]),
        ("ambiguous context", repeated, "@@\n x\n-b\n+B\n", &["several places", "lines 2, 5"]),
        (
            "ambiguous only after whitespace tolerance",
            "x \nb\nx\t\nb\n",
            "@@\n x\n-b\n+B\n",
            &["several places", "lines 1, 3"],
        ),
        ("ambiguous anchor", "fn f\n 1\nfn f\n 2\n", "@@ fn f\n-2\n+3\n", &["the @@ line 'fn f'", "lines 1, 3"]),
        ("anchor not found", "a\nb\n", "@@ fn zz\n-a\n+b\n", &["the @@ line 'fn zz' is not in it"]),
        (
            // The nearest place fits only ignoring indentation, the exact line is further
            // on: a guess either way (the nested line was edited and re-indented).
            "anchored hunk: a nearer place at another indentation and an exact one after it",
            "fn main() {\n    if a {\n        x = 1;\n    }\n    x = 1;\n}\n",
            "@@ fn main() {\n-    x = 1;\n+    x = 2;\n",
            &["the hunk (at line 3 only with other indentation or look-alike characters) matches 'f.txt' at several places (lines 3, 5)"],
        ),
        (
            "LCS fallback too weak",
            "one\ntwo\nthree\nfour\nfive\n",
            "@@\n one\n deux\n trois\n quatre\n-five\n+5\n",
            &[
                "stale-context fallback refused",
                "no place has two thirds of its 5 lines (the closest, near line 1, has 2)",
            ],
        ),
        (
            "LCS fallback: a removed line is missing",
            "one\ntwo\nthree\nfour\nfive\n",
            "@@\n one\n two\n three\n-FOUR\n+4\n five\n",
            &["which it removes, is not there"],
        ),
        (
            "LCS fallback ambiguous",
            "p\nq\nr\ns\n--\np\nq\nr\ns\n",
            "@@\n p\n q\n stale\n-r\n+R\n s\n",
            &["several places", "lines 1, 6"],
        ),
        (
            "LCS fallback over many repeats is ambiguous",
            &"a\nb\nc\nd\n".repeat(40),
            "@@\n a\n b\n stale\n-c\n+C\n d\n",
            &["several places", "lines 1, 5, 9, 13"],
        ),
        (
            "hunks out of order",
            "a\nb\nc\nd\n",
            "@@\n c\n-d\n+D\n@@\n-a\n+A\n b\n",
            &["must be in file order", "at line 1"],
        ),
        ("insertion without anchor", "a\n", "@@\n+b\n", &["only adds lines"]),
        (
            "LCS fallback: lines too common to place",
            &"}\n".repeat(100),
            "@@\n }\n }\n-gone\n+new\n",
            &["too common to place it"],
        ),
        ("end of file hunk not at the end", "a\nb\nc\n", "@@\n-a\n+A\n*** End of File\n", &["at the end of the file"]),
    ];
    for (case, file, body, fragments) in cases {
        let err = update(file, body).expect_err(case).to_string();
        for fragment in *fragments {
            assert!(err.contains(fragment), "{case}: {err}");
        }
    }
}

#[test]
fn file_existence_is_checked() {
    let files = [("a.txt", "a\n"), ("b.txt", "b\n")];
    // (case, patch body, error)
    let cases: &[(&str, &str, PatchError)] = &[
        (
            "update of a missing file",
            "*** Update File: none.txt\n@@\n-a\n+b\n",
            PatchError::Missing { line: 2, path: "none.txt".into() },
        ),
        (
            "delete of a missing file",
            "*** Delete File: none.txt\n",
            PatchError::Missing { line: 2, path: "none.txt".into() },
        ),
        (
            "add of an existing file",
            "*** Add File: a.txt\n+x\n",
            PatchError::AlreadyExists { line: 2, path: "a.txt".into() },
        ),
        (
            "move onto an existing file",
            "*** Update File: a.txt\n*** Move to: b.txt\n@@\n-a\n+A\n",
            PatchError::AlreadyExists { line: 3, path: "b.txt".into() },
        ),
        (
            "update after delete in the same patch",
            "*** Delete File: a.txt\n*** Update File: a.txt\n@@\n-a\n+A\n",
            PatchError::Missing { line: 3, path: "a.txt".into() },
        ),
        (
            "the old path after a move",
            "*** Update File: a.txt\n*** Move to: c.txt\n@@\n-a\n+A\n*** Update File: a.txt\n@@\n-A\n+B\n",
            PatchError::Missing { line: 7, path: "a.txt".into() },
        ),
        (
            "a file and a file beneath it, in either order",
            "*** Add File: d/f\n+inner\n*** Add File: d\n+outer\n",
            PatchError::FileAndDirectory { file: "d".into(), inside: "d/f".into() },
        ),
        (
            "a file beneath a file added first, two levels down",
            "*** Add File: d\n+outer\n*** Add File: d/e/f\n+inner\n",
            PatchError::FileAndDirectory { file: "d".into(), inside: "d/e/f".into() },
        ),
        (
            "an updated file and a file beneath it",
            "*** Update File: a.txt\n@@\n-a\n+A\n*** Add File: a.txt/x\n+x\n",
            PatchError::FileAndDirectory { file: "a.txt".into(), inside: "a.txt/x".into() },
        ),
        (
            "a move under the file it moves to",
            "*** Update File: a.txt\n*** Move to: m\n*** Update File: b.txt\n*** Move to: m/b.txt\n",
            PatchError::FileAndDirectory { file: "m".into(), inside: "m/b.txt".into() },
        ),
    ];
    for (case, body, expected) in cases {
        assert_eq!(&run(&wrap(body), &files).expect_err(case), expected, "{case}");
    }
}

#[test]
fn plans_reduce_the_sections_to_one_change_per_path() {
    let files = [("a.txt", "1\n2\n3\n4\n"), ("old.txt", "x\ny\n"), ("gone.txt", "bye\n")];
    let up = |p: &str, c: &str| FileChange::Update { path: p.into(), content: c.into() };
    // (case, patch body, changes)
    let cases: Vec<(&str, &str, Vec<FileChange>)> = vec![
        (
            "several update sections on one path accumulate in order",
            "*** Update File: a.txt\n@@\n-1\n+one\n*** Update File: a.txt\n@@\n one\n-2\n+two\n*** Update File: ./a.txt\n@@\n-one\n+uno\n",
            vec![up("a.txt", "uno\ntwo\n3\n4\n")],
        ),
        (
            "move with hunks",
            "*** Update File: old.txt\n*** Move to: dir/new.txt\n@@\n-x\n+X\n",
            vec![FileChange::Move { from: "old.txt".into(), to: "dir/new.txt".into(), content: "X\ny\n".into() }],
        ),
        (
            "pure rename",
            "*** Update File: old.txt\n*** Move to: new.txt\n",
            vec![FileChange::Move { from: "old.txt".into(), to: "new.txt".into(), content: "x\ny\n".into() }],
        ),
        (
            "moved file updated at its new path",
            "*** Update File: old.txt\n*** Move to: new.txt\n@@\n-x\n+X\n*** Update File: new.txt\n@@\n X\n-y\n+Y\n",
            vec![FileChange::Move { from: "old.txt".into(), to: "new.txt".into(), content: "X\nY\n".into() }],
        ),
        ("delete", "*** Delete File: gone.txt\n", vec![FileChange::Delete { path: "gone.txt".into() }]),
        (
            "add then update",
            "*** Add File: n.txt\n+a\n+b\n*** Update File: n.txt\n@@\n a\n-b\n+B\n",
            vec![FileChange::Add { path: "n.txt".into(), content: "a\nB\n".into() }],
        ),
        ("move to itself is an update", "*** Update File: a.txt\n*** Move to: ./a.txt\n@@\n-1\n+one\n", vec![up("a.txt", "one\n2\n3\n4\n")]),
        (
            "add from a patch with CRLF lines is LF",
            "*** Add File: c.txt\r\n+a\r\n+b\r\n",
            vec![FileChange::Add { path: "c.txt".into(), content: "a\nb\n".into() }],
        ),
        ("add then delete is nothing", "*** Add File: n.txt\n+a\n*** Delete File: n.txt\n", vec![]),
        (
            "delete then add is an update",
            "*** Delete File: gone.txt\n*** Add File: gone.txt\n+back\n",
            vec![up("gone.txt", "back\n")],
        ),
        (
            "add keeps authored lines byte-exact",
            "*** Add File: q.txt\n+\u{201C}q\u{201D}  \n+\ttab\n",
            vec![FileChange::Add { path: "q.txt".into(), content: "\u{201C}q\u{201D}  \n\ttab\n".into() }],
        ),
        (
            "several files in patch order",
            "*** Delete File: gone.txt\n*** Update File: a.txt\n@@\n-4\n+four\n*** Add File: z.txt\n+z\n",
            vec![
                FileChange::Delete { path: "gone.txt".into() },
                up("a.txt", "1\n2\n3\nfour\n"),
                FileChange::Add { path: "z.txt".into(), content: "z\n".into() },
            ],
        ),
    ];
    for (case, body, expected) in cases {
        let plan = run(&wrap(body), &files).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(plan.changes, expected, "{case}");
    }
}

#[test]
fn the_summary_lists_changes_and_rescues() {
    let patch = wrap(
        "*** Update File: a.txt\n@@\n-x  \n+y\n*** Update File: b.txt\n*** Move to: c.txt\n*** Add File: d.txt\n+d\n\
         *** Delete File: e.txt\n",
    );
    let plan = run(&patch, &[("a.txt", "x\n"), ("b.txt", "b\n"), ("e.txt", "e\n")]).unwrap();
    assert_eq!(
        plan.summary(),
        "M a.txt\nR b.txt -> c.txt\nA d.txt\nD e.txt\n\
         note: a.txt hunk at patch line 3 matched line 1 (ignoring trailing whitespace)"
    );
}

/// (case, raw path, root, normalised path or part of the reason).
type PathCase = (&'static str, &'static str, Option<&'static str>, Result<&'static str, &'static str>);

#[test]
fn paths_are_confined_to_the_root() {
    let cases: &[PathCase] = &[
        ("plain", "src/a.rs", None, Ok("src/a.rs")),
        ("dot components", "./src/./a.rs", None, Ok("src/a.rs")),
        ("dot-dot inside", "src/x/../a.rs", None, Ok("src/a.rs")),
        ("backslashes", "src\\a.rs", None, Ok("src/a.rs")),
        ("escaping", "../a.rs", None, Err("escapes the root")),
        ("escaping later", "src/../../a.rs", None, Err("escapes the root")),
        ("escaping with backslashes", "src\\..\\..\\a.rs", None, Err("escapes the root")),
        ("absolute without root", "/etc/passwd", None, Err("is absolute")),
        ("absolute inside root", "/work/p/src/a.rs", Some("/work/p"), Ok("src/a.rs")),
        ("absolute inside root with trailing slash", "/work/p/a.rs", Some("/work/p/"), Ok("a.rs")),
        ("absolute outside root", "/work/other/a.rs", Some("/work/p"), Err("outside the root")),
        ("sibling with a common prefix", "/work/p2/a.rs", Some("/work/p"), Err("outside the root")),
        ("absolute escaping root", "/work/p/../q/a.rs", Some("/work/p"), Err("outside the root")),
        ("windows drive", "C:\\x\\a.rs", None, Err("is absolute")),
        ("home", "~/a.rs", None, Err("home directory")),
        ("root itself", "src/..", None, Err("names the root")),
        ("empty", "  ", None, Err("is empty")),
        ("a directory", "newdir/", None, Err("names a directory")),
        ("a directory with a backslash", "newdir\\", None, Err("names a directory")),
        ("a directory spelled with a dot", "newdir/.", None, Err("names a directory")),
        ("git's hooks", ".git/hooks/pre-commit", None, Err("inside a git directory")),
        ("a worktree's git link", ".git", None, Err("inside a git directory")),
        ("a nested repository's git", "vendor/x/.git/config", None, Err("inside a git directory")),
        (
            "git in another case (a file system that ignores case)",
            ".GIT/hooks/pre-commit",
            None,
            Err("inside a git directory"),
        ),
        ("git by an absolute path", "/work/p/.git/config", Some("/work/p"), Err("inside a git directory")),
        ("a name that only starts so", ".github/workflows/ci.yml", None, Ok(".github/workflows/ci.yml")),
        ("a name that only ends so", "x.git/a", None, Ok("x.git/a")),
        ("forge's project configuration", ".forge/config.toml", None, Err("forge-lsp's project configuration")),
        ("a project tool", "./.forge/tools/run.toml", None, Err("forge-lsp's project configuration")),
        (
            "a project tool by an absolute path",
            "/work/p/.forge/tools/x.py",
            Some("/work/p"),
            Err("forge-lsp's project configuration"),
        ),
        ("a view copy", ".forge/view/index.md", None, Ok(".forge/view/index.md")),
        ("a nested folder's configuration", "sub/.forge/config.toml", None, Err("forge-lsp's project configuration")),
    ];
    for (case, raw, root, expected) in cases {
        match (normalize_path(raw, *root), expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, *want, "{case}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "{case}: {got}"),
            (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn bad_paths_are_reported_before_any_file_is_read() {
    let patch = wrap("*** Update File: a.txt\n@@\n-a\n+b\n*** Add File: ../evil.txt\n+x\n");
    let mut reads = 0;
    let err = apply_patch(&patch, None, |_| {
        reads += 1;
        Ok::<_, String>(Some("a\n".to_string()))
    })
    .unwrap_err();
    assert_eq!(reads, 0);
    assert_eq!(err.to_string(), "patch line 6: path '../evil.txt' escapes the root with '..'");
    let moved = wrap("*** Update File: a.txt\n*** Move to: /tmp/x\n");
    let err = run_with(&moved, Some("/work/p"), &[("a.txt", "a\n")]).unwrap_err();
    assert!(matches!(err, PatchError::BadPath { line: 3, .. }), "{err:?}");
}

#[test]
fn absolute_paths_inside_the_root_are_made_relative() {
    let patch = wrap("*** Update File: /work/p/a.txt\n@@\n-a\n+b\n");
    let plan = run_with(&patch, Some("/work/p"), &[("a.txt", "a\n")]).unwrap();
    assert_eq!(plan.changes, vec![FileChange::Update { path: "a.txt".into(), content: "b\n".into() }]);
}

/// A file the lookup can give no content of but says may be deleted (a symbolic link):
/// `Delete File` removes it; `Update File`, a move from it and `Add File` over it are
/// refused, naming why; left alone, nothing is planned for it.
#[test]
fn a_removable_unreadable_file_can_only_be_deleted() {
    let link = || Unreadable { message: "a symbolic link".into(), removable: true };
    let lookup = |p: &str| if p == "l" { Err(link()) } else { Ok(Some("a\n".to_string())) };
    let plan = apply_patch(&wrap("*** Delete File: l\n"), None, lookup).unwrap();
    assert_eq!(plan.changes, vec![FileChange::Delete { path: "l".into() }]);
    for body in ["*** Update File: l\n@@\n-a\n+b\n", "*** Update File: l\n*** Move to: m\n"] {
        let err = apply_patch(&wrap(body), None, lookup).unwrap_err();
        assert_eq!(err.to_string(), "cannot patch 'l': a symbolic link", "{body}");
    }
    let err = apply_patch(&wrap("*** Add File: l\n+x\n"), None, lookup).unwrap_err();
    assert!(matches!(err, PatchError::AlreadyExists { .. }), "{err:?}");
    // Moving another file onto it: it exists.
    let err = apply_patch(&wrap("*** Update File: a\n*** Move to: l\n"), None, lookup).unwrap_err();
    assert!(matches!(err, PatchError::AlreadyExists { .. }), "{err:?}");
    // Not removable: refused as before, whatever the operation.
    let err = apply_patch(&wrap("*** Delete File: l\n"), None, |_| Err("not a regular file".to_string())).unwrap_err();
    assert_eq!(err.to_string(), "cannot patch 'l': not a regular file");
}

#[test]
fn read_errors_are_passed_on() {
    let patch = wrap("*** Update File: bin.dat\n@@\n-a\n+b\n");
    let err = apply_patch(&patch, None, |_| Err("not UTF-8 text".to_string())).unwrap_err();
    assert_eq!(err.to_string(), "cannot patch 'bin.dat': not UTF-8 text");
}

#[test]
fn fold_maps_lookalikes_to_ascii() {
    let cases = [
        ("\u{2018}a\u{2019} \u{201C}b\u{201D}", "'a' \"b\""),
        ("a\u{2014}b\u{2013}c\u{2212}d\u{2011}e", "a-b-c-d-e"),
        ("x\u{00A0}y\u{202F}z\u{3000}w", "x y z w"),
        ("\u{FEFF}a\u{200B}b\u{00AD}c", "abc"),
        ("wait\u{2026}", "wait..."),
        ("plain ascii", "plain ascii"),
        ("caf\u{00E9}", "caf\u{00E9}"),
    ];
    for (input, want) in cases {
        assert_eq!(fold(input), want, "{input:?}");
    }
}

#[test]
fn ten_thousand_lines_with_a_stale_hunk_apply() {
    let file: String = (0..10_000).map(|i| format!("    let value_{i} = compute({i});\n")).collect();
    let mut body = String::new();
    for i in [100, 2_500, 5_000, 7_500] {
        body.push_str(&format!(
            "@@\n     let value_{} = compute({});\n-    let value_{i} = compute({i});\n+    let value_{i} = changed({i});\n",
            i - 1,
            i - 1
        ));
    }
    // A stale hunk: its first context line changed since, so the LCS fallback finds it.
    body.push_str(
        "@@\n     let value_9000 = old();\n     let value_9001 = compute(9001);\n-    let value_9002 = compute(9002);\n\
         +    let value_9002 = changed(9002);\n     let value_9003 = compute(9003);\n",
    );
    let patch = wrap(&format!("*** Update File: big.rs\n{body}"));
    // Speed (the 20 ms target) is measured by forge-bench, not asserted here.
    let plan = run(&patch, &[("big.rs", &file)]).unwrap();
    let content = updated(&plan);
    assert_eq!(content.matches("changed(").count(), 5);
    assert!(content.contains("    let value_9000 = compute(9000);\n    let value_9001"));
    assert_eq!(plan.notes.len(), 1);
}

/// Repetitive text (a file of 40,000 equal lines, a hunk of 20,000 of them and one line
/// that is not there) is searched in linear time at each level, and matches where it
/// fits: at every start, overlapping ones included.
#[test]
fn repetitive_lines_are_matched_in_linear_time() {
    let file = "a\n".repeat(40_000);
    let body = format!("*** Update File: big.txt\n@@\n{}-b\n+c\n", "-a\n".repeat(20_000));
    let e = run(&wrap(&body), &[("big.txt", &file)]).unwrap_err();
    assert!(matches!(e, PatchError::ContextNotFound { .. }), "{e}");
    // The same hunk without the missing line fits at 20,001 places: ambiguous.
    let body = format!("*** Update File: big.txt\n@@\n{}+c\n", "-a\n".repeat(20_000));
    let e = run(&wrap(&body), &[("big.txt", &file)]).unwrap_err();
    assert!(matches!(e, PatchError::Ambiguous { ref candidates, .. } if candidates[..3] == [1, 2, 3]), "{e}");
    // A needle whose prefix repeats inside it (the failure function's case).
    let file = "a\na\nb\na\na\na\nb\n";
    let plan = run(&wrap("*** Update File: f\n@@\n a\n a\n-a\n+X\n b\n"), &[("f", file)]).unwrap();
    assert_eq!(updated(&plan), "a\na\nb\na\na\nX\nb\n");
}

/// A small deterministic generator for the robustness test.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % below.max(1)
    }
}

#[test]
fn random_patches_never_panic_and_exact_ones_apply() {
    let words = ["fn", "x", "}", "", "let a = 1;", "say(\u{201C}hi\u{201D})", "  ", "a\u{00A0}b", "return;", "\t{"];
    let mut rng = Lcg(7);
    for round in 0..400 {
        let len = rng.next(30);
        let mut file_lines: Vec<String> =
            (0..len).map(|i| format!("{} {}", words[rng.next(words.len())], i % 7)).collect();
        let eol = if rng.next(2) == 0 { "\n" } else { "\r\n" };
        let mut file = file_lines.join(eol);
        if rng.next(3) > 0 && !file.is_empty() {
            file.push_str(eol);
        }
        // A hunk over a random region, possibly made stale afterwards.
        let start = rng.next(len + 1);
        let end = (start + 1 + rng.next(6)).min(len);
        let mut body = String::from("@@\n");
        for (i, line) in file_lines[start.min(len)..end.max(start.min(len))].iter().enumerate() {
            let prefix = if i % 3 == 1 { '-' } else { ' ' };
            body.push_str(&format!("{prefix}{line}\n"));
        }
        body.push_str(&format!("+added {round}\n"));
        let stale = rng.next(4) == 0;
        if stale && !file_lines.is_empty() {
            let k = rng.next(file_lines.len());
            file_lines[k] = format!("changed {round}");
            file = file_lines.join(eol);
        }
        let patch = wrap(&format!("*** Update File: f.txt\n{body}"));
        let result = run(&patch, &[("f.txt", &file)]);
        if let Ok(plan) = &result {
            let content = updated(plan);
            assert!(content.contains(&format!("added {round}")), "round {round}");
            if file.contains("\r\n") {
                assert!(!content.replace("\r\n", "").contains('\n'), "round {round}: {content:?}");
            }
        }
    }
}
