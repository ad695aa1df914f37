//! The framework's `LanguageServer` trait, implemented by delegating every method to one
//! free function (one file per method under `requests/` and `notifications/`).

use std::sync::{Arc, OnceLock};

use tower_lsp_server::gen_lsp_types::*;
use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::{Client, LanguageServer};

use super::conn::Conn;
use super::{notifications, requests};
use forge_engine::hub::Hub;

pub use crate::peer::Peer;

pub struct Backend {
    pub client: Client,
    pub hub: Arc<Hub>,
    /// The connection's id (log lines, `Conn::id`).
    pub id: u64,
    /// Where the connection's peer runs.
    pub peer: Peer,
    /// Set when the client sent `shutdown` (the process's exit code of a stdio server).
    pub shut_down: Arc<std::sync::atomic::AtomicBool>,
    /// Becomes true once nothing more is read from the client (`exit`, end of input).
    pub input_closed: tokio::sync::watch::Receiver<bool>,
    /// Set by `initialize`.
    pub conn: OnceLock<Arc<Conn>>,
    /// Writes frames built as bytes onto this connection.
    pub outbox: crate::transport::Outbox,
}

impl Backend {
    pub fn new(
        client: Client,
        hub: Arc<Hub>,
        id: u64,
        peer: Peer,
        shut_down: Arc<std::sync::atomic::AtomicBool>,
        input_closed: tokio::sync::watch::Receiver<bool>,
        outbox: crate::transport::Outbox,
    ) -> Backend {
        Backend { client, hub, id, peer, shut_down, input_closed, conn: OnceLock::new(), outbox }
    }

    /// The connection state; an error before `initialize` succeeded.
    pub fn conn(&self) -> Result<&Arc<Conn>> {
        self.conn.get().ok_or_else(Error::internal_error)
    }
}

/// Converts JSON to a typed LSP value (our handlers build results as JSON).
pub fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error {
        code: tower_lsp_server::jsonrpc::ErrorCode::InternalError,
        message: format!("internal: {e}").into(),
        data: None,
    })
}

impl Backend {
    /// `window/workDoneProgress/cancel` (not in the framework's trait; registered as a
    /// custom method): cancelling a loop's progress cancels the loop.
    pub async fn work_done_progress_cancel(&self, params: WorkDoneProgressCancelParams) {
        notifications::work_done_progress_cancel::work_done_progress_cancel(self, params).await
    }
}

/// `workspace/executeCommand` and `workspace/textDocumentContent` are answered beside the
/// framework once the connection is initialized ([`crate::transport::Direct`]): their
/// replies are big and serialized once, straight into bytes.
impl crate::transport::Direct for Backend {
    fn take(&self, method: &str) -> Option<crate::transport::DirectHandler> {
        let conn = self.conn.get()?.clone();
        match method {
            "workspace/executeCommand" => {
                let closed = self.input_closed.clone();
                Some(Box::new(move |p| requests::execute_command::direct(conn, closed, p)))
            }
            "workspace/textDocumentContent" => {
                Some(Box::new(move |p| requests::text_document_content::direct(conn, p)))
            }
            _ => None,
        }
    }

    fn accepted_initialize(&self) -> bool {
        self.conn.get().is_some()
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        requests::initialize::initialize(self, params).await
    }

    async fn initialized(&self, params: InitializedParams) {
        notifications::initialized::initialized(self, params).await
    }

    async fn shutdown(&self) -> Result<()> {
        self.shut_down.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        notifications::did_open::did_open(self, params)
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        notifications::did_change::did_change(self, params)
    }

    async fn did_save(&self, params: DidSaveTextDocumentParams) {
        notifications::did_save::did_save(self, params).await
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        notifications::did_close::did_close(self, params)
    }

    async fn did_change_configuration(&self, params: DidChangeConfigurationParams) {
        notifications::did_change_configuration::did_change_configuration(self, params).await
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> Result<Option<LspAny>> {
        requests::execute_command::execute_command(self, params).await
    }

    async fn text_document_content(&self, params: TextDocumentContentParams) -> Result<TextDocumentContentResult> {
        requests::text_document_content::text_document_content(self, params).await
    }

    async fn document_symbol(&self, params: DocumentSymbolParams) -> Result<Option<DocumentSymbolResponse>> {
        requests::document_symbol::document_symbol(self, params).await
    }

    async fn folding_range(&self, params: FoldingRangeParams) -> Result<Option<Vec<FoldingRange>>> {
        requests::folding_range::folding_range(self, params).await
    }

    async fn code_lens(&self, params: CodeLensParams) -> Result<Option<Vec<CodeLens>>> {
        requests::code_lens::code_lens(self, params).await
    }

    async fn code_action(&self, params: CodeActionParams) -> Result<Option<Vec<CodeActionResponse>>> {
        requests::code_action::code_action(self, params).await
    }
}
