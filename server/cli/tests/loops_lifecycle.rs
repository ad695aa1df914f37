//! Loops that run to completion: sections with a dirty audit, a non-sectioned plan,
//! plan-adjust appending a section, and the post-action phase.

mod common;
mod loop_support;

use loop_support::*;
use serde_json::{json, Value};

/// `section_plans` (index, status, attempts, summary_done, checkpoint_commit).
type SectionRow = (i64, String, i64, Option<String>, Option<String>);

/// A plan without section markers completes after one clean audit (`audit-clear`).
#[test]
fn a_plan_without_sections_completes_after_one_clean_audit() {
    let t = LoopTest::start("clean", "");
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}");
    assert_eq!(end["terminationReason"], json!("completed"));
    assert!(end["sectionIndex"].is_null() && end["totalSections"] == json!(0), "{end}");
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "terminate completed auditing->- it=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
    assert_eq!(t.roles(), ["coder", "auditor"]);
    assert_eq!(t.loop_row(&name)["auditCount"], json!(1));
    // The teardown commit keeps the coder's work on the branch; the worktree is removed.
    let branch = format!("forge/{name}");
    assert!(t.has_branch(&branch));
    assert_eq!(t.log(&branch)[0], format!("loop: {name} completed after 1 iteration"));
    t.assert_worktree_removed(&name);
}

/// Three sections; section 2's first audit writes a bug finding (no summary), the coder
/// works again, the second audit deletes the finding and hands off clean with a summary.
#[test]
fn three_sections_with_a_dirty_audit_complete_with_checkpoint_commits() {
    let t = LoopTest::start("finding", "");
    let name = t.execute("Three steps", THREE_SECTIONS);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("completed"));
    assert_eq!((end["sectionIndex"].clone(), end["totalSections"].clone()), (json!(2), json!(3)));
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1 s=0",
            "advance-section auditor-handoff auditing->coding it=1 s=0",
            "rotate coder-handoff coding->auditing it=2 s=1",
            "rotate auditor-handoff auditing->coding it=2 s=1",
            "rotate coder-handoff coding->auditing it=3 s=1",
            "advance-section auditor-handoff auditing->coding it=3 s=1",
            "rotate coder-handoff coding->auditing it=4 s=2",
            "terminate completed auditing->- it=4 s=2 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
    assert_eq!(t.roles(), ["coder", "auditor", "coder", "auditor", "coder", "auditor", "coder", "auditor"]);
    // A new section starts fresh sessions; within section 2 the dirty audit resumes the
    // section's coder, and the re-audit resumes its auditor (the standby session).
    let s: Vec<String> = t.turns().into_iter().map(|t| t.1).collect();
    assert_eq!((&s[4], &s[5]), (&s[2], &s[3]), "section 2 reuses its sessions: {s:?}");
    let distinct: std::collections::HashSet<&String> = s.iter().collect();
    assert_eq!(distinct.len(), 6, "{s:?}");
    // The resumed coder is told about the finding.
    common::assert_contains(&t.state_file("prompt-5").unwrap(), "section 2 is not done");

    // Git: one checkpoint commit per section on the kept branch, the worktree removed.
    let branch = format!("forge/{name}");
    let log = t.log(&branch);
    assert_eq!(
        log,
        ["section 3: Step three", "section 2: Step two", "section 1: Step one", "initial commit"],
        "{log:?}"
    );
    // Only the agent's work is committed (no materialized views or other server files).
    let tree = common::git(&t.repo.path, &["ls-tree", "-r", "--name-only", &branch]);
    assert_eq!(tree.lines().collect::<Vec<_>>(), ["README.md", "work.txt"]);
    let work = common::git(&t.repo.path, &["show", &format!("{branch}:work.txt")]);
    assert_eq!(work.lines().count(), 4, "four coder turns wrote work.txt:\n{work}");
    t.assert_worktree_removed(&name);
    assert_eq!(t.loop_row(&name)["auditCount"], json!(4));

    // Sections: all completed with their summaries and checkpoints; section 2 took 1 retry.
    let c = t.ro();
    let mut st = c
        .prepare(
            "SELECT section_index, status, attempts, summary_done, checkpoint_commit FROM section_plans
             WHERE loop_name = ?1 ORDER BY section_index",
        )
        .unwrap();
    let secs: Vec<SectionRow> = st
        .query_map([&name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        secs.iter().map(|s| (s.0, s.1.as_str(), s.2)).collect::<Vec<_>>(),
        [(0, "completed", 0), (1, "completed", 1), (2, "completed", 0)]
    );
    for s in &secs {
        assert_eq!(s.3.as_deref(), Some(r#"["work.txt updated"]"#), "summary of section {}", s.0);
        let commit = s.4.as_deref().unwrap_or_else(|| panic!("section {} has no checkpoint", s.0));
        let subject = common::git(&t.repo.path, &["log", "-1", "--format=%s", commit]);
        assert!(subject.starts_with(&format!("section {}:", s.0 + 1)), "{subject}");
    }

    // Section 2's attempt history: a dirty then a clean audit (DB and review-read).
    let outcomes =
        t.strings("SELECT outcome FROM loop_attempts WHERE loop_name = ?1 AND section_index = 1 ORDER BY id", &name);
    assert_eq!(outcomes, ["dirty", "clean"]);
    let read = t.client.tool_ok("review-read", json!({ "attempts": true, "loopName": name }));
    let attempts = read.data["attempts"].as_array().unwrap_or_else(|| panic!("{:?}", read.data)).clone();
    let s2: Vec<&serde_json::Value> = attempts.iter().filter(|a| a["sectionIndex"] == json!(1)).collect();
    let oc: Vec<&str> = s2.iter().map(|a| a["outcome"].as_str().unwrap_or("")).collect();
    assert_eq!(oc, ["dirty", "clean"], "{attempts:#?}");
    // The dirty audit left the bug finding, the clean one none; each names its auditor.
    let after = |a: &serde_json::Value| a["findingsAfter"].as_array().map(Vec::len);
    assert_eq!((after(s2[0]), after(s2[1])), (Some(1), Some(0)), "{attempts:#?}");
    assert_eq!(s2[0]["findingsAfter"][0]["description"], json!("section 2 is not done"));
    assert!(s2.iter().all(|a| a["auditorSessionId"].is_string()), "{attempts:#?}");

    // The finding is gone; the handoffs are all applied (none pending or left over).
    assert_eq!(t.count("SELECT count(*) FROM review_findings WHERE loop_name = ?1", &name), 0);
    assert_eq!(
        t.strings("SELECT DISTINCT status FROM loop_handoffs WHERE loop_name = ?1", &name),
        ["applied"],
        "{}",
        t.report()
    );
    assert_eq!(t.count("SELECT count(*) FROM loop_handoffs WHERE loop_name = ?1", &name), 8);
}

/// The auditor of the only section appends a section with plan-adjust, then hands off
/// clean: the loop runs the appended section too, and the amendment is recorded.
#[test]
fn plan_adjust_during_an_audit_appends_a_section_that_then_runs() {
    let t = LoopTest::start("adjust", "");
    let name = t.execute("One step", ONE_SECTION);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!((end["sectionIndex"].clone(), end["totalSections"].clone()), (json!(1), json!(2)), "{end}");
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1 s=0",
            "advance-section auditor-handoff auditing->coding it=1 s=0",
            "rotate coder-handoff coding->auditing it=2 s=1",
            "terminate completed auditing->- it=2 s=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
    assert_eq!(t.roles(), ["coder", "auditor", "coder", "auditor"]);

    assert_eq!(t.state_file("adjust.code").unwrap().trim(), "0", "{:?}", t.state_file("adjust.err"));
    common::assert_contains(&t.state_file("adjust.out").unwrap(), "\"total_sections\":2");
    // The appended section's coder got its content.
    common::assert_contains(&t.state_file("prompt-3").unwrap(), "Append the word appended to work.txt.");

    let c = t.ro();
    let (source, rationale, at, before, after): (String, String, i64, String, String) = c
        .query_row(
            "SELECT source, rationale, applied_at_section, sections_before, sections_after FROM plan_amendments WHERE loop_name = ?1",
            [&name],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .expect("one plan_amendments row");
    assert_eq!((source.as_str(), rationale.as_str(), at), ("auditor", "the plan forgot a step", 0));
    assert_eq!(serde_json::from_str::<serde_json::Value>(&before).unwrap(), json!([]));
    let after: serde_json::Value = serde_json::from_str(&after).unwrap();
    assert_eq!(after[0]["index"], json!(1));
    assert_eq!(after[0]["title"], json!("Appended section"));
    assert_eq!(t.count("SELECT count(*) FROM plan_amendments WHERE loop_name = ?1", &name), 1);

    assert_eq!(
        t.strings(
            "SELECT title || ' ' || status FROM section_plans WHERE loop_name = ?1 ORDER BY section_index",
            &name
        ),
        ["Only step completed", "Appended section completed"]
    );
    // The stored master plan is unchanged.
    let master = t.strings("SELECT content FROM plans WHERE loop_name = ?1", &name);
    assert_eq!(master, [ONE_SECTION]);
    assert_eq!(t.log(&format!("forge/{name}"))[..2], ["section 2: Appended section", "section 1: Only step"]);
    // The loop plan's lenses (on the master text) show the appended section too.
    let lenses = t.client.request_ok(
        "textDocument/codeLens",
        json!({ "textDocument": { "uri": format!("forge://plan/loop/{name}.md") } }),
    );
    let heading = ONE_SECTION.split('\n').position(|l| l == "## Only step").unwrap();
    let got: Vec<(&Value, &str)> = lenses
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (&l["range"]["start"], l["command"]["title"].as_str().unwrap()))
        .collect();
    let at = |k: u64| json!({ "line": heading, "character": k });
    assert_eq!(
        got,
        [
            (&at(0), "Section 1/2 · completed"),
            (&at(1), "Section 2/2 · completed · added by plan-adjust: Appended section")
        ],
        "{lenses}"
    );
}

/// A post-action turn that fails with a provider limit and no record still completes the
/// loop (seeds, "Post-action": an assistant error there completes, the status is always
/// completed); provider limits end loops with `provider_limit` in coding and auditing.
#[test]
fn a_provider_limit_in_post_action_completes_the_loop() {
    let t = LoopTest::start(
        "postlimit",
        "[loop.postAction]\nenabled = true\nprompt = \"Run the release checks and report.\"\n",
    );
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("completed"));
    assert_eq!(t.roles(), ["coder", "auditor", "post_action"]);
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "phase auditor-handoff auditing->post_action it=1",
            "terminate completed post_action->- it=1 status=completed reason=completed",
        ],
    );
}

/// With `loop.postAction` enabled and a prompt, the clean final audit enters post_action;
/// the post-action agent's loop-complete completes the loop and its report is stored and
/// shown by loop-status.
#[test]
fn the_post_action_phase_completes_the_loop_with_its_report() {
    let t = LoopTest::start(
        "clean",
        "[loop.postAction]\nenabled = true\nprompt = \"Run the release checks and report.\"\n",
    );
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    assert_eq!(end["terminationReason"], json!("completed"));
    assert_eq!(end["phase"], json!("post_action"));
    t.assert_transitions(
        &name,
        &[
            "rotate coder-handoff coding->auditing it=1",
            "phase auditor-handoff auditing->post_action it=1",
            "terminate completed post_action->- it=1 status=completed reason=completed",
        ],
    );
    t.assert_notifications_match(&name);
    assert_eq!(t.roles(), ["coder", "auditor", "post_action"]);
    common::assert_contains(&t.state_file("prompt-3").unwrap(), "Run the release checks and report.");
    // The post-action ran in a fresh session of its own.
    let turns = t.turns();
    assert!(turns[2].1 != turns[0].1 && turns[2].1 != turns[1].1, "{turns:?}");

    let report = t.strings("SELECT post_action_report FROM loop_large_fields WHERE loop_name = ?1", &name);
    assert_eq!(report.len(), 1);
    let report = &report[0];
    common::assert_contains(report, "**Post-action outcome:**");
    common::assert_contains(report, "run checks — all green");
    common::assert_contains(report, "ship it");
    common::assert_contains(report, "post-action by the test agent");
    let summary = t.strings("SELECT completion_summary FROM loops WHERE loop_name = ?1", &name);
    common::assert_contains(&summary[0], "Follow-ups: ship it.");
    assert_eq!(
        t.strings("SELECT role || ' ' || status FROM loop_handoffs WHERE loop_name = ?1 ORDER BY id", &name),
        ["coder applied", "auditor applied", "post_action applied"]
    );

    let status = t.client.tool_ok("loop-status", json!({ "name": name }));
    common::assert_contains(&status.text, &format!("Post-Action Report:\n{report}"));
    assert_eq!(status.data["status"], json!("completed"));
    // The worktree is removed after the post-action; the branch is kept.
    t.assert_worktree_removed(&name);
    assert!(t.has_branch(&format!("forge/{name}")));
}

/// An agent script under `/tmp` with `#!/usr/bin/env bash` (which finds the sandbox shim on
/// `PATH`, so the whole script runs inside the loop's sandbox, where `/tmp` is private)
/// completes a loop with the sandbox on: the script is visible inside, its usage lines
/// (`FORGE_USAGE_FILE`, writable inside) reach `loop_session_usage`, `PWD` is the worktree,
/// and a write outside the worktree fails.
#[test]
fn an_agent_script_under_tmp_runs_inside_the_sandbox_and_reports_usage() {
    if !crate::common::sandbox_available() {
        return; // sandbox_available said SKIP on stderr
    }
    let dir = tempfile::Builder::new().prefix("forge-agent-").tempdir_in("/tmp").expect("tmp dir");
    // The scripted agent's body is copied into the script: only the agent program itself is
    // bound into the sandbox, and the checkout (with tests/agents/simple.sh) may be under
    // /tmp too, where the sandbox would not see it.
    let simple =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/agents/simple.sh"))
            .expect("simple.sh");
    let simple_body: String = simple.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let script = dir.path().join("agent.sh");
    // A directory outside /tmp (visible, read-only inside the sandbox).
    let outside_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("outside dir");
    let outside = outside_dir.path().to_path_buf();
    std::fs::write(
        &script,
        format!(
            "#!/usr/bin/env bash\n\
             {{ echo \"role=$FORGE_ROLE sandbox=${{FORGE_SANDBOX:-no}} pwd-ok=$([ \"$PWD\" = \"$FORGE_WORKTREE\" ] && echo yes || echo no)\"\n\
               if touch \"{}/escaped-$FORGE_ROLE\" 2>/dev/null; then echo outside=wrote; else echo outside=refused; fi\n\
             }} >> sandbox-check.txt\n\
             {}",
            outside.display(),
            simple_body
        ),
    )
    .expect("write agent");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let config = format!("[agent]\ncommand = [{:?}]\n\n[sandbox]\nenabled = true\n", script.display().to_string());
    let t = LoopTest::launch(&config, "clean", &[]);
    let name = t.execute("Plain plan", UNSECTIONED);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let check = crate::common::git(&t.repo.path, &["show", &format!("forge/{name}:sandbox-check.txt")]);
    assert_eq!(
        check.lines().collect::<Vec<_>>(),
        ["role=coder sandbox=1 pwd-ok=yes", "outside=refused", "role=auditor sandbox=1 pwd-ok=yes", "outside=refused"],
        "{check}"
    );
    assert!(!outside.join("escaped-coder").exists() && !outside.join("escaped-auditor").exists());
    let models = t.strings("SELECT model || ' ' || role || ' ' || input_tokens FROM loop_session_usage WHERE loop_name = ?1 ORDER BY role DESC", &name);
    assert_eq!(models, ["test/coder code 1000", "test/auditor auditor 1000"], "{}", t.report());
}

/// Sections past the cap of 24 are dropped at the start (FORGE-REFERENCE §3.2), and the
/// reply says so: it said nothing of them (a plan given inline has no plan-write report).
#[test]
fn a_start_says_which_sections_past_the_cap_are_dropped() {
    let t = LoopTest::start("clean", "");
    let plan: String = (1..=26).map(|k| format!("<!-- forge-section -->\n## Phase {k}\n- step {k}\n")).collect();
    let out = t.client.tool_ok("execute-plan", json!({ "title": "Many", "plan": format!("# Many\n\n{plan}") }));
    assert!(
        out.text.contains("Note: the plan has 26 sections; the 2 after the first 24 are dropped and will not run"),
        "{}",
        out.text
    );
    assert_eq!((out.data["totalSections"].clone(), out.data["droppedSections"].clone()), (json!(24), json!(2)));
    let name = out.data["loopName"].as_str().unwrap().to_string();
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
    // Within the cap: no note.
    let plan: String = (1..=2).map(|k| format!("<!-- forge-section -->\n## Phase {k}\n- step {k}\n")).collect();
    let out = t.client.tool_ok("execute-plan", json!({ "title": "Few", "plan": format!("# Few\n\n{plan}") }));
    assert!(!out.text.contains("Note:"), "{}", out.text);
    assert_eq!(out.data["droppedSections"], json!(0));
    t.client.tool_ok("loop-cancel", json!({ "name": out.data["loopName"].as_str().unwrap() }));
}

/// A loop cancelled in post-action and restarted once post-action is no longer configured
/// is marked completed, and its worktree is removed as a completed loop's is (the branch
/// stays). Before, the worktree was left behind for good.
/// A loop cancelled in post-action (its worktree kept) and its worktree; `before` runs on
/// the worktree, then post-action is turned off for the restart that follows.
fn cancelled_in_post_action(before: impl FnOnce(&std::path::Path)) -> (LoopTest, String, std::path::PathBuf) {
    let t = LoopTest::start("block", "[loop.postAction]\nenabled = true\nprompt = \"Run the checks.\"\n");
    t.signal("release");
    let name = t.execute("Plain plan", UNSECTIONED);
    t.wait_state_file("post.pid");
    t.client.tool_ok("loop-cancel", json!({ "name": name }));
    assert_eq!(t.wait_end(&name)["status"], json!("cancelled"), "{}", t.report());
    let worktree = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap().to_string());
    assert!(worktree.is_dir(), "a cancelled loop keeps its worktree");
    before(&worktree);
    t.client.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "forge": { "loop": { "postAction": { "enabled": false } } } } }),
    );
    (t, name, worktree)
}

#[test]
fn a_restart_that_completes_a_loop_instead_removes_its_worktree() {
    // Work left uncommitted in it (by hand, after the cancel) is not lost with it.
    let (t, name, _) = cancelled_in_post_action(|wt| std::fs::write(wt.join("notes.txt"), "by hand\n").unwrap());
    let e = t.client.tool_err("loop-status", json!({ "name": name, "restart": true }));
    assert!(e.message.contains("no longer configured"), "{e:?}");
    assert_eq!(t.loop_row(&name)["status"], json!("completed"));
    t.assert_worktree_removed(&name);
    assert!(t.has_branch(&format!("forge/{name}")), "the branch stays");
    let shown = std::process::Command::new("git")
        .args(["show", &format!("forge/{name}:notes.txt")])
        .current_dir(&t.repo.path)
        .output()
        .expect("git show");
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "by hand\n", "committed to the branch first");
    assert!(t.log(&format!("forge/{name}"))[0].contains("completed"), "{:?}", t.log(&format!("forge/{name}")));
    // The detail says the folder is gone, not only its path (review).
    let status = t.client.tool_ok("loop-status", json!({ "name": name })).text;
    let line = status.lines().find(|l| l.starts_with("Worktree: ")).unwrap_or_default();
    assert!(line.ends_with(" (removed)"), "{status}");
}

/// The same restart when the worktree's work cannot be committed (its `.git` no longer
/// names the project's repository): the restart is refused before anything changes, naming
/// the broken link, and the worktree is kept.
#[test]
fn a_restart_that_would_complete_a_loop_keeps_a_worktree_it_cannot_commit() {
    let (t, name, worktree) =
        cancelled_in_post_action(|wt| std::fs::write(wt.join(".git"), "gitdir: /nonexistent/forge-test\n").unwrap());
    let e = t.client.tool_err("loop-status", json!({ "name": name, "restart": true }));
    assert!(e.message.contains("names the git directory /nonexistent/forge-test, which does not exist"), "{e:?}");
    assert!(worktree.is_dir(), "kept");
    assert_eq!(t.loop_row(&name)["status"], json!("cancelled"), "nothing changed");
}

/// A loop that completes while its worktree holds what a commit cannot take keeps the
/// worktree, and `loop-status` says so: before, it was removed with that work (review W).
/// - `embedded`: a repository the agent made inside the worktree, which a checkpoint never
///   stages;
/// - `lock`: a stale `index.lock` (a crashed git), on which the final commit fails.
#[test]
fn a_completed_loop_keeps_a_worktree_whose_work_is_not_all_on_the_branch() {
    for case in ["embedded", "lock"] {
        let t = LoopTest::start("block", "");
        let name = t.execute("One step", ONE_SECTION);
        t.wait_state_file("auditor.pid");
        let wt = std::path::PathBuf::from(t.loop_row(&name)["worktreeDir"].as_str().unwrap().to_string());
        if case == "embedded" {
            std::fs::create_dir_all(wt.join("sub")).unwrap();
            let init =
                std::process::Command::new("git").args(["init", "-q"]).current_dir(wt.join("sub")).status().unwrap();
            assert!(init.success());
            std::fs::write(wt.join("sub/f.txt"), "important\n").unwrap();
        } else {
            let dot_git = std::fs::read_to_string(wt.join(".git")).unwrap();
            let gitdir = std::path::PathBuf::from(dot_git.trim().strip_prefix("gitdir: ").unwrap());
            std::fs::write(gitdir.join("index.lock"), "").unwrap();
            std::fs::write(wt.join("late.txt"), "written after the last checkpoint\n").unwrap();
        }
        t.signal("release");
        assert_eq!(t.wait_end(&name)["status"], json!("completed"), "{case}: {}", t.report());
        assert!(wt.is_dir(), "{case}: the worktree was removed with what the branch does not hold");
        let status = t.client.tool_ok("loop-status", json!({ "name": name })).text;
        let line = status.lines().find(|l| l.starts_with("Worktree: ")).unwrap_or_default();
        assert!(line.contains(" (kept when the loop ended: `git -C "), "{case}: {status}");
        let kept = if case == "embedded" { "sub/f.txt" } else { "late.txt" };
        assert!(wt.join(kept).exists(), "{case}");
    }
}
