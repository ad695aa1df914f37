//! Gemini CLI (`@google/gemini-cli`, tried 0.61.0): `gemini -p "" --output-format json
//! --approval-mode yolo --skip-trust`, the prompt on standard input.
//!
//! - Session: `--session-id {session_uuid}` on the first turn, `--resume <that id>` later
//!   (kept only after a turn that completed; a retry after a failed first turn gets a UUID
//!   of its own, since Gemini refuses a session id it has seen).
//! - Model: `-m <model>`.
//! - MCP: Gemini reads MCP servers only from settings files, so the host writes a private
//!   settings file per session in the data directory (never in the worktree):
//!   the server's own `GEMINI_CLI_SYSTEM_SETTINGS_PATH` file, else Gemini's default
//!   `/etc/gemini-cli/settings.json` when there is one (read with comments; one that cannot
//!   be used fails the turn), plus
//!   `mcpServers.forge = {command: <this forge-lsp>, args: ["mcp"], trust: true, env:
//!   {FORGE_SESSION_TOKEN: "$FORGE_SESSION_TOKEN"}}` (Gemini drops token-like variables
//!   from MCP servers' environment unless named), and points
//!   `GEMINI_CLI_SYSTEM_SETTINGS_PATH` at it (and `GEMINI_CLI_SYSTEM_DEFAULTS_PATH` at the
//!   `system-defaults.json` beside the original, unless set). Gemini ignores a settings file below a group-
//!   or world-writable directory: keep the data directory out of `/tmp`.
//! - The repository's configuration: `--skip-trust` makes Gemini load the worktree's
//!   `.gemini/` (settings with MCP servers and hooks, `.env`, extensions, agents), and an
//!   untrusted folder is a fatal error in headless mode. So unless
//!   `agent.trustProjectConfig`, a turn in a worktree that has any of
//!   [`WORKSPACE_CONFIG`] is not started (the host asks [`super::config_refusal`]), and
//!   the loop's settings set `advanced.ignoreLocalEnv` (a committed `.env` is not read).
//! - Sandbox: Gemini runs `bash -c …` with `bash` found on `PATH`: the loop's sandbox shim;
//!   `TMPDIR=<worktree>/.forge/tmp` (writable inside: its commands write their background
//!   pids there).
//! - Usage: `stats.models.<model>.tokens` of the final JSON (this run, per model).

use std::path::{Path, PathBuf};

use forge_domain::agent_output::Cli;
use serde_json::{json, Value};

use super::{env, AgentHost, Launch, Run};
use crate::turn::{TurnOutcome, TurnRequest};

#[derive(Debug, Clone, Copy)]
pub struct Gemini;

/// The settings: `base` (a JSON object, else `{}`) plus the Forge MCP server.
pub fn settings(base: Option<&str>, mcp_bin: &str) -> Result<Value, String> {
    let mut v = match base {
        None => json!({}),
        Some(b) => match serde_json::from_str::<Value>(&strip_json_comments(b)) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return Err("is not a JSON object".into()),
            Err(e) => return Err(format!("is not JSON ({e})")),
        },
    };
    let Some(o) = v.as_object_mut() else { return Err("is not a JSON object".into()) };
    let servers = o.entry("mcpServers").or_insert_with(|| json!({}));
    if !servers.is_object() {
        *servers = json!({});
    }
    servers["forge"] = json!({
        "command": mcp_bin, "args": ["mcp"], "trust": true,
        "env": {"FORGE_SESSION_TOKEN": "$FORGE_SESSION_TOKEN"}
    });
    Ok(v)
}

/// `advanced.ignoreLocalEnv = true` in the (system) settings `v`.
fn ignore_local_env(v: &mut Value) {
    let Some(o) = v.as_object_mut() else { return };
    let advanced = o.entry("advanced").or_insert_with(|| json!({}));
    if !advanced.is_object() {
        *advanced = json!({});
    }
    advanced["ignoreLocalEnv"] = json!(true);
}

/// Gemini CLI's system settings file on Linux when `GEMINI_CLI_SYSTEM_SETTINGS_PATH` is not
/// set: its highest-precedence layer (an administrator's), which the loop's own file
/// replaces and so must carry.
const DEFAULT_SYSTEM_SETTINGS: &str = "/etc/gemini-cli/settings.json";

/// JSON with comments (as Gemini CLI reads its settings) as JSON: `//` and `/* */`
/// comments outside strings become spaces.
fn strip_json_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

/// What Gemini CLI loads from a workspace it trusts (and `--skip-trust`, which a headless
/// run needs, trusts the worktree) that can run a program on the host: its settings (MCP
/// servers, hooks, a tool discovery command), the environment file it reads into its own
/// process, extensions, and subagent definitions (which may declare MCP servers).
pub const WORKSPACE_CONFIG: [&str; 4] =
    [".gemini/settings.json", ".gemini/.env", ".gemini/extensions", ".gemini/agents"];

fn settings_file(req: &TurnRequest) -> PathBuf {
    req.data_dir.join("agent-sessions").join(format!("{}.gemini.json", req.session_id))
}

impl AgentHost for Gemini {
    fn prepare(&self, req: &TurnRequest, _prompt_file: &Path) -> Result<Launch, String> {
        let mut args: Vec<String> =
            ["-p", "", "--output-format", "json", "--approval-mode", "yolo", "--skip-trust"].map(String::from).to_vec();
        if let Some(m) = req.model.as_deref().filter(|m| !m.is_empty()) {
            args.extend(["-m".into(), m.to_string()]);
        }
        match super::cli_session(req).filter(|_| req.resume) {
            Some(id) => args.extend(["--resume".into(), id]),
            // A later turn without a saved session (the first failed): Gemini refuses an id
            // it has seen before, so each such attempt gets its own UUID.
            None if req.turn > 1 => args.extend([
                "--session-id".into(),
                forge_domain::agent_cli::session_uuid(&format!("{}#{}", req.session_id, req.turn)),
            ]),
            None => args.extend(["--session-id".into(), forge_domain::agent_cli::session_uuid(&req.session_id)]),
        }
        // The system settings the loop's file takes the place of: the variable's file, else
        // Gemini CLI's default one. One that is there but cannot be used fails the turn,
        // naming it (merging nothing would drop the user's auth and an administrator's
        // policies without a word).
        let base_path = std::env::var_os("GEMINI_CLI_SYSTEM_SETTINGS_PATH")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from(DEFAULT_SYSTEM_SETTINGS)).filter(|p| p.exists()));
        let base = match &base_path {
            // A variable naming no file: Gemini CLI reads that as no settings, so does this.
            Some(p) => match std::fs::read_to_string(p) {
                Ok(t) => Some(t),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(format!("cannot read Gemini CLI's system settings {}: {e}", p.display())),
            },
            None => None,
        };
        let mut merged = settings(base.as_deref(), &super::mcp_command()).map_err(|why| {
            let p = base_path.as_deref().unwrap_or(Path::new("?"));
            format!("Gemini CLI's system settings {} {why}; the loop's turns need them (fix the file)", p.display())
        })?;
        if !req.project_config {
            // Not a `.env` of the repository either (Gemini reads the first one up from the
            // working directory into its own environment: an endpoint, a proxy for the
            // API key); the one in the home directory still applies.
            ignore_local_env(&mut merged);
        }
        let file = settings_file(req);
        if let Some(d) = file.parent() {
            forge_core::paths::create_private_dirs(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        let text = serde_json::to_string_pretty(&merged).map_err(|e| format!("cannot write Gemini settings: {e}"))?;
        super::write_private(&file, text.as_bytes())
            .map_err(|e| format!("cannot write Gemini settings {}: {e}", file.display()))?;
        // Gemini CLI looks for `system-defaults.json` beside the system settings file: keep
        // pointing it at the one beside the original (the loop's file is elsewhere).
        let defaults =
            std::env::var_os("GEMINI_CLI_SYSTEM_DEFAULTS_PATH").filter(|p| !p.is_empty()).is_none().then(|| {
                let dir = base_path.as_deref().and_then(Path::parent).unwrap_or(Path::new("/etc/gemini-cli"));
                env("GEMINI_CLI_SYSTEM_DEFAULTS_PATH", dir.join("system-defaults.json"))
            });
        Ok(Launch {
            argv: super::with_program(req, "gemini", args),
            env: std::iter::once(env("GEMINI_CLI_SYSTEM_SETTINGS_PATH", file))
                .chain(defaults)
                .chain(super::sandbox_tmpdir(req))
                .collect(),
            whole_in_sandbox: None,
            template: false,
            keep_env: vec![],
        })
    }

    fn finish(&self, req: &TurnRequest, run: &Run) -> TurnOutcome {
        super::finish_preset(Cli::Gemini, req, run)
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
    fn argv_and_settings() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::Gemini));
        let l = Gemini.prepare(&r, Path::new("/p")).unwrap();
        let uuid = forge_domain::agent_cli::session_uuid("ses_T1");
        let want: Vec<String> = [
            "gemini",
            "-p",
            "",
            "--output-format",
            "json",
            "--approval-mode",
            "yolo",
            "--skip-trust",
            "-m",
            "m1",
            "--session-id",
        ]
        .map(String::from)
        .into_iter()
        .chain([uuid.clone()])
        .collect();
        assert_eq!(l.argv, want);
        let (_, path) = l.env.iter().find(|(k, _)| k == "GEMINI_CLI_SYSTEM_SETTINGS_PATH").unwrap();
        let s: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(s["mcpServers"]["forge"]["args"][0], "mcp");
        assert_eq!(s["mcpServers"]["forge"]["env"]["FORGE_SESSION_TOKEN"], "$FORGE_SESSION_TOKEN");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(path).unwrap().permissions().mode() & 0o777, 0o600);
        r.resume = true;
        r.turn = 2;
        let retry = Gemini.prepare(&r, Path::new("/p")).unwrap();
        let want = forge_domain::agent_cli::session_uuid("ses_T1#2");
        assert_eq!(retry.argv[retry.argv.len() - 2..], ["--session-id".to_string(), want]);
        super::super::save_cli_session(&r, &uuid);
        let l = Gemini.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(l.argv[l.argv.len() - 2..], ["--resume".to_string(), uuid]);
    }

    #[test]
    fn the_repository_configuration_is_refused_unless_trusted() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::Gemini));
        std::fs::create_dir_all(r.cwd.join(".gemini")).unwrap();
        // A context file or custom commands only: text for the model, not refused; a
        // committed `.env` is not read (ignoreLocalEnv) unless trusted.
        std::fs::write(r.cwd.join(".gemini/GEMINI.md"), "be brief").unwrap();
        let local_env = |l: &Launch| -> Value {
            let (_, path) = l.env.iter().find(|(k, _)| k == "GEMINI_CLI_SYSTEM_SETTINGS_PATH").unwrap();
            let s: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            s["advanced"]["ignoreLocalEnv"].clone()
        };
        assert_eq!(local_env(&Gemini.prepare(&r, Path::new("/p")).unwrap()), json!(true));
        // Each of the files Gemini would run something from: refused, naming it.
        for rel in WORKSPACE_CONFIG {
            let p = r.cwd.join(rel);
            if rel.ends_with(".json") || rel.ends_with(".env") {
                std::fs::write(&p, "{}").unwrap();
            } else {
                std::fs::create_dir_all(&p).unwrap();
            }
            let e = super::super::config_refusal(Some(Cli::Gemini), false, &r.cwd).expect(rel);
            assert!(e.contains(rel) && e.contains("agent.trustProjectConfig"), "{e}");
            // Trusted: Gemini starts and loads them, as outside a loop.
            assert_eq!(super::super::config_refusal(Some(Cli::Gemini), true, &r.cwd), None, "{rel}");
            r.project_config = true;
            let l = Gemini.prepare(&r, Path::new("/p")).expect(rel);
            assert_eq!(local_env(&l), Value::Null, "{rel}");
            r.project_config = false;
            if p.is_dir() {
                std::fs::remove_dir(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
        // A link in its place counts too (Gemini follows it).
        std::os::unix::fs::symlink("/nowhere", r.cwd.join(".gemini/settings.json")).unwrap();
        assert!(super::super::config_refusal(Some(Cli::Gemini), false, &r.cwd).is_some());
    }

    #[test]
    fn settings_merge_into_the_base() {
        let base = r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"mcpServers":{"x":{"command":"y"}}}"#;
        let s = settings(Some(base), "/b/forge-lsp").unwrap();
        assert_eq!(s["security"]["auth"]["selectedType"], "gemini-api-key");
        assert_eq!(s["mcpServers"]["x"]["command"], "y");
        assert_eq!(s["mcpServers"]["forge"]["command"], "/b/forge-lsp");
        assert_eq!(settings(None, "f").unwrap()["mcpServers"]["forge"]["command"], "f");
        // Gemini CLI reads its settings with comments; a file that is not an object or not
        // JSON is an error, not an empty base.
        let jsonc = "{\n  // auth\n  \"security\": {\"auth\": {\"selectedType\": \"a//b\"}} /* end */\n}";
        assert_eq!(settings(Some(jsonc), "f").unwrap()["security"]["auth"]["selectedType"], "a//b");
        assert!(settings(Some("[1]"), "f").unwrap_err().contains("not a JSON object"));
        assert!(settings(Some("{oops"), "f").unwrap_err().contains("not JSON"));
    }
}
