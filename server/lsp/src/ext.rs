//! Forge extensions of LSP (after rust-analyzer's `lsp/ext.rs`).

use tower_lsp_server::gen_lsp_types::{LspNotificationMethod, MessageDirection, Notification};

/// `forge/loopStatus` (server → client): a loop's persisted state changed.
pub enum LoopStatus {}

impl Notification for LoopStatus {
    type Params = forge_protocol::notifications::LoopStatusParams;
    const METHOD: LspNotificationMethod<'static> =
        LspNotificationMethod::Custom(forge_protocol::notifications::LOOP_STATUS);
    const MESSAGE_DIRECTION: MessageDirection = MessageDirection::ServerToClient;
}

/// `textDocument/publishDiagnostics` with JSON params: our diagnostics are built as JSON,
/// so they are sent as they are instead of being converted to typed structs and back.
pub enum PublishDiagnosticsJson {}

impl Notification for PublishDiagnosticsJson {
    type Params = serde_json::Value;
    const METHOD: LspNotificationMethod<'static> = LspNotificationMethod::Custom("textDocument/publishDiagnostics");
    const MESSAGE_DIRECTION: MessageDirection = MessageDirection::ServerToClient;
}
