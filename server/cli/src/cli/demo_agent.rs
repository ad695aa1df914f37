//! `forge-lsp demo-agent` (hidden): the scripted agent of `forge-lsp demo`. No model: it
//! plays its role (`FORGE_ROLE`) from a fixed script and calls the tools through the same
//! code as `forge-lsp call` (so through `FORGE_LSP_SOCKET`, as the loop's session).
//!
//! The script, in the loop's worktree:
//! - coder, section 1: writes `greet.sh` with a misspelled greeting, runs it with
//!   `forge.shell` (sandboxed when the loop is), hands off; called again after a finding,
//!   it fixes the spelling and hands off.
//! - auditor, section 1: finds the misspelling the first time (a `bug` finding on
//!   `greet.sh:2`, handoff without summary, so the coder gets another turn); once fixed,
//!   deletes the finding and hands off clean with a section summary.
//! - coder, section 2: writes `NOTES.md`; auditor, section 2: clean with a summary.
//! - post_action (only if configured): completes the loop.

use std::io::Read;
use std::path::Path;

use forge_protocol::CommandResult;
use serde_json::{json, Value};

use super::call::{call_tool, CallArgs};

/// The script's file, its first version (with the misspelling) and the fixed one.
pub const SCRIPT: &str = "greet.sh";
const SCRIPT_V1: &str = "#!/bin/sh\necho \"Helo, world\"\n";
const MISSPELLED: &str = "Helo,";
const NOTES: &str = "NOTES.md";
const NOTES_TEXT: &str = "# Notes\n\nRun `sh greet.sh` to print a greeting.\n";

/// Runs one turn; the exit status the loop reads (0: the turn ended, with its reply on
/// standard output; 1: the turn failed, with the reason on standard error).
pub fn run() -> i32 {
    // The prompt arrives on standard input; this agent follows its script instead.
    let mut prompt = String::new();
    let _ = std::io::stdin().read_to_string(&mut prompt);
    let role = std::env::var("FORGE_ROLE").unwrap_or_default();
    let outcome = match role.as_str() {
        "coder" => coder(),
        "auditor" => auditor(),
        "post_action" => post_action(),
        "" => Err("FORGE_ROLE is not set: the demo agent runs only inside a loop started by `forge-lsp demo`".into()),
        other => Err(format!("unknown FORGE_ROLE {other:?} (expected coder, auditor or post_action)")),
    };
    match outcome {
        Ok(reply) => {
            println!("{reply}");
            0
        }
        Err(e) => {
            eprintln!("forge-lsp demo-agent ({role}): {e}");
            1
        }
    }
}

/// Calls one tool as this loop session.
fn tool(name: &str, input: Value) -> Result<CommandResult, String> {
    let args = CallArgs {
        tool: name.to_string(),
        input: Some(input.to_string()),
        json: false,
        agent: None,
        session: None,
        data_dir: None,
        project: None,
        verbose: false,
    };
    call_tool(&args).map_err(|e| format!("forge.{name} failed: {}", e.message))
}

/// The 0-based index of the section being worked on.
fn section() -> Result<i64, String> {
    let r = tool("section-read", json!({}))?;
    r.data.get("index").and_then(Value::as_i64).ok_or_else(|| format!("section-read gave no section index: {}", r.text))
}

fn read(file: &str) -> Option<String> {
    std::fs::read_to_string(Path::new(file)).ok()
}

fn write(file: &str, text: &str) -> Result<(), String> {
    std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
}

fn coder() -> Result<String, String> {
    let (summary, verification) = match section()? {
        0 => {
            let summary = match read(SCRIPT) {
                None => {
                    write(SCRIPT, SCRIPT_V1)?;
                    "added greet.sh, which prints a greeting"
                }
                Some(text) => {
                    write(SCRIPT, &text.replace(MISSPELLED, "Hello,"))?;
                    "fixed the greeting's spelling (the auditor's finding on greet.sh:2)"
                }
            };
            // Run it as the plan's verification says, through forge.shell: inside the
            // loop's sandbox when it has one.
            let run = tool("shell", json!({ "command": "sh greet.sh" }))?;
            let ok = run.data.get("exitCode").and_then(Value::as_i64) == Some(0);
            (
                summary,
                json!({ "command": "sh greet.sh", "cwd": ".", "outcome": if ok { "pass" } else { "fail" }, "changedAfter": false }),
            )
        }
        _ => {
            write(NOTES, NOTES_TEXT)?;
            (
                "documented greet.sh in NOTES.md",
                json!({ "command": "cat NOTES.md", "cwd": ".", "outcome": "pass", "changedAfter": false }),
            )
        }
    };
    tool(
        "loop-handoff",
        json!({ "changes": [{ "summary": summary, "reason": "the plan's current section asks for it" }], "verification": [verification] }),
    )?;
    Ok(format!("coder: {summary}; handed off to the auditor"))
}

fn auditor() -> Result<String, String> {
    let k = section()?;
    if k == 0 && read(SCRIPT).is_some_and(|t| t.contains(MISSPELLED)) {
        tool(
            "review-write",
            json!({
                "file": SCRIPT, "line": 2, "severity": "bug",
                "description": "The greeting is misspelled: greet.sh prints \"Helo, world\" instead of \"Hello, world\".",
                "scenario": "Run `sh greet.sh`."
            }),
        )?;
        tool("loop-handoff", json!({ "notes": "One bug: the greeting is misspelled (greet.sh:2)." }))?;
        return Ok("auditor: found a bug on greet.sh:2; back to the coder".into());
    }
    let done = if k == 0 {
        // The fix is in: the finding is resolved (a finding that does not exist is fine).
        let _ = tool("review-delete", json!({ "file": SCRIPT, "line": 2 }));
        "greet.sh prints \"Hello, world\" (the misspelling found in the first audit is fixed)"
    } else {
        "NOTES.md says how to run greet.sh"
    };
    tool("loop-handoff", json!({ "summary": { "done": [done], "deviations": [], "followUps": ["none"] } }))?;
    Ok(format!("auditor: section {} is clean", k + 1))
}

fn post_action() -> Result<String, String> {
    tool(
        "loop-complete",
        json!({ "outcome": "completed", "steps": [{ "name": "nothing to do", "status": "done", "detail": "the demo has no post-action" }] }),
    )?;
    Ok("post-action: completed".into())
}
