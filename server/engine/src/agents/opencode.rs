//! OpenCode (`opencode-ai`, tried 1.18.33): `opencode run --format json`, the prompt on
//! standard input.
//!
//! - Resume: OpenCode's own session id (`ses_…`, the `sessionID` of its events) is recorded
//!   after the first turn and given as `--session <id>` on later turns.
//! - Model: `-m <provider>/<model>` (`executionModel`, `auditorModel`, … as configured);
//!   the role's variant (`executionVariant`, `auditorVariant`) as `--variant <variant>`.
//! - MCP: `OPENCODE_CONFIG_CONTENT` (merged into the server's own value of that variable,
//!   if any) adds the local server `forge` = `<this forge-lsp> mcp` and allows edits and
//!   bash without asking; nothing is written to disk. Tools appear as `forge_<tool>`.
//! - Sandbox: OpenCode runs its `bash` tool as `$SHELL -c …`; the host's `SHELL` is the
//!   loop's sandbox shim, so every command runs in the sandbox. OpenCode itself (its file
//!   edits) runs on the host, in the worktree (`PWD` is the worktree: OpenCode takes its
//!   project from `$PWD`).
//! - Usage: one line per `step_finish` event (per step; cached tokens not in `input`).

use std::path::Path;

use forge_domain::agent_output::Cli;
use serde_json::{json, Value};

use super::{env, AgentHost, Launch, Run};
use crate::turn::{TurnOutcome, TurnRequest};

#[derive(Debug, Clone, Copy)]
pub struct OpenCode;

/// `OPENCODE_CONFIG_CONTENT`: `base` (the server's value, if a JSON object) plus the
/// Forge MCP server and the permissions a headless run needs.
pub fn config_content(base: Option<&str>, mcp_bin: &str) -> String {
    let mut v: Value = base.and_then(|b| serde_json::from_str(b).ok()).filter(Value::is_object).unwrap_or(json!({}));
    let o = v.as_object_mut().expect("an object");
    let mcp = o.entry("mcp").or_insert_with(|| json!({}));
    if !mcp.is_object() {
        *mcp = json!({});
    }
    mcp["forge"] = json!({"type": "local", "command": [mcp_bin, "mcp"], "enabled": true});
    let perm = o.entry("permission").or_insert_with(|| json!({}));
    if !perm.is_object() {
        *perm = json!({});
    }
    perm["edit"] = json!("allow");
    perm["bash"] = json!("allow");
    o.entry("autoupdate").or_insert(json!(false));
    o.entry("share").or_insert(json!("disabled"));
    v.to_string()
}

impl AgentHost for OpenCode {
    fn prepare(&self, req: &TurnRequest, _prompt_file: &Path) -> Result<Launch, String> {
        let mut args: Vec<String> = vec!["run".into(), "--format".into(), "json".into()];
        if let Some(m) = req.model.as_deref().filter(|m| !m.is_empty()) {
            args.extend(["-m".into(), m.to_string()]);
            // The model's variant (reasoning effort: `high`, `max`, ...), only with a model.
            if let Some(v) = req.variant.as_deref().filter(|v| !v.is_empty()) {
                args.extend(["--variant".into(), v.to_string()]);
            }
        }
        if let Some(id) = super::cli_session(req).filter(|_| req.resume) {
            args.extend(["--session".into(), id]);
        }
        let base = std::env::var("OPENCODE_CONFIG_CONTENT").ok();
        Ok(Launch {
            argv: super::with_program(req, "opencode", args),
            env: vec![
                env("OPENCODE_CONFIG_CONTENT", config_content(base.as_deref(), &super::mcp_command())),
                env("OPENCODE_DISABLE_AUTOUPDATE", "1"),
                env("OPENCODE_DISABLE_SHARE", "1"),
            ],
            whole_in_sandbox: None,
            template: false,
        })
    }

    fn finish(&self, req: &TurnRequest, run: &Run) -> TurnOutcome {
        super::finish_preset(Cli::OpenCode, req, run)
    }

    fn keep_stdout(&self) -> usize {
        super::PRESET_KEEP
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::req;
    use super::*;

    #[test]
    fn argv_for_first_and_resumed_turns() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::OpenCode));
        let l = OpenCode.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(l.argv, ["opencode", "run", "--format", "json", "-m", "m1"]);
        assert_eq!(l.whole_in_sandbox, None);
        // a later turn without a recorded OpenCode session starts a new one
        r.resume = true;
        assert_eq!(OpenCode.prepare(&r, Path::new("/p")).unwrap().argv.len(), 6);
        super::super::save_cli_session(&r, "ses_abc");
        r.argv = vec!["/opt/oc/opencode".into()];
        r.model = None;
        let l = OpenCode.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(l.argv, ["/opt/oc/opencode", "run", "--format", "json", "--session", "ses_abc"]);
    }

    #[test]
    fn variant_follows_the_model() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::OpenCode));
        r.variant = Some("max".into());
        let l = OpenCode.prepare(&r, Path::new("/p")).unwrap();
        let i = l.argv.iter().position(|a| a == "-m").unwrap();
        assert_eq!(l.argv[i..i + 4], ["-m", "m1", "--variant", "max"]);
        r.model = None;
        let l = OpenCode.prepare(&r, Path::new("/p")).unwrap();
        assert!(!l.argv.iter().any(|a| a == "--variant"), "{:?}", l.argv);
    }

    #[test]
    fn config_content_merges_the_forge_server() {
        let table: &[(Option<&str>, Value)] = &[
            (
                None,
                json!({"mcp": {"forge": {"type": "local", "command": ["/b/forge-lsp", "mcp"], "enabled": true}},
                          "permission": {"edit": "allow", "bash": "allow"}, "autoupdate": false, "share": "disabled"}),
            ),
            (
                Some(
                    r#"{"model":"x/y","mcp":{"other":{"type":"remote"}},"permission":{"webfetch":"deny","bash":"ask"},"autoupdate":true}"#,
                ),
                json!({"model": "x/y", "mcp": {"other": {"type": "remote"},
                    "forge": {"type": "local", "command": ["/b/forge-lsp", "mcp"], "enabled": true}},
                    "permission": {"webfetch": "deny", "edit": "allow", "bash": "allow"}, "autoupdate": true, "share": "disabled"}),
            ),
            (
                Some("not json"),
                json!({"mcp": {"forge": {"type": "local", "command": ["/b/forge-lsp", "mcp"], "enabled": true}},
                          "permission": {"edit": "allow", "bash": "allow"}, "autoupdate": false, "share": "disabled"}),
            ),
        ];
        for (base, want) in table {
            let got: Value = serde_json::from_str(&config_content(*base, "/b/forge-lsp")).unwrap();
            assert_eq!(&got, want, "{base:?}");
        }
    }
}
