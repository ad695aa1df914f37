//! Helpers for the loop end-to-end tests (`loops_*.rs`): a project whose agent is the
//! scripted `tests/agents/scenario.sh`, a stdio server with a connected client, and
//! read-only views of the loop's rows, transitions, notifications and git state.
//!
//! Each test gets its own sandbox (data dir), repository and state directory; the scenario
//! and the state directory reach the agent through the server's environment
//! (`FORGE_TEST_SCENARIO`, `FORGE_TEST_STATE`), which the agent inherits.

#![allow(dead_code)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{git, wait_for, Client, GitRepo, Init, Mark, Sandbox, BIN};

/// How long a whole loop (or one expected state) may take on a loaded machine.
pub const LOOP_WAIT: Duration = Duration::from_secs(90);

/// A three-section plan (titles `Step one`, `Step two`, `Step three`).
pub const THREE_SECTIONS: &str = "# Three steps

## Objective
Write three lines to work.txt, one per step.

<!-- forge-section -->
## Step one
Append a line to work.txt.

<!-- forge-section -->
## Step two
Append a second line to work.txt.

<!-- forge-section -->
## Step three
Append a third line to work.txt.

## Verification
- cat work.txt
";

/// A two-section plan (`First half`, `Second half`).
pub const TWO_SECTIONS: &str = "# Two halves

## Objective
Write two lines to work.txt.

<!-- forge-section -->
## First half
Append a line to work.txt.

<!-- forge-section -->
## Second half
Append another line to work.txt.

## Verification
- cat work.txt
";

/// A one-section plan (`Only step`).
pub const ONE_SECTION: &str = "# One step

## Objective
Write a line to work.txt.

<!-- forge-section -->
## Only step
Append a line to work.txt.

## Verification
- cat work.txt
";

/// A plan without section markers.
pub const UNSECTIONED: &str = "# Plain plan

## Objective
Append a line to work.txt.

## Verification
- cat work.txt
";

/// The scripted agent.
pub fn agent_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/agents/scenario.sh")
        .canonicalize()
        .expect("tests/agents/scenario.sh exists")
}

/// One row of `loop_transitions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionRow {
    pub event: String,
    pub kind: String,
    pub from: String,
    pub to: Option<String>,
    pub status: Option<String>,
    pub reason: Option<String>,
    pub iteration: i64,
    pub section: Option<i64>,
    pub at: i64,
}

impl TransitionRow {
    /// `kind event from->to it=N [s=K] [status=.. reason=..]`, for readable assertions.
    /// A reason is cut at its first `:` (the kind without the message).
    pub fn brief(&self) -> String {
        let mut s = format!(
            "{} {} {}->{} it={}",
            self.kind,
            self.event,
            self.from,
            self.to.as_deref().unwrap_or("-"),
            self.iteration
        );
        if let Some(k) = self.section {
            s.push_str(&format!(" s={k}"));
        }
        if let Some(st) = &self.status {
            s.push_str(&format!(" status={st}"));
        }
        if let Some(r) = &self.reason {
            s.push_str(&format!(" reason={}", r.split(':').next().unwrap_or(r)));
        }
        s
    }
}

/// A project, a stdio server with a connected client, and the agent's state directory.
pub struct LoopTest {
    // Dropped first (see `Drop`): the client, then the directories.
    pub client: Client,
    pub repo: GitRepo,
    pub sb: Sandbox,
    /// `FORGE_TEST_STATE` of the agent.
    pub state: PathBuf,
    /// `FORGE_TEST_PAUSE_DIR` of this test's first server (not of [`LoopTest::other_server`]):
    /// see [`LoopTest::hold`].
    pub pauses: PathBuf,
}

impl LoopTest {
    /// A project whose agent runs `scenario`; `extra_toml` is appended to the project's
    /// `.forge/config.toml` (which sets the agent command and turns the sandbox on where
    /// bubblewrap works: `common::sandbox_toml`).
    pub fn start(scenario: &str, extra_toml: &str) -> LoopTest {
        let config = format!(
            "[agent]\ncommand = [{:?}, \"{{session}}\"]\n\n{}\n{extra_toml}\n",
            agent_script().display().to_string(),
            crate::common::sandbox_toml()
        );
        LoopTest::launch(&config, scenario, &[])
    }

    /// A project with `config` as its `.forge/config.toml` and a stdio server whose PATH starts
    /// with the binary's directory (agents call `forge-lsp call`); `FORGE_TEST_STATE`,
    /// `FORGE_TEST_SCENARIO` and `env` reach the agent through the server's environment.
    pub fn launch(config: &str, scenario: &str, env: &[(&str, &str)]) -> LoopTest {
        let sb = Sandbox::new();
        let repo = GitRepo::new();
        let state = sb.mkdir("agent-state");
        let pauses = sb.mkdir("pauses");
        repo.write_project_config(config);
        let bin_dir = Path::new(BIN).parent().expect("bin dir").to_path_buf();
        let path = std::env::join_paths(
            std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .expect("PATH");
        let mut client = sb.stdio_with(|c| {
            c.arg("--data-dir")
                .arg(&sb.data_dir)
                .env("PATH", &path)
                .env("FORGE_TEST_STATE", &state)
                .env("FORGE_TEST_SCENARIO", scenario)
                .env("FORGE_TEST_PAUSE_DIR", &pauses);
            for (k, v) in env {
                c.env(k, v);
            }
            // Started with a soft limit of 1,000 open files, which it raises; its agents
            // get 1,000 back (forge_core::limits; the agents record it).
            crate::common::soft_open_files(c, 1000);
        });
        client.init(&Init::new(&repo.path));
        LoopTest { client, repo, sb, state, pauses }
    }

    /// Holds the first server at its next pass through the test pause `name`
    /// (`forge_engine::pause`, debug builds): it waits there until [`LoopTest::unhold`].
    pub fn hold(&self, name: &str) {
        std::fs::write(self.pauses.join(name), "").expect("write the pause file");
    }

    /// Waits until the first server is held at the pause `name`.
    pub fn wait_held(&self, name: &str) {
        let reached = self.pauses.join(format!("{name}.reached"));
        wait_for(LOOP_WAIT, || reached.exists().then_some(()))
            .unwrap_or_else(|| panic!("the server did not reach the pause {name}{}", self.report()));
    }

    /// Lets the first server go on from the pause `name`.
    pub fn unhold(&self, name: &str) {
        std::fs::remove_file(self.pauses.join(name)).expect("remove the pause file");
    }

    /// A second server process on the same data directory (initialized on the repository),
    /// whose agents run this test's scripted agent with `env` (as [`LoopTest::launch`]).
    pub fn other_server(&self, scenario: &str, env: &[(&str, &str)]) -> Client {
        let bin_dir = Path::new(BIN).parent().expect("bin dir").to_path_buf();
        let path = std::env::join_paths(
            std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .expect("PATH");
        let mut client = self.sb.stdio_with(|c| {
            c.arg("--data-dir")
                .arg(&self.sb.data_dir)
                .env("PATH", &path)
                .env("FORGE_TEST_STATE", &self.state)
                .env("FORGE_TEST_SCENARIO", scenario);
            for (k, v) in env {
                c.env(k, v);
            }
        });
        client.init(&Init::new(&self.repo.path));
        client
    }

    /// `forge.execute-plan`; returns the loop's name.
    pub fn execute(&self, title: &str, plan: &str) -> String {
        let out = self.client.tool_ok("execute-plan", json!({ "title": title, "plan": plan }));
        let name = out.data["loopName"].as_str().unwrap_or_else(|| panic!("no loopName in {:?}", out)).to_string();
        assert!(out.text.contains("Loop activated!"), "{}", out.text);
        name
    }

    /// A file of the agent's state directory, if it exists.
    pub fn state_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.state.join(name)).ok()
    }

    /// Waits for a state file to appear (written by the agent).
    pub fn wait_state_file(&self, name: &str) -> String {
        wait_for(LOOP_WAIT, || self.state_file(name).filter(|s| !s.trim().is_empty()))
            .unwrap_or_else(|| panic!("the agent did not write {name}{}", self.report()))
    }

    /// Creates a state file (a signal to a waiting agent).
    pub fn signal(&self, name: &str) {
        std::fs::write(self.state.join(name), "go\n").expect("write signal file");
    }

    /// The agent's turn log: (role, session id, pid) per turn, in order.
    pub fn turns(&self) -> Vec<(String, String, u32)> {
        self.state_file("turns")
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[1].to_string(), f[2].to_string(), f[3].parse().unwrap_or(0))
            })
            .collect()
    }

    /// The roles of the turns, in order.
    pub fn roles(&self) -> Vec<String> {
        self.turns().into_iter().map(|t| t.0).collect()
    }

    /// Waits for a `forge/loopStatus` of `name` whose params satisfy `pred`.
    pub fn wait_status(&self, name: &str, what: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
        self.client
            .wait_notification(LOOP_WAIT, |r| {
                r.method() == "forge/loopStatus" && r.params()["loopName"] == json!(name) && pred(r.params())
            })
            .map(|r| r.params().clone())
            .unwrap_or_else(|| panic!("no forge/loopStatus of {name} with {what}{}", self.report()))
    }

    /// Like [`LoopTest::wait_status`], for notifications received after `since`.
    pub fn wait_status_since(
        &self,
        since: Mark,
        name: &str,
        what: &str,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        self.client
            .wait_method_since(since, "forge/loopStatus", LOOP_WAIT, |p| p["loopName"] == json!(name) && pred(p))
            .unwrap_or_else(|| panic!("no forge/loopStatus of {name} with {what}{}", self.report()))
    }

    /// Waits until the loop stopped (a notification with a status other than `running`).
    pub fn wait_end(&self, name: &str) -> Value {
        self.wait_status(name, "a final status", |p| p["status"] != json!("running"))
    }

    /// Every `forge/loopStatus` of `name` received so far (params).
    pub fn statuses(&self, name: &str) -> Vec<Value> {
        self.client
            .notifications_of("forge/loopStatus")
            .into_iter()
            .map(|m| m["params"].clone())
            .filter(|p| p["loopName"] == json!(name))
            .collect()
    }

    /// A read-only connection to the database.
    pub fn ro(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open_with_flags(self.sb.db_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open forge.db read-only");
        c.busy_timeout(Duration::from_secs(10)).expect("busy_timeout");
        c
    }

    /// One row of `loops` as JSON (the columns the tests look at).
    pub fn loop_row(&self, name: &str) -> Value {
        self.ro()
            .query_row(
                "SELECT status, phase, iteration, current_section_index, total_sections, termination_reason,
                        current_session_id, worktree_dir, worktree_branch, audit_count, error_count
                 FROM loops WHERE loop_name = ?1",
                [name],
                |r| {
                    Ok(json!({
                        "status": r.get::<_, String>(0)?, "phase": r.get::<_, String>(1)?,
                        "iteration": r.get::<_, i64>(2)?, "sectionIndex": r.get::<_, i64>(3)?,
                        "totalSections": r.get::<_, i64>(4)?, "terminationReason": r.get::<_, Option<String>>(5)?,
                        "sessionId": r.get::<_, String>(6)?, "worktreeDir": r.get::<_, String>(7)?,
                        "branch": r.get::<_, Option<String>>(8)?, "auditCount": r.get::<_, i64>(9)?,
                        "errorCount": r.get::<_, i64>(10)?,
                    }))
                },
            )
            .unwrap_or_else(|e| panic!("no loop row {name}: {e}"))
    }

    /// The loop's `loop_transitions`, in order.
    pub fn transitions(&self, name: &str) -> Vec<TransitionRow> {
        let c = self.ro();
        let mut st = c
            .prepare(
                "SELECT event_type, transition_kind, from_phase, to_phase, status, reason, iteration, section_index, created_at
                 FROM loop_transitions WHERE loop_name = ?1 ORDER BY id",
            )
            .expect("prepare");
        let rows = st
            .query_map([name], |r| {
                Ok(TransitionRow {
                    event: r.get(0)?,
                    kind: r.get(1)?,
                    from: r.get(2)?,
                    to: r.get(3)?,
                    status: r.get(4)?,
                    reason: r.get(5)?,
                    iteration: r.get(6)?,
                    section: r.get(7)?,
                    at: r.get(8)?,
                })
            })
            .expect("query transitions");
        rows.collect::<Result<_, _>>().expect("transition rows")
    }

    /// [`TransitionRow::brief`] of every transition.
    pub fn briefs(&self, name: &str) -> Vec<String> {
        self.transitions(name).iter().map(TransitionRow::brief).collect()
    }

    /// Asserts the loop's transition log, row by row.
    #[track_caller]
    pub fn assert_transitions(&self, name: &str, expected: &[&str]) {
        let got = self.briefs(name);
        assert_eq!(got, expected, "loop_transitions of {name}{}", self.report());
    }

    /// Rows of a query with one text column per row (NULL as "NULL").
    pub fn strings(&self, sql: &str, name: &str) -> Vec<String> {
        let c = self.ro();
        let mut st = c.prepare(sql).expect("prepare");
        let rows = st
            .query_map([name], |r| Ok(r.get::<_, Option<String>>(0)?.unwrap_or_else(|| "NULL".into())))
            .expect("query");
        rows.collect::<Result<_, _>>().expect("rows")
    }

    /// A count for the loop (`?1` is the loop name).
    pub fn count(&self, sql: &str, name: &str) -> i64 {
        self.ro().query_row(sql, [name], |r| r.get(0)).expect("count")
    }

    /// Checks the `forge/loopStatus` notifications received for `name` against the database
    /// (PROTOCOL.md §7: one after each persisted change): the first shows the started loop
    /// (running, coding, iteration 1, no transition yet); the `lastTransition`s, in order and
    /// without repeats, are exactly the transition log; the last notification shows the final
    /// row (status, phase, iteration, section, reason).
    #[track_caller]
    pub fn assert_notifications_match(&self, name: &str) {
        let rows = self.transitions(name);
        let row = self.loop_row(name);
        let statuses = self.statuses(name);
        let first = statuses.first().unwrap_or_else(|| panic!("no forge/loopStatus for {name}"));
        assert_eq!(
            (&first["status"], &first["phase"], &first["iteration"], &first["lastTransition"]),
            (&json!("running"), &json!("coding"), &json!(1), &Value::Null),
            "the first forge/loopStatus shows the started loop: {first}"
        );
        let key = |kind: &Value, event: &Value, from: &Value, to: &Value, at: &Value| {
            format!(
                "{} {} {}->{} at={at}",
                kind.as_str().unwrap_or("?"),
                event.as_str().unwrap_or("?"),
                from.as_str().unwrap_or("?"),
                to.as_str().unwrap_or("-")
            )
        };
        let mut seen: Vec<String> = vec![];
        for p in &statuses {
            let lt = &p["lastTransition"];
            if lt.is_null() {
                assert!(seen.is_empty(), "a forge/loopStatus without lastTransition after one with it: {p}");
                continue;
            }
            let k = key(&lt["kind"], &lt["event"], &lt["from"], &lt["to"], &lt["at"]);
            if seen.last() != Some(&k) {
                seen.push(k);
            }
        }
        let logged: Vec<String> = rows
            .iter()
            .map(|r| key(&json!(r.kind), &json!(r.event), &json!(r.from), &json!(r.to), &json!(r.at)))
            .collect();
        assert_eq!(seen, logged, "the lastTransitions announced vs loop_transitions{}", self.report());
        let last = statuses.last().expect("a notification");
        for k in ["status", "phase", "iteration", "terminationReason", "totalSections", "branch", "worktreeDir"] {
            assert_eq!(last[k], row[k], "last forge/loopStatus {k} vs the loops row: {last}");
        }
        if row["totalSections"].as_i64() > Some(0) {
            assert_eq!(last["sectionIndex"], row["sectionIndex"], "last forge/loopStatus sectionIndex: {last}");
        } else {
            assert!(last["sectionIndex"].is_null(), "a non-sectioned loop has no sectionIndex: {last}");
        }
        if row["status"] != json!("running") {
            assert!(last["completedAt"].is_i64(), "a stopped loop has completedAt: {last}");
        }
    }

    /// `git log --format=%s <branch>` of the project repository, newest first.
    pub fn log(&self, branch: &str) -> Vec<String> {
        git(&self.repo.path, &["log", "--format=%s", branch]).lines().map(String::from).collect()
    }

    /// Whether the project repository has the branch.
    pub fn has_branch(&self, branch: &str) -> bool {
        !git(&self.repo.path, &["branch", "--list", branch]).is_empty()
    }

    /// Waits until a loop's worktree is removed: its directory is gone and git no longer
    /// lists it (the registration is pruned after the directory is deleted).
    #[track_caller]
    pub fn assert_worktree_removed(&self, name: &str) {
        let row = self.loop_row(name);
        let dir = row["worktreeDir"].as_str().expect("worktreeDir").to_string();
        let gone = wait_for(LOOP_WAIT, || {
            let listed = git(&self.repo.path, &["worktree", "list", "--porcelain"]);
            (!Path::new(&dir).exists() && !listed.contains(&dir)).then_some(())
        });
        if gone.is_none() {
            let files: Vec<String> = walk(Path::new(&dir));
            let listed = git(&self.repo.path, &["worktree", "list", "--porcelain"]);
            panic!(
                "the worktree {dir} of {name} was not removed: files left {files:?}; git worktree list:\n{listed}{}",
                self.report()
            );
        }
    }

    /// The agent turns, the transition log and the server's stderr, for failure messages.
    pub fn report(&self) -> String {
        if !self.sb.db_path().exists() {
            return self.client.diagnostics();
        }
        let names = self
            .strings("SELECT loop_name FROM loops WHERE ?1 = ?1 ORDER BY started_at", "")
            .into_iter()
            .collect::<Vec<_>>();
        let mut s = format!("\n[agent turns]\n{}", self.state_file("turns").unwrap_or_default());
        for n in names {
            s.push_str(&format!("[loop {n}] {}\n", self.loop_row(&n)));
            for b in self.briefs(&n) {
                s.push_str(&format!("  {b}\n"));
            }
        }
        s.push_str(&self.client.diagnostics());
        s
    }
}

impl Drop for LoopTest {
    /// A graceful `shutdown`/`exit` (running loops end with `shutdown`, killing their agent
    /// processes), without panicking when the server does not answer.
    fn drop(&mut self) {
        if !self.client.is_alive() {
            return;
        }
        let id = self.client.send_request("shutdown", Value::Null);
        let answered = self.client.wait_until(Duration::from_secs(20), |s| s.responses.get(&id).map(|_| ())).is_some();
        if answered {
            self.client.notify("exit", Value::Null);
            let _ = self.client.wait_exit(Duration::from_secs(20));
        }
    }
}

/// Every path under `dir` (relative), for failure messages.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap_or(&p).display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// Whether a process is alive (exists and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // pid (comm) STATE ...: the state follows the last ')'.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start().chars().next().unwrap_or('?');
            state != 'Z' && state != 'X'
        }
        Err(_) => false,
    }
}
