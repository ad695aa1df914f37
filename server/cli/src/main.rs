//! The `forge-lsp` binary: `forge-lsp` / `forge-lsp serve --stdio` serves one connection
//! over stdio; `serve --listen` accepts many; `call` runs one tool from the command line;
//! `mcp` serves the tools to an MCP agent over stdio (the `forge-lsp-mcp` crate);
//! `cleanup` removes old plans or one loop; `demo` runs a scripted loop to show it working
//! (`demo-agent`, hidden, is its agent).

use std::path::PathBuf;

// mimalloc returns freed memory to the system where glibc's allocator keeps it (issue 17:
// 423 MiB right after a burst of 100,000 findings with glibc); docs/performance.md has the
// side-by-side figures. `--no-default-features` builds with the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options, set before mimalloc initializes (it reads them once, in its own
/// constructor): arenas are committed as they are used (its default commits them eagerly
/// on Linux: 38 MiB idle instead of 20), and freed memory goes back to the system after
/// 10 ms (its default: 1 s, so RSS stayed high after a burst). The environment
/// (`MIMALLOC_*`) still overrides both. Measured in docs/performance.md.
#[cfg(all(feature = "mimalloc", target_os = "linux"))]
mod allocator_options {
    // Option numbers of mimalloc 3's `mi_option_e` (not all exported by the -sys crate).
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

    extern "C" fn set() {
        for (option, env, value) in
            [(ARENA_EAGER_COMMIT, c"MIMALLOC_ARENA_EAGER_COMMIT", 0), (PURGE_DELAY, c"MIMALLOC_PURGE_DELAY", 10)]
        {
            // No allocation here (getenv, not std::env): this runs before Rust's runtime
            // and mimalloc are set up.
            // SAFETY: getenv with a NUL-terminated name; nothing else runs yet.
            if unsafe { libc::getenv(env.as_ptr()) }.is_null() {
                // SAFETY: a plain setter of one of mimalloc's global option values.
                unsafe { libmimalloc_sys::mi_option_set(option, value) };
            }
        }
    }

    /// A constructor with a priority, so it runs before the default-priority ones
    /// (mimalloc's among them).
    #[used]
    #[link_section = ".init_array.00200"]
    static SET: extern "C" fn() = set;
}

/// SQLite allocates through mimalloc too (with the `mimalloc` feature), and without its global memory statistics.
///
/// SQLite's default allocator is the C library's, whose per-thread arenas keep what is
/// freed: after connecting to 100,000 findings, 11 MiB of the read connections' page
/// caches were held in two glibc arenas (issue 17). Through mimalloc that memory goes
/// back to the system with the rest (10 ms after it is freed). The statistics
/// (`SQLITE_CONFIG_MEMSTATUS`) take one process-wide mutex around every allocation of
/// every connection; nothing here reads them (no soft heap limit, no
/// `sqlite3_memory_used`). Measured in docs/performance.md.
mod sqlite_allocator {
    use rusqlite::ffi;
    use std::os::raw::c_int;

    /// SQLite's allocator methods on mimalloc. SQLite calls them with positive sizes (it
    /// refuses 0 and sizes past its limit before calling), with pointers it got from
    /// them, and from any thread.
    #[cfg(feature = "mimalloc")]
    mod on_mimalloc {
        use rusqlite::ffi;
        use std::os::raw::{c_int, c_void};

        unsafe extern "C" fn malloc(n: c_int) -> *mut c_void {
            // SAFETY: a plain allocation; mimalloc aligns to at least 8 bytes, SQLite's need.
            unsafe { libmimalloc_sys::mi_malloc(n as usize) }
        }
        unsafe extern "C" fn free(p: *mut c_void) {
            // SAFETY: `p` came from `malloc` or `realloc` above (SQLite's contract).
            unsafe { libmimalloc_sys::mi_free(p) }
        }
        unsafe extern "C" fn realloc(p: *mut c_void, n: c_int) -> *mut c_void {
            // SAFETY: as for `free`.
            unsafe { libmimalloc_sys::mi_realloc(p, n as usize) }
        }
        unsafe extern "C" fn size(p: *mut c_void) -> c_int {
            // SAFETY: as for `free`.
            let usable = unsafe { libmimalloc_sys::mi_usable_size(p) };
            // SQLite asks for less than 2 GiB, but mimalloc may round a block just below
            // that up past `c_int::MAX`.
            c_int::try_from(usable).unwrap_or(c_int::MAX)
        }
        unsafe extern "C" fn roundup(n: c_int) -> c_int {
            // SAFETY: a pure size computation.
            let good = unsafe { libmimalloc_sys::mi_good_size(n as usize) };
            c_int::try_from(good).unwrap_or(n)
        }
        unsafe extern "C" fn init(_: *mut c_void) -> c_int {
            ffi::SQLITE_OK
        }
        unsafe extern "C" fn shutdown(_: *mut c_void) {}

        pub fn methods() -> ffi::sqlite3_mem_methods {
            ffi::sqlite3_mem_methods {
                xMalloc: Some(malloc),
                xFree: Some(free),
                xRealloc: Some(realloc),
                xSize: Some(size),
                xRoundup: Some(roundup),
                xInit: Some(init),
                xShutdown: Some(shutdown),
                pAppData: std::ptr::null_mut(),
            }
        }
    }

    /// Must run before anything opens a database: SQLite refuses configuration once it
    /// has initialized (then it keeps its defaults, which costs memory, not
    /// correctness). `Err` names what SQLite refused.
    pub fn install() -> Result<(), String> {
        #[cfg(feature = "mimalloc")]
        {
            let methods = on_mimalloc::methods();
            // SAFETY: SQLite copies the methods; they keep SQLite's allocator contract;
            // nothing else configures SQLite.
            let rc =
                unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods as *const ffi::sqlite3_mem_methods) };
            if rc != ffi::SQLITE_OK {
                return Err(format!("SQLite refused mimalloc as its allocator (code {rc})"));
            }
        }
        // SAFETY: as above; a flag.
        let rc = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as c_int) };
        if rc != ffi::SQLITE_OK {
            return Err(format!("SQLite refused to turn its memory statistics off (code {rc})"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::ffi;

    /// The only test of this binary: SQLite must not be initialized before `install`.
    #[test]
    fn sqlite_allocates_through_mimalloc_without_statistics() {
        super::sqlite_allocator::install().unwrap();
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(100000));").unwrap();
        let n: i64 = c.query_row("SELECT length(x) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 100_000);
        // SAFETY: SQLite is initialized (the connection above); the pointer is freed once.
        unsafe {
            let p = ffi::sqlite3_malloc(1000);
            assert!(!p.is_null());
            #[cfg(feature = "mimalloc")]
            assert!(libmimalloc_sys::mi_is_in_heap_region(p), "SQLite allocated outside mimalloc");
            ffi::sqlite3_free(p);
            assert_eq!(ffi::sqlite3_memory_used(), 0, "SQLite still counts its allocations");
        }
    }
}

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use forge_lsp::{cli, hub::Hub, serve};

#[derive(Parser)]
#[command(
    name = "forge-lsp",
    version,
    about = "The Forge language server: plans, review findings and coding/auditing loops over LSP.",
    long_about = "The Forge language server: plans, review findings and coding/auditing loops over LSP.\n\nWithout a command it serves one client over stdin/stdout (like `serve --stdio`). Logs go to stderr (or --log-file), never stdout."
)]
struct Cli {
    /// Data directory (database and loop worktrees). Default: FORGE_DATA_DIR, $XDG_DATA_HOME/forge-lsp, ~/.local/share/forge-lsp.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Write logs to this file instead of stderr.
    #[arg(long, global = true, value_name = "FILE")]
    log_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve LSP over stdio (default) or on a socket.
    Serve {
        /// Serve one connection over stdin/stdout.
        #[arg(long, conflicts_with = "listen")]
        stdio: bool,
        /// Accept many connections sharing one state: unix:PATH or tcp:127.0.0.1:PORT.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Run one Forge tool and print its text (or the whole result with --json).
    Call {
        /// Tool name, e.g. plan-read (see the list below).
        tool: String,
        /// The tool's input: one JSON object, or - to read it from stdin.
        input: Option<String>,
        /// Print the whole result ({ text, data }) as JSON.
        #[arg(long)]
        json: bool,
        /// Calling agent: user (default, or FORGE_AGENT), architect, code, auditor, auditor-loop, minion.
        #[arg(long)]
        agent: Option<String>,
        /// Session id (default: FORGE_SESSION_ID, else a fresh id).
        #[arg(long)]
        session: Option<String>,
        /// The project (a directory in a git repository); default: the working directory's.
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
        /// Say on stderr which route the call took: the loop's server, the project's running
        /// server (and its socket), or in-process.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Serve the Forge tools to an MCP agent over stdin/stdout (Model Context Protocol).
    ///
    /// Identity and project as for `call`: FORGE_SESSION_ID + FORGE_SESSION_TOKEN (a loop
    /// session), else --agent and --session; inside a loop the calls go through
    /// FORGE_LSP_SOCKET. FORGE_MCP_STRUCTURED_CONTENT=off leaves structuredContent out of
    /// results. See docs/mcp.md.
    Mcp {
        /// Calling agent: user (default, or FORGE_AGENT), architect, code, auditor, auditor-loop, minion.
        #[arg(long)]
        agent: Option<String>,
        /// Session id (default: FORGE_SESSION_ID, else a fresh id for this process).
        #[arg(long)]
        session: Option<String>,
        /// The project (a directory in a git repository); default: the working directory's.
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Show it working: a two-section coding/auditing loop with a scripted agent in a
    /// temporary repository (no model, no network; a few seconds). It has a data directory
    /// of its own there: `--data-dir` is not used.
    Demo {
        /// Keep the temporary repository and data directory, to look again or open them in an editor.
        #[arg(long)]
        keep: bool,
    },
    /// The demo's scripted agent (started by the demo's loop, not by hand).
    #[command(hide = true)]
    DemoAgent,
    /// Remove old session plans, or one loop with its worktree and forge/ branch.
    Cleanup {
        #[command(subcommand)]
        what: cli::cleanup::CleanupCmd,
    },
}

fn init_logging(file: Option<&PathBuf>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FORGE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A log line that cannot be written (stderr closed by whoever started us) is dropped:
    // reporting that on stderr would panic, and a panic while stdin is read by a blocking
    // thread hangs the process instead of letting it shut down.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).log_internal_errors(false);
    // A new log file is private (0600): it can hold plan text and paths.
    let opened = file.map(|f| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(f).map_err(|e| (f, e))
    });
    match opened {
        Some(Ok(f)) => builder.with_writer(std::sync::Mutex::new(f)).init(),
        Some(Err((f, e))) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "forge-lsp: cannot open the log file {}: {e}; logging to stderr",
                f.display()
            );
            builder.with_writer(std::io::stderr).init()
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
}

fn main() {
    let sqlite = sqlite_allocator::install();
    let mut cmd = Cli::command();
    // The list of tools is only shown by `call --help` (or `help call`): not built otherwise.
    if std::env::args_os().skip(1).any(|a| a == "--help" || a == "-h" || a == "help") {
        cmd = cmd.mut_subcommand("call", |c| c.after_help(cli::call::tools_help()));
    }
    let matches = cmd.get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    init_logging(cli.log_file.as_ref());
    if let Err(e) = sqlite {
        tracing::warn!("{e}");
    }
    // A write staged over many folders holds one descriptor per folder (review YO).
    if let Some((before, after)) = forge_core::limits::raise() {
        tracing::debug!("open files limit raised from {before} to {after}");
    }
    // `--data-dir ~name/…`, or `~/…` with no home directory, is refused: taken as written it
    // made a folder named `~` or `~name` in the project (a review).
    if let Some(d) = &cli.data_dir {
        if let Err(e) = forge_core::project::expand_home(d) {
            eprintln!("forge-lsp: --data-dir {}: {e}; give an absolute path", d.display());
            std::process::exit(2);
        }
    }
    match cli.command {
        Some(Cmd::Call { tool, input, json, agent, session, project, verbose }) => {
            let code = cli::call::run(cli::call::CallArgs {
                tool,
                input,
                json,
                // An agent started by forge-lsp says what it is (FORGE_AGENT).
                agent: agent.or_else(|| std::env::var("FORGE_AGENT").ok().filter(|a| !a.trim().is_empty())),
                session,
                data_dir: cli.data_dir,
                project,
                verbose,
            });
            std::process::exit(code);
        }
        Some(Cmd::Mcp { agent, session, project }) => {
            // As for `call`: an agent started by forge-lsp says what it is (FORGE_AGENT).
            let agent = agent.or_else(|| std::env::var("FORGE_AGENT").ok().filter(|a| !a.trim().is_empty()));
            // An MCP client ends this process with SIGTERM: the plugin tools it runs go too.
            forge_tools::plugins::on_signal_kill_running_tools();
            let code = forge_lsp_mcp::run(forge_lsp_mcp::McpArgs { agent, session, data_dir: cli.data_dir, project });
            std::process::exit(code);
        }
        Some(Cmd::Demo { keep }) => {
            if let Some(d) = &cli.data_dir {
                eprintln!(
                    "forge-lsp demo: --data-dir {} is not used: the demo has a data directory of its own",
                    d.display()
                );
            }
            std::process::exit(cli::demo::run(cli::demo::DemoArgs { keep }))
        }
        Some(Cmd::DemoAgent) => std::process::exit(cli::demo_agent::run()),
        Some(Cmd::Cleanup { what }) => std::process::exit(cli::cleanup::run(what, cli.data_dir)),
        Some(Cmd::Serve { listen: Some(addr), .. }) => {
            let addr = match serve::ListenAddr::parse(&addr) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("forge-lsp: {e}");
                    std::process::exit(2);
                }
            };
            let rt = runtime();
            let hub = Hub::new(cli.data_dir);
            let (hub2, hub3) = (hub.clone(), hub.clone());
            let unix_path = match &addr {
                serve::ListenAddr::Unix(p) => Some(p.clone()),
                serve::ListenAddr::Tcp(_) => None,
            };
            let r = rt.block_on(async move {
                tokio::select! {
                    r = serve::listen(hub, addr) => r,
                    sig = serve::shutdown_signal() => {
                        tracing::warn!("{sig}: shutting down");
                        hub2.shutdown().await;
                        Ok(())
                    }
                }
            });
            // Only a socket this process bound: after a failed bind it may be another server's.
            if let (Some(p), true) = (&unix_path, r.is_ok()) {
                serve::remove_listen_socket(p);
            }
            serve::remove_private_socket(&hub3);
            if let Err(e) = r {
                eprintln!("forge-lsp: {e}");
                std::process::exit(1);
            }
            std::process::exit(0);
        }
        Some(Cmd::Serve { .. }) | None => {
            let rt = runtime();
            let hub = Hub::new(cli.data_dir);
            let clean = rt.block_on(serve::stdio_with_hint(hub.clone()));
            serve::remove_private_socket(&hub);
            // tokio's blocking stdin read can keep the runtime alive: exit now. LSP: 1 when
            // the client ended the connection without `shutdown`.
            std::process::exit(if clean { 0 } else { 1 });
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}
