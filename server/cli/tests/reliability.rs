//! Reliability and security faults of issue 10, each over the real binary (docs/reliability.md
//! maps every promise to its test here): concurrent start on a fresh data directory, oversized
//! messages, stray bytes, lone surrogates, duplicate ids, committed `.forge` symlinks, the
//! private socket directory, file modes, a closed or full standard output, SIGTERM/SIGINT.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
}

fn ready() -> (Sandbox, GitRepo, Client) {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    (sb, repo, c)
}

#[track_caller]
fn assert_serving(c: &mut Client) {
    let r = c.tool("tools", json!({}));
    assert!(r.is_ok(), "forge.tools: {r:?}{}", c.diagnostics());
}

fn log_of(c: &Client) -> String {
    c.log.as_ref().map(|l| std::fs::read_to_string(l).unwrap_or_default()).unwrap_or_default()
}

// --- 1. concurrent start ------------------------------------------------------------------------

#[test]
fn servers_and_calls_started_at_once_on_a_fresh_data_dir_all_succeed() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for round in 0..4 {
        let data = sb.root.join(format!("fresh-{round}"));
        let servers: Vec<Client> = (0..3)
            .map(|_| {
                sb.stdio_with(|c| {
                    c.arg("--data-dir").arg(&data);
                })
            })
            .collect();
        let init = Init::new(&repo.path);
        let ids: Vec<i64> = servers.iter().map(|s| s.send_request("initialize", init.params())).collect();
        let calls: Vec<CallOutput> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3)
                .map(|i| {
                    let (sb, repo, data) = (&sb, &repo, &data);
                    scope.spawn(move || {
                        sb.call("plan-write")
                            .input(json!({ "content": format!("# plan {i}") }))
                            .session(&format!("ses_concurrent_{i}"))
                            .data_dir(data)
                            .cwd(&repo.path)
                            .run()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("call thread")).collect()
        });
        for (s, id) in servers.iter().zip(ids) {
            let r = s.wait_response(id, REQUEST_TIMEOUT);
            assert!(r.get("result").is_some(), "round {round}: initialize failed: {r}{}", s.diagnostics());
        }
        for out in &calls {
            assert_eq!(out.code, 0, "round {round}: {out:?}");
        }
        for s in &servers {
            assert!(s.tool("tools", json!({})).is_ok(), "round {round}{}", s.diagnostics());
        }
        let db = Db::open(&data.join("forge.db"));
        let embedded = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations"))
            .expect("migrations dir")
            .filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql")))
            .count() as i64;
        assert_eq!(db.count("SELECT count(*) FROM schema_migrations"), embedded, "round {round}: each migration once");
        assert_eq!(db.count("SELECT count(*) FROM plans"), 3, "round {round}");
    }
}

// --- 2. oversized messages ------------------------------------------------------------------------

#[test]
fn an_oversized_content_length_is_answered_at_once_and_its_body_skipped() {
    let (_sb, _repo, mut c) = ready();
    let len = 70_000_000usize;
    let mark = c.mark();
    c.send_raw(format!("Content-Length: {len}\r\n\r\n").as_bytes());
    // Answered before the body is sent.
    let e = c.wait_orphan_response(mark, Duration::from_secs(10)).expect("an answer before the body");
    assert_eq!(e["error"]["code"], json!(-32600), "{e}");
    assert_eq!(e["id"], Value::Null, "{e}");
    let msg = e["error"]["message"].as_str().unwrap_or("");
    assert_contains(msg, "70000000");
    assert_contains(msg, "67108864");
    let chunk = vec![b' '; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len());
        c.send_raw(&chunk[..n]);
        left -= n;
    }
    assert_serving(&mut c);
}

#[test]
fn an_absurd_content_length_is_answered_and_the_connection_closed() {
    let (_sb, _repo, mut c) = ready();
    let mark = c.mark();
    c.send_raw(b"Content-Length: 99999999999999\r\n\r\n");
    let e = c.wait_orphan_response(mark, Duration::from_secs(10)).expect("an answer");
    assert_eq!(e["error"]["code"], json!(-32600), "{e}");
    assert_contains(e["error"]["message"].as_str().unwrap_or(""), "99999999999999");
    // It says what happens: the body is not skipped, the connection closes.
    assert_contains(
        e["error"]["message"].as_str().unwrap_or(""),
        "too long to skip (over 1 GiB); the connection is closed",
    );
    assert!(!e["error"]["message"].as_str().unwrap_or("").contains("is skipped"), "{e}");
    let status = c.wait_exit(REQUEST_TIMEOUT).expect("the stdio server ends with its connection");
    // A connection that ends without `shutdown`: exit code 1 (LSP), not a crash.
    assert_eq!(status.code(), Some(1));
    assert_contains(&log_of(&c), "closing the connection");
}

// --- 3c. stray bytes, lone surrogates, duplicate ids ---------------------------------------------

#[test]
fn a_stray_byte_before_a_frame_loses_nothing() {
    let (_sb, _repo, mut c) = ready();
    for stray in [&b"x"[..], b"\x00", b"}\r\n", b"garbage that is long enough to be skipped\n"] {
        let mark = c.mark();
        let id = c.next_request_id();
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "workspace/executeCommand", "params": { "command": "forge.tools" } }).to_string();
        let mut bytes = stray.to_vec();
        bytes.extend_from_slice(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
        c.send_raw(&bytes);
        let r = c.wait_response(id, REQUEST_TIMEOUT);
        assert!(r["result"]["data"]["tools"].is_array(), "{stray:?}: {r}");
        let e = c.wait_orphan_response(mark, REQUEST_TIMEOUT).expect("one parse error for the stray bytes");
        assert_eq!(e["error"]["code"], json!(-32700), "{e}");
        assert_serving(&mut c);
    }
}

#[test]
fn a_lone_surrogate_gets_an_error_for_its_id() {
    let (_sb, _repo, mut c) = ready();
    let id = c.next_request_id();
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"workspace/executeCommand","params":{{"command":"forge.plan-write","arguments":[{{"content":"a\ud800b"}}]}}}}"#
    );
    c.send_body(body.as_bytes());
    let r = c.wait_response(id, REQUEST_TIMEOUT);
    assert_eq!(r["error"]["code"], json!(-32600), "{r}");
    assert_contains(r["error"]["message"].as_str().unwrap_or(""), "surrogate");
    assert_serving(&mut c);
}

#[test]
fn a_duplicate_in_flight_id_is_refused_with_a_reason() {
    let (_sb, _repo, mut c) = ready();
    let big = "x".repeat(4_000_000);
    let slow = json!({ "jsonrpc": "2.0", "id": "dup", "method": "workspace/executeCommand", "params": { "command": "forge.plan-write", "arguments": [{ "content": big }] } }).to_string();
    let fast = json!({ "jsonrpc": "2.0", "id": "dup", "method": "workspace/executeCommand", "params": { "command": "forge.tools" } }).to_string();
    let mut bytes = format!("Content-Length: {}\r\n\r\n{slow}", slow.len()).into_bytes();
    bytes.extend_from_slice(format!("Content-Length: {}\r\n\r\n{fast}", fast.len()).as_bytes());
    let mark = c.mark();
    c.send_raw(&bytes);
    let both = c
        .wait_until(REQUEST_TIMEOUT, |s| {
            let v: Vec<Value> = s.orphan_responses[mark.orphan_responses..].iter().map(|r| r.msg.clone()).collect();
            (v.len() >= 2).then_some(v)
        })
        .expect("two answers");
    let err = both.iter().find(|r| r.get("error").is_some()).expect("an error for the duplicate");
    assert_eq!(err["id"], json!("dup"), "{err}");
    assert_eq!(err["error"]["code"], json!(-32600), "{err}");
    assert_contains(err["error"]["message"].as_str().unwrap_or(""), "already in use");
    assert!(
        both.iter().any(|r| r["result"]["text"].as_str().is_some_and(|t| t.starts_with("Plan stored"))),
        "{both:?}"
    );
    assert_serving(&mut c);
}

// --- 3. committed .forge symlinks -----------------------------------------------------------------

#[test]
fn committed_forge_symlinks_are_never_followed() {
    for link in [".forge", ".forge/view", ".forge/view/plan"] {
        let sb = Sandbox::new();
        let repo = GitRepo::new();
        let outside = sb.mkdir("outside");
        std::fs::write(outside.join("index.md"), "precious").expect("write");
        let at = repo.path.join(link);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(&outside, &at).expect("symlink");
        repo.commit_all("a link");
        let mut c = sb.stdio();
        c.init(&Init::new(&repo.path).text_document_content(false));
        c.tool_ok("plan-write", json!({ "content": GOOD_PLAN }));
        let told = c.wait_notification(WAIT, |n| {
            n.method() == "window/showMessage"
                && n.params()["message"].as_str().is_some_and(|m| m.contains("symbolic link"))
        });
        assert!(told.is_some(), "{link}: the user is told{}", c.diagnostics());
        std::thread::sleep(QUIET);
        let entries: Vec<String> = std::fs::read_dir(&outside)
            .expect("outside")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(entries, ["index.md"], "{link}: something was written outside the project");
        assert_eq!(std::fs::read_to_string(outside.join("index.md")).expect("read"), "precious", "{link}");
        assert!(std::fs::symlink_metadata(&at).expect("link").file_type().is_symlink(), "{link}");
        assert_contains(&log_of(&c), "symbolic link");
        assert_serving(&mut c);
    }
}

// --- 3b. the private socket directory --------------------------------------------------------------

/// A project whose loops would start (agent configured, no sandbox).
fn loop_project() -> GitRepo {
    let repo = GitRepo::new();
    // Not committed: a committed project file may not pick the agent or turn the sandbox
    // off (forge_core::config::LOCAL_KEYS).
    repo.write_project_config("[agent]\ncommand = [\"sleep\", \"60\"]\n\n[sandbox]\nenabled = false\n");
    repo
}

const PLAN: &str =
    "# Hold\n\n## Objective\nWait.\n\n<!-- forge-section -->\n## Only step\nWait.\n\n## Verification\n- none\n";

#[test]
fn a_private_socket_directory_that_is_not_ours_is_refused() {
    for case in ["mode 0777", "symlink"] {
        let sb = Sandbox::new();
        let repo = loop_project();
        let dir = sb.runtime_dir.join("forge-lsp");
        let target = sb.mkdir("elsewhere");
        match case {
            "mode 0777" => {
                std::fs::create_dir(&dir).expect("mkdir");
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
            }
            _ => {
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).expect("chmod");
                std::os::unix::fs::symlink(&target, &dir).expect("symlink");
            }
        }
        let mut c = sb.stdio();
        c.init(&Init::new(&repo.path));
        // Still serving over stdio.
        assert_serving(&mut c);
        let e = c.tool_err("execute-plan", json!({ "title": "Hold", "plan": PLAN }));
        assert_eq!(e.code, 1004, "{case}: {e}");
        assert_contains(&e.message, "private callback socket");
        let log = log_of(&c);
        assert_contains(&log, if case == "symlink" { "symbolic link" } else { "mode 0777" });
        if case == "mode 0777" {
            assert_eq!(mode(&dir), 0o777, "an existing directory is not changed");
            assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 0, "nothing created in it");
        } else {
            assert_eq!(std::fs::read_dir(&target).expect("dir").count(), 0, "the link was not followed");
        }
        assert_eq!(sb.db().count("SELECT count(*) FROM loops"), 0, "{case}");
    }
}

#[test]
fn without_xdg_runtime_dir_the_socket_directory_is_private_and_unpredictable() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let tmp = sb.mkdir("tmp");
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--data-dir").arg(&sb.data_dir).env_remove("XDG_RUNTIME_DIR").env("TMPDIR", &tmp);
    });
    c.init(&Init::new(&repo.path));
    let dirs: Vec<PathBuf> = std::fs::read_dir(&tmp).expect("tmp").flatten().map(|e| e.path()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let name = dirs[0].file_name().expect("name").to_string_lossy().into_owned();
    assert!(name.starts_with("forge-lsp-") && name.len() == "forge-lsp-".len() + 6, "{name}");
    assert_eq!(mode(&dirs[0]), 0o700);
    assert_eq!(mode(&dirs[0].join("forge.sock")), 0o600);
    let out = sb.call("tools").env("FORGE_LSP_SOCKET", dirs[0].join("forge.sock")).cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    c.shutdown_exit();
    assert!(!dirs[0].exists(), "the private directory is removed on exit");
}

/// A socket directory left by a server that was killed (SIGKILL runs no cleanup) is
/// removed by the next server that starts, once its socket is old and no one listens on
/// it; a live server's, a young one and a directory holding more are left.
#[test]
fn a_killed_servers_socket_directory_is_swept_by_the_next_server() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let tmp = sb.mkdir("tmp");
    let listing = || -> Vec<PathBuf> { std::fs::read_dir(&tmp).expect("tmp").flatten().map(|e| e.path()).collect() };
    let start = || {
        let mut c = sb.stdio_with(|cmd| {
            cmd.arg("--data-dir").arg(&sb.data_dir).env_remove("XDG_RUNTIME_DIR").env("TMPDIR", &tmp);
        });
        c.init(&Init::new(&repo.path));
        c
    };
    // Starts a server and SIGKILLs it (the client's drop): its directory and socket stay.
    let killed = || -> PathBuf {
        let before = listing();
        let c = start();
        let dir = listing().into_iter().find(|d| !before.contains(d)).expect("a new socket directory");
        drop(c);
        assert!(dir.join("forge.sock").exists(), "SIGKILL leaves the socket");
        dir
    };
    // Made old (the sweep leaves sockets younger than a minute: a starting server's).
    let age = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
        let t = libc::timespec { tv_sec: 1_000_000_000, tv_nsec: 0 };
        // SAFETY: a valid NUL-terminated path and two timespecs.
        let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
        assert_eq!(r, 0, "utimensat {}", p.display());
    };
    let left = killed();
    age(&left.join("forge.sock"));
    let crowded = killed();
    age(&crowded.join("forge.sock"));
    std::fs::write(crowded.join("keep"), "x").expect("write");
    let young = killed();

    let mut c = start();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while left.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!left.exists(), "the old dead socket's directory is removed");
    assert!(crowded.join("keep").exists() && young.join("forge.sock").exists());
    assert_eq!(listing().len(), 3, "the crowded, the young and the live server's: {:?}", listing());
    c.shutdown_exit();
}

// --- 4. file modes --------------------------------------------------------------------------------

#[test]
fn the_data_dir_is_0700_and_the_database_0600_whatever_the_umask() {
    for umask in [0o022, 0o000] {
        let sb = Sandbox::new();
        let repo = GitRepo::new();
        let mut c = sb.stdio_with(|cmd| {
            cmd.arg("--data-dir").arg(&sb.data_dir);
            // SAFETY: umask is async-signal-safe and only changes the child's mask.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(umask);
                    Ok(())
                });
            }
        });
        c.init(&Init::new(&repo.path));
        c.tool_ok("plan-write", json!({ "content": "# x" }));
        assert_eq!(mode(&sb.data_dir), 0o700, "umask {umask:o}");
        for f in ["forge.db", "forge.db-wal", "forge.db-shm"] {
            assert_eq!(mode(&sb.data_dir.join(f)), 0o600, "{f} with umask {umask:o}");
        }
        c.shutdown_exit();
    }
    // The --log-file is private too (it can hold plan text and paths); one that cannot be
    // opened is said on stderr, and the server logs there instead.
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let log = sb.root.join("server.log");
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--log-file").arg(&log).env("FORGE_LOG", "debug");
        // SAFETY: as above.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o022);
                Ok(())
            });
        }
    });
    c.init(&Init::new(&repo.path));
    c.tool_ok("plan-write", json!({ "content": "# logged" }));
    c.shutdown_exit();
    assert_eq!(mode(&log), 0o600, "the log file");
    assert!(std::fs::metadata(&log).unwrap().len() > 0, "something was logged");
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--log-file").arg(&sb.root);
    });
    c.init(&Init::new(&repo.path));
    let stderr = std::fs::read_to_string(c.log.clone().unwrap()).unwrap();
    assert!(stderr.contains("cannot open the log file") && stderr.contains("logging to stderr"), "{stderr}");
    c.shutdown_exit();
    // An existing data directory keeps its mode; the database is still created 0600.
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    std::fs::create_dir(&sb.data_dir).expect("mkdir");
    std::fs::set_permissions(&sb.data_dir, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let out = sb.call("plan-write").input(json!({ "content": "# x" })).session("ses_modes").cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(mode(&sb.data_dir), 0o750);
    assert_eq!(mode(&sb.db_path()), 0o600);
}

// --- 6. a closed or full standard output ------------------------------------------------------------

#[test]
fn call_with_a_closed_or_full_stdout_ends_without_a_panic() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    sb.ensure_db();
    let run = |stdout: Stdio| {
        let mut cmd = sb.command();
        cmd.arg("--data-dir").arg(&sb.data_dir).args(["call", "tools", "--json"]).current_dir(&repo.path);
        cmd.stdout(stdout).stderr(Stdio::piped()).stdin(Stdio::null());
        cmd
    };
    // Closed pipe: the reading end is gone before the call writes (like `| head -1` after
    // its line): exit 141 and nothing said, as other command-line tools.
    let mut child = run(Stdio::piped()).spawn().expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert_eq!(stderr, "");
    // A full disk.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let out = run(Stdio::from(full)).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_contains(&stderr, "No space left");
}

// --- 7. SIGTERM / SIGINT ---------------------------------------------------------------------------

fn signal(pid: u32, sig: i32) {
    // SAFETY: sends a signal to our own child process.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0, "kill {pid}");
}

fn registered_socket(sb: &Sandbox) -> PathBuf {
    let db = sb.db();
    let s: String =
        db.conn.query_row("SELECT socket_path FROM servers LIMIT 1", [], |r| r.get(0)).expect("a registered server");
    PathBuf::from(s)
}

fn start_holding_loop(sb: &Sandbox, c: &Client) -> String {
    let _ = sb;
    let out = c.tool_ok("execute-plan", json!({ "title": "Hold", "plan": PLAN }));
    out.data["loopName"].as_str().expect("loopName").to_string()
}

fn assert_loop_shut_down(sb: &Sandbox, name: &str) {
    let (status, reason): (String, Option<String>) = sb
        .db()
        .conn
        .query_row("SELECT status, termination_reason FROM loops WHERE loop_name = ?1", [name], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("loop row");
    assert_ne!(status, "running");
    assert_eq!(reason.as_deref(), Some("shutdown"), "{status}");
}

#[test]
fn sigterm_and_sigint_shut_a_listen_server_down_cleanly() {
    // SIGHUP too: a terminal closed under `forge-lsp serve --listen … &` (before, it killed
    // the server without cleanup: the listen socket stayed and the loop was not ended).
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let sb = Sandbox::new();
        let repo = loop_project();
        let sock = sb.root.join("listen/forge.sock");
        let mut server = sb.listen_unix(&sock);
        let mut c = server.connect();
        c.init(&Init::new(&repo.path));
        let private = registered_socket(&sb);
        assert_ne!(private, sock, "loops get a private socket, not the listen socket");
        assert!(private.exists());
        let name = start_holding_loop(&sb, &c);
        signal(server.pid(), sig);
        assert!(wait_for(REQUEST_TIMEOUT, || (!server.is_alive()).then_some(())).is_some(), "still running");
        assert!(!sock.exists(), "signal {sig}: the listen socket is removed");
        assert!(!private.exists(), "signal {sig}: the private socket is removed");
        assert!(!private.parent().expect("dir").exists(), "signal {sig}: its directory too");
        assert_loop_shut_down(&sb, &name);
    }
}

#[test]
fn sigterm_shuts_a_stdio_server_down_cleanly() {
    let sb = Sandbox::new();
    let repo = loop_project();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let private = c.private_socket().expect("private socket");
    assert!(private.exists());
    let name = start_holding_loop(&sb, &c);
    signal(c.pid().expect("pid"), libc::SIGTERM);
    let status = c.wait_exit(REQUEST_TIMEOUT).expect("exits after SIGTERM");
    assert_eq!(status.code(), Some(0));
    assert!(!private.exists(), "the private socket is removed");
    assert_loop_shut_down(&sb, &name);
}

/// A server started with SIGHUP ignored (`nohup`) keeps serving when it gets one.
#[test]
fn a_server_started_under_nohup_outlives_a_hangup() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio_with(|cmd| {
        // SAFETY: signal() is async-signal-safe; it only changes the child's disposition.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
                Ok(())
            });
        }
    });
    c.init(&Init::new(&repo.path));
    signal(c.pid().expect("pid"), libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(200));
    assert!(c.is_alive(), "SIGHUP ignored at start is still ignored");
    c.tool_ok("review-read", json!({}));
    c.shutdown_exit();
}

// --- 5. serve --listen and the loop sandbox ----------------------------------------------------------

#[test]
fn a_sandboxed_command_cannot_write_beside_the_listen_socket() {
    assert!(Path::new("/usr/bin/bwrap").exists() || which("bwrap"), "this test needs bubblewrap");
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let state = sb.mkdir("agent-state");
    let agent = sb.root.join("agent.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\nforge-lsp call shell \"{\\\"command\\\": \\\"touch '$FORGE_TEST_TARGET/pwned'\\\"}\" --json > \"$FORGE_TEST_STATE/out.json\" 2> \"$FORGE_TEST_STATE/err\"\necho $? > \"$FORGE_TEST_STATE/code\"\necho \"$FORGE_LSP_SOCKET\" > \"$FORGE_TEST_STATE/socket\"\ntouch \"$FORGE_TEST_STATE/done\"\nsleep 60\n",
    )
    .expect("agent");
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    repo.write_project_config(&format!(
        "[agent]\ncommand = [{:?}]\n\n[sandbox]\nenabled = true\n",
        agent.display().to_string()
    ));
    let listen_dir = sb.mkdir("listen");
    let sock = listen_dir.join("forge.sock");
    let bin_dir = Path::new(BIN).parent().expect("bin dir").to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let mut cmd = sb.command();
    cmd.arg("--data-dir")
        .arg(&sb.data_dir)
        .args(["serve", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .env("PATH", path)
        .env("FORGE_TEST_STATE", &state)
        .env("FORGE_TEST_TARGET", &listen_dir);
    let server = ListenServer::start(cmd, Addr::Unix(sock.clone()), sb.next_log("listen-sandbox"));
    let mut c = server.connect();
    c.init(&Init::new(&repo.path));
    let out = c.tool_ok("execute-plan", json!({ "title": "Hold", "plan": PLAN }));
    let name = out.data["loopName"].as_str().expect("loopName").to_string();
    wait_for(Duration::from_secs(90), || state.join("done").exists().then_some(()))
        .unwrap_or_else(|| panic!("the agent's turn did not run: {}", server.stderr()));
    let agent_socket = std::fs::read_to_string(state.join("socket")).expect("socket").trim().to_string();
    assert_ne!(Path::new(&agent_socket), sock, "loops must not get the listen socket");
    assert!(!Path::new(&agent_socket).starts_with(&listen_dir), "{agent_socket}");
    let code = std::fs::read_to_string(state.join("code")).expect("code");
    let err = std::fs::read_to_string(state.join("err")).unwrap_or_default();
    assert_eq!(code.trim(), "0", "forge.shell itself ran: {err}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(state.join("out.json")).expect("out")).expect("json");
    assert_ne!(r["data"]["exitCode"], json!(0), "the write beside the listen socket must fail: {r}");
    println!("forge.shell beside the listen socket: {}", r["text"]);
    assert!(!listen_dir.join("pwned").exists(), "a sandboxed command wrote beside the listen socket");
    c.tool_ok("loop-cancel", json!({ "name": name }));
}

fn which(name: &str) -> bool {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).any(|d| d.join(name).is_file())
}
