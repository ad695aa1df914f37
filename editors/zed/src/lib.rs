//! The Zed extension: starts `forge-lsp` (found on the worktree's PATH) for the languages
//! of `extension.toml`. Zed cannot open `forge://` URIs, so the server materializes
//! read-only copies under `<project>/.forge/view/`.

use zed_extension_api::{self as zed, LanguageServerId, Result, Worktree};

struct Forge;

impl zed::Extension for Forge {
    fn new() -> Self {
        Forge
    }

    fn language_server_command(&mut self, _id: &LanguageServerId, worktree: &Worktree) -> Result<zed::Command> {
        let command = worktree.which("forge-lsp").ok_or_else(|| {
            "forge-lsp is not on PATH: install it with `cargo install --path server/cli --locked --bin forge-lsp` from the forge-lsp repository"
                .to_string()
        })?;
        Ok(zed::Command { command, args: vec![], env: worktree.shell_env() })
    }
}

zed::register_extension!(Forge);
