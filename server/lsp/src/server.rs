//! The framework's `LanguageServer` trait, implemented by delegating every method to one
//! free function (one file per method under `requests/` and `notifications/`).

use std::sync::{Arc, OnceLock};

use tower_lsp_server::gen_lsp_types::*;
use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::{Client, LanguageServer};

use super::conn::Conn;
use super::{notifications, requests};
use forge_engine::hub::Hub;

/// Where a connection's peer runs, as far as the server can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The server's own namespaces (an editor, a shell's `forge-lsp call`), or a connection
    /// whose peer cannot be known (stdio: whoever started the server; TCP, tests only).
    Host,
    /// Another process namespace than the server's (a loop's sandbox: bubblewrap unshares
    /// it), or a Unix socket peer whose credentials cannot be read: it must identify as a
    /// loop session.
    Confined,
}

impl Peer {
    /// The place of the process `pid` (as this process sees it; 0 when it is in a process
    /// namespace this process cannot see): confined when its process namespace differs
    /// from this process's, or cannot be read (it may have gone).
    ///
    /// Only the process namespace: containers that share the host's processes but not its
    /// mounts (distrobox and toolbox run with the host's process namespace, snaps and
    /// services with a private /tmp have their own mount namespace) are the user's own
    /// shells, and a loop's sandbox always has a process namespace of its own.
    pub fn of_pid(pid: i32) -> Peer {
        let ns = |who: &str| std::fs::read_link(format!("/proc/{who}/ns/pid")).ok();
        let Some(ours) = ns("self") else {
            // No /proc here: nothing to compare; the sandbox itself needs /proc.
            return Peer::Host;
        };
        if pid <= 0 || ns(&pid.to_string()).as_ref() != Some(&ours) {
            return Peer::Confined;
        }
        Peer::Host
    }
}

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
