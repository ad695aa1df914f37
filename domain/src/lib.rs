//! The pure domain of forge-lsp.
//!
//! Everything here is a plain function over plain data: no SQLite, no git, no processes,
//! no LSP. The server calls these at its edges. The compiler enforces the rule: this
//! crate depends on no I/O library.

pub mod agent_cli;
pub mod agent_output;
pub mod diagnostics;
pub mod ecma_regex;
pub mod handoff;
pub mod history;
pub mod html;
pub mod interview;
pub mod loop_machine;
pub mod loop_permissions;
pub mod loop_status;
pub mod naming;
pub mod patch;
pub mod path;
pub mod permissions;
pub mod plan;
pub mod prompts;
pub mod review;
pub mod text;
pub mod usage;
