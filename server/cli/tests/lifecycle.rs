//! The LSP lifecycle over stdio (PROTOCOL.md §1, §2): capabilities, server info, position
//! encoding, shutdown/exit, the project id, the data directory, agents, loop-session claims
//! and databases the server must refuse without touching them.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const EXPECTED_COMMANDS: &[&str] = &["forge.plan-read", "forge.plan-write", "forge.plan-edit", "forge.tools"];

#[test]
fn initialize_announces_capabilities_and_server_info() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    let r = c.init(&Init::new(&repo.path).utf8(true));
    let caps = &r["capabilities"];

    assert_eq!(caps["textDocumentSync"]["openClose"], json!(true), "{caps}");
    assert_eq!(caps["textDocumentSync"]["change"], json!(1), "full sync: {caps}");
    let commands: Vec<&str> = caps["executeCommandProvider"]["commands"]
        .as_array()
        .unwrap_or_else(|| panic!("executeCommandProvider.commands: {caps}"))
        .iter()
        .map(|c| c.as_str().expect("command name"))
        .collect();
    for cmd in EXPECTED_COMMANDS {
        assert!(commands.contains(cmd), "{cmd} missing from {commands:?}");
    }
    assert!(commands.iter().all(|c| c.starts_with("forge.")), "{commands:?}");
    assert_eq!(caps["workspace"]["textDocumentContent"]["schemes"], json!(["forge"]), "{caps}");
    assert_eq!(caps["documentSymbolProvider"], json!(true));
    assert_eq!(caps["foldingRangeProvider"], json!(true));
    assert_eq!(caps["codeLensProvider"]["resolveProvider"], json!(false));
    assert!(
        caps["codeActionProvider"] == json!(true) || caps["codeActionProvider"].is_object(),
        "codeActionProvider: {caps}"
    );
    assert_eq!(caps["experimental"]["forge"]["protocolVersion"], json!(1));
    assert_eq!(caps["experimental"]["forge"]["tools"], json!(true));
    let session = caps["experimental"]["forge"]["sessionId"].as_str().expect("sessionId");
    assert!(session.starts_with("ses_") && session.len() > 10, "fresh session id: {session}");
    assert_eq!(caps["positionEncoding"], json!("utf-8"), "utf-8 was offered");

    assert_eq!(r["serverInfo"]["name"], json!("forge-lsp"));
    assert_eq!(r["serverInfo"]["version"], json!(env!("CARGO_PKG_VERSION")));

    let (status, took) = c.shutdown_exit().expect("stdio server");
    println!("exit took {took:?}");
    assert_eq!(status.code(), Some(0), "exit code after shutdown+exit{}", c.diagnostics());
    assert!(took < Duration::from_secs(5), "the server should exit quickly after `exit`, took {took:?}");
}

#[test]
fn position_encoding_is_utf16_unless_utf8_is_offered() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    let r = c.init(&Init::new(&repo.path));
    let enc = &r["capabilities"]["positionEncoding"];
    assert!(enc.is_null() || enc == &json!("utf-16"), "positionEncoding {enc}");
}

#[test]
fn every_connection_gets_a_fresh_session_unless_it_names_one() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut a = sb.stdio();
    let mut b = sb.stdio();
    a.init(&Init::new(&repo.path));
    b.init(&Init::new(&repo.path));
    assert_ne!(a.session_id(), b.session_id());
    let mut named = sb.stdio();
    named.init(&Init::new(&repo.path).session("ses_chosen_by_client"));
    assert_eq!(named.session_id(), "ses_chosen_by_client");
}

#[test]
fn project_id_is_the_root_commit_hash() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    // A second commit: the id stays the root commit's.
    std::fs::write(repo.path.join("src.txt"), "x\n").unwrap();
    repo.git(&["add", "src.txt"]);
    repo.git(&["commit", "-q", "-m", "second"]);
    assert_ne!(repo.git(&["rev-parse", "HEAD"]), repo.root_commit);

    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    c.tool_ok("plan-write", json!({ "content": "# Project id plan\nbody" }));
    let recent = c.tool_ok("plan-read", json!({ "recent": true }));
    let header = format!("Recent plans for project {} (1 found)", repo.root_commit);
    assert!(recent.text.starts_with(&header), "{:?}", recent.text);

    let index = c.content(INDEX_URI).expect("index document");
    assert!(index.starts_with(&format!("# Forge: project {}", repo.root_commit)), "{index}");

    // The command line, run in the repository, sees the same project and plan.
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with(&header), "{out:?}");
}

#[test]
fn project_id_with_root_uri_only() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path).root_uri_only());
    let index = c.content(INDEX_URI).expect("index");
    assert!(index.starts_with(&format!("# Forge: project {}", repo.root_commit)), "{index}");
}

/// `file://localhost/<path>` names the local folder (RFC 8089); a `file:` URI of another
/// host is refused by name instead of serving the global project.
#[test]
fn a_root_uri_of_localhost_is_the_local_folder() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = sb.stdio();
    let e = c
        .request("initialize", json!({ "processId": null, "rootUri": "file://fileserver/share/p", "capabilities": {} }))
        .expect_err("another host");
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("host \"fileserver\""), "{e}");
    let uri = format!("file://localhost{}", repo.path.display());
    c.request("initialize", json!({ "processId": null, "rootUri": uri, "capabilities": {} })).expect("initialize");
    c.notify("initialized", json!({}));
    let index = c.content(INDEX_URI).expect("index");
    assert!(index.starts_with(&format!("# Forge: project {}", repo.root_commit)), "{index}");
}

#[test]
fn a_folder_without_a_commit_is_the_global_project() {
    let sb = Sandbox::new();
    let (_keep, plain) = plain_dir();
    let (_keep2, empty_repo) = plain_dir();
    git(&empty_repo, &["init", "-q"]);
    for folder in [&plain, &empty_repo] {
        let mut c = sb.stdio();
        c.init(&Init::new(folder));
        let index = c.content(INDEX_URI).expect("index");
        assert!(index.starts_with("# Forge: project global"), "{folder:?}: {index}");
    }
    let mut c = sb.stdio();
    c.init(&Init::new(&plain));
    c.tool_ok("plan-write", json!({ "content": "# Global plan" }));
    let recent = c.tool_ok("plan-read", json!({ "recent": true }));
    assert!(recent.text.starts_with("Recent plans for project global (1 found)"), "{:?}", recent.text);
}

#[test]
fn initialization_option_data_dir_wins() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let chosen = sb.root.join("chosen-data");
    // The process has --data-dir; the initialization option takes precedence.
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path).data_dir(&chosen));
    let out = c.tool_ok("plan-write", json!({ "content": "# Stored in the chosen dir" }));
    assert_eq!(out.data["written"], json!(true));
    assert!(chosen.join("forge.db").exists(), "forge.db in the dataDir option");
    assert!(!sb.db_path().exists(), "--data-dir must not be used when the option is set");
    let db = Db::open(&chosen.join("forge.db"));
    assert_eq!(db.session_plan(&repo.root_commit, &c.session_id()).as_deref(), Some("# Stored in the chosen dir"));

    // Without --data-dir and without the option: $XDG_DATA_HOME/forge-lsp.
    let mut d = sb.stdio_with(|_| {});
    d.init(&Init::new(&repo.path));
    d.tool_ok("plan-write", json!({ "content": "# Default data dir" }));
    assert!(sb.data_home.join("forge-lsp/forge.db").exists(), "XDG_DATA_HOME default");

    // A relative dataDir is the workspace folder's, not the server's working directory's;
    // without a folder it is refused, naming the option.
    let mut e = sb.stdio();
    e.init(&Init::new(&repo.path).data_dir(std::path::Path::new("rel-data")));
    e.tool_ok("plan-write", json!({ "content": "# Relative" }));
    assert!(repo.path.join("rel-data/forge.db").exists(), "a relative dataDir is taken from the folder");
    let f = sb.stdio();
    let err = f.initialize(&Init::rootless().data_dir(std::path::Path::new("rel-data"))).expect_err("refused");
    assert_eq!(err.code, -32602, "{err}");
    assert!(err.message.contains("initializationOptions.forge.dataDir \"rel-data\" is a relative path"), "{err}");

    // `~//x` is the home directory's `x`, as in FORGE_DATA_DIR (it was `/x`); `~` with no
    // absolute HOME is refused, naming why.
    let home = sb.root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut g = sb.stdio_with(|c| {
        c.env("HOME", &home);
    });
    g.init(&Init::new(&repo.path).data_dir(std::path::Path::new("~//init-data")));
    g.tool_ok("plan-write", json!({ "content": "# Home" }));
    assert!(home.join("init-data/forge.db").exists(), "{}", g.diagnostics());
    let h = sb.stdio_with(|c| {
        c.env("HOME", "rel-home").env("FORGE_TEST_PASSWD_HOME", "");
    });
    let err = h.initialize(&Init::new(&repo.path).data_dir(std::path::Path::new("~/x"))).expect_err("refused");
    assert_eq!(err.code, -32602, "{err}");
    assert!(err.message.contains("`~` names the home directory, but HOME is not an absolute path"), "{err}");
    let u = sb.stdio();
    let err = u.initialize(&Init::new(&repo.path).data_dir(std::path::Path::new("~someone/x"))).expect_err("refused");
    assert!(
        err.message.ends_with("`~someone` (a named user's home directory) is not expanded; give an absolute path"),
        "{err}"
    );
}

#[test]
fn an_unknown_agent_is_invalid_params() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    let e = c.initialize(&Init::new(&repo.path).agent("wizard")).expect_err("unknown agent");
    assert_eq!(e.code, -32602, "{e}");
    assert_contains(&e.message, "agent");
    assert_contains(&e.message, "wizard");
    assert!(c.is_alive(), "a failed initialize must not stop the server{}", c.diagnostics());
}

#[test]
fn an_unknown_initialization_option_is_invalid_params() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = sb.stdio();
    let mut init = Init::new(&repo.path);
    init.forge_extra = Some(json!({ "colour": "blue" }));
    let e = c.initialize(&init).expect_err("unknown option");
    assert_eq!(e.code, -32602, "{e}");
    assert_contains(&e.message, "colour");
    // The options are an object: a list is not read by position (agent, session, ...).
    let c = sb.stdio();
    let root = format!("file://{}", repo.path.display());
    let e = c
        .request(
            "initialize",
            json!({ "processId": null, "rootUri": root, "capabilities": {},
                    "initializationOptions": { "forge": ["code", null, null, null, null] } }),
        )
        .expect_err("a list");
    assert_eq!(e.code, -32602, "{e}");
    assert_contains(&e.message, "initializationOptions.forge must be an object");
    assert_contains(&e.message, "got a list");
}

#[test]
fn every_agent_of_the_protocol_is_accepted() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for agent in ["user", "architect", "code", "auditor", "auditor-loop", "minion"] {
        let mut c = sb.stdio();
        c.init(&Init::new(&repo.path).agent(agent));
        let out = c.tool("tools", json!({})).unwrap_or_else(|e| panic!("{agent}: forge.tools failed: {e}"));
        let offers = out.data["tools"].as_array().unwrap_or_else(|| panic!("{agent}: no tools list: {}", out.data));
        assert!(offers.iter().any(|t| t["name"] == "plan-read"), "{agent}: offers lack plan-read: {}", out.data);
    }
}

/// A loop's agent never chooses what the TTL sweeps delete: its connection (a loop
/// session) sweeps nothing, whatever `completedLoopTtlMs` it passes; the first connection
/// of the user's does, with its own configuration. Before, the first connection swept,
/// with the TTL it asked for, even one refused afterwards.
#[test]
fn only_a_users_connection_runs_the_ttl_sweeps() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let session = "ses_01JLOOPCODER0000000000000";
    loop_with_session(&sb, &repo, "running-loop", session, "tok-right");
    let old = write_aged(&sb.data_dir.join("prompts/sessions/ses_01JOUTSIDE00000000000000000-1.md"), "prompt", 2);

    // One server: a refused connection and a loop session's connection, each with a TTL
    // of its own, neither sweeping nor using up the server's one sweep.
    let server = sb.listen_unix(&sb.root.join("s/forge.sock"));
    let mut wrong = Init::new(&repo.path).session(session).config(json!({ "completedLoopTtlMs": 1 }));
    wrong.token = Some("tok-wrong".into());
    let refused = server.connect();
    refused.initialize(&wrong).expect_err("a wrong token is refused");
    let mut agent = server.connect();
    agent.init(&Init::new(&repo.path).session(session).token("tok-right").config(json!({ "completedLoopTtlMs": 1 })));
    std::thread::sleep(Duration::from_millis(500));
    assert!(old.exists(), "a loop session's or a refused connection swept");

    let mut user = server.connect();
    user.init(&Init::new(&repo.path).config(json!({ "completedLoopTtlMs": 86_400_000 })));
    let swept = wait_for(Duration::from_secs(20), || (!old.exists()).then_some(()));
    assert!(swept.is_some(), "the user's connection did not sweep");
    agent.shutdown_exit();
    user.shutdown_exit();
}

/// A loop with one coder session `session` whose token is `token`.
fn loop_with_session(sb: &Sandbox, repo: &GitRepo, loop_name: &str, session: &str, token: &str) {
    sb.ensure_db();
    let db = sb.db();
    db.insert_loop(&LoopFixture::running(&repo.root_commit, loop_name, session, &repo.path));
    db.insert_loop_session(session, &repo.root_commit, loop_name, "coder", token);
}

#[test]
fn a_loop_session_can_only_be_claimed_with_its_token() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let session = "ses_01JLOOPCODER0000000000000";
    loop_with_session(&sb, &repo, "secret-loop", session, "tok-right");

    for (label, token) in [("missing", None), ("wrong", Some("tok-wrong")), ("empty", Some(""))] {
        let c = sb.stdio();
        let mut init = Init::new(&repo.path).session(session);
        init.token = token.map(String::from);
        let e = c.initialize(&init).expect_err(label);
        assert_eq!(e.code, 1001, "{label} token: {e}");
        assert_eq!(e.kind(), Some("denied"), "{e}");
        assert_contains(&e.message, session);
        assert!(!e.message.contains("secret-loop"), "must not disclose the loop: {}", e.message);
        assert!(!e.message.contains("coder"), "must not disclose the role: {}", e.message);
    }

    let mut ok = sb.stdio();
    let r = ok.init(&Init::new(&repo.path).session(session).token("tok-right"));
    assert_eq!(r["capabilities"]["experimental"]["forge"]["sessionId"], json!(session));
    // The claimed session is a loop session: plan authoring is denied there.
    let e = ok.tool_err("plan-write", json!({ "content": "# x" }));
    assert_eq!(e.code, 1001, "{e}");
}

#[test]
fn a_corrupt_database_is_refused_and_left_untouched() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    std::fs::create_dir_all(&sb.data_dir).unwrap();
    let junk: Vec<u8> = b"definitely not an SQLite database \x00\x01\x02 ".iter().copied().cycle().take(8192).collect();
    std::fs::write(sb.db_path(), &junk).unwrap();

    let mut c = sb.stdio();
    let e = c.initialize(&Init::new(&repo.path)).expect_err("corrupt database");
    println!("corrupt database: {e}");
    assert_contains(&e.message, &sb.db_path().display().to_string());
    assert_contains(&e.message, "not a usable forge-lsp database");
    assert_eq!(std::fs::read(sb.db_path()).unwrap(), junk, "forge.db must be byte-for-byte unchanged");
    assert!(c.is_alive(), "{}", c.diagnostics());
}

/// Another program's SQLite database at the path is refused and left byte for byte as it
/// was. Before, it was switched to WAL and forge-lsp's tables were written into it (or,
/// with a `plans` table of its own, the first migration failed after the WAL switch).
#[test]
fn another_programs_sqlite_database_is_refused_and_left_untouched() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    std::fs::create_dir_all(&sb.data_dir).unwrap();
    {
        let c = rusqlite::Connection::open(sb.db_path()).unwrap();
        c.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');").unwrap();
    }
    let before = std::fs::read(sb.db_path()).unwrap();
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).run();
    assert_eq!(out.code, 1, "{out:?}");
    assert_contains(&out.stderr, "another program");
    assert_contains(&out.stderr, "-wal");
    assert_eq!(std::fs::read(sb.db_path()).unwrap(), before, "forge.db must be byte-for-byte unchanged");
    assert!(!sb.data_dir.join("forge.db-wal").exists());
}

/// The database moved away without its write-ahead log: a new database is not created
/// beside the log (SQLite would discard the writes in it); the refusal names the log.
#[test]
fn a_write_ahead_log_without_its_database_is_not_discarded() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    std::fs::create_dir_all(&sb.data_dir).unwrap();
    let wal = sb.data_dir.join("forge.db-wal");
    std::fs::write(&wal, vec![7u8; 4096]).unwrap();
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).run();
    assert_eq!(out.code, 1, "{out:?}");
    assert_contains(&out.stderr, &wal.display().to_string());
    assert_eq!(std::fs::read(&wal).unwrap(), vec![7u8; 4096]);
    assert!(!sb.db_path().exists(), "no database was created");
}

/// A data directory others may write is refused (they could replace the database); a
/// database file of ours that others may read is made 0600; a directory or database that
/// another user owns is refused (checked when the tests run as root, who can give one away).
#[test]
fn a_data_directory_or_database_others_control_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let shared = sb.root.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = sb.call("plan-read").data_dir(&shared).input(json!({ "recent": true })).cwd(&repo.path).run();
    assert_eq!(out.code, 1, "{out:?}");
    assert_contains(&out.stderr, "every user may write this directory (mode 0777)");
    assert_contains(&out.stderr, "FORGE_SHARED_DATA_DIR=1");
    assert!(!shared.join("forge.db").exists());
    // Shared on purpose: used.
    let out = sb
        .call("plan-read")
        .data_dir(&shared)
        .env("FORGE_SHARED_DATA_DIR", "1")
        .input(json!({ "recent": true }))
        .cwd(&repo.path)
        .run();
    assert_eq!(out.code, 0, "{out:?}");
    // A group directory (user-private groups, umask 002) or a sticky one is fine.
    for mode in [0o775, 0o1777] {
        let dir = sb.root.join(format!("mode-{mode:o}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = sb.call("plan-read").data_dir(&dir).input(json!({ "recent": true })).cwd(&repo.path).run();
        assert_eq!(out.code, 0, "{mode:o}: {out:?}");
    }

    std::fs::create_dir_all(&sb.data_dir).unwrap();
    std::fs::write(sb.db_path(), b"").unwrap();
    std::fs::set_permissions(sb.db_path(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = sb.call("plan-write").input(json!({ "content": "# P\n" })).cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    for f in ["forge.db", "forge.db-wal", "forge.db-shm"] {
        let p = sb.data_dir.join(f);
        if p.exists() {
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "{f}");
        }
    }

    // Another user's directory or database: refused, root included (FORGE_SHARED_DATA_DIR=1
    // for a container's mounted directory). Run as uid 65534 too where the tests run as root.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = sb.root.join("theirs");
        std::fs::create_dir_all(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(1234), Some(1234)).unwrap();
        let out = sb.call("plan-read").data_dir(&theirs).input(json!({ "recent": true })).cwd(&repo.path).run();
        assert_eq!(out.code, 1, "root too is refused another user's directory: {out:?}");
        assert_contains(&out.stderr, "FORGE_SHARED_DATA_DIR=1");
        // A database file that is a link (its chmod would reach the file it points at).
        let linked = sb.root.join("linked");
        std::fs::create_dir_all(&linked).unwrap();
        let victim = sb.root.join("victim");
        std::fs::write(&victim, "x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&victim, linked.join("forge.db-shm")).unwrap();
        let out = sb.call("plan-read").data_dir(&linked).input(json!({ "recent": true })).cwd(&repo.path).run();
        assert_eq!(out.code, 1, "{out:?}");
        assert_contains(&out.stderr, "symbolic link");
        assert_eq!(
            std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o644,
            "the link's target was changed"
        );
        let mut cmd = sb.command();
        // The sandbox's tree must be reachable by that user, and the repository its own
        // (git refuses a repository of another owner).
        std::process::Command::new("chmod").arg("a+rx").arg(&sb.root).status().unwrap();
        std::process::Command::new("chown").arg("-R").arg("65534:65534").arg(&repo.path).status().unwrap();
        cmd.arg("--data-dir").arg(&theirs).args(["call", "plan-read", r#"{"recent":true}"#]).current_dir(&repo.path);
        cmd.env("HOME", &repo.path).env("XDG_CONFIG_HOME", repo.path.join(".config"));
        // SAFETY: setuid in the child before exec; no memory is shared.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = run_process(cmd, None, CALL_TIMEOUT);
        assert_eq!(out.code, 1, "{out:?}");
        assert_contains(&out.stderr, "owned by uid 1234");
    }
}

#[test]
fn a_database_from_a_newer_forge_lsp_is_refused_and_left_untouched() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    sb.ensure_db();
    {
        let db = sb.db();
        db.conn
            .execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)", [])
            .unwrap();
        db.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    }
    let before = std::fs::read(sb.db_path()).unwrap();

    let mut c = sb.stdio();
    let e = c.initialize(&Init::new(&repo.path)).expect_err("newer schema");
    println!("newer schema: {e}");
    assert_contains(&e.message, "schema version 999");
    assert_contains(&e.message, &sb.db_path().display().to_string());
    assert_eq!(std::fs::read(sb.db_path()).unwrap(), before, "forge.db must be byte-for-byte unchanged");
    assert!(c.is_alive(), "{}", c.diagnostics());

    // The command line refuses it the same way (exit 1, message on stderr).
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&repo.path).run();
    assert_eq!(out.code, 1, "{out:?}");
    assert_contains(&out.stderr, "schema version 999");
    assert_eq!(std::fs::read(sb.db_path()).unwrap(), before);
}

#[test]
fn requests_after_shutdown_are_rejected_and_exit_still_works() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    c.request_ok("shutdown", Value::Null);
    let e = c.execute("forge.tools", None).expect_err("request after shutdown");
    assert_eq!(e.code, -32600, "LSP: requests after shutdown are InvalidRequest: {e}");
    assert!(e.message.contains("received `shutdown`") && e.message.contains("workspace/executeCommand"), "{e}");
    let e = c.request("shutdown", Value::Null).expect_err("a second shutdown");
    assert!(e.message.contains("received `shutdown`"), "{e}");
    c.notify("exit", Value::Null);
    let status = c.wait_exit(REQUEST_TIMEOUT).expect("the server exits after exit");
    assert_eq!(status.code(), Some(0));
}

/// A client may send `exit` right behind `shutdown`, in one write, without waiting for the
/// reply (`forge-lsp call` does): `shutdown` is still answered with `null`, not cancelled by
/// the `exit` read after it, and the server exits with code 0.
#[test]
fn shutdown_and_exit_in_one_write_are_a_clean_exit() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let id = c.next_request_id();
    let frame = |msg: Value| forge_protocol::framing::encode(msg.to_string().as_bytes());
    let mut both = frame(json!({ "jsonrpc": "2.0", "id": id, "method": "shutdown" }));
    both.extend(frame(json!({ "jsonrpc": "2.0", "method": "exit" })));
    c.send_raw(&both);
    let status = c.wait_exit(REQUEST_TIMEOUT).expect("the server exits after exit");
    let reply = c.wait_response(id, REQUEST_TIMEOUT);
    assert_eq!(reply.get("result"), Some(&Value::Null), "{reply}");
    assert_eq!(status.code(), Some(0));
}

/// `shutdown` takes no params: empty ones (`{}`, some clients send them) are accepted;
/// others are refused (-32602) without shutting the server down, so a proper `shutdown`
/// still works and `exit` is still a clean exit.
#[test]
fn shutdown_with_params_is_accepted_when_empty_and_refused_without_effect_otherwise() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e = c.request("shutdown", json!({ "force": true })).expect_err("params refused");
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("not shut down"), "{e}");
    c.execute("forge.tools", None).expect("the server still serves");
    assert_eq!(c.request("shutdown", json!({})), Ok(Value::Null));
    c.notify("exit", Value::Null);
    let status = c.wait_exit(REQUEST_TIMEOUT).expect("the server exits after exit");
    assert_eq!(status.code(), Some(0));
}

/// A `shutdown` sent before `initialize` is refused (-32002) and shuts nothing down: after
/// the `initialize`, requests still take the server's own path (its parameter check names
/// the field), and `shutdown` then `exit` is a clean exit.
#[test]
fn a_shutdown_refused_before_initialize_shuts_nothing_down() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    let e = c.request("shutdown", Value::Null).expect_err("refused before initialize");
    assert_eq!(e.code, -32002, "{e}");
    c.init(&Init::new(&repo.path));
    let e = c
        .request("workspace/executeCommand", json!({ "command": "forge.tools", "arguments": { "a": 1 } }))
        .expect_err("arguments not a list");
    assert!(e.message.contains("arguments"), "the server's own check answered: {e}");
    c.execute("forge.tools", None).expect("the server serves");
    let (status, _) = c.shutdown_exit().expect("stdio server");
    assert_eq!(status.code(), Some(0));
}

/// LSP: `initialize` once per connection; a second one is refused with a message that says
/// so (the framework's own is a bare "Invalid request"), and the session goes on.
#[test]
fn a_second_initialize_is_refused_and_says_why() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e =
        c.request("initialize", json!({ "processId": null, "rootUri": null, "capabilities": {} })).expect_err("twice");
    assert_eq!(e.code, -32600, "{e}");
    assert!(e.message.contains("`initialize` was already received"), "{e}");
    c.execute("forge.tools", None).expect("the session goes on");
    let (status, _) = c.shutdown_exit().expect("stdio server");
    assert_eq!(status.code(), Some(0));
}

/// Two `initialize` requests written at once, the second before the first is answered:
/// the second is refused, and the connection is initialized and serves (documents and
/// `shutdown` included). Before, both ran; the second's refusal put the framework back to
/// "not initialized", every request it handles got -32002 for good, and `exit` was exit
/// code 1 (review BB).
#[test]
fn an_initialize_sent_while_the_first_runs_is_refused_and_the_first_holds() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    let params = Init::new(&repo.path).params();
    let frame = |msg: Value| forge_protocol::framing::encode(msg.to_string().as_bytes());
    let (a, b) = (c.next_request_id(), c.next_request_id());
    let mut both = frame(json!({ "jsonrpc": "2.0", "id": a, "method": "initialize", "params": params }));
    both.extend(frame(json!({ "jsonrpc": "2.0", "id": b, "method": "initialize", "params": params })));
    c.send_raw(&both);
    let first = c.wait_response(a, REQUEST_TIMEOUT);
    assert!(first.get("result").is_some(), "{first}");
    let second = c.wait_response(b, REQUEST_TIMEOUT);
    assert_eq!(second["error"]["code"], json!(-32600), "{second}");
    c.notify("initialized", json!({}));
    let symbols = c.request("textDocument/documentSymbol", json!({ "textDocument": { "uri": "forge://index.md" } }));
    assert!(symbols.is_ok(), "the framework serves: {symbols:?}");
    let (status, _) = c.shutdown_exit().expect("stdio server");
    assert_eq!(status.code(), Some(0));
}

/// LSP: `exit` without a prior `shutdown` ends the server with exit code 1; so does the
/// client closing the connection without `shutdown`.
#[test]
fn exit_without_shutdown_is_exit_code_1() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    c.notify("exit", Value::Null);
    let status = c.wait_exit(REQUEST_TIMEOUT).expect("the server exits after exit");
    assert_eq!(status.code(), Some(1));
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    c.close_input();
    let status = c.wait_exit(REQUEST_TIMEOUT).expect("the server exits at the end of its input");
    assert_eq!(status.code(), Some(1));
}

/// `exit` sent as a request (with an id) is answered -32600 and the server goes on; the
/// `exit` notification after `shutdown` then ends it with code 0. Before, the framework
/// exited (code 1) without answering the id.
#[test]
fn exit_sent_as_a_request_is_refused_and_answered() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e = c.request_err("exit", Value::Null);
    assert_eq!(e.code, -32600, "{e}");
    assert!(e.message.contains("`exit` is a notification"), "{e}");
    assert!(c.is_alive(), "the server exited");
    c.tool_ok("review-read", json!({}));
    let (status, _) = c.shutdown_exit().expect("the server exits");
    assert_eq!(status.code(), Some(0));
}

/// Whether the server's standard input is in non-blocking mode (`/proc/<pid>/fdinfo/0`).
fn stdin_nonblocking(c: &Client) -> bool {
    let pid = c.pid().expect("server process");
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/0")).expect("fdinfo");
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).expect("flags line");
    let flags = u32::from_str_radix(flags.trim(), 8).expect("octal flags");
    flags & 0o4000 != 0
}

/// The capacity of the pipe that is the server's descriptor `fd` (opened again through
/// `/proc`, without blocking and read-only, so nothing is read from it or added to it).
fn pipe_capacity(c: &Client, fd: u32) -> i32 {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let pid = c.pid().expect("server process");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .expect("open the server's pipe");
    // SAFETY: F_GETPIPE_SZ on a descriptor owned by `f`.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETPIPE_SZ) }
}

/// Initializes `c`, checks how its stdin is read, runs a tool and ends the server.
fn serves_with_stdin(mut c: Client, repo: &GitRepo, nonblocking: bool) {
    c.init(&Init::new(&repo.path));
    assert_eq!(stdin_nonblocking(&c), nonblocking, "stdin non-blocking (read on the reactor){}", c.diagnostics());
    if nonblocking {
        // A plan-sized message (the bench's 2,000-line plan is 178 KB) fits in one write.
        for fd in [0, 1] {
            assert_eq!(pipe_capacity(&c, fd), 256 << 10, "capacity of the pipe on fd {fd}{}", c.diagnostics());
        }
    }
    let tools = c.tool_ok("tools", json!({}));
    assert!(tools.data["tools"].as_array().is_some_and(|t| !t.is_empty()), "{}", tools.data);
    let (status, _) = c.shutdown_exit().expect("the server exits");
    assert_eq!(status.code(), Some(0), "exit code after shutdown+exit{}", c.diagnostics());
}

#[test]
fn pipes_given_as_standard_streams_are_read_on_the_reactor() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    serves_with_stdin(sb.stdio(), &repo, true);
}

/// A new pipe: its read end and its write end.
fn new_pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors, each owned once here.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A client that made its pipe larger than [`serves_with_stdin`]'s 256 KiB keeps it: the
/// server only ever enlarges a pipe.
#[test]
fn a_pipe_the_client_made_larger_is_left_as_it_is() {
    use std::os::fd::AsRawFd;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let (read_end, write_end) = new_pipe();
    // SAFETY: F_SETPIPE_SZ with an integer argument on a descriptor owned here.
    assert!(unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) } >= 1 << 20, "F_SETPIPE_SZ");
    let log = sb.next_log("stdio-large-pipe");
    let mut cmd = sb.command();
    cmd.arg("--data-dir")
        .arg(&sb.data_dir)
        .current_dir(&repo.path)
        .stdin(std::process::Stdio::from(read_end))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(std::fs::File::create(&log).expect("log file")));
    let mut child = cmd.spawn().expect("spawn forge-lsp");
    let stdout = child.stdout.take().expect("stdout");
    let mut c = Client::of_process(Box::new(stdout), Box::new(std::fs::File::from(write_end)), child, log);
    c.init(&Init::new(&repo.path));
    assert_eq!(pipe_capacity(&c, 0), 1 << 20, "the client's larger pipe{}", c.diagnostics());
    assert_eq!(pipe_capacity(&c, 1), 256 << 10, "the pipe on fd 1{}", c.diagnostics());
    let (status, _) = c.shutdown_exit().expect("the server exits");
    assert_eq!(status.code(), Some(0), "exit code after shutdown+exit{}", c.diagnostics());
}

/// Reading them on the reactor makes the standard pipes non-blocking, a flag of the pipes'
/// open files that other processes given the same pipes share; the server puts the flags
/// back when it ends (a shell's `(forge-lsp serve; cmd) | …` gave `cmd` write errors).
#[test]
fn the_standard_pipes_are_left_blocking_when_the_server_ends() {
    use std::os::fd::{AsRawFd, OwnedFd};
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let ((in_read, in_write), (out_read, out_write)) = (new_pipe(), new_pipe());
    // Copies of the server's ends: the same open files, so the same flags.
    let (server_in, server_out) = (in_read.try_clone().unwrap(), out_write.try_clone().unwrap());
    // SAFETY: F_GETFL on descriptors owned here.
    let nonblocking = |fd: &OwnedFd| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) } & libc::O_NONBLOCK != 0;
    let log = sb.next_log("stdio-flags");
    let mut cmd = sb.command();
    cmd.arg("--data-dir")
        .arg(&sb.data_dir)
        .current_dir(&repo.path)
        .stdin(std::process::Stdio::from(in_read))
        .stdout(std::process::Stdio::from(out_write))
        .stderr(std::process::Stdio::from(std::fs::File::create(&log).expect("log file")));
    let child = cmd.spawn().expect("spawn forge-lsp");
    let mut c = Client::of_process(
        Box::new(std::fs::File::from(out_read)),
        Box::new(std::fs::File::from(in_write)),
        child,
        log,
    );
    c.init(&Init::new(&repo.path));
    assert!(nonblocking(&server_in) && nonblocking(&server_out), "read on the reactor while it runs");
    let (status, _) = c.shutdown_exit().expect("the server exits");
    assert_eq!(status.code(), Some(0), "{}", c.diagnostics());
    assert!(!nonblocking(&server_in), "stdin left non-blocking");
    assert!(!nonblocking(&server_out), "stdout left non-blocking");
}

/// Editors start the server with pipes, which it reads on the runtime's reactor; standard
/// streams that are not pipes (here a socket pair, as some launchers give; a terminal or a
/// file likewise) are served through tokio's blocking standard streams. Both must work.
#[test]
fn standard_streams_that_are_not_pipes_are_served_too() {
    use std::os::unix::net::UnixStream;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let (ours, theirs) = UnixStream::pair().expect("socket pair");
    let log = sb.next_log("stdio-socket");
    let mut cmd = sb.command();
    cmd.arg("--data-dir")
        .arg(&sb.data_dir)
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs.try_clone().expect("clone"))))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stderr(std::process::Stdio::from(std::fs::File::create(&log).expect("log file")));
    let child = cmd.spawn().expect("spawn forge-lsp");
    let c = Client::of_process(Box::new(ours.try_clone().expect("clone")), Box::new(ours), child, log);
    serves_with_stdin(c, &repo, false);
}

/// A client that sends `exit` and then neither reads nor closes its end of the pipe (what
/// a test harness or a careless launcher does) must not keep the server alive: what is
/// still queued for it is dropped once a write makes no progress for a while after `exit`.
#[test]
fn exit_ends_the_server_even_when_the_client_stopped_reading() {
    use std::io::Write;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let log = sb.next_log("stdio-not-read");
    let mut cmd = sb.command();
    cmd.arg("--data-dir")
        .arg(&sb.data_dir)
        .current_dir(&repo.path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(std::fs::File::create(&log).expect("log file")));
    let mut child = cmd.spawn().expect("spawn forge-lsp");
    let mut input = child.stdin.take().expect("stdin");
    // Kept open and, after initialize, never read: the replies (eight tool lists of
    // ~60 KB) fill the pipe.
    let mut output = child.stdout.take().expect("stdout");
    use forge_protocol::framing::{encode, Decoder, Event};
    let frame = |v: Value| encode(v.to_string().as_bytes());
    let init = frame(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "processId": null, "rootUri": file_uri(&repo.path), "capabilities": {} } }));
    input.write_all(&init).expect("write initialize");
    input.flush().expect("flush");
    // The reply to initialize, the only thing read.
    let mut dec = Decoder::new();
    let body = loop {
        if let Some(Event::Frame(body)) = dec.next_event() {
            break body;
        }
        let mut chunk = [0u8; 4096];
        let n = std::io::Read::read(&mut output, &mut chunk).expect("initialize reply");
        assert!(n > 0, "the server closed its output before answering initialize");
        dec.push(&chunk[..n]);
    };
    assert!(String::from_utf8_lossy(&body).contains("capabilities"), "{}", String::from_utf8_lossy(&body));
    let mut all = frame(json!({ "jsonrpc": "2.0", "method": "initialized", "params": {} }));
    for id in 2..10 {
        all.extend(frame(json!({ "jsonrpc": "2.0", "id": id, "method": "workspace/executeCommand",
            "params": { "command": "forge.tools", "arguments": [{}] } })));
    }
    all.extend(frame(json!({ "jsonrpc": "2.0", "id": 10, "method": "shutdown" })));
    all.extend(frame(json!({ "jsonrpc": "2.0", "method": "exit" })));
    input.write_all(&all).expect("write the session");
    input.flush().expect("flush");
    // stdin stays open too: only `exit` tells the server to go.
    let status = wait_child(&mut child, Duration::from_secs(30));
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    if status.is_none() {
        let _ = child.kill();
    }
    assert!(status.is_some(), "the server is still running 30 s after exit; its log:\n{stderr}");
    let mut sent = String::new();
    let _ = std::io::Read::read_to_string(&mut output, &mut sent);
    assert!(stderr.contains("the client stopped reading"), "{status:?}\n{stderr}\n{}", &sent[..sent.len().min(3000)]);
    drop(input);
}
