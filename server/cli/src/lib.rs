//! forge-lsp: the durable backend of an AI-agent coding workflow, served over the
//! Language Server Protocol (see `docs/protocol.md` and `docs/architecture.md`).
//!
//! This package is the top floor: the `forge-lsp` binary (`main.rs`: `serve`, `call`,
//! `cleanup`) and the command-line front ends in [`cli`]. The layers below it are crates
//! of their own, lowest first: `forge-core`, `forge-store`, `forge-engine`, `forge-tools`,
//! `forge-lsp-server`; they are re-exported here under their short names for the
//! integration tests and the benchmark.

pub mod cli;

pub use forge_core as core;
pub use forge_core::{config, project};
pub use forge_engine as engine;
pub use forge_engine::hub;
pub use forge_lsp_server as lsp;
pub use forge_lsp_server::serve;
pub use forge_store as store;
pub use forge_tools as tools;
pub use forge_tools::identity;
