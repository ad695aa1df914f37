//! Plain state types a connection carries for its publishers: the findings publisher's
//! queue items and record ([`Work`], [`Published`]) and the loops' progress tokens
//! ([`ProgressState`]) and the index copy's counts ([`IndexCounts`]). A leaf: it imports no
//! other module of this crate.

use std::collections::{BTreeMap, HashMap, HashSet};

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

/// The diagnostics publisher's work not yet taken: a set, so a file written a thousand times while a
/// publication is under way (or while the client does not read) is one entry, and
/// [`Work::All`] stands for everything else. Bounded by the project's distinct file
/// strings and loops, whatever the rate of writes.
#[derive(Default)]
pub struct Queue {
    pending: std::sync::Mutex<HashSet<Work>>,
    pub(crate) wake: tokio::sync::Notify,
}

impl Queue {
    /// Adds work and wakes the publisher.
    pub fn push(&self, w: Work) {
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.contains(&Work::All) {
                return;
            }
            if w == Work::All {
                p.clear();
            }
            p.insert(w);
        }
        self.wake.notify_one();
    }

    pub(crate) fn take(&self) -> HashSet<Work> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn has_all(&self) -> bool {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).contains(&Work::All)
    }
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
    /// Tokens whose `window/workDoneProgress/create` the client refused or did not answer:
    /// no `$/progress` is sent on them (LSP: a token is used only once created).
    pub(crate) refused: std::collections::HashSet<String>,
    /// Loops whose end was already shown (by completion time).
    pub(crate) shown: HashMap<String, i64>,
    /// Tokens the client was asked to create and has not answered for yet: nothing is sent
    /// on them, and the latest news of their loop waits here for the answer.
    pub(crate) pending: HashMap<String, PendingProgress>,
    /// Tokens made on this connection: the last part of each, so that a loop restarted
    /// with the same start time never gets a token used before.
    pub(crate) made: u64,
}

/// What happened to a loop while its progress token was being created.
#[derive(Debug, Clone)]
pub(crate) struct PendingProgress {
    /// The latest `begin`/`report` message and percentage.
    pub(crate) message: String,
    pub(crate) percentage: i64,
    /// The `end` message, once the loop stopped running.
    pub(crate) end: Option<String>,
}

impl ProgressState {
    /// The loop a progress token belongs to.
    pub fn loop_of(&self, token: &str) -> Option<String> {
        self.tokens.iter().find(|(_, t)| t.as_str() == token).map(|(l, _)| l.clone())
    }
}

/// The open-finding counts of a connection's index copy, kept between rewrites so a
/// rewrite re-counts only the files whose findings changed (`counts_per_file` over a large store costs tens of milliseconds).
#[derive(Default)]
pub struct IndexCounts {
    pub(crate) counts: Option<BTreeMap<String, (i64, i64)>>,
    pub(crate) dirty: HashSet<String>,
    pub(crate) all: bool,
}

/// What one rewrite starts from (taken out of the connection's [`IndexCounts`]).
pub struct CountsWork {
    pub(crate) counts: Option<BTreeMap<String, (i64, i64)>>,
    pub(crate) dirty: Vec<String>,
}

impl IndexCounts {
    /// The findings of `file` changed.
    pub fn file_changed(&mut self, file: &str) {
        self.dirty.insert(file.to_string());
    }
    /// Anything may have changed (a loop's status decides which findings are open).
    pub fn all_changed(&mut self) {
        self.all = true;
    }
    /// Takes the work of one rewrite; changes noted meanwhile wait for the next.
    pub fn take(&mut self) -> CountsWork {
        let dirty = std::mem::take(&mut self.dirty).into_iter().collect();
        let counts = if std::mem::take(&mut self.all) { None } else { self.counts.take() };
        CountsWork { counts, dirty }
    }
    /// Puts back the counts a rewrite computed.
    pub fn put(&mut self, counts: BTreeMap<String, (i64, i64)>) {
        self.counts = Some(counts);
    }
}
