//! State shared by every connection of a server process.
//!
//! A [`Hub`] holds one [`Workspace`] per data directory: its [`Store`], its [`Engine`] and
//! a watcher thread that tails the change feed (`changes` table) and broadcasts each batch
//! to every subscriber ([`Workspace::subscribe`]). Every announcement to clients (plan
//! refreshes, diagnostics, loop status) is driven by that feed, so a write by this
//! process, another server or a `forge-lsp call` is announced the same way, within the
//! watcher's poll interval (100 ms; at once for local writes). The hub knows nothing of
//! who subscribes: front ends listen, the hub never calls them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use forge_store::changes::{self, Change};
use forge_store::{OpenError, Store};
use tokio::sync::broadcast;

use crate::Engine;

/// How often the watcher polls the change feed for other processes' writes.
pub const POLL: Duration = Duration::from_millis(100);
/// After the watcher read the feed because a local write woke it, it lets this much time
/// pass before it reads again: a lone write is read at once, a burst of writes is read in
/// batches (each wake-up of the watcher thread cost a sequential writer about a fifth of its
/// rate on two cores).
pub const BATCH: Duration = Duration::from_millis(5);
/// Batches a slow subscriber may fall behind before it is told it lagged.
pub(crate) const CHANNEL: usize = 4096;

/// [`CHANNEL`], or in a debug build `FORGE_TEST_FEED_CAPACITY` when set: a test of what a
/// connection does after falling behind makes it fall behind with a few batches, not
/// thousands.
pub(crate) fn channel_capacity() -> usize {
    #[cfg(debug_assertions)]
    if let Some(n) = std::env::var("FORGE_TEST_FEED_CAPACITY").ok().and_then(|v| v.parse::<usize>().ok()) {
        return n.max(1);
    }
    CHANNEL
}

/// One batch of the change feed, in feed order (it derefs to its changes).
pub type Batch = Arc<FeedBatch>;

/// The changes the watcher read at once, and whether it found rows pruned before it read
/// them ([`changes::since_checked`]): a process that did not read the feed for longer than
/// it keeps rows (stopped, suspended) missed changes it cannot know, and its subscribers
/// announce everything again.
#[derive(Debug, Default)]
pub struct FeedBatch {
    pub changes: Vec<Change>,
    pub missed: bool,
}

impl std::ops::Deref for FeedBatch {
    type Target = [Change];
    fn deref(&self) -> &[Change] {
        &self.changes
    }
}

pub struct Hub {
    /// `--data-dir` from the command line.
    pub cli_data_dir: Option<PathBuf>,
    /// This process's private callback socket, set once before any workspace opens.
    private_socket: OnceLock<PathBuf>,
    workspaces: Mutex<HashMap<PathBuf, Arc<Workspace>>>,
    next_conn: AtomicU64,
}

impl Hub {
    pub fn new(cli_data_dir: Option<PathBuf>) -> Arc<Hub> {
        Arc::new(Hub {
            cli_data_dir,
            private_socket: OnceLock::new(),
            workspaces: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
        })
    }

    /// Records the private socket agents call back on (first call wins).
    pub fn set_private_socket(&self, path: PathBuf) {
        let _ = self.private_socket.set(path);
    }

    /// The private socket, once listening.
    pub fn private_socket(&self) -> Option<PathBuf> {
        self.private_socket.get().cloned()
    }

    /// Stops every running loop of this process (each terminates with `shutdown`) and
    /// removes the process's server registrations.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Workspace>> =
            self.workspaces.lock().map(|m| m.values().cloned().collect()).unwrap_or_default();
        // Every workspace at once, as every loop of one (`Engine::shutdown`).
        let mut stopping = tokio::task::JoinSet::new();
        for ws in all {
            stopping.spawn(async move {
                ws.engine.shutdown().await;
                let pid = std::process::id();
                if let Err(e) = ws.store.call(move |c| forge_store::servers::unregister(c, pid)).await {
                    tracing::warn!("cannot unregister the server: {e}");
                }
            });
        }
        while stopping.join_next().await.is_some() {}
    }

    pub fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// The workspace of `data_dir` if it is open already (never opens one).
    pub fn open_workspace(&self, data_dir: &Path) -> Option<Arc<Workspace>> {
        self.workspaces.lock().unwrap_or_else(|p| p.into_inner()).get(&workspace_key(data_dir)).cloned()
    }

    /// The workspace of `data_dir`, opening its store on first use. Two spellings of one
    /// directory (through a symbolic link) are one workspace: two stores and engines on one
    /// database would not see each other's runners.
    pub fn workspace(&self, data_dir: &Path) -> Result<Arc<Workspace>, OpenError> {
        let mut map = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ws) = map.get(&workspace_key(data_dir)) {
            return Ok(ws.clone());
        }
        forge_store::create_data_dir(data_dir).map_err(|e| OpenError::Io(data_dir.join("forge.db"), e))?;
        let key = workspace_key(data_dir);
        if let Some(ws) = map.get(&key) {
            return Ok(ws.clone());
        }
        let data_dir = key.as_path();
        let store = Store::open(&data_dir.join("forge.db"))?;
        let engine = Engine::new(store.clone(), key.clone(), self.private_socket());
        let ws = Arc::new(Workspace { data_dir: key.clone(), store, engine, notices: Default::default() });
        start_watcher(&ws);
        map.insert(key, ws.clone());
        Ok(ws)
    }
}

/// The key of a data directory: its canonical path once it exists.
fn workspace_key(data_dir: &Path) -> PathBuf {
    data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_path_buf())
}

/// A data directory in use: its store and its engine (which holds the change broadcast).
pub struct Workspace {
    pub data_dir: PathBuf,
    pub store: Store,
    pub engine: Arc<Engine>,
    /// Things to tell the user of a project (project id, text) that arose on a connection
    /// that shows nothing (a `forge-lsp call`): kept for the project's next editor.
    pub notices: std::sync::Mutex<Vec<(String, String)>>,
}

impl Workspace {
    /// Keeps `text` for the next editor of `project` ([`Workspace::notices`]).
    pub fn keep_notice(&self, project: &str, text: String) {
        self.notices.lock().unwrap_or_else(|p| p.into_inner()).push((project.to_string(), text));
    }

    /// The notices kept for `project`, taken.
    pub fn take_notices(&self, project: &str) -> Vec<String> {
        let mut kept = self.notices.lock().unwrap_or_else(|p| p.into_inner());
        let (mine, others): (Vec<_>, Vec<_>) = kept.drain(..).partition(|(p, _)| p == project);
        *kept = others;
        mine.into_iter().map(|(_, t)| t).collect()
    }

    /// Every change-feed batch from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Batch> {
        self.engine.subscribe()
    }
}

fn start_watcher(ws: &Arc<Workspace>) {
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
    if let Err(e) = conn.busy_timeout(Duration::from_millis(2000)) {
        tracing::warn!("change watcher: {e}");
    }
    // The highest id given, not the highest row: with every row pruned, the next one is
    // not 1, and would otherwise pass for a gap.
    let mut last = changes::last_given(&conn).unwrap_or(0);
    let spawned = std::thread::Builder::new().name("forge-watch".into()).spawn(move || loop {
        let woken = waker.wait(POLL);
        let Some(ws) = weak.upgrade() else { return };
        let (batch, gap) = match changes::since_checked(&conn, last, 10_000) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("change watcher: {e}");
                continue;
            }
        };
        let missed = gap.is_some();
        if missed {
            tracing::warn!("change watcher: changes after {last} were pruned before this process read them");
        }
        // After the rows read, and past every id given when there was a gap: the rest of a
        // batch cut at its limit comes with the next read; a gap's own rows are gone.
        last = batch.last().map_or(last, |c| c.id).max(gap.unwrap_or(last));
        if !batch.is_empty() || missed {
            // No subscriber is not an error: nobody to tell.
            let _ = ws.engine.changes.send(Arc::new(FeedBatch { changes: batch, missed }));
        }
        drop(ws);
        if woken {
            // Read at once; writes arriving during the pause set the flag again and are
            // read right after it, together.
            std::thread::sleep(BATCH);
        }
    });
    if let Err(e) = spawned {
        tracing::error!("cannot start the change watcher: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_store::changes::{self, Kind};

    /// Every spelling of one data directory (a symbolic link to it, `.` and a trailing
    /// slash, one made by the first call) is one workspace: two stores and engines on one
    /// database would not see each other's runners.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_spelling_of_a_data_directory_is_one_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("data");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let hub = Hub::new(None);
        // Made by the first call (not there yet), then named other ways.
        let first = hub.workspace(&real).unwrap();
        for other in [dir.path().join("link"), dir.path().join("./data/"), dir.path().join("link/../data")] {
            let ws = hub.workspace(&other).unwrap();
            assert!(Arc::ptr_eq(&first, &ws), "{} opened a second workspace", other.display());
            assert!(hub.open_workspace(&other).is_some_and(|w| Arc::ptr_eq(&first, &w)));
        }
        let elsewhere = hub.workspace(&dir.path().join("other")).unwrap();
        assert!(!Arc::ptr_eq(&first, &elsewhere));
    }

    /// A burst of local writes reaches subscribers in batches: the watcher reads at once
    /// when woken, then pauses [`BATCH`], so 200 writes in a row make far fewer than 200
    /// batches (woken and reading per write, as before, they made about one each).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_local_writes_is_announced_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::new(None);
        let ws = hub.workspace(dir.path()).unwrap();
        let mut rx = ws.subscribe();
        const WRITES: usize = 200;
        for i in 0..WRITES {
            ws.store.call(move |c| changes::record(c, "p", Kind::Plan, &format!("k{i}"), 0)).await.unwrap();
            ws.store.wrote.wake();
        }
        let (mut seen, mut batches) = (0, 0);
        while seen < WRITES {
            let b = next(&mut rx).await;
            seen += b.len();
            batches += 1;
        }
        assert!(batches < WRITES / 2, "{WRITES} writes came in {batches} batches");
    }

    /// Rows pruned before the watcher read them (a process stopped for longer than the
    /// feed keeps rows) come as a batch marked `missed`, so subscribers announce everything
    /// again; before, the watcher moved past them and they were never announced (review).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_pruned_before_the_watcher_read_them_are_reported_missed() {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::new(None);
        let ws = hub.workspace(dir.path()).unwrap();
        let mut rx = ws.subscribe();
        ws.store.call(|c| changes::record(c, "p", Kind::Plan, "a", 0)).await.unwrap();
        ws.store.wrote.wake();
        let b = next(&mut rx).await;
        assert!(!b.missed && b.len() == 1 && b[0].key == "a", "{b:?}");
        // Written and pruned in one transaction by another process: the watcher never sees
        // the rows, only that their ids were given.
        let other = rusqlite::Connection::open(ws.store.path()).unwrap();
        other
            .execute_batch(
                "BEGIN; INSERT INTO changes (project_id, kind, key, at) VALUES ('p', 'finding', 'b', 0), ('p', 'finding', 'c', 0); \
                 DELETE FROM changes; COMMIT;",
            )
            .unwrap();
        let b = next(&mut rx).await;
        assert!(b.missed && b.is_empty(), "{b:?}");
        // A gap before rows it does read is missed too; the rows come with it.
        other
            .execute_batch(
                "BEGIN; INSERT INTO changes (project_id, kind, key, at) VALUES ('p', 'finding', 'd', 0), ('p', 'finding', 'e', 0); \
                 DELETE FROM changes WHERE key = 'd'; COMMIT;",
            )
            .unwrap();
        let b = next(&mut rx).await;
        assert!(b.missed && b.len() == 1 && b[0].key == "e", "{b:?}");
        // And the feed goes on as before.
        ws.store.call(|c| changes::record(c, "p", Kind::Plan, "f", 0)).await.unwrap();
        ws.store.wrote.wake();
        let b = next(&mut rx).await;
        assert!(!b.missed && b.len() == 1 && b[0].key == "f", "{b:?}");
    }

    /// The next batch, within 5 s.
    async fn next(rx: &mut broadcast::Receiver<Batch>) -> Batch {
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("announced").unwrap()
    }
}
