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
