//! Paths of the loop tools nothing else exercised (issue 16, item 9), over the real
//! binary: new-session mode, plan-adjust rejections, the base-commit audit scope,
//! loop.cleanupWorktree, plan-read by loop_name, and a restart that rebuilds a missing
//! worktree from its surviving branch.

mod common;
mod loop_support;

use common::{assert_contains, git, Init};
use loop_support::*;
use serde_json::json;

/// `mode: "new-session"`: one untracked agent turn in the project root with the plan as its
/// prompt. Its agent gets its session id and `FORGE_AGENT=code`, but no socket, token,
/// loop or role: its tool calls are those of a `code` agent (plan-write is refused), and
/// loop-status does not track it.
#[test]
fn new_session_mode_runs_one_code_agent_turn_outside_any_loop() {
    let t = LoopTest::start("clean", "");
    let plan = "# Standalone\n\nDo one thing.\n";
    let out = t.client.tool_ok("execute-plan", json!({ "title": "Standalone", "plan": plan, "mode": "new-session" }));
    assert!(out.text.starts_with("New session started!"), "{}", out.text);
    let session = out.data["sessionId"].as_str().expect("sessionId").to_string();
    t.wait_state_file("newsession.done");
    let env = t.state_file("newsession.env").unwrap();
    let vars: Vec<&str> = env.lines().collect();
    assert!(vars.contains(&format!("FORGE_SESSION_ID={session}").as_str()), "{env}");
    assert!(vars.contains(&"FORGE_AGENT=code"), "{env}");
    for empty in ["FORGE_SESSION_TOKEN=", "FORGE_LOOP=", "FORGE_ROLE="] {
        assert!(vars.contains(&empty), "{empty} in {env}");
    }
    assert!(!env.contains("FORGE_LSP_SOCKET="), "no private socket: {env}");
    // The open-files limit the server started with, not the one it raised to (review YR).
    assert_eq!(t.state_file("newsession.nofile").unwrap().trim(), "1000");
    let cwd = t.state_file("newsession.cwd").unwrap();
    assert_eq!(
        std::fs::canonicalize(cwd.trim()).unwrap(),
        std::fs::canonicalize(&t.repo.path).unwrap(),
        "it runs in the project root"
    );
    assert_eq!(t.state_file("prompt-1").unwrap(), plan.trim_end(), "the plan is the prompt");
    assert_eq!(t.state_file("newsession-write.code").unwrap().trim(), "1");
    assert_contains(&t.state_file("newsession-write.err").unwrap(), "code");
    let list = t.client.tool_ok("loop-status", json!({})).text;
    assert_eq!(list, "No loops found.");
    assert_eq!(t.count("SELECT count(*) FROM loop_sessions WHERE ?1 = ?1", ""), 0);
}

/// plan-adjust is refused for a coder (not the auditor), in a non-sectioned loop, for a
/// pending section that is already completed, past 24 sections, without a rationale, with a
/// title of more than one line and past the plan size limit;
/// none of the refusals changes the sections or records an amendment.
#[test]
fn plan_adjust_rejections_over_the_real_binary() {
    let t = LoopTest::start("adjustbad", "[documents]\nmaxPlanBytes = 4000\n");
    let name = t.execute("Two halves", TWO_SECTIONS);
    t.wait_state_file("prompt-2");
    let db = rusqlite::Connection::open(t.sb.db_path()).expect("open forge.db");
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    db.execute("UPDATE section_plans SET status = 'completed' WHERE loop_name = ?1 AND section_index = 1", [&name])
        .unwrap();
    t.signal("adjust-go");
    t.wait_state_file("adjust-title.code");
    db.execute("UPDATE section_plans SET status = 'pending' WHERE loop_name = ?1 AND section_index = 1", [&name])
        .unwrap();
    t.signal("adjust-end");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());

    let refused = |file: &str, text: &str| {
        assert_eq!(t.state_file(&format!("{file}.code")).unwrap().trim(), "1", "{file}");
        assert_contains(&t.state_file(&format!("{file}.err")).unwrap(), text);
    };
    // The coder (its phase is coding): not during an audit.
    refused("coder-adjust", "adjustments are only allowed during auditing (current phase: coding)");
    refused("adjust-completed", "section 1 is not pending (status=completed)");
    refused("adjust-over", "resulting total sections (25) would exceed cap 24");
    refused("adjust-blank", "rationale must not be empty");
    // A title is the section's heading: one line (before, a newline split the heading).
    refused("adjust-title", "currentSection.title must be one line");
    refused("adjust-sep", "currentSection.title must be one line");
    // The sections stay within the plan size limit (they were unbounded).
    refused("adjust-big", "the sections would hold 50");
    refused("adjust-big", "over the limit of 4000 bytes (documents.maxPlanBytes)");
    assert_eq!(t.count("SELECT count(*) FROM plan_amendments WHERE loop_name = ?1", &name), 0);
    assert_eq!(t.loop_row(&name)["totalSections"], json!(2));

    // A non-sectioned loop: no sectioned plan to adjust.
    let t2 = LoopTest::start("adjustbad", "");
    let plain = t2.execute("Plain plan", UNSECTIONED);
    assert_eq!(t2.wait_end(&plain)["status"], json!("completed"), "{}", t2.report());
    assert_eq!(t2.state_file("adjust-unsectioned.code").unwrap().trim(), "1");
    assert_contains(&t2.state_file("adjust-unsectioned.err").unwrap(), "loop has no sectioned plan");
    // Outside any audit (a user): refused as well.
    let e = t2.client.tool_err("plan-adjust", json!({ "sections": [], "rationale": "user" }));
    assert!(e.code == 1001 || e.code == 1002, "{e}");
    assert_contains(&e.message, "plan-adjust");
}

/// The audit scope: the first section's audit diffs against the loop's base commit, the
/// second's against the first section's checkpoint commit; each lists what changed.
#[test]
fn audits_scope_to_the_base_commit_then_to_the_section_checkpoint() {
    let t = LoopTest::start("clean", "");
    let name = t.execute("Two halves", TWO_SECTIONS);
    // The project's own branch moves on meanwhile: the scope stays the loop's base commit.
    t.repo.write("other.txt", "later work on main\n");
    t.repo.git(&["add", "other.txt"]);
    t.repo.git(&["commit", "-qm", "later commit on main"]);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let base = t.strings("SELECT base_commit FROM loops WHERE loop_name = ?1", &name)[0].clone();
    let cp0 = t
        .strings("SELECT checkpoint_commit FROM section_plans WHERE loop_name = ?1 AND section_index = 0", &name)[0]
        .clone();
    let first = t.state_file("prompt-2").unwrap();
    assert_contains(&first, &format!("the loop's base commit (`{base}`)"));
    assert_contains(&first, &format!("git diff {base}"));
    assert_contains(&first, "work.txt");
    assert!(!first.contains("other.txt"), "{first}");
    let second = t.state_file("prompt-4").unwrap();
    assert_contains(&second, &format!("the checkpoint commit `section 1: First half` (`{cp0}`)"));
    assert_contains(&second, &format!("git diff {cp0}"));
    assert_contains(&second, "M work.txt");
}

/// `loop.cleanupWorktree = true`: a cancelled loop's worktree is removed, its branch kept.
#[test]
fn cleanup_worktree_removes_a_cancelled_loops_worktree_and_keeps_its_branch() {
    let t = LoopTest::start("block", "[loop]\ncleanupWorktree = true\n");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_state_file("auditor.pid");
    let out = t.client.tool_ok("loop-cancel", json!({ "name": name }));
    assert_contains(&out.text, &format!("Cancelled loop \"{name}\""));
    t.assert_worktree_removed(&name);
    assert!(t.has_branch(&format!("forge/{name}")), "the branch is kept");
    assert_eq!(t.log(&format!("forge/{name}"))[0], format!("loop: {name} cancelled after 1 iteration"));
}

/// plan-read `loop_name` reads a loop's plan (completed loops too); an unknown loop is 1002.
#[test]
fn plan_read_by_loop_name() {
    let t = LoopTest::start("clean", "");
    let name = t.execute("One step", ONE_SECTION);
    assert_eq!(t.wait_end(&name)["status"], json!("completed"), "{}", t.report());
    let out = t.client.tool_ok("plan-read", json!({ "loop_name": name }));
    assert_contains(&out.text, "1: # One step");
    assert_contains(&out.text, "## Only step");
    let e = t.client.tool_err("plan-read", json!({ "loop_name": "no-such-loop" }));
    assert_eq!(e.code, 1002, "{e}");
}

/// A restart after the project was moved: the worktree's `.git` still names the old git
/// directory, and the moved repository names the worktree back, so the link is rewritten
/// and the restart goes on (before, it was accepted with the link broken and every call of
/// its agent was refused as another project's: a review). A worktree whose link names
/// another repository's place is refused, saying why.
#[test]
fn a_restart_after_the_project_moved_relinks_its_worktree() {
    let t = LoopTest::start("block", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_state_file("auditor.pid");
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
    let wt = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap());
    let moved = t.repo.path.with_file_name(format!("{}-moved", t.repo.path.file_name().unwrap().to_string_lossy()));
    std::fs::rename(&t.repo.path, &moved).expect("move the project");
    // A clone where the project was: the worktree's `commondir` (absolute, written by
    // libgit2) names its git directory now, which is not the loop's repository (a review).
    git(&moved, &["clone", "-q", moved.to_str().unwrap(), t.repo.path.to_str().unwrap()]);
    let mut c = t.sb.stdio();
    c.init(&Init::new(&moved));
    // A link no repository names back: refused, nothing changed.
    let dot_git = std::fs::read_to_string(wt.join(".git")).unwrap();
    std::fs::write(wt.join(".git"), "gitdir: /nowhere/.git/worktrees/other\n").unwrap();
    let e = c.tool_err("loop-status", json!({ "name": name, "restart": true }));
    assert_eq!(e.code, 1004, "{e}");
    assert_contains(&e.message, "names the git directory /nowhere/.git/worktrees/other, which does not exist");
    assert_eq!(t.loop_row(&name)["status"], json!("cancelled"), "nothing changed");
    std::fs::write(wt.join(".git"), dot_git).unwrap();
    // The moved project's own worktree: relinked, and the restart goes on.
    let out = c.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    assert_contains(&out.text, &format!("Restarted loop \"{name}\""));
    let linked = std::fs::read_to_string(wt.join(".git")).unwrap();
    assert!(linked.contains(&format!("{}", moved.canonicalize().unwrap().display())), "{linked}");
    assert_eq!(git(&wt, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), format!("forge/{name}"));
    let common = git(&wt, &["rev-parse", "--git-common-dir"]);
    assert_eq!(
        std::path::Path::new(common.trim()).canonicalize().unwrap(),
        moved.join(".git").canonicalize().unwrap(),
        "linked to the moved repository, not the clone"
    );
    c.tool_ok("loop-cancel", json!({ "name": name }));
    drop(c);
    std::fs::remove_dir_all(&t.repo.path).expect("remove the clone");
    std::fs::rename(&moved, &t.repo.path).expect("move the project back");
}

/// A restart whose worktree directory is gone recreates it from the surviving branch (the
/// work committed there is back) and the loop completes; with the branch gone too the
/// restart is refused (1004) and nothing changes.
#[test]
fn a_restart_rebuilds_a_missing_worktree_from_its_branch() {
    let t = LoopTest::start("block", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_state_file("auditor.pid");
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
    let wt = t.loop_row(&name)["worktreeDir"].as_str().unwrap().to_string();
    std::fs::remove_dir_all(&wt).expect("remove the worktree directory");
    let out = t.client.tool_ok("loop-status", json!({ "name": name, "restart": true }));
    assert_contains(&out.text, &format!("Restarted loop \"{name}\""));
    assert!(std::path::Path::new(&wt).join("work.txt").is_file(), "the branch's work is back");
    assert_eq!(git(std::path::Path::new(&wt), &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), format!("forge/{name}"));
    let end = t.wait_status(&name, "completed", |p| p["status"] == json!("completed"));
    assert_eq!(end["terminationReason"], json!("completed"), "{end}{}", t.report());

    // Both gone: refused.
    let t2 = LoopTest::start("block", "");
    let lost = t2.execute("Plain plan", UNSECTIONED);
    t2.wait_state_file("auditor.pid");
    t2.client.tool_ok("loop-cancel", json!({ "name": lost }));
    let wt2 = t2.loop_row(&lost)["worktreeDir"].as_str().unwrap().to_string();
    git(&t2.repo.path, &["worktree", "remove", "--force", &wt2]);
    git(&t2.repo.path, &["branch", "-D", &format!("forge/{lost}")]);
    let e = t2.client.tool_err("loop-status", json!({ "name": lost, "restart": true }));
    assert_eq!(e.code, 1004, "{e}");
    assert_eq!(
        e.message,
        format!("Cannot restart \"{lost}\": worktree directory no longer exists at {wt2} and its branch is gone.")
    );
    assert_eq!(t2.loop_row(&lost)["status"], json!("cancelled"));
    // And the status does not offer the restart it refuses.
    let status = t2.client.tool_ok("loop-status", json!({ "name": lost }));
    assert_contains(&status.text, "Restart blocked: worktree directory no longer exists at ");
    assert_contains(&status.text, " and its branch is gone.");
}

/// The non-busy stall path: when no turn is running (here: persisting the coder's handoff
/// failed, so no next turn was started) for `loop.stallTimeoutMs`, the watchdog counts a
/// stall and re-sends the phase prompt to the same session (not the busy path's continue
/// nudge); once the store works again the loop goes on normally.
#[test]
fn a_loop_with_no_turn_running_is_re_triggered_by_the_stall_watchdog() {
    let t = LoopTest::start("clean", "[loop]\nstallTimeoutMs = 1000\nmaxConsecutiveStalls = 5\n");
    let db = rusqlite::Connection::open(t.sb.db_path()).expect("open forge.db");
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    db.execute_batch(
        "CREATE TRIGGER test_fail_phase BEFORE UPDATE OF phase ON loops WHEN NEW.phase = 'auditing'
         BEGIN SELECT RAISE(ABORT, 'planted failure of the test'); END;",
    )
    .expect("plant the trigger");
    let name = t.execute("Plain plan", UNSECTIONED);
    common::wait_for(LOOP_WAIT, || {
        (t.count("SELECT stall_count FROM loops WHERE loop_name = ?1", &name) >= 1).then_some(())
    })
    .unwrap_or_else(|| panic!("no stall counted{}", t.report()));
    db.execute_batch("DROP TRIGGER test_fail_phase").expect("drop the trigger");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let turns = t.turns();
    let coders: Vec<&(String, String, u32)> = turns.iter().filter(|x| x.0 == "coder").collect();
    assert!(coders.len() >= 2, "the phase was re-triggered: {turns:?}");
    assert!(coders.iter().all(|c| c.1 == coders[0].1), "the same session: {turns:?}");
    let first = t.state_file("prompt-1").unwrap();
    assert_eq!(t.state_file("prompt-2").unwrap(), first, "the phase prompt again, not a continue nudge");
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
}
