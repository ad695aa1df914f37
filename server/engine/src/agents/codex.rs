//! Codex (`@openai/codex`, tried 0.171.0): `codex exec --json … -`, the prompt on standard
//! input.
//!
//! - Resume: Codex's own thread id (`thread.started.thread_id`) is recorded after the first
//!   turn; later turns run `codex exec … resume <thread id> -`.
//! - Model: `-m <model>`; the role's variant as `-c model_reasoning_effort="<variant>"`.
//! - MCP: `-c mcp_servers.forge={command = "<this forge-lsp>", args = ["mcp"], env_vars =
//!   [<the identity variables, `super::IDENTITY_VARS`>]}` (Codex gives MCP servers only a
//!   few variables unless listed). Nothing is written to `CODEX_HOME` by Forge.
//! - The repository's configuration: unless `agent.trustProjectConfig`, the worktree is an
//!   untrusted project (`-c projects={"<worktree>"={trust_level="untrusted"}}`,
//!   [`untrusted_project`]), so its `.codex/config.toml` is not read even when the user
//!   trusted the repository in Codex (a linked worktree inherits its main checkout's
//!   trust); its `AGENTS.md`, which Codex then skips, is given as `developer_instructions`.
//! - Commands keep `FORGE_*`: `shell_environment_policy.inherit = "all"` with
//!   `ignore_default_excludes = true` (the default filter drops `*TOKEN*` names), and
//!   `allow_login_shell = false`. In a sandboxed loop the server's secret-named variables
//!   are excluded by name instead ([`secret_env_excluded`]).
//! - Sandbox: Codex starts `/bin/bash` itself (no `PATH`/`SHELL` shim reaches it), so with
//!   the loop's sandbox on the whole `codex` process runs inside it (bubblewrap, the
//!   worktree writable, the rest read-only, a private `/tmp`), with the network shared (its
//!   model endpoint must stay reachable, so its commands have network too) and a
//!   `CODEX_HOME` of the loop's own writable ([`loop_home`]: the user's `config.toml`,
//!   `auth.json` and `AGENTS.md` copied in before each turn; the user's `~/.codex` stays
//!   read-only). Codex's own sandbox is bypassed
//!   (`--dangerously-bypass-approvals-and-sandbox`): Forge's is the one in force.
//! - Usage: `turn.completed.usage` is the thread's running total; each turn records the
//!   difference to what the session recorded before.

use std::path::{Path, PathBuf};

use forge_domain::agent_output::Cli;

use super::{AgentHost, Launch, Run};
use crate::turn::{TurnOutcome, TurnRequest};

#[derive(Debug, Clone, Copy)]
pub struct Codex;

/// `$CODEX_HOME`, else `~/.codex`.
pub fn codex_home() -> Option<PathBuf> {
    std::env::var_os("CODEX_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".codex")))
}

/// The files of the user's Codex home a sandboxed loop's Codex gets a copy of.
const SEEDED: [&str; 3] = ["config.toml", "auth.json", "AGENTS.md"];

/// The `CODEX_HOME` of a sandboxed loop's Codex: a directory of its own in the data
/// directory (writable inside the sandbox, removed with the worktree), where the user's
/// `config.toml`, `auth.json` and `AGENTS.md` are copied before every turn. Codex runs whole
/// inside the sandbox, and so do the commands it runs: a writable `~/.codex` would let a
/// command (or a prompt-injected repository) rewrite the user's own configuration (a
/// `notify` program, an MCP server, a model endpoint) for the user's next Codex run outside
/// any sandbox. What the loop's Codex writes stays in its copy.
///
/// `auth.json` is copied again only when the user's file changed since it was last copied
/// (`auth.json.seeded` keeps its hash): a login Codex refreshes during the loop stays in
/// the loop's copy from turn to turn (ChatGPT refresh tokens work once; putting the user's
/// spent one back would fail every later turn).
fn loop_home(req: &TurnRequest) -> Result<PathBuf, String> {
    loop_home_from(req, codex_home().as_deref())
}

fn loop_home_from(req: &TurnRequest, user: Option<&Path>) -> Result<PathBuf, String> {
    use sha2::{Digest, Sha256};
    let home = crate::sandbox::agent_home(&req.data_dir, &req.cwd, "codex");
    forge_core::paths::create_private_dirs(&home)
        .map_err(|e| format!("cannot create the loop's Codex home {}: {e}", home.display()))?;
    for name in SEEDED {
        let mine = home.join(name);
        let Some(theirs) = user.map(|u| u.join(name)).filter(|f| f.is_file()) else {
            let _ = std::fs::remove_file(&mine);
            continue;
        };
        let data = std::fs::read(&theirs).map_err(|e| format!("cannot read {}: {e}", theirs.display()))?;
        if name == "auth.json" {
            let stamp = home.join("auth.json.seeded");
            let hash: String = Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
            if mine.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|h| h == hash) {
                continue;
            }
            super::write_private(&stamp, hash.as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
        }
        super::write_private(&mine, &data).map_err(|e| format!("cannot write {}: {e}", mine.display()))?;
    }
    Ok(home)
}

/// The `-c` overrides every Codex turn gets.
pub fn overrides(mcp_bin: &str) -> Vec<String> {
    // TOML strings (a JSON string is not always one: a raw DEL is valid JSON, not TOML).
    let q = |s: &str| toml::Value::from(s).to_string();
    let vars: Vec<String> = super::IDENTITY_VARS.iter().map(|v| q(v)).collect();
    let mut out = vec![];
    for kv in [
        "allow_login_shell=false".to_string(),
        "analytics.enabled=false".to_string(),
        "check_for_update_on_startup=false".to_string(),
        "shell_environment_policy.inherit=all".to_string(),
        "shell_environment_policy.ignore_default_excludes=true".to_string(),
        format!(
            "mcp_servers.forge={{command={}, args=[\"mcp\"], env_vars=[{}], env={{{}=\"off\"}}}}",
            q(mcp_bin),
            vars.join(", "),
            super::STRUCTURED_CONTENT_ENV
        ),
    ] {
        out.push("-c".to_string());
        out.push(kv);
    }
    out
}

/// The secret-named variables a sandboxed loop's Codex keeps (the sandbox drops every
/// other one of the server's environment, so that no command reads them from
/// `/proc/<pid>/environ` of Codex or the sandbox's init), from the loop's `config.toml`
/// (the user's copy, under `home`):
/// - the model provider in use (the `profile`'s `model_provider`, else `model_provider`,
///   else `openai`): its `env_key` and `env_http_headers` variables, and `OPENAI_API_KEY`
///   and `CODEX_API_KEY` when it is `openai` or `requires_openai_auth`;
/// - the variables the user's enabled MCP servers are given (`mcp_servers.<name>.env_vars`,
///   `bearer_token_env_var`, `env_http_headers`).
///
/// A provider chosen on the command line instead (an `agent.command` with `--profile`) is
/// not seen: its variable needs `sandbox.exposeEnv`.
pub fn key_variables(home: &Path) -> Vec<String> {
    use toml::Value;
    fn text(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str)
    }
    let config = std::fs::read_to_string(home.join("config.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .unwrap_or_default();
    // A table's variable: `key`'s, then its `env_http_headers` values.
    let vars_of = |t: &Value, key: &str| -> Vec<String> {
        let headers = t.get("env_http_headers").and_then(Value::as_table);
        let header_vars = headers.into_iter().flat_map(|h| h.values()).filter_map(Value::as_str);
        text(t.get(key)).into_iter().chain(header_vars).map(str::to_string).collect()
    };
    let profile = text(config.get("profile")).and_then(|p| config.get("profiles")?.get(p));
    let provider =
        text(profile.and_then(|p| p.get("model_provider"))).or(text(config.get("model_provider"))).unwrap_or("openai");
    let def = config.get("model_providers").and_then(|ps| ps.get(provider));
    let mut out: Vec<String> = vec![];
    if provider == "openai" || def.and_then(|d| d.get("requires_openai_auth")).and_then(Value::as_bool) == Some(true) {
        out.extend(["OPENAI_API_KEY".to_string(), "CODEX_API_KEY".to_string()]);
    }
    out.extend(def.map(|d| vars_of(d, "env_key")).unwrap_or_default());
    let servers = config.get("mcp_servers").and_then(Value::as_table);
    for server in servers.into_iter().flat_map(|t| t.values()) {
        if server.get("enabled").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let env_vars = server.get("env_vars").and_then(Value::as_array);
        out.extend(env_vars.into_iter().flatten().filter_map(Value::as_str).map(str::to_string));
        out.extend(vars_of(server, "bearer_token_env_var"));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|v| seen.insert(v.clone()));
    out
}

/// The `-c` override that keeps the secret-named variables of the server's environment
/// (`secrets::is_secret_env`) out of the environment of Codex's commands in a sandboxed
/// loop, by name. The sandbox already drops all of them but Codex's own key variables
/// ([`key_variables`]); this keeps those from its commands' environment too (a command
/// can still read them from Codex's `/proc/<pid>/environ`, as it can read the loop's copy
/// of `auth.json`: Codex and its commands share the sandbox).
pub fn secret_env_excluded(expose: &[String]) -> Vec<String> {
    exclude_override(crate::secrets::secret_vars_here(expose).into_iter().filter_map(|k| k.into_string().ok()), expose)
}

/// [`secret_env_excluded`] for the variable names `names`.
fn exclude_override(names: impl Iterator<Item = String>, expose: &[String]) -> Vec<String> {
    let mut names: Vec<String> = names.filter(|k| crate::secrets::is_secret_env(k, expose)).collect();
    if names.is_empty() {
        return vec![];
    }
    names.sort();
    let list = toml::Value::Array(names.into_iter().map(toml::Value::from).collect());
    vec!["-c".to_string(), format!("shell_environment_policy.exclude={list}")]
}

/// The `-c` overrides that keep Codex from reading the worktree's `.codex/config.toml`:
/// the worktree (by its path and its resolved path) is an untrusted project. Codex reads
/// that file for a trusted project, and a linked worktree inherits the trust of its main
/// checkout, which the user's `config.toml` (copied into the loop's home) records once they
/// answered Codex's "trust this folder?". The file may start MCP servers and name any file
/// as the model's instructions (`model_instructions_file`: a key or a token sent to the
/// model endpoint), and Codex's commands have the network. (`-c projects={}` does not undo
/// the user's entry: overrides merge into tables.) An untrusted project's `AGENTS.md` is
/// not read either, so the worktree's one is given as `developer_instructions` (text for
/// the model), cut at Codex's own limit for project docs.
pub fn untrusted_project(worktree: &Path) -> Result<Vec<String>, String> {
    let mut paths = vec![worktree.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(worktree) {
        if real != worktree {
            paths.push(real);
        }
    }
    let mut projects = toml::Table::new();
    for p in &paths {
        // A path Codex would see another way (lossy) cannot be named exactly: no turn
        // rather than one where the repository's configuration may apply.
        let Some(p) = p.to_str() else {
            return Err(format!(
                "the worktree's path {} is not UTF-8, so it cannot be named to Codex as an untrusted project (its .codex/config.toml would apply); use a data directory whose path is UTF-8, or set agent.trustProjectConfig",
                p.display()
            ));
        };
        let entry = toml::Table::from_iter([("trust_level".to_string(), toml::Value::from("untrusted"))]);
        projects.insert(p.to_string(), toml::Value::Table(entry));
    }
    // TOML written by the `toml` crate: an inline table with quoted keys, strings with
    // every character TOML forbids bare escaped.
    let mut out = vec!["-c".to_string(), format!("projects={}", toml::Value::Table(projects))];
    if let Some((name, text)) = project_doc(worktree) {
        let text = format!("Project instructions ({name}):\n\n{text}");
        out.push("-c".into());
        out.push(format!("developer_instructions={}", toml_string_within(&text, MAX_ARG)));
    }
    Ok(out)
}

/// Codex's default `project_doc_max_bytes`: the most of a project's `AGENTS.md` it reads.
const PROJECT_DOC_MAX: usize = 32 * 1024;

/// The most bytes a `-c` value of ours may take: Linux refuses one argument over 128 KiB
/// (`MAX_ARG_STRLEN`), and escaping can grow a text six times.
const MAX_ARG: usize = 100 * 1024;

/// `text` as a TOML string of at most `max` bytes: cut shorter (on a character boundary)
/// until its escaped form fits.
fn toml_string_within(text: &str, max: usize) -> String {
    let mut text = text;
    loop {
        let quoted = toml::Value::from(text).to_string();
        if quoted.len() <= max || text.is_empty() {
            return quoted;
        }
        // Shorter in proportion to what escaping added (strictly shorter: quoted > max).
        let mut cut = text.len() * max / quoted.len();
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text = &text[..cut];
    }
}

/// The worktree's `AGENTS.override.md`, else `AGENTS.md` (a file, not a link: a link could
/// name any file), its first [`PROJECT_DOC_MAX`] bytes, cut on a character boundary.
fn project_doc(worktree: &Path) -> Option<(&'static str, String)> {
    use std::io::Read;
    ["AGENTS.override.md", "AGENTS.md"].into_iter().find_map(|name| {
        // Checked as opened (no link, a regular file, no wait on a FIFO): the worktree is
        // writable inside the sandbox, so the file can change between a check and an open.
        let mut bytes = vec![];
        let file = forge_core::beneath::open_file(worktree, Path::new(name)).ok()?;
        file.take(PROJECT_DOC_MAX as u64).read_to_end(&mut bytes).ok()?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Some((name, text.trim_end_matches('\u{fffd}').to_string())).filter(|(_, t)| !t.trim().is_empty())
    })
}

impl AgentHost for Codex {
    fn prepare(&self, req: &TurnRequest, _prompt_file: &Path) -> Result<Launch, String> {
        let mut args: Vec<String> =
            ["exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]
                .map(String::from)
                .to_vec();
        args.extend(overrides(&super::mcp_command()));
        if req.shim_dir.is_some() {
            args.extend(secret_env_excluded(&req.secrets.expose_env));
        }
        if !req.project_config {
            args.extend(untrusted_project(&req.cwd)?);
        }
        if let Some(m) = req.model.as_deref().filter(|m| !m.is_empty()) {
            args.extend(["-m".into(), m.to_string()]);
            // The model's variant is Codex's reasoning effort (`low`, `medium`, `high`, ...).
            if let Some(v) = req.variant.as_deref().filter(|v| !v.is_empty()) {
                let q = toml::Value::from(v).to_string();
                args.extend(["-c".into(), format!("model_reasoning_effort={q}")]);
            }
        }
        if let Some(id) = super::cli_session(req).filter(|_| req.resume) {
            args.extend(["resume".into(), id]);
        }
        args.push("-".into());
        let (whole_in_sandbox, env, keep_env) = match req.shim_dir {
            Some(_) => {
                let home = loop_home(req)?;
                let keep = key_variables(&home);
                (Some(vec![home.clone()]), vec![("CODEX_HOME".to_string(), home.into_os_string())], keep)
            }
            None => (None, vec![], vec![]),
        };
        Ok(Launch { argv: super::with_program(req, "codex", args), env, whole_in_sandbox, template: false, keep_env })
    }

    fn finish(&self, req: &TurnRequest, run: &Run) -> TurnOutcome {
        super::finish_preset(Cli::Codex, req, run)
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
    fn a_sandboxed_codex_keeps_only_its_key_variables() {
        let home = tempfile::tempdir().unwrap();
        let with = |toml: &str| {
            std::fs::write(home.path().join("config.toml"), toml).unwrap();
            key_variables(home.path())
        };
        assert_eq!(key_variables(home.path()), ["OPENAI_API_KEY", "CODEX_API_KEY"], "no config.toml: openai");
        let providers = "[model_providers.az]\nenv_key = \"AZURE_OPENAI_API_KEY\"\nenv_http_headers = { \"X-Org\" = \"MY_ORG_TOKEN\" }\n[model_providers.proxy]\nenv_key = \"PROXY_KEY\"\nrequires_openai_auth = true\n[mcp_servers.gh]\ncommand = \"gh-mcp\"\nenv_vars = [\"GITHUB_PERSONAL_ACCESS_TOKEN\"]\n[mcp_servers.web]\nurl = \"https://x\"\nbearer_token_env_var = \"WEB_MCP_TOKEN\"\n[mcp_servers.off]\nenabled = false\nenv_vars = [\"OFF_TOKEN\"]\n";
        // The provider in use only: not the other providers' keys.
        assert_eq!(
            with(&format!("model_provider = \"az\"\n{providers}")),
            ["AZURE_OPENAI_API_KEY", "MY_ORG_TOKEN", "GITHUB_PERSONAL_ACCESS_TOKEN", "WEB_MCP_TOKEN"]
        );
        assert_eq!(
            with(&format!("model_provider = \"proxy\"\n{providers}")),
            ["OPENAI_API_KEY", "CODEX_API_KEY", "PROXY_KEY", "GITHUB_PERSONAL_ACCESS_TOKEN", "WEB_MCP_TOKEN"]
        );
        // A profile's provider wins.
        assert_eq!(
            with(&format!(
                "model_provider = \"proxy\"\nprofile = \"work\"\n[profiles.work]\nmodel_provider = \"az\"\n{providers}"
            ))[..2],
            ["AZURE_OPENAI_API_KEY", "MY_ORG_TOKEN"]
        );
        assert_eq!(with("not = [toml"), ["OPENAI_API_KEY", "CODEX_API_KEY"], "an unreadable config.toml: openai");
        // A sandboxed turn's launch carries those of the loop's copy of config.toml.
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("wt")).unwrap();
        let r = crate::agents::test_support::req(d.path(), None);
        let l = Codex.prepare(&r, Path::new("p")).unwrap();
        assert!(l.whole_in_sandbox.is_some());
        assert_eq!(l.keep_env, key_variables(&crate::sandbox::agent_home(&r.data_dir, &r.cwd, "codex")));
    }

    #[test]
    fn a_sandboxed_codex_keeps_secret_variables_from_its_commands_by_name() {
        let names = ["PATH", "OPENAI_API_KEY", "FORGE_SESSION_TOKEN", "GH_TOKEN", "NPM_TOKEN", "HOME"];
        let o = exclude_override(names.iter().map(|s| s.to_string()), &["NPM_TOKEN".to_string()]);
        assert_eq!(o, ["-c", "shell_environment_policy.exclude=[\"GH_TOKEN\", \"OPENAI_API_KEY\"]"]);
        assert!(exclude_override(["PATH".to_string()].into_iter(), &[]).is_empty());
        // Every turn of a sandboxed loop carries it when the server has such a variable.
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("wt")).unwrap();
        let args = Codex.prepare(&crate::agents::test_support::req(d.path(), None), Path::new("p")).unwrap().argv;
        let has = args.iter().any(|a| a.starts_with("shell_environment_policy.exclude"));
        assert_eq!(has, !secret_env_excluded(&[]).is_empty(), "{args:?}");
    }

    #[test]
    fn argv_for_first_and_resumed_turns() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::Codex));
        r.shim_dir = None;
        let l = Codex.prepare(&r, Path::new("/p")).unwrap();
        let mut want: Vec<String> =
            ["codex", "exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]
                .map(String::from)
                .to_vec();
        want.extend(overrides(&super::super::mcp_command()));
        want.extend(untrusted_project(&r.cwd).unwrap());
        want.extend(["-m", "m1", "-"].map(String::from));
        assert_eq!(l.argv, want);
        assert_eq!(l.whole_in_sandbox, None);
        // Trusted by the user: Codex decides about the project as it would outside a loop.
        r.project_config = true;
        let l = Codex.prepare(&r, Path::new("/p")).unwrap();
        assert!(!l.argv.iter().any(|a| a.starts_with("projects=")), "{:?}", l.argv);
        r.project_config = false;
        r.resume = true;
        super::super::save_cli_session(&r, "0199-th");
        let l = Codex.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(l.argv[l.argv.len() - 3..], ["resume", "0199-th", "-"]);
    }

    #[test]
    fn the_worktree_is_an_untrusted_project_and_its_agents_md_is_given_as_text() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real \"wt\"");
        std::fs::create_dir_all(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let table = |args: &[String]| -> toml::Table {
            assert_eq!(args[0], "-c");
            toml::from_str(&args[1]).unwrap()
        };
        // Both paths, one TOML table Codex reads back; no AGENTS.md, no instructions.
        let args = untrusted_project(&link).unwrap();
        assert_eq!(args.len(), 2, "{args:?}");
        let projects = table(&args)["projects"].as_table().unwrap().clone();
        let real_path = std::fs::canonicalize(&real).unwrap();
        assert_eq!(projects.len(), 2);
        for p in [link.to_str().unwrap(), real_path.to_str().unwrap()] {
            assert_eq!(projects[p]["trust_level"].as_str(), Some("untrusted"), "{p}");
        }
        assert_eq!(table(&untrusted_project(&real_path).unwrap())["projects"].as_table().unwrap().len(), 1);
        // AGENTS.md (a file, not a link; the override first), cut at Codex's limit.
        std::os::unix::fs::symlink("/etc/hostname", real.join("AGENTS.override.md")).unwrap();
        std::fs::write(real.join("AGENTS.md"), format!("Keep it short.\n{}", "é".repeat(PROJECT_DOC_MAX))).unwrap();
        let args = untrusted_project(&real_path).unwrap();
        let doc = table(&args[2..])["developer_instructions"].as_str().unwrap().to_string();
        assert!(doc.starts_with("Project instructions (AGENTS.md):\n\nKeep it short.\n"), "{}", &doc[..60]);
        assert!(doc.len() <= PROJECT_DOC_MAX + 40 && !doc.contains('\u{fffd}'), "{}", doc.len());
        // Control characters (DEL too, which TOML forbids bare) are escaped, and a text that
        // escaping would grow past one argument's limit is cut to it.
        std::fs::write(real.join("AGENTS.md"), "a\u{7f}b\u{1}\"\\").unwrap();
        let args = untrusted_project(&real_path).unwrap();
        let doc = table(&args[2..])["developer_instructions"].as_str().unwrap().to_string();
        assert!(doc.ends_with("a\u{7f}b\u{1}\"\\"), "{doc:?}");
        std::fs::write(real.join("AGENTS.md"), "\u{1}".repeat(PROJECT_DOC_MAX)).unwrap();
        let args = untrusted_project(&real_path).unwrap();
        assert!(args[3].len() <= MAX_ARG + "developer_instructions=".len(), "{}", args[3].len());
        assert!(table(&args[2..])["developer_instructions"].as_str().unwrap().len() > 10_000);
    }

    #[test]
    fn a_worktree_path_that_is_not_utf8_is_refused_not_left_trusted() {
        use std::os::unix::ffi::OsStrExt;
        let d = tempfile::tempdir().unwrap();
        let wt = d.path().join(std::ffi::OsStr::from_bytes(b"wt-\xff"));
        std::fs::create_dir_all(&wt).unwrap();
        let e = untrusted_project(&wt).unwrap_err();
        assert!(e.contains("not UTF-8") && e.contains("agent.trustProjectConfig"), "{e}");
    }

    /// Sandboxed, Codex gets a home of the loop's own in the data directory, seeded with
    /// copies of the user's files before each turn; the user's home is never bound writable.
    #[test]
    fn a_sandboxed_codex_gets_a_home_of_its_own() {
        let d = tempfile::tempdir().unwrap();
        let user = d.path().join("user-codex");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(user.join("config.toml"), "model = \"m\"\n").unwrap();
        std::fs::write(user.join("auth.json"), "{\"t\":1}").unwrap();
        let r = req(d.path(), Some(Cli::Codex));
        let home = loop_home_from(&r, Some(&user)).unwrap();
        assert_eq!(home, crate::sandbox::agent_home(&r.data_dir, &r.cwd, "codex"));
        assert!(home.starts_with(&r.data_dir), "{}", home.display());
        assert_eq!(std::fs::read_to_string(home.join("config.toml")).unwrap(), "model = \"m\"\n");
        let l = Codex.prepare(&r, Path::new("/p")).unwrap();
        assert_eq!(l.whole_in_sandbox, Some(vec![home.clone()]));
        assert!(l.env.iter().any(|(k, v)| k == "CODEX_HOME" && *v == home.clone().into_os_string()));
        // What the loop's Codex wrote to its configuration is replaced by the user's at the
        // next turn; a login it refreshed is kept until the user's own file changes.
        std::fs::write(home.join("config.toml"), "notify = [\"evil\"]\n").unwrap();
        std::fs::write(home.join("auth.json"), "{\"t\":2}").unwrap();
        loop_home_from(&r, Some(&user)).unwrap();
        assert_eq!(std::fs::read_to_string(home.join("config.toml")).unwrap(), "model = \"m\"\n");
        assert_eq!(std::fs::read_to_string(home.join("auth.json")).unwrap(), "{\"t\":2}");
        assert_eq!(std::fs::read_to_string(user.join("config.toml")).unwrap(), "model = \"m\"\n");
        std::fs::write(user.join("auth.json"), "{\"t\":3}").unwrap();
        loop_home_from(&r, Some(&user)).unwrap();
        assert_eq!(std::fs::read_to_string(home.join("auth.json")).unwrap(), "{\"t\":3}");
        // Removed with the loop's shims.
        crate::sandbox::remove_shims(&r.data_dir, &r.cwd).unwrap();
        assert!(!home.exists());
    }

    #[test]
    fn variant_is_the_reasoning_effort_and_needs_a_model() {
        let d = tempfile::tempdir().unwrap();
        let mut r = req(d.path(), Some(Cli::Codex));
        r.shim_dir = None;
        r.variant = Some("high".into());
        let l = Codex.prepare(&r, Path::new("/p")).unwrap();
        let i = l.argv.iter().position(|a| a == "-m").unwrap();
        assert_eq!(l.argv[i..i + 4], ["-m", "m1", "-c", "model_reasoning_effort=\"high\""]);
        r.model = None;
        let l = Codex.prepare(&r, Path::new("/p")).unwrap();
        assert!(!l.argv.iter().any(|a| a.starts_with("model_reasoning_effort")), "{:?}", l.argv);
    }

    #[test]
    fn overrides_keep_forge_variables_and_wire_mcp() {
        // A path with a quote, a backslash and a DEL (raw DEL is valid JSON but not TOML).
        let o = overrides("/opt/my \"forge\"\\x\u{7f}/forge-lsp");
        assert!(o.chunks(2).all(|c| c[0] == "-c"));
        let kv: Vec<&str> = o.chunks(2).map(|c| c[1].as_str()).collect();
        assert!(kv.contains(&"allow_login_shell=false"));
        assert!(kv.contains(&"shell_environment_policy.inherit=all"));
        assert!(kv.contains(&"shell_environment_policy.ignore_default_excludes=true"));
        let mcp = kv.iter().find(|s| s.starts_with("mcp_servers.forge=")).unwrap();
        // the value parses as a TOML inline table
        let t: toml::Table = toml::from_str(&format!("x = {}", &mcp["mcp_servers.forge=".len()..])).unwrap();
        assert_eq!(t["x"]["command"].as_str(), Some("/opt/my \"forge\"\\x\u{7f}/forge-lsp"));
        assert_eq!(t["x"]["args"].as_array().unwrap()[0].as_str(), Some("mcp"));
        let vars: Vec<&str> = t["x"]["env_vars"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(vars, super::super::IDENTITY_VARS);
        assert_eq!(t["x"]["env"][super::super::STRUCTURED_CONTENT_ENV].as_str(), Some("off"));
    }
}
