//! `loop.permissions.deny` over stdio: deny rules refuse matching calls of loop phase
//! sessions with 1001 before anything runs, and dropped entries are reported once in a
//! `window/showMessage` warning (FORGE-REFERENCE.md §2.14).

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};

const CODER: &str = "ses_01JDENYCODER000000000000";
const AUDITOR: &str = "ses_01JDENYAUDITOR0000000000";
const LOOP: &str = "deny-loop";

/// A running loop (no sandbox) whose worktree is a real directory, with a coder and an
/// auditor session.
struct Fixture {
    sb: Sandbox,
    repo: GitRepo,
    worktree: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let sb = Sandbox::new();
        let repo = GitRepo::new();
        let worktree = sb.mkdir("worktree");
        sb.ensure_db();
        let db = sb.db();
        let mut l = LoopFixture::running(&repo.root_commit, LOOP, CODER, &repo.path);
        l.worktree_dir = worktree.display().to_string();
        db.insert_loop(&l);
        db.insert_loop_session(CODER, &repo.root_commit, LOOP, "coder", "tok-coder");
        db.insert_loop_session(AUDITOR, &repo.root_commit, LOOP, "auditor", "tok-auditor");
        Fixture { sb, repo, worktree }
    }

    /// Writes the loop's configuration: `<project>/.forge/config.toml`. A loop session's
    /// connection runs with its loop's configuration; its own initialization options cannot
    /// weaken the rules.
    fn write_config(&self, config: Value) {
        let dir = self.repo.path.join(".forge");
        std::fs::create_dir_all(&dir).unwrap();
        let toml = toml::to_string(&toml::Value::try_from(config).unwrap()).unwrap();
        std::fs::write(dir.join("config.toml"), toml).unwrap();
    }

    /// A connection acting as `session`, its loop configured with `loop.permissions.deny = deny`.
    fn connect(&self, session: &str, token: &str, deny: Value) -> Client {
        self.write_config(json!({ "loop": { "permissions": { "deny": deny } } }));
        let mut c = self.sb.stdio();
        c.init(&Init::new(&self.repo.path).session(session).token(token));
        c
    }
}

#[track_caller]
fn assert_denied(e: &RpcError) {
    assert_eq!(e.code, 1001, "{e}");
    assert_eq!(e.kind(), Some("denied"), "{e}");
}

#[test]
fn a_scoped_bash_deny_refuses_matching_shell_commands_before_they_run() {
    let f = Fixture::new();
    let c = f.connect(CODER, "tok-coder", json!([{ "permission": "bash", "pattern": "git push *" }]));

    let e = c.tool_err("shell", json!({ "command": "git push origin main > pushed.txt 2>&1" }));
    assert_denied(&e);
    assert_contains(&e.message, "forge.shell command `git push origin main > pushed.txt 2>&1`");
    assert_contains(&e.message, &format!("the coder session {CODER} of loop \"{LOOP}\""));
    assert_contains(&e.message, r#"denied by loop.permissions.deny: { permission = "bash", pattern = "git push *" }"#);
    assert!(!f.worktree.join("pushed.txt").exists(), "a denied command must not run");

    // A part of a compound command is enough, and nothing of it runs.
    let e = c.tool_err("shell", json!({ "command": "touch made.txt && git push" }));
    assert_denied(&e);
    assert!(!f.worktree.join("made.txt").exists(), "a denied command must not run");

    // Other commands run.
    let out = c.tool_ok("shell", json!({ "command": "echo ok" }));
    assert_eq!(out.data["stdout"], json!("ok\n"), "{}", out.data);
    let out = c.tool_ok("shell", json!({ "command": "echo git push origin > said.txt" }));
    assert_eq!(out.data["exitCode"], json!(0), "{}", out.data);
    assert!(f.worktree.join("said.txt").exists());
}

#[test]
fn a_tool_deny_refuses_the_tool_for_the_auditor_session() {
    let f = Fixture::new();
    let c = f.connect(AUDITOR, "tok-auditor", json!(["review-write"]));
    let e = c.tool_err(
        "review-write",
        json!({ "file": "src/lib.rs", "line": 1, "severity": "bug", "description": "broken" }),
    );
    assert_denied(&e);
    assert_contains(&e.message, &format!("forge.review-write is not available to the auditor session {AUDITOR}"));
    assert_contains(&e.message, r#"denied by loop.permissions.deny: { permission = "review-write" }"#);
    assert_eq!(f.sb.db().count("SELECT COUNT(*) FROM review_findings"), 0);
    // Tools the rules do not name stay available.
    c.tool_ok("review-read", json!({}));
}

#[test]
fn deny_rules_do_not_apply_outside_loop_sessions() {
    let f = Fixture::new();
    let mut c = f.sb.stdio();
    c.init(
        &Init::new(&f.repo.path)
            .agent("auditor")
            .config(json!({ "loop": { "permissions": { "deny": ["review-write"] } } })),
    );
    c.tool_ok("review-write", json!({ "file": "src/lib.rs", "line": 1, "severity": "bug", "description": "x" }));
    assert_eq!(f.sb.db().count("SELECT COUNT(*) FROM review_findings"), 1);
}

#[test]
fn dropped_entries_are_reported_once_and_have_no_effect() {
    let f = Fixture::new();
    f.write_config(json!({
        "loop": { "permissions": {
            "deny": ["loop-handoff", "*", "bash", "edit", { "permission": "bash", "pattern": "git push *" }, { "permission": "bash", "pattern": "git push *" }],
            "allow": ["bash"]
        } }
    }));
    let mut c = f.sb.stdio();
    c.init(&Init::new(&f.repo.path).session(CODER).token("tok-coder"));
    let expect = [
        "loop.permissions.deny entry \"loop-handoff\" ignored: `loop-handoff` is Forge-managed",
        "loop.permissions.deny entry \"*\" ignored",
        "loop.permissions.deny entry \"bash\" ignored: a blanket deny of `bash`",
        "duplicate of an earlier entry",
        "loop.permissions.deny entry { permission = \"edit\" } has no effect: `edit` is not a forge-lsp tool",
        "unknown configuration key `loop.permissions.allow`",
    ];
    for needle in expect {
        let m = c.wait_notification(WAIT, |r| {
            r.method() == "window/showMessage" && r.params()["message"].as_str().is_some_and(|m| m.contains(needle))
        });
        let m = m.unwrap_or_else(|| {
            panic!("no showMessage with {needle:?}: {:?}", c.notifications_of("window/showMessage"))
        });
        assert_eq!(m.params()["type"], json!(2), "a warning: {:?}", m.params());
    }
    std::thread::sleep(QUIET);
    let shown = c.notifications_of("window/showMessage");
    assert_eq!(shown.len(), expect.len(), "each warning once: {shown:?}");

    // loop-handoff is not denied (it fails on its input instead), and echo runs.
    let e = c.tool_err("loop-handoff", json!({}));
    assert!(!e.message.contains("loop.permissions.deny"), "{e}");
    // A missing required field is an invalid parameter (PROTOCOL.md §3).
    assert_eq!(e.code, -32602, "{e}");
    assert_contains(&e.message, "changes is required");
    c.tool_ok("shell", json!({ "command": "echo ok" }));
    // The scoped rule that was kept still applies.
    assert_denied(&c.tool_err("shell", json!({ "command": "git push" })));
}

#[test]
fn a_loop_session_cannot_weaken_its_loops_rules_through_its_own_options() {
    let f = Fixture::new();
    f.write_config(json!({ "loop": { "permissions": { "deny": ["review-write"] } } }));
    let mut c = f.sb.stdio();
    // The agent's own connection asks for no deny rules: ignored for a loop session.
    c.init(&Init::new(&f.repo.path).session(AUDITOR).token("tok-auditor").config(json!({
        "loop": { "permissions": { "deny": [] } }
    })));
    let e =
        c.tool_err("review-write", json!({ "file": "src/lib.rs", "line": 1, "severity": "bug", "description": "x" }));
    assert_denied(&e);
    assert_eq!(f.sb.db().count("SELECT COUNT(*) FROM review_findings"), 0);
}

#[test]
fn a_loop_session_cannot_lift_its_loops_rules_with_did_change_configuration() {
    let f = Fixture::new();
    let c = f.connect(AUDITOR, "tok-auditor", json!(["review-write"]));
    // An agent holding the loop's socket and token sends settings of its own: ignored.
    c.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "forge": { "loop": { "permissions": { "deny": [] } }, "plugins": { "trustProjectTools": true } } } }),
    );
    std::thread::sleep(QUIET);
    let e =
        c.tool_err("review-write", json!({ "file": "src/lib.rs", "line": 1, "severity": "bug", "description": "x" }));
    assert_denied(&e);
    assert_eq!(f.sb.db().count("SELECT COUNT(*) FROM review_findings"), 0);
}

/// A loop session's identity holds only for its loop's project: from another repository's
/// folder it is refused (its file tools would otherwise work there, not in its worktree).
#[test]
fn a_loop_session_cannot_be_claimed_for_another_project() {
    let f = Fixture::new();
    let other = GitRepo::new();
    let c = f.sb.stdio();
    let e = c.initialize(&Init::new(&other.path).session(CODER).token("tok-coder")).expect_err("another project");
    assert_eq!(e.code, 1001, "{e}");
    assert_contains(&e.message, "belongs to a loop of another project");
    // From its own project it is the loop session.
    let c = f.connect(CODER, "tok-coder", json!([]));
    c.tool_ok("review-read", json!({}));
}

/// A cancelled `forge.shell` command is stopped (its process group killed) and answered
/// -32800: unlike the other built-in tools, which run to the end, a shell command loses
/// nothing by stopping.
#[test]
fn a_cancelled_shell_command_is_stopped() {
    let f = Fixture::new();
    let c = f.connect(CODER, "tok-coder", json!([]));
    let id = c.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.shell", "arguments": [{ "command": "echo $$ > shell.pid; exec sleep 60" }] }),
    );
    let pid_file = f.worktree.join("shell.pid");
    let pid = wait_for(WAIT, || std::fs::read_to_string(&pid_file).ok().filter(|s| s.ends_with('\n')))
        .expect("the command started");
    let proc_dir = format!("/proc/{}", pid.trim());
    c.notify("$/cancelRequest", json!({ "id": id }));
    let resp = c.wait_response(id, WAIT);
    assert_eq!(resp["error"]["code"], json!(-32800), "{resp}");
    assert!(
        wait_for(std::time::Duration::from_secs(5), || (!std::path::Path::new(&proc_dir).exists()).then_some(()))
            .is_some(),
        "the command {pid} still runs"
    );
}
