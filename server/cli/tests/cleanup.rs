//! `forge-lsp cleanup plans|loop` and the terminal-loop sweep at the first connection: the
//! real binary on a temporary data directory and real git repositories.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::json;

const DAY: i64 = 86_400_000;

/// `forge-lsp --data-dir <data> cleanup <args…>` run in `cwd`.
fn cleanup(sb: &Sandbox, cwd: &Path, args: &[&str]) -> CallOutput {
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).arg("cleanup").args(args).current_dir(cwd);
    run_process(cmd, None, CALL_TIMEOUT)
}

fn ok(out: &CallOutput) -> &str {
    assert_eq!(out.code, 0, "cleanup failed: {out:?}");
    &out.stdout
}

/// The lines starting with `prefix`, without it.
fn lines_with<'a>(stdout: &'a str, prefix: &str) -> Vec<&'a str> {
    stdout.lines().filter_map(|l| l.strip_prefix(prefix)).collect()
}

/// Lines reporting what stays (`kept: …`, `absent: …`, `note: …`).
fn notes(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.starts_with("kept: ") || l.starts_with("absent: ") || l.starts_with("note: ")).collect()
}

/// Adds a loop the way a loop start leaves it: a worktree `<data>/worktrees/<name>` on a new
/// `branch`, the loop row, its loop plan, a section, a coder session, a transition and a
/// review finding. Returns the worktree directory.
fn add_loop(sb: &Sandbox, repo: &GitRepo, name: &str, status: &str, branch: &str) -> PathBuf {
    let dir = sb.data_dir.join("worktrees").join(name);
    std::fs::create_dir_all(dir.parent().expect("parent")).expect("worktrees dir");
    repo.git(&["worktree", "add", "-q", "-b", branch, &dir.display().to_string()]);
    let db = sb.db();
    let mut f = LoopFixture::running(&repo.root_commit, name, &format!("{name}-coder"), &repo.path);
    f.status = status.into();
    f.worktree_dir = dir.display().to_string();
    f.total_sections = 1;
    db.insert_loop(&f);
    let p = &repo.root_commit;
    let completed_at = (status != "running").then(|| now_ms() - 60_000);
    let n = db
        .conn
        .execute(
            "UPDATE loops SET worktree_branch = ?3, completed_at = ?4 WHERE project_id = ?1 AND loop_name = ?2",
            rusqlite::params![p, name, branch, completed_at],
        )
        .expect("update loop");
    assert_eq!(n, 1);
    for sql in [
        "INSERT INTO plans (project_id, loop_name, content, created_at, updated_at) VALUES (?1, ?2, '# plan', 1, 1)",
        "INSERT INTO section_plans (project_id, loop_name, section_index, title, content, created_at)
         VALUES (?1, ?2, 0, 'Phase 1', 'body', 1)",
        "INSERT INTO loop_transitions (project_id, loop_name, event_type, transition_kind, from_phase, iteration, created_at)
         VALUES (?1, ?2, 'start', 'start', 'coding', 1, 1)",
        "INSERT INTO review_findings (project_id, loop_name, file, line, severity, description, created_at)
         VALUES (?1, ?2, 'src/lib.rs', 3, 'bug', 'off by one', 1)",
    ] {
        db.conn.execute(sql, rusqlite::params![p, name]).expect(sql);
    }
    db.insert_loop_session(&format!("{name}-coder"), p, name, "coder", "token");
    dir
}

/// Everything a cleanup may touch: every table's rows, the worktree directories, the
/// branches and the worktree registrations.
fn snapshot(sb: &Sandbox, repo: &GitRepo) -> String {
    let db = sb.db();
    let mut out = String::new();
    for (t, order) in [
        ("loops", "project_id, loop_name"),
        ("plans", "id"),
        ("review_findings", "id"),
        ("section_plans", "project_id, loop_name, section_index"),
        ("loop_sessions", "session_id"),
        ("loop_transitions", "id"),
    ] {
        let mut st = db.conn.prepare(&format!("SELECT * FROM {t} ORDER BY {order}")).expect("select");
        let cols = st.column_count();
        let rows = st
            .query_map([], |r| (0..cols).map(|i| r.get::<_, rusqlite::types::Value>(i)).collect::<Result<Vec<_>, _>>())
            .expect("rows")
            .collect::<Result<Vec<_>, _>>()
            .expect("rows");
        out.push_str(&format!("{t}: {rows:#?}\n"));
    }
    let worktrees = sb.data_dir.join("worktrees");
    let mut dirs: Vec<String> = std::fs::read_dir(&worktrees)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    dirs.sort();
    out.push_str(&format!("dirs: {dirs:?}\n"));
    out.push_str(&format!("branches: {}\n", repo.git(&["branch", "--list", "--format=%(refname:short)"])));
    out.push_str(&format!("worktrees: {}\n", repo.git(&["worktree", "list", "--porcelain"])));
    out
}

fn count(sb: &Sandbox, sql: &str) -> i64 {
    sb.db().count(sql)
}

fn branch_exists(repo: &GitRepo, branch: &str) -> bool {
    !repo.git(&["branch", "--list", branch]).is_empty()
}

fn setup() -> (Sandbox, GitRepo) {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    sb.ensure_db();
    (sb, repo)
}

#[test]
fn dry_run_lists_and_the_real_run_removes_exactly_that() {
    let (sb, repo) = setup();
    let p = repo.root_commit.clone();
    let wt = add_loop(&sb, &repo, "alpha", "cancelled", "forge/alpha");
    let other = add_loop(&sb, &repo, "other", "errored", "forge/other");
    let before = snapshot(&sb, &repo);

    let dry = cleanup(&sb, &repo.path, &["loop", "alpha", "--dry-run"]);
    let listed = lines_with(ok(&dry), "would remove: ");
    assert_eq!(listed.len(), 4, "{}", dry.stdout);
    assert_eq!(listed[0], format!("worktree {}", wt.display()));
    assert_eq!(listed[1], "branch forge/alpha");
    assert!(listed[2].starts_with(&format!("loop alpha (project {p}, status cancelled)")), "{}", listed[2]);
    assert!(listed[3].starts_with("loop plan of alpha (plan "), "{}", listed[3]);
    assert!(dry.stdout.contains("Dry run: 4 item(s) would be removed; nothing was removed."), "{}", dry.stdout);
    assert!(dry.stdout.contains("kept: 1 review finding(s) of loop alpha"), "{}", dry.stdout);
    assert_eq!(snapshot(&sb, &repo), before, "a dry run changes nothing");
    assert!(wt.is_dir() && branch_exists(&repo, "forge/alpha"));

    let real = cleanup(&sb, &repo.path, &["loop", "alpha"]);
    let removed = lines_with(ok(&real), "removed: ");
    assert_eq!(removed, listed, "the real run removes exactly what the dry run listed");
    assert_eq!(notes(&real.stdout), notes(&dry.stdout));
    assert!(real.stdout.contains("Removed 4 item(s)."), "{}", real.stdout);

    assert!(!wt.exists(), "worktree directory removed");
    assert!(!branch_exists(&repo, "forge/alpha"), "forge/ branch deleted");
    assert!(!repo.git(&["worktree", "list", "--porcelain"]).contains(&wt.display().to_string()));
    let q = |t: &str| count(&sb, &format!("SELECT count(*) FROM {t} WHERE loop_name = 'alpha'"));
    for t in ["loops", "plans", "section_plans", "loop_sessions", "loop_transitions"] {
        assert_eq!(q(t), 0, "{t} of alpha");
    }
    assert_eq!(q("review_findings"), 1, "review findings are kept");
    assert!(count(&sb, "SELECT count(*) FROM changes WHERE kind = 'loop' AND key = 'alpha'") >= 1, "announced");

    // The other loop is untouched.
    let q = |t: &str| count(&sb, &format!("SELECT count(*) FROM {t} WHERE loop_name = 'other'"));
    for t in ["loops", "plans", "section_plans", "loop_sessions", "loop_transitions", "review_findings"] {
        assert_eq!(q(t), 1, "{t} of other");
    }
    assert!(other.is_dir() && branch_exists(&repo, "forge/other"));

    // Nothing left under that name.
    let again = cleanup(&sb, &repo.path, &["loop", "alpha"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains(&format!("no loop named `alpha` in project {p}")), "{}", again.stderr);
}

#[test]
fn a_caller_chosen_branch_is_kept_and_reported() {
    let (sb, repo) = setup();
    let wt = add_loop(&sb, &repo, "beta", "errored", "feature/x");
    let before = snapshot(&sb, &repo);

    let dry = cleanup(&sb, &repo.path, &["loop", "beta", "--dry-run"]);
    let listed = lines_with(ok(&dry), "would remove: ");
    assert_eq!(snapshot(&sb, &repo), before);
    assert!(!listed.iter().any(|l| l.contains("feature/x")), "{listed:?}");
    assert!(dry.stdout.contains("kept: branch feature/x (chosen by the caller, not a forge/ branch"), "{}", dry.stdout);

    let real = cleanup(&sb, &repo.path, &["loop", "beta"]);
    assert_eq!(lines_with(ok(&real), "removed: "), listed);
    assert!(real.stdout.contains("kept: branch feature/x"), "{}", real.stdout);
    assert!(!wt.exists(), "the worktree is removed");
    assert!(branch_exists(&repo, "feature/x"), "the caller's branch is kept");
    repo.git(&["rev-parse", "--verify", "feature/x"]);
    assert_eq!(count(&sb, "SELECT count(*) FROM loops WHERE loop_name = 'beta'"), 0);
}

#[test]
fn a_running_loop_is_refused_unless_forced() {
    let (sb, repo) = setup();
    let wt = add_loop(&sb, &repo, "gamma", "running", "forge/gamma");
    let before = snapshot(&sb, &repo);

    for args in [&["loop", "gamma"][..], &["loop", "gamma", "--dry-run"][..]] {
        let out = cleanup(&sb, &repo.path, args);
        assert_eq!(out.code, 1, "{out:?}");
        assert!(out.stderr.contains("its status is running"), "{}", out.stderr);
        assert!(out.stderr.contains("may be running in a forge-lsp server"), "{}", out.stderr);
        assert!(out.stderr.contains("Cancel it first") && out.stderr.contains("--force"), "{}", out.stderr);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
    assert_eq!(snapshot(&sb, &repo), before, "a refused cleanup changes nothing");
    // The name spelled as a path is not a loop name: before, `./gamma` removed the running
    // loop's worktree, and `/` or `""` listed nonsense targets.
    for name in ["./gamma", "gamma/.", "gamma/../gamma", "/", "", ".", ".."] {
        for dry in [true, false] {
            let args: Vec<&str> = if dry { vec!["loop", name, "--dry-run"] } else { vec!["loop", name] };
            let out = cleanup(&sb, &repo.path, &args);
            assert_eq!(out.code, 1, "{name:?}: {out:?}");
            assert!(out.stderr.contains("is not a loop name"), "{name:?}: {}", out.stderr);
            assert!(out.stdout.is_empty(), "{name:?}: {}", out.stdout);
        }
    }
    assert!(wt.exists());
    assert_eq!(snapshot(&sb, &repo), before, "a refused cleanup changes nothing");
    // A name with no row whose forge/ branch is the running loop's (a caller may choose
    // `forge/alias` as a loop's branch): the branch is kept.
    sb.db()
        .conn
        .execute("UPDATE loops SET worktree_branch = 'forge/alias' WHERE loop_name = 'gamma'", [])
        .expect("alias");
    repo.git(&["branch", "forge/alias"]);
    let out = cleanup(&sb, &repo.path, &["loop", "alias"]);
    assert!(!out.stdout.contains("removed: branch"), "{out:?}");
    assert!(branch_exists(&repo, "forge/alias"), "{out:?}");
    sb.db()
        .conn
        .execute("UPDATE loops SET worktree_branch = 'forge/gamma' WHERE loop_name = 'gamma'", [])
        .expect("back");
    repo.git(&["branch", "-D", "forge/alias"]);

    let dry = cleanup(&sb, &repo.path, &["loop", "gamma", "--force", "--dry-run"]);
    let listed = lines_with(ok(&dry), "would remove: ");
    assert_eq!(listed.len(), 4, "{}", dry.stdout);
    assert_eq!(snapshot(&sb, &repo), before);
    let real = cleanup(&sb, &repo.path, &["loop", "gamma", "--force"]);
    assert_eq!(lines_with(ok(&real), "removed: "), listed);
    assert!(!wt.exists() && !branch_exists(&repo, "forge/gamma"));
    assert_eq!(count(&sb, "SELECT count(*) FROM loops WHERE loop_name = 'gamma'"), 0);
}

#[test]
fn the_project_is_detected_from_the_working_directory_or_given() {
    let (sb, repo) = setup();
    let p = repo.root_commit.clone();
    let wt = add_loop(&sb, &repo, "delta", "stalled", "forge/delta");
    let before = snapshot(&sb, &repo);

    // The sandbox root is no repository: project `global`.
    let out = cleanup(&sb, &sb.root, &["loop", "delta"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no loop named `delta` in project global"), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("exists in project(s) {p}: pass --project")), "{}", out.stderr);
    assert_eq!(snapshot(&sb, &repo), before);

    // With --project the repository comes from the loop row.
    let dry = cleanup(&sb, &sb.root, &["loop", "delta", "--project", &p, "--dry-run"]);
    let listed = lines_with(ok(&dry), "would remove: ");
    assert_eq!(listed.len(), 4, "{}", dry.stdout);
    let real = cleanup(&sb, &sb.root, &["loop", "delta", "--project", &p]);
    assert_eq!(lines_with(ok(&real), "removed: "), listed);
    assert!(!wt.exists() && !branch_exists(&repo, "forge/delta"));
}

#[test]
fn leftovers_of_a_loop_without_row_are_removed_by_name() {
    let (sb, repo) = setup();
    let wt = add_loop(&sb, &repo, "swept", "cancelled", "forge/swept");
    // What the TTL sweep leaves of a cancelled loop: the worktree and the branch.
    sb.db().conn.execute("DELETE FROM plans WHERE loop_name = 'swept'", []).expect("delete plan");
    sb.db().conn.execute("DELETE FROM loops WHERE loop_name = 'swept'", []).expect("delete loop");
    let before = snapshot(&sb, &repo);

    let dry = cleanup(&sb, &repo.path, &["loop", "swept", "--dry-run"]);
    let listed = lines_with(ok(&dry), "would remove: ");
    assert_eq!(listed, [format!("worktree {}", wt.display()), "branch forge/swept".to_string()]);
    assert_eq!(snapshot(&sb, &repo), before);

    // Outside the repository the worktree's repository is unknown: kept and reported.
    let outside = cleanup(&sb, &sb.root, &["loop", "swept", "--project", &repo.root_commit]);
    assert!(lines_with(ok(&outside), "removed: ").is_empty(), "{}", outside.stdout);
    assert!(outside.stdout.contains(&format!("kept: worktree {}", wt.display())), "{}", outside.stdout);
    assert_eq!(snapshot(&sb, &repo), before);
    // Named by its directory, the repository is known from anywhere.
    let dir = repo.path.display().to_string();
    let named = cleanup(&sb, &sb.root, &["loop", "swept", "--project", &dir, "--dry-run"]);
    assert_eq!(lines_with(ok(&named), "would remove: "), listed, "{}", named.stdout);

    let real = cleanup(&sb, &repo.path, &["loop", "swept"]);
    assert_eq!(lines_with(ok(&real), "removed: "), listed);
    assert!(!wt.exists() && !branch_exists(&repo, "forge/swept"));
}

fn add_plan(sb: &Sandbox, project: &str, loop_name: Option<&str>, session: Option<&str>, updated_at: i64) -> i64 {
    let db = sb.db();
    db.conn
        .execute(
            "INSERT INTO plans (project_id, loop_name, session_id, content, created_at, updated_at)
             VALUES (?1, ?2, ?3, '# plan', ?4, ?4)",
            rusqlite::params![project, loop_name, session, updated_at],
        )
        .expect("insert plan");
    db.conn.last_insert_rowid()
}

fn plan_ids(sb: &Sandbox) -> Vec<i64> {
    let db = sb.db();
    let mut st = db.conn.prepare("SELECT id FROM plans ORDER BY id").expect("prepare");
    let ids = st.query_map([], |r| r.get(0)).expect("query").collect::<Result<Vec<i64>, _>>().expect("ids");
    ids
}

/// The plan ids named by `plan <id> (` at the start of listed items.
fn listed_ids(items: &[&str]) -> Vec<i64> {
    let mut ids: Vec<i64> = items
        .iter()
        .map(|l| l.strip_prefix("plan ").and_then(|r| r.split_once(' ')).expect("plan item").0.parse().expect("id"))
        .collect();
    ids.sort();
    ids
}

#[test]
fn cleanup_plans_deletes_old_session_plans_only() {
    let (sb, repo) = setup();
    let now = now_ms();
    let (p, q) = (repo.root_commit.as_str(), "other-project");
    add_loop(&sb, &repo, "live", "completed", "forge/live");
    sb.db().conn.execute("UPDATE plans SET updated_at = ?1 WHERE loop_name = 'live'", [now - 90 * DAY]).expect("age");
    let old_p = add_plan(&sb, p, None, Some("old-session"), now - 40 * DAY);
    let new_p = add_plan(&sb, p, None, Some("new-session"), now - DAY);
    let ghost = add_plan(&sb, p, Some("ghost"), None, now - 40 * DAY);
    let old_q = add_plan(&sb, q, None, Some("old-q"), now - 31 * DAY);
    let all = plan_ids(&sb);
    let before = snapshot(&sb, &repo);

    // Dry runs: list, delete nothing.
    let dry = cleanup(&sb, &sb.root, &["plans", "--dry-run"]);
    let listed = lines_with(ok(&dry), "would delete: ");
    assert_eq!(listed_ids(&listed), {
        let mut v = vec![old_p, ghost, old_q];
        v.sort();
        v
    });
    assert!(
        dry.stdout
            .contains("Dry run: 3 plan(s) in any project not updated for 30d would be deleted; nothing was deleted."),
        "{}",
        dry.stdout
    );
    let old_line = listed.iter().find(|l| l.contains("session: old-session")).expect("old-session listed");
    assert!(old_line.contains(&format!("in project {p}, updated ")) && old_line.ends_with('Z'), "{old_line}");
    assert!(listed.iter().any(|l| l.contains("loop: ghost, whose loop no longer exists")), "{listed:?}");
    let young = cleanup(&sb, &sb.root, &["plans", "--dry-run", "--older-than", "12h", "--project", p]);
    assert_eq!(listed_ids(&lines_with(ok(&young), "would delete: ")), {
        let mut v = vec![old_p, new_p, ghost];
        v.sort();
        v
    });
    assert_eq!(snapshot(&sb, &repo), before, "dry runs change nothing");

    // One project.
    let dry_q = cleanup(&sb, &sb.root, &["plans", "--project", q, "--dry-run"]);
    let real_q = cleanup(&sb, &sb.root, &["plans", "--project", q]);
    let deleted_q = lines_with(ok(&real_q), "deleted: ");
    assert_eq!(deleted_q, lines_with(ok(&dry_q), "would delete: "));
    assert_eq!(listed_ids(&deleted_q), [old_q]);
    assert!(
        real_q.stdout.contains(&format!("Deleted 1 plan(s) in project {q} not updated for 30d.")),
        "{}",
        real_q.stdout
    );

    // Every project: exactly what a dry run lists now.
    let dry = cleanup(&sb, &sb.root, &["plans", "--dry-run"]);
    let listed = lines_with(ok(&dry), "would delete: ");
    let real = cleanup(&sb, &sb.root, &["plans"]);
    let deleted = lines_with(ok(&real), "deleted: ");
    assert_eq!(deleted, listed);
    let mut expected: Vec<i64> = all.iter().copied().filter(|i| ![old_p, ghost, old_q].contains(i)).collect();
    expected.sort();
    assert_eq!(plan_ids(&sb), expected, "the live loop's plan and the recent session plan stay");
    assert_eq!(count(&sb, "SELECT count(*) FROM plans WHERE loop_name = 'live'"), 1);
    assert!(
        count(&sb, "SELECT count(*) FROM changes WHERE kind = 'plan' AND key = 'forge://plan/session/old-session.md'")
            >= 1
    );

    // Nothing left to delete.
    let none = cleanup(&sb, &sb.root, &["plans"]);
    assert!(ok(&none).contains("Deleted 0 plan(s) in any project not updated for 30d."), "{}", none.stdout);
}

#[test]
fn cleanup_usage_errors_exit_2() {
    let sb = Sandbox::new();
    for args in [
        &["plans", "--older-than", "30"][..],
        &["plans", "--older-than", "5w"][..],
        &["plans", "--older-than", "-1d"][..],
        &["loop"][..],
        &["nothing"][..],
    ] {
        let out = cleanup(&sb, &sb.root, args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
    }
    // Without a database nothing is created.
    let out = cleanup(&sb, &sb.root, &["plans"]);
    assert!(ok(&out).contains("No database at"), "{}", out.stdout);
    assert!(!sb.db_path().exists());
    let out = cleanup(&sb, &sb.root, &["loop", "x"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(!sb.db_path().exists());
    // A loop name may start with `-` (review YU: `-rf-force` was a usage error).
    let out = cleanup(&sb, &sb.root, &["loop", "-rf-force", "--dry-run"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no loop named `-rf-force`"), "{out:?}");
}

#[test]
fn the_first_connection_sweeps_expired_terminal_loops_of_its_project() {
    let (sb, repo) = setup();
    let p = repo.root_commit.clone();
    let old = now_ms() - 10 * DAY;
    let cancelled_wt = add_loop(&sb, &repo, "old-cancelled", "cancelled", "forge/old-cancelled");
    add_loop(&sb, &repo, "old-completed", "completed", "forge/old-completed");
    add_loop(&sb, &repo, "recent", "errored", "forge/recent");
    add_loop(&sb, &repo, "running", "running", "forge/running");
    {
        let db = sb.db();
        db.conn
            .execute(
                "UPDATE loops SET completed_at = ?1 WHERE loop_name IN ('old-cancelled', 'old-completed', 'running')",
                [old],
            )
            .expect("age");
        let mut f = LoopFixture::running("other-project", "foreign", "foreign-coder", &repo.path);
        f.status = "completed".into();
        db.insert_loop(&f);
        db.conn.execute("UPDATE loops SET completed_at = ?1 WHERE loop_name = 'foreign'", [old]).expect("age");
    }
    let names = || -> Vec<String> {
        let db = sb.db();
        let mut st = db.conn.prepare("SELECT loop_name FROM loops ORDER BY loop_name").expect("prepare");
        let v = st.query_map([], |r| r.get(0)).expect("q").collect::<Result<Vec<String>, _>>().expect("names");
        v
    };

    // completedLoopTtlMs = 0 disables the sweep.
    {
        let mut c = sb.stdio();
        c.init(&Init::new(&repo.path).config(json!({ "completedLoopTtlMs": 0 })));
        c.shutdown_exit();
    }
    assert_eq!(names(), ["foreign", "old-cancelled", "old-completed", "recent", "running"]);

    // The default TTL (7 days) in a new server: swept at initialize.
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    assert_eq!(names(), ["foreign", "recent", "running"], "only this project's expired terminal loops");
    let q = |t: &str, n: &str| {
        count(&sb, &format!("SELECT count(*) FROM {t} WHERE project_id = '{p}' AND loop_name = '{n}'"))
    };
    for n in ["old-cancelled", "old-completed"] {
        for t in ["plans", "section_plans", "loop_sessions", "loop_transitions"] {
            assert_eq!(q(t, n), 0, "{t} of {n}");
        }
        assert_eq!(q("review_findings", n), 1, "findings of {n} are kept");
    }
    assert!(cancelled_wt.is_dir(), "a restartable loop's worktree is preserved");
    assert!(branch_exists(&repo, "forge/old-cancelled"));
    // The user is told which stopped loop left the list with its work still on disk (the
    // completed one has none left; before, nothing was said).
    let told = c
        .wait_notification(std::time::Duration::from_secs(10), |r| {
            r.method() == "window/showMessage"
                && r.params()["message"].as_str().is_some_and(|m| m.contains("taken off the loop list"))
        })
        .expect("told of the swept loop's worktree");
    let message = told.params()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains(&format!("old-cancelled (cancelled, {})", cancelled_wt.display()))
            && !message.contains("old-completed")
            && message.contains("forge-lsp cleanup loop <name>")
            && message.starts_with("forge-lsp: 1 stopped loop not restarted within completedLoopTtlMs (7 days) was"),
        "{message}"
    );
    assert_eq!(told.params()["type"], json!(3), "Info");
    c.shutdown_exit();
}

/// The first connection also sweeps the agents' files (prompts, CLI session ids, usage
/// logs) older than the TTL whose session is not a stored loop's: a loop swept at the same
/// initialize takes its files with it; a running loop's old files stay. Before, every
/// turn's prompt stayed in the data directory for good.
#[test]
fn the_first_connection_sweeps_old_agent_files_of_gone_sessions() {
    let (sb, repo) = setup();
    add_loop(&sb, &repo, "old-cancelled", "cancelled", "forge/old-cancelled");
    add_loop(&sb, &repo, "running", "running", "forge/running");
    sb.db()
        .conn
        .execute("UPDATE loops SET completed_at = ?1 WHERE loop_name = 'old-cancelled'", [now_ms() - 10 * DAY])
        .expect("age");
    let aged = |rel: &str, days: u64| write_aged(&sb.data_dir.join(rel), "prompt", days);
    let gone = [
        aged("prompts/old-cancelled/old-cancelled-coder-1.md", 10),
        aged("agent-sessions/old-cancelled-coder.id", 10),
        aged("usage/old-cancelled-coder.jsonl", 10),
        aged("prompts/sessions/ses_outside-1.md", 10),
    ];
    let kept = [
        aged("prompts/running/running-coder-1.md", 10),
        aged("agent-sessions/running-coder.id", 10),
        aged("prompts/sessions/ses_recent-1.md", 1),
    ];
    // completedLoopTtlMs = 0: nothing.
    {
        let mut c = sb.stdio();
        c.init(&Init::new(&repo.path).config(json!({ "completedLoopTtlMs": 0 })));
        c.shutdown_exit();
    }
    assert!(gone.iter().chain(&kept).all(|p| p.exists()));
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let swept = wait_for(std::time::Duration::from_secs(20), || (!gone.iter().any(|p| p.exists())).then_some(()));
    assert!(swept.is_some(), "not swept: {:?}", gone.iter().filter(|p| p.exists()).collect::<Vec<_>>());
    assert!(kept.iter().all(|p| p.exists()), "{kept:?}");
    assert!(!sb.data_dir.join("prompts/old-cancelled").exists(), "its emptied directory goes too");
    c.shutdown_exit();
}

/// The first user connection's `completedLoopTtlMs` holds for the server's life: with 0 it
/// keeps everything, and a later connection to the same server with the default sweeps
/// nothing either (before, it swept the agents' files the first had asked to keep).
#[test]
fn a_first_connection_with_ttl_0_keeps_the_agents_files_for_the_servers_life() {
    let (sb, repo) = setup();
    let old = write_aged(&sb.data_dir.join("prompts/sessions/ses_01JOUTSIDE00000000000000000-1.md"), "prompt", 10);
    let server = sb.listen_unix(&sb.root.join("s/forge.sock"));
    let mut first = server.connect();
    first.init(&Init::new(&repo.path).config(json!({ "completedLoopTtlMs": 0 })));
    let mut second = server.connect();
    second.init(&Init::new(&repo.path));
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(old.exists(), "a later connection swept what the first kept");
    first.shutdown_exit();
    second.shutdown_exit();
}

/// `cleanup loop` also removes the loop's attempt snapshot refs (`refs/forge/<name>/…`) and
/// no other loop's.
#[test]
fn cleanup_loop_removes_the_attempt_snapshot_refs() {
    let (sb, repo) = setup();
    add_loop(&sb, &repo, "alpha", "cancelled", "forge/alpha");
    let head = repo.git(&["rev-parse", "HEAD"]).trim().to_string();
    repo.git(&["update-ref", "refs/forge/alpha/attempts/section-0-1", &head]);
    repo.git(&["update-ref", "refs/forge/alpha/attempts/section-0-2", &head]);
    repo.git(&["update-ref", "refs/forge/alphabet/attempts/plan-1", &head]);
    let dry = cleanup(&sb, &repo.path, &["loop", "alpha", "--dry-run"]);
    let listed = lines_with(ok(&dry), "would remove: ");
    assert!(listed.contains(&"2 attempt snapshot ref(s) refs/forge/alpha/"), "{}", dry.stdout);
    let real = cleanup(&sb, &repo.path, &["loop", "alpha"]);
    assert_eq!(lines_with(ok(&real), "removed: "), listed);
    let refs = repo.git(&["for-each-ref", "--format=%(refname)", "refs/forge/"]);
    assert_eq!(refs.trim(), "refs/forge/alphabet/attempts/plan-1", "only alpha's refs are gone");
}

/// The `.forge/view/` copies of a loop's sections go with the loop (and with sections it
/// no longer has): before, `cleanup loop` left every `section/<k>.md` behind while the
/// status, history and plan copies went.
#[test]
fn cleanup_loop_removes_the_copies_of_its_sections() {
    use std::os::unix::fs::PermissionsExt;
    let (sb, repo) = setup();
    add_loop(&sb, &repo, "views", "cancelled", "forge/views");
    let mut v = sb.stdio_with(|c| {
        c.arg("--data-dir").arg(&sb.data_dir);
    });
    v.init(&Init::new(&repo.path).text_document_content(false));
    // Copies as a connection writes them (read-only): the loop's one section, and one of a
    // section the loop no longer has (a plan-adjust removed it).
    let dir = repo.path.canonicalize().unwrap().join(".forge/view/loop/views");
    std::fs::create_dir_all(dir.join("section")).unwrap();
    for (f, text) in [("section/0.md", "# Section 1/1: Phase 1\n"), ("section/3.md", "# Section 4/4: gone\n")] {
        std::fs::write(dir.join(f), text).unwrap();
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    ok(&cleanup(&sb, &repo.path, &["loop", "views"]));
    let gone =
        wait_for(WAIT, || (!dir.join("section/0.md").exists() && !dir.join("section/3.md").exists()).then_some(()));
    assert!(gone.is_some(), "left: {:?}", walk_names(&dir));
    assert!(!repo.path.join(".forge/rejected").exists(), "nothing was taken for a user's edit");
    v.shutdown_exit();
}

/// `cleanup loop` holds the loop's lock from its decision to its last removal, as restarts
/// and cancels do: while another process holds it (here the test, standing in for a
/// restart in progress), the cleanup waits and removes nothing; when the holder has made
/// the loop run again meanwhile, the cleanup sees it and refuses. Before, it decided
/// without the lock and removed the restarted loop's worktree and branch.
#[test]
fn cleanup_loop_waits_for_a_restart_holding_the_loop_lock() {
    let (sb, repo) = setup();
    let p = repo.root_commit.clone();
    let wt = add_loop(&sb, &repo, "rc", "cancelled", "forge/rc");
    let lock = forge_engine::loop_lock::acquire_blocking(&sb.data_dir, &p, "rc", std::time::Duration::ZERO)
        .expect("the test takes the loop lock");
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).args(["cleanup", "loop", "rc"]).current_dir(&repo.path);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn cleanup");
    // Until the cleanup waits for the lock: the kernel lists it as a blocked flock waiter.
    let waiting = format!(" {} ", child.id());
    let deadline = std::time::Instant::now() + WAIT;
    while !std::fs::read_to_string("/proc/locks")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("->") && l.contains("FLOCK") && l.contains(&waiting))
    {
        assert!(std::time::Instant::now() < deadline, "the cleanup never waited for the loop lock");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(wt.is_dir() && branch_exists(&repo, "forge/rc"), "nothing is removed while the lock is held");
    // The "restart": the loop runs again before the lock is let go.
    let n = sb
        .db()
        .conn
        .execute("UPDATE loops SET status = 'running', completed_at = NULL WHERE loop_name = 'rc'", [])
        .expect("update");
    assert_eq!(n, 1);
    drop(lock);
    let out = child.wait_with_output().expect("cleanup ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("running"), "{stderr}");
    assert!(wt.is_dir() && branch_exists(&repo, "forge/rc"), "the restarted loop keeps its worktree and branch");
    assert_eq!(count(&sb, "SELECT count(*) FROM loops WHERE loop_name = 'rc'"), 1);
}

/// `--project` takes the project's directory as well as its id (as `call --project` and
/// `mcp --project` do); a path that is not a directory is refused. Before, a directory was
/// taken for an id and the cleanup said there was nothing to clean.
#[test]
fn cleanup_project_takes_a_directory_or_an_id() {
    let (sb, repo) = setup();
    let p = repo.root_commit.clone();
    add_plan(&sb, &p, None, Some("ses_old"), now_ms() - 40 * DAY);
    let dir = repo.path.display().to_string();
    let dry = cleanup(&sb, &sb.root, &["plans", "--project", &dir, "--dry-run"]);
    assert!(ok(&dry).contains(&format!("Dry run: 1 plan(s) in project {p}")), "{}", dry.stdout);
    let by_id = cleanup(&sb, &sb.root, &["plans", "--project", &p, "--dry-run"]);
    assert!(ok(&by_id).contains("Dry run: 1 plan(s)"), "{}", by_id.stdout);
    let missing = cleanup(&sb, &sb.root, &["plans", "--project", "/no/such/dir", "--dry-run"]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(missing.stderr.contains("no such directory"), "{}", missing.stderr);
}

fn walk_names(d: &Path) -> Vec<String> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.display().to_string());
            if p.is_dir() {
                out.extend(walk_names(&p));
            }
        }
    }
    out
}

/// When the connection that sweeps shows nothing (a `forge-lsp call` through a server), the
/// notice of stopped loops taken off the list waits for the project's next editor, and a
/// TTL of less than a day is named as such (it said "0 days").
#[test]
fn the_sweep_notice_of_a_call_reaches_the_next_editor() {
    let (sb, repo) = setup();
    let wt = add_loop(&sb, &repo, "old-errored", "errored", "forge/old-errored");
    sb.db()
        .conn
        .execute("UPDATE loops SET completed_at = ?1 WHERE loop_name = 'old-errored'", [now_ms() - 10 * DAY])
        .expect("age");
    sb.write_user_config("completedLoopTtlMs = 3600000\n");
    let server = sb.listen_unix(&sb.root.join("s/forge.sock"));
    let out = sb.call("loop-status").input(json!({})).cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stdout.contains("old-errored"), "swept by the call's connection: {out:?}");
    let mut c = server.connect();
    c.init(&Init::new(&repo.path));
    let told = c
        .wait_notification(std::time::Duration::from_secs(10), |r| {
            r.method() == "window/showMessage"
                && r.params()["message"].as_str().is_some_and(|m| m.contains("taken off the loop list"))
        })
        .unwrap_or_else(|| panic!("not told: {:?}", c.notifications_of("window/showMessage")));
    let message = told.params()["message"].as_str().unwrap();
    assert!(message.contains("(1h 0m)"), "{message}");
    assert!(message.contains(&format!("old-errored (errored, {})", wt.display())), "{message}");
    // Told once.
    let mut again = server.connect();
    again.init(&Init::new(&repo.path));
    std::thread::sleep(QUIET);
    assert!(
        again.notifications_of("window/showMessage").iter().all(|m| !m.to_string().contains("taken off the loop list")),
        "told twice"
    );
}
