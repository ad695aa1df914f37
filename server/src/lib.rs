//! forge-lsp: the durable backend of an AI-agent coding workflow, served over the
//! Language Server Protocol. See `../shared/PROTOCOL.md` and `docs/`.
//!
//! Layout: `tools/` (one file per tool; the registry is derived by `build.rs`),
//! `store/` (SQLite, migrations, repositories, change feed), `lsp/` (the server),
//! `hub` (state shared by a process's connections), `cli/` (`forge-lsp call`),
//! `config`, `project`, `identity`. The pure domain lives in the `forge-domain` crate and
//! the protocol types in `forge-protocol`.

pub mod cli;
pub mod config;
pub mod engine;
pub mod findings_index;
pub mod hub;
pub mod identity;
pub mod loop_permissions;
pub mod loop_scope;
pub mod lsp;
pub mod plan_ops;
pub mod project;
pub mod serve;
pub mod store;
pub mod tools;
