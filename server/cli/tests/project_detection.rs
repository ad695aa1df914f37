//! Project detection on a long history (docs/performance.md, "Project detection"): the id
//! is the oldest root commit, found once by a walk of the whole history and then kept in
//! `<git common dir>/forge-lsp-root`, shared by the repository's worktrees. What is
//! asserted is behaviour (the id, the cache written, a second detection answered from the
//! cache), not timing.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

/// Commits in the generated history.
const COMMITS: usize = 20_000;

/// A repository whose `main` is a line of [`COMMITS`] commits written with `git
/// fast-import`, plus an unrelated one-commit branch `other` (a second, newer root commit
/// that is not reachable from `main`). Returns the repository and the root of `other`.
fn long_history() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::Builder::new().prefix("flhist").tempdir().expect("tempdir");
    let path = dir.path().canonicalize().expect("canonical");
    git(&path, &["init", "-q", "-b", "main"]);
    // The directory name makes this fixture's root commit (the project id) unique.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut stream = Vec::with_capacity(COMMITS * 120);
    let readme = format!("# long history {name}\n");
    write!(stream, "blob\nmark :1\ndata {}\n{readme}\n", readme.len()).unwrap();
    for i in 1..=COMMITS {
        let msg = format!("commit {i}");
        write!(
            stream,
            "commit refs/heads/main\nmark :{}\ncommitter Forge Test <test@forge.invalid> {} +0000\ndata {}\n{msg}\n",
            i + 1,
            1_600_000_000 + i,
            msg.len()
        )
        .unwrap();
        if i == 1 {
            stream.extend_from_slice(b"M 100644 :1 README.md\n");
        } else {
            writeln!(stream, "from :{i}").unwrap();
        }
    }
    let msg = format!("an unrelated root {name}");
    write!(
        stream,
        "commit refs/heads/other\nmark :{}\ncommitter Forge Test <test@forge.invalid> 1700000000 +0000\ndata {}\n{msg}\n",
        COMMITS + 2,
        msg.len()
    )
    .unwrap();
    stream.extend_from_slice(b"done\n");
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet", "--done"])
        .current_dir(&path)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    child.stdin.take().expect("stdin").write_all(&stream).expect("write the stream");
    assert!(child.wait().expect("wait").success(), "git fast-import failed");
    git(&path, &["checkout", "-q", "main"]);
    let other = git(&path, &["rev-parse", "other"]);
    (dir, path, other)
}

/// The project id of the session's plan in the database.
fn plan_project(sb: &Sandbox, session: &str) -> String {
    sb.db()
        .conn
        .query_row("SELECT project_id FROM plans WHERE session_id = ?1", [session], |r| r.get(0))
        .unwrap_or_else(|e| panic!("no plan of {session}: {e}"))
}

/// `forge-lsp call plan-write` (in-process: no server runs) as `session` from `dir`.
fn write_plan(sb: &Sandbox, dir: &Path, session: &str) {
    let out = sb.call("plan-write").input(json!({ "content": format!("# {session}") })).session(session).cwd(dir).run();
    assert_eq!(out.code, 0, "{out:?}");
}

fn cache_lines(repo: &Path) -> Vec<String> {
    std::fs::read_to_string(repo.join(".git/forge-lsp-root"))
        .expect("the root cache is written")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_long_history_is_walked_once_then_answered_from_the_shared_cache() {
    let (_dir, repo, other_root) = long_history();
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let roots = git(&repo, &["rev-list", "--max-parents=0", "HEAD"]);
    assert_eq!(roots.lines().count(), 1, "{roots}");
    let root = roots.trim().to_string();
    assert_eq!(git(&repo, &["rev-list", "--count", "HEAD"]), COMMITS.to_string());
    let sb = Sandbox::new();

    // Cold: the whole history is walked; the root and the HEAD it was found from are cached.
    write_plan(&sb, &repo, "ses_cold");
    assert_eq!(plan_project(&sb, "ses_cold"), root);
    assert_eq!(cache_lines(&repo), vec![format!("{root} {head} .")]);

    // `initialize` on the same repository: the same id.
    let mut c = sb.stdio();
    c.init(&Init::new(&repo).session("ses_init"));
    c.tool_ok("plan-write", json!({ "content": "# from the editor" }));
    assert_eq!(plan_project(&sb, "ses_init"), root);
    c.shutdown_exit();

    // A worktree on a new branch at the same commit uses the repository's cache: no cache
    // of its own, nothing rewritten.
    let wt = repo.parent().expect("parent").join(format!("{}-wt", repo.file_name().unwrap().to_string_lossy()));
    git(&repo, &["worktree", "add", "-q", "-b", "forge/wt", wt.to_str().expect("utf-8")]);
    let wt_guard = WorktreeDir(wt.clone());
    write_plan(&sb, &wt, "ses_worktree");
    assert_eq!(plan_project(&sb, "ses_worktree"), root);
    assert_eq!(cache_lines(&repo), vec![format!("{root} {head} .")]);
    assert!(!repo.join(".git/worktrees").join(wt.file_name().unwrap()).join("forge-lsp-root").exists());

    // A new commit on top: only it is walked (the walk stops at the cached HEAD); the new
    // HEAD goes first, the old one is kept.
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "on top"]);
    let head2 = git(&repo, &["rev-parse", "HEAD"]);
    write_plan(&sb, &repo, "ses_on_top");
    assert_eq!(plan_project(&sb, "ses_on_top"), root);
    assert_eq!(cache_lines(&repo), vec![format!("{root} {head2} ."), format!("{root} {head} .")]);

    // A second detection answers from the cache without walking: shown with a cache entry
    // for this HEAD that names another parentless commit (the unrelated branch's root),
    // which only the cache can produce.
    std::fs::write(repo.join(".git/forge-lsp-root"), format!("{other_root} {head2}\n")).expect("write cache");
    write_plan(&sb, &repo, "ses_cached");
    assert_eq!(plan_project(&sb, "ses_cached"), other_root, "the cached entry for HEAD is used");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo).session("ses_cached_init"));
    c.tool_ok("plan-write", json!({ "content": "# cached" }));
    assert_eq!(plan_project(&sb, "ses_cached_init"), other_root, "initialize uses the cache too");
    c.shutdown_exit();

    // An entry that is not a root commit (HEAD itself has a parent) is not trusted: the
    // history is walked again and the cache repaired.
    std::fs::write(repo.join(".git/forge-lsp-root"), format!("{head2} {head2}\n")).expect("write cache");
    write_plan(&sb, &repo, "ses_repaired");
    assert_eq!(plan_project(&sb, "ses_repaired"), root);
    assert_eq!(cache_lines(&repo), vec![format!("{root} {head2} .")]);
    drop(wt_guard);
}

/// Removes a worktree directory created next to the repository's temporary directory.
struct WorktreeDir(std::path::PathBuf);

impl Drop for WorktreeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
