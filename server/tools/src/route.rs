//! Running a tool from a process that is not a server: `forge-lsp call` and `forge-lsp mcp`
//! share this one path (docs/protocol.md, "forge-lsp call" and "forge-lsp mcp").
//!
//! [`Route::new`] finds the caller's identity (`FORGE_SESSION_ID` + `FORGE_SESSION_TOKEN`,
//! else `--agent` and `--session`), the project (`--project DIR`; for a loop session with
//! `FORGE_LSP_SOCKET`, its worktree `FORGE_WORKTREE`; else the working directory's
//! repository, and outside a repository it refuses) and the data directory. [`Route::call`] then runs one tool: with `FORGE_LSP_SOCKET` (set for
//! agents in a loop) through that server; otherwise through a running server of the project,
//! the one its socket file names (`<data dir>/servers/<project>`, read without opening the
//! database), else those found in the database's `servers` table, each only when its
//! listener is this user (`SO_PEERCRED`: another user's socket is told nothing, not even
//! the caller's identity); with none, in-process on the database when the
//! tool only touches it ([`run_on`](crate::run_on), the same dispatcher a server runs), and
//! loop control is refused. The front ends only parse their own wire and print.

pub mod lsp_client;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use forge_core::config::Loader;
use forge_core::project::{self, Project};
use forge_protocol::{CommandResult, ErrorKind, ToolError};
use forge_store as store;
use serde_json::{json, Value};

use crate::{ToolEntry, ToolEnv};
use lsp_client::LspClient;

/// What the caller said on its command line.
#[derive(Clone, Debug, Default)]
pub struct RouteArgs {
    /// `--agent`: user (default), architect, code, auditor, auditor-loop, minion.
    pub agent: Option<String>,
    /// `--session` (default `FORGE_SESSION_ID`).
    pub session: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--project DIR`: the project, instead of the working directory's repository.
    pub project: Option<PathBuf>,
    /// Say on standard error which route each call took, prefixed with `label`.
    pub verbose: bool,
    /// How the front end names itself in those lines (`forge-lsp call`).
    pub label: &'static str,
}

/// The identity in the environment: `FORGE_SESSION_ID` with `FORGE_SESSION_TOKEN` when both
/// are set (a loop session); otherwise `session` (the `--session` flag), else
/// `FORGE_SESSION_ID` without a token. Returns `(session, token)`.
pub fn identity_from_env(session: Option<&str>) -> (Option<String>, Option<String>) {
    let env_session = std::env::var("FORGE_SESSION_ID").ok().filter(|s| !s.is_empty());
    let env_token = std::env::var("FORGE_SESSION_TOKEN").ok().filter(|s| !s.is_empty());
    match (env_session, env_token) {
        (Some(s), Some(t)) => (Some(s), Some(t)),
        // An empty `--session ''` (an unset shell variable) is no session, as an empty
        // `FORGE_SESSION_ID` is.
        (env_session, _) => {
            (session.map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).or(env_session), None)
        }
    }
}

/// Where and as whom a process outside the server runs tools; see the module doc.
#[derive(Clone, Debug)]
pub struct Route {
    pub agent: Option<String>,
    /// The session calls run as (`None`: a fresh one per call, chosen where it runs).
    pub session: Option<String>,
    token: Option<String>,
    /// The project's root (the repository's work tree), or the given directory.
    pub root: PathBuf,
    /// The caller's working directory (a relative `file` is relative to it).
    pub here: PathBuf,
    pub data_dir: PathBuf,
    /// `FORGE_LSP_SOCKET`: inside a loop, every call goes through that server.
    pub socket: Option<PathBuf>,
    verbose: bool,
    label: &'static str,
    /// The project [`Route::new`] detected, for the first call only: a `forge-lsp call`
    /// makes one call and does not open the repository twice; a long-lived route (`forge-lsp
    /// mcp`) detects again for every later call, as HEAD may have moved.
    detected: Arc<Mutex<Option<Project>>>,
}

impl Route {
    /// Finds the identity, project and data directory. `purpose` completes the refusal
    /// outside a repository: "... so there is no project {purpose}; ..." (e.g. `to call
    /// forge.plan-read on`). That refusal is an `InvalidParams` error (a usage error).
    pub fn new(args: &RouteArgs, purpose: &str) -> Result<Route, ToolError> {
        let (session, token) = identity_from_env(args.session.as_deref());
        if let Some(a) = args.agent.as_deref().filter(|a| !forge_protocol::AGENTS.contains(a)) {
            return Err(ToolError::invalid_params(format!(
                "--agent (or FORGE_AGENT) must be one of {}, got {a:?}",
                forge_protocol::AGENTS.join(", ")
            )));
        }
        let here = std::env::current_dir()
            .map_err(|e| ToolError::internal(format!("cannot read the working directory: {e}")))?;
        let cwd = match &args.project {
            Some(p) => {
                let dir = p.canonicalize().map_err(|e| {
                    ToolError::invalid_params(format!("--project {}: not a usable directory: {e}", p.display()))
                })?;
                if !dir.is_dir() {
                    return Err(ToolError::invalid_params(format!(
                        "--project {}: not a directory (name the project's directory)",
                        p.display()
                    )));
                }
                dir
            }
            None => here.clone(),
        };
        // The project is the repository the directory is in, with its work tree as the root
        // (as an editor opening the repository sees it), wherever in it the caller stands.
        let detected = Project::detect(&cwd);
        let socket = std::env::var_os("FORGE_LSP_SOCKET").filter(|s| !s.is_empty()).map(PathBuf::from);
        // A loop session's calls are about its loop's worktree (`FORGE_WORKTREE`), wherever
        // the agent stands (`/tmp`, a nested repository): the loop's server refuses its
        // identity for any other project.
        let worktree = std::env::var_os("FORGE_WORKTREE").filter(|s| !s.is_empty()).map(PathBuf::from);
        let root = match (&socket, &token, &args.project, worktree) {
            (Some(_), Some(_), None, Some(w)) => w,
            _ => detected.repo_root.clone().unwrap_or(cwd),
        };
        if socket.is_none() && detected.is_global() {
            // Git may refuse the repository itself (another user's, not in safe.directory):
            // say so, instead of "not inside a repository".
            let refused = forge_core::project::refused_repository(&detected.root)
                .map(|why| format!(" (git refuses the repository here: {why})"))
                .unwrap_or_default();
            let remedy = if !refused.is_empty() {
                "fix what git reports, or name another project with --project DIR"
            } else if args.project.is_some() {
                "--project must name a directory inside a git repository with a commit (run `git init` and commit there first)"
            } else {
                "run it from your project, or name one with --project DIR"
            };
            return Err(ToolError::invalid_params(format!(
                "{} is not inside a git repository with a commit{refused}, so there is no project {purpose}; {remedy}",
                detected.root.display(),
            )));
        }
        if socket.is_none() && detected.repo_root.is_none() {
            return Err(ToolError::invalid_params(format!(
                "{} is in a git repository without a work tree (a bare repository), so there is no project {purpose}; run it from a clone with a work tree, or name one with --project DIR",
                detected.root.display(),
            )));
        }
        // A directory inside git's own files (`.git/hooks`) has no root for the file tools
        // (an editor opened there gets 1004 from them), nor a project of its own.
        if socket.is_none() && crate::files::in_git_dir(&detected.root) {
            return Err(ToolError::invalid_params(format!(
                "{} is inside a git directory (.git), so there is no project {purpose}; run it from the repository's work tree",
                detected.root.display(),
            )));
        }
        // The project as a call sees it: the one at `root` (what `Project::detect(&root)`
        // says, without opening the repository again).
        let first = (!detected.is_global()).then(|| Project {
            id: detected.id.clone(),
            root: root.clone(),
            repo_root: detected.repo_root.clone(),
        });
        Ok(Route {
            agent: args.agent.clone(),
            session,
            token,
            root,
            here,
            data_dir: project::data_dir(None, args.data_dir.as_deref()),
            socket,
            verbose: args.verbose,
            label: args.label,
            detected: Arc::new(Mutex::new(first)),
        })
    }

    /// Whether calls go through a loop's server (`FORGE_LSP_SOCKET`).
    pub fn in_loop(&self) -> bool {
        self.socket.is_some()
    }

    /// Proves the identity once, without running a tool: a loop session's token is checked
    /// by the loop's server (inside a loop) or against the database (error 1001 naming the
    /// session when it is wrong or missing); an unknown agent is an `InvalidParams` error.
    pub fn check_identity(&self) -> Result<(), ToolError> {
        if let Some(sock) = &self.socket {
            let c = self.connect(sock).map_err(|e| e.into_error(sock))?;
            let _ = c.finish();
            return Ok(());
        }
        let conn = store::open_connection(&self.data_dir.join("forge.db"))
            .map_err(|e| ToolError::precondition(e.to_string()))?;
        crate::identity::resolve(&conn, self.agent.as_deref(), self.session.as_deref(), self.token.as_deref(), None)
            .map(|_| ())
    }

    /// Runs one tool with `input` (one JSON object); see the module doc for the route.
    pub fn call(&self, tool: &'static ToolEntry, input: Value) -> Result<CommandResult, ToolError> {
        self.call_named(tool.name, tool.needs_server, input)
    }

    /// A plugin tool (`<plugin>__<Name>`, PROTOCOL.md 10.4) of this route's project, if any.
    pub fn plugin(&self, name: &str) -> Option<crate::plugins::PluginTool> {
        // A loop session's project tools are its project's, as the server finds them.
        let dir = match self.in_loop() {
            true => forge_core::project::main_worktree(&self.root).unwrap_or_else(|| self.root.clone()),
            false => self.root.clone(),
        };
        crate::plugins::find(&dir, name, || crate::plugins::trusted_outside(&dir))
    }

    /// Calls tool `name` (a built-in's or a plugin tool's offer name); `needs_server` refuses
    /// the in-process path.
    pub fn call_named(&self, name: &str, needs_server: bool, input: Value) -> Result<CommandResult, ToolError> {
        self.call_named_cancellable(name, needs_server, input, None)
    }

    /// [`Route::call_named`]; setting `cancel` stops a plugin tool: one this process runs
    /// itself (in-process) is killed; through a server, the connection is closed, and the
    /// server kills a plugin tool whose caller's connection ended (`call_watched`). A
    /// built-in tool the server runs goes on to its end there (its writes are whole).
    pub fn call_named_cancellable(
        &self,
        name: &str,
        needs_server: bool,
        mut input: Value,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<CommandResult, ToolError> {
        // Built-in tools' `file` only: a plugin tool's `file` (an override's too) means what
        // its author says.
        if crate::find(name.strip_prefix(forge_protocol::COMMAND_PREFIX).unwrap_or(name)).is_some()
            && self.plugin(name).is_none()
        {
            relative_file_from(&mut input, &self.here, &self.root)?;
        }
        if let Some(sock) = &self.socket {
            self.say(format!("through the server at FORGE_LSP_SOCKET={}", sock.display()));
            return self.via_server(sock, name, input, cancel).map_err(|e| e.into_error(sock));
        }

        let first = self.detected.lock().unwrap_or_else(|e| e.into_inner()).take();
        let project = first.unwrap_or_else(|| Project::detect(&self.root));
        // A data directory or project root whose name is not UTF-8 cannot be named to a
        // server exactly (a lossy name would be another directory): no server is asked,
        // and the route says so once, rather than naming servers it then passes over.
        let unnameable = [(&self.data_dir, "data directory"), (&self.root, "project root")]
            .into_iter()
            .find(|(p, _)| p.to_str().is_none())
            .map(|(p, what)| format!("the {what} {} is not UTF-8, so no server can be named it", p.display()));
        // The project's most recently seen server, named by its socket file: tried before
        // the database is opened at all (`store::servers`, the module doc).
        let mut hinted = None;
        if let (None, Some(file)) = (&unnameable, store::servers::hint_path(&self.data_dir, &project.id)) {
            match store::servers::hinted_socket(&self.data_dir, &project.id) {
                Ok(sock) => {
                    self.say(format!("through the running server at {} (named in {})", sock.display(), file.display()));
                    match self.via_server(&sock, name, input.clone(), cancel) {
                        Ok(r) => return Ok(r),
                        Err(NotThrough::Failed(e)) => return Err(e),
                        Err(NotThrough::Unreachable) => {
                            self.say(format!("{} does not answer", sock.display()));
                            hinted = Some((sock, None));
                        }
                        Err(NotThrough::Foreign(uid)) => hinted = Some((sock, Some(uid))),
                    }
                }
                Err(Some(why)) => self.say(format!("the socket file {} is not used: {why}", file.display())),
                Err(None) => {}
            }
        }
        let db_path = self.data_dir.join("forge.db");
        let mut conn = store::open_connection(&db_path).map_err(|e| ToolError::precondition(e.to_string()))?;
        keep_wal_files(&conn);
        let servers = if unnameable.is_some() { vec![] } else { running_servers(&conn, &project.id) };
        // The server the socket file named was asked already: passed over, not again (a
        // wedged one would cost its initialize timeout twice).
        let mut passed_over = hinted.is_some();
        // Servers passed over because another user listens on their socket: named in the
        // message of a call that then has no server.
        let mut foreign: Vec<(PathBuf, u32)> = Vec::new();
        if let Some((sock, uid)) = &hinted {
            match uid {
                None => self.forget_if_dead(&conn, &project.id, sock),
                Some(uid) => {
                    self.forget_foreign(&conn, &project.id, sock);
                    foreign.push((sock.clone(), *uid));
                }
            }
        }
        let asked = hinted.map(|(s, _)| s);
        for (sock, own) in servers.into_iter().filter(|(s, _)| Some(s) != asked.as_ref()) {
            self.say(format!("through the running server at {} (found in {})", sock.display(), db_path.display()));
            match self.via_server(&sock, name, input.clone(), cancel) {
                Ok(r) => {
                    // The next call tries this server first, not the one that did not
                    // answer (servers do not register again for every call), and finds it
                    // by the socket file without opening the database. A write only on
                    // this path (no socket file, or one that did not hold), best effort:
                    // it waits little for a lock (a stopped server may hold one) once the
                    // call has succeeded. A socket file alone is no commit.
                    if conn.busy_timeout(std::time::Duration::from_millis(100)).is_ok() {
                        let (s, now) = (sock.display().to_string(), forge_core::now_ms());
                        match (passed_over, own) {
                            (true, _) => {
                                let _ = store::servers::touch(&conn, &s, now);
                            }
                            // The first of the table's rows: already the most recent.
                            (false, true) => store::servers::name_in_hint(&conn, &project.id, &s),
                            (false, false) => {}
                        }
                    }
                    return Ok(r);
                }
                Err(NotThrough::Failed(e)) => return Err(e),
                Err(NotThrough::Unreachable) => {
                    // Not reachable (a server that died): try the next, then in-process.
                    self.say(format!("{} does not answer", sock.display()));
                    passed_over = true;
                    self.forget_if_dead(&conn, &project.id, &sock);
                    continue;
                }
                Err(NotThrough::Foreign(uid)) => {
                    passed_over = true;
                    self.forget_foreign(&conn, &project.id, &sock);
                    foreign.push((sock, uid));
                    continue;
                }
            }
        }
        if needs_server {
            // A bad input is named first (-32602), as when a server runs the tool.
            if let Some(entry) = crate::find(name.strip_prefix(forge_protocol::COMMAND_PREFIX).unwrap_or(name)) {
                (entry.validate)(input)?;
            }
            if let Some(why) = &unnameable {
                return Err(ToolError::precondition(format!(
                    "forge.{name} needs a running forge-lsp server (it controls loops and runs their processes), and {why}; use a data directory and a checkout whose paths are UTF-8"
                )));
            }
            if !foreign.is_empty() {
                return Err(ToolError::precondition(format!(
                    "forge.{name} needs a running forge-lsp server (it controls loops and runs their processes), and the only ones found for this project in the data directory {} run as another user: {}; start your own forge-lsp (your editor's, or `forge-lsp serve --listen unix:PATH` with the same data directory), then retry",
                    self.data_dir.display(),
                    foreign_list(&foreign)
                )));
            }
            return Err(ToolError::precondition(format!(
                "forge.{} needs a running forge-lsp server (it controls loops and runs their processes) and none of this project is running with the data directory {}; start your editor's forge-lsp or `forge-lsp serve --listen unix:PATH` (same data directory), then retry",
                name,
                self.data_dir.display()
            )));
        }
        match &unnameable {
            Some(why) => self.say(format!("in-process ({why})")),
            None if !foreign.is_empty() => self.say(format!(
                "in-process (the servers of this project found in {} run as another user: {})",
                db_path.display(),
                foreign_list(&foreign)
            )),
            None => self.say(format!("in-process (no running server of this project in {})", db_path.display())),
        }
        let loader = Loader::standard(&project.root, None).map_err(|e| ToolError::invalid(e.0))?;
        let config = loader.build();
        // The same warnings a server gives (`configWarnings`): the loader's, then the
        // permission rules'.
        for w in loader.warnings.iter().cloned().chain(crate::loop_permissions::warnings(&config)) {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "warning: {w}");
        }
        let caller = crate::identity::resolve(
            &conn,
            self.agent.as_deref(),
            self.session.as_deref(),
            self.token.as_deref(),
            Some(&project.id),
        )?;
        let env = ToolEnv {
            project,
            caller,
            config,
            home: forge_core::project::home_string(),
            links: forge_core::Links::Forge,
        };
        crate::run_on(&mut conn, &env, name, input, cancel)
    }

    /// Forgets the registration of a server that did not answer when its socket is gone or
    /// refuses connections: it died without unregistering (SIGKILL, a crash). The project's
    /// socket file goes too when it names that socket, with or without a row.
    fn forget_if_dead(&self, conn: &rusqlite::Connection, project: &str, sock: &Path) {
        if forge_core::paths::socket_is_dead(sock) {
            if store::servers::forget_hint(&self.data_dir, project, sock) {
                self.say(format!(
                    "the server at {} is dead: removed the project's socket file in the data directory, which named it (the socket itself is left where it is)",
                    sock.display()
                ));
            }
            if let Ok(1..) = store::servers::forget_socket(conn, &sock.display().to_string()) {
                self.say(format!("forgot the registration of the dead server at {}", sock.display()));
            }
        }
    }

    /// Forgets the registration of a server whose socket another user listens on, unless
    /// the data directory is shared on purpose (where another user's server may be
    /// registered): a server of this user's listens as this user, so the row is stale
    /// (its socket's folder was taken over after the server left).
    fn forget_foreign(&self, conn: &rusqlite::Connection, project: &str, sock: &Path) {
        if store::shared_data_dir() {
            return;
        }
        let file = store::servers::forget_hint(&self.data_dir, project, sock);
        let rows = store::servers::forget_socket(conn, &sock.display().to_string()).unwrap_or(0);
        if file || rows > 0 {
            self.say(format!("forgot the registration of {}: another user listens there", sock.display()));
        }
    }

    fn say(&self, route: String) {
        if self.verbose {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{}: {route}", self.label);
        }
    }

    /// Connects to a server and initializes as the caller.
    fn connect(&self, sock: &Path) -> Result<LspClient, NotThrough> {
        // A data directory whose name is not UTF-8 cannot be named to a server exactly (a
        // lossy name would be another directory): such a caller is not served by one.
        let Some(data_dir) = self.data_dir.to_str() else {
            self.say(format!(
                "the data directory {} is not UTF-8: not going through a server",
                self.data_dir.display()
            ));
            return Err(NotThrough::Unreachable);
        };
        // The same for the project's root (the server reads a URI's path as UTF-8).
        if self.root.to_str().is_none() {
            self.say(format!("the project root {} is not UTF-8: not going through a server", self.root.display()));
            return Err(NotThrough::Unreachable);
        }
        // A server that stopped accepting with its backlog full is passed over as one that
        // does not answer `initialize`.
        let mut c = LspClient::connect_within(sock, init_timeout()).map_err(|e| {
            self.say(format!("cannot connect to {}: {e}", sock.display()));
            NotThrough::Unreachable
        })?;
        // A stopped server (Ctrl-Z in the terminal that runs `serve --listen`, SIGSTOP)
        // accepts into its backlog and answers nothing: passed over at once instead of
        // after INIT_TIMEOUT, once for every call (a review waited 20 s per stopped server).
        if let Some((pid, state)) =
            c.peer_pid().and_then(|pid| forge_core::paths::stop_state(pid).map(|state| (pid, state)))
        {
            let how = if state == 't' {
                "stopped by a debugger or tracer (detach it to continue the server)".to_string()
            } else {
                format!("stopped (continue it with `kill -CONT {pid}`, or `fg` in its terminal)")
            };
            self.say(format!("the server at {} (pid {pid}) is {how}: passed over", sock.display()));
            return Err(NotThrough::Unreachable);
        }
        // A server found by its socket file or the `servers` table is this user's: a socket
        // in a folder another user could take over after the server left (a private
        // folder under /tmp, without XDG_RUNTIME_DIR) must not be told the caller's
        // identity. Not asked of the loop's own server (FORGE_LSP_SOCKET), whose user a
        // sandbox's user namespace may show differently.
        if self.socket.is_none() {
            let me = forge_core::paths::euid();
            match c.peer_uid() {
                Some(uid) if uid == me => {}
                Some(uid) => {
                    self.say(format!(
                        "{} is served by uid {uid}, not this user (uid {me}): passed over",
                        sock.display()
                    ));
                    return Err(NotThrough::Foreign(uid));
                }
                None => {
                    self.say(format!("the user serving {} cannot be read: passed over", sock.display()));
                    return Err(NotThrough::Unreachable);
                }
            }
        }
        // A process outside the server is not an editor: it never reads materialized views,
        // and writing them into its working directory (an agent's loop worktree) could
        // recreate that worktree after the loop removed it.
        let mut forge = json!({ "dataDir": data_dir, "config": { "documents": { "materialize": false } } });
        if let Some(a) = &self.agent {
            forge["agent"] = json!(a);
        }
        if let Some(s) = &self.session {
            forge["session"] = json!(s);
        }
        if let Some(t) = &self.token {
            forge["token"] = json!(t);
        }
        // Percent-encoded: a root with `#`, `?` or `%` in its name is named exactly.
        let root = url::Url::from_file_path(&self.root)
            .map(String::from)
            .unwrap_or_else(|()| format!("file://{}", self.root.display()));
        // A server that accepts connections but does not answer (stopped, wedged) is passed
        // over after INIT_TIMEOUT instead of holding the call for the reply timeout: nothing
        // was asked of it yet.
        c.set_timeout(init_timeout()).map_err(|_| NotThrough::Unreachable)?;
        let init = c.request("initialize", initialize_params(&root, forge)).map_err(|e| {
            self.say(format!("the server at {} did not answer initialize ({e}): passed over", sock.display()));
            NotThrough::Unreachable
        })?;
        let init = match init {
            Ok(r) => r,
            Err(e) => return Err(NotThrough::Failed(rpc_to_tool_error(&e))),
        };
        // The configuration's warnings, as the server read it for this caller: told on
        // standard error, as an in-process call tells the loader's. Not to a loop's agent,
        // which can do nothing about them (its tool calls' output is the model's input).
        let warnings = init["capabilities"]["experimental"]["forge"]["configWarnings"].as_array().cloned();
        for w in warnings.into_iter().flatten().filter(|_| !self.in_loop()) {
            if let Some(w) = w.as_str() {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "warning: {w}");
            }
        }
        c.set_timeout(lsp_client::REPLY_TIMEOUT).map_err(|_| NotThrough::Unreachable)?;
        c.notify_with_next("initialized", json!({}));
        Ok(c)
    }

    /// Runs the call through a server.
    /// Setting `cancel` while the call runs closes the connection (the server then stops a
    /// plugin tool) and ends the call with an error saying so. A task control of a loop that
    /// another live server of this user runs (error `data.runBy.socket`: two editors on the
    /// project) is sent on to that server, once; before, the caller was told to do it.
    /// Not from a loop session, whose calls are its own loop server's.
    fn via_server(
        &self,
        sock: &Path,
        tool: &str,
        input: Value,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<CommandResult, NotThrough> {
        let params = json!({ "command": forge_protocol::command_name(tool), "arguments": [input] });
        match self.ask(sock, tool, &params, cancel) {
            Err(NotThrough::Failed(e)) if self.socket.is_none() => {
                let owner = e
                    .data
                    .as_ref()
                    .and_then(|d| d.get("runBy"))
                    .and_then(|r| r.get("socket"))
                    .and_then(Value::as_str)
                    .map(PathBuf::from)
                    .filter(|owner| owner != sock);
                let Some(owner) = owner else { return Err(NotThrough::Failed(e)) };
                self.say(format!("the loop is run by the server at {}: sent on there", owner.display()));
                match self.ask(&owner, tool, &params, cancel) {
                    // Not reachable, or not this user's: the first server's answer stands.
                    Err(NotThrough::Unreachable | NotThrough::Foreign(_)) => Err(NotThrough::Failed(e)),
                    r => r,
                }
            }
            r => r,
        }
    }

    /// [`Route::via_server`] without sending the call on.
    fn ask(
        &self,
        sock: &Path,
        tool: &str,
        params: &Value,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<CommandResult, NotThrough> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let cancelled = || {
            NotThrough::Failed(ToolError::internal(format!(
                "forge.{tool} was cancelled: the connection to the server was closed, which stops a plugin tool or a shell command there"
            )))
        };
        let asked = || cancel.is_some_and(|c| c.load(Ordering::Acquire));
        if asked() {
            return Err(cancelled());
        }
        let mut c = self.connect(sock)?;
        if asked() {
            return Err(cancelled());
        }
        let r = match cancel {
            None => c.request("workspace/executeCommand", params),
            Some(cancel) => {
                let closer = c.closer().map_err(|e| {
                    NotThrough::Failed(ToolError::internal(format!(
                        "cannot watch the server connection for a cancel: {e}"
                    )))
                })?;
                let done = AtomicBool::new(false);
                std::thread::scope(|s| {
                    // Watches the caller's cancel while the call waits for its reply; woken
                    // when the reply came.
                    let watcher = s.spawn(|| {
                        while !done.load(Ordering::Acquire) {
                            if cancel.load(Ordering::Acquire) {
                                let _ = closer.shutdown(std::net::Shutdown::Both);
                                return;
                            }
                            std::thread::park_timeout(std::time::Duration::from_millis(20));
                        }
                    });
                    let r = c.request("workspace/executeCommand", params);
                    done.store(true, Ordering::Release);
                    watcher.thread().unpark();
                    r
                })
            }
        };
        // A reply that arrived is the call's outcome, even when a cancel came with it.
        let r = match r {
            Ok(r) => r,
            Err(_) if asked() => return Err(cancelled()),
            Err(e) => {
                return Err(NotThrough::Failed(ToolError::internal(format!(
                    "the server connection failed during the call: {e}"
                ))))
            }
        };
        let _ = c.finish();
        match r {
            Ok(v) => serde_json::from_value(v).map_err(|e| {
                NotThrough::Failed(ToolError::internal(format!("unexpected result from the server: {e}")))
            }),
            Err(e) => Err(NotThrough::Failed(rpc_to_tool_error(&e))),
        }
    }
}

/// Why a call did not get through a server.
enum NotThrough {
    /// Not reachable (gone, refusing, not answering `initialize`): the next is tried.
    Unreachable,
    /// Another user listens on the socket: told nothing, the next is tried.
    Foreign(u32),
    /// The server answered with an error, or the connection failed during the call: the
    /// call's outcome.
    Failed(ToolError),
}

impl NotThrough {
    /// The error of a call that had only this server (`FORGE_LSP_SOCKET`).
    fn into_error(self, sock: &Path) -> ToolError {
        match self {
            NotThrough::Failed(e) => e,
            NotThrough::Unreachable | NotThrough::Foreign(_) => unreachable_socket(sock),
        }
    }
}

/// `<socket> (uid N)`, comma-separated.
fn foreign_list(foreign: &[(PathBuf, u32)]) -> String {
    foreign.iter().map(|(s, uid)| format!("{} (uid {uid})", s.display())).collect::<Vec<_>>().join(", ")
}

/// The `initialize` of a call through a server. The client declares itself tools-only
/// (`experimental.forge.toolsOnly`): it reads nothing but its replies, so the server sends
/// it no diagnostics and no announcements, and does not start its first publication of
/// every finding for it. A server that does not know the capability ignores it (LSP
/// capabilities are open), where an unknown initialization option would be refused.
fn initialize_params(root: &str, forge: Value) -> Value {
    // At forge_protocol::TOOLS_ONLY_CAPABILITY (a test checks the two agree).
    json!({
        "processId": std::process::id(),
        "rootUri": root,
        "capabilities": { "experimental": { "forge": { "toolsOnly": true } } },
        "workspaceFolders": [{ "uri": root, "name": "cwd" }],
        "initializationOptions": { "forge": forge },
    })
}

/// Leaves the database's `-wal` and `-shm` files in place when this connection is the last
/// to close (SQLite's `SQLITE_FCNTL_PERSIST_WAL`). Without it, a call made while no server
/// holds the database open created both files and deleted them again on exit: an inode
/// created, sized and unlinked twice per `forge-lsp call`. The files keep the database's
/// mode (0600) and are what a running server keeps open anyway.
///
/// The WAL is left empty: `journal_size_limit = 0` makes the checkpoint at the last close
/// truncate it. A WAL kept with frames in it would be recovered by the next process that
/// opens the database first (the wal-index does not survive the last close) and
/// checkpointed again at its close, with a sync, by every call.
fn keep_wal_files(conn: &rusqlite::Connection) {
    if let Err(e) = conn.pragma_update(None, "journal_size_limit", 0) {
        tracing::debug!("cannot limit the WAL's size: {e}");
        return;
    }
    let mut on: std::os::raw::c_int = 1;
    // SAFETY: `conn.handle()` is the open connection's live handle, used on this thread
    // only for the duration of the call; the schema name is a NUL-terminated literal and
    // `on` an int that outlives the call, as SQLITE_FCNTL_PERSIST_WAL expects.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut on as *mut std::os::raw::c_int).cast(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        tracing::debug!("cannot keep the WAL files (sqlite3_file_control: {rc})");
    }
}

fn unreachable_socket(sock: &Path) -> ToolError {
    use std::os::unix::fs::FileTypeExt;
    // Why, as far as the path tells: a loop's socket that is gone, a wrong path, or a server
    // that stopped listening.
    let why = match std::fs::metadata(sock) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "nothing is there".to_string(),
        Err(e) => e.to_string(),
        Ok(m) if !m.file_type().is_socket() => "it is not a socket".to_string(),
        Ok(_) => match std::os::unix::net::UnixStream::connect(sock) {
            Err(e) => e.to_string(),
            Ok(_) => "the server did not answer initialize".to_string(),
        },
    };
    ToolError::precondition(format!("cannot reach the forge-lsp server at FORGE_LSP_SOCKET={}: {why}", sock.display()))
}

/// How long a running server may take to answer `initialize` (the project's id is cached by
/// the caller's own detection by then, so it is answered in milliseconds).
const INIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// [`INIT_TIMEOUT`], or in a debug build `FORGE_TEST_INIT_TIMEOUT_MS` when set (a test of
/// a server that does not answer need not wait 20 s).
fn init_timeout() -> std::time::Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("FORGE_TEST_INIT_TIMEOUT_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
        return std::time::Duration::from_millis(ms);
    }
    INIT_TIMEOUT
}

/// A relative `file` is relative to the caller's working directory: rewritten relative to
/// the project root (or absolute when the directory is outside it).
///
/// `..` is resolved by name (as the caller's shell would for a path it was given): a file
/// that leaves the project that way is named absolute too, never as `../x`.
fn relative_file_from(input: &mut Value, cwd: &Path, root: &Path) -> Result<(), ToolError> {
    let Some(file) = input.get("file").and_then(Value::as_str) else { return Ok(()) };
    // Blank (refused by the tool, as from the root: review YK had `src/  ` stored), absolute,
    // or a `file:` URI (an editor's spelling: the tool decodes it; review YK: joined to the
    // working directory, `file:///p/a.rs` became the relative `file:/p/a.rs`).
    let uri = file.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("file:/"));
    if file.trim().is_empty() || Path::new(file).is_absolute() || uri {
        return Ok(());
    }
    let rewritten = match cwd.strip_prefix(root) {
        // Outside the project: made absolute, so it names the file the caller meant.
        Err(_) => forge_domain::path::lexical(&cwd.join(file)),
        Ok(sub) => {
            let joined = forge_domain::path::lexical(&sub.join(file));
            let rewritten =
                if joined.starts_with("..") { forge_domain::path::lexical(&root.join(&joined)) } else { joined };
            // The project root itself (`..` from a folder just below it) is `.`, as when the
            // caller names it from the root; left as it was, `..` would name the root's parent.
            if rewritten.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                rewritten
            }
        }
    };
    // A lossy spelling would name another file (two directories whose names differ only
    // in bytes that are not UTF-8 would share one).
    let Some(rewritten) = rewritten.to_str() else {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `file`: {} named from the working directory {} is a path that is not UTF-8; findings name files by UTF-8 paths, so give one from a directory whose path is UTF-8",
            forge_domain::text::echo(file),
            cwd.display()
        )));
    };
    if rewritten != file {
        input["file"] = Value::String(rewritten.to_string());
    }
    Ok(())
}

/// Sockets of the project's running servers, newest first, then of servers for any project
/// (`serve --listen`), each once; with whether it is registered for this project.
fn running_servers(conn: &rusqlite::Connection, project: &str) -> Vec<(PathBuf, bool)> {
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    for (s, own) in store::servers::sockets(conn, project).unwrap_or_default() {
        let p = PathBuf::from(s);
        if !out.iter().any(|(q, _)| *q == p) {
            out.push((p, own));
        }
    }
    out
}

fn rpc_to_tool_error(e: &Value) -> ToolError {
    let code = e.get("code").and_then(Value::as_i64).unwrap_or(1007);
    let message = e.get("message").and_then(Value::as_str).unwrap_or("unknown error").to_string();
    let mut error = ToolError::new(ErrorKind::from_code(code).unwrap_or(ErrorKind::Internal), message);
    if let Some(data) = e.get("data").and_then(Value::as_object) {
        let mut data = data.clone();
        data.remove("kind");
        error.data = Some(data).filter(|d| !d.is_empty());
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_through_a_server_declares_itself_tools_only() {
        let p = initialize_params("file:///p", json!({ "agent": "code" }));
        assert_eq!(p.pointer(forge_protocol::TOOLS_ONLY_CAPABILITY), Some(&json!(true)), "{p}");
        assert_eq!(p["initializationOptions"]["forge"]["agent"], json!("code"));
        // Nothing else is declared: the server sends such a client no documents either.
        assert_eq!(p["capabilities"].as_object().map(|o| o.len()), Some(1), "{p}");
    }

    #[test]
    fn a_relative_file_is_named_from_the_project_root() {
        let root = Path::new("/p");
        // (working directory, file given, file sent)
        let cases = [
            ("/p", "src/a.rs", "src/a.rs"),
            ("/p/sub", "a.rs", "sub/a.rs"),
            ("/p/sub", "../a.rs", "a.rs"),
            ("/p/sub", "./x/../a.rs", "sub/a.rs"),
            ("/p", "../../etc/passwd", "/etc/passwd"),
            ("/p/sub", "../../q/b.rs", "/q/b.rs"),
            ("/elsewhere", "b.rs", "/elsewhere/b.rs"),
            ("/elsewhere", "../b.rs", "/b.rs"),
            ("/p", "/abs/c.rs", "/abs/c.rs"),
            ("/p", ".", "."),
            // The root itself, named from below it: `.`, never `..` (the root's parent).
            ("/p/sub", "..", "."),
            ("/p/sub", "../", "."),
            ("/p/sub/deeper", "../..", "."),
        ];
        for (cwd, given, sent) in cases {
            let mut input = json!({ "file": given });
            relative_file_from(&mut input, Path::new(cwd), root).unwrap();
            assert_eq!(input["file"], json!(sent), "{cwd} {given}");
        }
        // A working directory whose name is not UTF-8: refused, never made lossy.
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"/p/sub\xfe"));
        let e = relative_file_from(&mut json!({ "file": "a.txt" }), odd, root).unwrap_err();
        assert!(e.message.contains("not UTF-8"), "{e:?}");
    }
}
