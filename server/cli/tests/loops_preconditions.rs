//! Loop preconditions and the rules around stored loop rows: a loop needs a committed
//! repository and an agent host (1004, nothing created); section-read serves the loop's
//! current session; server start never touches loop rows, and a loop left `running` by a
//! process that died is restarted only with `force`.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const PLAN: &str = "# Plan\n\n## Objective\nDo it.\n";

fn no_loop_was_created(sb: &Sandbox, repo: &Path) {
    assert_eq!(sb.db().count("SELECT COUNT(*) FROM loops"), 0);
    assert_eq!(sb.db().count("SELECT COUNT(*) FROM plans WHERE loop_name IS NOT NULL"), 0);
    let branches = git(repo, &["branch", "--list", "forge/*"]);
    assert!(branches.trim().is_empty(), "no forge/ branch: {branches}");
    let worktrees = sb.data_dir.join("worktrees");
    assert!(!worktrees.exists() || std::fs::read_dir(&worktrees).unwrap().next().is_none(), "no worktree");
}

#[test]
fn a_loop_needs_a_committed_repository() {
    let sb = Sandbox::new();
    let (_keep, dir) = plain_dir();
    git(&dir, &["init", "-q"]);
    std::fs::create_dir_all(dir.join(".forge")).unwrap();
    std::fs::write(dir.join(".forge/config.toml"), "[agent]\ncommand = [\"true\"]\n[sandbox]\nenabled = false\n")
        .unwrap();
    let mut c = sb.stdio();
    c.init(&Init::new(&dir));
    let e = c.tool_err("execute-plan", json!({ "title": "x", "plan": PLAN }));
    assert_eq!(e.code, 1004, "{e}");
    assert!(e.message.contains("commit") && e.message.contains("retry"), "the message says how to fix it: {e}");
    no_loop_was_created(&sb, &dir);
}

#[test]
fn a_loop_needs_an_agent_host() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write_project_config("[sandbox]\nenabled = false\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e = c.tool_err("execute-plan", json!({ "title": "x", "plan": PLAN }));
    assert_eq!(e.code, 1004, "{e}");
    assert!(e.message.contains("agent.command"), "the message says how to configure one: {e}");
    // It names the user's file as this process reads it (XDG_CONFIG_HOME), not a fixed path.
    let user_file = sb.config_home.join("forge-lsp/config.toml");
    assert!(e.message.contains(&user_file.display().to_string()), "{e}");
    assert!(e.message.contains("\"{session}\""), "the example's placeholders: {e}");
    no_loop_was_created(&sb, &repo.path);
}

/// With a preset, agent.command names only the CLI's program: a template's placeholder
/// there is refused, saying why (it was passed to the program as a literal argument).
#[test]
fn a_preset_with_a_command_template_is_refused_saying_why() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write_project_config("[sandbox]\nenabled = false\n");
    sb.write_user_config("[agent]\npreset = \"claude\"\ncommand = \"/bin/echo {session}\"\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e = c.tool_err("execute-plan", json!({ "title": "x", "plan": PLAN }));
    assert_eq!(e.code, 1004, "{e}");
    assert!(e.message.contains("agent.preset = \"claude\"") && e.message.contains("placeholder {session}"), "{e}");
    no_loop_was_created(&sb, &repo.path);
}

/// A preset whose CLI is not installed is named as the setting it came from (it was
/// reported as `agent.command`, which the user never set).
#[test]
fn a_preset_whose_cli_is_missing_is_named() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write_project_config("[sandbox]\nenabled = false\n\n[agent]\npreset = \"gemini\"\n");
    let data_dir = sb.data_dir.clone();
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--data-dir").arg(&data_dir).env("PATH", "/usr/bin:/bin");
    });
    c.init(&Init::new(&repo.path));
    let e = c.tool_err("execute-plan", json!({ "title": "x", "plan": PLAN }));
    assert!(e.message.contains("agent.preset = \"gemini\""), "{e}");
    assert!(e.message.contains("was not found"), "{e}");
    no_loop_was_created(&sb, &repo.path);
}

/// An agent command that exists but may not be executed is refused at the start, naming
/// the file, instead of failing three turns with "Permission denied" and leaving an
/// errored loop behind.
#[test]
fn an_agent_command_that_may_not_be_executed_is_refused_at_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let agent = sb.root.join("agent.sh");
    std::fs::write(&agent, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o644)).unwrap();
    repo.write_project_config(&format!(
        "[sandbox]\nenabled = false\n\n[agent]\ncommand = [{:?}]\n",
        agent.display().to_string()
    ));
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e = c.tool_err("execute-plan", json!({ "title": "x", "plan": PLAN }));
    assert!(e.message.contains("may not be executed") && e.message.contains("agent.sh"), "{e}");
    no_loop_was_created(&sb, &repo.path);
}

/// A repository that commits configuration of the preset's CLI that the CLI would load and
/// that starts programs on the host (Gemini CLI's MCP servers; OpenCode's plugins, which it
/// imports whatever `OPENCODE_DISABLE_PROJECT_CONFIG` says) is refused at the start, naming
/// the file and the setting that allows it; the user's trust (never the repository's own
/// file) lets the loop start.
#[test]
fn a_preset_refuses_a_repository_with_its_clis_configuration_unless_trusted() {
    for (preset, rel, text) in [
        ("gemini", ".gemini/settings.json", r#"{"mcpServers":{"x":{"command":"/usr/bin/touch","args":["/tmp/x"]}}}"#),
        ("opencode", ".opencode/plugins/x.js", "require('fs').writeFileSync('/tmp/x', '')\n"),
    ] {
        let sb = Sandbox::new();
        let repo = GitRepo::new();
        repo.write(rel, text);
        repo.commit_all("agent configuration");
        let ran = sb.root.join(format!("{preset}.ran"));
        // The repository's own file cannot trust it (ignored with a warning).
        preset_agent(
            &sb,
            &repo,
            preset,
            &format!("touch {:?}", ran.display().to_string()),
            "trustProjectConfig = true\n",
        );
        let mut c = sb.stdio();
        c.init(&Init::new(&repo.path));
        let e = c.tool_err("execute-plan", json!({ "title": "x", "plan": PLAN }));
        assert_eq!(e.code, 1004, "{preset}: {e}");
        let named = rel.split('/').next().unwrap();
        assert!(
            e.message.contains(named)
                && e.message.contains(&format!("the {preset} preset"))
                && e.message.contains("agent.trustProjectConfig = true"),
            "{e}"
        );
        no_loop_was_created(&sb, &repo.path);
        // A session outside a loop (in the project root, on the host) too.
        let e = c.tool_err("execute-plan", json!({ "title": "x", "plan": PLAN, "mode": "new-session" }));
        assert_eq!(e.code, 1004, "{preset}: {e}");
        assert!(e.message.contains("Failed to start new session") && e.message.contains(named), "{e}");
        assert!(!ran.exists(), "{preset}: the agent ran for a refused session");
        drop(c);
        // Trusted by the user (initialization options): the loop starts.
        let mut c = sb.stdio();
        c.init(&Init::new(&repo.path).config(json!({ "agent": { "trustProjectConfig": true } })));
        let r = c.tool_ok("execute-plan", json!({ "title": "x", "plan": PLAN }));
        let name = r.data["loopName"].as_str().unwrap_or_else(|| panic!("{preset}: {}", r.text)).to_string();
        // ... and its first turn ran the agent (not refused after the reply).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !ran.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(ran.exists(), "{preset}: the trusted loop's agent never ran");
        drop(c);
        // A restart by a user who does not trust it is refused, before the loop is touched.
        let c = {
            let mut c = sb.stdio();
            c.init(&Init::new(&repo.path));
            c
        };
        let e = c.tool_err("loop-status", json!({ "name": name, "restart": true, "force": true }));
        assert!(e.message.contains("Cannot restart") && e.message.contains("agent.trustProjectConfig"), "{e}");
    }
}

/// A fake CLI for `preset` (a script that runs `body`, then exits 0 without output) and the
/// project's (uncommitted) configuration that names it, without the sandbox, plus `extra`
/// lines of the `[agent]` table.
fn preset_agent(sb: &Sandbox, repo: &GitRepo, preset: &str, body: &str, extra: &str) {
    let agent = sb.executable(preset, &format!("#!/bin/sh\n{body}\nexit 0\n"));
    repo.write_project_config(&format!(
        "[sandbox]\nenabled = false\n\n[agent]\npreset = {preset:?}\ncommand = [{:?}]\n{extra}",
        agent.display().to_string()
    ));
}

/// A turn that writes the preset's CLI configuration into the worktree (here a plugin,
/// which OpenCode would import on the host at its next start) ends the loop at the next
/// turn, naming it (`worktree_failed`), instead of failing turn after turn.
#[test]
fn a_turn_that_plants_the_clis_configuration_ends_the_loop_at_the_next_turn() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let runs = sb.root.join("runs");
    let plant = "mkdir -p .opencode/plugins\necho 'x' > .opencode/plugins/x.js";
    preset_agent(&sb, &repo, "opencode", &format!("echo run >> {:?}\n{plant}", runs.display().to_string()), "");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let r = c.tool_ok("execute-plan", json!({ "title": "x", "plan": PLAN }));
    let name = r.data["loopName"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        let s = c.tool_ok("loop-status", json!({ "name": name }));
        if s.data["status"] != json!("running") || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let reason = status.data["terminationReason"].as_str().unwrap_or_default().to_string();
    assert!(reason.starts_with("worktree_failed") && reason.contains(".opencode"), "{}", status.text);
    // The agent ran once: the next turn was never started.
    assert_eq!(std::fs::read_to_string(&runs).unwrap_or_default().lines().count(), 1, "{}", status.text);
}

const S: &str = "ses_01JSECTIONREADCODER00000";
const LOOP: &str = "sections";

#[test]
fn section_read_serves_the_loops_current_session() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    sb.ensure_db();
    let db = sb.db();
    let mut l = LoopFixture::running(&repo.root_commit, LOOP, S, &repo.path);
    l.total_sections = 3;
    db.insert_loop(&l);
    db.conn.execute("UPDATE loops SET current_section_index = 1 WHERE loop_name = ?1", [LOOP]).unwrap();
    for (i, status, done) in
        [(0, "completed", Some("[\"tokens stored\"]")), (1, "in_progress", None), (2, "pending", None)]
    {
        db.conn
            .execute(
                "INSERT INTO section_plans (project_id, loop_name, section_index, title, content, status, summary_done, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0)",
                rusqlite::params![repo.root_commit, LOOP, i, format!("Phase {}", i + 1), format!("content {i}"), status, done],
            )
            .unwrap();
    }
    db.insert_loop_session(S, &repo.root_commit, LOOP, "coder", "tok");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path).session(S).token("tok"));

    let d = c.tool_ok("section-read", json!({})).data;
    assert_eq!((d["index"].as_i64(), d["status"].as_str()), (Some(1), Some("in_progress")), "{d}");
    assert!(d["summary_done"].is_null());
    let d = c.tool_ok("section-read", json!({ "section_index": 0 })).data;
    assert_eq!(d["status"], "completed");
    assert_eq!(d["summary_done"], json!(["tokens stored"]));
    let e = c.tool_err("section-read", json!({ "section_index": 3 }));
    assert_eq!(e.code, 1006);
    assert!(e.message.contains("Invalid section index 3. Valid range: 0-2"), "{e}");
    let d = c.tool_ok("section-read", json!({ "pending_suffix": true })).data;
    assert_eq!(d["from_index"], 2);
    assert_eq!(d["sections"].as_array().map(|a| a.len()), Some(1));
    assert_eq!(d["sections"][0]["title"], "Phase 3");
    assert_eq!(c.tool_err("section-read", json!({ "pending_suffix": true, "section_index": 1 })).code, -32602);
    // Reads never change state.
    assert_eq!(sb.db().count("SELECT COUNT(*) FROM section_plans WHERE status = 'in_progress'"), 1);

    let mut user = sb.stdio();
    user.init(&Init::new(&repo.path));
    assert_eq!(user.tool_err("section-read", json!({})).code, 1001);
}

fn agent_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/agents/simple.sh").canonicalize().unwrap()
}

#[test]
fn server_start_never_touches_loop_rows_and_a_dead_running_loop_restarts_only_with_force() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write_project_config(&format!(
        "[agent]\ncommand = [\"{}\", \"{{session}}\"]\n[sandbox]\nenabled = false\n",
        agent_path().display()
    ));
    // A loop left running by a process that died: a real worktree on forge/<name>.
    let worktree = sb.data_dir.join("worktrees").join("orphan");
    std::fs::create_dir_all(worktree.parent().unwrap()).unwrap();
    git(&repo.path, &["worktree", "add", "-q", "-b", "forge/orphan", worktree.to_str().unwrap()]);
    sb.ensure_db();
    let db = sb.db();
    let mut l = LoopFixture::running(&repo.root_commit, "orphan", "ses_01JDEADPROCESS0000000000", &repo.path);
    l.phase = "auditing".into();
    l.worktree_dir = worktree.display().to_string();
    db.insert_loop(&l);
    db.conn.execute("UPDATE loops SET iteration = 4, owner_pid = 999999 WHERE loop_name = 'orphan'", []).unwrap();
    let before: (String, String, i64) = db
        .conn
        .query_row("SELECT status, phase, iteration FROM loops WHERE loop_name = 'orphan'", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();

    let bin_dir = Path::new(BIN).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--data-dir").arg(&sb.data_dir).env("PATH", &path);
    });
    c.init(&Init::new(&repo.path));
    std::thread::sleep(QUIET);
    let status = c.tool_ok("loop-status", json!({ "name": "orphan" }));
    assert!(status.text.starts_with("Loop Status\n"), "{}", status.text);
    let after: (String, String, i64) = sb
        .db()
        .conn
        .query_row("SELECT status, phase, iteration FROM loops WHERE loop_name = 'orphan'", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(after, before, "server start and reads never change loop rows");

    let e = c.tool_err("loop-status", json!({ "name": "orphan", "restart": true }));
    assert_eq!(e.code, 1003, "{e}");
    assert!(e.message.contains("force=true"), "{e}");

    let r = c.tool_ok("loop-status", json!({ "name": "orphan", "restart": true, "force": true }));
    assert!(r.text.starts_with("Restarted loop \"orphan\""), "{}", r.text);
    assert!(r.text.contains("Continuing from iteration: 1"), "{}", r.text);
    // An auditing loop restarts as coding, then runs to completion with the scripted agent.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s: String =
            sb.db().conn.query_row("SELECT status FROM loops WHERE loop_name = 'orphan'", [], |r| r.get(0)).unwrap();
        if s == "completed" {
            break;
        }
        assert!(Instant::now() < deadline, "the restarted loop did not complete (status {s})");
        std::thread::sleep(Duration::from_millis(100));
    }
    let restart_rows =
        sb.db().count("SELECT COUNT(*) FROM loop_transitions WHERE loop_name = 'orphan' AND transition_kind = 'phase' AND event_type = 'restart'");
    assert_eq!(restart_rows, 1, "auditing → coding on restart is logged once");
}
