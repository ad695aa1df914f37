//! Claude Code (`@anthropic-ai/claude-code`, tried 2.1.332): `claude -p --output-format
//! stream-json --verbose`, the prompt on standard input.
//!
//! - Session: Claude takes a caller-chosen UUID: the first turn runs with `--session-id
//!   {session_uuid}` (a stable UUID derived from the Forge session id); later turns
//!   `--resume <the id Claude reported>`.
//! - Model: `--model <model>`.
//! - MCP: `--mcp-config '{"mcpServers":{"forge":{"type":"stdio","command":"<this
//!   forge-lsp>","args":["mcp"]}}}' --strict-mcp-config`, with `ENABLE_TOOL_SEARCH=false`
//!   (else MCP tools are deferred behind a search tool); tools are `mcp__forge__<tool>`.
//!   Permissions: `--allowedTools` for the file tools, Bash and `mcp__forge` (headless, and
//!   allowed as root, unlike `--dangerously-skip-permissions`).
//! - The repository's settings: `--setting-sources user` (the worktree's
//!   `.claude/settings.json` and `.claude/settings.local.json` are not loaded: their hooks
//!   and `env` would run on the host) unless `agent.trustProjectConfig`. Claude then skips
//!   the project's `CLAUDE.md` too (and its agents, skills and commands), so the first of
//!   `CLAUDE.md`, `.claude/CLAUDE.md` is given with `--append-system-prompt-file`.
//! - Sandbox: `CLAUDE_CODE_SHELL_PREFIX=<shims>/prefix` (`sandbox::shim_dir`): every Bash command
//!   line is handed to that shim (one argument), which runs it with `/bin/bash -c` in the
//!   loop's sandbox. Claude itself (its file tools) runs on the host, in the worktree, with
//!   `TMPDIR=<worktree>/.forge/tmp` (writable inside: each command writes its cwd there).
//! - Usage: the final `result` event, per model for this run
//!   (`model_usage_since_last_result`, with `costUSD`).

use std::path::Path;

use forge_domain::agent_output::Cli;
use serde_json::json;

use super::{env, AgentHost, Launch, Run};
use crate::turn::{TurnOutcome, TurnRequest};

#[derive(Debug, Clone, Copy)]
pub struct Claude;

/// The tools a headless Claude turn may use without asking.
pub const ALLOWED_TOOLS: [&str; 9] = ["Bash", "Edit", "MultiEdit", "Write", "Read", "Glob", "Grep", "LS", "mcp__forge"];

/// The built-in tools of a sandboxed turn (`--tools`): Bash alone, whose commands run in the
/// loop's sandbox. Claude's own file tools (Read, Write, Edit, Glob, Grep, ...) and web
/// tools run in its process on the host, outside the sandbox: a review had them read
/// `~/.ssh`, write the user's configuration and replace the prefix shim, after which the
/// next command ran unsandboxed. The model reads and edits through Bash and the Forge
/// tools (`mcp__forge__apply-patch`, `grep`, `glob`: confined to the worktree).
pub const SANDBOXED_TOOLS: &str = "Bash";

/// The project instruction files Claude reads from its working directory, which
/// `--setting-sources user` leaves out with the rest of the project's configuration.
const MEMORY_FILES: [&str; 2] = ["CLAUDE.md", ".claude/CLAUDE.md"];

/// The shim `CLAUDE_CODE_SHELL_PREFIX` names (written with the other shims).
pub const PREFIX_SHIM: &str = "prefix";

pub fn mcp_config(mcp_bin: &str) -> String {
    json!({"mcpServers": {"forge": {"type": "stdio", "command": mcp_bin, "args": ["mcp"],
        "env": {(super::STRUCTURED_CONTENT_ENV): "off"}}}})
    .to_string()
}

impl AgentHost for Claude {
    fn prepare(&self, req: &TurnRequest, _prompt_file: &Path) -> Result<Launch, String> {
        let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose"].map(String::from).to_vec();
        if let Some(m) = req.model.as_deref().filter(|m| !m.is_empty()) {
            args.extend(["--model".into(), m.to_string()]);
        }
        args.extend(["--mcp-config".into(), mcp_config(&super::mcp_command()), "--strict-mcp-config".into()]);
        if !req.project_config {
            // The user's settings only: the worktree's `.claude/settings.json` and
            // `settings.local.json` come with the repository, and their hooks, `env` and
            // helpers would run on the host.
            args.extend(["--setting-sources".into(), "user".into()]);
            // Claude then no longer reads the project's CLAUDE.md either: text for the
            // model, given as such (a file, not a link: a link could name any file).
            if let Some(md) = MEMORY_FILES.iter().find_map(|f| super::regular_file(&req.cwd, f)) {
                args.extend(["--append-system-prompt-file".into(), md.display().to_string()]);
            }
        }
        if req.shim_dir.is_some() {
            args.extend(["--tools".into(), SANDBOXED_TOOLS.into()]);
            args.extend(["--allowedTools".into(), "Bash".into(), "mcp__forge".into()]);
        } else {
            args.push("--allowedTools".into());
            args.extend(ALLOWED_TOOLS.map(String::from));
        }
        match super::cli_session(req).filter(|_| req.resume) {
            Some(id) => args.extend(["--resume".into(), id]),
            None => args.extend(["--session-id".into(), forge_domain::agent_cli::session_uuid(&req.session_id)]),
        }
        let mut vars = vec![
            env("ENABLE_TOOL_SEARCH", "false"),
            env("DISABLE_AUTOUPDATER", "1"),
            env("DISABLE_TELEMETRY", "1"),
            env("DISABLE_ERROR_REPORTING", "1"),
            env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ];
        if let Some(dir) = &req.shim_dir {
            vars.push(env("CLAUDE_CODE_SHELL_PREFIX", dir.join(PREFIX_SHIM)));
        }
        vars.extend(super::sandbox_tmpdir(req));
        Ok(Launch {
            argv: super::with_program(req, "claude", args),
            env: vars,
            whole_in_sandbox: None,
            template: false,
            keep_env: vec![],
        })
    }

    fn finish(&self, req: &TurnRequest, run: &Run) -> TurnOutcome {
        super::finish_preset(Cli::Claude, req, run)
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
    fn argv_and_environment() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::Claude));
        let l = Claude.prepare(&r, Path::new("/p")).unwrap();
        let uuid = forge_domain::agent_cli::session_uuid("ses_T1");
        assert_eq!(l.argv[..7], ["claude", "-p", "--output-format", "stream-json", "--verbose", "--model", "m1"]);
        assert_eq!(l.argv[l.argv.len() - 2..], ["--session-id".to_string(), uuid.clone()]);
        let i = l.argv.iter().position(|a| a == "--mcp-config").unwrap();
        let cfg: serde_json::Value = serde_json::from_str(&l.argv[i + 1]).unwrap();
        assert_eq!(cfg["mcpServers"]["forge"]["args"][0], "mcp");
        assert_eq!(cfg["mcpServers"]["forge"]["env"][super::super::STRUCTURED_CONTENT_ENV], "off");
        let prefix = l.env.iter().find(|(k, _)| k == "CLAUDE_CODE_SHELL_PREFIX").unwrap();
        assert_eq!(Path::new(&prefix.1), d.path().join("wt/.forge/bin/prefix"));
        assert!(l.env.iter().any(|(k, v)| k == "ENABLE_TOOL_SEARCH" && v == "false"));
        // The repository's own settings are not loaded, unless the user trusts them.
        let sources = |l: &Launch| l.argv.windows(2).any(|w| w == ["--setting-sources", "user"]);
        assert!(sources(&l), "{:?}", l.argv);
        r.project_config = true;
        assert!(!sources(&Claude.prepare(&r, Path::new("/p")).unwrap()));
        r.project_config = false;
        // The project's CLAUDE.md, which Claude then skips, is given as text (a file only).
        let memory =
            |l: &Launch| l.argv.iter().position(|a| a == "--append-system-prompt-file").map(|i| l.argv[i + 1].clone());
        assert_eq!(memory(&l), None);
        std::fs::create_dir_all(r.cwd.join(".claude")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", r.cwd.join("CLAUDE.md")).unwrap();
        std::fs::write(r.cwd.join(".claude/CLAUDE.md"), "notes").unwrap();
        let l = Claude.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(memory(&l).as_deref(), r.cwd.join(".claude/CLAUDE.md").to_str());
        r.project_config = true;
        assert_eq!(memory(&Claude.prepare(&r, Path::new("/p")).unwrap()), None);
        r.project_config = false;
        // resumed: the id Claude reported
        r.resume = true;
        super::super::save_cli_session(&r, &uuid);
        let l = Claude.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(l.argv[l.argv.len() - 2..], ["--resume".to_string(), uuid]);
        // Sandboxed: Bash is the only built-in tool (Claude's file tools run on the host).
        let tools = |l: &Launch| {
            let i = l.argv.iter().position(|a| a == "--tools")?;
            Some(l.argv[i + 1].clone())
        };
        let allowed = |l: &Launch| {
            let i = l.argv.iter().position(|a| a == "--allowedTools").unwrap();
            l.argv[i + 1..].iter().take_while(|a| !a.starts_with("--")).cloned().collect::<Vec<_>>()
        };
        assert_eq!(tools(&l).as_deref(), Some("Bash"));
        assert_eq!(allowed(&l), ["Bash", "mcp__forge"]);
        // no sandbox: no prefix, and Claude's own tools (they reach what Bash reaches)
        r.shim_dir = None;
        let l = Claude.prepare(&r, Path::new("/p")).unwrap();
        assert!(!l.env.iter().any(|(k, _)| k == "CLAUDE_CODE_SHELL_PREFIX"));
        assert_eq!(tools(&l), None);
        assert_eq!(allowed(&l), ALLOWED_TOOLS);
    }
}
