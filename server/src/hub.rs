//! State shared by every connection of a server process.
//!
//! A [`Hub`] holds one [`Workspace`] per data directory: its [`Store`], the connections
//! that use it, and a watcher thread that tails the change feed (`changes` table). Every
//! announcement to clients (plan refreshes, diagnostics, loop status) is driven by that
//! feed, so a write by this process, another server or a `forge-lsp call` is announced
//! the same way, within the watcher's poll interval (100 ms; at once for local writes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::lsp::conn::Conn;
use crate::store::changes;
use crate::store::{OpenError, Store};

/// How often the watcher polls the change feed for other processes' writes.
pub const POLL: Duration = Duration::from_millis(100);
/// How long a local write's wake-up waits for more writes before the feed is read.
pub const BATCH: Duration = Duration::from_millis(5);

pub struct Hub {
    /// `--data-dir` from the command line.
    pub cli_data_dir: Option<PathBuf>,
    workspaces: Mutex<HashMap<PathBuf, Arc<Workspace>>>,
    next_conn: AtomicU64,
}

impl Hub {
    /// Stops every running loop of this process (each terminates with `shutdown`).
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Workspace>> = self.workspaces.lock().expect("hub lock").values().cloned().collect();
        for ws in all {
            ws.engine.shutdown().await;
            let pid = std::process::id();
            let _ = ws.store.call(move |c| c.execute("DELETE FROM servers WHERE pid = ?1", [pid])).await;
        }
    }

    pub fn new(cli_data_dir: Option<PathBuf>) -> Arc<Hub> {
        Arc::new(Hub { cli_data_dir, workspaces: Mutex::new(HashMap::new()), next_conn: AtomicU64::new(1) })
    }

    pub fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// The workspace of `data_dir`, opening its store on first use.
    pub fn workspace(&self, data_dir: &Path) -> Result<Arc<Workspace>, OpenError> {
        let key = data_dir.to_path_buf();
        let mut map = self.workspaces.lock().expect("hub lock");
        if let Some(ws) = map.get(&key) {
            return Ok(ws.clone());
        }
        let store = Store::open(&data_dir.join("forge.db"))?;
        let engine = crate::engine::Engine::new(store.clone(), key.clone());
        let ws = Arc::new(Workspace { data_dir: key.clone(), store, engine, conns: Mutex::new(HashMap::new()) });
        start_watcher(&ws, tokio::runtime::Handle::current());
        map.insert(key, ws.clone());
        Ok(ws)
    }
}

pub struct Workspace {
    pub data_dir: PathBuf,
    pub store: Store,
    pub engine: Arc<crate::engine::Engine>,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Workspace {
    pub fn add(&self, conn: Arc<Conn>) {
        self.conns.lock().expect("conns").insert(conn.id, conn);
    }
    pub fn remove(&self, id: u64) {
        self.conns.lock().expect("conns").remove(&id);
    }
    pub fn connections(&self) -> Vec<Arc<Conn>> {
        self.conns.lock().expect("conns").values().cloned().collect()
    }
}

fn start_watcher(ws: &Arc<Workspace>, rt: tokio::runtime::Handle) {
    let weak: Weak<Workspace> = Arc::downgrade(ws);
    let path = ws.store.path().to_path_buf();
    let waker = ws.store.wrote.clone();
    // The feed position is read here, before the workspace is used: read inside the thread,
    // a write made before the thread got to run would be skipped and never announced.
    let Ok(conn) = rusqlite::Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) else {
        tracing::error!("change watcher cannot open {}", path.display());
        return;
    };
    let _ = conn.busy_timeout(Duration::from_millis(2000));
    let mut last = changes::head(&conn).unwrap_or(0);
    let _ = std::thread::Builder::new().name("forge-watch".into()).spawn(move || loop {
        waker.wait(POLL);
        let Some(ws) = weak.upgrade() else { return };
        let batch = match changes::since(&conn, last, 10_000) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("change watcher: {e}");
                continue;
            }
        };
        if let Some(c) = batch.last() {
            last = c.id;
        }
        if batch.is_empty() {
            continue;
        }
        let batch = Arc::new(batch);
        for conn in ws.connections() {
            let batch = batch.clone();
            rt.spawn(async move { conn.on_changes(&batch).await });
        }
    });
}
