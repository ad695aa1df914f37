//! Agent hosts: how one turn of a loop session becomes a process, and what its output
//! means. [`AgentHost`] has two parts: [`AgentHost::prepare`] (argv, environment, whether
//! the whole process runs in the loop's sandbox) and [`AgentHost::finish`] (the turn's
//! outcome from the exit status and output; usage lines and the CLI's own session id are
//! stored on the way). `engine/src/host.rs` runs the process (process group, stdin,
//! activity, the outcome channel) the same way for every host; the request and outcome
//! types are in `engine/src/turn.rs`.
//!
//! Implementations: [`command::CommandHost`] (`agent.command`, any program) and one preset
//! per agent CLI (`agent.preset`): [`opencode`], [`codex`], [`claude`], [`gemini`]. The
//! presets' pure parts (output parsing, usage) are in `forge_domain::agent_output`.

pub mod claude;
pub mod codex;
pub mod command;
pub mod gemini;
pub mod opencode;

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use forge_core::config::Config;
use forge_domain::agent_output::{self, Cli};
use forge_domain::usage::UsageLine;

use crate::turn::{TurnOutcome, TurnRequest};

/// How to start one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launch {
    pub argv: Vec<String>,
    /// Extra environment (after the host's `FORGE_*`, `PATH`, `SHELL`, `PWD`).
    pub env: Vec<(String, OsString)>,
    /// Run the whole process inside the loop's sandbox (a CLI whose shell commands cannot
    /// be sandboxed from outside), with the network shared (its model endpoint must stay
    /// reachable) and these extra directories writable.
    pub whole_in_sandbox: Option<Vec<PathBuf>>,
    /// With `whole_in_sandbox`: the secret-named variables of the server's environment the
    /// CLI needs (its key); the sandbox drops the others (`secrets::is_secret_env`).
    pub keep_env: Vec<String>,
    /// `argv` is an `agent.command` template: the host expands its placeholders.
    pub template: bool,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The exit code; `None` when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// One agent host.
pub trait AgentHost: Send + Sync {
    /// argv and environment of a turn (`prompt_file` holds the prompt, also on stdin).
    fn prepare(&self, req: &TurnRequest, prompt_file: &Path) -> Result<Launch, String>;
    /// The turn's outcome; may store usage and the CLI's session id.
    fn finish(&self, req: &TurnRequest, run: &Run) -> TurnOutcome;
    /// How much standard output to keep for [`AgentHost::finish`].
    fn keep_stdout(&self) -> usize {
        64 * 1024
    }
}

/// The host of a turn: its preset, else the generic command host.
pub fn host_for(req: &TurnRequest) -> Box<dyn AgentHost> {
    match req.preset {
        Some(Cli::OpenCode) => Box::new(opencode::OpenCode),
        Some(Cli::Codex) => Box::new(codex::Codex),
        Some(Cli::Claude) => Box::new(claude::Claude),
        Some(Cli::Gemini) => Box::new(gemini::Gemini),
        None => Box::new(command::CommandHost),
    }
}

/// The refusal of a turn of `preset` in `worktree` when it holds configuration of that
/// CLI that the CLI would load and that runs programs on the host, and that no flag of the
/// CLI leaves out: Gemini CLI's trusted workspace ([`gemini::WORKSPACE_CONFIG`]), and
/// OpenCode, which imports a project's plugins (`.opencode/`, the `plugin` list of
/// `opencode.json`) even with `OPENCODE_DISABLE_PROJECT_CONFIG` ([`opencode::PROJECT_CONFIG`]).
/// Asked only when the user has not trusted the repository's agent configuration
/// (`agent.trustProjectConfig`): at the loop's start and before every turn (a turn may have
/// written such a file into the worktree for the next one). Files are looked for without
/// following links (a link counts as the file), in `cwd` and each folder above it up to
/// the repository's root.
pub fn repository_config_refusal(preset: Cli, cwd: &Path) -> Option<String> {
    let (cli, files, runs): (&str, &[&str], &str) = match preset {
        Cli::Gemini => ("Gemini CLI", &gemini::WORKSPACE_CONFIG, "its MCP servers, hooks and commands"),
        Cli::OpenCode => ("OpenCode", &opencode::PROJECT_CONFIG, "its plugins, imported into OpenCode's own process"),
        Cli::Claude | Cli::Codex => return None,
    };
    // The working directory and each folder above it up to the repository's root (the
    // first holding `.git`): OpenCode looks for its configuration that far up, and a
    // session outside a loop may start in a folder below the root.
    let mut found: Vec<String> = vec![];
    for dir in cwd.ancestors() {
        for rel in files {
            if std::fs::symlink_metadata(dir.join(rel)).is_ok() {
                found.push(match dir.strip_prefix(cwd) {
                    Ok(p) if p.as_os_str().is_empty() => rel.to_string(),
                    _ => dir.join(rel).display().to_string(),
                });
            }
        }
        if std::fs::symlink_metadata(dir.join(".git")).is_ok() {
            break;
        }
    }
    (!found.is_empty()).then(|| {
        format!(
            "the repository has {cli} configuration ({}), which {cli} would load on the host ({runs} run outside the loop's sandbox); \
             the {} preset does not start in such a worktree unless you trust the repository's agent configuration: set `agent.trustProjectConfig = true` in your user configuration file or the initialization options (docs/agents.md), or remove those files from the branch",
            found.join(", "),
            preset.name()
        )
    })
}

/// [`repository_config_refusal`] for a turn or a start with `preset` (none: the
/// `command` host, which is the user's own program), unless the user trusts the
/// repository's agent configuration (`agent.trustProjectConfig`). The one place the
/// engine asks: the loop's start and restart (`start.rs`) and every turn (`host.rs`).
pub fn config_refusal(preset: Option<Cli>, trusted: bool, cwd: &Path) -> Option<String> {
    preset.filter(|_| !trusted).and_then(|p| repository_config_refusal(p, cwd))
}

/// `dir/rel` when it is a regular file reached without a link (neither the file nor a
/// folder on the way from `dir` is one): for the instruction files a preset gives the
/// model as text, which a link could point at any file (a key, a token).
pub(crate) fn regular_file(dir: &Path, rel: &str) -> Option<PathBuf> {
    let parts: Vec<_> = Path::new(rel).components().collect();
    let mut path = dir.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        path.push(part);
        let m = std::fs::symlink_metadata(&path).ok()?;
        let last = i + 1 == parts.len();
        if (last && !m.is_file()) || (!last && !m.is_dir()) {
            return None;
        }
    }
    Some(path)
}

/// The configured preset, if any.
pub fn preset(config: &Config) -> Option<Cli> {
    config.agent_preset.as_deref().and_then(Cli::parse)
}

/// The argv a turn starts from: `agent.command`; with a preset, `agent.command` (when
/// set) names the CLI program (e.g. `["/opt/claude/bin/claude"]` or `["npx", "claude"]`),
/// else the CLI's usual name found on `PATH`.
pub fn program(config: &Config) -> Option<Vec<String>> {
    let cmd = config.agent_command.clone().filter(|a| !a.is_empty());
    match preset(config) {
        Some(cli) => Some(cmd.unwrap_or_else(|| vec![cli.name().to_string()])),
        None => cmd,
    }
}

/// Where the CLI's own session id of a Forge session is kept (data dir, not the worktree).
fn cli_session_file(req: &TurnRequest) -> PathBuf {
    cli_session_path(&req.data_dir, &req.session_id)
}

/// Where the CLI's own session id of a Forge session is kept.
fn cli_session_path(data_dir: &Path, session_id: &str) -> PathBuf {
    data_dir.join("agent-sessions").join(format!("{session_id}.id"))
}

/// The CLI's own session id recorded for this Forge session (from an earlier turn).
pub fn cli_session(req: &TurnRequest) -> Option<String> {
    recorded_cli_session(&req.data_dir, &req.session_id)
}

/// [`cli_session`] by data directory and Forge session id.
pub fn recorded_cli_session(data_dir: &Path, session_id: &str) -> Option<String> {
    std::fs::read_to_string(cli_session_path(data_dir, session_id))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.len() < 512 && !s.contains(char::is_whitespace))
}

fn save_cli_session(req: &TurnRequest, id: &str) {
    if id.len() >= 512 || id.contains(char::is_whitespace) || cli_session(req).as_deref() == Some(id) {
        return;
    }
    let f = cli_session_file(req);
    if let Some(d) = f.parent() {
        let _ = forge_core::paths::create_private_dirs(d);
    }
    if let Err(e) = write_private(&f, id.as_bytes()) {
        tracing::warn!(session = %req.session_id, "cannot record the agent's session id in {}: {e}", f.display());
    }
}

/// Writes a private (0600) file, replacing it: a temporary of its own renamed over it
/// (`forge_core::beneath`), so a reader never sees half of it and two writers never
/// share a temporary.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{} names no file", path.display())));
    };
    forge_core::beneath::write_file(dir, Path::new(name), data, 0o600)
}

/// Appends usage lines to the session's usage file (`FORGE_USAGE_FILE`); a running total
/// becomes this run's share first.
fn record_usage(req: &TurnRequest, lines: &[UsageLine], cumulative: bool) {
    if lines.is_empty() {
        return;
    }
    let file = crate::turn::usage_file(&req.data_dir, &req.session_id);
    let lines: Vec<UsageLine> = if cumulative {
        let before = std::fs::read_to_string(&file).unwrap_or_default();
        let (prev, _) = forge_domain::usage::parse(&before);
        lines.iter().map(|l| agent_output::delta(l, &prev)).collect()
    } else {
        lines.to_vec()
    };
    let model = req.model.clone().filter(|m| !m.is_empty());
    let mut text = String::new();
    for mut l in lines {
        if l.model.is_none() {
            l.model = model.clone();
        }
        if let Ok(s) = serde_json::to_string(&l) {
            text.push_str(&s);
            text.push('\n');
        }
    }
    use std::io::Write;
    let _ = forge_core::paths::create_private_dirs(&req.data_dir.join("usage"));
    let res = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&file)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = res {
        tracing::warn!(session = %req.session_id, "cannot record usage in {}: {e}", file.display());
    }
}

/// The shared `finish` of the presets: parses the output, records the CLI's session id and
/// the usage, and says how the turn ended. A failed run's message is its structured error
/// (where the CLIs print provider limits), else the tail of standard error.
pub fn finish_preset(cli: Cli, req: &TurnRequest, run: &Run) -> TurnOutcome {
    let out = agent_output::parse(cli, &run.stdout, &run.stderr);
    // Gemini CLI reports its session id in a failed run too, but keeps the session only
    // when a turn completed: resuming an id it never saved resumes another session.
    let keeps_failed = cli != Cli::Gemini;
    if let Some(id) = out.cli_session.as_ref().filter(|_| keeps_failed || (run.code == Some(0) && out.error.is_none()))
    {
        save_cli_session(req, id);
    }
    record_usage(req, &out.usage, out.cumulative);
    match run.code {
        Some(0) if out.error.is_none() => match out.reply {
            Some(r) => TurnOutcome::Reply(r),
            None if run.stdout.trim().is_empty() => TurnOutcome::NoReply,
            // Events but no assistant text (it only called tools): a reply all the same.
            None => TurnOutcome::Reply(String::new()),
        },
        code => {
            let code = match code {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".to_string(),
            };
            let detail = out.error.unwrap_or_else(|| crate::turn::tail_chars(run.stderr.trim(), 500));
            TurnOutcome::Error(if detail.is_empty() {
                format!("{} {code}", cli.name())
            } else {
                format!("{} {code}: {detail}", cli.name())
            })
        }
    }
}

/// Output kept for the presets' parsers (their JSON events).
pub const PRESET_KEEP: usize = 16 * 1024 * 1024;

/// `[program…, args…]` from the configured program and the preset's arguments.
fn with_program(req: &TurnRequest, default: &str, args: Vec<String>) -> Vec<String> {
    let mut argv = if req.argv.is_empty() { vec![default.to_string()] } else { req.argv.clone() };
    argv.extend(args);
    argv
}

/// The Forge MCP server a preset wires its CLI to: this binary's `mcp` command.
fn mcp_command() -> String {
    crate::turn::self_bin().map(|p| p.display().to_string()).unwrap_or_else(|| "forge-lsp".to_string())
}

/// The variable that makes `forge-lsp mcp` leave `structuredContent` out of its results
/// (`docs/mcp.md`): Codex and Claude Code show a result's `structuredContent` to the model
/// instead of its text when both are there, and the text is what an agent should read (a
/// plan's lines are only in `plan-read`'s text).
pub const STRUCTURED_CONTENT_ENV: &str = "FORGE_MCP_STRUCTURED_CONTENT";

/// Variables that identify the session (and its data directory) to `forge-lsp mcp` /
/// `forge-lsp call`.
pub const IDENTITY_VARS: [&str; 6] =
    ["FORGE_SESSION_ID", "FORGE_SESSION_TOKEN", "FORGE_AGENT", "FORGE_LSP_SOCKET", "FORGE_WORKTREE", "FORGE_DATA_DIR"];

/// `TMPDIR` for a CLI whose shell commands run in the sandbox but write into the CLI's
/// temporary directory: `<worktree>/.forge/tmp`, writable inside.
fn sandbox_tmpdir(req: &TurnRequest) -> Option<(String, OsString)> {
    req.shim_dir.as_ref().map(|_| env("TMPDIR", req.cwd.join(crate::sandbox::TMP_DIR)))
}

fn env(k: &str, v: impl Into<OsString>) -> (String, OsString) {
    (k.to_string(), v.into())
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::PathBuf;
    use std::sync::Arc;

    use crate::turn::TurnRequest;

    pub fn req(dir: &std::path::Path, preset: Option<forge_domain::agent_output::Cli>) -> TurnRequest {
        TurnRequest {
            argv: vec![],
            session_id: "ses_T1".into(),
            token: "tok".into(),
            role: "coder".into(),
            agent: "code".into(),
            model: Some("m1".into()),
            variant: None,
            loop_name: "l".into(),
            cwd: dir.join("wt"),
            title: "Loop: l".into(),
            prompt: "do it".into(),
            resume: false,
            socket: Some(PathBuf::from("/run/forge/s.sock")),
            data_dir: dir.join("data"),
            prompt_dir: dir.join("data/prompts"),
            turn: 1,
            shim_dir: Some(dir.join("wt/.forge/bin")),
            activity: Arc::default(),
            secrets: Default::default(),
            preset,
            project_config: false,
            record: None,
            claim: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::req;
    use super::*;

    #[test]
    fn an_instruction_file_is_a_regular_file_reached_without_a_link() {
        let d = tempfile::tempdir().unwrap();
        let (wt, elsewhere) = (d.path().join("wt"), d.path().join("elsewhere"));
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("CLAUDE.md"), "secret").unwrap();
        assert_eq!(regular_file(&wt, "AGENTS.md"), None);
        std::fs::write(wt.join("AGENTS.md"), "notes").unwrap();
        assert_eq!(regular_file(&wt, "AGENTS.md"), Some(wt.join("AGENTS.md")));
        // A link as the file, or as a folder on the way: not followed.
        std::os::unix::fs::symlink(elsewhere.join("CLAUDE.md"), wt.join("CLAUDE.md")).unwrap();
        assert_eq!(regular_file(&wt, "CLAUDE.md"), None);
        std::os::unix::fs::symlink(&elsewhere, wt.join(".claude")).unwrap();
        assert_eq!(regular_file(&wt, ".claude/CLAUDE.md"), None);
        // A folder named like the file: not a file.
        std::fs::create_dir_all(wt.join("GEMINI.md")).unwrap();
        assert_eq!(regular_file(&wt, "GEMINI.md"), None);
    }

    /// A refusal looks in the working directory and up to the repository's root, no further.
    #[test]
    fn configuration_is_looked_for_up_to_the_repository_root() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        let sub = repo.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        // Above the repository: not the repository's.
        std::fs::write(d.path().join("opencode.json"), "{}").unwrap();
        assert_eq!(repository_config_refusal(Cli::OpenCode, &sub), None);
        // At its root, seen from a folder below: named by its path.
        std::fs::create_dir_all(repo.join(".opencode/plugins")).unwrap();
        let e = repository_config_refusal(Cli::OpenCode, &sub).expect("refused");
        assert!(e.contains(&repo.join(".opencode").display().to_string()), "{e}");
        // In the working directory itself: named relative.
        std::fs::write(sub.join("opencode.json"), "{}").unwrap();
        let e = repository_config_refusal(Cli::OpenCode, &sub).expect("refused");
        assert!(e.contains("(opencode.json, "), "{e}");
        // Claude and Codex are started so that they leave it out: never refused.
        assert_eq!(repository_config_refusal(Cli::Claude, &sub), None);
        assert_eq!(repository_config_refusal(Cli::Codex, &sub), None);
    }

    #[test]
    fn usage_and_session_ids_are_recorded_per_forge_session() {
        let d = tempfile::tempdir().unwrap();
        let r = req(d.path(), Some(Cli::Codex));
        let run1 = Run {
            code: Some(0),
            stdout: concat!(
                r#"{"type":"thread.started","thread_id":"th-1"}"#,
                "\n",
                r#"{"type":"item.completed","item":{"type":"agent_message","text":"done"}}"#,
                "\n",
                r#"{"type":"turn.completed","usage":{"input_tokens":3600,"cached_input_tokens":600,"output_tokens":150}}"#,
                "\n"
            )
            .into(),
            stderr: String::new(),
        };
        assert_eq!(finish_preset(Cli::Codex, &r, &run1), TurnOutcome::Reply("done".into()));
        assert_eq!(cli_session(&r).as_deref(), Some("th-1"));
        let run2 = Run {
            code: Some(0),
            stdout: r#"{"type":"turn.completed","usage":{"input_tokens":4800,"cached_input_tokens":800,"output_tokens":200}}"#
                .into(),
            stderr: String::new(),
        };
        assert_eq!(finish_preset(Cli::Codex, &r, &run2), TurnOutcome::Reply(String::new()));
        let text = std::fs::read_to_string(crate::turn::usage_file(&r.data_dir, &r.session_id)).unwrap();
        let (lines, bad) = forge_domain::usage::parse(&text);
        assert_eq!(bad, 0);
        let got: Vec<(Option<&str>, u64, u64, u64)> =
            lines.iter().map(|l| (l.model.as_deref(), l.input, l.cache_read, l.output)).collect();
        assert_eq!(got, vec![(Some("m1"), 3000, 600, 150), (Some("m1"), 1000, 200, 50)]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cli_session_file(&r)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn failures_carry_the_structured_error() {
        let d = tempfile::tempdir().unwrap();
        let table: &[(Cli, Option<i32>, &str, &str, &str)] = &[
            (
                Cli::Codex,
                Some(1),
                r#"{"type":"turn.failed","error":{"message":"Quota exceeded. Check your plan and billing details."}}"#,
                "Reading additional input from stdin...",
                "codex exit status 1: Quota exceeded. Check your plan and billing details.",
            ),
            (Cli::Claude, Some(2), "", "boom\n", "claude exit status 2: boom"),
            (Cli::OpenCode, None, "", "", "opencode killed by a signal"),
            (
                Cli::Gemini,
                Some(0),
                "",
                "{\"error\": {\"message\": \"You have exhausted your daily quota on this model.\", \"code\": 429}}",
                "gemini exit status 0: You have exhausted your daily quota on this model. (status 429)",
            ),
        ];
        for (cli, code, out, err, want) in table {
            let r = req(d.path(), Some(*cli));
            let run = Run { code: *code, stdout: out.to_string(), stderr: err.to_string() };
            assert_eq!(finish_preset(*cli, &r, &run), TurnOutcome::Error(want.to_string()), "{cli:?}");
        }
        let r = req(d.path(), Some(Cli::Claude));
        let run = Run { code: Some(0), stdout: String::new(), stderr: "noise".into() };
        assert_eq!(finish_preset(Cli::Claude, &r, &run), TurnOutcome::NoReply);
        // A failed Gemini run's session id is not kept (Gemini did not save the session);
        // a failed Claude run's is (Claude did).
        let mut r = req(d.path(), Some(Cli::Gemini));
        r.session_id = "ses_G".into();
        let failed = Run {
            code: Some(173),
            stdout: String::new(),
            stderr: "{\"session_id\": \"g1\", \"error\": {\"message\": \"quota\", \"code\": 429}}".into(),
        };
        assert!(matches!(finish_preset(Cli::Gemini, &r, &failed), TurnOutcome::Error(_)));
        assert_eq!(cli_session(&r), None);
        let ok = Run {
            code: Some(0),
            stdout: "{\"session_id\": \"g1\", \"response\": \"ok\"}".into(),
            stderr: String::new(),
        };
        assert_eq!(finish_preset(Cli::Gemini, &r, &ok), TurnOutcome::Reply("ok".into()));
        assert_eq!(cli_session(&r).as_deref(), Some("g1"));
        let mut r = req(d.path(), Some(Cli::Claude));
        r.session_id = "ses_C".into();
        let failed =
            Run { code: Some(1), stdout: "{\"type\":\"system\",\"session_id\":\"c1\"}".into(), stderr: String::new() };
        assert!(matches!(finish_preset(Cli::Claude, &r, &failed), TurnOutcome::Error(_)));
        assert_eq!(cli_session(&r).as_deref(), Some("c1"));
    }

    #[test]
    fn program_comes_from_the_preset_or_the_command() {
        let mut c = Config::default();
        assert_eq!(program(&c), None);
        c.agent_preset = Some("claude".into());
        assert_eq!(program(&c), Some(vec!["claude".to_string()]));
        c.agent_command = Some(vec!["/opt/c/claude".into()]);
        assert_eq!(program(&c), Some(vec!["/opt/c/claude".to_string()]));
        c.agent_preset = None;
        assert_eq!(program(&c), Some(vec!["/opt/c/claude".to_string()]));
    }
}
