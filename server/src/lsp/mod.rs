//! The language server: connections, handlers and the protocol extensions.
//!
//! Layout (after ruff's `ruff_server`): `server.rs` implements the framework's trait by
//! delegating every method to one free function in `requests/` or `notifications/`, one
//! file per method; `conn.rs` is the per-connection state; `ext.rs` declares the Forge
//! protocol extensions; `documents.rs` renders the `forge:` virtual documents;
//! `transport.rs` is the validating framing layer.

pub mod conn;
pub mod diagnostics;
pub mod documents;
pub mod ext;
pub mod loops;
pub mod notifications;
pub mod plan_features;
pub mod requests;
pub mod server;
pub mod transport;
