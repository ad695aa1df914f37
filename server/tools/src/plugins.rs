//! Tools from files (PROTOCOL.md 10.4, Reforma): an executable `tools/<Name>` with a
//! sidecar `tools/<Name>.json` (`{ "description", "inputSchema", "override"? }`) in a
//! plugin folder: `<project>/.forge/` (plugin `project`) or
//! `$XDG_CONFIG_HOME/forge-lsp/plugins/<name>/`. Command `forge.<plugin>__<Name>`.
//!
//! The offers are read from the files at each call (never written by hand). Project tools
//! run only when the user trusts them (`plugins.trustProjectTools`, or the project in
//! `plugins.trustedProjects`, from the user file or the initialization options). A call
//! validates the input against `inputSchema` (the subset in [`validate`]), runs the
//! executable with the input as one JSON line on stdin and `FORGE_TOOL_NAME`,
//! `FORGE_TOOL_CALL_ID`, `FORGE_PLUGIN_DIR` and the plugin's variables in its environment,
//! in its own process group, with a time limit (`plugins.timeoutMs`) and bounded output
//! ([`MAX_OUTPUT`]); after the tool's transaction, never on the store thread.
//!
//! A cancelled call (`$/cancelRequest` drops the call's future) kills the process group.
//!
//! Called from a loop session, a tool runs in the loop's worktree, inside the loop's
//! sandbox (bubblewrap) when the loop has one.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forge_protocol::{CommandResult, ToolError, ToolOffer};
use serde_json::{json, Value};

use crate::ToolEnv;

/// Bytes of standard output (and of standard error) kept.
pub const MAX_OUTPUT: usize = 1024 * 1024;
/// Largest sidecar read.
const MAX_SIDECAR: u64 = 256 * 1024;

/// One tool found on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginTool {
    pub plugin: String,
    pub name: String,
    pub exe: PathBuf,
    pub plugin_dir: PathBuf,
    pub description: String,
    pub input_schema: Value,
    /// `"override": true` in the sidecar: offered as the bare `<Name>`, replacing a built-in
    /// of that name (only when the tool may run: a project tool only when trusted).
    pub overrides: bool,
}

impl PluginTool {
    /// The offer name (`<plugin>__<Name>`).
    pub fn offer_name(&self) -> String {
        format!("{}__{}", self.plugin, self.name)
    }

    /// Whether the override applies (`project_trusted`: whether the project's tools may
    /// run, asked only of a project tool that overrides).
    pub fn override_applies(&self, project_trusted: impl FnOnce() -> bool) -> bool {
        self.overrides && (self.plugin != "project" || project_trusted())
    }

    /// The name it is offered under: the bare `<Name>` when its override applies, else
    /// `<plugin>__<Name>`.
    pub fn effective_name(&self, project_trusted: bool) -> String {
        if self.override_applies(|| project_trusted) {
            self.name.clone()
        } else {
            self.offer_name()
        }
    }
}

/// The user's plugin folder root.
pub fn user_plugins_dir() -> PathBuf {
    forge_core::config::Loader::user_file()
        .parent()
        .map(|p| p.join("plugins"))
        .unwrap_or_else(|| PathBuf::from("plugins"))
}

/// A plugin's or tool's name: ASCII letters, digits, `-` and `_`, with no `__` (it joins
/// the two in `<plugin>__<Name>`) and no `_` at either end, where it would make one with
/// that join: `my_` + `x` gave `my___x`, which a call split as `my` and `_x`, and a user's
/// `project_` ran the repository's tool `_x` (review AA).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !s.contains("__")
        && !s.starts_with('_')
        && !s.ends_with('_')
}

/// Tools one plugin folder may hold: more are skipped, with a log.
const MAX_TOOLS_PER_PLUGIN: usize = 256;

/// The longest name a plugin tool is offered under: model providers take tool names of at
/// most 64 characters (OpenAI, Gemini, Anthropic through Bedrock), and the agent CLIs put
/// the MCP server's name in front (`mcp__forge__` for Claude Code and Codex, 12 characters,
/// with the server named `forge` as the presets name it). Claude Code and OpenCode send a
/// longer name as it is, and every turn of the agent then fails at the provider; Codex and
/// Gemini CLI shorten it into a name nobody wrote. A longer tool is not offered ([`offers`]:
/// `forge.tools`, and so MCP's `tools/list`, which lists the same offers), with a log; a
/// call by its name (an editor's command, `forge-lsp call`) still runs it.
pub const MAX_OFFER_NAME: usize = 64 - "mcp__forge__".len();

/// The tools of one plugin folder (sorted by name); unusable files are skipped with a log.
fn scan(plugin: &str, plugin_dir: &Path) -> Vec<PluginTool> {
    let dir = plugin_dir.join("tools");
    let mut names = tool_names(&dir);
    if names.len() > MAX_TOOLS_PER_PLUGIN {
        tracing::warn!(
            "plugin folder {} holds {} tools; the first {MAX_TOOLS_PER_PLUGIN} by name are used",
            dir.display(),
            names.len()
        );
        names.truncate(MAX_TOOLS_PER_PLUGIN);
    }
    names.into_iter().filter_map(|n| tool_at(plugin, plugin_dir, n)).collect()
}

/// Logs, once per path, a plugin folder or tool skipped for its name: a name that stopped
/// being valid (`my_`, review CC) would otherwise vanish without a word.
fn skipped_for_name(path: &Path) {
    static SAID: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> =
        std::sync::LazyLock::new(Default::default);
    if SAID.lock().is_ok_and(|mut s| s.insert(path.to_path_buf())) {
        tracing::warn!(
            "{} is skipped: a plugin's or tool's name is letters, digits, - and _, without __ and without _ at either end (rename it)",
            path.display()
        );
    }
}

/// The names of the tools a plugin's `tools/` folder may hold, sorted.
fn tool_names(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else { return vec![] };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.ends_with(".json"))
        .filter(|n| {
            let ok = valid_name(n);
            if !ok && dir.join(format!("{n}.json")).exists() {
                skipped_for_name(&dir.join(n));
            }
            ok
        })
        .collect();
    names.sort();
    names
}

/// Whether `name` is among the tools of its folder that are used (the first
/// [`MAX_TOOLS_PER_PLUGIN`] by name), as [`scan`] offers them.
fn within_cap(plugin_dir: &Path, name: &str) -> bool {
    let names = tool_names(&plugin_dir.join("tools"));
    names.len() <= MAX_TOOLS_PER_PLUGIN || names.iter().take(MAX_TOOLS_PER_PLUGIN).any(|n| n == name)
}

/// The tool `name` of one plugin folder, when it has a usable sidecar (else skipped with a
/// log).
fn tool_at(plugin: &str, plugin_dir: &Path, name: String) -> Option<PluginTool> {
    let dir = plugin_dir.join("tools");
    let path = dir.join(&name);
    let sidecar = dir.join(format!("{name}.json"));
    let text = match forge_core::config::read_small_file(&sidecar, MAX_SIDECAR) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!("plugin tool sidecar {}: {e}; skipped", sidecar.display());
            return None;
        }
    };
    let parsed: Option<Value> = serde_json::from_str(&text).ok();
    let Some(Value::Object(side)) = parsed else {
        tracing::warn!("plugin tool sidecar {} is not a JSON object; skipped", sidecar.display());
        return None;
    };
    if !executable_file(&path) {
        tracing::warn!(
            "plugin tool {} is not an executable file (a regular file, or a link to one, with an execute bit); skipped",
            path.display()
        );
        return None;
    }
    let description = side.get("description").and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(problem) = side
        .get("inputSchema")
        .and_then(|s| schema_problem(s, "inputSchema", 0).or_else(|| dangling_ref(s, s, "inputSchema", 0)))
    {
        tracing::warn!("plugin tool sidecar {}: {problem}; skipped", sidecar.display());
        return None;
    }
    let schema = side.get("inputSchema").cloned().and_then(object_schema);
    let Some(schema) = schema.filter(|_| !description.trim().is_empty()) else {
        tracing::warn!(
            "plugin tool sidecar {} needs a description and an inputSchema object whose type is \"object\" (the input is one JSON object); skipped",
            sidecar.display()
        );
        return None;
    };
    Some(PluginTool {
        plugin: plugin.to_string(),
        name,
        exe: path,
        plugin_dir: plugin_dir.to_path_buf(),
        description,
        input_schema: schema,
        overrides: side.get("override").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// Whether `path` is a regular file (a link is followed) this process may execute: what a
/// tool's call can start. A folder, a file without an execute bit for this user or on a
/// `noexec` mount is not offered (before, it was offered and every call failed, and with
/// `override` it hid the built-in of its name).
fn executable_file(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c` is a NUL-terminated path that outlives the call; no memory is written.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::X_OK, libc::AT_EACCESS) == 0 }
}

/// What is wrong with a keyword of `schema` (at `at`), where [`validate`] reads it: a
/// keyword of the wrong type (`"required": "a"`, `"properties": []`) was skipped when a
/// call was checked, so the tool ran without the constraint its author wrote (found by a
/// review). `None`: every keyword it reads has its type. Unknown keywords are annotations.
/// Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
const SCHEMA_KEYS: [&str; 8] =
    ["not", "if", "then", "else", "additionalProperties", "contains", "propertyNames", "items"];
const SCHEMA_LISTS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
const SCHEMA_MAPS: [&str; 4] = ["properties", "patternProperties", "$defs", "definitions"];

fn schema_problem(schema: &Value, at: &str, depth: usize) -> Option<String> {
    const COUNTS: [&str; 8] = [
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minContains",
        "maxContains",
    ];
    let Value::Object(m) = schema else {
        return (!schema.is_boolean()).then(|| format!("{at} must be a schema (an object or a boolean)"));
    };
    if depth > MAX_SCHEMA_DEPTH {
        return Some(format!("{at} nests deeper than {MAX_SCHEMA_DEPTH}"));
    }
    let strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
    for (k, v) in m {
        let here = format!("{at}.{k}");
        let wrong = |what: &str| Some(format!("{here} must be {what}"));
        match k.as_str() {
            "required" if !strings(v) => return wrong("an array of property names"),
            "type" if !(v.is_string() || strings(v)) => return wrong("a type name or an array of them"),
            // A model provider refuses a tool whose schema is not valid JSON Schema (every
            // turn of the agent would fail), and the check of an input skipped what it could
            // not read: a misspelt type let any value through (review AA).
            "type" => {
                const TYPES: [&str; 7] = ["null", "boolean", "object", "array", "number", "string", "integer"];
                let names: Vec<&str> = match v {
                    Value::String(t) => vec![t.as_str()],
                    _ => v.as_array().into_iter().flatten().filter_map(Value::as_str).collect(),
                };
                if let Some(bad) = names.iter().find(|t| !TYPES.contains(t)) {
                    return Some(format!(
                        "{here} names {bad:?}, which is not a JSON Schema type ({})",
                        TYPES.join(", ")
                    ));
                }
            }
            "pattern" if v.is_string() => {
                if let Err(e) = forge_domain::ecma_regex::compile(v.as_str().unwrap_or_default()) {
                    return Some(format!("{here} is not a pattern the input check can match: {e}"));
                }
            }
            "enum" if !v.is_array() => return wrong("an array"),
            "pattern" if !v.is_string() => return wrong("a string"),
            "uniqueItems" if !v.is_boolean() => return wrong("a boolean"),
            "$ref" if !v.is_string() => return wrong("a string"),
            "minimum" | "maximum" | "multipleOf" if !v.is_number() => return wrong("a number"),
            "exclusiveMinimum" | "exclusiveMaximum" if !(v.is_number() || v.is_boolean()) => {
                return wrong("a number (or, in draft 4, a boolean)")
            }
            "dependentRequired" if !v.as_object().is_some_and(|o| o.values().all(strings)) => {
                return wrong("an object of arrays of property names")
            }
            k if COUNTS.contains(&k) && !v.is_u64() => return wrong("a non-negative integer"),
            "items" if v.is_array() => {
                // Draft 4's list of item schemas.
                let mut items = v.as_array().into_iter().flatten().enumerate();
                if let Some(p) = items.find_map(|(i, s)| schema_problem(s, &format!("{here}[{i}]"), depth + 1)) {
                    return Some(p);
                }
            }
            k if SCHEMA_KEYS.contains(&k) => {
                if let Some(p) = schema_problem(v, &here, depth + 1) {
                    return Some(p);
                }
            }
            k if SCHEMA_LISTS.contains(&k) => {
                let Some(list) = v.as_array() else { return wrong("an array of schemas") };
                if let Some(p) =
                    list.iter().enumerate().find_map(|(i, s)| schema_problem(s, &format!("{here}[{i}]"), depth + 1))
                {
                    return Some(p);
                }
            }
            k if SCHEMA_MAPS.contains(&k) => {
                let Some(map) = v.as_object() else { return wrong("an object of schemas") };
                if k == "patternProperties" {
                    if let Some((n, e)) =
                        map.keys().find_map(|n| forge_domain::ecma_regex::compile(n).err().map(|e| (n, e)))
                    {
                        return Some(format!(
                            "{here} has the key {n:?}, which is not a pattern the input check can match: {e}"
                        ));
                    }
                }
                if let Some(p) = map.iter().find_map(|(n, s)| schema_problem(s, &format!("{here}.{n}"), depth + 1)) {
                    return Some(p);
                }
            }
            _ => {}
        }
    }
    None
}

/// The first `$ref` in `schema` (a part of `root`) that points nowhere in `root`: `#` or
/// a JSON pointer into it are the references the input check follows; one that points
/// nowhere was ignored, so its constraint never held.
fn dangling_ref(root: &Value, schema: &Value, at: &str, depth: usize) -> Option<String> {
    let Value::Object(m) = schema else { return None };
    if depth > MAX_SCHEMA_DEPTH {
        return None;
    }
    m.iter().find_map(|(k, v)| {
        let here = format!("{at}.{k}");
        match (k.as_str(), v) {
            ("$ref", Value::String(r)) => {
                let found = r.strip_prefix('#').and_then(|p| root.pointer(&percent_decode(p)));
                found.is_none().then(|| {
                    format!("{here} {r:?} points nowhere in the schema the input check follows (a reference is `#` or a JSON pointer into the schema, such as \"#/$defs/name\"; anchors and other documents are not followed)")
                })
            }
            // Only where a schema stands: other keywords (an extension's `x-doc`, `enum`,
            // `default`) hold data.
            (k, Value::Array(list)) if SCHEMA_LISTS.contains(&k) || k == "items" => list
                .iter()
                .enumerate()
                .find_map(|(i, s)| dangling_ref(root, s, &format!("{here}[{i}]"), depth + 1)),
            (k, Value::Object(map)) if SCHEMA_MAPS.contains(&k) => {
                map.iter().find_map(|(n, s)| dangling_ref(root, s, &format!("{here}.{n}"), depth + 1))
            }
            (k, _) if SCHEMA_KEYS.contains(&k) => dangling_ref(root, v, &here, depth + 1),
            _ => None,
        }
    })
}

/// A sidecar's `inputSchema` as the schema of an object input: a JSON object whose `type`
/// is `"object"`, added when the schema does not say (MCP's `tools/list` requires it, and
/// a tool's input is always one object); `None` for anything else.
fn object_schema(schema: Value) -> Option<Value> {
    let Value::Object(mut m) = schema else { return None };
    match m.get("type") {
        None => {
            m.insert("type".to_string(), json!("object"));
        }
        Some(t) if t == "object" => {}
        Some(_) => return None,
    }
    Some(Value::Object(m))
}

/// The plugin folders of a project, in order: the project's own (`project`), then each
/// user plugin in name order.
fn plugin_dirs(project_root: &Path) -> Vec<(String, PathBuf)> {
    let mut plugins: Vec<(String, PathBuf)> = std::fs::read_dir(user_plugins_dir())
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(|n| (n.to_string(), e.path())))
                .filter(|(n, p)| {
                    // The name of the repository's own tools: a user's folder of that name
                    // was shadowed by them without a word.
                    static SAID: std::sync::Once = std::sync::Once::new();
                    if n == "project" {
                        SAID.call_once(|| tracing::warn!(
                            "user plugin folder {} is skipped: `project` names the repository's own tools (rename the folder)",
                            p.display()
                        ));
                    }
                    if !valid_name(n) {
                        skipped_for_name(p);
                    }
                    valid_name(n) && n != "project"
                })
                .collect()
        })
        .unwrap_or_default();
    plugins.sort();
    plugins.insert(0, ("project".to_string(), project_root.join(".forge")));
    plugins
}

/// Every plugin tool visible to a project, in [`plugin_dirs`]' order.
pub fn discover(project_root: &Path) -> Vec<PluginTool> {
    plugin_dirs(project_root).into_iter().flat_map(|(name, dir)| scan(&name, &dir)).collect()
}

/// The offers of the plugin tools of a project. When two overrides of one name apply, the
/// first in [`discover`]'s order is the one a call of the bare name runs ([`find`]), so it
/// is the one offered under that name; the other is offered under its `<plugin>__<Name>`.
pub fn offers(project_root: &Path, project_trusted: bool) -> Vec<ToolOffer> {
    let mut overridden = std::collections::HashSet::new();
    discover(project_root)
        .into_iter()
        .filter_map(|t| {
            let mut name = t.effective_name(project_trusted);
            if t.override_applies(|| project_trusted) && !overridden.insert(name.clone()) {
                tracing::warn!(
                    "plugin tool {} also overrides `{name}`, which an earlier plugin overrides already; it is offered as {}",
                    t.exe.display(),
                    t.offer_name()
                );
                name = t.offer_name();
            }
            if name.len() > MAX_OFFER_NAME {
                tracing::warn!(
                    "plugin tool {} is not offered: its name {name} has {} characters, more than the {MAX_OFFER_NAME} an agent's model provider takes after its CLI's prefix (mcp__forge__); rename it to offer it (a call by its name still runs it)",
                    t.exe.display(),
                    name.len()
                );
                return None;
            }
            // An untrusted repository's tool is offered (a call says how to trust it) with
            // words of ours, not its own: its description and schema would reach the
            // agent's model from a repository the user never trusted (instructions that
            // read as the tool's authority; megabytes of sidecars). Review AA.
            if t.plugin == "project" && !project_trusted {
                return Some(ToolOffer {
                    command: forge_protocol::command_name(&name),
                    description: format!(
                        "A tool of this repository (.forge/tools/{}), which the user has not trusted: calling it fails with how to trust the repository's tools. Its own description and input schema are shown once it is trusted.",
                        t.name
                    ),
                    name,
                    input_schema: serde_json::json!({ "type": "object" }),
                });
            }
            Some(ToolOffer {
                command: forge_protocol::command_name(&name),
                name,
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
        })
        .collect()
}

/// The built-in offers with the plugin offers: an override replaces the built-in of its
/// name, the others follow.
pub fn merge(mut builtins: Vec<ToolOffer>, plugins: Vec<ToolOffer>) -> Vec<ToolOffer> {
    for o in plugins {
        match builtins.iter_mut().find(|b| b.name == o.name) {
            Some(b) => *b = o,
            None => builtins.push(o),
        }
    }
    builtins
}

/// The plugin tool of a command: `forge.<plugin>__<Name>` (or without `forge.`), or the bare
/// `<Name>` of a tool whose override applies.
///
/// Reads only the sidecars of that name (every call of a built-in passes here: a folder of
/// many or large sidecars must not slow each one down).
///
/// `project_trusted` is asked only when a project tool of that name would override a
/// built-in (working it out outside a server opens the repository and reads the user's
/// configuration: a cost every `forge-lsp call` paid for nothing).
pub fn find(project_root: &Path, command: &str, project_trusted: impl FnOnce() -> bool) -> Option<PluginTool> {
    let name = command.strip_prefix(forge_protocol::COMMAND_PREFIX).unwrap_or(command);
    if let Some((plugin, tool)) = name.split_once("__") {
        if !valid_name(plugin) || !valid_name(tool) {
            return None;
        }
        let dir = if plugin == "project" { project_root.join(".forge") } else { user_plugins_dir().join(plugin) };
        if !dir.join("tools").join(tool).exists() || !within_cap(&dir, tool) {
            return None;
        }
        return tool_at(plugin, &dir, tool.to_string());
    }
    if !valid_name(name) {
        return None;
    }
    // Worked out at most once, and only if needed.
    let trusted = std::cell::LazyCell::new(project_trusted);
    plugin_dirs(project_root)
        .into_iter()
        .filter(|(_, dir)| dir.join("tools").join(name).exists() && within_cap(dir, name))
        .filter_map(|(plugin, dir)| tool_at(&plugin, &dir, name.to_string()))
        .find(|t| t.override_applies(|| *trusted))
}

/// Whether the project's own tools may run.
pub fn project_trusted(env: &ToolEnv) -> bool {
    trusted_by(&env.config, &project_dir(env))
}

/// The directory whose `.forge/tools` are the project's tools, and whose path the user
/// trusts: the project's own directory, also for a loop session, whose root is the loop's
/// worktree (`.forge/` is not committed, so the worktree has the tools the agent wrote there
/// at most, and trust names the project's directory, not a worktree's).
pub fn project_dir(env: &ToolEnv) -> PathBuf {
    if env.caller.binding.is_some() {
        if let Some(main) = forge_core::project::main_worktree(&env.project.root) {
            return main;
        }
    }
    env.project.root.clone()
}

/// Whether `config` trusts the tools of the project at `root`: by its root, never by its
/// id, which every clone and fork of the history shares (an entry that is not an absolute
/// path is reported by the configuration loader and matches nothing).
pub fn trusted_by(config: &forge_core::config::Config, root: &Path) -> bool {
    config.trust_project_tools
        || config.trusted_projects.iter().any(|p| Path::new(p).is_absolute() && Path::new(p) == root)
}

/// Trust as seen from outside a server (`forge-lsp call`, `forge-lsp mcp`): the user's
/// configuration file.
pub fn trusted_outside(project_root: &Path) -> bool {
    let project = forge_core::project::Project::detect(project_root);
    forge_core::config::Loader::standard(&project.root, None)
        .map(|l| trusted_by(&l.build(), &project.root))
        .unwrap_or(false)
}

/// Validates `v` against a sidecar's `inputSchema`, JSON Schema as tools written with zod
/// or by hand use it: `type` (one or a list; an integer may be written `2.0`), `enum`,
/// `const`, `minLength`/`maxLength`, `pattern` (ECMAScript, run linear-time), `minimum`,
/// `maximum`, `exclusiveMinimum`/`exclusiveMaximum` (numbers, or draft 4's booleans),
/// `multipleOf`, `items` (a schema, or draft 4's list), `prefixItems`, `minItems`/
/// `maxItems`, `uniqueItems`, `contains`, `properties`, `required`,
/// `additionalProperties`, `patternProperties`, `propertyNames`, `minProperties`/
/// `maxProperties`, `dependentRequired`, `allOf`, `anyOf`, `oneOf`, `not`,
/// `if`/`then`/`else`, boolean schemas and `$ref` to `#` or a JSON pointer into the schema
/// (`#/$defs/...`, `#/definitions/...`). Annotations (`format`, `description`, `default`,
/// ...) do not constrain. The error names the path of the first failure.
pub fn validate(schema: &Value, v: &Value, path: &str) -> Result<(), String> {
    let run = || {
        Validator { root: schema, budget: std::cell::Cell::new(MAX_SCHEMA_CHECKS), patterns: Default::default() }
            .check(schema, v, path, 0)
    };
    // On a thread of its own with room for MAX_SCHEMA_DEPTH frames (a debug build's are
    // about 10 KiB): the caller's (a runtime worker's 2 MiB) overflowed at 200, and took the
    // server down. The thread costs tens of microseconds; a plugin call starts a process.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("forge-schema".into())
            .stack_size(SCHEMA_STACK)
            .spawn_scoped(scope, run)
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .unwrap_or_else(|e| Err(format!("cannot start the inputSchema check: {e}")))
    })
}

/// The stack of the thread that checks an input ([`validate`]).
const SCHEMA_STACK: usize = 32 << 20;

/// Schema checks one validation may make: unions of unions (`anyOf` inside `anyOf`, as
/// recursive schemas have) can try every branch at every level of a deep input, which grows
/// exponentially; past this the input is refused, naming the cost.
const MAX_SCHEMA_CHECKS: usize = 200_000;

/// How deep checks may nest: `$ref`s, combinators and the input's own nesting together (a
/// schema that refers to itself for ever is an error, not a stack overflow; [`SCHEMA_STACK`]
/// holds this many frames with room to spare).
const MAX_SCHEMA_DEPTH: usize = 256;

struct Validator<'a> {
    root: &'a Value,
    /// Checks left ([`MAX_SCHEMA_CHECKS`]).
    budget: std::cell::Cell<usize>,
    /// `pattern`s compiled so far: each once per validation, not once per string checked.
    patterns: std::cell::RefCell<std::collections::HashMap<String, Result<regex::Regex, String>>>,
}

impl Validator<'_> {
    /// Takes `n` checks from the budget.
    fn spend(&self, n: usize) -> Result<(), String> {
        match self.budget.get().checked_sub(n) {
            Some(left) => {
                self.budget.set(left);
                Ok(())
            }
            None => {
                self.budget.set(0);
                Err(format!(
                    "the input is too costly to check against the tool's inputSchema (over {MAX_SCHEMA_CHECKS} checks)"
                ))
            }
        }
    }

    /// Whether `x` matches `p` (an ECMAScript pattern of the schema, its `what`: a
    /// `pattern` or a `patternProperties` key), compiled once per check.
    fn matches(&self, p: &str, x: &str, what: &str) -> Result<bool, String> {
        let mut cache = self.patterns.borrow_mut();
        if !cache.contains_key(p) {
            let compiled = forge_domain::ecma_regex::compile(p).map_err(|e| e.to_string());
            cache.insert(p.to_string(), compiled);
        }
        match cache.get(p).expect("compiled above") {
            Ok(re) => Ok(re.is_match(x)),
            Err(e) => Err(format!("the tool's inputSchema has a {what} that is not a regular expression ({p:?}): {e}")),
        }
    }

    fn check(&self, schema: &Value, v: &Value, path: &str, depth: usize) -> Result<(), String> {
        self.spend(1)?;
        let at = if path.is_empty() { "the input".to_string() } else { format!("`{path}`") };
        if depth > MAX_SCHEMA_DEPTH {
            return Err(format!("the tool's inputSchema nests deeper than {MAX_SCHEMA_DEPTH} at {at}"));
        }
        let s = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{at} is not allowed")),
            Value::Object(s) => s,
            _ => return Ok(()),
        };
        let deeper = |sub: &Value, v: &Value, p: &str| self.check(sub, v, p, depth + 1);
        if let Some(Value::String(r)) = s.get("$ref") {
            match self.resolve(r) {
                Some(target) => deeper(target, v, path)?,
                None => tracing::warn!("plugin tool inputSchema: $ref {r:?} is not a pointer into the schema; ignored"),
            }
        }
        if let Some(t) = s.get("type") {
            let types: Vec<&str> = match t {
                Value::String(x) => vec![x.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let is = |ty: &str| match ty {
                "object" => v.is_object(),
                "array" => v.is_array(),
                "string" => v.is_string(),
                "boolean" => v.is_boolean(),
                "null" => v.is_null(),
                "number" => v.is_number(),
                "integer" => {
                    v.as_i64().is_some() || v.as_u64().is_some() || v.as_f64().is_some_and(|x| x.fract() == 0.0)
                }
                _ => true,
            };
            if !types.is_empty() && !types.iter().any(|t| is(t)) {
                return Err(format!("{at} must be {}", types.join(" or ")));
            }
        }
        if let Some(Value::Array(e)) = s.get("enum") {
            if !e.iter().any(|x| same(x, v)) {
                return Err(format!("{at} must be one of {}", Value::Array(e.clone())));
            }
        }
        if let Some(c) = s.get("const") {
            if !same(c, v) {
                return Err(format!("{at} must be {c}"));
            }
        }
        let num = |k: &str| s.get(k).and_then(Value::as_f64);
        if let Some(x) = v.as_str() {
            let n = x.chars().count() as f64;
            if num("minLength").is_some_and(|m| n < m) || num("maxLength").is_some_and(|m| n > m) {
                return Err(format!("{at} has a length outside the allowed range"));
            }
            if let Some(Value::String(p)) = s.get("pattern") {
                if !self.matches(p, x, "pattern")? {
                    return Err(format!("{at} must match the pattern {p:?}"));
                }
            }
        }
        if let Some(x) = v.as_f64().filter(|_| v.is_number()) {
            let exclusive = |k: &str, bound: &str| match s.get(k) {
                Some(Value::Bool(b)) => (*b).then(|| num(bound)).flatten(),
                Some(n) => n.as_f64(),
                None => None,
            };
            let low = exclusive("exclusiveMinimum", "minimum");
            let high = exclusive("exclusiveMaximum", "maximum");
            if num("minimum").is_some_and(|m| x < m)
                || num("maximum").is_some_and(|m| x > m)
                || low.is_some_and(|m| x <= m)
                || high.is_some_and(|m| x >= m)
            {
                return Err(format!("{at} is outside the allowed range"));
            }
            if let Some(m) = num("multipleOf").filter(|m| *m > 0.0) {
                let q = x / m;
                if (q - q.round()).abs() > 1e-9 {
                    return Err(format!("{at} must be a multiple of {m}"));
                }
            }
        }
        if let Some(a) = v.as_array() {
            let n = a.len() as f64;
            if num("minItems").is_some_and(|m| n < m) || num("maxItems").is_some_and(|m| n > m) {
                return Err(format!("{at} has a number of items outside the allowed range"));
            }
            let prefix: &[Value] = match (s.get("prefixItems"), s.get("items")) {
                (Some(Value::Array(p)), _) => p,
                (None, Some(Value::Array(p))) => p,
                _ => &[],
            };
            for (i, x) in a.iter().enumerate() {
                let sub = match prefix.get(i) {
                    Some(sub) => Some(sub),
                    None if !prefix.is_empty() && s.get("prefixItems").is_none() => s.get("additionalItems"),
                    None => s.get("items").filter(|it| !it.is_array()),
                };
                if let Some(sub) = sub {
                    deeper(sub, x, &format!("{path}[{i}]"))?;
                }
            }
            if s.get("uniqueItems") == Some(&Value::Bool(true)) {
                // Items are hashed as `same` compares them, so the check costs the items'
                // size, not their number squared (each item is one step of the budget).
                let mut seen: std::collections::HashMap<u64, Vec<usize>> = std::collections::HashMap::new();
                for (i, x) in a.iter().enumerate() {
                    self.spend(1)?;
                    let slot = seen.entry(same_hash(x)).or_default();
                    if slot.iter().any(|&j| same(&a[j], x)) {
                        return Err(format!("{at} must not repeat an item (item {i} is repeated)"));
                    }
                    slot.push(i);
                }
            }
            if let Some(c) = s.get("contains") {
                if !a.iter().enumerate().any(|(i, x)| deeper(c, x, &format!("{path}[{i}]")).is_ok()) {
                    return Err(format!("{at} must contain an item that matches its schema"));
                }
            }
        }
        if let Some(o) = v.as_object() {
            let n = o.len() as f64;
            if num("minProperties").is_some_and(|m| n < m) || num("maxProperties").is_some_and(|m| n > m) {
                return Err(format!("{at} has a number of fields outside the allowed range"));
            }
            let field = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
            if let Some(Value::Array(req)) = s.get("required") {
                for r in req.iter().filter_map(Value::as_str) {
                    if !o.contains_key(r) {
                        return Err(format!("missing required field `{}`", field(r)));
                    }
                }
            }
            if let Some(Value::Object(deps)) = s.get("dependentRequired") {
                for (k, needs) in deps.iter().filter(|(k, _)| o.contains_key(k.as_str())) {
                    for r in needs.as_array().into_iter().flatten().filter_map(Value::as_str) {
                        if !o.contains_key(r) {
                            return Err(format!("missing field `{}`, required with `{}`", field(r), field(k)));
                        }
                    }
                }
            }
            let props = s.get("properties").and_then(Value::as_object);
            let patterns: Vec<(&String, &Value)> = match s.get("patternProperties") {
                Some(Value::Object(pp)) => pp.iter().collect(),
                _ => vec![],
            };
            // Scalar fields first: a union's branch that a discriminator (`kind: "x"`)
            // rules out is given up before its nested values are walked.
            let scalars = o.iter().filter(|(_, x)| !x.is_object() && !x.is_array());
            let nested = o.iter().filter(|(_, x)| x.is_object() || x.is_array());
            for (k, x) in scalars.chain(nested) {
                let p = field(k);
                if let Some(names) = s.get("propertyNames") {
                    deeper(names, &Value::String(k.clone()), &p)
                        .map_err(|e| format!("field name `{p}` is not allowed: {e}"))?;
                }
                let mut known = false;
                if let Some(sub) = props.and_then(|m| m.get(k)) {
                    known = true;
                    deeper(sub, x, &p)?;
                }
                for (re, sub) in &patterns {
                    if self.matches(re, k, "patternProperties key")? {
                        known = true;
                        deeper(sub, x, &p)?;
                    }
                }
                if !known {
                    match s.get("additionalProperties") {
                        Some(Value::Bool(false)) => return Err(format!("unknown field `{p}`")),
                        Some(sub @ Value::Object(_)) => deeper(sub, x, &p)?,
                        _ => {}
                    }
                }
            }
        }
        if let Some(Value::Array(all)) = s.get("allOf") {
            for sub in all {
                deeper(sub, v, path)?;
            }
        }
        if let Some(Value::Array(any)) = s.get("anyOf") {
            let mut first = None;
            if !any.iter().any(|sub| deeper(sub, v, path).map_err(|e| first.get_or_insert(e).clone()).is_ok()) {
                return Err(first.unwrap_or_else(|| format!("{at} matches none of the allowed forms")));
            }
        }
        if let Some(Value::Array(one)) = s.get("oneOf") {
            let matching = one.iter().filter(|sub| deeper(sub, v, path).is_ok()).count();
            if matching != 1 {
                return Err(format!("{at} must match exactly one of the allowed forms (it matches {matching})"));
            }
        }
        if let Some(not) = s.get("not") {
            if deeper(not, v, path).is_ok() {
                return Err(format!("{at} is of a form that is not allowed"));
            }
        }
        if let Some(cond) = s.get("if") {
            let branch = if deeper(cond, v, path).is_ok() { s.get("then") } else { s.get("else") };
            if let Some(b) = branch {
                deeper(b, v, path)?;
            }
        }
        Ok(())
    }

    /// The schema a `$ref` points at: `#` or a JSON pointer into the sidecar's schema.
    fn resolve(&self, r: &str) -> Option<&Value> {
        let pointer = r.strip_prefix('#')?;
        let decoded = percent_decode(pointer);
        self.root.pointer(&decoded)
    }
}

/// JSON equality with numbers compared by value (`1` and `1.0` are the same).
/// A hash under which every two values [`same`] counts equal fall together: numbers by
/// their value as `f64` (`1` and `1.0`, `0` and `-0.0`), objects whatever their keys' order.
fn same_hash(v: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    fn feed(v: &Value, h: &mut std::collections::hash_map::DefaultHasher) {
        match v {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                (2u8, if f == 0.0 { 0 } else { f.to_bits() }).hash(h);
            }
            Value::String(s) => (3u8, s).hash(h),
            Value::Array(a) => {
                (4u8, a.len()).hash(h);
                a.iter().for_each(|x| feed(x, h));
            }
            Value::Object(o) => {
                (5u8, o.len()).hash(h);
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                for k in keys {
                    k.hash(h);
                    feed(&o[k], h);
                }
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    feed(v, &mut h);
    h.finish()
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| same(a, b)))
        }
        _ => a == b,
    }
}

/// A `$ref`'s fragment with `%XX` escapes decoded (and nothing else: `&`, `=` and `+`
/// are themselves in a fragment; a form decoder cut the reference at `&`, review CC).
fn percent_decode(s: &str) -> String {
    forge_protocol::uri::percent_decode(s)
}

/// One of a tool's output pipes, read on a thread of its own: at most [`MAX_OUTPUT`]
/// bytes kept, the rest drained (so the tool never blocks).
struct Drain {
    /// What was read so far, and whether anything was cut.
    read: Arc<Mutex<(Vec<u8>, bool)>>,
    /// Says the pipe reached its end (or failed).
    ended: std::sync::mpsc::Receiver<()>,
}

impl Drain {
    fn start(mut r: impl Read + Send + 'static) -> Drain {
        let read = Arc::new(Mutex::new((Vec::new(), false)));
        let (tx, ended) = std::sync::mpsc::channel();
        let into = read.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match r.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut g = into.lock().unwrap_or_else(|p| p.into_inner());
                        let room = MAX_OUTPUT.saturating_sub(g.0.len());
                        g.1 |= n > room;
                        g.0.extend_from_slice(&chunk[..n.min(room)]);
                    }
                }
            }
            let _ = tx.send(());
        });
        Drain { read, ended }
    }

    /// What the pipe carried, waiting until `deadline` at most for its end: a process the
    /// tool started outside its process group (`setsid`) outlives a call that ended by
    /// itself and may keep the pipe open, and the call must not wait for it (its reading
    /// thread ends when it lets go).
    fn finish(self, deadline: Instant) -> (Vec<u8>, bool) {
        let _ = self.ended.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        std::mem::take(&mut *self.read.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// How long a tool's output may still come after the tool ended or was killed.
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// Where a plugin tool called from a loop session runs: the loop's worktree, in its sandbox
/// when the loop has one (`network`: the loop's sandbox network setting).
#[derive(Debug, Clone)]
pub struct LoopPlace {
    pub worktree: PathBuf,
    pub sandbox: bool,
    pub network: bool,
    /// The data directory (its `agent-homes` is hidden in the sandbox).
    pub data_dir: Option<PathBuf>,
}

/// How many plugin tools' groups one process records at once (`forge-lsp mcp` runs up to
/// 16 calls together; a server stops its tools by their calls instead).
const GROUP_SLOTS: usize = 64;

/// The process groups of the plugin tools this process runs, 0 for a free slot: a
/// `forge-lsp call` or `forge-lsp mcp` ended by a signal kills them first
/// ([`kill_running_groups`]). Atomics only, for a signal handler.
static RUNNING_GROUPS: [std::sync::atomic::AtomicI32; GROUP_SLOTS] =
    [const { std::sync::atomic::AtomicI32::new(0) }; GROUP_SLOTS];

/// Records a running tool's group while it lives (not at all when every slot is taken).
struct RunningGroup(Option<usize>);

impl RunningGroup {
    fn set(pid: u32) -> RunningGroup {
        use std::sync::atomic::Ordering::SeqCst;
        let g = i32::try_from(pid).unwrap_or(0);
        RunningGroup(RUNNING_GROUPS.iter().position(|slot| slot.compare_exchange(0, g, SeqCst, SeqCst).is_ok()))
    }
}

impl Drop for RunningGroup {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            RUNNING_GROUPS[i].store(0, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Kills the process groups of the plugin tools this process runs, if any. Only
/// async-signal-safe calls: for a signal handler.
pub fn kill_running_groups() {
    for slot in &RUNNING_GROUPS {
        let g = slot.load(std::sync::atomic::Ordering::SeqCst);
        if g > 0 {
            // SAFETY: kill is async-signal-safe; a negative pid names the tool's own group.
            unsafe { libc::kill(-g, libc::SIGKILL) };
        }
    }
}

/// Ctrl-C, SIGTERM or a closed terminal ends the process as before, and first kills the
/// plugin tools it runs itself with their whole process groups (a tool runs in a group of
/// its own, which the terminal's or a client's signal does not reach): `forge-lsp call`,
/// and `forge-lsp mcp`, which an MCP client ends with SIGTERM (a review found a tool's
/// `sleep` left running, adopted by init).
pub fn on_signal_kill_running_tools() {
    extern "C" fn handler(sig: libc::c_int) {
        kill_running_groups();
        // SAFETY: signal and raise are async-signal-safe: the default action (the
        // process ends by this signal, as it would have) runs next.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only makes async-signal-safe calls; a signal the
        // process was started ignoring (`nohup`, a background job's SIGINT) stays ignored.
        unsafe {
            let before = libc::signal(sig, handler as *const () as libc::sighandler_t);
            if before == libc::SIG_IGN {
                libc::signal(sig, libc::SIG_IGN);
            }
        }
    }
}

/// Runs a plugin tool (blocking; call it off the store thread).
pub fn run(
    tool: &PluginTool,
    env: &ToolEnv,
    input: &Value,
    timeout: Duration,
    cancel: &std::sync::atomic::AtomicBool,
    place: Option<&LoopPlace>,
) -> Result<CommandResult, ToolError> {
    use std::os::unix::process::CommandExt;
    let call_id = ulid::Ulid::new().to_string();
    let label = format!("forge.{}", tool.effective_name(project_trusted(env)));
    let mut cmd = match place {
        Some(p) if p.sandbox => {
            let bwrap = forge_engine::sandbox::find_bwrap()
                .map_err(|e| ToolError::precondition(format!("{label} cannot run in the loop sandbox: {e}")))?;
            let argv = [tool.exe.display().to_string()];
            // The program's `PATH`: the plugin's own variable, else the server's (review XA:
            // the server's was used when the plugin set its own).
            let path = env
                .config
                .plugin_variables
                .get(&tool.plugin)
                .and_then(|vars| vars.get("PATH"))
                .map(std::ffi::OsString::from)
                .or_else(|| std::env::var_os("PATH"))
                .unwrap_or_default();
            let mut sb = forge_engine::sandbox::Sandbox::for_loop(&p.worktree, p.network, None)
                .with_secrets(forge_engine::sandbox::Secrets::from_config(&env.config))
                .with_path_links(&path);
            sb.data_dir = p.data_dir.clone();
            // The plugin's folder, read-only (visible even when it is under /tmp).
            sb.ro_binds.push(tool.plugin_dir.clone());
            sb.std_command(&bwrap, &argv, &p.worktree)
        }
        Some(p) => {
            let mut c = Command::new(&tool.exe);
            c.current_dir(&p.worktree);
            c
        }
        None => {
            let mut c = Command::new(&tool.exe);
            c.current_dir(&env.project.root);
            c
        }
    };
    cmd.env("FORGE_TOOL_NAME", tool.effective_name(project_trusted(env)))
        .env("FORGE_TOOL_CALL_ID", &call_id)
        .env("FORGE_PLUGIN_DIR", &tool.plugin_dir)
        .env("FORGE_SESSION_ID", &env.caller.session_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent. The tool is
    // killed when the thread that started it ends (this one, which waits for it): a
    // `forge-lsp call` interrupted with Ctrl-C does not leave it running on its own.
    unsafe {
        cmd.pre_exec(|| {
            forge_core::limits::restore_in_child();
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    if let Some(vars) = env.config.plugin_variables.get(&tool.plugin) {
        for (k, v) in vars {
            cmd.env(k, v);
        }
    }
    let mut child =
        cmd.spawn().map_err(|e| ToolError::internal(format!("{label}: cannot start {}: {e}", tool.exe.display())))?;
    let pid = child.id();
    let _group = RunningGroup::set(pid);
    let line = format!("{input}\n");
    let stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            let _ = s.write_all(line.as_bytes());
        }
    });
    let out = child.stdout.take().map(Drain::start);
    let err = child.stderr.take().map(Drain::start);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() >= timeout => {
                forge_engine::process::kill_group(pid);
                let _ = child.wait();
                // Stopped: also what left its group (`setsid`), found by the call's id.
                forge_engine::process::kill_marked("FORGE_TOOL_CALL_ID", &call_id);
                break None;
            }
            Ok(None) if cancel.load(std::sync::atomic::Ordering::Acquire) => {
                forge_engine::process::kill_group(pid);
                let _ = child.wait();
                forge_engine::process::kill_marked("FORGE_TOOL_CALL_ID", &call_id);
                return Err(ToolError::internal(format!("{label} was cancelled and killed")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(ToolError::internal(format!("{label}: waiting for the tool failed: {e}"))),
        }
    };
    // The tool's children may hold the pipes open: the group is killed either way. What
    // left it (`setsid`, a daemon such as an sccache server other callers use by now) is
    // killed only when the call was stopped (above).
    forge_engine::process::kill_group(pid);
    let grace = Instant::now() + OUTPUT_GRACE;
    let (stdout, out_cut) = out.map(|d| d.finish(grace)).unwrap_or_default();
    let (stderr, _) = err.map(|d| d.finish(grace)).unwrap_or_default();
    // The writer ends when the tool's end of its input is closed, which an escaped process
    // may hold as well: not waited for.
    drop(writer);
    let Some(status) = status else {
        return Err(ToolError::internal(format!(
            "{label} did not finish within {} ms (plugins.timeoutMs) and was killed",
            timeout.as_millis()
        )));
    };
    if !status.success() {
        let msg = String::from_utf8_lossy(&stderr);
        let tail: String = msg.trim().chars().take(4000).collect();
        let code = status.code().map(|c| format!("exit status {c}")).unwrap_or_else(|| "killed by a signal".into());
        return Err(ToolError::invalid(if tail.is_empty() {
            format!("{label} failed ({code})")
        } else {
            format!("{label} failed ({code}): {tail}")
        }));
    }
    let mut text = String::from_utf8_lossy(&stdout).into_owned();
    let data = match serde_json::from_str::<Value>(text.trim()) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::Null,
    };
    // A cut that ends inside a character (`error_len` none: the input ended early) is not
    // the tool's fault.
    if let Err(e) = std::str::from_utf8(&stdout).map_err(|e| (e, out_cut)).or_else(|(e, cut)| match e.error_len() {
        None if cut => Ok(""),
        _ => Err(e),
    }) {
        text.push_str(&format!(
            "\n[the tool's output is not UTF-8 (the first bad byte at offset {}); bytes that are not were replaced with U+FFFD]",
            e.valid_up_to()
        ));
    }
    if out_cut {
        text.push_str(&format!("\n[output cut at {MAX_OUTPUT} bytes]"));
    }
    Ok(CommandResult { text, data: data.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_make_the_join_ambiguous() {
        for ok in ["kit", "my-kit", "a_b", "Grep2", "x"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "a__b", "my_", "_x", "_", "a b", "a.b", "ü"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    /// An executable tool `name` in `tools` (created) with its sidecar.
    fn write_tool(tools: &Path, name: &str, sidecar: &Value) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(tools).unwrap();
        std::fs::write(tools.join(name), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(tools.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(tools.join(format!("{name}.json")), sidecar.to_string()).unwrap();
    }

    /// The trust of the project's tools is worked out only for a project tool that would
    /// override the called built-in, and at most once.
    #[test]
    fn find_asks_about_trust_only_for_a_project_override() {
        let root = tempfile::tempdir().unwrap();
        let asked = std::cell::Cell::new(0);
        let ask = |answer: bool| {
            let asked = &asked;
            move || {
                asked.set(asked.get() + 1);
                answer
            }
        };
        // No project tool of that name: not asked. (A user's own plugins may override it:
        // only the project's tool is looked at here.)
        assert!(find(root.path(), "forge.plan-read", ask(true)).is_none_or(|t| t.plugin != "project"));
        assert_eq!(asked.get(), 0);
        // A project override of it: asked once, and it decides.
        let tools = root.path().join(".forge/tools");
        std::fs::create_dir_all(&tools).unwrap();
        let sidecar = json!({ "description": "d", "inputSchema": { "type": "object" }, "override": true });
        write_tool(&tools, "plan-read", &sidecar);
        assert!(find(root.path(), "forge.plan-read", ask(false)).is_none_or(|t| t.plugin != "project"));
        assert_eq!(asked.get(), 1);
        assert!(find(root.path(), "forge.plan-read", ask(true)).is_some_and(|t| t.plugin == "project"));
        assert_eq!(asked.get(), 2);
    }

    #[test]
    fn validates_the_subset() {
        let schema = json!({
            "type": "object",
            "properties": {
                "message": { "type": "string", "minLength": 1 },
                "count": { "type": "integer", "minimum": 0 },
                "mode": { "enum": ["a", "b"] },
                "tags": { "type": "array", "items": { "type": "string" } }
            },
            "required": ["message"],
            "additionalProperties": false
        });
        let cases: &[(Value, Option<&str>)] = &[
            (json!({ "message": "hi" }), None),
            (json!({ "message": "hi", "count": 2, "mode": "a", "tags": ["x"] }), None),
            (json!({}), Some("missing required field `message`")),
            (json!({ "message": "" }), Some("`message` has a length")),
            (json!({ "message": 3 }), Some("`message` must be string")),
            (json!({ "message": "x", "count": -1 }), Some("`count` is outside")),
            (json!({ "message": "x", "count": 1.5 }), Some("`count` must be integer")),
            (json!({ "message": "x", "mode": "c" }), Some("`mode` must be one of")),
            (json!({ "message": "x", "tags": [1] }), Some("`tags[0]` must be string")),
            (json!({ "message": "x", "bogus": 1 }), Some("unknown field `bogus`")),
            (json!([1]), Some("the input must be object")),
        ];
        for (v, want) in cases {
            match (validate(&schema, v, ""), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{v}: {e}"),
                (r, w) => panic!("{v}: got {r:?}, wanted {w:?}"),
            }
        }
    }

    /// The keywords zod and hand-written schemas use beyond the basic ones: each one's
    /// failure is caught (they were ignored, and the input reached the tool).
    #[test]
    fn validates_what_generated_schemas_use() {
        let schema = json!({
            "type": "object",
            "$defs": { "id": { "type": "string", "pattern": "^[a-z]+$" } },
            "properties": {
                "n": { "type": "integer", "exclusiveMinimum": 0, "multipleOf": 2 },
                "id": { "$ref": "#/$defs/id" },
                "mode": { "anyOf": [{ "const": "a" }, { "const": "b" }] },
                "one": { "oneOf": [{ "type": "string" }, { "type": "integer" }] },
                "not5": { "not": { "const": 5 } },
                "set": { "type": "array", "uniqueItems": true, "prefixItems": [{ "type": "string" }], "items": { "type": "integer" } },
                "old": { "type": "number", "minimum": 0, "exclusiveMinimum": true },
                "tags": { "type": "object", "patternProperties": { "^x-": { "type": "string" } }, "additionalProperties": false },
                "both": { "type": "object", "dependentRequired": { "a": ["b"] } },
                "kind": { "type": "string", "format": "uri" }
            },
            "additionalProperties": false,
            "if": { "required": ["kind"] },
            "then": { "required": ["id"] }
        });
        let cases: &[(Value, Option<&str>)] = &[
            (json!({ "n": 2, "id": "abc", "mode": "b", "one": 3, "not5": 4, "set": ["s", 1, 2] }), None),
            (json!({ "n": 4.0 }), None),
            (json!({ "n": 0 }), Some("`n` is outside")),
            (json!({ "n": 3 }), Some("`n` must be a multiple of 2")),
            (json!({ "id": "../../etc" }), Some("`id` must match the pattern")),
            (json!({ "mode": "zzz" }), Some("`mode` must be")),
            (json!({ "one": true }), Some("exactly one")),
            (json!({ "not5": 5 }), Some("`not5` is of a form that is not allowed")),
            (json!({ "set": ["s", 1, 1] }), Some("must not repeat")),
            (json!({ "set": [1] }), Some("`set[0]` must be string")),
            (json!({ "set": ["s", "t"] }), Some("`set[1]` must be integer")),
            (json!({ "old": 0 }), Some("`old` is outside")),
            (json!({ "tags": { "x-a": "ok" } }), None),
            (json!({ "tags": { "x-a": 1 } }), Some("`tags.x-a` must be string")),
            (json!({ "tags": { "y": "no" } }), Some("unknown field `tags.y`")),
            (json!({ "both": { "a": 1 } }), Some("missing field `both.b`, required with `both.a`")),
            (json!({ "kind": "not a uri" }), Some("missing required field `id`")),
            (json!({ "kind": "x", "id": "ok" }), None),
        ];
        for (v, want) in cases {
            match (validate(&schema, v, ""), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{v}: {e}"),
                (r, w) => panic!("{v}: got {r:?}, wanted {w:?}"),
            }
        }
        // A recursive union told apart by a discriminator: linear in the input (the
        // discriminator is checked before the nested value), however deep.
        let union = json!({ "anyOf": [
            { "type": "object", "properties": { "a": { "$ref": "#" }, "kind": { "const": "x" } } },
            { "type": "object", "properties": { "a": { "$ref": "#" }, "kind": { "const": "y" } } }
        ] });
        let mut deep = json!({ "kind": "y" });
        for _ in 0..40 {
            deep = json!({ "a": deep, "kind": "y" });
        }
        assert_eq!(validate(&union, &deep, ""), Ok(()));
        // Without one, every branch is tried at every level: the budget ends it, quickly.
        let blind = json!({ "anyOf": [
            { "type": "object", "properties": { "a": { "$ref": "#" }, "b": { "const": 1 } } },
            { "type": "object", "properties": { "a": { "$ref": "#" }, "b": { "const": 2 } } }
        ] });
        let mut deep = json!({ "b": { "n": 3 } });
        for _ in 0..40 {
            deep = json!({ "a": deep, "b": { "n": 3 } });
        }
        let started = std::time::Instant::now();
        let e = validate(&blind, &deep, "").unwrap_err();
        assert!(e.contains("too costly") || e.contains("must be"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
        // A schema that refers to itself for ever is an error, not a stack overflow, even
        // from a thread with little stack (a runtime worker's overflowed and took the server
        // down); so is a chain of references as deep as the limit.
        let endless = json!({ "$ref": "#" });
        let mut defs = serde_json::Map::new();
        for i in 0..300 {
            defs.insert(format!("d{i}"), json!({ "$ref": format!("#/$defs/d{}", i + 1) }));
        }
        defs.insert("d300".into(), json!({ "type": "object" }));
        let chain = json!({ "$ref": "#/$defs/d0", "$defs": defs });
        let small = std::thread::Builder::new().stack_size(256 << 10);
        let (e1, e2) = small
            .spawn(move || (validate(&endless, &json!({}), ""), validate(&chain, &json!({}), "")))
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert!(e1.unwrap_err().contains("nests deeper"));
        assert!(e2.unwrap_err().contains("nests deeper"));
        assert!(validate(&json!(false), &json!(1), "").is_err());
    }

    /// A pattern (and a `patternProperties` key) is compiled once per validation (it was
    /// compiled for every string: 150,000 strings took 100 s), and `uniqueItems` hashes its
    /// items (it compared every pair: quadratic, outside the budget).
    #[test]
    fn large_inputs_cost_what_the_budget_allows() {
        let schema = json!({ "type": "array", "items": { "type": "string", "pattern": "^[a-z0-9]{1,64}@x$" } });
        let input = Value::Array((0..100_000).map(|i| json!(format!("u{i}@x"))).collect());
        let started = std::time::Instant::now();
        assert_eq!(validate(&schema, &input, ""), Ok(()));
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
        let unique = json!({ "type": "array", "uniqueItems": true });
        let input = Value::Array((0..100_000).map(|i| json!([i, { "k": i }])).collect());
        let started = std::time::Instant::now();
        assert_eq!(validate(&unique, &input, ""), Ok(()));
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
        // Repeats as `same` sees them: numbers by value, objects whatever their keys' order.
        for repeated in [
            json!([1, 2, 1.0]),
            json!([0, -0.0]),
            json!([{ "a": 1, "b": [2] }, { "b": [2.0], "a": 1 }]),
            json!(["x", "y", "x"]),
        ] {
            assert!(validate(&unique, &repeated, "").unwrap_err().contains("must not repeat"), "{repeated}");
        }
        assert_eq!(validate(&unique, &json!([1, "1", [1], { "1": 1 }, null, false]), ""), Ok(()));
        // patternProperties keys: compiled once too (95,000 objects took 21 s).
        let pp = json!({ "type": "array", "items": { "type": "object", "patternProperties": { "^k[0-9]+$": { "type": "integer" } } } });
        let input = Value::Array((0..50_000).map(|i| json!({ format!("k{i}"): i })).collect());
        let started = std::time::Instant::now();
        assert_eq!(validate(&pp, &input, ""), Ok(()));
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    }

    /// A tool whose offer name agents' providers would refuse after the CLI's prefix is not
    /// offered (nor, so, an MCP tool); one of the longest name that fits is. A call by its
    /// name still finds it.
    #[test]
    fn a_schema_keyword_of_the_wrong_type_is_named() {
        let ok = [
            json!({ "type": "object", "properties": { "a": { "type": ["string", "null"], "minLength": 1 } }, "required": ["a"] }),
            json!({ "items": [{ "type": "string" }, true], "exclusiveMinimum": true, "anyOf": [{ "$ref": "#" }], "x-note": 1 }),
            json!({ "$defs": { "n": { "enum": [1, 2] } }, "dependentRequired": { "a": ["b"] }, "not": false }),
        ];
        for s in &ok {
            assert_eq!(schema_problem(s, "inputSchema", 0), None, "{s}");
        }
        let bad = [
            (json!({ "required": "a" }), "inputSchema.required must be an array of property names"),
            (json!({ "properties": [] }), "inputSchema.properties must be an object of schemas"),
            (
                json!({ "properties": { "a": { "minLength": -1 } } }),
                "inputSchema.properties.a.minLength must be a non-negative integer",
            ),
            (
                json!({ "anyOf": [{}, { "type": 3 }] }),
                "inputSchema.anyOf[1].type must be a type name or an array of them",
            ),
            (json!({ "items": 3 }), "inputSchema.items must be a schema (an object or a boolean)"),
            (json!({ "pattern": 1 }), "inputSchema.pattern must be a string"),
            (
                json!({ "properties": { "a": { "type": "strin" } } }),
                "inputSchema.properties.a.type names \"strin\", which is not a JSON Schema type (null, boolean, object, array, number, string, integer)",
            ),
        ];
        for (s, want) in &bad {
            assert_eq!(schema_problem(s, "inputSchema", 0).as_deref(), Some(*want), "{s}");
        }
        // Values a provider would refuse, and a reference the check could not follow.
        let p = schema_problem(&json!({ "properties": { "a": { "pattern": "((" } } }), "inputSchema", 0);
        assert!(
            p.as_deref().is_some_and(
                |p| p.starts_with("inputSchema.properties.a.pattern is not a pattern the input check can match")
            ),
            "{p:?}"
        );
        let p = schema_problem(&json!({ "patternProperties": { "[": {} } }), "inputSchema", 0);
        assert!(p.as_deref().is_some_and(|p| p.contains("not a pattern the input check can match")), "{p:?}");
        let s = json!({ "properties": { "a": { "$ref": "#/$defs/nope" }, "b": { "enum": [{ "$ref": "x" }] } } });
        assert_eq!(
            dangling_ref(&s, &s, "inputSchema", 0).as_deref(),
            Some("inputSchema.properties.a.$ref \"#/$defs/nope\" points nowhere in the schema the input check follows (a reference is `#` or a JSON pointer into the schema, such as \"#/$defs/name\"; anchors and other documents are not followed)")
        );
        // `&` is part of a fragment; an extension keyword holds data, not a schema.
        let s = json!({ "$defs": { "a&b": { "type": "string" } }, "properties": { "x": { "$ref": "#/$defs/a&b" } }, "x-doc": { "$ref": "see-docs" } });
        assert_eq!(dangling_ref(&s, &s, "inputSchema", 0), None);
        let s = json!({ "$defs": { "n": { "type": "integer" } }, "properties": { "a": { "$ref": "#/$defs/n" }, "b": { "$ref": "#" } } });
        assert_eq!(dangling_ref(&s, &s, "inputSchema", 0), None);
        // A tool with such a schema is not offered.
        let root = tempfile::tempdir().unwrap();
        let tools = root.path().join(".forge/tools");
        write_tool(&tools, "Bad", &json!({ "description": "d", "inputSchema": { "type": "object", "required": "a" } }));
        write_tool(
            &tools,
            "Good",
            &json!({ "description": "d", "inputSchema": { "type": "object", "required": ["a"] } }),
        );
        let offered: Vec<String> =
            offers(root.path(), true).into_iter().map(|o| o.name).filter(|n| n.starts_with("project__")).collect();
        assert_eq!(offered, ["project__Good"]);
    }

    #[test]
    fn offer_names_longer_than_agents_take_are_not_offered() {
        let root = tempfile::tempdir().unwrap();
        let tools = root.path().join(".forge/tools");
        std::fs::create_dir_all(&tools).unwrap();
        let fits = "f".repeat(MAX_OFFER_NAME - "project__".len());
        let over = "o".repeat(MAX_OFFER_NAME - "project__".len() + 1);
        for n in [&fits, &over] {
            write_tool(&tools, n, &json!({ "description": "d", "inputSchema": { "type": "object" } }));
        }
        let offered: Vec<String> =
            offers(root.path(), true).into_iter().map(|o| o.name).filter(|n| n.starts_with("project__")).collect();
        assert_eq!(offered, [format!("project__{fits}")]);
        assert_eq!(offered[0].len() + "mcp__forge__".len(), 64);
        assert!(find(root.path(), &format!("forge.project__{over}"), || true).is_some());
    }

    #[test]
    fn names() {
        assert!(valid_name("KitPing") && valid_name("kit-ping_2"));
        assert!(!valid_name("a__b") && !valid_name("a b") && !valid_name("") && !valid_name("x.sh"));
    }
}
