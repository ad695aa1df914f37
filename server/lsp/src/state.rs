//! Plain state types a connection carries for its publishers: the findings publisher's
//! queue items and record ([`Work`], [`Published`]) and the loops' progress tokens
//! ([`ProgressState`]). A leaf: it imports no other module of this crate.

use std::collections::{HashMap, HashSet};

/// Work for the publisher.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Work {
    /// Everything (after `initialized`).
    All,
    /// The findings whose `file` is this string.
    File(String),
    /// Every file of a loop's findings (its status changed).
    Loop(String),
}

/// What this connection has published: file string → URIs, URI → file strings.
#[derive(Default)]
pub struct Published {
    pub(crate) file_uris: HashMap<String, HashSet<String>>,
    pub(crate) uri_files: HashMap<String, HashSet<String>>,
}

/// Per-connection progress state: loop → (token, ended).
#[derive(Default)]
pub struct ProgressState {
    pub(crate) tokens: HashMap<String, String>,
    /// Loops whose end was already shown (by completion time).
    pub(crate) shown: HashMap<String, i64>,
}

impl ProgressState {
    /// The loop a progress token belongs to.
    pub fn loop_of(&self, token: &str) -> Option<String> {
        self.tokens.iter().find(|(_, t)| t.as_str() == token).map(|(l, _)| l.clone())
    }
}
