//! What real editors need from the server (issue 11; PROTOCOL.md 3.1 and 10.2): findings
//! republished when a file is opened again, Neovim's `[[]]` arguments, a loop's end told to
//! every connection of the project, a progress end message that does not repeat itself,
//! code lenses refreshed when plans and loops change, and no phantom running loop when a
//! loop cannot start.

mod common;
mod findings_support;
mod loop_support;

use std::time::Duration;

use common::*;
use findings_support::{expect_count, uri_in};
use loop_support::*;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn opening_a_file_republishes_its_findings_to_that_connection() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("src/lib.rs", "fn a() {}\nfn b() {}\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let uri = uri_in(&repo.path, "src/lib.rs");
    let mark = c.mark();
    c.tool_ok(
        "review-write",
        json!({ "file": "src/lib.rs", "line": 2, "severity": "bug", "description": "b is wrong" }),
    );
    expect_count(&c, mark, &uri, 1);

    // The editor closes the buffer (Neovim clears its diagnostics) and opens it again.
    c.did_close(&uri);
    let mark = c.mark();
    c.did_open(&uri, "fn a() {}\nfn b() {}\n", 1);
    let again = expect_count(&c, mark, &uri, 1);
    assert_eq!(again[0]["message"], json!("b is wrong"));

    // A path Neovim encodes its own way (`+` and `@` kept, lowercase hex): the same file.
    repo.write("src/jü+x@1.rs", "fn c() {}\n");
    let ours = uri_in(&repo.path, "src/jü+x@1.rs");
    let mark = c.mark();
    c.tool_ok("review-write", json!({ "file": "src/jü+x@1.rs", "line": 1, "severity": "bug", "description": "c" }));
    expect_count(&c, mark, &ours, 1);
    let neovims = format!("file://{}/src/j%c3%bc+x@1.rs", repo.path.display());
    assert_ne!(neovims, ours);
    c.did_close(&neovims);
    let mark = c.mark();
    c.did_open(&neovims, "fn c() {}\n", 1);
    expect_count(&c, mark, &ours, 1);
}

#[test]
fn an_empty_list_as_the_argument_means_an_empty_input() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    // Neovim encodes `arguments = {{}}` as `[[]]`.
    let r = c.execute("forge.tools", Some(json!([[]]))).expect("[[]] is an empty input");
    assert!(r["data"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    // A non-empty list is still refused with a message naming the shape.
    let e = c.execute("forge.tools", Some(json!([[1]]))).expect_err("a list with items is not an input");
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("a list"), "{e}");
    // Absent arguments are an empty input; every other shape than one object is -32602
    // naming what was sent (PROTOCOL.md §3): no list item, null, two items, a string.
    let r = c.execute("forge.tools", None).expect("absent arguments are an empty input");
    assert!(r["data"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    // `[]`: Helix and Zed (lsp-types always serializes the list) and VS Code send it for a
    // command run without arguments: an empty input.
    let r = c.execute("forge.tools", Some(json!([]))).expect("[] is an empty input");
    assert!(r["data"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    for (args, named) in
        [(json!([null]), "holding null"), (json!([{}, {}]), "a list of 2 items"), (json!(["x"]), "holding a string")]
    {
        let e = c.execute("forge.tools", Some(args.clone())).expect_err("not one object");
        assert_eq!(e.code, -32602, "{args}: {e}");
        assert!(e.message.contains(named), "{args}: {e}");
    }
}

#[test]
fn a_loop_end_is_told_to_every_connection_and_the_progress_end_does_not_repeat_the_status() {
    let t = LoopTest::start("clean", "");
    // A second editor on the same server (its private socket), declaring progress.
    let sock = t.client.private_socket().expect("private socket");
    let mut other = Client::connect_unix(&sock).expect("connect to the private socket");
    other.init(&Init::new(&t.repo.path).data_dir(&t.sb.data_dir).work_done_progress(true));
    // A third declares progress but refuses to create the token: nothing is sent on it.
    let mut refusing = Client::connect_unix(&sock).expect("connect to the private socket");
    refusing.refuse("window/workDoneProgress/create", -32603, "no progress here");
    refusing.init(&Init::new(&t.repo.path).data_dir(&t.sb.data_dir).work_done_progress(true));
    let name = t.execute("one step", "# One step\n\nAppend a line to work.txt.\n");
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"));
    for (who, c) in [("the starting connection", &t.client), ("another connection", &other)] {
        let shown = c
            .wait_notification(WAIT, |r| {
                r.method() == "window/showMessage"
                    && r.params()["message"].as_str().is_some_and(|m| m.contains(&name) && m.contains("completed"))
            })
            .unwrap_or_else(|| {
                panic!("{who} was not told the loop ended: {:?}", c.notifications_of("window/showMessage"))
            });
        assert_eq!(shown.params()["type"], json!(3), "completed is Info");
    }
    let end_msg = other
        .wait_notification(WAIT, |r| r.method() == "$/progress" && r.params()["value"]["kind"] == json!("end"))
        .unwrap_or_else(|| panic!("no progress end: {:?}", other.notifications_of("$/progress")));
    assert_eq!(end_msg.params()["value"]["message"], json!("completed"), "not \"completed: completed\"");
    assert!(
        refusing.server_requests().iter().any(|r| r.method() == "window/workDoneProgress/create"),
        "the refusing client was asked: {:?}",
        refusing.server_requests()
    );
    std::thread::sleep(QUIET);
    assert_eq!(refusing.notifications_of("$/progress"), Vec::<serde_json::Value>::new(), "progress on a refused token");
}

/// A loop (the `block` scenario) whose coder's first turn waits for `coder-release`.
fn loop_with_the_coder_held() -> (LoopTest, String) {
    let t = LoopTest::start("block", "");
    std::fs::write(t.state.join("hold-coder"), "").unwrap();
    let name = t.execute("two turns", "# Two turns\n\nAppend a line to work.txt.\n");
    wait_for(WAIT, || t.state_file("turns").filter(|s| s.contains("coder"))).expect("the coder's turn started");
    (t, name)
}

/// Lets the loop of [`loop_with_the_coder_held`] go on to its end: the coder hands off, the
/// auditor's turn starts and ends, and the loop completes.
fn let_the_loop_end(t: &LoopTest, name: &str) {
    std::fs::write(t.state.join("coder-release"), "").unwrap();
    t.wait_state_file("auditor.pid");
    std::fs::write(t.state.join("release"), "").unwrap();
    assert_eq!(t.wait_end(name)["status"], json!("completed"));
}

/// A second editor on the loop's server (its private socket) declaring work-done progress,
/// set up by `prepare` before it initializes.
fn progress_editor(t: &LoopTest, prepare: impl FnOnce(&Client)) -> Client {
    let sock = t.client.private_socket().expect("private socket");
    let mut c = Client::connect_unix(&sock).expect("connect to the private socket");
    prepare(&c);
    c.init(&Init::new(&t.repo.path).data_dir(&t.sb.data_dir).work_done_progress(true));
    c
}

/// The `kind` of every `$/progress` a client received, in order.
fn progress_kinds(c: &Client) -> Vec<String> {
    c.notifications_of("$/progress")
        .iter()
        .map(|p| p["params"]["value"]["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// An editor that connects while a loop runs is asked to create the loop's progress token;
/// until it has answered, no progress is sent on it. Before, the loop's live changes,
/// announced beside that question, sent `report` (and `end`) on a token the client never
/// created, and `begin` after them, which left a spinner that never ended.
#[test]
fn no_progress_is_sent_on_a_token_the_client_has_not_created() {
    let (t, name) = loop_with_the_coder_held();
    let silent = progress_editor(&t, |c| c.ignore("window/workDoneProgress/create"));
    wait_for(WAIT, || {
        silent.server_requests().iter().any(|r| r.method() == "window/workDoneProgress/create").then_some(())
    })
    .expect("asked to create the token");
    // The loop moves on (the coder hands off, the auditor's turn starts and ends) while the
    // question is unanswered.
    let_the_loop_end(&t, &name);
    std::thread::sleep(QUIET);
    assert_eq!(
        silent.notifications_of("$/progress"),
        Vec::<serde_json::Value>::new(),
        "progress on a token never created"
    );
    let statuses = silent.notifications_of("forge/loopStatus");
    assert!(statuses.len() >= 2, "the status still reaches the editor: {statuses:?}");
}

/// A token the client creates late, after the loop ended: its progress is begun with the
/// loop's latest state and ended, in that order, and nothing else is sent on it.
#[test]
fn a_token_created_after_the_loop_ended_gets_begin_then_end() {
    let (t, name) = loop_with_the_coder_held();
    let late = progress_editor(&t, |c| c.ignore("window/workDoneProgress/create"));
    let create =
        wait_for(WAIT, || late.server_requests().into_iter().find(|r| r.method() == "window/workDoneProgress/create"))
            .expect("asked to create the token");
    let_the_loop_end(&t, &name);
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Answered now (within the server's 5 s wait).
    let id = create.msg["id"].clone();
    late.send_raw(&forge_protocol::framing::encode(
        json!({ "jsonrpc": "2.0", "id": id, "result": null }).to_string().as_bytes(),
    ));
    let kinds = wait_for(WAIT, || {
        let p = late.notifications_of("$/progress");
        (p.len() >= 2).then_some(p)
    })
    .unwrap_or_else(|| panic!("no begin and end: {:?}", late.notifications_of("$/progress")));
    std::thread::sleep(QUIET);
    let sent = late.notifications_of("$/progress");
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(kinds[0]["params"]["value"]["kind"], json!("begin"), "{sent:?}");
    assert_eq!(kinds[1]["params"]["value"]["kind"], json!("end"), "{sent:?}");
    assert_eq!(kinds[1]["params"]["value"]["message"], json!("completed"), "{sent:?}");
    assert_eq!(kinds[0]["params"]["token"], create.params()["token"]);
}

/// A progress's `begin` goes out before anything else on its token, also when the loop
/// moves on and ends while the `begin` is about to be sent (a test pause holds it there).
/// Before the per-connection turn, the `end` announced meanwhile went out first.
#[test]
fn the_begin_of_a_progress_comes_first_when_the_loop_moves_on_meanwhile() {
    let t = LoopTest::start("block", "");
    std::fs::write(t.state.join("hold-coder"), "").unwrap();
    let editor = progress_editor(&t, |_| {});
    t.hold("progress.begin");
    let name = t.execute("two turns", "# Two turns\n\nAppend a line to work.txt.\n");
    t.wait_held("progress.begin");
    let_the_loop_end(&t, &name);
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.unhold("progress.begin");
    wait_for(WAIT, || {
        editor.notifications_of("$/progress").iter().any(|p| p["params"]["value"]["kind"] == json!("end")).then_some(())
    })
    .unwrap_or_else(|| panic!("no end: {:?}", editor.notifications_of("$/progress")));
    std::thread::sleep(QUIET);
    let kinds = progress_kinds(&editor);
    assert_eq!(kinds.first().map(String::as_str), Some("begin"), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("end"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "begin").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "end").count(), 1, "{kinds:?}");
}

/// The replay after `initialized` holds its snapshot (a running loop) while the loop ends:
/// a progress it begins is ended too. Before the per-connection turn, the loop's end was
/// announced beside the held replay, before its token existed, and the replay then began a
/// progress that nothing ended.
#[test]
fn a_replay_of_a_loop_that_ends_meanwhile_leaves_no_progress_open() {
    let (t, name) = loop_with_the_coder_held();
    t.hold("announce.replay");
    let editor = progress_editor(&t, |_| {});
    t.wait_held("announce.replay");
    let_the_loop_end(&t, &name);
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.unhold("announce.replay");
    std::thread::sleep(QUIET * 2);
    let kinds = progress_kinds(&editor);
    let begins = kinds.iter().filter(|k| *k == "begin").count();
    let ends = kinds.iter().filter(|k| *k == "end").count();
    assert_eq!(begins, ends, "every progress begun is ended: {kinds:?}");
    if begins > 0 {
        assert_eq!(kinds.last().map(String::as_str), Some("end"), "{kinds:?}");
    }
}

#[test]
fn a_client_that_supports_it_gets_code_lens_refreshes_when_plans_change() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path).code_lens_refresh(true));
    let mark = c.mark();
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nDo it.\n" }));
    c.wait_server_request_since(mark, WAIT, |r| r.method() == "workspace/codeLens/refresh")
        .unwrap_or_else(|| panic!("no workspace/codeLens/refresh: {:?}", c.server_requests()));
}

/// A client that never answers our refreshes is sent no more while 8 are overdue:
/// the framework keeps each unanswered request for the life of the connection, so every
/// refresh was a small leak. A client that answers keeps getting them, past 8.
#[test]
fn a_client_that_never_answers_refreshes_stops_getting_them() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let count = |c: &Client| c.server_requests().iter().filter(|r| r.method() == "workspace/codeLens/refresh").count();
    let mut silent = sb.stdio();
    silent.ignore("workspace/codeLens/refresh");
    silent.init(&Init::new(&repo.path).code_lens_refresh(true));
    let mut answering = sb.stdio();
    answering.init(&Init::new(&repo.path).code_lens_refresh(true));
    // Refreshes are coalesced: write until 8 have gone out.
    for i in 0..200 {
        if count(&silent) >= 8 {
            break;
        }
        silent.tool_ok("plan-write", json!({ "content": format!("# Plan {i}\n") }));
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    // Each waits 5 s for its answer, then is overdue.
    std::thread::sleep(std::time::Duration::from_secs(6));
    let asked = count(&silent);
    assert!(asked >= 8, "{asked} refreshes");
    for i in 0..20 {
        silent.tool_ok("plan-write", json!({ "content": format!("# More {i}\n") }));
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(count(&silent), asked, "refreshes went on while {asked} were overdue");
    // The other client of the project answered each one, and got every refresh.
    assert!(count(&answering) > 8, "{} refreshes to the answering client", count(&answering));
}

#[test]
fn a_loop_that_cannot_start_is_never_announced_as_running() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write_project_config("[agent]\ncommand = [\"/nonexistent/agent\"]\n[sandbox]\nenabled = false\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e = c.tool_err("execute-plan", json!({ "title": "t", "plan": "# P\n\nDo it.\n" }));
    assert_eq!(e.code, 1004, "{e}");
    assert!(e.message.contains("/nonexistent/agent"), "{e}");
    std::thread::sleep(Duration::from_millis(500));
    let phantom: Vec<_> = c
        .notifications_of("forge/loopStatus")
        .into_iter()
        .filter(|n| n["params"]["status"] == json!("running"))
        .collect();
    assert!(phantom.is_empty(), "a loop that failed to start was announced as running: {phantom:?}");
}

#[test]
fn call_outside_a_repository_refuses_unless_a_project_is_named() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let outside = sb.mkdir("not-a-repo");
    let out = sb.call("plan-read").input(json!({ "recent": true })).cwd(&outside).run();
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("not inside a git repository") && out.stderr.contains("--project"), "{out:?}");
    let out = sb
        .call("review-write")
        .input(json!({ "file": "a.rs", "line": 1, "severity": "bug", "description": "d" }))
        .arg("--project")
        .arg(repo.path.to_str().unwrap())
        .cwd(&outside)
        .run();
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn call_resolves_a_relative_file_against_the_working_directory() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write("src/deep/x.rs", "fn x() {}\n");
    let out = sb
        .call("review-write")
        .input(json!({ "file": "x.rs", "line": 1, "severity": "bug", "description": "d" }))
        .json()
        .cwd(&repo.path.join("src/deep"))
        .run();
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["data"]["finding"]["file"], json!("src/deep/x.rs"), "{v}");
}

#[test]
fn plan_write_from_a_shell_says_which_session_holds_the_plan() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let out =
        sb.call("plan-write").input(json!({ "content": "# Plan\n\n## Objective\nDo it.\n" })).cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    let session = out
        .stdout
        .split("Session: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session in {:?}", out.stdout))
        .to_string();
    let edit = sb
        .call("plan-edit")
        .input(json!({ "oldString": "Do it.", "newString": "Do it well." }))
        .session(&session)
        .cwd(&repo.path)
        .run();
    assert_eq!(edit.code, 0, "the named session finds its plan: {edit:?}");
}

/// A client without `workspace.textDocumentContent` (Helix, Zed, plain eglot): it reads the
/// `.forge/view/` copies.
fn view_client(sb: &Sandbox, repo: &GitRepo) -> Client {
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path).text_document_content(false));
    c
}

fn wait_file(path: &std::path::Path, pred: impl Fn(&str) -> bool) -> String {
    wait_for(WAIT, || std::fs::read_to_string(path).ok().filter(|t| pred(t))).unwrap_or_else(|| {
        panic!("{} never matched; it holds {:?}", path.display(), std::fs::read_to_string(path).ok())
    })
}

fn shown_messages(c: &Client) -> Vec<String> {
    c.notifications_of("window/showMessage")
        .into_iter()
        .filter_map(|m| m["params"]["message"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn links_are_forge_uris_for_clients_that_read_them_and_copy_paths_otherwise() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nDo it.\n" }));
    let view = repo.path.canonicalize().unwrap().join(".forge/view");
    let index = wait_file(&view.join("index.md"), |t| t.contains("plan/session/"));
    let plan_copy = view.join(format!("plan/session/{}.md", c.session_id()));
    assert!(index.contains(&format!("({})", plan_copy.display())), "the index links the copy: {index}");
    assert!(!index.contains("forge://"), "no forge:// link for a client that cannot open it: {index}");

    let mut reader = sb.stdio();
    reader.init(&Init::new(&repo.path));
    let text = reader.content("forge://index.md").expect("index");
    assert!(text.contains("(forge://plan/session/"), "forge:// links for a client that reads them: {text}");
}

/// Every link of the index a fresh connection writes points at a copy that is there: its
/// plans (all it lists, not the 20 newest), each loop's status, history and plan (before,
/// a loop's documents were written only when it changed while a client was connected, so
/// the index and the demo's closing lines pointed at a file that did not exist: a review).
#[test]
fn every_link_of_a_fresh_index_points_at_a_copy_that_is_there() {
    let t = LoopTest::start("clean", "");
    let name = t.execute("Plain plan", "# Plain plan\n\nAppend a line to work.txt.\n");
    assert_eq!(t.wait_end(&name)["status"], json!("completed"), "{}", t.report());
    for i in 0..24 {
        let content = format!("# Plan {i}\n\n## Objective\nDo {i}.\n");
        t.client.tool_ok("plan-write", json!({ "content": content, "session_id": format!("ses_many{i}") }));
    }
    let c = view_client(&t.sb, &t.repo);
    let view = t.repo.path.canonicalize().unwrap().join(".forge/view");
    let index = wait_file(&view.join("index.md"), |t| t.contains(&format!("loop/{name}/status.md")));
    let links: Vec<&str> = index.split("](").skip(1).filter_map(|r| r.split(')').next()).collect();
    assert!(links.len() >= 27, "{index}");
    for link in &links {
        let path = std::path::Path::new(link);
        assert!(path.starts_with(&view), "{link}");
        wait_for(WAIT, || path.exists().then_some(()))
            .unwrap_or_else(|| panic!("{link} is linked but not there:\n{index}"));
    }
    drop(c);
}

/// Two server processes of one data directory, each with an editor of the project that
/// reads the copies: each rewrites copies the other wrote, which is no user's edit. Before,
/// many of them were taken for the user's: kept under .forge/rejected with a warning that
/// the change "was not applied" (a review: 6 in 15 writes).
#[test]
fn copies_another_server_process_wrote_are_not_taken_for_the_users() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let (a, _b, ca, cb) = two_servers_with_view_clients(&sb, &repo);
    // The writes go through one of the two servers (as `forge-lsp call` does): it writes
    // the copies at once, the other when its change feed shows the write.
    let mut writer = a.connect();
    writer.init(&Init::new(&repo.path));
    for i in 0..15 {
        let content = format!("# Plan {i}\n\n## Objective\nDo {i}.\n");
        writer.tool_ok("plan-write", json!({ "content": content, "session_id": "ses_twoservers" }));
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    let view = repo.path.canonicalize().unwrap().join(".forge/view");
    wait_file(&view.join("plan/session/ses_twoservers.md"), |t| t.contains("Do 14."));
    std::thread::sleep(std::time::Duration::from_millis(800));
    let told: Vec<String> = shown_messages(&ca).into_iter().chain(shown_messages(&cb)).collect();
    assert!(!told.iter().any(|m| m.contains("was not applied") || m.contains("rewritten")), "{told:?}");
    let rejected = repo.path.join(".forge/rejected");
    let kept: Vec<_> =
        std::fs::read_dir(&rejected).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
}

/// Two `serve --listen` processes of one data directory, each with a connected editor of
/// `repo` that reads the copies (no `workspace/textDocumentContent`).
fn two_servers_with_view_clients(sb: &Sandbox, repo: &GitRepo) -> (ListenServer, ListenServer, Client, Client) {
    let (a, b) = (sb.listen_unix(&sb.root.join("a/s.sock")), sb.listen_unix(&sb.root.join("b/s.sock")));
    let mut ca = a.connect();
    ca.init(&Init::new(&repo.path).text_document_content(false));
    let mut cb = b.connect();
    cb.init(&Init::new(&repo.path).text_document_content(false));
    (a, b, ca, cb)
}

/// A buffer of a copy reloaded after another server process rewrote the copy (two editors
/// on the project, each with its own server) saves from the new text. Before, the process
/// whose editor held the buffer found the copy already current and kept its record of the
/// text before, so the save was refused as made from a stale buffer (review YC).
#[test]
fn a_copy_reloaded_after_another_server_rewrote_it_saves() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let (_a, _b, ca, cb) = two_servers_with_view_clients(&sb, &repo);
    ca.tool_ok("plan-write", json!({ "content": "# P\n\n## Objective\nv1\n" }));
    let copy = repo.path.canonicalize().unwrap().join(format!(".forge/view/plan/session/{}.md", ca.session_id()));
    let opened = wait_file(&copy, |t| t.contains("v1"));
    let uri = file_uri(&copy);
    ca.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "markdown", "version": 1, "text": opened } }),
    );
    // Written through the other server, which rewrites the copy at once; this one finds it
    // current when its change feed shows the write.
    cb.tool_ok("plan-write", json!({ "content": "# P\n\n## Objective\nv2\n", "session_id": ca.session_id() }));
    let current = wait_file(&copy, |t| t.contains("v2"));
    std::thread::sleep(Duration::from_millis(500));
    let edited = format!("{current}\nmy addition after reloading");
    let stored = reload_edit_and_save(&ca, &uri, 2, &current, &edited, "my addition after reloading");
    assert!(stored, "a save after reloading is stored: {:?}", shown_messages(&ca));
    assert!(!repo.path.join(".forge/rejected").exists(), "nothing kept as rejected");
}

/// A copy the user made writable and set back to an earlier text a server wrote (a revert)
/// is the user's edit: kept under .forge/rejected with a warning when the document changes,
/// never rewritten silently (a review found the shared record of written texts took it for
/// a server's).
#[test]
fn a_copy_reverted_by_the_user_to_an_earlier_text_is_not_overwritten_silently() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    let index = repo.path.canonicalize().unwrap().join(".forge/view/index.md");
    c.tool_ok("plan-write", json!({ "content": "# Plan A\n\n## Objective\nA.\n", "session_id": "ses_revert" }));
    let a = wait_file(&index, |t| t.contains("Plan A"));
    c.tool_ok("plan-write", json!({ "content": "# Plan B\n\n## Objective\nB.\n", "session_id": "ses_revert" }));
    wait_file(&index, |t| t.contains("Plan B"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&index, &a).unwrap();
    c.tool_ok("plan-write", json!({ "content": "# Plan C\n\n## Objective\nC.\n", "session_id": "ses_revert" }));
    wait_file(&index, |t| t.contains("Plan C"));
    let told = wait_for(WAIT, || {
        let m = shown_messages(&c);
        m.iter().any(|m| m.contains("index.md")).then_some(m)
    });
    assert!(told.is_some(), "the user's revert was overwritten without a word: {:?}", shown_messages(&c));
    let rejected = repo.path.join(".forge/rejected");
    let kept: Vec<_> =
        std::fs::read_dir(&rejected).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read_to_string(&kept[0]).unwrap(), a);
}

#[test]
fn saving_over_a_session_plan_copy_writes_the_plan() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nfirst\n" }));
    let copy = repo.path.canonicalize().unwrap().join(format!(".forge/view/plan/session/{}.md", c.session_id()));
    wait_file(&copy, |t| t.contains("first"));
    // `:w!` in an editor: the 0444 copy is replaced by the buffer.
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&copy, "# Plan\n\n## Objective\nsecond, from the editor\n").unwrap();
    c.notify(
        "textDocument/didSave",
        json!({ "textDocument": { "uri": file_uri(&copy) }, "text": "# Plan\n\n## Objective\nsecond, from the editor\n" }),
    );
    let stored = wait_for(WAIT, || {
        let out = c.tool_ok("plan-read", json!({}));
        out.text.contains("second, from the editor").then_some(out.text)
    });
    assert!(stored.is_some(), "the saved copy became the plan: {:?}", shown_messages(&c));
    c.wait_notification(WAIT, |r| {
        r.method() == "window/showMessage"
            && r.params()["message"].as_str().is_some_and(|m| m.contains("was saved as the plan"))
    })
    .unwrap_or_else(|| panic!("the user is told: {:?}", shown_messages(&c)));
    let mode = wait_for(WAIT, || {
        let m = std::fs::metadata(&copy).ok()?.permissions().mode() & 0o777;
        (m == 0o444).then_some(m)
    });
    assert_eq!(mode, Some(0o444), "the copy is read-only again");
}

/// A copy's buffer opened before an agent changed the plan, then saved: the save would
/// undo that change without a word (review Z: it was stored, and the user told "saved").
/// It is refused, the text kept under `.forge/rejected/`, and the user told why. A buffer
/// reloaded after the change (the editor's didChange to the new copy) saves as before.
#[test]
fn saving_a_copy_opened_before_the_plan_changed_is_refused_not_stored() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nOne.\n" }));
    let copy = repo.path.canonicalize().unwrap().join(format!(".forge/view/plan/session/{}.md", c.session_id()));
    let opened = wait_file(&copy, |t| t.contains("One."));
    let uri = file_uri(&copy);
    c.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "markdown", "version": 1, "text": opened } }),
    );
    // An agent's edit; the copy on disk follows it, the buffer (modified, or not reloaded)
    // does not.
    c.tool_ok("plan-edit", json!({ "oldString": "One.", "newString": "Two, newer." }));
    wait_file(&copy, |t| t.contains("Two, newer."));
    let mine = opened.replace("One.", "One, and my note.");
    c.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": uri, "version": 2 }, "contentChanges": [{ "text": mine }] }),
    );
    c.notify("textDocument/didSave", json!({ "textDocument": { "uri": uri }, "text": mine }));
    let told = c
        .wait_notification(WAIT, |r| {
            r.method() == "window/showMessage"
                && r.params()["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("the document changed after your buffer last held it"))
        })
        .unwrap_or_else(|| panic!("the user is told: {:?}", shown_messages(&c)));
    let message = told.params()["message"].as_str().unwrap().to_string();
    assert!(c.tool_ok("plan-read", json!({})).text.contains("Two, newer."), "the newer plan was kept");
    let kept = message.split("your text is in ").nth(1).and_then(|r| r.strip_suffix('.')).expect("where the text is");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), mine, "{message}");
    assert!(!shown_messages(&c).iter().any(|m| m.contains("was saved as the plan")), "{:?}", shown_messages(&c));
    // Reloaded (the buffer takes the copy's new text) as soon as the file appears, edited
    // and saved: stored. The server records what it wrote just after the file appears; a
    // reload before that was taken for a stale buffer and its save refused (a CI run).
    let current = wait_file(&copy, |t| t.contains("Two, newer."));
    let edited = current.replace("Two, newer.", "Three, after reloading.");
    let stored = reload_edit_and_save(&c, &uri, 3, &current, &edited, "Three, after reloading.");
    assert!(stored, "a save after reloading is stored: {:?}", shown_messages(&c));
}

/// A buffer of the copy at `uri` reloaded to `reloaded` (version `version`), edited to
/// `edited` and saved; whether the caller's plan then holds `marker`.
fn reload_edit_and_save(c: &Client, uri: &str, version: i32, reloaded: &str, edited: &str, marker: &str) -> bool {
    for (v, text) in [(version, reloaded), (version + 1, edited)] {
        c.notify(
            "textDocument/didChange",
            json!({ "textDocument": { "uri": uri, "version": v }, "contentChanges": [{ "text": text }] }),
        );
    }
    c.notify("textDocument/didSave", json!({ "textDocument": { "uri": uri }, "text": edited }));
    wait_for(WAIT, || c.tool_ok("plan-read", json!({})).text.contains(marker).then_some(())).is_some()
}

/// Vim, Neovim and Helix add a final line break when they save: saving an unchanged copy
/// that way is no edit. Before, every such save wrote the plan again and said so, and the
/// copy was rewritten under the editor.
#[test]
fn saving_a_copy_with_only_a_final_line_break_added_is_no_edit() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nDo it.\n" }));
    let copy = repo.path.canonicalize().unwrap().join(format!(".forge/view/plan/session/{}.md", c.session_id()));
    let written = wait_file(&copy, |t| t.contains("Do it."));
    assert!(!written.ends_with('\n'), "{written:?}");
    // Let the plan-write's announcements settle on the copy first (a late one rewrites a
    // copy that holds a save already handled, which is what an editor saving it later sees).
    std::thread::sleep(std::time::Duration::from_millis(600));
    let saved = format!("{written}\n");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    for _ in 0..2 {
        std::fs::write(&copy, &saved).unwrap();
        c.notify("textDocument/didSave", json!({ "textDocument": { "uri": file_uri(&copy) }, "text": saved }));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    c.tool_ok("tools", json!({}));
    assert_eq!(shown_messages(&c), Vec::<String>::new(), "nothing to say");
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), saved, "the copy is not rewritten under the editor");
    // The next change of the plan rewrites the copy, without a word about the earlier save.
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nDo it twice.\n" }));
    wait_file(&copy, |t| t.contains("Do it twice."));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(shown_messages(&c), Vec::<String>::new(), "nothing to say");
    assert!(!repo.path.join(".forge/rejected").exists(), "nothing kept as rejected");
}

/// An editor opened on the project through a symbolic link knows its files by the link's
/// path: diagnostics are published there, and the view copies opened and saved there are
/// the server's copies. Before, diagnostics went to the resolved path (not shown), and a
/// copy opened or saved through the link was not recognized (its save silently dropped).
#[test]
fn a_project_opened_through_a_link_is_served_in_the_links_spelling() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let link = sb.root.join("link");
    std::os::unix::fs::symlink(&repo.path, &link).unwrap();
    let mut c = sb.stdio();
    c.init(&Init::new(&link).text_document_content(false));
    let mark = c.mark();
    c.tool_ok("review-write", json!({ "file": "a.txt", "line": 1, "severity": "bug", "description": "linked" }));
    let uri = file_uri(&link.join("a.txt"));
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == 1).unwrap_or_else(|| {
        panic!("no diagnostics on {uri}: {:?}", c.notifications_of("textDocument/publishDiagnostics"))
    });

    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nfirst\n" }));
    let copy = link.join(format!(".forge/view/plan/session/{}.md", c.session_id()));
    let text = wait_file(&copy, |t| t.contains("first"));
    c.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": file_uri(&copy), "languageId": "markdown", "version": 1, "text": text } }),
    );
    let lenses = c.request("textDocument/codeLens", json!({ "textDocument": { "uri": file_uri(&copy) } })).unwrap();
    assert!(lenses.as_array().is_some_and(|l| !l.is_empty()), "lenses on the copy through the link: {lenses}");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let saved = "# Plan\n\n## Objective\nsecond, through the link\n";
    std::fs::write(&copy, saved).unwrap();
    c.notify("textDocument/didSave", json!({ "textDocument": { "uri": file_uri(&copy) }, "text": saved }));
    let stored = wait_for(WAIT, || {
        let out = c.tool_ok("plan-read", json!({}));
        out.text.contains("second, through the link").then_some(())
    });
    assert!(stored.is_some(), "the save through the link became the plan: {:?}", shown_messages(&c));

    // A link to a folder above the project (`/home` → `/var/home`): the same names below it.
    let above = sb.root.join("above");
    std::os::unix::fs::symlink(repo.path.parent().unwrap(), &above).unwrap();
    let folder = above.join(repo.path.file_name().unwrap());
    let mut c = sb.stdio();
    c.init(&Init::new(&folder));
    let mark = c.mark();
    c.tool_ok("review-write", json!({ "file": "b.txt", "line": 1, "severity": "bug", "description": "above" }));
    let uri = file_uri(&folder.join("b.txt"));
    c.wait_diagnostics_since(mark, &uri, WAIT, |d| d.len() == 1).unwrap_or_else(|| {
        panic!("no diagnostics on {uri}: {:?}", c.notifications_of("textDocument/publishDiagnostics"))
    });
}

#[test]
fn saving_over_a_read_only_view_restores_it_and_keeps_the_text() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    c.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nDo it.\n" }));
    let root = repo.path.canonicalize().unwrap();
    let index = root.join(".forge/view/index.md");
    let original = wait_file(&index, |t| t.contains("plan/session/"));
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&index, "my notes\n").unwrap();
    c.notify("textDocument/didSave", json!({ "textDocument": { "uri": file_uri(&index) }, "text": "my notes\n" }));
    let msg = c
        .wait_notification(WAIT, |r| {
            r.method() == "window/showMessage"
                && r.params()["message"].as_str().is_some_and(|m| m.contains("was not applied"))
        })
        .unwrap_or_else(|| panic!("the user is told why: {:?}", shown_messages(&c)));
    assert_eq!(msg.params()["type"], json!(2), "a warning");
    assert_eq!(wait_file(&index, |t| t == original), original, "the copy is restored");
    let kept: Vec<String> = std::fs::read_dir(root.join(".forge/rejected"))
        .expect("rejected dir")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect();
    assert_eq!(kept, vec!["my notes\n".to_string()], "the user's text is kept");
    let dir_mode = std::fs::metadata(root.join(".forge/rejected")).expect("rejected dir").permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "the kept texts' directory is private");
}

/// A save of a session plan's copy is applied and said once: another connection of the
/// same server, which shares the copies, does not take the saved text for a new edit when
/// it rewrites the copy first (before: it said "not applied" about the applied save and
/// kept a spurious copy under `.forge/rejected/`); neither does the saving connection
/// when the file on disk differs from the text sent (a byte order mark).
#[test]
fn a_saved_copy_is_applied_once_for_every_connection_of_the_server() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let sock = sb.root.join("listen/forge.sock");
    let server = sb.listen_unix(&sock);
    let mut a = server.connect();
    a.init(&Init::new(&repo.path).text_document_content(false));
    let mut b = server.connect();
    b.init(&Init::new(&repo.path).text_document_content(false));
    let root = repo.path.canonicalize().unwrap();
    for (round, bom) in [(1, false), (2, true)] {
        a.tool_ok("plan-write", json!({ "content": format!("# Plan A\n\n## Objective\nfirst {round}\n") }));
        let copy = root.join(format!(".forge/view/plan/session/{}.md", a.session_id()));
        wait_file(&copy, |t| t.contains(&format!("first {round}")));
        // Let both connections settle on the copy.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let saved = format!("# Plan A\n\n## Objective\nsecond {round}\n");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
        let on_disk = if bom { format!("\u{feff}{saved}") } else { saved.clone() };
        std::fs::write(&copy, &on_disk).unwrap();
        a.notify("textDocument/didSave", json!({ "textDocument": { "uri": file_uri(&copy) }, "text": saved }));
        a.wait_notification(WAIT, |r| {
            r.method() == "window/showMessage"
                && r.params()["message"].as_str().is_some_and(|m| m.contains("was saved as the plan"))
        })
        .unwrap_or_else(|| panic!("round {round}: the saver is told: {:?}", shown_messages(&a)));
        wait_file(&copy, |t| t.contains(&format!("second {round}")) && !t.starts_with('\u{feff}'));
        std::thread::sleep(std::time::Duration::from_millis(500));
        for (who, c) in [("a", &a), ("b", &b)] {
            let wrong: Vec<String> = shown_messages(c).into_iter().filter(|m| m.contains("not applied")).collect();
            assert!(wrong.is_empty(), "round {round}: connection {who} was told {wrong:?}");
        }
        assert!(!root.join(".forge/rejected").exists(), "round {round}: nothing was rejected");
    }
}

/// A copy changed on disk into bytes that are not UTF-8 (saved in another encoding) is the
/// user's too: kept under `.forge/rejected/` with a warning before it is rewritten (before,
/// it was taken for no copy and overwritten silently; a probe found it).
#[test]
fn a_copy_changed_into_other_bytes_than_utf8_is_kept_when_rewritten() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    c.tool_ok("plan-write", json!({ "content": "# Plan v1" }));
    let root = repo.path.canonicalize().unwrap();
    let copy = root.join(format!(".forge/view/plan/session/{}.md", c.session_id()));
    wait_file(&copy, |t| t.contains("v1"));
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&copy, b"# Plan caf\xe9\n").unwrap();
    c.tool_ok("plan-write", json!({ "content": "# Plan v2" }));
    wait_file(&copy, |t| t.contains("v2"));
    c.wait_notification(WAIT, |r| {
        r.method() == "window/showMessage"
            && r.params()["message"].as_str().is_some_and(|m| m.contains("is not UTF-8 text"))
    })
    .unwrap_or_else(|| panic!("the user is told: {:?}", shown_messages(&c)));
    let kept: Vec<Vec<u8>> = std::fs::read_dir(root.join(".forge/rejected"))
        .expect("rejected dir")
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .collect();
    assert_eq!(kept, vec![b"# Plan caf\xe9\n".to_vec()], "the user's bytes are kept as they were");
}

/// A copy changed on disk is kept whatever its document's name: the kept file's name is
/// cut to fit (before, a session id of 250 characters made it too long, and the user's text
/// was lost with the copy rewritten all the same: review YC); and where `.forge/rejected`
/// cannot be written (here a committed link), it is kept in the data directory.
#[test]
fn a_copy_changed_on_disk_is_kept_whatever_its_name_and_wherever_it_can_be() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = view_client(&sb, &repo);
    let root = repo.path.canonicalize().unwrap();
    let session = "s".repeat(250);
    let copy = root.join(format!(".forge/view/plan/session/{session}.md"));
    let outside = sb.mkdir("outside");
    for round in 0..2 {
        c.tool_ok(
            "plan-write",
            json!({ "content": format!("# P\n\n## Objective\nx{round}\n"), "session_id": session }),
        );
        wait_file(&copy, |t| t.contains(&format!("x{round}")));
        std::thread::sleep(Duration::from_millis(300));
        let mine = format!("# P\n\nMY TEXT {round}\n");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&copy, &mine).unwrap();
        let before = shown_messages(&c).len();
        c.tool_ok(
            "plan-edit",
            json!({ "oldString": format!("x{round}"), "newString": format!("z{round}"), "session_id": session }),
        );
        wait_file(&copy, |t| t.contains(&format!("z{round}")));
        let message =
            wait_for(WAIT, || shown_messages(&c).into_iter().skip(before).find(|m| m.contains("your text is in")))
                .unwrap_or_else(|| panic!("round {round}: the user is told: {:?}", shown_messages(&c)));
        let kept =
            message.split("your text is in ").nth(1).and_then(|r| r.strip_suffix('.')).expect("where the text is");
        assert_eq!(std::fs::read_to_string(kept).map_err(|e| format!("{e}: {message}")), Ok(mine), "round {round}");
        let kept = std::path::Path::new(kept);
        assert!(kept.file_name().unwrap().len() <= 255);
        assert_eq!(std::fs::metadata(kept).unwrap().permissions().mode() & 0o777, 0o600);
        if round == 0 {
            assert!(kept.starts_with(root.join(".forge/rejected")), "{message}");
            // Next round: the folder a link to outside the project.
            std::fs::remove_dir_all(root.join(".forge/rejected")).unwrap();
            std::os::unix::fs::symlink(&outside, root.join(".forge/rejected")).unwrap();
        } else {
            assert!(kept.starts_with(sb.data_dir.join("rejected")), "{message}");
            assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing written through the link");
        }
    }
}

/// A save without its text over a copy that is a link (committed in the repository) to a
/// file outside: the link is not read through. Before, the outside file's text was stored
/// as that session's plan and copied into the project (review YC).
#[test]
fn a_save_without_text_does_not_read_through_a_link() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let outside = sb.mkdir("outside").join("secret.md");
    std::fs::write(&outside, "# Outside\n\n## Objective\nsecret\n").unwrap();
    let root = repo.path.canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".forge/view/plan/session")).unwrap();
    let link = root.join(".forge/view/plan/session/ses_evil.md");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let c = view_client(&sb, &repo);
    c.notify("textDocument/didSave", json!({ "textDocument": { "uri": file_uri(&link) } }));
    std::thread::sleep(Duration::from_millis(500));
    let e = c.tool_err("plan-read", json!({ "session_id": "ses_evil" }));
    assert_eq!(e.code, 1002, "no plan was stored from the link's target: {e}");
    // A linked folder on the way: not read through when the copy is rewritten either
    // (review YD: the outside file was kept under .forge/rejected as the user's text).
    std::fs::remove_dir_all(root.join(".forge/view/plan")).unwrap();
    let out_dir = sb.mkdir("outside-plan");
    std::fs::create_dir_all(out_dir.join("session")).unwrap();
    std::fs::write(out_dir.join("session/ses_evil.md"), "# Outside\n\n## Objective\nsecret\n").unwrap();
    std::os::unix::fs::symlink(&out_dir, root.join(".forge/view/plan")).unwrap();
    c.notify("textDocument/didSave", json!({ "textDocument": { "uri": file_uri(&link) } }));
    std::thread::sleep(Duration::from_millis(700));
    let kept: Vec<String> = std::fs::read_dir(root.join(".forge/rejected"))
        .map(|d| d.flatten().filter_map(|e| std::fs::read_to_string(e.path()).ok()).collect())
        .unwrap_or_default();
    assert!(!kept.iter().any(|k| k.contains("secret")), "{kept:?}");
    assert!(!shown_messages(&c).iter().any(|m| m.contains("your text is in")), "{:?}", shown_messages(&c));
    assert_eq!(c.tool_err("plan-read", json!({ "session_id": "ses_evil" })).code, 1002);
}

#[test]
fn log_lines_of_a_connection_carry_its_id() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio_with(|cmd| {
        cmd.env("FORGE_LOG", "debug");
    });
    c.init(&Init::new(&repo.path));
    // A failing call logs a line while the connection serves it.
    let _ = c.tool_err("plan-read", json!({ "session_id": "ses_nobody" }));
    c.shutdown_exit();
    let log = std::fs::read_to_string(c.log.as_ref().expect("log file")).expect("log");
    assert!(log.lines().any(|l| l.contains("conn{id=")), "no log line names its connection:\n{log}");
}

/// PROTOCOL.md §9: an unknown key is reported once, however often the settings change; and
/// Helix sends its `config` (the initialization options' shape) as settings too, which is
/// not a set of unknown keys: only its `config` member is configuration.
#[test]
fn configuration_warnings_are_shown_once_and_helix_settings_are_understood() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    repo.write(".forge/config.toml", "bogusKey = 1\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let shown = |c: &Client, needle: &str| {
        c.notifications_of("window/showMessage")
            .iter()
            .filter(|m| m["params"]["message"].as_str().is_some_and(|t| t.contains(needle)))
            .count()
    };
    assert!(
        c.wait_notification(WAIT, |r| r.method() == "window/showMessage"
            && r.params()["message"].as_str().is_some_and(|m| m.contains("bogusKey")))
            .is_some(),
        "the file's unknown key is reported"
    );
    let settings = [
        json!({ "forge": { "documents": { "maxPlanBytes": 1_000_000 } } }),
        json!({ "forge": { "documents": { "maxPlanBytes": 2_000_000 } } }),
        // Helix: `config = { forge = { agent = "user" } }`, sent as settings after initialize.
        json!({ "forge": { "agent": "user" } }),
        json!({ "forge": { "agent": "user", "config": { "documents": { "maxPlanBytes": 20 } } } }),
    ];
    for s in settings {
        c.notify("workspace/didChangeConfiguration", json!({ "settings": s }));
    }
    // The last settings took effect: a plan over 20 bytes is refused.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match c.tool("plan-write", json!({ "content": "# a plan longer than twenty bytes" })) {
            Err(e) if e.code == 1006 && e.message.contains("maxPlanBytes") => break,
            other => {
                assert!(std::time::Instant::now() < deadline, "the Helix-shaped config never applied: {other:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    std::thread::sleep(QUIET);
    assert_eq!(shown(&c, "bogusKey"), 1, "{:?}", c.notifications_of("window/showMessage"));
    assert_eq!(shown(&c, "unknown configuration key `agent`"), 0, "{:?}", c.notifications_of("window/showMessage"));
    // A change with warnings (unknown keys, told to the client first) and a later one
    // without: the later one is in effect. Before, the first took effect after its warnings
    // were shown and undid the second (review BB).
    for round in 0..5 {
        let unknown = format!("zzUnknown{round}");
        c.notify(
            "workspace/didChangeConfiguration",
            json!({ "settings": { "forge": { "documents": { "maxPlanBytes": 10 }, unknown.clone(): 1, format!("{unknown}b"): 2 } } }),
        );
        c.notify(
            "workspace/didChangeConfiguration",
            json!({ "settings": { "forge": { "documents": { "maxPlanBytes": 1_000_000 } } } }),
        );
        c.wait_notification(WAIT, |r| {
            r.method() == "window/showMessage"
                && r.params()["message"].as_str().is_some_and(|m| m.contains(&format!("{unknown}b")))
        })
        .expect("the second warning");
        let r = c.tool("plan-write", json!({ "content": format!("# a plan of round {round}, over ten bytes") }));
        assert!(r.is_ok(), "round {round}: the earlier change won: {r:?}");
    }
}

/// A copy the user changed on disk while no connection that wrote it was there (the server
/// restarted, or another editor's connection wrote it) is not overwritten silently: the new
/// connection rewrites it from the stored plan, keeps the user's text under
/// `.forge/rejected/` and says so.
#[test]
fn a_copy_changed_before_this_connection_is_kept_when_rewritten() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut first = view_client(&sb, &repo);
    first.tool_ok("plan-write", json!({ "content": "# Plan\n\n## Objective\nstored\n" }));
    let session = first.session_id();
    let root = repo.path.canonicalize().unwrap();
    let copy = root.join(format!(".forge/view/plan/session/{session}.md"));
    let written = wait_file(&copy, |t| t.contains("stored"));
    first.shutdown_exit();
    drop(first);
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&copy, format!("{written}USER EDIT\n")).unwrap();
    let second = view_client(&sb, &repo);
    second
        .wait_notification(WAIT, |r| {
            r.method() == "window/showMessage"
                && r.params()["message"].as_str().is_some_and(|m| m.contains("was changed on disk"))
        })
        .unwrap_or_else(|| panic!("the user is told: {:?}", shown_messages(&second)));
    assert_eq!(wait_file(&copy, |t| t == written), written, "rewritten from the stored plan");
    let kept: Vec<String> = std::fs::read_dir(root.join(".forge/rejected"))
        .expect("rejected dir")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect();
    assert_eq!(kept, vec![format!("{written}USER EDIT\n")], "the user's text is kept");
}
