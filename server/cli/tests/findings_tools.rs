//! `forge.review-write`, `forge.review-read` and `forge.review-delete` through the LSP
//! (FORGE-REFERENCE.md §2.6–2.8, §5; PROTOCOL.md §3, §6, §8): section scoping in a running
//! sectioned loop, reads of other loops, deletes outside loops, bad input, and the
//! audit-attempt history.

mod common;
mod findings_support;

use std::path::Path;

use common::*;
use findings_support::*;
use serde_json::{json, Value};

#[track_caller]
fn assert_error(e: &RpcError, code: i64, kind: &str) {
    assert_eq!(e.code, code, "{e}");
    assert_eq!(e.kind(), Some(kind), "{e}");
}

/// The `(file, line, sectionIndex)` of a review-read's findings, in order.
fn listed(data: &Value) -> Vec<(String, i64, Option<i64>)> {
    data["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings in {data}"))
        .iter()
        .map(|f| {
            (
                f["file"].as_str().expect("file").to_string(),
                f["line"].as_i64().expect("line"),
                f["sectionIndex"].as_i64(),
            )
        })
        .collect()
}

fn lines_of(data: &Value) -> Vec<i64> {
    listed(data).into_iter().map(|(_, l, _)| l).collect()
}

/// A running sectioned loop (`total_sections` 3, current section 1, auditing) whose
/// current session is `session`.
fn running_sectioned_loop(sb: &Sandbox, repo: &GitRepo, name: &str, session: &str) {
    let wt = sb.mkdir(&format!("worktrees/{name}"));
    insert_loop(
        &sb.db(),
        &LoopRow {
            project: &repo.root_commit,
            name,
            status: "running",
            phase: "auditing",
            session,
            project_dir: &repo.path,
            worktree_dir: &wt,
            total_sections: 3,
            current_section: 1,
        },
    );
}

fn completed_loop(sb: &Sandbox, repo: &GitRepo, name: &str) {
    let wt = sb.mkdir(&format!("worktrees/{name}"));
    insert_loop(
        &sb.db(),
        &LoopRow {
            project: &repo.root_commit,
            name,
            status: "completed",
            phase: "coding",
            session: &format!("ses_{name}"),
            project_dir: &repo.path,
            worktree_dir: &wt,
            total_sections: 2,
            current_section: 1,
        },
    );
}

// --- 6. scoping -----------------------------------------------------------------------------------

#[test]
fn section_scoping_in_a_running_sectioned_loop() {
    let (sb, repo) = setup();
    sb.ensure_db();
    let session = "ses_scope_auditor";
    running_sectioned_loop(&sb, &repo, "sect-loop", session);
    completed_loop(&sb, &repo, "old-loop");
    let db = sb.db();
    insert_finding(&db, &repo.root_commit, "old-loop", "src/old.rs", 4, Some(0), "bug", "old bug");
    insert_finding(&db, &repo.root_commit, "old-loop", "src/old.rs", 9, None, "warning", "old warning");

    let c = connect(&sb, Init::new(&repo.path).agent("auditor-loop").session(session));
    assert_eq!(c.session_id(), session);
    let f = "src/s.rs";

    // Default: the current section.
    let out = c.tool_ok("review-write", json!({ "file": f, "line": 10, "severity": "bug", "description": "current" }));
    assert_eq!(out.text, "Stored review finding at src/s.rs:10 (bug) for section 1");
    assert_eq!(out.data["finding"]["sectionIndex"], json!(1));
    assert_eq!(out.data["finding"]["loopName"], json!("sect-loop"));

    // crossSection wins over sectionIndex: no section.
    let out = c.tool_ok(
        "review-write",
        json!({ "file": f, "line": 11, "severity": "warning", "description": "cross",
                "crossSection": true, "sectionIndex": 2 }),
    );
    assert_eq!(out.text, "Stored review finding at src/s.rs:11 (warning)");
    assert_eq!(out.data["finding"]["sectionIndex"], Value::Null);

    // Explicit sections: integers within 0..=2 (2.0 counts as an integer).
    let e = c.tool_err(
        "review-write",
        json!({ "file": f, "line": 12, "severity": "bug", "description": "x", "sectionIndex": 1.5 }),
    );
    assert_error(&e, 1006, "invalid");
    assert_eq!(e.message, "Invalid sectionIndex 1.5: must be an integer.");
    // The offered schemas say so too (they said "number", which let 1.5 pass a client's check).
    let offers = c.tool_ok("tools", json!({})).data;
    for tool in ["review-write", "review-delete"] {
        let offer = offers["tools"].as_array().unwrap().iter().find(|o| o["name"] == tool).unwrap();
        assert_eq!(offer["inputSchema"]["properties"]["sectionIndex"]["type"], json!(["integer", "null"]), "{tool}");
    }
    for bad in [json!(3), json!(-1), json!(24)] {
        let e = c.tool_err(
            "review-write",
            json!({ "file": f, "line": 12, "severity": "bug", "description": "x", "sectionIndex": bad }),
        );
        assert_error(&e, 1006, "invalid");
        assert_eq!(e.message, format!("Invalid sectionIndex {bad}: must be between 0 and 2."));
    }
    let out = c.tool_ok(
        "review-write",
        json!({ "file": f, "line": 12, "severity": "bug", "description": "earlier", "sectionIndex": 0 }),
    );
    assert_eq!(out.text, "Stored review finding at src/s.rs:12 (bug) for section 0");
    let out = c.tool_ok(
        "review-write",
        json!({ "file": f, "line": 13, "severity": "bug", "description": "later", "sectionIndex": 2 }),
    );
    assert_eq!(out.data["finding"]["sectionIndex"], json!(2));
    let out = c.tool_ok(
        "review-write",
        json!({ "file": f, "line": 14, "severity": "bug", "description": "later too", "sectionIndex": 2.0 }),
    );
    assert_eq!(out.data["finding"]["sectionIndex"], json!(2));

    // Default read: the current and earlier sections plus cross-section, not later ones.
    let read = c.tool_ok("review-read", json!({}));
    assert_eq!(listed(&read.data), [(f.into(), 10, Some(1)), (f.into(), 11, None), (f.into(), 12, Some(0))]);
    assert!(read.text.starts_with("3 review findings:\n\n- **src/s.rs:10**"), "{}", read.text);
    assert_contains(&read.text, "  - Loop: sect-loop\n  - Section: 1");
    assert_eq!(lines_of(&c.tool_ok("review-read", json!({ "allSections": true })).data), [10, 11, 12, 13, 14]);
    assert_eq!(lines_of(&c.tool_ok("review-read", json!({ "crossSection": true })).data), [11]);
    assert_eq!(lines_of(&c.tool_ok("review-read", json!({ "pattern": "^later" })).data), Vec::<i64>::new());
    assert_eq!(lines_of(&c.tool_ok("review-read", json!({ "allSections": true, "pattern": "^later" })).data), [13, 14]);

    // An explicit loopName reads that loop, completed ones included, every section.
    let old = c.tool_ok("review-read", json!({ "loopName": "old-loop" }));
    assert_eq!(listed(&old.data), [("src/old.rs".into(), 4, Some(0)), ("src/old.rs".into(), 9, None)]);
    assert_contains(&old.text, "  - Loop: old-loop");
    // A name that names no loop reads none (Forge's `listByLoopName`; FORGE-REFERENCE §2.7).
    let none = c.tool_ok("review-read", json!({ "loopName": "no-such-loop" }));
    assert_eq!(none.text, "No review findings found.");

    // Delete in the loop: the current section by default, another by sectionIndex.
    let e = c.tool_err("review-delete", json!({ "file": f, "line": 13 }));
    assert_error(&e, 1002, "not_found");
    assert_eq!(e.message, "No review finding found at src/s.rs:13");
    let del = c.tool_ok("review-delete", json!({ "file": f, "line": 13, "sectionIndex": 2 }));
    assert_eq!(del.text, "Deleted review finding at src/s.rs:13");
    let del = c.tool_ok("review-delete", json!({ "file": f, "line": 11, "crossSection": true }));
    assert_eq!(del.data["deleted"], json!(1));
    assert_eq!(lines_of(&c.tool_ok("review-read", json!({ "allSections": true })).data), [10, 12, 14]);
}

/// One file has one spelling: `./a.txt`, `a.txt/`, `src/../a.txt` and the file's absolute
/// path in the project are all `a.txt`, for writes (a second one is a duplicate), reads and
/// deletes. Before, each was a finding of its own, published twice on one line, and one
/// written as `./a.txt` over LSP could not be deleted from the shell (which said `a.txt`).
#[test]
fn a_finding_file_has_one_spelling() {
    let (sb, repo) = setup();
    let c = connect(&sb, Init::new(&repo.path));
    let out =
        c.tool_ok("review-write", json!({ "file": "./src/a.rs", "line": 3, "severity": "bug", "description": "d" }));
    assert_eq!(out.data["finding"]["file"], json!("src/a.rs"), "{}", out.data);
    let abs = repo.path.join("src/a.rs").display().to_string();
    // Out of the root and back in by `..`: the same file.
    let around = format!("../{}/src/a.rs", repo.path.file_name().unwrap().to_str().unwrap());
    // An editor's `file:` URI names the file too (review Z: it was stored as `file:/…`).
    let uri = format!("file://{}", abs.replace(' ', "%20"));
    for spelling in ["src/a.rs", "src/a.rs/", "src/../src/a.rs", abs.as_str(), around.as_str(), uri.as_str()] {
        let e = c.tool_err(
            "review-write",
            json!({ "file": spelling, "line": 3, "severity": "bug", "description": "again" }),
        );
        assert_error(&e, 1003, "conflict");
    }
    let read = c.tool_ok("review-read", json!({ "file": abs }));
    assert_eq!(listed(&read.data), [("src/a.rs".to_string(), 3, None)]);
    // The shell names it from a subdirectory.
    std::fs::create_dir_all(repo.path.join("src")).unwrap();
    let out = sb.call("review-read").input(json!({ "file": "a.rs" })).cwd(&repo.path.join("src")).run();
    assert!(out.stdout.contains("src/a.rs:3"), "{out:?}");
    c.tool_ok("review-delete", json!({ "file": "./src//a.rs", "line": 3 }));
    assert_eq!(listed(&c.tool_ok("review-read", json!({})).data), []);
    // A finding stored before keys were normalised keeps its spelling: a delete that names
    // it (as its diagnostic's quick fix does) removes that one, not the keyed one beside it.
    c.tool_ok("review-write", json!({ "file": "src/a.rs", "line": 4, "severity": "bug", "description": "keyed" }));
    insert_finding(&sb.db(), &repo.root_commit, "", "./src/a.rs", 4, None, "bug", "old spelling");
    c.tool_ok("review-delete", json!({ "file": "./src/a.rs", "line": 4 }));
    let left = c.tool_ok("review-read", json!({})).data;
    assert_eq!(left["findings"].as_array().map(Vec::len), Some(1), "{left}");
    assert_eq!(left["findings"][0]["description"], json!("keyed"), "{left}");
    c.tool_ok("review-delete", json!({ "file": "src/a.rs", "line": 4 }));
    // A path outside the project keeps its spelling (normalised).
    let out = c.tool_ok(
        "review-write",
        json!({ "file": "/elsewhere/./b.rs", "line": 1, "severity": "warning", "description": "d" }),
    );
    assert_eq!(out.data["finding"]["file"], json!("/elsewhere/b.rs"));
}

/// Review YK: more spellings of one file, and what a spelling may decode to.
#[test]
fn every_spelling_of_a_file_is_one_key_through_every_front_end() {
    let (sb, repo) = setup();
    let c = connect(&sb, Init::new(&repo.path));
    c.tool_ok("review-write", json!({ "file": "src/a.rs", "line": 3, "severity": "bug", "description": "d" }));
    let abs = repo.path.join("src/a.rs").display().to_string();
    let uri = format!("file://{}", abs.replace(' ', "%20"));
    // `forge-lsp call` with a `file:` URI, from the root and from a subdirectory (it was
    // joined to the working directory: `file:/…`, `src/file:/…`).
    std::fs::create_dir_all(repo.path.join("src")).unwrap();
    // RFC 8089's `file:/path` and an upper-case scheme too (reviews YL, YN).
    let short = format!("file:{}", abs.replace(' ', "%20"));
    let upper = uri.replacen("file://", "FILE://", 1);
    for cwd in [repo.path.clone(), repo.path.join("src")] {
        for spelling in [&uri, &short, &upper] {
            let input = json!({ "file": spelling, "line": 3, "severity": "bug", "description": "again" });
            let out = sb.call("review-write").input(input).cwd(&cwd).run();
            assert!(out.stderr.contains("already exists at src/a.rs:3"), "{spelling}: {out:?}");
        }
    }
    // Through a link to the project (the editor opened it as `link/`): the same file.
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("link");
    std::os::unix::fs::symlink(&repo.path, &link).unwrap();
    for spelling in [link.join("src/a.rs").display().to_string(), format!("file://{}/src/a.rs", link.display())] {
        let e =
            c.tool_err("review-write", json!({ "file": spelling, "line": 3, "severity": "bug", "description": "x" }));
        assert_error(&e, 1003, "conflict");
    }
    let read = c.tool_ok("review-read", json!({ "file": link.join("src/a.rs") }));
    assert_eq!(listed(&read.data), [("src/a.rs".to_string(), 3, None)]);
    // The root, however spelled, is `.`.
    let out = c.tool_ok("review-write", json!({ "file": repo.path, "line": 1, "severity": "bug", "description": "r" }));
    assert_eq!(out.data["finding"]["file"], json!("."), "{}", out.data);
    let e = c.tool_err("review-write", json!({ "file": ".", "line": 1, "severity": "bug", "description": "r" }));
    assert_error(&e, 1003, "conflict");
    // A URI decodes to exactly its bytes: not UTF-8, or a NUL byte, is refused naming `file`.
    for (bad, why) in [
        (format!("file://{}/bad%FF.rs", repo.path.display()), "not UTF-8"),
        (format!("file://{}/n%00ul.rs", repo.path.display()), "NUL"),
    ] {
        let e = c.tool_err("review-write", json!({ "file": bad, "line": 1, "severity": "bug", "description": "x" }));
        assert_error(&e, -32602, "invalid_params");
        assert!(e.message.contains("`file`") && e.message.contains(why), "{e}");
    }
    // The key is bounded, not only the input: `../` leads to a longer absolute path.
    let long = format!("../{}", "x".repeat(4093));
    let e = c.tool_err("review-write", json!({ "file": long, "line": 1, "severity": "bug", "description": "x" }));
    assert_error(&e, -32602, "invalid_params");
    assert!(e.message.contains("4096-byte limit"), "{e}");
    // A blank `file` from a subdirectory is refused, as from the root.
    let out = sb
        .call("review-write")
        .input(json!({ "file": "  ", "line": 1, "severity": "bug", "description": "x" }))
        .cwd(&repo.path.join("src"))
        .run();
    assert!(out.stderr.contains("non-empty path"), "{out:?}");
    // A folder without a commit (the shared project `global`), named through a link and
    // directly: one key, its resolved path (review YL).
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("a.rs"), "x\n").unwrap();
    let plain_link = links.path().join("plain");
    std::os::unix::fs::symlink(plain.path(), &plain_link).unwrap();
    let input = json!({ "file": "a.rs", "line": 1, "severity": "bug", "description": "g" });
    connect(&sb, Init::new(&plain_link)).tool_ok("review-write", input.clone());
    let e = connect(&sb, Init::new(plain.path())).tool_err("review-write", input);
    assert_error(&e, 1003, "conflict");
}

#[test]
fn review_delete_outside_a_loop_removes_every_section_at_that_line() {
    let (sb, repo) = setup();
    sb.ensure_db();
    let session = "ses_scope_loop";
    running_sectioned_loop(&sb, &repo, "sect-loop", session);
    let auditor = connect(&sb, Init::new(&repo.path).agent("auditor-loop").session(session));
    let user = connect(&sb, Init::new(&repo.path));
    let f = "src/m.rs";

    // Outside a loop an explicit sectionIndex is kept as given; write-once per section.
    for s in [json!(0), json!(1), json!(5)] {
        let out = user.tool_ok(
            "review-write",
            json!({ "file": f, "line": 5, "severity": "bug", "description": "d", "sectionIndex": s }),
        );
        assert_eq!(out.data["finding"]["sectionIndex"], s);
        assert_eq!(out.data["finding"]["loopName"], Value::Null);
    }
    write_bug(&user, f, 5);
    write_bug(&user, f, 6);
    let e = user.tool_err(
        "review-write",
        json!({ "file": f, "line": 5, "severity": "warning", "description": "again", "sectionIndex": 1 }),
    );
    assert_error(&e, 1003, "conflict");
    // The same file:line in the loop is another identity.
    write_bug(&auditor, f, 5);

    let del = user.tool_ok("review-delete", json!({ "file": f, "line": 5 }));
    // Forge's text whatever the count; the count is in the data.
    assert_eq!(del.text, "Deleted review finding at src/m.rs:5");
    assert_eq!(del.data["deleted"], json!(4));
    assert_eq!(lines_of(&user.tool_ok("review-read", json!({})).data), [6]);
    // The loop's finding at that line is untouched.
    assert_eq!(listed(&auditor.tool_ok("review-read", json!({})).data), [(f.into(), 5, Some(1))]);
    let e = user.tool_err("review-delete", json!({ "file": f, "line": 5 }));
    assert_error(&e, 1002, "not_found");

    // The user naming the running sectioned loop (current section 1) deletes every
    // section's finding at that line, not only the current section's.
    let out = auditor.tool_ok(
        "review-write",
        json!({ "file": f, "line": 5, "severity": "bug", "description": "earlier", "sectionIndex": 0 }),
    );
    assert_eq!(out.data["finding"]["sectionIndex"], json!(0));
    let del = user.tool_ok("review-delete", json!({ "file": f, "line": 5, "loopName": "sect-loop" }));
    assert_eq!(del.data["deleted"], json!(2));
    assert_eq!(listed(&auditor.tool_ok("review-read", json!({ "allSections": true })).data), []);
    // A sectionIndex still narrows it.
    write_bug(&auditor, f, 7);
    let e = user.tool_err("review-delete", json!({ "file": f, "line": 7, "loopName": "sect-loop", "sectionIndex": 0 }));
    assert_error(&e, 1002, "not_found");
    let del =
        user.tool_ok("review-delete", json!({ "file": f, "line": 7, "loopName": "sect-loop", "sectionIndex": 1 }));
    assert_eq!(del.data["deleted"], json!(1));
}

// --- 7. bad input ---------------------------------------------------------------------------------

#[test]
fn bad_review_input_is_rejected_and_the_server_stays_up() {
    let (sb, repo) = setup();
    let mut c = connect(&sb, Init::new(&repo.path));

    let e = c.tool_err("review-write", json!({ "line": 1, "severity": "bug", "description": "d" }));
    assert_error(&e, -32602, "invalid_params");
    assert_contains(&e.message, "file");
    // Lines are 1 to 2^31, the last line an LSP position names (the offered schema says so):
    // a larger one would be published on that line anyway, and past 2^53 a JavaScript
    // client would not read it back exactly.
    for line in [0, -5, (1_i64 << 31) + 1, (1_i64 << 53) + 1] {
        let e =
            c.tool_err("review-write", json!({ "file": "a.rs", "line": line, "severity": "bug", "description": "d" }));
        assert_error(&e, -32602, "invalid_params");
        assert_contains(&e.message, &format!("line {line}"));
    }
    let offers = c.tool_ok("tools", json!({})).data;
    let write = offers["tools"].as_array().unwrap().iter().find(|t| t["name"] == "review-write").unwrap().clone();
    let line = &write["inputSchema"]["properties"]["line"];
    assert_eq!((line["minimum"].clone(), line["maximum"].clone()), (json!(1), json!(2147483648_i64)), "{write}");
    let e =
        c.tool_err("review-write", json!({ "file": "a.rs", "line": 1, "severity": "critical", "description": "d" }));
    assert_error(&e, -32602, "invalid_params");
    assert_contains(&e.message, "severity");
    for bad in [
        json!({ "file": "", "line": 1, "severity": "bug", "description": "d" }),
        json!({ "file": "a.rs", "line": "1", "severity": "bug", "description": "d" }),
        json!({ "file": "a.rs", "line": 1.5, "severity": "bug", "description": "d" }),
        json!({ "file": "a.rs", "line": 1, "severity": "bug", "description": "d", "colour": "red" }),
    ] {
        let e = c.tool_err("review-write", bad.clone());
        assert_error(&e, -32602, "invalid_params");
    }
    let e = c.tool_err("review-delete", json!({ "line": 1 }));
    assert_error(&e, -32602, "invalid_params");
    assert_contains(&e.message, "file");
    assert_eq!(sb.db().count("SELECT count(*) FROM review_findings"), 0);

    // A 1 MB description is stored verbatim.
    let big: String = (0..1_000_000 / 10).map(|i| format!("{:09}\n", i)).collect::<String>() + "é 😀 end";
    assert!(big.len() > 1_000_000);
    let out =
        c.tool_ok("review-write", json!({ "file": "big.rs", "line": 1, "severity": "warning", "description": big }));
    assert_eq!(out.data["finding"]["description"].as_str().map(str::len), Some(big.len()));
    let read = c.tool_ok("review-read", json!({ "file": "big.rs" }));
    assert_eq!(read.data["findings"][0]["description"].as_str(), Some(big.as_str()));

    // Paths outside the project are stored as absolute paths (a `..` out of the root is
    // resolved from the root, as the shell's call names it); the server never reads them,
    // so their diagnostics have the range 0..0 even though the files exist and have content.
    let outside = tempfile::tempdir().expect("tempdir");
    let secret = outside.path().canonicalize().expect("canonical").join("secret.rs");
    std::fs::write(&secret, "let secret = \"outside the project\";\n").expect("write");
    let secret_file = secret.display().to_string();
    let passwd = "../../etc/passwd";
    let mark = c.mark();
    let passwd_stored = lexical(&repo.path.join(passwd)).display().to_string();
    for (file, stored) in [(passwd, passwd_stored.as_str()), (secret_file.as_str(), secret_file.as_str())] {
        let out =
            c.tool_ok("review-write", json!({ "file": file, "line": 1, "severity": "bug", "description": "outside" }));
        assert_eq!(out.data["finding"]["file"], json!(stored));
    }
    let read = c.tool_ok("review-read", json!({ "file": passwd }));
    assert_eq!(read.data["findings"][0]["file"], json!(passwd_stored));
    let passwd_uri = file_uri(&lexical(&repo.path.join(passwd)));
    let secret_uri = file_uri(&secret);
    for uri in [&passwd_uri, &secret_uri] {
        let d = expect_count(&c, mark, uri, 1);
        assert_eq!(range(&d[0]), (0, 0, 0, 0), "{uri}: {}", d[0]);
    }
    // A file inside the project with the same content does get its line measured.
    std::fs::copy(&secret, repo.path.join("inside.rs")).expect("copy");
    let mark = c.mark();
    write_bug(&c, "inside.rs", 1);
    let d = expect_count(&c, mark, &uri_in(&repo.path, "inside.rs"), 1);
    assert_eq!(range(&d[0]).3, utf16_len("let secret = \"outside the project\";"));
    // A symlink inside the project that points outside is not followed either.
    std::os::unix::fs::symlink(&secret, repo.path.join("link.rs")).expect("symlink");
    let mark = c.mark();
    write_bug(&c, "link.rs", 1);
    let d = expect_count(&c, mark, &uri_in(&repo.path, "link.rs"), 1);
    assert_eq!(range(&d[0]), (0, 0, 0, 0), "{}", d[0]);
    assert!(!Path::new(&lexical(&repo.path.join(passwd))).starts_with(&repo.path));

    // A line past the end of the file, and the last one LSP positions can express
    // (`uinteger`, at most 2^31 - 1, so line 2^31): stored as given, published 0..0 on it.
    std::fs::write(repo.path.join("short.rs"), "one\ntwo\n").expect("write");
    let mark = c.mark();
    let past = write_bug(&c, "short.rs", 100)["id"].as_i64().expect("id");
    let far = write_bug(&c, "short.rs", 1 << 31)["id"].as_i64().expect("id");
    let d = expect_count(&c, mark, &uri_in(&repo.path, "short.rs"), 2);
    assert_eq!(range(&by_id(&d, past)), (99, 0, 99, 0));
    let last = i32::MAX as u64;
    assert_eq!(range(&by_id(&d, far)), (last, 0, last, 0));
    assert_eq!(by_id(&d, far)["data"]["line"], json!(1_i64 << 31));

    // Duplicates.
    let e = c.tool_err("review-write", json!({ "file": "big.rs", "line": 1, "severity": "bug", "description": "dup" }));
    assert_error(&e, 1003, "conflict");
    assert!(e.message.starts_with("Finding already exists at big.rs:1."), "{e}");
    let e = c.tool_err("review-write", json!({ "file": passwd, "line": 1, "severity": "bug", "description": "dup" }));
    assert_error(&e, 1003, "conflict");
    // The message names the file as it is stored.
    assert!(e.message.starts_with(&format!("Finding already exists at {passwd_stored}:1.")), "{e}");

    // Still serving.
    write_bug(&c, "after.rs", 1);
    assert!(c.is_alive(), "the server died{}", c.diagnostics());
    assert!(c.shutdown_exit().is_some_and(|(s, _)| s.success()));
}

// --- 10. audit-attempt history ------------------------------------------------------------------

#[test]
fn review_read_pages_through_the_attempt_history() {
    let (sb, repo) = setup();
    sb.ensure_db();
    let session = "ses_attempts_auditor";
    running_sectioned_loop(&sb, &repo, "att-loop", session);
    let db = sb.db();
    let p = repo.root_commit.as_str();
    // Seven attempts: sections 0, 1, 0, 1, 1, 1, 1 (ids ascending).
    let mut all = vec![];
    let mut of_section1 = vec![];
    let mut numbers = [0i64; 2];
    for s in [0i64, 1, 0, 1, 1, 1, 1] {
        numbers[s as usize] += 1;
        let id = insert_attempt(&db, p, "att-loop", s, numbers[s as usize], "ses_coder");
        all.push(id);
        if s == 1 {
            of_section1.push(id);
        }
    }

    let user = connect(&sb, Init::new(&repo.path));
    let ids = |data: &Value| -> Vec<i64> {
        data["attempts"].as_array().expect("attempts").iter().map(|a| a["id"].as_i64().expect("id")).collect()
    };

    // Newest page first, oldest → newest within the page; nextBeforeId pages back.
    let mut seen = vec![];
    let mut before: Option<i64> = None;
    let mut pages = 0;
    loop {
        let mut input = json!({ "attempts": true, "loopName": "att-loop", "limit": 3 });
        if let Some(b) = before {
            input["beforeId"] = json!(b);
        }
        let out = user.tool_ok("review-read", input);
        let page = ids(&out.data);
        assert!(!page.is_empty() && page.len() <= 3, "{}", out.data);
        assert!(page.windows(2).all(|w| w[0] < w[1]), "ascending within a page: {page:?}");
        let parsed: Value = serde_json::from_str(&out.text).expect("the text is the JSON of data");
        assert_eq!(parsed, out.data);
        seen.splice(0..0, page.iter().copied());
        pages += 1;
        match out.data["nextBeforeId"].as_i64() {
            Some(n) => {
                assert_eq!(Some(n), page.first().copied());
                before = Some(n);
            }
            None => {
                assert_eq!(out.data["nextBeforeId"], Value::Null);
                break;
            }
        }
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(seen, all);
    assert_eq!(pages, 3);

    let first = user.tool_ok("review-read", json!({ "attempts": true, "loopName": "att-loop", "limit": 1 }));
    let a = &first.data["attempts"][0];
    assert_eq!(a["id"], json!(all[6]));
    assert_eq!(a["loopName"], json!("att-loop"));
    assert_eq!(a["scope"], json!("section:1"));
    assert_eq!(a["sectionIndex"], json!(1));
    assert_eq!(a["attemptNumber"], json!(5));
    assert_eq!(a["outcome"], json!("dirty"));
    assert_eq!(a["coderDecisions"], json!("decisions of section 1 attempt 5"));
    assert_eq!(first.data["nextBeforeId"], json!(all[6]));

    // From the loop's session: the current section's attempts, or all with allSections.
    let auditor = connect(&sb, Init::new(&repo.path).agent("auditor-loop").session(session));
    assert_eq!(ids(&auditor.tool_ok("review-read", json!({ "attempts": true })).data), of_section1);
    assert_eq!(ids(&auditor.tool_ok("review-read", json!({ "attempts": true, "allSections": true })).data), all);

    // Rejections.
    for (extra, field) in [
        (json!({ "file": "a.rs" }), "file"),
        (json!({ "pattern": "x" }), "pattern"),
        (json!({ "crossSection": true }), "crossSection"),
    ] {
        let mut input = json!({ "attempts": true, "loopName": "att-loop" });
        for (k, v) in extra.as_object().expect("object") {
            input[k] = v.clone();
        }
        let e = user.tool_err("review-read", input);
        assert_error(&e, -32602, "invalid_params");
        assert_eq!(e.message, format!("attempts cannot be combined with {field}."));
    }
    for (k, v) in [("limit", json!(0)), ("limit", json!(101)), ("beforeId", json!(0)), ("beforeId", json!(-2))] {
        let mut input = json!({ "attempts": true, "loopName": "att-loop" });
        input[k] = v;
        let e = user.tool_err("review-read", input);
        assert_error(&e, -32602, "invalid_params");
        assert_contains(&e.message, k);
    }
    // limit pages findings too (findings_paging.rs); out of range it is invalid.
    let e = user.tool_err("review-read", json!({ "limit": 0 }));
    assert_error(&e, -32602, "invalid_params");
    let e = user.tool_err("review-read", json!({ "attempts": true }));
    assert_error(&e, 1002, "not_found");
    let e = user.tool_err("review-read", json!({ "attempts": true, "loopName": "nope" }));
    assert_error(&e, 1002, "not_found");
}

// --- who may write and delete (PROTOCOL.md §5) ----------------------------------------------------

#[test]
fn review_writing_and_deleting_is_for_auditors_and_the_user() {
    let (sb, repo) = setup();
    let user = connect(&sb, Init::new(&repo.path));
    write_bug(&user, "src/p.rs", 1);
    for agent in ["code", "architect", "minion"] {
        let c = connect(&sb, Init::new(&repo.path).agent(agent));
        let e =
            c.tool_err("review-write", json!({ "file": "src/p.rs", "line": 2, "severity": "bug", "description": "d" }));
        assert_error(&e, 1001, "denied");
        assert_contains(&e.message, "review-write");
        assert_contains(&e.message, agent);
        let e = c.tool_err("review-delete", json!({ "file": "src/p.rs", "line": 1 }));
        assert_error(&e, 1001, "denied");
        // Reading stays available.
        assert_eq!(lines_of(&c.tool_ok("review-read", json!({})).data), [1]);
    }
    let auditor = connect(&sb, Init::new(&repo.path).agent("auditor"));
    write_bug(&auditor, "src/p.rs", 2);
    // Naming a loop to delete in is the user's extension.
    completed_loop(&sb, &repo, "done");
    insert_finding(&sb.db(), &repo.root_commit, "done", "src/p.rs", 1, None, "bug", "loop finding");
    let e = auditor.tool_err("review-delete", json!({ "file": "src/p.rs", "line": 1, "loopName": "done" }));
    assert_error(&e, 1001, "denied");
    let del = user.tool_ok("review-delete", json!({ "file": "src/p.rs", "line": 1, "loopName": "done" }));
    assert_eq!(del.data["deleted"], json!(1));
    assert_eq!(lines_of(&user.tool_ok("review-read", json!({})).data), [1, 2]);
}

/// A cancelled built-in call runs to the end and is answered with its result: its write is
/// committed whole, so answering "cancelled" would be wrong. 300 writes sent at once, then
/// a cancel for each: every write stored is answered as stored, none is answered
/// -32800 while it was stored.
#[test]
fn cancelling_a_built_in_write_never_hides_that_it_was_stored() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let ids: Vec<i64> = (0..300)
        .map(|i| {
            c.send_request(
                "workspace/executeCommand",
                json!({ "command": "forge.review-write", "arguments": [{ "file": format!("c{i}.rs"), "line": 1, "severity": "bug", "description": "cancelled?" }] }),
            )
        })
        .collect();
    // The cancels arrive while the writes are queued, committing or answered.
    std::thread::sleep(std::time::Duration::from_millis(1));
    for id in &ids {
        c.notify("$/cancelRequest", json!({ "id": id }));
    }
    let mut stored_replies = 0;
    for id in ids {
        let r = c.wait_response(id, WAIT);
        if r.get("result").is_some() {
            stored_replies += 1;
        } else {
            assert_eq!(r["error"]["code"], json!(-32800), "{r}");
        }
    }
    let page = c.tool_ok("review-read", json!({ "limit": 1000 }));
    let stored = page.data["findings"].as_array().unwrap().len();
    assert_eq!(stored, stored_replies, "every stored write was answered as stored");
}

/// A page of findings also ends at 16 MiB of finding text: three findings of 7 MiB come as
/// a page of two and a page of one (one page of all three made a reply of over 42 MB, and
/// nine 8 MiB findings one over the 64 MiB message limit). Their diagnostics are cut.
#[test]
fn a_page_of_large_findings_stays_under_the_message_limit() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let since = c.mark();
    let big = |ch: char| ch.to_string().repeat(7 << 20);
    for (line, ch) in [(1, 'a'), (2, 'b'), (3, 'c')] {
        c.tool_ok("review-write", json!({ "file": "big.rs", "line": line, "severity": "bug", "description": big(ch) }));
    }
    let first = c.tool_ok("review-read", json!({}));
    assert_eq!(lines_of(&first.data), [2, 3], "the two newest");
    let next = first.data["nextBeforeId"].as_i64().expect("a next page");
    assert!(first.text.contains(&format!("beforeId: {next}")));
    let second = c.tool_ok("review-read", json!({ "beforeId": next }));
    assert_eq!(lines_of(&second.data), [1]);
    assert_eq!(second.data["nextBeforeId"], Value::Null);
    // A pattern search pages the same way, newest first (review YK: it read every finding
    // in scope before paging; now each is tested as it is read).
    let hits = c.tool_ok("review-read", json!({ "pattern": "^(a|c)", "limit": 1 }));
    assert_eq!(lines_of(&hits.data), [3]);
    let next = hits.data["nextBeforeId"].as_i64().expect("a next page of hits");
    let rest = c.tool_ok("review-read", json!({ "pattern": "^(a|c)", "limit": 1, "beforeId": next }));
    assert_eq!(lines_of(&rest.data), [1]);
    assert_eq!(rest.data["nextBeforeId"], Value::Null);
    // The diagnostics of the file carry each description cut, saying so.
    let uri = file_uri(&repo.path.join("big.rs"));
    let d = c
        .wait_diagnostics_since(since, &uri, std::time::Duration::from_secs(30), |d| d.len() == 3)
        .expect("the file's three diagnostics");
    for x in &d {
        let m = x["message"].as_str().unwrap();
        assert!(m.len() < 20_000 && m.contains("forge.review-read shows it whole"), "{}", &m[m.len() - 100..]);
    }
}

/// One file's diagnostics are one message: past 32 MiB of message text (as JSON, escapes
/// counted) its further findings are published with a short message naming them, so the
/// message stays under 64 MiB (360 findings of 16 KiB of control characters made 70 MB).
#[test]
fn one_files_diagnostics_stay_under_the_message_limit() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let since = c.mark();
    let text = "\u{1}".repeat(16 * 1024);
    for line in 1..=360 {
        c.tool_ok(
            "review-write",
            json!({ "file": "many.rs", "line": line, "severity": "bug", "description": text, "scenario": text }),
        );
    }
    let uri = file_uri(&repo.path.join("many.rs"));
    let d = c
        .wait_diagnostics_since(since, &uri, std::time::Duration::from_secs(60), |d| d.len() == 360)
        .expect("the file's 360 diagnostics");
    let size = serde_json::to_string(&d).unwrap().len();
    assert!(size < 64 << 20, "{size} bytes");
    let short = d.iter().filter(|x| x["message"].as_str().unwrap().contains("too large to publish whole")).count();
    assert!(short > 0 && short < 360, "{short} short messages");
}

/// A file whose findings' diagnostics would pass the 64 MiB message limit even with short
/// messages (each diagnostic's `data` names the file: 4000 control characters are 24 KB
/// on the wire, and 3,001 findings made about 72 MB): the publication leaves the last ones
/// out and ends with a note that counts them. Before, the whole 72 MB went out.
#[test]
fn a_publication_that_would_pass_the_limit_leaves_findings_out_and_says_so() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let file = "\u{1}".repeat(4000);
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    c.tool_ok("review-write", json!({ "file": file, "line": 1, "severity": "bug", "description": "d" }));
    c.shutdown_exit();
    // 3,000 more on the same file, written behind the server's back, then a new server.
    let db = rusqlite::Connection::open(sb.db_path()).unwrap();
    db.execute_batch(
        "WITH RECURSIVE n(k) AS (SELECT 2 UNION ALL SELECT k + 1 FROM n WHERE k < 3001)
         INSERT INTO review_findings (project_id, loop_name, file, line, section_index, severity, description, created_at)
         SELECT f.project_id, f.loop_name, f.file, n.k, f.section_index, f.severity, f.description, f.created_at
         FROM review_findings f, n",
    )
    .unwrap();
    drop(db);
    let mut c = sb.stdio();
    let since = c.mark();
    c.init(&Init::new(&repo.path));
    let uri = file_uri(&repo.path.join(&file));
    let d = c
        .wait_diagnostics_since(since, &uri, std::time::Duration::from_secs(60), |d| !d.is_empty())
        .expect("the file's diagnostics");
    let size = serde_json::to_string(&d).unwrap().len();
    assert!(size < 64 << 20, "{size} bytes");
    let note = d.last().unwrap();
    let left_out: usize = note["message"].as_str().unwrap().split(' ').next().unwrap().parse().expect("a count");
    assert!(note["message"].as_str().unwrap().contains("more findings on this file"), "{note}");
    assert_eq!(note.get("data"), None, "{note}");
    assert!(left_out > 0, "{note}");
    assert_eq!(d.len() - 1 + left_out, 3001);
    c.shutdown_exit();
}

/// `forge-lsp call` shows a terminal the result without escape sequences or bidirectional
/// controls (a finding's description set the terminal's title and cleared it: review XF);
/// a pipe gets it as stored.
#[test]
fn call_shows_a_terminal_no_escape_sequences() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let hostile = "desc \u{1b}]0;PWNED\u{7}\u{1b}[2J\u{1b}[31mRED\u{202e}evil";
    let out = sb
        .call("review-write")
        .input(json!({ "file": "src/x.rs", "line": 3, "severity": "bug", "description": hostile }))
        .cwd(&repo.path)
        .agent("user")
        .run();
    assert_eq!(out.code, 0, "{out:?}");
    let piped = sb.call("review-read").input(json!({})).cwd(&repo.path).run();
    assert_contains(&piped.stdout, hostile);
    // The same call in a terminal (`script` gives it one).
    let plain = sb.command();
    let line = format!(
        "{} --data-dir '{}' call review-read '{{}}'",
        plain.get_program().to_string_lossy(),
        sb.data_dir.display()
    );
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"]).current_dir(&repo.path).env_clear();
    for (k, v) in plain.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    let shown = run_process(cmd, None, std::time::Duration::from_secs(30));
    assert_eq!(shown.code, 0, "{shown:?}");
    assert_contains(&shown.stdout, "Description: desc RED");
    assert!(!shown.stdout.contains('\u{1b}') && !shown.stdout.contains('\u{202e}'), "{:?}", shown.stdout);
}
