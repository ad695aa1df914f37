//! Helpers for the loop resilience tests (`loops_resilience.rs`): a [`LoopTest`] whose agent
//! is `tests/agents/resilience.sh`, started with `--session={session} --resume={resume}
//! --model={model}` so it can log what the server passed, plus views of the server's prompt
//! files, the loop row's resilience columns and the usage rows.

#![allow(dead_code)] // each test uses a different part

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::wait_for;
use crate::loop_support::{pid_alive, LoopTest, LOOP_WAIT};

/// The one-line prompt of a busy turn the watchdog aborted (`runner::CONTINUE_NUDGE`).
pub const CONTINUE_NUDGE: &str =
    "Continue where you left off: finish the work of this turn, then call the handoff tool and end your turn.";
/// The prompt of a busy turn the watchdog aborted after it had handed off
/// (`runner::DISCARDED_HANDOFF_NUDGE`).
pub const DISCARDED_HANDOFF_NUDGE: &str = "Your last turn was stopped because it kept working after calling the handoff tool, so that handoff was discarded. Finish the work, call the handoff tool again, and end your turn right after it.";

/// The scripted resilience agent.
pub fn agent_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/agents/resilience.sh")
        .canonicalize()
        .expect("tests/agents/resilience.sh exists")
}

/// A project whose agent is `resilience.sh` running `scenario`. `top_toml` goes first in the
/// project's `.forge/config.toml` (top-level keys, then tables such as `[loop]`); the agent
/// command and the `[sandbox]` table (on where bubblewrap works) follow. `env` is added to
/// the server's environment (the agent inherits it).
pub fn start(scenario: &str, top_toml: &str, env: &[(&str, &str)]) -> LoopTest {
    let config = format!(
        "{top_toml}\n\n[agent]\ncommand = [{:?}, \"--session={{session}}\", \"--resume={{resume}}\", \"--model={{model}}\"]\n\n{}",
        agent_script().display().to_string(),
        crate::common::sandbox_toml()
    );
    LoopTest::launch(&config, scenario, env)
}

/// One agent turn as the agent saw it: its argv placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgTurn {
    pub n: u32,
    pub role: String,
    pub session: String,
    pub resume: String,
    pub model: String,
}

/// The agent's `argv` log, in order.
pub fn arg_turns(t: &LoopTest) -> Vec<ArgTurn> {
    let field = |f: &str, key: &str| f.strip_prefix(key).unwrap_or_else(|| panic!("{key} in {f:?}")).to_string();
    t.state_file("argv")
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 5, "an argv log line: {l:?}");
            ArgTurn {
                n: f[0].parse().expect("turn number"),
                role: f[1].to_string(),
                session: field(f[2], "session="),
                resume: field(f[3], "resume="),
                model: field(f[4], "model="),
            }
        })
        .collect()
}

/// `role session resume model` per turn, with the session ids replaced by short labels
/// (`S1`, `S2`, … in order of first appearance; an empty resume as `-`), for readable
/// assertions on which turns shared a session.
pub fn labelled(turns: &[ArgTurn]) -> Vec<String> {
    let mut seen: Vec<String> = vec![];
    let mut label = |id: &str| -> String {
        if id.is_empty() {
            return "-".into();
        }
        let i = seen.iter().position(|s| s == id).unwrap_or_else(|| {
            seen.push(id.to_string());
            seen.len() - 1
        });
        format!("S{}", i + 1)
    };
    turns
        .iter()
        .map(|a| {
            let s = label(&a.session);
            let r = label(&a.resume);
            let m = if a.model.is_empty() { "-" } else { a.model.as_str() };
            format!("{} {s} {r} {m}", a.role)
        })
        .collect()
}

/// The prompt files the server wrote for the loop (`<data>/prompts/<loop>/<session>-<turn>.md`),
/// as (session, turn, text), sorted by session then turn.
pub fn prompt_files(t: &LoopTest, name: &str) -> Vec<(String, u32, String)> {
    let dir = t.sb.data_dir.join("prompts").join(name);
    let mode = |p: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o777
    };
    // Prompts hold the plan: private, in a private directory.
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    let mut out: Vec<(String, u32, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().to_string();
            let stem = file.strip_suffix(".md")?;
            let (session, turn) = stem.rsplit_once('-')?;
            assert_eq!(mode(&e.path()), 0o600, "{}", e.path().display());
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some((session.to_string(), turn.parse().ok()?, text))
        })
        .collect();
    out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    out
}

/// The loop row's resilience columns as JSON.
pub fn resilience_row(t: &LoopTest, name: &str) -> Value {
    t.ro()
        .query_row(
            "SELECT stall_count, standby_session_id, current_session_id, auditor_fallback_index, model_failed,
                    status, termination_reason, iteration, phase
             FROM loops WHERE loop_name = ?1",
            [name],
            |r| {
                Ok(json!({
                    "stallCount": r.get::<_, i64>(0)?, "standby": r.get::<_, Option<String>>(1)?,
                    "session": r.get::<_, String>(2)?, "fallbackIndex": r.get::<_, i64>(3)?,
                    "modelFailed": r.get::<_, i64>(4)?, "status": r.get::<_, String>(5)?,
                    "terminationReason": r.get::<_, Option<String>>(6)?, "iteration": r.get::<_, i64>(7)?,
                    "phase": r.get::<_, String>(8)?,
                }))
            },
        )
        .unwrap_or_else(|e| panic!("no loop row {name}: {e}"))
}

/// One row of `loop_session_usage`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    pub session: String,
    pub model: String,
    pub role: String,
    pub cost: f64,
    /// input, output, reasoning, cache read, cache write, messages.
    pub counts: [i64; 6],
}

/// The loop's `loop_session_usage` rows, ordered by role, model, session.
pub fn usage_rows(t: &LoopTest, name: &str) -> Vec<UsageRow> {
    let c = t.ro();
    let mut st = c
        .prepare(
            "SELECT session_id, model, role, cost, input_tokens, output_tokens, reasoning_tokens, cache_read_tokens,
                    cache_write_tokens, message_count
             FROM loop_session_usage WHERE loop_name = ?1 ORDER BY role, model, session_id",
        )
        .expect("prepare");
    let rows = st
        .query_map([name], |r| {
            Ok(UsageRow {
                session: r.get(0)?,
                model: r.get(1)?,
                role: r.get(2)?,
                cost: r.get(3)?,
                counts: [r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?],
            })
        })
        .expect("query usage");
    rows.collect::<Result<_, _>>().expect("usage rows")
}

/// Sends `workspace/didChangeConfiguration` with `forge` settings (merged over the files).
pub fn change_config(t: &LoopTest, forge: Value) {
    t.client.notify("workspace/didChangeConfiguration", json!({ "settings": { "forge": forge } }));
}

/// Waits until none of `pids` is alive; panics naming the survivors.
#[track_caller]
pub fn assert_all_dead(t: &LoopTest, pids: &[u32]) {
    let dead = wait_for(Duration::from_secs(30), || pids.iter().all(|&p| !pid_alive(p)).then_some(()));
    if dead.is_none() {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
        panic!("agent processes still alive: {alive:?} of {pids:?}{}", t.report());
    }
}

/// Waits until the agent's `argv` log has at least `n` turns.
pub fn wait_turns(t: &LoopTest, n: usize) -> Vec<ArgTurn> {
    wait_for(LOOP_WAIT, || {
        let a = arg_turns(t);
        (a.len() >= n).then_some(a)
    })
    .unwrap_or_else(|| panic!("the agent did not run {n} turns{}", t.report()))
}
