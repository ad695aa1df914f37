//! `initialize`: identity (agent, session, token), project, data directory,
//! configuration and capabilities (PROTOCOL.md §2).

use std::path::PathBuf;

use forge_domain::diagnostics::PositionEncoding;
use forge_protocol::{InitOptions, ToolError, AGENTS};
use serde_json::{json, Value};
use tower_lsp_server::gen_lsp_types::{InitializeParams, InitializeResult};
use tower_lsp_server::jsonrpc::Result;

use crate::conn::{ClientCaps, Conn};
use crate::rpc_error;
use crate::server::{typed, Backend};
use forge_core::config::Loader;
use forge_core::project::{self, Project};
use forge_core::Links;
use forge_tools::ToolEnv;

pub async fn initialize(backend: &Backend, params: InitializeParams) -> Result<InitializeResult> {
    let p = serde_json::to_value(&params).unwrap_or(Value::Null);
    let options: InitOptions = match p.pointer("/initializationOptions/forge") {
        None | Some(Value::Null) => InitOptions::default(),
        // An array would be read by position (serde reads a struct from a sequence too).
        Some(v) if !v.is_object() => {
            return Err(rpc_error(&ToolError::invalid_params(format!(
                "initializationOptions.forge must be an object (with agent, session, token, dataDir, config), got {}",
                forge_protocol::json::kind(v)
            ))));
        }
        Some(v) => forge_tools::parse_input(v.clone()).map_err(|e| {
            rpc_error(&ToolError::invalid_params(format!("initializationOptions.forge: {}", e.message)))
        })?,
    };
    let agent = options.agent.clone().unwrap_or_else(|| "user".into());
    if !AGENTS.contains(&agent.as_str()) {
        return Err(rpc_error(&ToolError::invalid_params(format!(
            "initializationOptions.forge.agent must be one of {}, got {agent:?}",
            AGENTS.join(", ")
        ))));
    }

    // A process in a loop's sandbox reaches the private socket (it is bound in, so that
    // `forge-lsp call` works there), but it is not the user: it must be its loop session.
    // Otherwise it could open a fresh `user` session on a folder of its choice, trust that
    // folder's plugin tools with its own initialization options, and run them on the host.
    // Checked before anything is done for it: it names a session and its token, and a
    // data directory this server has open (its loop's); the token itself is proven below.
    let confined = backend.peer == crate::server::Peer::Confined;
    let refuse_confined = |why: &str| {
        rpc_error(&ToolError::denied(format!(
            "a process inside a loop's sandbox (or whose credentials cannot be read) may only connect as its loop session: {why}"
        )))
    };
    if confined && (options.session.is_none() || options.token.is_none()) {
        return Err(refuse_confined(
            "set FORGE_SESSION_ID and FORGE_SESSION_TOKEN, as the loop's agent environment does",
        ));
    }
    // No folder named (rootUri null, LSP's "no folder is open"): the server's working
    // directory stands in for reading and tools, but nothing is written into it
    // (`materialize` below): an editor started from the home directory must not get
    // `~/.forge/view/`.
    let named = workspace_folder(&p).map_err(|e| rpc_error(&ToolError::invalid_params(e)))?;
    let init_data_dir = init_data_dir(options.data_dir.as_deref(), named.as_deref()).map_err(|e| rpc_error(&e))?;
    if confined {
        let dd = project::data_dir(init_data_dir.as_deref(), backend.hub.cli_data_dir.as_deref());
        if backend.hub.open_workspace(&dd).is_none() {
            return Err(refuse_confined(&format!("no loop of this server keeps its data in {}", dd.display())));
        }
    }
    let no_folder = named.is_none();
    let spelling = named.as_deref().map(crate::uri::Spelling::of_folder).unwrap_or_default();
    let folder = named.unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")));
    // Detection reads git (a history walk when its cache is cold): never on a runtime thread.
    let project = tokio::task::spawn_blocking(move || Project::detect(&folder))
        .await
        .map_err(|e| rpc_error(&ToolError::internal(format!("project detection failed: {e}"))))?;
    let data_dir = project::data_dir(init_data_dir.as_deref(), backend.hub.cli_data_dir.as_deref());
    let ws = backend.hub.workspace(&data_dir).map_err(|e| rpc_error(&ToolError::precondition(e.to_string())))?;

    let loader =
        Loader::standard(&project.root, options.config.as_ref()).map_err(|e| rpc_error(&ToolError::invalid(e.0)))?;
    let config = loader.build();

    let (agent_opt, session_opt, token_opt) = (Some(agent.clone()), options.session.clone(), options.token.clone());
    let project_id = project.id.clone();
    // A read of one session row, on this thread's read connection: no hop to the writer
    // thread, and no wait behind writes.
    let caller = ws
        .store
        .read_here(move |db| {
            forge_tools::identity::resolve(
                db,
                agent_opt.as_deref(),
                session_opt.as_deref(),
                token_opt.as_deref(),
                Some(&project_id),
            )
        })
        .map_err(|e| rpc_error(&ToolError::internal(e)))?
        .map_err(|e| rpc_error(&e))?;
    if confined && caller.binding.is_none() {
        return Err(refuse_confined("its session is not a loop session"));
    }
    // TTL sweeps of terminal loops and of agents' files: once per workspace, by the first
    // connection of the user's (not a loop's agent, sandboxed or not: its configuration
    // would choose what is deleted), with that connection's project and configuration.
    let mut left_behind = vec![];
    if !confined && caller.binding.is_none() {
        let swept = ws.store.sweep_once(&project.id, config.completed_loop_ttl_ms).await;
        ws.engine.sweep_files_once(config.completed_loop_ttl_ms);
        left_behind = swept_with_work_left(swept, config.completed_loop_ttl_ms);
    }
    let session_id = caller.session_id.clone();
    // A loop session's connection (an agent's `forge-lsp call`) runs with its loop's
    // configuration, never with files in the worktree the agent can edit: the running
    // loop's own configuration, else the loop's project directory.
    let config = match &caller.binding {
        None => config,
        Some(b) => match ws.engine.runner(&project.id, &b.loop_name) {
            Some(h) => (*h.config).clone(),
            None => {
                let (p, n) = (project.id.clone(), b.loop_name.clone());
                let dir = ws
                    .store
                    .call(move |c| forge_store::loops::get(c, &p, &n))
                    .await
                    .ok()
                    .flatten()
                    .map(|r| r.project_dir);
                match dir {
                    Some(d) => Loader::standard(std::path::Path::new(&d), None).map(|l| l.build()).unwrap_or(config),
                    None => config,
                }
            }
        },
    };
    let mut config = config;
    if caller.binding.is_some() {
        // Agents never read materialized views; writing them into a worktree would race
        // with its removal.
        config.materialize = Some(false);
    }

    let encoding = if p
        .pointer("/capabilities/general/positionEncodings")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|e| e == "utf-8"))
    {
        PositionEncoding::Utf8
    } else {
        PositionEncoding::Utf16
    };
    let text_document_content = p.pointer("/capabilities/workspace/textDocumentContent").is_some_and(|v| !v.is_null());
    let work_done_progress =
        p.pointer("/capabilities/window/workDoneProgress").and_then(Value::as_bool).unwrap_or(false);
    let materialize = config.materialize.unwrap_or(!text_document_content);
    let code_lens_refresh =
        p.pointer("/capabilities/workspace/codeLens/refreshSupport").and_then(Value::as_bool).unwrap_or(false);
    let tools_only = p.pointer(forge_protocol::TOOLS_ONLY_CAPABILITY).and_then(Value::as_bool).unwrap_or(false);
    let code_action_literals =
        p.pointer("/capabilities/textDocument/codeAction/codeActionLiteralSupport").is_some_and(|v| v.is_object());
    let hierarchical_symbols = p
        .pointer("/capabilities/textDocument/documentSymbol/hierarchicalDocumentSymbolSupport")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // A client that only runs tools never reads views either, and a client that named no
    // folder gets none written into the working directory it happened to start in.
    let materialize = materialize && !tools_only && !no_folder;
    let caps = ClientCaps {
        encoding,
        text_document_content,
        work_done_progress,
        materialize,
        code_lens_refresh,
        tools_only,
        code_action_literals,
        hierarchical_symbols,
    };

    // Links in tool texts and documents: forge:// for clients that read them, else the
    // materialized copies (when there are any).
    let links = if !text_document_content && materialize { Links::View } else { Links::Forge };
    let env = ToolEnv { project, caller, config, home: forge_core::project::home_string(), links };
    let conn = Conn::new(backend.id, backend.client.clone(), backend.outbox.clone(), ws.clone(), env, caps, spelling);
    // A tools-only client gets no pushes: without a diagnostics queue nothing is published
    // to it, and without a subscription no change is announced to it. Each `forge-lsp
    // call` through a server is such a connection; with 100,000 findings stored, the first
    // publication it started cost the server about 16 ms of CPU per call.
    if !tools_only {
        let _ = conn.diagnostics.set(crate::diagnostics::start(std::sync::Arc::downgrade(&conn)));
        crate::announce::subscribe(&conn);
    }
    // A connection that shows nothing (`forge-lsp call`) leaves them for the next editor.
    if tools_only {
        for n in left_behind {
            ws.keep_notice(&conn.project_id(), n);
        }
    } else {
        let mut notices = ws.take_notices(&conn.project_id());
        notices.extend(left_behind);
        *conn.notices.lock().expect("notices") = notices;
    }
    *conn.config_warnings.lock().expect("warnings") = loader.warnings.clone();
    conn.config_warnings.lock().expect("warnings").extend(forge_tools::loop_permissions::warnings(&conn.env().config));
    *conn.init_config.lock().expect("init config") = options.config.clone();
    if backend.conn.set(conn.clone()).is_err() {
        return Err(rpc_error(&ToolError::invalid("initialize was already called on this connection")));
    }
    // A tools-only connection (each `forge-lsp call` through this server) registers the
    // project only when its row is gone (forgotten by a caller that took this server for
    // dead): a read, where writing the row again would be one commit per call, which also
    // starts every read connection's page cache over. A caller that passed over another
    // server to reach this one moves this one first itself (`servers::touch`).
    if !(tools_only && still_registered(&ws, &conn.project_id())) {
        register_server(&ws, &conn.project_id()).await;
    }

    // The built-in commands, then the plugin tools from files (PROTOCOL.md 10.4).
    let mut commands = forge_tools::commands();
    let trusted = forge_tools::plugins::project_trusted(&conn.env());
    for o in forge_tools::plugins::offers(&forge_tools::plugins::project_dir(&conn.env()), trusted) {
        if !commands.contains(&o.command) {
            commands.push(o.command);
        }
    }
    let mut forge =
        json!({ "protocolVersion": forge_protocol::PROTOCOL_VERSION, "tools": true, "sessionId": session_id });
    // A tools-only client (`forge-lsp call`, `forge-lsp mcp`) tells the user its
    // configuration's warnings from here: the `window/showMessage` sent at `initialized`
    // may come after the one reply it waits for.
    if tools_only {
        forge["configWarnings"] = json!(*conn.config_warnings.lock().expect("warnings"));
    }
    typed(json!({
        "capabilities": {
            "positionEncoding": if encoding == PositionEncoding::Utf8 { "utf-8" } else { "utf-16" },
            "textDocumentSync": { "openClose": true, "change": 1, "save": { "includeText": true } },
            "executeCommandProvider": { "commands": commands },
            "workspace": { "textDocumentContent": { "schemes": [forge_protocol::uri::SCHEME] } },
            "documentSymbolProvider": true,
            "foldingRangeProvider": true,
            "codeLensProvider": { "resolveProvider": false },
            "codeActionProvider": true,
            "experimental": { "forge": forge }
        },
        "serverInfo": { "name": "forge-lsp", "version": env!("CARGO_PKG_VERSION") }
    }))
}

/// Records this process and its private socket as a running server of the project, so
/// `forge-lsp call` outside a loop can find it.
async fn register_server(ws: &forge_engine::hub::Workspace, project: &str) {
    let Some(socket) = ws.engine.private_socket() else { return };
    let (p, s, pid, now) =
        (project.to_string(), socket.display().to_string(), std::process::id(), forge_core::now_ms());
    if let Err(e) = ws.store.call(move |c| forge_store::servers::register(c, pid, &p, &s, now)).await {
        tracing::warn!("cannot register the server: {e}");
    }
}

/// Whether this process's registration of `project` is in the `servers` table (an error
/// reads as no). Only this process writes rows with its pid and private socket.
fn still_registered(ws: &forge_engine::hub::Workspace, project: &str) -> bool {
    let Some(socket) = ws.engine.private_socket() else { return true };
    let socket = socket.display().to_string();
    ws.store
        .read_here(|c| forge_store::servers::is_registered(c, std::process::id(), project, &socket))
        .is_ok_and(|r| r.unwrap_or(false))
}

/// What to tell the user of the stopped loops the sweep took off the list whose worktree is
/// still there: the sweep deletes rows only (`forge_store::sweep`), so their work stays on
/// disk and on their branches, out of `loop-status`'s sight.
fn swept_with_work_left(swept: Vec<forge_store::sweep::Swept>, ttl_ms: u64) -> Vec<String> {
    let left: Vec<(String, String, String)> = swept
        .into_iter()
        .filter(|s| s.status != "completed" && std::path::Path::new(&s.worktree_dir).is_dir())
        .map(|s| (s.name, s.status, s.worktree_dir))
        .collect();
    forge_domain::loop_status::swept_notice(&left, ttl_ms).into_iter().collect()
}

/// The first workspace folder, else `rootUri`, as a path.
fn workspace_folder(p: &Value) -> std::result::Result<Option<PathBuf>, String> {
    let Some(uri) = p
        .pointer("/workspaceFolders/0/uri")
        .and_then(Value::as_str)
        .or_else(|| p.get("rootUri").and_then(Value::as_str))
    else {
        return Ok(None);
    };
    Ok(crate::uri::local_path(uri)?.map(PathBuf::from))
}

/// `initializationOptions.forge.dataDir` as a path that does not depend on the directory the
/// editor started the server from: `~` and `~/…` are the home directory, and a relative
/// path is taken from the workspace folder the client named (an editor setting such as
/// `.forge-data` means the project's). A relative path without a folder is refused.
fn init_data_dir(
    given: Option<&str>,
    folder: Option<&std::path::Path>,
) -> std::result::Result<Option<String>, ToolError> {
    let Some(d) = given.filter(|d| !d.trim().is_empty()) else { return Ok(None) };
    let path = std::path::Path::new(d);
    let home = project::expand_home(path).map_err(|e| {
        ToolError::invalid_params(format!(
            "initializationOptions.forge.dataDir {}: {e}; give an absolute path",
            forge_domain::text::echo(d)
        ))
    })?;
    let resolved = if path.is_absolute() {
        return Ok(Some(d.to_string()));
    } else if let Some(home) = home {
        home
    } else if let Some(folder) = folder {
        folder.join(path)
    } else {
        return Err(ToolError::invalid_params(format!(
            "initializationOptions.forge.dataDir {} is a relative path and no workspace folder was named to take it from; give an absolute path",
            forge_domain::text::echo(d)
        )));
    };
    resolved.into_os_string().into_string().map(Some).map_err(|p| {
        ToolError::invalid_params(format!(
            "initializationOptions.forge.dataDir: the workspace folder's path {} is not UTF-8; give dataDir as an absolute path",
            std::path::Path::new(&p).display()
        ))
    })
}
