//! One client connection: who it is (agent, session, project), what it supports, the
//! documents it has open, and the queue that turns change-feed entries into
//! announcements (refresh requests, diagnostics, materialized views).
//!
//! Announcements for one connection are processed by one task, in feed order.
//! Requests to the client (refresh) are never awaited inside a handler: they are spawned
//! with a timeout.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use forge_domain::diagnostics::PositionEncoding;
use forge_protocol::uri::ForgeUri;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tower_lsp_server::gen_lsp_types::Uri;
use tower_lsp_server::Client;

use crate::hub::Workspace;
use crate::lsp::{diagnostics, documents, plan_features};
use crate::store::changes::{Change, Kind};
use crate::tools::ToolEnv;

/// Timeout for requests we send to the client.
pub const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the client declared it supports.
#[derive(Debug, Clone, Copy)]
pub struct ClientCaps {
    pub encoding: PositionEncoding,
    /// `workspace.textDocumentContent` declared: virtual documents and their refresh.
    pub text_document_content: bool,
    pub work_done_progress: bool,
    /// Materialize read-only copies under `<project>/.forge/view/`.
    pub materialize: bool,
}

/// An open document (full sync).
#[derive(Debug, Clone)]
pub struct OpenDoc {
    pub version: i32,
    pub text: String,
}

pub struct Conn {
    pub id: u64,
    pub client: Client,
    pub ws: Arc<Workspace>,
    env: RwLock<Arc<ToolEnv>>,
    pub caps: ClientCaps,
    pub docs: Mutex<HashMap<String, OpenDoc>>,
    /// Plan documents this client has seen (opened or fetched): their structure warnings
    /// are published as diagnostics and kept current.
    known_plans: Mutex<HashSet<String>>,
    /// Warnings of the config files, shown once after `initialized`.
    pub config_warnings: Mutex<Vec<String>>,
    /// Plan documents' warnings as last published: URI → digest of the text.
    warned: Mutex<HashMap<String, u64>>,
    /// URIs waiting for a coalesced refresh.
    refresh_pending: Arc<Mutex<HashSet<String>>>,
    /// `initializationOptions.forge.config`, kept so later settings merge over it.
    pub init_config: Mutex<Option<serde_json::Value>>,
    queue: mpsc::UnboundedSender<Arc<Vec<Change>>>,
    /// The findings-diagnostics publisher.
    pub diagnostics: std::sync::OnceLock<mpsc::UnboundedSender<diagnostics::Work>>,
    pub published: Mutex<diagnostics::Published>,
    /// Work-done progress of loops on this connection.
    pub progress: Mutex<crate::lsp::loops::ProgressState>,
}

impl Conn {
    pub fn new(id: u64, client: Client, ws: Arc<Workspace>, env: ToolEnv, caps: ClientCaps) -> Arc<Conn> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Arc<Vec<Change>>>();
        let conn = Arc::new(Conn {
            id,
            client,
            ws,
            env: RwLock::new(Arc::new(env)),
            caps,
            docs: Mutex::new(HashMap::new()),
            known_plans: Mutex::new(HashSet::new()),
            config_warnings: Mutex::new(vec![]),
            init_config: Mutex::new(None),
            refresh_pending: Arc::new(Mutex::new(HashSet::new())),
            warned: Mutex::new(HashMap::new()),
            queue: tx,
            diagnostics: std::sync::OnceLock::new(),
            published: Mutex::new(diagnostics::Published::default()),
            progress: Mutex::new(Default::default()),
        });
        let _ = conn.diagnostics.set(diagnostics::start(Arc::downgrade(&conn)));
        let weak = Arc::downgrade(&conn);
        tokio::spawn(async move {
            while let Some(batch) = rx.recv().await {
                let Some(conn) = weak.upgrade() else { return };
                conn.announce(&batch).await;
            }
        });
        conn
    }

    pub fn env(&self) -> Arc<ToolEnv> {
        self.env.read().expect("env lock").clone()
    }

    pub fn set_env(&self, env: ToolEnv) {
        *self.env.write().expect("env lock") = Arc::new(env);
    }

    pub fn project_id(&self) -> String {
        self.env().project.id.clone()
    }

    /// Queues a batch of feed entries (called by the hub's watcher).
    pub async fn on_changes(&self, batch: &Arc<Vec<Change>>) {
        let _ = self.queue.send(batch.clone());
    }

    pub fn mark_known(&self, uri: &str) {
        self.known_plans.lock().expect("known").insert(uri.to_string());
    }

    /// The text of an open document, if open.
    pub fn open_text(&self, uri: &str) -> Option<String> {
        self.docs.lock().expect("docs").get(uri).map(|d| d.text.clone())
    }

    async fn announce(self: &Arc<Self>, batch: &[Change]) {
        let project = self.project_id();
        let mut plan_uris: Vec<String> = vec![];
        let mut loop_changes: Vec<(String, Option<String>)> = vec![];
        for c in batch.iter().filter(|c| c.project_id == project) {
            match c.kind {
                Kind::Plan if !plan_uris.contains(&c.key) => plan_uris.push(c.key.clone()),
                Kind::Finding => {
                    let (_, file) = crate::store::changes::split_finding_key(&c.key);
                    self.queue_diagnostics(diagnostics::Work::File(file.to_string()));
                }
                Kind::Loop => {
                    self.queue_diagnostics(diagnostics::Work::Loop(c.key.clone()));
                    loop_changes.push((c.key.clone(), c.payload.clone()));
                }
                _ => {}
            }
        }
        if batch.iter().any(|c| c.project_id == project && c.kind == Kind::Finding) {
            self.refresh(&ForgeUri::Index.to_uri());
        }
        for (name, payload) in &loop_changes {
            crate::lsp::loops::announce(self, name, payload.as_deref()).await;
        }
        if !loop_changes.is_empty() {
            self.refresh(&ForgeUri::Index.to_uri());
        }
        if self.caps.materialize {
            // Loop documents (status, sections, loop plan) and the index follow the loop and
            // the findings in the read-only copies too.
            let mut names: Vec<&String> = loop_changes.iter().map(|(n, _)| n).collect();
            names.dedup();
            for name in names {
                for uri in self.loop_document_uris(name).await {
                    self.materialize(&uri).await;
                }
            }
            let findings_changed = batch.iter().any(|c| c.project_id == project && c.kind == Kind::Finding);
            if (!loop_changes.is_empty() || findings_changed) && plan_uris.is_empty() {
                self.materialize(&ForgeUri::Index.to_uri()).await;
            }
        }
        if plan_uris.is_empty() {
            return;
        }
        for uri in &plan_uris {
            self.refresh(uri);
        }
        // Republish warnings on every known document (forge:// or a materialized copy)
        // that shows one of the changed plans. Copies are rewritten first.
        if self.caps.materialize {
            for uri in plan_uris.iter().chain(std::iter::once(&ForgeUri::Index.to_uri())) {
                self.materialize(uri).await;
            }
        }
        let known: Vec<String> = self.known_plans.lock().expect("known").iter().cloned().collect();
        for k in known {
            let shows = crate::lsp::requests::forge_document(self, &k).is_some_and(|d| plan_uris.contains(&d.to_uri()));
            if shows {
                self.publish_plan_warnings(&k).await;
            }
        }
        self.refresh(&ForgeUri::Index.to_uri());
    }

    /// Queues work for the findings-diagnostics publisher.
    pub fn queue_diagnostics(&self, w: diagnostics::Work) {
        if let Some(tx) = self.diagnostics.get() {
            let _ = tx.send(w);
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
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let uris: Vec<String> = std::mem::take(&mut *pending.lock().expect("refresh")).into_iter().collect();
            for uri in uris {
                let client = client.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(
                        CLIENT_REQUEST_TIMEOUT,
                        client.text_document_content_refresh(Uri::from(uri)),
                    )
                    .await;
                });
            }
        });
    }

    /// Publishes a plan document's structure warnings as diagnostics (on a `forge://` URI or
    /// on a materialized copy under `.forge/view/`).
    pub async fn publish_plan_warnings(&self, uri: &str) {
        let Some(parsed) = crate::lsp::requests::forge_document(self, uri) else { return };
        if !parsed.is_plan() {
            return;
        }
        let text = match self.open_text(uri) {
            Some(t) => Some(t),
            None => documents::render(self, &parsed).await.ok(),
        };
        // Unchanged text: its warnings were published already.
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            h.finish()
        };
        if self.warned.lock().expect("warned").insert(uri.to_string(), digest) == Some(digest) {
            return;
        }
        let diags: Vec<Value> = match text {
            Some(t) => plan_features::warning_diagnostics(&t, self.caps.encoding),
            None => vec![],
        };
        self.publish(uri, diags).await;
    }

    /// `textDocument/publishDiagnostics` from JSON diagnostics.
    pub async fn publish(&self, uri: &str, diags: Vec<Value>) {
        self.client
            .send_notification::<crate::lsp::ext::PublishDiagnosticsJson>(json!({ "uri": uri, "diagnostics": diags }))
            .await;
    }

    /// The documents of a loop: status, each section, its plan.
    pub async fn loop_document_uris(&self, name: &str) -> Vec<String> {
        let (p, n) = (self.project_id(), name.to_string());
        let total: i64 = self
            .ws
            .store
            .call(move |c| {
                c.query_row(
                    "SELECT total_sections FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                    rusqlite::params![p, n],
                    |r| r.get(0),
                )
            })
            .await
            .unwrap_or(0);
        let mut v =
            vec![ForgeUri::LoopStatus(name.to_string()).to_uri(), ForgeUri::LoopPlan(name.to_string()).to_uri()];
        v.extend((0..total.max(0)).map(|i| ForgeUri::LoopSection(name.to_string(), i as u32).to_uri()));
        v
    }

    /// Where the materialized copy of `uri` lives.
    pub fn view_path(&self, uri: &ForgeUri) -> PathBuf {
        self.env().project.root.join(".forge/view").join(uri.view_path())
    }

    /// Writes (or removes) the read-only copy of a virtual document.
    pub async fn materialize(&self, uri: &str) {
        let Some(parsed) = ForgeUri::parse(uri) else { return };
        let path = self.view_path(&parsed);
        let text = documents::render(self, &parsed).await.ok();
        let root = self.env().project.root.clone();
        let _ = tokio::task::spawn_blocking(move || write_view(&root, &path, text.as_deref())).await;
    }
}

/// Writes a read-only view file (mode 0444), replacing any previous one; `None` removes it.
fn write_view(root: &std::path::Path, path: &std::path::Path, text: Option<&str>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Never recreate a project directory that is gone (e.g. a removed loop worktree).
    if !root.is_dir() {
        return Ok(());
    }
    crate::lsp::documents::exclude_forge_dir(root);
    let Some(text) = text else {
        let _ = std::fs::remove_file(path);
        return Ok(());
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("md.tmp");
    let _ = std::fs::remove_file(&tmp);
    std::fs::write(&tmp, text)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o444))?;
    std::fs::rename(&tmp, path)
}

/// Diagnostics JSON helper.
pub fn diagnostic(
    line: u32,
    start: u32,
    end: u32,
    severity: u8,
    message: &str,
    code: Option<Value>,
    data: Option<Value>,
) -> Value {
    let mut d = json!({
        "range": { "start": { "line": line, "character": start }, "end": { "line": line, "character": end } },
        "severity": severity,
        "source": "forge",
        "message": message,
    });
    if let Some(c) = code {
        d["code"] = c;
    }
    if let Some(x) = data {
        d["data"] = x;
    }
    d
}
