//! `forge.ast-grep-search` and `forge.ast-grep-replace` over the real binary (PROTOCOL.md
//! 10.3): structural matches in Rust, Python and TypeScript files, gitignore, dry runs that
//! write nothing, all-or-nothing writes, the root and the auditor rule.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use serde_json::json;

fn client(sb: &Sandbox, repo: &GitRepo) -> Client {
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    c
}

fn read(repo: &GitRepo, rel: &str) -> String {
    std::fs::read_to_string(repo.path.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn search_finds_structural_matches_in_rust_python_and_typescript() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("src/lib.rs", "fn main() {\n    let x = foo(1, 2);\n    // foo(3) in a comment\n    bar(foo(4));\n}\n");
    repo.write("app/util.py", "def f():\n    print(\"hi\")\n    print('x', end='')\n    log = 'print(no)'\n");
    repo.write("web/app.ts", "const a: number = 1;\nconsole.log(a);\nconsole.log(`t`, a);\n");
    repo.write(".gitignore", "ignored/\n");
    repo.write("ignored/skip.py", "print(1)\n");
    let c = client(&sb, &repo);

    let out = c.tool_ok("ast-grep-search", json!({ "pattern": "foo($$$ARGS)", "lang": "rust" }));
    assert!(out.text.contains("src/lib.rs:2: foo(1, 2)"), "{}", out.text);
    assert!(out.text.contains("src/lib.rs:4: foo(4)"), "{}", out.text);
    assert!(!out.text.contains("foo(3)"), "a comment is not code: {}", out.text);
    assert!(out.text.contains("2 matches in 1 rust file searched"), "{}", out.text);

    let out = c.tool_ok("ast-grep-search", json!({ "pattern": "print($A)", "lang": "py" }));
    assert!(out.text.contains("app/util.py:2: print(\"hi\")"), "{}", out.text);
    assert!(!out.text.contains("end="), "one argument only: {}", out.text);
    assert!(!out.text.contains("ignored/"), "gitignored files are not searched: {}", out.text);
    assert_eq!(out.data["total"], 1, "{}", out.data);

    let out =
        c.tool_ok("ast-grep-search", json!({ "pattern": "console.log($$$)", "lang": "typescript", "path": "web" }));
    assert_eq!(out.data["total"], 2, "{}", out.text);
    assert!(out.text.contains("web/app.ts:3: console.log(`t`, a)"), "{}", out.text);

    // Nothing found is a success; bad inputs are -32602 naming what is wrong.
    let out = c.tool_ok("ast-grep-search", json!({ "pattern": "nothing_here($A)", "lang": "go" }));
    assert!(out.text.starts_with("No matches found."), "{}", out.text);
    let e = c.tool_err("ast-grep-search", json!({ "pattern": "x", "lang": "cobol" }));
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("cobol") && e.message.contains("rust") && e.message.contains("cpp"), "{e}");
    let e = c.tool_err("ast-grep-search", json!({ "pattern": "", "lang": "rust" }));
    assert!(e.message.contains("pattern"), "{e}");
}

#[test]
fn search_and_replace_stay_inside_the_root() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("a.rs", "fn a() {}\n");
    let outside = sb.mkdir("outside");
    std::fs::write(outside.join("o.rs"), "fn o() {}\n").unwrap();
    let c = client(&sb, &repo);
    let e = c.tool_err("ast-grep-search", json!({ "pattern": "fn $F() {}", "lang": "rust", "path": "../outside" }));
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("../outside") && e.message.contains("out of the root"), "{e}");
    let e = c.tool_err(
        "ast-grep-replace",
        json!({ "pattern": "fn $F() {}", "rewrite": "fn $F() { todo!() }", "lang": "rust", "path": outside.display().to_string(), "dryRun": false }),
    );
    assert!(e.message.contains("outside the root"), "{e}");
    assert_eq!(std::fs::read_to_string(outside.join("o.rs")).unwrap(), "fn o() {}\n");
    let e = c.tool_err("ast-grep-search", json!({ "pattern": "fn $F() {}", "lang": "rust", "path": "a.rs/deeper" }));
    assert!(e.message.contains("a.rs is not a directory"), "{e}");
    let e = c.tool_err("ast-grep-search", json!({ "pattern": "fn $F() {}", "lang": "rust", "path": "nope" }));
    assert!(e.message.contains("nope does not exist"), "{e}");
    // A link named as the path: found through, never replaced by a file.
    std::os::unix::fs::symlink("a.rs", repo.path.join("link.rs")).unwrap();
    let e = c.tool_err(
        "ast-grep-replace",
        json!({ "pattern": "fn $F() {}", "rewrite": "fn $F() { todo!() }", "lang": "rust", "path": "link.rs", "dryRun": false }),
    );
    assert!(e.message.contains("link.rs is not a regular file") && e.message.contains("nothing was written"), "{e}");
    assert!(std::fs::symlink_metadata(repo.path.join("link.rs")).unwrap().file_type().is_symlink());
    assert_eq!(read(&repo, "a.rs"), "fn a() {}\n");
}

/// A rewrite that names a metavariable the pattern does not capture (or captures in the
/// other form) would put nothing where the match was: refused, nothing written.
#[test]
fn a_rewrite_with_a_metavariable_the_pattern_lacks_is_refused() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let src = "foo(1, 2, 3);\n";
    repo.write("a.js", src);
    let c = client(&sb, &repo);
    for (pattern, rewrite, says) in [
        ("foo($A)", "bar($B)", "$B is not a metavariable of the pattern"),
        ("foo($$$ARGS)", "bar($ARGS)", "$ARGS is written $$$ARGS in the pattern"),
        ("foo($$$)", "bar($$$)", "$$$ captures nothing"),
    ] {
        let e = c.tool_err(
            "ast-grep-replace",
            json!({ "pattern": pattern, "rewrite": rewrite, "lang": "js", "dryRun": false }),
        );
        assert_eq!(e.code, 1006, "{rewrite}: {e}");
        assert!(e.message.contains(says), "{rewrite}: {e}");
        assert_eq!(read(&repo, "a.js"), src);
    }
    c.tool_ok(
        "ast-grep-replace",
        json!({ "pattern": "foo($$$ARGS)", "rewrite": "bar($$$ARGS)", "lang": "js", "dryRun": false }),
    );
    assert_eq!(read(&repo, "a.js"), "bar(1, 2, 3);\n");
}

#[test]
fn replace_dry_run_previews_and_writes_nothing_then_applies() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let one = "console.log(a);\nfoo();\nconsole.log(\"b\", c);\n";
    let two = "function g() { console.log(g); }\n";
    repo.write("src/one.js", one);
    repo.write("src/two.js", two);
    let c = client(&sb, &repo);
    let input = json!({ "pattern": "console.log($$$ARGS)", "rewrite": "logger.info($$$ARGS)", "lang": "javascript" });
    let out = c.tool_ok("ast-grep-replace", input.clone());
    assert!(out.text.starts_with("[DRY RUN] 3 changes in 2 files"), "{}", out.text);
    assert!(!out.text.contains("[APPLIED]"), "{}", out.text);
    assert!(out.text.contains("-console.log(\"b\", c)") && out.text.contains("+logger.info(\"b\", c)"), "{}", out.text);
    assert_eq!(read(&repo, "src/one.js"), one, "a dry run writes nothing");
    assert_eq!(read(&repo, "src/two.js"), two, "a dry run writes nothing");

    let mut real = input.clone();
    real["dryRun"] = json!(false);
    let out = c.tool_ok("ast-grep-replace", real);
    assert!(out.text.starts_with("[APPLIED] 3 changes written to 2 files"), "{}", out.text);
    assert_eq!(read(&repo, "src/one.js"), "logger.info(a);\nfoo();\nlogger.info(\"b\", c);\n");
    assert_eq!(read(&repo, "src/two.js"), "function g() { logger.info(g); }\n");
    assert_eq!(out.data["applied"], true);
    // No temporary files are left behind.
    let left: Vec<_> = std::fs::read_dir(repo.path.join("src")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    // Run again: nothing matches any more.
    let out = c.tool_ok("ast-grep-replace", input);
    assert!(out.text.starts_with("No matches found"), "{}", out.text);
}

#[test]
fn replace_write_failure_is_an_error_and_leaves_every_file_unchanged() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("a.py", "print(1)\n");
    let locked = repo.write("b.py", "print(2)\n");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o444)).unwrap();
    let c = client(&sb, &repo);
    let e = c.tool_err(
        "ast-grep-replace",
        json!({ "pattern": "print($X)", "rewrite": "log($X)", "lang": "python", "dryRun": false }),
    );
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("b.py") && e.message.contains("read-only"), "{e}");
    assert!(!e.message.contains("[APPLIED]"), "{e}");
    assert_eq!(read(&repo, "a.py"), "print(1)\n", "all or nothing: a.py untouched");
    assert_eq!(read(&repo, "b.py"), "print(2)\n");
    let left: Vec<_> = std::fs::read_dir(&repo.path).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().contains("forge-ast-grep")), "temporaries removed: {left:?}");
    // Auditors review; they do not rewrite.
    let mut auditor = sb.stdio();
    auditor.init(&Init::new(&repo.path).agent("auditor"));
    let e = auditor.tool_err(
        "ast-grep-replace",
        json!({ "pattern": "print($X)", "rewrite": "log($X)", "lang": "python", "path": "a.py" }),
    );
    assert!(e.message.contains("auditor"), "{e}");
    // The search stays open to them.
    let out = auditor.tool_ok("ast-grep-search", json!({ "pattern": "print($X)", "lang": "python", "path": "a.py" }));
    assert_eq!(out.data["total"], 1, "{}", out.text);
}

/// A nested repository's `.git` (a vendored checkout) is skipped by glob and both ast-grep
/// tools, as grep skips it: a rewrite must never reach a git directory. Before, only the
/// root's own `.git` was skipped. A pattern that does not parse is refused (1006) instead
/// of finding nothing.
#[test]
fn nested_git_directories_are_skipped_and_unparsable_patterns_refused() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("vendor/lib/src/y.rs", "fn y() {}\n");
    repo.write("vendor/lib/.git/hook.rs", "fn y() {}\n");
    repo.write("vendor/lib/.git/config", "[core]\n");
    let c = client(&sb, &repo);
    let out = c.tool_ok("glob", json!({ "pattern": "**/*", "path": "vendor" }));
    assert!(out.text.contains("vendor/lib/src/y.rs"), "{}", out.text);
    assert!(!out.text.contains(".git"), "{}", out.text);
    let out = c.tool_ok("ast-grep-search", json!({ "pattern": "fn $F() {}", "lang": "rust", "path": "vendor" }));
    assert_eq!(out.data["total"], 1, "{}", out.text);
    assert!(!out.text.contains(".git"), "{}", out.text);
    let out = c.tool_ok(
        "ast-grep-replace",
        json!({ "pattern": "fn $F() {}", "rewrite": "fn $F() { todo!() }", "lang": "rust", "path": "vendor", "dryRun": false }),
    );
    assert!(!out.text.contains(".git"), "{}", out.text);
    assert_eq!(read(&repo, "vendor/lib/.git/hook.rs"), "fn y() {}\n");
    assert_eq!(read(&repo, "vendor/lib/src/y.rs"), "fn y() { todo!() }\n");

    // Nor when the path names a git directory (the walk's start is not filtered).
    repo.write(".git/hooks/evil.rs", "fn y() {}\n");
    std::os::unix::fs::symlink(repo.path.join(".git"), repo.path.join("gitlink")).unwrap();
    for path in [".git", "vendor/lib/.git", "gitlink"] {
        for tool in ["ast-grep-replace", "ast-grep-search", "glob", "grep"] {
            let input = match tool {
                "glob" => json!({ "pattern": "**/*", "path": path }),
                "grep" => json!({ "pattern": "core", "path": path }),
                "ast-grep-search" => json!({ "pattern": "fn $F() {}", "lang": "rust", "path": path }),
                _ => {
                    json!({ "pattern": "fn $F() {}", "rewrite": "fn $F() { x() }", "lang": "rust", "path": path, "dryRun": false })
                }
            };
            let e = c.tool_err(tool, input);
            assert_eq!(e.code, -32602, "{tool} {path}: {e}");
            assert!(e.message.contains("inside a git directory"), "{e}");
        }
    }
    assert_eq!(read(&repo, ".git/hooks/evil.rs"), "fn y() {}\n");

    for (pattern, lang) in [("{{{", "js"), ("fn (", "rust")] {
        let e = c.tool_err("ast-grep-search", json!({ "pattern": pattern, "lang": lang }));
        assert_eq!(e.code, 1006, "{pattern}: {e}");
        assert!(e.message.contains("does not parse"), "{e}");
    }
}

/// A file over 1 MiB (a generated bundle) is not parsed: a syntax tree takes about 90 times
/// its file's size, in the server's process (a 24 MB bundle took 2 GB). It is reported as
/// not searched, and a replace leaves it as it was; the files beside it are searched.
#[test]
fn files_over_one_mebibyte_are_reported_not_parsed() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let bundle = "console.log(1);\n".repeat(70_000); // 1.07 MiB
    repo.write("dist/bundle.js", &bundle);
    repo.write("dist/small.js", "console.log(2);\n");
    let c = client(&sb, &repo);
    let out =
        c.tool_ok("ast-grep-search", json!({ "pattern": "console.log($A)", "lang": "javascript", "path": "dist" }));
    assert_eq!(out.data["total"], 1, "{}", out.text);
    assert!(out.text.contains("dist/small.js:1: console.log(2)"), "{}", out.text);
    // The bundle is not counted as searched.
    assert_eq!(out.data["filesSearched"], 1, "{}", out.data);
    assert!(out.text.contains("1 match in 1 javascript file searched"), "{}", out.text);
    assert!(
        out.text.contains("not searched: dist/bundle.js (1120000 bytes, over the limit of 1048576: the structural tools parse files of up to 1 MiB)"),
        "{}",
        out.text
    );
    // Named directly, the same.
    let out = c.tool_ok(
        "ast-grep-search",
        json!({ "pattern": "console.log($A)", "lang": "javascript", "path": "dist/bundle.js" }),
    );
    assert_eq!(out.data["total"], 0, "{}", out.text);
    assert_eq!(out.data["skipped"].as_array().map(Vec::len), Some(1), "{}", out.data);
    let out = c.tool_ok(
        "ast-grep-replace",
        json!({ "pattern": "console.log($A)", "rewrite": "log($A)", "lang": "javascript", "path": "dist", "dryRun": false }),
    );
    assert!(out.text.contains("not searched: dist/bundle.js"), "{}", out.text);
    assert_eq!(read(&repo, "dist/bundle.js"), bundle);
    assert_eq!(read(&repo, "dist/small.js"), "log(2);\n");
}

/// Rewrites sent at once on one connection all land: each reads and writes under the
/// root's edit lock. Before, each read the file before the others wrote it, and only the
/// last rename's content was left (a review: 10 said `[APPLIED]`, 5 were in the file).
#[test]
fn rewrites_sent_at_once_all_land() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let n = 10;
    let text: String = (0..n).map(|i| format!("v{i} = {i}\n")).collect();
    repo.write("many.py", &text);
    let c = client(&sb, &repo);
    let ids: Vec<i64> = (0..n)
        .map(|i| {
            let input = json!({ "pattern": format!("v{i} = {i}"), "rewrite": format!("v{i} = {}", i + 100), "lang": "python", "dryRun": false });
            c.send_request("workspace/executeCommand", json!({ "command": "forge.ast-grep-replace", "arguments": [input] }))
        })
        .collect();
    for id in ids {
        let r = c.wait_response(id, std::time::Duration::from_secs(60));
        assert!(r["result"]["text"].as_str().is_some_and(|t| t.starts_with("[APPLIED] 1 change")), "{r}");
    }
    let want: String = (0..n).map(|i| format!("v{i} = {}\n", i + 100)).collect();
    assert_eq!(read(&repo, "many.py"), want);
}

/// A rewrite of many files is reported within bounds: a line per file only while its
/// changes are shown, and the data's lists at most 1,000 long with their totals beside
/// them. Before, 20,000 files with long paths made a reply over 64 MiB, and an applied
/// rewrite came back as a failure (review YB).
#[test]
fn a_rewrite_of_many_files_is_reported_within_bounds() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for k in 0..1500 {
        repo.write(&format!("gen/f{k:04}.py"), "foo(1)\n");
    }
    let c = client(&sb, &repo);
    let out = c.tool_ok(
        "ast-grep-replace",
        json!({ "pattern": "foo($A)", "rewrite": "bar($A)", "lang": "python", "dryRun": false }),
    );
    assert!(out.text.starts_with("[APPLIED] 1500 changes written to 1500 files."), "{:.300}", out.text);
    assert_eq!(out.text.matches(": 1 change\n").count(), 200, "{:.300}", out.text);
    assert!(out.text.contains("… (the first 200 of 1500 changes shown, in 200 of 1500 files)"), "{:.300}", out.text);
    assert_eq!(out.data["files"].as_array().map(Vec::len), Some(1000));
    assert_eq!(out.data["filesTotal"], json!(1500));
    assert_eq!(read(&repo, "gen/f1499.py"), "bar(1)\n");
}

/// A rewrite whose files would hold more than 256 MiB is refused (dry run or not) as its
/// replacements are made, not once they are all in memory: a short pattern's matches
/// multiply a long rewrite.
#[test]
fn a_rewrite_too_large_to_hold_is_refused() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let ones = vec!["1"; 3000].join(",");
    repo.write("gen.py", &format!("x = [{ones}]\n"));
    let c = client(&sb, &repo);
    let rewrite = "2".repeat(100_000);
    for dry in [true, false] {
        let e = c.tool_err(
            "ast-grep-replace",
            json!({ "pattern": "1", "rewrite": rewrite, "lang": "python", "dryRun": dry }),
        );
        assert_eq!(e.code, 1006, "{e}");
        assert!(
            e.message.contains("would hold more than 256 MiB (reached at gen.py)")
                && e.message.contains("nothing was written"),
            "{e}"
        );
    }
    assert_eq!(read(&repo, "gen.py"), format!("x = [{ones}]\n"));
    // One that fits is shown in part: its report stops at 256 KiB of changes (200 changes
    // of this rewrite were a reply of 20 MB).
    let out = c.tool_ok("ast-grep-replace", json!({ "pattern": "1", "rewrite": "3".repeat(10_000), "lang": "python" }));
    assert!(out.text.len() < 300 << 10, "{} bytes", out.text.len());
    assert!(out.text.contains("… (the first 27 of 3000 changes shown, in 1 of 1 files)"), "{:.300}", out.text);
    // One change alone is cut where the report is full (a `$A` → `$A$A` of a 1 MB match
    // was a 3.3 MB reply).
    repo.write("big.py", &format!("y = [{}]\n", "7,".repeat(100_000)));
    let out = c.tool_ok(
        "ast-grep-replace",
        json!({ "pattern": "y = $A", "rewrite": "y = $A + $A", "lang": "python", "path": "big.py" }),
    );
    assert!(out.text.len() < 300 << 10, "{} bytes", out.text.len());
    assert!(out.text.contains("… (this change is cut here: the report shows 256 KiB of changes)"), "{:.300}", out.text);
    assert!(out.text.starts_with("[DRY RUN] 1 change in 1 file would be made"), "{:.300}", out.text);
    std::fs::remove_file(repo.path.join("big.py")).unwrap();
    // A smaller one goes through.
    let out =
        c.tool_ok("ast-grep-replace", json!({ "pattern": "1", "rewrite": "22", "lang": "python", "dryRun": false }));
    assert!(out.text.starts_with("[APPLIED] 3000 changes"), "{}", out.text);
}

/// A match on a very long line is shown cut after 500 bytes (as grep shows such a line),
/// and a very long match is kept in `data` cut after 8 KiB with its whole length; before,
/// 40 copies of one minified 589 KB line made a 23 MB reply.
#[test]
fn a_match_on_a_minified_line_is_shown_cut() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let args: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
    let line = format!("foo([{}]);\n", args.join(","));
    for i in 0..5 {
        repo.write(&format!("min/m{i}.js"), &line);
    }
    let c = client(&sb, &repo);
    let out = c.tool_ok("ast-grep-search", json!({ "pattern": "foo($A)", "lang": "js", "path": "min" }));
    assert_eq!(out.data["total"], 5, "{}", out.text);
    assert!(out.text.len() < 5 * 600 + 200, "{} bytes", out.text.len());
    assert!(out.text.contains("min/m0.js:1: foo([0,1,2,"), "{}", &out.text[..300]);
    let m = &out.data["matches"][0];
    assert_eq!(m["text"].as_str().unwrap().len(), 8 * 1024, "{m}");
    assert_eq!(m["textCut"], json!(line.trim_end().len() - 1), "the whole match's length: {m}");
}

/// Review YO: a write holds one descriptor per folder of the files it stages, and a rewrite
/// over more folders than the soft open-files limit failed ("Too many open files") however
/// it was retried. The server raises its soft limit to the hard one; an apply-patch over as
/// many folders works the same way.
#[test]
fn a_rewrite_over_more_folders_than_the_soft_open_files_limit_is_written() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for i in 0..300 {
        repo.write(&format!("d{i}/a.js"), "foo(1);\n");
    }
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "folders"]);
    let input = json!({ "pattern": "foo($A)", "rewrite": "bar($A)", "lang": "js", "dryRun": false });
    let out = sb.call("ast-grep-replace").input(input).cwd(&repo.path).soft_open_files(128).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(read(&repo, "d0/a.js"), "bar(1);\n");
    assert_eq!(read(&repo, "d299/a.js"), "bar(1);\n");
    let patch: String = (0..300).map(|i| format!("*** Update File: d{i}/a.js\n@@\n-bar(1);\n+baz(1);\n")).collect();
    let out = sb
        .call("apply-patch")
        .input(json!({ "patch": format!("*** Begin Patch\n{patch}*** End Patch\n") }))
        .cwd(&repo.path)
        .soft_open_files(128)
        .run();
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(read(&repo, "d299/a.js"), "baz(1);\n");
}
