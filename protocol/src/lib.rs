//! The Forge protocol (v1) as Rust types: command names, tool inputs and outputs,
//! notifications, virtual-document URIs and error codes.
//!
//! This crate does no I/O. The server, the `forge-lsp call` client and the tests all
//! use these types, so a change to the contract is a change here (and in
//! `docs/protocol.md`), in one commit. See `../shared/PROTOCOL.md`.

pub mod data;
pub mod errors;
pub mod framing;
pub mod inputs;
pub mod json;
pub mod notifications;
pub mod uri;

pub use data::Data;
pub use errors::{ErrorKind, ToolError};

/// Protocol version announced in `experimental.forge.protocolVersion`.
pub const PROTOCOL_VERSION: u32 = 1;

/// Prefix of every command: tool `plan-read` is command `forge.plan-read`.
pub const COMMAND_PREFIX: &str = "forge.";

/// The command name of a tool.
pub fn command_name(tool: &str) -> String {
    format!("{COMMAND_PREFIX}{tool}")
}

/// The client capability (a JSON pointer into `initialize`'s params) by which a client
/// that only runs tools (`forge-lsp call`, `forge-lsp mcp`) asks to be sent no findings
/// diagnostics and no announcements of changes (docs/protocol.md, "Initialization"): a
/// boolean, default false.
pub const TOOLS_ONLY_CAPABILITY: &str = "/capabilities/experimental/forge/toolsOnly";

/// The agents a connection may declare in `initializationOptions.forge.agent`.
pub const AGENTS: &[&str] = &["user", "architect", "code", "auditor", "auditor-loop", "minion"];

/// A successful command result: `{ text, data }`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommandResult {
    /// The tool's textual output, as an agent reads it.
    pub text: String,
    /// The same result as structured JSON (a `Value`, or JSON built straight from typed
    /// rows: [`Data`]).
    pub data: Data,
}

impl CommandResult {
    /// Appends the result's JSON, the same bytes as `serde_json::to_writer` gives, with the
    /// text escaped eight bytes at a time ([`json::push_string`]) and serialized data
    /// copied as it is.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"text\":");
        json::push_string(out, &self.text);
        out.extend_from_slice(b",\"data\":");
        self.data.write_json(out);
        out.push(b'}');
    }
}

/// One entry of `forge.tools`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOffer {
    pub name: String,
    pub command: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

/// `initializationOptions.forge`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitOptions {
    pub agent: Option<String>,
    pub session: Option<String>,
    pub token: Option<String>,
    pub data_dir: Option<String>,
    pub config: Option<serde_json::Value>,
}
