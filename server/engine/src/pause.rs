//! Test pauses: named points in the loop engine where an end-to-end test holds a runner
//! or a restart, to make a race between two processes happen on purpose (a takeover in
//! the middle of a runner's step, two restarts at once). Debug builds only: in a release
//! build [`at`] is empty.
//!
//! With `FORGE_TEST_PAUSE_DIR=<dir>` in the server's environment, [`at`]`(name)` looks for
//! the file `<dir>/<name>`. When it exists, it creates `<dir>/<name>.reached` and waits
//! until `<dir>/<name>` is removed (at most a minute), polling; otherwise it returns at
//! once. Only the test that created the file is held, and only where it asked.

/// A pause point (module docs).
pub async fn at(name: &str) {
    if let Some((hold, until)) = held(name) {
        tracing::info!("test pause {name}: held until {} is removed", hold.display());
        while hold.exists() && std::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// [`at`] for a blocking thread (a search's walk).
pub fn at_blocking(name: &str) {
    if let Some((hold, until)) = held(name) {
        while hold.exists() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Whether the test holds the pause `name`: its file and the latest time to wait until,
/// with `<name>.reached` written. Always `None` in a release build.
fn held(name: &str) -> Option<(std::path::PathBuf, std::time::Instant)> {
    #[cfg(debug_assertions)]
    {
        let dir = std::env::var_os("FORGE_TEST_PAUSE_DIR")?;
        let hold = std::path::Path::new(&dir).join(name);
        if !hold.exists() {
            return None;
        }
        let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{name}.reached")), b"");
        Some((hold, std::time::Instant::now() + std::time::Duration::from_secs(60)))
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = name;
        None
    }
}
