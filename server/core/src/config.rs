//! Configuration (PROTOCOL.md §9).
//!
//! Sources, later ones winning key by key: the user file
//! `$XDG_CONFIG_HOME/forge-lsp/config.toml`, the project file `<project>/.forge/config.toml`,
//! `initializationOptions.forge.config`, then `workspace/didChangeConfiguration`
//! (section `forge`). Keys are camelCase and nested (`loop.stallTimeoutMs`). An unknown key
//! is a warning (reported once); a value of the wrong type is an error naming the key and
//! the source.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Expected type of a key.
#[derive(Clone, Copy, Debug)]
enum Ty {
    Bool,
    Str,
    UInt,
    /// An integer of at least 1 (`webfetch.maxBytes`: 0 bytes is no fetch at all).
    PositiveInt,
    Percent,
    StrList,
    /// `loop.permissions.deny`: a list of strings or `{ permission, pattern }` objects.
    DenyList,
    /// `agent.command`: an argv template (list of strings) or one string split with shell
    /// rules (quotes, backslashes).
    Argv,
    /// `agent.preset`: one of the agent CLIs with a preset.
    Preset,
    /// `documents.materialize`: true, false or "auto".
    BoolOrAuto,
}

impl Ty {
    fn describe(self) -> &'static str {
        match self {
            Ty::Bool => "a boolean",
            Ty::Str => "a string",
            Ty::UInt => "a non-negative integer",
            Ty::PositiveInt => "an integer of at least 1",
            Ty::Percent => "an integer from 0 to 100",
            Ty::StrList => "a list of strings",
            Ty::DenyList => "a list of strings or { permission, pattern } tables",
            Ty::Argv => {
                "a list of strings (an argv template) or a string (split with shell rules; quotes must be balanced)"
            }
            Ty::Preset => forge_domain::agent_output::PRESETS,
            Ty::BoolOrAuto => "true, false or \"auto\"",
        }
    }
    fn accepts(self, v: &Value) -> bool {
        match self {
            Ty::Bool => v.is_boolean(),
            Ty::Str => v.is_string(),
            Ty::UInt => v.as_u64().is_some(),
            Ty::PositiveInt => v.as_u64().is_some_and(|n| n >= 1),
            Ty::Percent => v.as_u64().is_some_and(|n| n <= 100),
            Ty::StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Ty::DenyList => v.as_array().is_some_and(|a| {
                a.iter().all(|e| {
                    e.is_string()
                        || e.as_object().is_some_and(|o| {
                            o.get("permission").is_some_and(Value::is_string)
                                && o.get("pattern").is_none_or(Value::is_string)
                        })
                })
            }),
            Ty::Argv => {
                v.as_str().is_some_and(|s| forge_domain::agent_cli::split_command(s).is_ok())
                    || v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string))
            }
            Ty::Preset => v.as_str().is_some_and(|s| forge_domain::agent_output::Cli::parse(s).is_some()),
            Ty::BoolOrAuto => v.is_boolean() || v.as_str() == Some("auto"),
        }
    }
}

/// Every known key and its type.
const KEYS: &[(&str, Ty)] = &[
    ("executionModel", Ty::Str),
    ("auditorModel", Ty::Str),
    ("executionVariant", Ty::Str),
    ("auditorVariant", Ty::Str),
    ("auditorFallbackModels", Ty::StrList),
    ("loop.enabled", Ty::Bool),
    ("loop.defaultMaxIterations", Ty::UInt),
    ("loop.cleanupWorktree", Ty::Bool),
    ("loop.stallTimeoutMs", Ty::UInt),
    ("loop.busyStallTimeoutMs", Ty::UInt),
    ("loop.maxConsecutiveStalls", Ty::UInt),
    ("loop.postAction.enabled", Ty::Bool),
    ("loop.postAction.skill", Ty::Str),
    ("loop.postAction.prompt", Ty::Str),
    ("loop.postAction.model", Ty::Str),
    ("loop.sessionReuse.coderContextPercent", Ty::Percent),
    ("loop.sessionReuse.auditorContextPercent", Ty::Percent),
    ("loop.permissions.deny", Ty::DenyList),
    ("completedLoopTtlMs", Ty::UInt),
    ("sandbox.enabled", Ty::Bool),
    ("sandbox.mode", Ty::Str),
    ("sandbox.network", Ty::Bool),
    ("sandbox.hidePaths", Ty::StrList),
    ("sandbox.exposePaths", Ty::StrList),
    ("sandbox.exposeEnv", Ty::StrList),
    ("agent.command", Ty::Argv),
    ("agent.compactCommand", Ty::Argv),
    ("agent.preset", Ty::Preset),
    ("agent.trustProjectConfig", Ty::Bool),
    ("documents.materialize", Ty::BoolOrAuto),
    ("documents.maxPlanBytes", Ty::UInt),
    ("diagnostics.mirrorLoopFindings", Ty::Bool),
    ("webfetch.allowCrossOriginRedirects", Ty::Bool),
    ("webfetch.maxBytes", Ty::PositiveInt),
    ("plugins.trustProjectTools", Ty::Bool),
    ("plugins.trustedProjects", Ty::StrList),
    ("plugins.timeoutMs", Ty::UInt),
];

/// Keys a repository's own configuration file may not set (a repository cannot trust itself).
/// Also the keys that widen what a tool may do beyond the defaults the user accepted
/// (`webfetch.allowCrossOriginRedirects`): a cloned repository must not switch them on.
const TRUST_KEYS: &[&str] = &[
    "plugins.trustProjectTools",
    "plugins.trustedProjects",
    "webfetch.allowCrossOriginRedirects",
    "agent.trustProjectConfig",
    "sandbox.exposePaths",
    "sandbox.exposeEnv",
];

/// Keys a `.forge/config.toml` committed to the repository may not set: they choose the
/// program `forge-lsp` runs for a loop's turns or loosen its sandbox, which a cloned
/// repository must not do (plugin variables, `plugins.<name>.variables.*`, are held back
/// the same way: they reach the user's own plugin tools, e.g. as `BASH_ENV`). The user
/// sets them in the user configuration file, the initialization options, or a
/// `.forge/config.toml` that is not committed (the server keeps `.forge/` out of git).
/// "Committed" is [`committed_config`].
const LOCAL_KEYS: &[&str] =
    &["agent.command", "agent.compactCommand", "agent.preset", "sandbox.enabled", "sandbox.mode", "sandbox.network"];

/// Lists a project's `.forge/config.toml` may add to but never shorten: its entries are
/// added to what the sources before it set (a cloned repository must not drop the user's
/// deny rules with `deny = []`).
const ADD_ONLY_KEYS: &[&str] = &["loop.permissions.deny", "sandbox.hidePaths"];

/// Whether the project's `.forge/config.toml` may have come with the repository: the file,
/// or a `.forge` that is a symbolic link or a submodule, is in the index or in `HEAD` of
/// the repository that holds `project_root` (the project may be a folder inside it). Fails
/// closed: when git cannot answer (an index it cannot read, a repository it will not open)
/// the file counts as committed, and so does the file of a folder in no repository at all
/// (an unpacked archive: where its file came from cannot be told, and its plugin variables
/// would reach the user's own plugin tools).
fn committed_config(project_root: &Path) -> bool {
    let repo = match git2::Repository::discover(project_root) {
        Ok(r) => r,
        Err(_) => return true,
    };
    let (Some(workdir), Ok(root)) = (repo.workdir(), project_root.canonicalize()) else { return true };
    let Ok(workdir) = workdir.canonicalize() else { return true };
    let Ok(prefix) = root.strip_prefix(&workdir) else { return true };
    let (dir, file) = (prefix.join(".forge"), prefix.join(".forge/config.toml"));
    let Ok(index) = repo.index() else { return true };
    // `.forge` itself is an entry only as a link or a submodule (a plain directory has none).
    if index.get_path(&dir, 0).is_some() || index.get_path(&file, 0).is_some() {
        return true;
    }
    let head = match repo.head() {
        Ok(h) => h,
        // A repository without commits yet.
        Err(e) if matches!(e.code(), git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound) => return false,
        Err(_) => return true,
    };
    let Ok(tree) = head.peel_to_tree() else { return true };
    let linked_dir = tree.get_path(&dir).is_ok_and(|e| e.kind() != Some(git2::ObjectType::Tree));
    linked_dir || tree.get_path(&file).is_ok()
}

/// The largest configuration file read (a repository's file is read at every start).
pub const MAX_CONFIG_FILE: u64 = 1024 * 1024;

/// The text of a small file that may come from a repository (a configuration file, a plugin
/// tool's sidecar): only a regular file once opened (a committed symbolic link to
/// `/dev/zero`, a pipe or a terminal is refused, not read forever), at most `max` bytes
/// (read through a limit, whatever the file claims), UTF-8. `Ok(None)` when it does not
/// exist.
pub fn read_small_file(path: &Path, max: u64) -> std::io::Result<Option<String>> {
    use std::io::Read;
    // Non-blocking: opening a FIFO with no writer would otherwise wait forever (the flag
    // does not change reads of a regular file).
    let opened = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
    };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut bytes = vec![];
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {max} bytes")));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// `plugins.<name>.variables.<VAR>` (a string): a plugin's configured variables.
fn plugin_variable(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("plugins.")?;
    let (name, rest) = rest.split_once('.')?;
    let var = rest.strip_prefix("variables.")?;
    (!name.is_empty() && !var.is_empty() && !var.contains('.')).then_some((name, var))
}

/// A configuration problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The merged configuration, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub execution_model: Option<String>,
    pub auditor_model: Option<String>,
    /// `executionVariant`: the coder's model variant (`{variant}` of agent.command).
    pub execution_variant: Option<String>,
    /// `auditorVariant`: the auditor's model variant (never inherits executionVariant).
    pub auditor_variant: Option<String>,
    pub auditor_fallback_models: Vec<String>,
    pub loop_enabled: bool,
    pub default_max_iterations: u64,
    pub cleanup_worktree: bool,
    pub stall_timeout_ms: u64,
    pub busy_stall_timeout_ms: u64,
    pub max_consecutive_stalls: u64,
    pub post_action_enabled: bool,
    pub post_action_skill: Option<String>,
    pub post_action_prompt: Option<String>,
    pub post_action_model: Option<String>,
    pub coder_context_percent: u64,
    pub auditor_context_percent: u64,
    pub permissions_deny: Vec<Value>,
    pub completed_loop_ttl_ms: u64,
    pub sandbox_enabled: bool,
    pub sandbox_mode: String,
    pub sandbox_network: bool,
    /// `sandbox.hidePaths`: more files and folders a sandboxed command does not see, each
    /// absolute or `~/…` (a repository's file may add to the list, never shorten it).
    pub sandbox_hide_paths: Vec<String>,
    /// `sandbox.exposePaths` (user file or initialization options only): paths of the
    /// default secret list (or folders holding them) a sandboxed command still sees.
    pub sandbox_expose_paths: Vec<String>,
    /// `sandbox.exposeEnv` (user file or initialization options only): environment
    /// variables with a secret-like name a sandboxed command still gets.
    pub sandbox_expose_env: Vec<String>,
    pub agent_command: Option<Vec<String>>,
    pub agent_compact_command: Option<Vec<String>>,
    /// `agent.preset`: `opencode`, `claude`, `codex` or `gemini` (validated).
    pub agent_preset: Option<String>,
    /// `agent.trustProjectConfig` (user file or initialization options only): a preset's
    /// agent CLI also loads the repository's own configuration for it (`.claude/settings.json`,
    /// `opencode.json`, `.opencode/`, `.gemini/settings.json`: hooks, MCP servers, plugins),
    /// which runs on the host. Off: Claude Code is started so that it does not, Codex is told
    /// the worktree is an untrusted project, and OpenCode and Gemini CLI are not started in a
    /// worktree that has it (docs/agents.md).
    pub agent_trust_project_config: bool,
    /// None = auto.
    pub materialize: Option<bool>,
    /// `documents.maxPlanBytes`: the largest plan stored (plan-write, plan-edit's result,
    /// execute-plan's plan), in bytes of UTF-8.
    pub max_plan_bytes: u64,
    pub mirror_loop_findings: bool,
    /// `webfetch.allowCrossOriginRedirects`: follow a redirect to another origin.
    pub webfetch_allow_cross_origin_redirects: bool,
    /// `webfetch.maxBytes`: the most body bytes `forge.webfetch` reads.
    pub webfetch_max_bytes: u64,
    /// `plugins.trustProjectTools` (user file or initialization options only).
    pub trust_project_tools: bool,
    /// `plugins.trustedProjects`: absolute project roots whose tools run.
    pub trusted_projects: Vec<String>,
    /// `plugins.timeoutMs`: how long a plugin tool may run before its process group is killed.
    pub plugin_timeout_ms: u64,
    /// `plugins.<name>.variables`: environment variables given to a plugin's tools.
    pub plugin_variables: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            execution_model: None,
            auditor_model: None,
            execution_variant: None,
            auditor_variant: None,
            auditor_fallback_models: vec![],
            loop_enabled: true,
            default_max_iterations: 0,
            cleanup_worktree: false,
            stall_timeout_ms: 60_000,
            busy_stall_timeout_ms: 900_000,
            max_consecutive_stalls: 5,
            post_action_enabled: false,
            post_action_skill: None,
            post_action_prompt: None,
            post_action_model: None,
            coder_context_percent: 50,
            auditor_context_percent: 50,
            permissions_deny: vec![],
            completed_loop_ttl_ms: 604_800_000,
            sandbox_enabled: true,
            sandbox_mode: "bwrap".into(),
            sandbox_network: false,
            sandbox_hide_paths: vec![],
            sandbox_expose_paths: vec![],
            sandbox_expose_env: vec![],
            agent_command: None,
            agent_compact_command: None,
            agent_preset: None,
            agent_trust_project_config: false,
            materialize: None,
            max_plan_bytes: 16 * 1024 * 1024,
            mirror_loop_findings: true,
            webfetch_allow_cross_origin_redirects: false,
            webfetch_max_bytes: 10 * 1024 * 1024,
            trust_project_tools: false,
            trusted_projects: vec![],
            plugin_timeout_ms: 60_000,
            plugin_variables: Default::default(),
        }
    }
}

/// Collects sources, validates each, and merges them.
#[derive(Debug, Default, Clone)]
pub struct Loader {
    merged: Map<String, Value>,
    /// Unknown-key warnings, one per key and source.
    pub warnings: Vec<String>,
    /// The project whose own `.forge/config.toml` is the source being added: the file may
    /// come with the repository (trust keys are ignored; [`LOCAL_KEYS`] when committed).
    repository_file_of: Option<PathBuf>,
    /// Whether that file is committed, once asked (only when it sets one of [`LOCAL_KEYS`]
    /// or a plugin variable).
    committed: Option<bool>,
    /// The source being added is an editor's settings ([`Loader::add_settings`]): trust
    /// keys are not read from it.
    settings: bool,
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_and_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    // A position at the `\n` of a CRLF line is at the end of its line, the `\r` not counted.
    let column = before[line_start..].trim_end_matches('\r').chars().count() + 1;
    (before.matches('\n').count() + 1, column)
}

/// The dotted keys of the TOML date-times in `table`: no configuration key takes one, and
/// read as a string one would pass a string key's check.
fn datetime_keys(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    fn in_value(key: String, v: &toml::Value, out: &mut Vec<String>) {
        match v {
            toml::Value::Datetime(_) => out.push(key),
            toml::Value::Table(t) => datetime_keys(&key, t, out),
            toml::Value::Array(a) => a.iter().for_each(|v| in_value(key.clone(), v, out)),
            _ => {}
        }
    }
    for (k, v) in table {
        in_value(if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, v, out);
    }
}

fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect()),
    }
}

fn flatten(prefix: &str, v: &Map<String, Value>, out: &mut Vec<(String, Value)>) {
    for (k, val) in v {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        let is_leaf_key = KEYS.iter().any(|(n, _)| *n == key);
        match val {
            Value::Object(m) if !is_leaf_key => flatten(&key, m, out),
            _ => {
                // `5.0` is 5 wherever the option comes from, as in tool inputs: the same
                // option must not be an integer in `initializationOptions` and refused in
                // `didChangeConfiguration` or a TOML file.
                let mut val = val.clone();
                forge_protocol::json::integral_floats_as_integers(&mut val);
                out.push((key, val))
            }
        }
    }
}

impl Loader {
    /// The user config file path.
    pub fn user_file() -> PathBuf {
        // A relative value is ignored, as the XDG base directory specification says.
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|d| Path::new(d).is_absolute())
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::project::home_dir().join(".config"));
        base.join("forge-lsp/config.toml")
    }

    /// The project config file path.
    pub fn project_file(project_root: &Path) -> PathBuf {
        project_root.join(".forge/config.toml")
    }

    /// Adds a TOML file if it exists.
    pub fn add_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = match read_small_file(path, MAX_CONFIG_FILE) {
            Ok(Some(t)) => t,
            // A link to nothing is not silently "no file": someone meant one to be there. A
            // warning, not an error: a committed link to a file each clone makes for itself
            // must not stop a fresh clone's server.
            Ok(None) if path.is_symlink() => {
                let target = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
                self.warnings.push(format!(
                    "configuration file {} is a symbolic link to {target}, which does not exist: skipped",
                    path.display()
                ));
                return Ok(());
            }
            Ok(None) => return Ok(()),
            // A file where a folder on the way should be (a repository's `.forge` a file): no
            // configuration there, said once. Before, every `initialize` and `forge-lsp call`
            // of the project failed on it (review YC).
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                self.warnings.push(format!(
                    "configuration file {} cannot be there: a folder on its way is a file; skipped",
                    path.display()
                ));
                return Ok(());
            }
            Err(e) => return Err(ConfigError(format!("cannot read configuration file {}: {e}", path.display()))),
        };
        let table: toml::Table = toml::from_str(&text).map_err(|e| {
            let at = e.span().map(|s| line_and_column(&text, s.start)).map(|(l, c)| format!(" (line {l}, column {c})"));
            ConfigError(format!(
                "configuration file {} is not valid TOML{}: {}",
                path.display(),
                at.unwrap_or_default(),
                e.message().trim_end()
            ))
        })?;
        // Only a key that is read is refused; a date-time under an unknown key gets that
        // key's usual warning.
        let mut dates = vec![];
        datetime_keys("", &table, &mut dates);
        if let Some(key) = dates.iter().find(|k| KEYS.iter().any(|(n, _)| n == *k)) {
            return Err(ConfigError(format!(
                "configuration key `{key}` in {} is a TOML date-time, which no key takes (quote it to make it a string)",
                path.display()
            )));
        }
        let json = toml_to_json(toml::Value::Table(table));
        self.add_value(&json, &path.display().to_string())
    }

    /// Adds an editor's settings (`workspace/didChangeConfiguration`), named `source` in
    /// messages: as [`Loader::add_value`], except that trust keys ([`TRUST_KEYS`]), the
    /// keys a committed project file may not set ([`LOCAL_KEYS`], plugin variables) are
    /// ignored, with a warning when they differ from what is in effect, and the lists of
    /// [`ADD_ONLY_KEYS`] can only grow. Editors fill their settings from a project's own
    /// files too (Zed's `.zed/settings.json`, Helix's `.helix/languages.toml`), and a
    /// repository cannot grant itself trust or choose what runs.
    pub fn add_settings(&mut self, v: &Value, source: &str) -> Result<(), ConfigError> {
        self.settings = true;
        let added = self.add_value(v, source);
        self.settings = false;
        added
    }

    /// Whether `val` is what `key` is now: set so by an earlier source, or, when none set
    /// it, a value that builds the configuration in effect (its default).
    fn in_effect(&self, key: &str, val: &Value) -> bool {
        match self.merged.get(key) {
            Some(now) => now == val,
            None => {
                let mut with = Loader { merged: self.merged.clone(), ..Loader::default() };
                with.merged.insert(key.to_string(), val.clone());
                with.build() == self.build()
            }
        }
    }

    /// Adds a JSON object source, named `source` in messages.
    pub fn add_value(&mut self, v: &Value, source: &str) -> Result<(), ConfigError> {
        let Some(obj) = v.as_object() else {
            if v.is_null() {
                return Ok(());
            }
            return Err(ConfigError(format!("configuration in {source} must be a table/object")));
        };
        let mut flat = vec![];
        flatten("", obj, &mut flat);
        let local = |key: &str| LOCAL_KEYS.contains(&key) || plugin_variable(key).is_some();
        let untrusted = self.repository_file_of.is_some();
        // Trust comes from the user file and the initialization options only.
        let no_trust = untrusted || self.settings;
        if let (Some(root), None) = (&self.repository_file_of, self.committed) {
            if flat.iter().any(|(k, _)| local(k)) {
                self.committed = Some(committed_config(root));
            }
        }
        if self.settings {
            // An editor's settings may come from the project's own files: neither trust nor
            // the program forge-lsp runs, its sandbox or plugin variables are read from
            // them. Said unless they repeat what is in effect (Helix sends its
            // configuration both ways).
            flat.retain(|(key, val)| {
                if !(local(key) || TRUST_KEYS.contains(&key.as_str())) {
                    return true;
                }
                if !self.in_effect(key, val) {
                    self.warnings.push(format!(
                        "configuration key `{key}` in {source} is ignored: an editor may fill its settings from a project's own files, and they cannot grant trust, choose the program forge-lsp runs, loosen its sandbox or set plugin variables (set it in the user configuration file or the initialization options, and restart the server)"
                    ));
                }
                false
            });
        }
        let held_back = untrusted && self.committed == Some(true);
        if held_back {
            // A folder in no repository (an unpacked archive) counts as committed too, but
            // has no uncommitted file to offer instead.
            let no_repository = self.repository_file_of.as_ref().is_some_and(|root| {
                git2::Repository::discover(root).is_err_and(|e| e.code() == git2::ErrorCode::NotFound)
            });
            let why = if no_repository {
                "the folder is in no git repository, so the file may have come with it (an unpacked archive), and such a file cannot choose the program forge-lsp runs, loosen its sandbox or set plugin variables (set it in the user configuration file or the initialization options)"
            } else {
                "the file is committed to the repository, and a repository cannot choose the program forge-lsp runs, loosen its sandbox or set plugin variables (set it in the user configuration file, the initialization options, or a .forge/config.toml that is not committed)"
            };
            flat.retain(|(key, _)| {
                if !local(key) {
                    return true;
                }
                self.warnings.push(format!("configuration key `{key}` in {source} is ignored: {why}"));
                false
            });
        }
        for (key, val) in &flat {
            if plugin_variable(key).is_some() {
                if !val.is_string() {
                    return Err(ConfigError(format!(
                        "configuration key `{key}` in {source} must be a string, found {}",
                        short(val)
                    )));
                }
                continue;
            }
            if untrusted && TRUST_KEYS.contains(&key.as_str()) {
                self.warnings.push(format!(
                    "configuration key `{key}` in {source} is ignored: a repository cannot grant itself trust (set it in the user configuration file or the initialization options)"
                ));
                continue;
            }
            if key == "sandbox.hidePaths" || key == "sandbox.exposePaths" {
                for entry in val.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    if !(Path::new(entry).is_absolute() || entry.starts_with("~/")) {
                        return Err(ConfigError(format!(
                            "configuration key `{key}` in {source}: entry {entry:?} must be an absolute path or start with ~/"
                        )));
                    }
                }
            }
            if key == "plugins.trustedProjects" {
                // A project is trusted where it is, not by its id: the id (the root commit)
                // is shared by every clone and fork of the history.
                for entry in val.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    if !Path::new(entry).is_absolute() {
                        self.warnings.push(format!(
                            "plugins.trustedProjects entry {entry:?} in {source} is ignored: entries are absolute project roots (a project id is shared by every clone and fork, so it cannot be trusted)"
                        ));
                    }
                }
            }
            let table =
                KEYS.iter().any(|(n, _)| n.strip_prefix(key.as_str()).is_some_and(|rest| rest.starts_with('.')));
            match KEYS.iter().find(|(n, _)| n == key) {
                // A table of options given as null: not set (as an absent table).
                None if table && val.is_null() => {}
                None if table => {
                    return Err(ConfigError(format!(
                        "configuration key `{key}` in {source} must be a table of options, found {}",
                        short(val)
                    )))
                }
                None => self.warnings.push(format!("unknown configuration key `{key}` in {source} (ignored)")),
                Some((_, ty)) if !ty.accepts(val) => {
                    // A list of tables too: the first item that is neither (a review found a
                    // valid table named instead of the wrong item).
                    let found = match (ty, val) {
                        (Ty::DenyList, Value::Array(a)) if !a.is_empty() => a
                            .iter()
                            .find(|x| !(x.is_string() || x.is_object()))
                            .map(|x| format!("a list holding {}", short(x)))
                            .unwrap_or_else(|| "a list with a table that is not { permission, pattern }".to_string()),
                        _ => short(val),
                    };
                    return Err(ConfigError(format!(
                        "configuration key `{key}` in {source} must be {}, found {found}",
                        ty.describe()
                    )));
                }
                Some(_) => {}
            }
        }
        // `agent.preset` and `agent.command` are one choice, taken whole from the last
        // source that sets either: a project's own `command = [...]` under a user-wide
        // `preset` would otherwise run as that CLI's program with the preset's flags, and a
        // project's `preset` would run the user's own agent command as its CLI (found by a
        // review). To name a preset's program, set both in one source.
        // A source that repeats what is in effect changes nothing: an editor's settings
        // or a project file may say the same preset again (Helix sends its settings both
        // ways), which must not drop the program the user file names for it (review).
        let changes = |k: &str| flat.iter().any(|(key, val)| key == k && self.merged.get(k) != Some(val));
        let sets = |k: &str| flat.iter().any(|(key, _)| key == k);
        match (sets("agent.preset"), sets("agent.command")) {
            (true, false) if changes("agent.preset") => drop(self.merged.remove("agent.command")),
            (false, true) if changes("agent.command") => drop(self.merged.remove("agent.preset")),
            _ => {}
        }
        for (key, val) in flat {
            let trust = TRUST_KEYS.contains(&key.as_str());
            if (untrusted || self.settings) && ADD_ONLY_KEYS.contains(&key.as_str()) {
                if let (Some(Value::Array(before)), Value::Array(added)) = (self.merged.get_mut(&key), &val) {
                    for entry in added {
                        if !before.contains(entry) {
                            before.push(entry.clone());
                        }
                    }
                    continue;
                }
            }
            if plugin_variable(&key).is_some() || (KEYS.iter().any(|(n, _)| *n == key) && !(trust && no_trust)) {
                self.merged.insert(key, val);
            }
        }
        Ok(())
    }

    /// The typed configuration.
    pub fn build(&self) -> Config {
        let m = &self.merged;
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        let b = |k: &str, d: bool| m.get(k).and_then(Value::as_bool).unwrap_or(d);
        let u = |k: &str, d: u64| m.get(k).and_then(Value::as_u64).unwrap_or(d);
        let argv = |k: &str| {
            m.get(k).map(|v| match v {
                Value::String(s) => forge_domain::agent_cli::split_command(s).unwrap_or_default(),
                Value::Array(a) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
                _ => vec![],
            })
        };
        let list = |k: &str| -> Vec<String> {
            m.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        let d = Config::default();
        Config {
            execution_model: s("executionModel"),
            auditor_model: s("auditorModel"),
            execution_variant: s("executionVariant"),
            auditor_variant: s("auditorVariant"),
            auditor_fallback_models: list("auditorFallbackModels"),
            loop_enabled: b("loop.enabled", d.loop_enabled),
            default_max_iterations: u("loop.defaultMaxIterations", d.default_max_iterations),
            cleanup_worktree: b("loop.cleanupWorktree", d.cleanup_worktree),
            stall_timeout_ms: u("loop.stallTimeoutMs", d.stall_timeout_ms),
            busy_stall_timeout_ms: u("loop.busyStallTimeoutMs", d.busy_stall_timeout_ms),
            max_consecutive_stalls: u("loop.maxConsecutiveStalls", d.max_consecutive_stalls),
            post_action_enabled: b("loop.postAction.enabled", d.post_action_enabled),
            post_action_skill: s("loop.postAction.skill"),
            post_action_prompt: s("loop.postAction.prompt"),
            post_action_model: s("loop.postAction.model"),
            coder_context_percent: u("loop.sessionReuse.coderContextPercent", d.coder_context_percent),
            auditor_context_percent: u("loop.sessionReuse.auditorContextPercent", d.auditor_context_percent),
            permissions_deny: m.get("loop.permissions.deny").and_then(Value::as_array).cloned().unwrap_or_default(),
            completed_loop_ttl_ms: u("completedLoopTtlMs", d.completed_loop_ttl_ms),
            sandbox_enabled: b("sandbox.enabled", d.sandbox_enabled),
            sandbox_mode: s("sandbox.mode").unwrap_or(d.sandbox_mode),
            sandbox_network: b("sandbox.network", d.sandbox_network),
            sandbox_hide_paths: list("sandbox.hidePaths"),
            sandbox_expose_paths: list("sandbox.exposePaths"),
            sandbox_expose_env: list("sandbox.exposeEnv"),
            agent_command: argv("agent.command"),
            agent_compact_command: argv("agent.compactCommand"),
            agent_preset: s("agent.preset"),
            agent_trust_project_config: b("agent.trustProjectConfig", false),
            materialize: m.get("documents.materialize").and_then(Value::as_bool),
            max_plan_bytes: u("documents.maxPlanBytes", d.max_plan_bytes),
            mirror_loop_findings: b("diagnostics.mirrorLoopFindings", d.mirror_loop_findings),
            webfetch_allow_cross_origin_redirects: b(
                "webfetch.allowCrossOriginRedirects",
                d.webfetch_allow_cross_origin_redirects,
            ),
            webfetch_max_bytes: u("webfetch.maxBytes", d.webfetch_max_bytes),
            trust_project_tools: b("plugins.trustProjectTools", false),
            plugin_timeout_ms: u("plugins.timeoutMs", d.plugin_timeout_ms).max(1),
            trusted_projects: list("plugins.trustedProjects"),
            plugin_variables: {
                let mut out: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
                    Default::default();
                for (k, v) in m {
                    if let (Some((name, var)), Some(val)) = (plugin_variable(k), v.as_str()) {
                        out.entry(name.to_string()).or_default().insert(var.to_string(), val.to_string());
                    }
                }
                out
            },
        }
    }

    /// Loads the user and project files and the initialization options.
    pub fn standard(project_root: &Path, init: Option<&Value>) -> Result<Loader, ConfigError> {
        let mut l = Loader::default();
        l.add_file(&Self::user_file())?;
        l.repository_file_of = Some(project_root.to_path_buf());
        let r = l.add_file(&Self::project_file(project_root));
        l.repository_file_of = None;
        r?;
        if let Some(v) = init {
            l.add_value(v, "initializationOptions.forge.config")?;
        }
        Ok(l)
    }
}

fn short(v: &Value) -> String {
    let s = match v {
        Value::String(_) => format!("the string {v}"),
        Value::Bool(_) => format!("the boolean {v}"),
        Value::Number(_) => format!("the number {v}"),
        // Which list (a review found "must be a list of strings ..., found a list" for `[]`).
        Value::Array(a) if a.is_empty() => "an empty list".to_string(),
        Value::Array(a) => match a.iter().find(|x| !x.is_string()) {
            Some(x) => format!("a list holding {}", short(x)),
            None => "a list of strings".to_string(),
        },
        Value::Object(_) => "a table".to_string(),
        Value::Null => "null".to_string(),
    };
    if s.len() > 80 {
        format!("{}...", &s[..s.char_indices().take(77).last().map(|(i, c)| i + c.len_utf8()).unwrap_or(0)])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_merge_order() {
        let mut l = Loader::default();
        l.add_value(&json!({"loop": {"defaultMaxIterations": 10, "stallTimeoutMs": 5}}), "a").unwrap();
        l.add_value(&json!({"loop": {"defaultMaxIterations": 3}}), "b").unwrap();
        let c = l.build();
        assert_eq!(c.default_max_iterations, 3);
        assert_eq!(c.stall_timeout_ms, 5);
        assert_eq!(c.busy_stall_timeout_ms, 900_000);
        assert!(c.sandbox_enabled);
        assert!(l.warnings.is_empty());
        // `4.0` is the integer 4 (as in tool inputs, wherever the option comes from); 4.5 is
        // not an integer.
        l.add_value(&json!({"loop": {"defaultMaxIterations": 4.0}}), "c").unwrap();
        assert_eq!(l.build().default_max_iterations, 4);
        let e = l.add_value(&json!({"loop": {"defaultMaxIterations": 4.5}}), "d").unwrap_err();
        assert!(e.0.contains("non-negative integer"), "{}", e.0);
    }

    #[test]
    fn unknown_key_warns_wrong_type_errors() {
        let mut l = Loader::default();
        l.add_value(&json!({"loop": {"bogus": 1}, "nope": true}), "x.toml").unwrap();
        assert_eq!(l.warnings.len(), 2);
        assert!(l.warnings[0].contains("`loop.bogus`") && l.warnings[0].contains("x.toml"));
        let e = l.add_value(&json!({"loop": {"stallTimeoutMs": "soon"}}), "/p/.forge/config.toml").unwrap_err();
        assert!(
            e.0.contains("`loop.stallTimeoutMs`")
                && e.0.contains("/p/.forge/config.toml")
                && e.0.contains("non-negative integer"),
            "{e}"
        );
        // 0 bytes would be no fetch at all (it read 1 byte).
        let e = l.add_value(&json!({"webfetch": {"maxBytes": 0}}), "u").unwrap_err();
        assert!(e.0.contains("`webfetch.maxBytes`") && e.0.contains("an integer of at least 1"), "{e}");
        l.add_value(&json!({"webfetch": {"maxBytes": 1}}), "u").unwrap();
        // A list says which: empty, or what it holds that does not belong.
        let e = l.add_value(&json!({"agent": {"command": []}}), "u").unwrap_err();
        assert!(e.0.contains("found an empty list"), "{e}");
        let e = l.add_value(&json!({"sandbox": {"hidePaths": ["~/a", 3]}}), "u").unwrap_err();
        assert!(e.0.contains("found a list holding the number 3"), "{e}");
        let deny = json!({"loop": {"permissions": {"deny": [{"permission": "bash", "pattern": "rm"}, 3]}}});
        let e = l.add_value(&deny, "u").unwrap_err();
        assert!(e.0.contains("found a list holding the number 3"), "{e}");
    }

    /// A table of options given as null is not set (no warning); as anything else but a
    /// table, an error saying it must be one. Before, both were an "unknown key" warning
    /// and the rest of the change applied.
    #[test]
    fn a_table_given_as_a_value_is_named_as_a_table() {
        let mut l = Loader::default();
        l.add_value(&json!({"documents": null, "loop": {"defaultMaxIterations": 4}}), "d").unwrap();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        assert_eq!(l.build().default_max_iterations, 4);
        let e = l.add_value(&json!({"documents": 5}), "d").unwrap_err();
        assert!(e.0.contains("`documents`") && e.0.contains("must be a table of options"), "{e}");
        // A key that only starts like a table's name is still unknown.
        l.add_value(&json!({"documentsX": 1}), "d").unwrap();
        assert!(l.warnings[0].contains("unknown configuration key `documentsX`"), "{:?}", l.warnings);
    }

    /// A project whose `.forge/config.toml` (`text`) is in the index when `commit` is set.
    fn project_with_config(text: &str, commit: bool) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(d.path()).unwrap();
        std::fs::create_dir_all(d.path().join(".forge")).unwrap();
        std::fs::write(d.path().join(".forge/config.toml"), text).unwrap();
        if commit {
            let mut index = repo.index().unwrap();
            index.add_path(Path::new(".forge/config.toml")).unwrap();
            index.write().unwrap();
        }
        d
    }

    /// Loads only the project's file, as [`Loader::standard`] adds it.
    fn load_project(root: &Path) -> Loader {
        let mut l = Loader { repository_file_of: Some(root.to_path_buf()), ..Default::default() };
        l.add_file(&Loader::project_file(root)).unwrap();
        l
    }

    #[test]
    fn a_committed_project_file_cannot_pick_the_agent_loosen_the_sandbox_or_set_plugin_variables() {
        let text = "[agent]\ncommand = [\"sh\", \"-c\", \"evil\"]\ncompactCommand = [\"evil\"]\npreset = \"codex\"\n\
                    [sandbox]\nenabled = false\nnetwork = true\nmode = \"none\"\n\
                    [plugins.kit.variables]\nBASH_ENV = \".forge/x.sh\"\n[loop]\ndefaultMaxIterations = 4\n";
        let committed = project_with_config(text, true);
        let l = load_project(committed.path());
        let c = l.build();
        assert_eq!(c.agent_command, None);
        assert_eq!(c.agent_compact_command, None);
        assert!(c.sandbox_enabled && !c.sandbox_network && c.sandbox_mode == "bwrap", "{c:?}");
        assert!(c.plugin_variables.is_empty(), "{:?}", c.plugin_variables);
        // The preset too: it picks the program found on PATH, and one (codex) runs the
        // whole agent in a sandbox that shares the network.
        assert_eq!(c.agent_preset, None);
        // The rest of the file still applies.
        assert_eq!(c.default_max_iterations, 4);
        for key in [
            "agent.command",
            "agent.compactCommand",
            "agent.preset",
            "sandbox.enabled",
            "sandbox.network",
            "sandbox.mode",
            "plugins.kit.variables.BASH_ENV",
        ] {
            assert!(
                l.warnings.iter().any(|w| w.contains(&format!("`{key}`")) && w.contains("committed to the repository")),
                "{key}: {:?}",
                l.warnings
            );
        }
        // The same file written locally (not committed) is the user's own: all of it applies.
        let local = project_with_config(text, false);
        let l = load_project(local.path());
        let c = l.build();
        assert_eq!(c.agent_command.as_deref(), Some(&["sh".to_string(), "-c".into(), "evil".into()][..]));
        assert!(!c.sandbox_enabled && c.sandbox_network);
        assert_eq!(c.plugin_variables["kit"]["BASH_ENV"], ".forge/x.sh");
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        // Through the standard order of sources too.
        let c = Loader::standard(committed.path(), None).unwrap().build();
        assert_eq!(c.agent_command, None);
        assert!(c.sandbox_enabled);
        // The user's initialization options may set them.
        let init = json!({ "agent": { "command": ["my-agent"] }, "sandbox": { "enabled": false } });
        let c = Loader::standard(committed.path(), Some(&init)).unwrap().build();
        assert_eq!(c.agent_command.as_deref(), Some(&["my-agent".to_string()][..]));
        assert!(!c.sandbox_enabled);
    }

    /// The repository's agent configuration is trusted by the user, never by the
    /// repository's own file, committed or not (as `plugins.trustProjectTools`).
    #[test]
    fn a_project_file_cannot_trust_its_own_agent_configuration() {
        for commit in [true, false] {
            let p = project_with_config("[agent]\ntrustProjectConfig = true\n", commit);
            let l = load_project(p.path());
            assert!(!l.build().agent_trust_project_config, "committed: {commit}");
            assert!(
                l.warnings
                    .iter()
                    .any(|w| w.contains("`agent.trustProjectConfig`") && w.contains("cannot grant itself")),
                "{:?}",
                l.warnings
            );
            let init = json!({ "agent": { "trustProjectConfig": true } });
            assert!(Loader::standard(p.path(), Some(&init)).unwrap().build().agent_trust_project_config);
        }
        let mut l = Loader::default();
        l.add_value(&json!({ "agent": { "trustProjectConfig": "yes" } }), "user").unwrap_err();
        assert!(!Loader::default().build().agent_trust_project_config);
    }

    /// An editor's settings never set trust (they may come from the project's own files);
    /// the same value as the sources before is no warning (Helix sends it both ways).
    #[test]
    fn settings_cannot_grant_trust() {
        let trust = json!({ "plugins": { "trustProjectTools": true }, "sandbox": { "exposeEnv": ["GITHUB_TOKEN"] } });
        let mut l = Loader::default();
        l.add_settings(&trust, "settings").unwrap();
        let c = l.build();
        assert!(!c.trust_project_tools && c.sandbox_expose_env.is_empty());
        assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
        assert!(l.warnings.iter().all(|w| w.contains("in settings is ignored")), "{:?}", l.warnings);
        // Given by the initialization options first: kept, and repeated without a warning.
        let mut l = Loader::default();
        l.add_value(&trust, "init").unwrap();
        l.add_settings(&trust, "settings").unwrap();
        assert!(l.build().trust_project_tools);
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        // Nor can settings take it back, and the rest of them applies.
        l.add_settings(&json!({ "plugins": { "trustProjectTools": false }, "loop": { "stallTimeoutMs": 7 } }), "s")
            .unwrap();
        assert!(l.build().trust_project_tools);
        assert_eq!(l.build().stall_timeout_ms, 7);
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        // A source added after the settings reads trust again.
        l.add_value(&json!({ "plugins": { "trustProjectTools": false } }), "user").unwrap();
        assert!(!l.build().trust_project_tools);

        // Nor do settings choose the program or loosen the sandbox, and their deny rules
        // only add.
        let mut l = Loader::default();
        l.add_value(&json!({ "loop": { "permissions": { "deny": ["rm *"] } } }), "user").unwrap();
        let settings = json!({
            "agent": { "command": "/tmp/evil" },
            "sandbox": { "enabled": false, "network": true },
            "loop": { "permissions": { "deny": ["curl *"] } },
        });
        l.add_settings(&settings, "s").unwrap();
        let c = l.build();
        assert!(c.agent_command.is_none() && c.sandbox_enabled && !c.sandbox_network);
        assert_eq!(c.permissions_deny, ["rm *", "curl *"]);
        assert_eq!(l.warnings.len(), 3, "{:?}", l.warnings);
        l.add_settings(&json!({ "loop": { "permissions": { "deny": [] } } }), "s").unwrap();
        assert_eq!(l.build().permissions_deny, ["rm *", "curl *"]);
        // The defaults, sent as settings, are no news.
        let mut l = Loader::default();
        let defaults = json!({ "sandbox": { "enabled": true, "network": false, "exposeEnv": [] }, "plugins": { "trustProjectTools": false } });
        l.add_settings(&defaults, "s").unwrap();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    }

    /// What a sandbox hides: a repository's file may add to `sandbox.hidePaths` but not
    /// expose anything (`exposePaths`, `exposeEnv` are the user's); entries are checked.
    #[test]
    fn a_project_file_may_hide_more_but_not_expose_secrets() {
        let text =
            "[sandbox]\nhidePaths = [\"~/work-keys\"]\nexposePaths = [\"~/.ssh\"]\nexposeEnv = [\"GITHUB_TOKEN\"]\n";
        for commit in [true, false] {
            let p = project_with_config(text, commit);
            let mut l = Loader::default();
            l.add_value(&json!({ "sandbox": { "hidePaths": ["/srv/keys"], "exposePaths": ["~/.npmrc"] } }), "user")
                .unwrap();
            l.repository_file_of = Some(p.path().to_path_buf());
            l.add_file(&Loader::project_file(p.path())).unwrap();
            let c = l.build();
            assert_eq!(c.sandbox_hide_paths, ["/srv/keys", "~/work-keys"], "committed: {commit}");
            assert_eq!(c.sandbox_expose_paths, ["~/.npmrc"], "committed: {commit}");
            assert!(c.sandbox_expose_env.is_empty(), "committed: {commit}");
            for key in ["sandbox.exposePaths", "sandbox.exposeEnv"] {
                assert!(
                    l.warnings.iter().any(|w| w.contains(&format!("`{key}`")) && w.contains("cannot grant itself")),
                    "{key}: {:?}",
                    l.warnings
                );
            }
        }
        let init = json!({ "sandbox": { "exposePaths": ["~/.npmrc"], "exposeEnv": ["NPM_TOKEN"] } });
        let p = project_with_config("", false);
        let c = Loader::standard(p.path(), Some(&init)).unwrap().build();
        assert_eq!(
            (c.sandbox_expose_paths, c.sandbox_expose_env),
            (vec!["~/.npmrc".to_string()], vec!["NPM_TOKEN".to_string()])
        );
        for bad in
            [json!({ "sandbox": { "hidePaths": ["keys"] } }), json!({ "sandbox": { "exposePaths": ["~user/x"] } })]
        {
            let e = Loader::default().add_value(&bad, "user").unwrap_err();
            assert!(e.0.contains("must be an absolute path or start with ~/"), "{e}");
        }
        let e = Loader::default().add_value(&json!({ "sandbox": { "hidePaths": "~/.keys" } }), "user").unwrap_err();
        assert!(e.0.contains("`sandbox.hidePaths`") && e.0.contains("a list of strings"), "{e}");
    }

    /// A project's file adds deny rules to the user's, never removes them (committed or
    /// not); the user's initialization options still set the list as they like.
    #[test]
    fn a_project_file_adds_to_the_deny_rules_and_never_removes_them() {
        let user = json!({ "loop": { "permissions": { "deny": ["review-write", { "permission": "bash", "pattern": "git push *" }] } } });
        for committed in [true, false] {
            let emptied = project_with_config("[loop.permissions]\ndeny = []\n", committed);
            let mut l = Loader::default();
            l.add_value(&user, "user").unwrap();
            l.repository_file_of = Some(emptied.path().to_path_buf());
            l.add_file(&Loader::project_file(emptied.path())).unwrap();
            assert_eq!(l.build().permissions_deny.len(), 2, "committed: {committed}");
            let added = project_with_config("[loop.permissions]\ndeny = [\"shell\", \"review-write\"]\n", committed);
            let mut l = Loader::default();
            l.add_value(&user, "user").unwrap();
            l.repository_file_of = Some(added.path().to_path_buf());
            l.add_file(&Loader::project_file(added.path())).unwrap();
            let deny = l.build().permissions_deny;
            assert_eq!(deny.len(), 3, "{deny:?}");
            assert_eq!(deny[2], json!("shell"));
        }
        // Without a user list, the project's is the list.
        let only = project_with_config("[loop.permissions]\ndeny = [\"shell\"]\n", true);
        assert_eq!(load_project(only.path()).build().permissions_deny, vec![json!("shell")]);
        // The user's initialization options replace it.
        let mut l = Loader::default();
        l.add_value(&user, "user").unwrap();
        l.add_value(&json!({ "loop": { "permissions": { "deny": [] } } }), "init").unwrap();
        assert!(l.build().permissions_deny.is_empty());
    }

    /// Commits every file under `dir` (a repository) as `HEAD`.
    fn commit_all(repo: &git2::Repository) {
        let mut index = repo.index().unwrap();
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.invalid").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "c", &tree, &[]).unwrap();
    }

    #[test]
    fn committed_means_in_the_enclosing_repository_through_links_and_fails_closed() {
        let command = "[agent]\ncommand = [\"evil\"]\n";
        // A project that is a folder of a monorepo, its config committed there.
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(d.path()).unwrap();
        let project = d.path().join("frontend");
        std::fs::create_dir_all(project.join(".forge")).unwrap();
        std::fs::write(project.join(".forge/config.toml"), command).unwrap();
        commit_all(&repo);
        assert!(committed_config(&project));
        assert_eq!(load_project(&project).build().agent_command, None);
        // Committed, then dropped from the index (no index entry, still in HEAD).
        let mut index = repo.index().unwrap();
        index.remove_path(Path::new("frontend/.forge/config.toml")).unwrap();
        index.write().unwrap();
        assert!(committed_config(&project));

        // A committed `.forge` that is a link to a committed folder.
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(d.path()).unwrap();
        std::fs::create_dir_all(d.path().join("conf")).unwrap();
        std::fs::write(d.path().join("conf/config.toml"), command).unwrap();
        std::os::unix::fs::symlink("conf", d.path().join(".forge")).unwrap();
        commit_all(&repo);
        assert!(committed_config(d.path()));
        assert_eq!(load_project(d.path()).build().agent_command, None);

        // The repository commits project tools under `.forge/`, the user's config is local.
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(d.path()).unwrap();
        std::fs::create_dir_all(d.path().join(".forge/tools")).unwrap();
        std::fs::write(d.path().join(".forge/tools/t.json"), "{}").unwrap();
        commit_all(&repo);
        std::fs::write(d.path().join(".forge/config.toml"), command).unwrap();
        assert!(!committed_config(d.path()));
        assert_eq!(load_project(d.path()).build().agent_command.as_deref(), Some(&["evil".to_string()][..]));

        // No repository at all (an unpacked archive): it may have come with the folder.
        let plain = tempfile::tempdir().unwrap();
        assert!(committed_config(plain.path()));
        std::fs::create_dir_all(plain.path().join(".forge")).unwrap();
        std::fs::write(plain.path().join(".forge/config.toml"), command).unwrap();
        let l = load_project(plain.path());
        assert!(l.warnings.iter().any(|w| w.contains("in no git repository")), "{:?}", l.warnings);
        assert_eq!(l.build().agent_command, None);
    }

    #[test]
    fn a_toml_error_names_its_line_and_column_and_a_date_time_is_refused_by_key() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        for (text, want) in [
            ("executionModel = \"m\"\n[documents]\nmaxPlanBytes = = 3\n", "(line 3, column 16)"),
            ("a = 1\na = 2\n", "(line 2, column 1)"),
            ("é = \"ü\" x\n", "(line 1, column 9)"),
            ("a = 1\r\nb = \r\n", "(line 2, column 5)"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = Loader::default().add_file(&p).unwrap_err();
            assert!(e.0.contains("is not valid TOML ") && e.0.contains(want), "{text:?}: {e}");
        }
        std::fs::write(&p, "executionModel = 1979-05-27T07:32:00Z\n").unwrap();
        let e = Loader::default().add_file(&p).unwrap_err();
        assert!(e.0.contains("`executionModel`") && e.0.contains("date-time"), "{e}");
        // Also behind a date-time under an unknown key.
        std::fs::write(&p, "aaa = 2024-05-01\nexecutionModel = 1979-05-27T07:32:00Z\n").unwrap();
        let e = Loader::default().add_file(&p).unwrap_err();
        assert!(e.0.contains("`executionModel`"), "{e}");
    }

    #[test]
    fn a_config_file_that_is_a_link_to_nothing_is_skipped_with_a_warning() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        std::os::unix::fs::symlink(d.path().join("gone.toml"), &p).unwrap();
        let mut l = Loader::default();
        l.add_file(&p).unwrap();
        assert!(
            l.warnings.iter().any(|w| w.contains("symbolic link to") && w.contains("gone.toml")),
            "{:?}",
            l.warnings
        );
        // No file at all is no configuration, without a word.
        let mut l = Loader::default();
        l.add_file(&d.path().join("absent.toml")).unwrap();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        // A file where its folder should be (a repository's `.forge` a file): a warning.
        std::fs::write(d.path().join(".forge"), "hi\n").unwrap();
        let mut l = Loader::default();
        l.add_file(&d.path().join(".forge/config.toml")).unwrap();
        assert!(
            l.warnings.iter().any(|w| w.contains(".forge/config.toml") && w.contains("is a file")),
            "{:?}",
            l.warnings
        );
    }

    #[test]
    fn a_date_time_under_an_unknown_key_is_only_that_keys_warning() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        std::fs::write(&p, "[x]\nupdated = 2024-05-01\n").unwrap();
        let mut l = Loader::default();
        l.add_file(&p).unwrap();
        assert!(l.warnings.iter().any(|w| w.contains("x.updated")), "{:?}", l.warnings);
    }

    #[test]
    fn a_config_file_that_is_a_fifo_is_an_error_not_a_wait() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Loader::default().add_file(&p).unwrap_err();
        assert!(e.0.contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_config_file_that_is_a_link_to_a_device_or_too_large_is_refused_not_read() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        let e = Loader::default().add_file(&p).unwrap_err();
        assert!(e.0.contains("config.toml") && e.0.contains("not a regular file"), "{e}");
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, "#".repeat(MAX_CONFIG_FILE as usize + 1)).unwrap();
        let e = Loader::default().add_file(&p).unwrap_err();
        assert!(e.0.contains("larger than"), "{e}");
        assert_eq!(read_small_file(&d.path().join("missing.toml"), 10).unwrap(), None);
        std::fs::write(&p, "[loop]\ndefaultMaxIterations = 2\n").unwrap();
        assert_eq!(read_small_file(&p, 100).unwrap().as_deref(), Some("[loop]\ndefaultMaxIterations = 2\n"));
    }

    #[test]
    fn toml_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.toml");
        std::fs::write(&p, "executionModel = \"a/b\"\n[agent]\ncommand = [\"sh\", \"{prompt_file}\"]\n[documents]\nmaterialize = \"auto\"\n").unwrap();
        let mut l = Loader::default();
        l.add_file(&p).unwrap();
        let c = l.build();
        assert_eq!(c.execution_model.as_deref(), Some("a/b"));
        assert_eq!(c.agent_command, Some(vec!["sh".into(), "{prompt_file}".into()]));
        assert_eq!(c.materialize, None);
        std::fs::write(&p, "[sandbox]\nnetwork = 1\n").unwrap();
        let e = Loader::default().add_file(&p).unwrap_err();
        assert!(e.0.contains("`sandbox.network`") && e.0.contains(&p.display().to_string()));
    }

    #[test]
    fn agent_command_and_preset() {
        // (input, Ok(the argv) or Err(a part of the error message))
        type Want = Result<Option<Vec<&'static str>>, &'static str>;
        let table: &[(Value, Want)] = &[
            (
                json!({"agent": {"command": "claude -p \"fix it\" '/a b'"}}),
                Ok(Some(vec!["claude", "-p", "fix it", "/a b"])),
            ),
            (json!({"agent": {"command": ["a b", "c"]}}), Ok(Some(vec!["a b", "c"]))),
            (json!({"agent": {"command": "a 'open"}}), Err("balanced")),
            (json!({"agent": {"command": []}}), Err("agent.command")),
            (json!({"agent": {"preset": "claude"}}), Ok(None)),
            (json!({"agent": {"preset": "aider"}}), Err("\"opencode\", \"claude\", \"codex\" or \"gemini\"")),
            (json!({"agent": {"preset": 1}}), Err("agent.preset")),
        ];
        for (v, want) in table {
            let mut l = Loader::default();
            match (l.add_value(v, "c.toml"), want) {
                (Ok(()), Ok(argv)) => {
                    let c = l.build();
                    assert_eq!(
                        c.agent_command,
                        argv.as_ref().map(|a| a.iter().map(|s| s.to_string()).collect()),
                        "{v}"
                    );
                }
                (Err(e), Err(part)) => assert!(e.0.contains(part) && e.0.contains("c.toml"), "{v}: {e}"),
                (got, _) => panic!("{v}: unexpected {got:?}"),
            }
        }
        let mut l = Loader::default();
        l.add_value(&json!({"agent": {"preset": "codex"}}), "c.toml").unwrap();
        assert_eq!(l.build().agent_preset.as_deref(), Some("codex"));
    }

    /// The preset and the command come from one source, the last that sets either: a
    /// project's own command is not run as the user's preset's program, nor the user's own
    /// command as a project preset's CLI. One source setting both keeps both.
    #[test]
    fn the_agent_preset_and_command_come_from_one_source() {
        let cmd = |c: &Config| c.agent_command.clone().map(|a| a.join(" "));
        let build = |sources: &[Value]| {
            let mut l = Loader::default();
            for (i, v) in sources.iter().enumerate() {
                l.add_value(v, &format!("source {i}")).unwrap();
            }
            l.build()
        };
        let c =
            build(&[json!({"agent": {"preset": "claude"}}), json!({"agent": {"command": ["my-agent", "{session}"]}})]);
        assert_eq!((c.agent_preset.as_deref(), cmd(&c).as_deref()), (None, Some("my-agent {session}")));
        let c = build(&[json!({"agent": {"command": ["my-agent"]}}), json!({"agent": {"preset": "codex"}})]);
        assert_eq!((c.agent_preset.as_deref(), cmd(&c).as_deref()), (Some("codex"), None));
        let c = build(&[json!({"agent": {"preset": "claude", "command": ["/opt/claude/bin/claude"]}})]);
        assert_eq!((c.agent_preset.as_deref(), cmd(&c).as_deref()), (Some("claude"), Some("/opt/claude/bin/claude")));
        // A source that repeats the preset (or the command) in effect keeps the other.
        let c = build(&[
            json!({"agent": {"preset": "claude", "command": ["/opt/claude/bin/claude"]}}),
            json!({"agent": {"preset": "claude"}}),
        ]);
        assert_eq!((c.agent_preset.as_deref(), cmd(&c).as_deref()), (Some("claude"), Some("/opt/claude/bin/claude")));
        let c = build(&[
            json!({"agent": {"preset": "claude", "command": ["/opt/claude/bin/claude"]}}),
            json!({"agent": {"command": ["/opt/claude/bin/claude"]}}),
        ]);
        assert_eq!((c.agent_preset.as_deref(), cmd(&c).as_deref()), (Some("claude"), Some("/opt/claude/bin/claude")));
        // A source that sets neither changes nothing.
        let c = build(&[
            json!({"agent": {"preset": "claude", "command": ["/opt/claude/bin/claude"]}}),
            json!({"loop": {"defaultMaxIterations": 3}}),
        ]);
        assert_eq!((c.agent_preset.as_deref(), cmd(&c).as_deref()), (Some("claude"), Some("/opt/claude/bin/claude")));
    }
}
