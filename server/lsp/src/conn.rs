//! One client connection: who it is (agent, session, project), what it supports, the
//! documents it has open, and the channels its publishers read. What it announces lives
//! in `announce.rs`; this module only holds the state and sends to the client.
//!
//! Requests to the client (refresh) are never awaited inside a handler: they are spawned
//! with a timeout.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use forge_domain::diagnostics::PositionEncoding;
use forge_protocol::uri::ForgeUri;
use tower_lsp_server::gen_lsp_types::Uri;
use tower_lsp_server::Client;

use crate::state::{ProgressState, Published, Work};
use forge_engine::hub::Workspace;
use forge_tools::ToolEnv;

/// Timeout for requests we send to the client.
pub const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Our requests to the client whose answer is overdue. The framework keeps a request's
/// entry until the answer comes, so each one a client never answers stayed for the life of
/// the connection. A caller waits at most [`CLIENT_REQUEST_TIMEOUT`] for an answer; the
/// request is then kept waiting for it in the background (until the connection closes), and
/// counts as overdue. While [`MAX_UNANSWERED`] are overdue, the connection is sent no more
/// requests (refreshes, progress creations); every late answer, an error included, makes
/// room again. Requests in flight that are not overdue are not limited: a burst of
/// refreshes (one per document of a loop) goes out whole.
#[derive(Debug, Default)]
pub struct Silence(Arc<std::sync::atomic::AtomicU32>);

/// Overdue requests to a client before it is sent no more.
pub const MAX_UNANSWERED: u32 = 8;

impl Silence {
    /// Sends the request `make` builds, unless [`MAX_UNANSWERED`] are overdue; the answer if
    /// it comes within [`CLIENT_REQUEST_TIMEOUT`], else `None`. `closed` is the connection's
    /// watch ([`Conn::alive`]): a request still waiting when it closes is given up.
    pub async fn ask<T, F, Fut>(
        &self,
        closed: tokio::sync::watch::Receiver<()>,
        make: F,
    ) -> Option<tower_lsp_server::jsonrpc::Result<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = tower_lsp_server::jsonrpc::Result<T>> + Send,
    {
        use std::sync::atomic::Ordering::SeqCst;
        if self.0.load(SeqCst) >= MAX_UNANSWERED {
            tracing::debug!("{MAX_UNANSWERED} requests to the client are overdue: this one is not sent");
            return None;
        }
        let overdue = self.0.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut closed = closed;
            let request = make();
            tokio::pin!(request);
            let deadline = tokio::time::sleep(CLIENT_REQUEST_TIMEOUT);
            tokio::pin!(deadline);
            let mut late = false;
            let answer = loop {
                tokio::select! {
                    a = &mut request => break Some(a),
                    _ = &mut deadline, if !late => {
                        late = true;
                        if overdue.fetch_add(1, SeqCst) + 1 == MAX_UNANSWERED {
                            tracing::warn!("{MAX_UNANSWERED} requests to the client are overdue; it is sent no more until it answers");
                        }
                    }
                    gone = closed.changed() => if gone.is_err() { break None },
                }
            };
            if late {
                overdue.fetch_sub(1, SeqCst);
            }
            if let Some(a) = answer {
                let _ = tx.send(a);
            }
        });
        tokio::time::timeout(CLIENT_REQUEST_TIMEOUT, rx).await.ok().and_then(Result::ok)
    }
}

/// What the client declared it supports.
#[derive(Debug, Clone, Copy)]
pub struct ClientCaps {
    pub encoding: PositionEncoding,
    /// `workspace.textDocumentContent` declared: virtual documents and their refresh.
    pub text_document_content: bool,
    pub work_done_progress: bool,
    /// `workspace.codeLens.refreshSupport` declared: lenses are refreshed when plans or
    /// loops change.
    pub code_lens_refresh: bool,
    /// Materialize read-only copies under `<project>/.forge/view/`.
    pub materialize: bool,
    /// `experimental.forge.toolsOnly` declared: the client only runs tools (`forge-lsp
    /// call`, `forge-lsp mcp`), so the connection is sent no diagnostics and no
    /// announcements of changes (docs/protocol.md, "Initialization").
    pub tools_only: bool,
    /// `textDocument.codeAction.codeActionLiteralSupport` declared: code actions may be
    /// `CodeAction` literals; otherwise only `Command`s (LSP 3.17).
    pub code_action_literals: bool,
    /// `textDocument.documentSymbol.hierarchicalDocumentSymbolSupport` declared: symbols
    /// may be `DocumentSymbol`s; otherwise `SymbolInformation`s (LSP 3.17).
    pub hierarchical_symbols: bool,
}

/// Digests of a copy's texts: (last written, being written now).
type CopyTexts = (Option<u64>, Option<u64>);

/// An open document (full sync).
#[derive(Debug, Clone)]
pub struct OpenDoc {
    pub version: i32,
    pub text: String,
    /// For a buffer of a `.forge/view` copy: the digest of the copy this connection wrote
    /// that the buffer last held (when opened, or reloaded after a rewrite), the version
    /// of the document its edits start from; `None` when it never held one.
    pub base: Option<u64>,
}

pub struct Conn {
    pub id: u64,
    pub client: Client,
    /// Frames built as bytes go out here (diagnostics).
    pub outbox: crate::transport::Outbox,
    pub ws: Arc<Workspace>,
    env: RwLock<Arc<ToolEnv>>,
    pub caps: ClientCaps,
    pub docs: Mutex<HashMap<String, OpenDoc>>,
    /// Plan documents this client has seen (opened or fetched): their structure warnings
    /// are published as diagnostics and kept current.
    known_plans: Mutex<HashSet<String>>,
    /// Warnings of the config files, shown once after `initialized`.
    pub config_warnings: Mutex<Vec<String>>,
    /// How the client spells the folder it opened, when not as the server does.
    pub spelling: crate::uri::Spelling,
    /// Things to tell the user once after `initialized` (window/showMessage, Info).
    pub notices: Mutex<Vec<String>>,
    /// Configuration warnings already shown to this client (each is shown once, whatever
    /// layer reloads it: PROTOCOL.md §9).
    config_shown: Mutex<HashSet<String>>,
    /// Plan documents' warnings as last asked for: URI → digest of the text.
    warned: Mutex<HashMap<String, u64>>,
    /// Plan documents' warnings as last published: URI → digest of the text.
    warnings_published: Mutex<HashMap<String, u64>>,
    /// The URIs whose plan warnings were last published empty.
    published_empty: Mutex<HashSet<String>>,
    /// Held while plan warnings are sent: a send checks, then records and sends, in turn.
    warnings_turn: tokio::sync::Mutex<()>,
    /// Read-only copies this connection wrote: path → digest of the text written.
    views: Mutex<HashMap<PathBuf, u64>>,
    /// What the buffers of copies may start from ([`Conn::note_copy_base`]): path → the
    /// digests of the text this connection last wrote there and of the text it is writing
    /// now. Unlike `views`, not what it handled: a refused save is no text of the copy.
    views_written: Mutex<HashMap<PathBuf, CopyTexts>>,
    /// A rewrite of the index copy is scheduled (`announce::materialize_index_soon`).
    pub index_pending: std::sync::atomic::AtomicBool,
    /// Held while a view copy is rendered and written (`announce::materialize`):
    /// two of them for one document (the first materialization at `initialized` and the
    /// announcement of a write just after) could otherwise finish in the other order, the
    /// older render (no plan yet: remove the copy) last.
    pub materializing: tokio::sync::Mutex<()>,
    /// Held across one loop announcement (`loops::announce`) and across the
    /// `begin` of a progress whose token was just created: the replay after `initialized`,
    /// the live changes and the progress sends take turns, so a replay never announces a
    /// state older than one already announced, and nothing is sent on a token before its
    /// `begin` or after its `end`.
    pub announcing: tokio::sync::Mutex<()>,
    /// The index copy's open-finding counts, updated per changed file.
    pub index_counts: Mutex<crate::state::IndexCounts>,
    /// URIs waiting for a coalesced refresh.
    refresh_pending: Arc<Mutex<HashSet<String>>>,
    /// Our requests the client left unanswered in a row.
    pub silence: Arc<Silence>,
    /// One computation over a whole plan at a time (`requests::off_task`).
    pub plan_work: Arc<tokio::sync::Semaphore>,
    /// `initializationOptions.forge.config`, kept so later settings merge over it.
    pub init_config: Mutex<Option<serde_json::Value>>,
    /// Dropped with the connection: its tasks (change-feed subscription) watch it.
    alive: tokio::sync::watch::Sender<()>,
    /// The findings-diagnostics publisher.
    pub diagnostics: std::sync::OnceLock<Arc<crate::state::Queue>>,
    pub published: Mutex<Published>,
    /// Work-done progress of loops on this connection.
    pub progress: Mutex<ProgressState>,
}

impl Conn {
    pub fn new(
        id: u64,
        client: Client,
        outbox: crate::transport::Outbox,
        ws: Arc<Workspace>,
        env: ToolEnv,
        caps: ClientCaps,
        spelling: crate::uri::Spelling,
    ) -> Arc<Conn> {
        let (alive, _) = tokio::sync::watch::channel(());
        Arc::new(Conn {
            id,
            client,
            outbox,
            ws,
            env: RwLock::new(Arc::new(env)),
            caps,
            docs: Mutex::new(HashMap::new()),
            known_plans: Mutex::new(HashSet::new()),
            config_warnings: Mutex::new(vec![]),
            notices: Mutex::new(vec![]),
            spelling,
            config_shown: Mutex::new(HashSet::new()),
            init_config: Mutex::new(None),
            refresh_pending: Arc::new(Mutex::new(HashSet::new())),
            silence: Arc::default(),
            plan_work: Arc::new(tokio::sync::Semaphore::new(1)),
            warned: Mutex::new(HashMap::new()),
            warnings_published: Mutex::new(HashMap::new()),
            published_empty: Mutex::new(HashSet::new()),
            warnings_turn: tokio::sync::Mutex::new(()),
            views: Mutex::new(HashMap::new()),
            views_written: Mutex::new(HashMap::new()),
            index_pending: std::sync::atomic::AtomicBool::new(false),
            materializing: tokio::sync::Mutex::new(()),
            announcing: tokio::sync::Mutex::new(()),
            index_counts: Mutex::new(Default::default()),
            alive,
            diagnostics: std::sync::OnceLock::new(),
            published: Mutex::new(Published::default()),
            progress: Mutex::new(Default::default()),
        })
    }

    /// Changes (closes) when the connection is dropped.
    pub fn alive(&self) -> tokio::sync::watch::Receiver<()> {
        self.alive.subscribe()
    }

    /// The `forge:` document a client URI names (`forge://...` or a `.forge/view/` copy).
    pub fn document(&self, uri: &str) -> Option<ForgeUri> {
        crate::uri::forge_document(&self.env().project.root, &self.spelling.to_server(uri.to_string()))
    }

    /// A URI from the client in the server's spelling (the one documents are keyed by).
    pub fn from_client(&self, uri: String) -> String {
        self.spelling.to_server(uri)
    }

    /// Plan documents this client has seen.
    pub fn known_plans(&self) -> Vec<String> {
        self.known_plans.lock().map(|k| k.iter().cloned().collect()).unwrap_or_default()
    }

    /// Records `digest` under `key`; true when it was recorded there already (a thing told
    /// once per connection).
    pub fn warned(&self, key: &str, digest: u64) -> bool {
        self.warned.lock().map(|mut w| w.insert(key.to_string(), digest) == Some(digest)).unwrap_or(false)
    }

    /// Records that the warnings of the text with digest `digest` are asked for on `uri`
    /// (an older text's are then not sent); true when they were published for this very
    /// text already. Published, not only asked: of two asks for one text, the first can be
    /// dropped as outdated while an edit in between is the newest, and the second then found
    /// it asked and sent nothing, leaving the client the edit's warnings (a CI run).
    pub fn ask_warnings(&self, uri: &str, digest: u64) -> bool {
        self.warned(uri, digest);
        self.warnings_published.lock().is_ok_and(|p| p.get(uri) == Some(&digest))
    }

    /// Records the text just written to the read-only copy at `path`.
    pub fn wrote_view(&self, path: &std::path::Path, text: Option<&str>) {
        if let Ok(mut v) = self.views.lock() {
            match text {
                Some(t) => v.insert(path.to_path_buf(), digest(t)),
                None => v.remove(path),
            };
        }
        if let Ok(mut w) = self.views_written.lock() {
            let entry = w.entry(path.to_path_buf()).or_default();
            entry.0 = text.map(digest);
            if *entry == (None, None) {
                w.remove(path);
            }
        }
    }

    /// The `.forge/view` copy a file URI names, if it names one.
    pub fn copy_path(&self, uri: &str) -> Option<PathBuf> {
        if ForgeUri::parse(uri).is_some() {
            return None;
        }
        self.document(uri).map(|d| self.view_path(&d))
    }

    /// Records that the open buffer at `uri` (a copy's) holds the copy this connection last
    /// wrote, when it does: the base a later save of it is checked against
    /// ([`OpenDoc::base`]).
    /// Only a text this connection wrote there counts, not one it handled (a refused save),
    /// and a copy being written counts as written: an editor reloads the file as soon as it
    /// appears. Before, a buffer reloaded while a refused save's copy was rewritten kept its
    /// old base, and its next save was refused as stale too (a CI run).
    pub fn note_copy_base(&self, uri: &str) {
        let Some(path) = self.copy_path(uri) else { return };
        let Some((written, writing)) = self.views_written.lock().ok().and_then(|w| w.get(&path).copied()) else {
            return;
        };
        if let Ok(mut docs) = self.docs.lock() {
            if let Some(d) = docs.get_mut(uri) {
                let held = digest(&d.text);
                if written == Some(held) || writing == Some(held) {
                    d.base = Some(held);
                }
            }
        }
    }

    /// Records that `text` is being written to the copy at `path` (`None`: the write ended;
    /// [`Conn::wrote_view`] records it when it succeeded).
    pub fn writing_view(&self, path: &std::path::Path, text: Option<&str>) {
        if let Ok(mut w) = self.views_written.lock() {
            let entry = w.entry(path.to_path_buf()).or_default();
            entry.1 = text.map(digest);
            if *entry == (None, None) {
                w.remove(path);
            }
        }
    }

    /// Makes `document` (a digest of the document as it is now) the base of the open buffer
    /// at `uri` ([`OpenDoc::base`]) when the buffer holds that text.
    pub fn note_copy_base_held(&self, uri: &str, document: u64) {
        if let Ok(mut docs) = self.docs.lock() {
            if let Some(d) = docs.get_mut(uri) {
                if digest(&d.text) == document {
                    d.base = Some(document);
                }
            }
        }
    }

    /// The base of the open buffer at `uri` ([`OpenDoc::base`]).
    pub fn copy_base(&self, uri: &str) -> Option<u64> {
        self.docs.lock().ok().and_then(|d| d.get(uri).and_then(|d| d.base))
    }

    /// The digest of what this connection last wrote (or handled) at `path`.
    pub fn view_digest(&self, path: &std::path::Path) -> Option<u64> {
        self.views.lock().ok().and_then(|v| v.get(path).copied())
    }

    /// Claims the user's edit `text` of the copy at `path` for handling: true when it differs
    /// from what this connection last wrote or handled there (and records it, so a
    /// concurrent announcement does not handle it again). `known_only`: only when this
    /// connection wrote the copy before (otherwise there is nothing to compare with).
    pub fn claim_view_edit(&self, path: &std::path::Path, text: &str, known_only: bool) -> bool {
        let Ok(mut v) = self.views.lock() else { return false };
        let d = digest(text);
        match v.get(path) {
            Some(&old) if old == d => false,
            None if known_only => false,
            _ => {
                v.insert(path.to_path_buf(), d);
                true
            }
        }
    }

    /// Forgets what was published for `uri` (its buffer was closed).
    pub fn forget_warned(&self, uri: &str) {
        if let Ok(mut w) = self.warned.lock() {
            w.remove(uri);
        }
        if let Ok(mut w) = self.warnings_published.lock() {
            w.remove(uri);
        }
        if let Ok(mut w) = self.published_empty.lock() {
            w.remove(uri);
        }
    }

    /// Whether the warnings of the text with digest `text` are still the ones to publish on
    /// `uri`: it is the text last asked for (and the open buffer's, when one is open).
    pub fn warnings_wanted(&self, uri: &str, text: u64) -> bool {
        let asked = self.warned.lock().ok().and_then(|w| w.get(uri).copied());
        match self.open_text(uri) {
            Some(open) => asked.is_some() && digest(&open) == text,
            None => asked == Some(text),
        }
    }

    /// Publishes `diags`, the plan warnings of the text of `uri` whose digest is `text`,
    /// unless
    /// - `text` is no longer the document's text: the open buffer's, when the client has
    ///   it open (buffer edits race), else the newest stored text asked for
    ///   ([`Conn::warned`] holds another digest). The newer text's warnings go out
    ///   instead, so an older text's never arrive after a newer's;
    /// - the client closed the document since ([`Conn::forget_warned`]): reopening it
    ///   publishes again;
    /// - they are empty and the last ones sent for `uri` were empty too (a plan edited
    ///   without warnings before or after). Only empty lists are not sent again: a list
    ///   with positions is, because some clients (eglot) keep the positions as offsets
    ///   that a text change makes wrong.
    pub async fn publish_warnings<T: serde::Serialize>(&self, uri: &str, text: u64, diags: &[T]) {
        let _turn = self.warnings_turn.lock().await;
        if !self.warnings_wanted(uri, text) {
            return;
        }
        let again = match self.published_empty.lock() {
            Ok(mut empty) if diags.is_empty() => !empty.insert(uri.to_string()),
            Ok(mut empty) => {
                empty.remove(uri);
                false
            }
            Err(_) => false,
        };
        if let Ok(mut p) = self.warnings_published.lock() {
            p.insert(uri.to_string(), text);
        }
        if again {
            return;
        }
        self.outbox.send_body(&crate::to_proto::publish_diagnostics(&self.spelling.to_client(uri), diags)).await;
    }

    pub fn env(&self) -> Arc<ToolEnv> {
        self.env.read().expect("env lock").clone()
    }

    /// Shows a configuration warning (Warning), unless this client was shown it already.
    pub async fn warn_config_once(&self, warning: &str) {
        if self.config_shown.lock().expect("shown warnings").insert(warning.to_string()) {
            self.client
                .show_message(tower_lsp_server::gen_lsp_types::MessageType::Warning, format!("forge-lsp: {warning}"))
                .await;
        }
    }

    pub fn set_env(&self, env: ToolEnv) {
        *self.env.write().expect("env lock") = Arc::new(env);
    }

    pub fn project_id(&self) -> String {
        self.env().project.id.clone()
    }

    pub fn mark_known(&self, uri: &str) {
        self.known_plans.lock().expect("known").insert(uri.to_string());
    }

    /// The client closed the document: its content and warnings are no longer refreshed
    /// (until it is opened or fetched again).
    pub fn forget_known(&self, uri: &str) {
        if let Ok(mut k) = self.known_plans.lock() {
            k.remove(uri);
        }
    }

    /// The text of an open document, if open.
    pub fn open_text(&self, uri: &str) -> Option<String> {
        self.docs.lock().expect("docs").get(uri).map(|d| d.text.clone())
    }

    /// Queues work for the findings-diagnostics publisher.
    /// Publishes again the findings of the file(s) shown at `uri`: their ranges are read
    /// from the open buffer (a line's end), or from disk once it is closed, so a change,
    /// an open or a close of the buffer moves them. Coalesced with other queued work.
    pub fn republish_findings_at(&self, uri: &str) {
        let files: Vec<String> = self
            .published
            .lock()
            .map(|p| p.uri_files.get(uri).map(|f| f.iter().cloned().collect()).unwrap_or_default())
            .unwrap_or_default();
        for f in files {
            self.queue_diagnostics(Work::File(f));
        }
    }

    pub fn queue_diagnostics(&self, w: Work) {
        if let Some(q) = self.diagnostics.get() {
            q.push(w);
        }
    }

    /// Sends `workspace/textDocumentContent/refresh`, coalesced: URIs asked for within
    /// 50 ms are refreshed once each, and the caller never waits on the client.
    pub fn refresh(&self, uri: &str) {
        if !self.caps.text_document_content {
            return;
        }
        let first = {
            let mut pending = self.refresh_pending.lock().expect("refresh");
            let first = pending.is_empty();
            pending.insert(uri.to_string());
            first
        };
        if !first {
            return;
        }
        let client = self.client.clone();
        let pending = self.refresh_pending.clone();
        let (silence, alive) = (self.silence.clone(), self.alive());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let uris: Vec<String> = std::mem::take(&mut *pending.lock().expect("refresh")).into_iter().collect();
            for uri in uris {
                let (client, silence, alive) = (client.clone(), silence.clone(), alive.clone());
                tokio::spawn(async move {
                    silence
                        .ask(alive, move || async move { client.text_document_content_refresh(Uri::from(uri)).await })
                        .await;
                });
            }
        });
    }

    /// Sends `workspace/codeLens/refresh` (plans or loops changed), without waiting on
    /// the client.
    pub fn refresh_code_lenses(&self) {
        if !self.caps.code_lens_refresh {
            return;
        }
        let (client, silence, alive) = (self.client.clone(), self.silence.clone(), self.alive());
        tokio::spawn(async move {
            silence.ask(alive, move || async move { client.code_lens_refresh().await }).await;
        });
    }

    /// `textDocument/publishDiagnostics`, serialized straight onto the connection (the one
    /// path for every publication: plan warnings here, findings in `diagnostics`).
    pub async fn publish<T: serde::Serialize>(&self, uri: &str, diags: &[T]) {
        self.outbox.send_body(&crate::to_proto::publish_diagnostics(&self.spelling.to_client(uri), diags)).await;
    }

    /// Where the materialized copy of `uri` lives.
    pub fn view_path(&self, uri: &ForgeUri) -> PathBuf {
        self.env().project.root.join(".forge/view").join(uri.view_path())
    }
}

/// A digest of a text, to tell whether it changed. foldhash reads 32 bytes a step, where
/// the standard library's SipHash took a tenth of the server's time in a loop of reads of
/// a 200 KB plan. A digest only lives in this process's memory.
pub fn digest(text: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0).hash_one(text)
}

/// [`digest`] of bytes that may not be text (a copy saved in another encoding).
pub fn digest_bytes(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0).hash_one(bytes)
}
