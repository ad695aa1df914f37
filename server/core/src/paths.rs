//! Where a server process puts its private callback sockets.

use std::path::PathBuf;

/// The directory of private sockets: `$XDG_RUNTIME_DIR/forge-lsp`, else
/// `/tmp/forge-lsp-<uid>` (short paths: Unix socket paths are limited to 108 bytes).
pub fn private_socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("forge-lsp");
    }
    let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    PathBuf::from(format!("/tmp/forge-lsp-{uid}"))
}
