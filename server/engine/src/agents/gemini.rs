//! Gemini CLI (`@google/gemini-cli`, tried 0.61.0): `gemini -p "" --output-format json
//! --approval-mode yolo --skip-trust`, the prompt on standard input.
//!
//! - Session: `--session-id {session_uuid}` on the first turn, `--resume <that id>` later
//!   (kept only after a turn that completed; a retry after a failed first turn gets a UUID
//!   of its own, since Gemini refuses a session id it has seen).
//! - Model: `-m <model>`.
//! - MCP: Gemini reads MCP servers only from settings files, so the turns run with
//!   `GEMINI_CLI_HOME=<dataDir>/agent-homes/gemini` ([`loop_home`]): its
//!   `.gemini/settings.json` is the user's own plus `mcpServers.forge = {command: <this
//!   forge-lsp>, args: ["mcp"], trust: true, env: {FORGE_SESSION_TOKEN:
//!   "$FORGE_SESSION_TOKEN"}}` (Gemini drops token-like variables from MCP servers'
//!   environment unless named); the rest of the user's `.gemini` folder is linked.
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

/// The user's home as Gemini CLI reads it: `$GEMINI_CLI_HOME`, else `$HOME`.
fn user_gemini_home() -> Option<PathBuf> {
    let home = std::env::var_os("GEMINI_CLI_HOME")
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()))?;
    Some(PathBuf::from(home))
}

/// The `GEMINI_CLI_HOME` of the loop's turns, in the data directory (never the worktree):
/// its `.gemini/settings.json` is the user's own settings plus the Forge MCP server (and,
/// unless the project's configuration is trusted, `advanced.ignoreLocalEnv`), and every
/// other entry of the user's `.gemini` folder (the login, accounts, extensions, the
/// sessions Gemini keeps in `tmp/`) is a link to it, so Gemini runs as the user's own.
///
/// Gemini reads MCP servers only from settings files. This replaced a system settings file
/// (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`), which Gemini CLI loads only when it and every folder
/// above it are owned by root and writable by no one else: for any other user it was
/// skipped with a warning, so the loop's agent had no Forge tools and read the
/// repository's `.env` (a review). The user settings file has no such check.
fn loop_home(req: &TurnRequest, user_home: Option<PathBuf>) -> Result<PathBuf, String> {
    let home = req.data_dir.join("agent-homes").join(if req.project_config { "gemini-trusted" } else { "gemini" });
    let dir = home.join(".gemini");
    forge_core::paths::create_private_dirs(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let user_home = user_home.filter(|u| u != &home);
    // Gemini reads the `.env` of its home too (where an API key often is): the user's.
    if let Some(u) = &user_home {
        link_entry(&u.join(".env"), &home.join(".env"));
    }
    let user = user_home.map(|u| u.join(".gemini"));
    let base_path = user.as_ref().map(|u| u.join("settings.json"));
    let base = match &base_path {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot read Gemini CLI's settings {}: {e}", p.display())),
        },
        None => None,
    };
    let mut merged = settings(base.as_deref(), &super::mcp_command()).map_err(|why| {
        let p = base_path.as_deref().unwrap_or(Path::new("?"));
        format!("Gemini CLI's settings {} {why}; the loop's turns need them (fix the file)", p.display())
    })?;
    if !req.project_config {
        // Not a `.env` of the repository either (Gemini reads the first one up from the
        // working directory into its own environment: an endpoint, a proxy for the
        // API key); the one in the user's `.gemini` folder still applies.
        ignore_local_env(&mut merged);
    }
    let text = serde_json::to_string_pretty(&merged).map_err(|e| format!("cannot write Gemini settings: {e}"))?;
    let file = dir.join("settings.json");
    super::write_private(&file, text.as_bytes())
        .map_err(|e| format!("cannot write Gemini settings {}: {e}", file.display()))?;
    if let Some(user) = &user {
        link_user_entries(user, &dir);
    }
    Ok(home)
}

/// A link at `at` to `target` when `target` exists and nothing is at `at` yet (an entry
/// Gemini made there itself, before the user had one, is left as it is); a link of ours
/// whose target is gone is removed.
fn link_entry(target: &Path, at: &Path) {
    let ours = std::fs::symlink_metadata(at);
    if ours.as_ref().is_ok_and(|m| m.file_type().is_symlink()) && std::fs::symlink_metadata(target).is_err() {
        let _ = std::fs::remove_file(at);
        return;
    }
    if ours.is_ok() || std::fs::symlink_metadata(target).is_err() {
        return;
    }
    if let Err(err) = std::os::unix::fs::symlink(target, at) {
        tracing::warn!("cannot link {} to {}: {err}", at.display(), target.display());
    }
}

/// Links every entry of the user's `.gemini` folder but its settings into `dir` (those
/// already there are left as they are); a link whose entry is gone from the user's
/// folder is removed. Failures are logged: Gemini then runs without that entry.
fn link_user_entries(user: &Path, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(user) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        if name == "settings.json" {
            continue;
        }
        link_entry(&e.path(), &dir.join(&name));
    }
    // Links to entries gone from the user's folder go ([`link_entry`] removes them).
    let Ok(ours) = std::fs::read_dir(dir) else { return };
    for e in ours.flatten() {
        let name = e.file_name();
        if name != "settings.json" {
            link_entry(&user.join(&name), &dir.join(&name));
        }
    }
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
        let home = loop_home(req, user_gemini_home())?;
        Ok(Launch {
            argv: super::with_program(req, "gemini", args),
            env: std::iter::once(env("GEMINI_CLI_HOME", home)).chain(super::sandbox_tmpdir(req)).collect(),
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
        let (_, home) = l.env.iter().find(|(k, _)| k == "GEMINI_CLI_HOME").unwrap();
        assert!(!l.env.iter().any(|(k, _)| k == "GEMINI_CLI_SYSTEM_SETTINGS_PATH"), "{:?}", l.env);
        let path = Path::new(home).join(".gemini/settings.json");
        assert!(path.starts_with(d.path()), "{}", path.display());
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(s["mcpServers"]["forge"]["args"][0], "mcp");
        assert_eq!(s["mcpServers"]["forge"]["env"]["FORGE_SESSION_TOKEN"], "$FORGE_SESSION_TOKEN");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
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
            let (_, home) = l.env.iter().find(|(k, _)| k == "GEMINI_CLI_HOME").unwrap();
            let path = Path::new(home).join(".gemini/settings.json");
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

    /// The loop's Gemini home carries the user's settings with the Forge MCP server, and
    /// links the rest of the user's `.gemini` folder (the login, the kept sessions).
    #[test]
    fn the_loop_home_carries_the_users_settings_and_links_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let r = req(d.path(), Some(Cli::Gemini));
        let user_home = d.path().join("home");
        let user = user_home.join(".gemini");
        std::fs::create_dir_all(user.join("tmp")).unwrap();
        std::fs::write(user_home.join(".env"), "GEMINI_API_KEY=k").unwrap();
        std::fs::write(user.join("settings.json"), r#"{"security":{"auth":{"selectedType":"oauth-personal"}}}"#)
            .unwrap();
        std::fs::write(user.join("oauth_creds.json"), "{}").unwrap();
        let home = loop_home(&r, Some(user_home.clone())).unwrap();
        let ours = home.join(".gemini");
        let s: Value = serde_json::from_str(&std::fs::read_to_string(ours.join("settings.json")).unwrap()).unwrap();
        assert_eq!(s["security"]["auth"]["selectedType"], "oauth-personal");
        assert_eq!(s["mcpServers"]["forge"]["args"][0], "mcp");
        assert_eq!(s["advanced"]["ignoreLocalEnv"], json!(true));
        assert_eq!(std::fs::read_link(ours.join("oauth_creds.json")).unwrap(), user.join("oauth_creds.json"));
        assert_eq!(std::fs::read_link(ours.join("tmp")).unwrap(), user.join("tmp"));
        // The home's `.env` (an API key), which Gemini reads from its home.
        assert_eq!(std::fs::read_link(home.join(".env")).unwrap(), user_home.join(".env"));
        // The user's settings file itself is never linked (nor written).
        assert!(!std::fs::symlink_metadata(ours.join("settings.json")).unwrap().file_type().is_symlink());
        // An entry gone from the user's folder: its link goes too; a new one is linked.
        std::fs::remove_file(user.join("oauth_creds.json")).unwrap();
        std::fs::write(user.join("google_accounts.json"), "{}").unwrap();
        loop_home(&r, Some(user_home.clone())).unwrap();
        assert!(std::fs::symlink_metadata(ours.join("oauth_creds.json")).is_err());
        assert!(std::fs::symlink_metadata(ours.join("google_accounts.json")).unwrap().file_type().is_symlink());
        // Settings that are not JSON fail the turn, naming the file.
        std::fs::write(user.join("settings.json"), "{oops").unwrap();
        let e = loop_home(&r, Some(user_home.clone())).unwrap_err();
        assert!(e.contains(&user.join("settings.json").display().to_string()) && e.contains("not JSON"), "{e}");
        // No user folder (an API key in the environment): the settings alone.
        assert!(loop_home(&r, None).is_ok());
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
