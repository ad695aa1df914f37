//! Command-line clients of the server.

pub mod call;
pub mod cleanup;
pub mod demo;
pub mod demo_agent;
