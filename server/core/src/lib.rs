//! The lowest server layer: what every other layer needs to know about the world it runs
//! in, and nothing about how it is stored, run or served.
//!
//! Owns: the project and its identity ([`project`]), the data directory's location, the
//! configuration files and keys ([`config`]), who is calling ([`caller`]), the clock and
//! fresh session ids, and the place of the private sockets ([`paths`]).
//! May not know: SQLite, git worktrees, agent processes, tools or any protocol front end
//! (LSP, MCP, CLI). Everything here is a plain value or a plain function.

pub mod beneath;
pub mod caller;
pub mod config;
pub mod limits;
pub mod paths;
pub mod project;

pub use caller::{Caller, Links, LoopBinding, ToolEnv};

/// Current time in epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A fresh session id `ses_<ULID>`.
pub fn fresh_session() -> String {
    format!("ses_{}", ulid::Ulid::new())
}
