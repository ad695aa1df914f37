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
//! - The repository's configuration: unless `agent.trustProjectConfig`, a turn in a
//!   worktree with `opencode.json`, `opencode.jsonc` or `.opencode/` is not started (the
//!   host asks [`super::config_refusal`]: OpenCode imports their plugins into its own
//!   process, on the host, even with the variable below), and
//!   `OPENCODE_DISABLE_PROJECT_CONFIG=1` is set; the worktree's `AGENTS.md`
//!   (else `CLAUDE.md`, `CONTEXT.md`), which OpenCode then no longer reads, is named in
//!   `instructions`.
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

/// A project's OpenCode configuration: OpenCode imports the plugins it names or holds
/// (`.opencode/plugin(s)/*.js`, the `plugin` list of `opencode.json`) at its start, in its
/// own process, whatever `OPENCODE_DISABLE_PROJECT_CONFIG` says (its second configuration
/// service does not ask; found by a review of the first version of this preset rule).
pub const PROJECT_CONFIG: [&str; 3] = ["opencode.json", "opencode.jsonc", ".opencode"];

/// The instruction files OpenCode reads from a project (the first of them found), which
/// it no longer looks for with `OPENCODE_DISABLE_PROJECT_CONFIG`: plain text for the model,
/// so the preset names the worktree's one itself.
const INSTRUCTION_FILES: [&str; 3] = ["AGENTS.md", "CLAUDE.md", "CONTEXT.md"];

/// `OPENCODE_CONFIG_CONTENT`: `base` (the server's value, if a JSON object) plus the
/// Forge MCP server and the permissions a headless run needs, and `instructions` (absolute
/// paths, added to those of `base`).
pub fn config_content(base: Option<&str>, mcp_bin: &str, instructions: &[String]) -> String {
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
    if !instructions.is_empty() {
        let list = o.entry("instructions").or_insert_with(|| json!([]));
        if !list.is_array() {
            *list = json!([]);
        }
        let list = list.as_array_mut().expect("an array");
        for i in instructions {
            if !list.iter().any(|v| v.as_str() == Some(i)) {
                list.push(json!(i));
            }
        }
    }
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
        let mut vars = vec![env("OPENCODE_DISABLE_AUTOUPDATE", "1"), env("OPENCODE_DISABLE_SHARE", "1")];
        let mut instructions = vec![];
        if !req.project_config {
            // Not the worktree's `opencode.json` nor its `.opencode/` (plugins, which OpenCode
            // runs in its own process on the host, MCP servers, commands): they come with
            // the repository. OpenCode imports plugins even with the variable below, so the
            // host does not start a turn in a worktree that has them
            // (`agents::config_refusal`); the variable stays for what else it reads. Its
            // instructions file is text for the model, named instead.
            vars.push(env("OPENCODE_DISABLE_PROJECT_CONFIG", "1"));
            instructions.extend(
                INSTRUCTION_FILES
                    .iter()
                    .find_map(|f| super::regular_file(&req.cwd, f))
                    .and_then(|p| p.to_str().map(str::to_string)),
            );
        }
        vars.insert(
            0,
            env("OPENCODE_CONFIG_CONTENT", config_content(base.as_deref(), &super::mcp_command(), &instructions)),
        );
        Ok(Launch {
            argv: super::with_program(req, "opencode", args),
            env: vars,
            whole_in_sandbox: None,
            template: false,
            keep_env: vec![],
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
            let got: Value = serde_json::from_str(&config_content(*base, "/b/forge-lsp", &[])).unwrap();
            assert_eq!(&got, want, "{base:?}");
        }
        // Instructions are added to the user's, once.
        let got: Value = serde_json::from_str(&config_content(
            Some(r#"{"instructions":["/u/rules.md","/w/AGENTS.md"]}"#),
            "/b/forge-lsp",
            &["/w/AGENTS.md".to_string(), "/w/x.md".to_string()],
        ))
        .unwrap();
        assert_eq!(got["instructions"], json!(["/u/rules.md", "/w/AGENTS.md", "/w/x.md"]));
    }

    #[test]
    fn the_repository_configuration_is_not_loaded_unless_trusted() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::OpenCode));
        std::fs::create_dir_all(&r.cwd).unwrap();
        let var = |l: &Launch, k: &str| {
            l.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.to_str().expect("UTF-8").to_string())
        };
        let content =
            |l: &Launch| -> Value { serde_json::from_str(&var(l, "OPENCODE_CONFIG_CONTENT").unwrap()).unwrap() };
        // No instructions file in the worktree: none named.
        let l = OpenCode.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(var(&l, "OPENCODE_DISABLE_PROJECT_CONFIG").as_deref(), Some("1"));
        assert_eq!(content(&l).get("instructions"), None);
        // The first of AGENTS.md, CLAUDE.md, CONTEXT.md that is a file.
        std::fs::write(r.cwd.join("CLAUDE.md"), "c").unwrap();
        std::fs::write(r.cwd.join("CONTEXT.md"), "x").unwrap();
        let l = OpenCode.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(content(&l)["instructions"], json!([r.cwd.join("CLAUDE.md").to_str().unwrap()]));
        // Trusted: OpenCode reads the project itself, as it would outside a loop.
        r.project_config = true;
        let l = OpenCode.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(var(&l, "OPENCODE_DISABLE_PROJECT_CONFIG"), None);
        assert_eq!(content(&l).get("instructions"), None);
        // Untrusted, a worktree with OpenCode configuration is refused, naming it (OpenCode
        // imports its plugins whatever the variable says); trusted, it starts.
        for rel in PROJECT_CONFIG {
            let p = r.cwd.join(rel);
            if rel.starts_with('.') {
                std::fs::create_dir_all(p.join("plugins")).unwrap();
            } else {
                std::fs::write(&p, "{}").unwrap();
            }
            let e = super::super::config_refusal(Some(Cli::OpenCode), false, &r.cwd).expect(rel);
            assert!(e.contains(rel) && e.contains("agent.trustProjectConfig") && e.contains("opencode preset"), "{e}");
            assert_eq!(super::super::config_refusal(Some(Cli::OpenCode), true, &r.cwd), None, "{rel}");
            r.project_config = true;
            OpenCode.prepare(&r, Path::new("/p")).expect(rel);
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
}
