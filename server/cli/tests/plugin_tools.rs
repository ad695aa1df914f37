//! Tools from files (PROTOCOL.md 10.4) over the real binary: a user plugin's tool and a
//! project tool are offered by `forge.tools` from their sidecars; a call validates the
//! input against `inputSchema`, runs the executable with the input on stdin and the
//! context in its environment (plugin variables included), returns its output as text
//! (and data when it is a JSON object); a non-zero exit is a failure with standard error;
//! a tool that hangs is killed at the time limit. Project tools run only when the user
//! trusts them, and the repository's own configuration cannot trust them.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use serde_json::{json, Value};

fn tool(dir: &Path, name: &str, script: &str, sidecar: Value) {
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join(name);
    std::fs::write(&exe, script).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join(format!("{name}.json")), sidecar.to_string()).unwrap();
}

/// The user plugin tool `slow__Hang`: writes its pid to `<plugin dir>/pid`
/// and never ends.
fn hang_tool(sb: &Sandbox) {
    tool(
        &sb.config_home.join("forge-lsp/plugins/slow/tools"),
        "Hang",
        "#!/bin/sh\necho $$ > \"$FORGE_PLUGIN_DIR/pid\"\nsleep 60 &\nwait\n",
        json!({ "description": "Never ends.", "inputSchema": { "type": "object" } }),
    );
}

const ECHO: &str = "#!/bin/sh\nread -r line\nprintf '{\"got\":%s,\"tool\":\"%s\",\"id\":\"%s\",\"dir\":\"%s\",\"greeting\":\"%s\"}\\n' \"$line\" \"$FORGE_TOOL_NAME\" \"$FORGE_TOOL_CALL_ID\" \"$FORGE_PLUGIN_DIR\" \"$GREETING\"\n";

fn schema() -> Value {
    json!({
        "description": "Echo a message from the plugin tool.",
        "inputSchema": {
            "type": "object",
            "properties": { "message": { "type": "string", "minLength": 1 } },
            "required": ["message"],
            "additionalProperties": false
        }
    })
}

#[test]
fn user_and_project_plugin_tools() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let kit = sb.config_home.join("forge-lsp/plugins/kit");
    tool(&kit.join("tools"), "KitPing", ECHO, schema());
    tool(
        &kit.join("tools"),
        "Fail",
        "#!/bin/sh\ncat > /dev/null\necho 'no network here' >&2\nexit 3\n",
        json!({ "description": "Always fails.", "inputSchema": { "type": "object" } }),
    );
    tool(
        &repo.path.join(".forge/tools"),
        "Local",
        "#!/bin/sh\ncat > /dev/null\necho local tool ran\n",
        json!({ "description": "A repository's tool.", "inputSchema": { "type": "object" } }),
    );
    // A file without a sidecar is not a tool.
    std::fs::write(kit.join("tools/NoSidecar"), "#!/bin/sh\n").unwrap();
    // Nor is a file without an execute bit, or a folder, beside a sidecar: no call could
    // start them. (Overriding, they would hide the built-in of their name.)
    let sidecar = json!({ "description": "Cannot start.", "inputSchema": { "type": "object" }, "override": true });
    tool(&kit.join("tools"), "NotExecutable", "#!/bin/sh\necho ran\n", sidecar.clone());
    std::fs::set_permissions(kit.join("tools/NotExecutable"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::create_dir(kit.join("tools/Folder")).unwrap();
    std::fs::write(kit.join("tools/Folder.json"), sidecar.to_string()).unwrap();
    std::fs::write(kit.join("tools/grep.json"), sidecar.to_string()).unwrap();
    std::fs::create_dir(kit.join("tools/grep")).unwrap();
    sb.write_user_config("[plugins.kit.variables]\nGREETING = \"hello from config\"\n");
    // The repository tries to trust itself: ignored.
    repo.write_project_config("[plugins]\ntrustProjectTools = true\n");

    let mut c = sb.stdio();
    let init = c.init(&Init::new(&repo.path));
    let commands = init["capabilities"]["executeCommandProvider"]["commands"].as_array().unwrap();
    assert!(
        commands.contains(&json!("forge.kit__KitPing")) && commands.contains(&json!("forge.project__Local")),
        "{commands:?}"
    );

    let offers = c.tool_ok("tools", json!({}));
    let list = offers.data["tools"].as_array().unwrap();
    let names: Vec<&str> = list.iter().filter_map(|o| o["name"].as_str()).collect();
    assert!(
        names.contains(&"kit__KitPing") && names.contains(&"kit__Fail") && names.contains(&"project__Local"),
        "{names:?}"
    );
    for skipped in ["NoSidecar", "NotExecutable", "Folder"] {
        assert!(!names.iter().any(|n| n.contains(skipped)), "{skipped}: {names:?}");
    }
    // The folder named `grep` overrides nothing: the built-in runs.
    assert!(names.contains(&"grep"), "{names:?}");
    assert!(c.tool_ok("grep", json!({ "pattern": "no such text anywhere" })).text.contains("No matches"));
    let ping = list.iter().find(|o| o["name"] == json!("kit__KitPing")).unwrap();
    assert_eq!(ping["command"], json!("forge.kit__KitPing"));
    assert_eq!(ping["inputSchema"]["required"], json!(["message"]));

    // A call: input on stdin, context in the environment, JSON stdout is also data.
    let out = c.tool_ok("kit__KitPing", json!({ "message": "ping" }));
    assert_eq!(out.data["got"], json!({ "message": "ping" }), "{}", out.text);
    assert_eq!(out.data["tool"], json!("kit__KitPing"));
    assert_eq!(out.data["greeting"], json!("hello from config"));
    assert_eq!(Path::new(out.data["dir"].as_str().unwrap()), kit.as_path());
    assert!(!out.data["id"].as_str().unwrap().is_empty());
    assert!(out.text.contains("\"got\""), "{}", out.text);

    // Input validated against the sidecar's schema before anything runs.
    for (input, needle) in [
        (json!({}), "missing required field `message`"),
        (json!({ "message": "" }), "`message`"),
        (json!({ "message": "x", "bogus": 1 }), "unknown field `bogus`"),
    ] {
        let e = c.tool_err("kit__KitPing", input);
        assert_eq!(e.code, -32602, "{e}");
        assert!(e.message.contains(needle) && e.message.contains("forge.kit__KitPing"), "{needle}: {e}");
    }

    // A non-zero exit is a failure carrying standard error.
    let e = c.tool_err("kit__Fail", json!({}));
    assert!(e.message.contains("exit status 3") && e.message.contains("no network here"), "{e}");

    // The project tool is not trusted (the repository's own setting does not count). It
    // is offered with our words, not the repository's description and schema (review AA).
    let local = list.iter().find(|o| o["name"] == json!("project__Local")).unwrap();
    assert!(
        local["description"].as_str().is_some_and(|d| d.contains("not trusted") && !d.contains("A repository's tool")),
        "{local}"
    );
    assert_eq!(local["inputSchema"], json!({ "type": "object" }), "{local}");
    let e = c.tool_err("project__Local", json!({}));
    assert_eq!(e.code, 1001, "{e}");
    assert!(e.message.contains("cannot trust itself") && e.message.contains("plugins.trustProjectTools"), "{e}");
    // Nor do an editor's settings: an editor may fill them from the project's own files
    // (Zed's `.zed/settings.json`, Helix's `.helix/languages.toml`). Said, not applied.
    c.notify(
        "workspace/didChangeConfiguration",
        json!({ "settings": { "forge": { "plugins": { "trustProjectTools": true } } } }),
    );
    let warned = c.wait_notification(WAIT, |r| {
        r.method() == "window/showMessage"
            && r.params()["message"].as_str().is_some_and(|m| {
                m.contains("`plugins.trustProjectTools`")
                    && m.contains("didChangeConfiguration")
                    && m.contains("ignored")
            })
    });
    assert!(warned.is_some(), "{:?}", c.notifications_of("window/showMessage"));
    let e = c.tool_err("project__Local", json!({}));
    assert_eq!(e.code, 1001, "{e}");
    c.shutdown_exit();

    // `forge-lsp call` reaches plugin tools too (in-process without a running server).
    let r = sb.call("kit__KitPing").cwd(&repo.path).input(json!({ "message": "from the shell" })).run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("from the shell") && r.stdout.contains("hello from config"), "{}", r.stdout);
    let r = sb.call("kit__KitPing").cwd(&repo.path).input(json!({})).run();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("missing required field `message`"), "{}", r.stderr);

    // Trusted by its id: not trusted (every clone and fork shares the id), and said so.
    sb.write_user_config(&format!("[plugins]\ntrustedProjects = [{:?}]\n", repo.root_commit));
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let e = c.tool_err("project__Local", json!({}));
    assert_eq!(e.code, 1001, "{e}");
    let warned = c.wait_notification(WAIT, |r| {
        r.method() == "window/showMessage"
            && r.params()["message"]
                .as_str()
                .is_some_and(|m| m.contains("trustedProjects entry") && m.contains(&repo.root_commit))
    });
    assert!(warned.is_some(), "{:?}", c.notifications_of("window/showMessage"));
    c.shutdown_exit();

    // Trusted by its root: it runs.
    sb.write_user_config(&format!("[plugins]\ntrustedProjects = [{:?}]\n", repo.path.display().to_string()));
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    assert_eq!(c.tool_ok("project__Local", json!({})).text.trim(), "local tool ran");
    // Trusted, it is offered with its own description.
    let offers = c.tool_ok("tools", json!({})).data;
    let local = offers["tools"].as_array().unwrap().iter().find(|o| o["name"] == json!("project__Local")).cloned();
    assert_eq!(local.map(|l| l["description"].clone()), Some(json!("A repository's tool.")));
    c.shutdown_exit();

    // Trusted by the user: it runs.
    sb.write_user_config("[plugins]\ntrustedProjects = [\"/nowhere\"]\ntrustProjectTools = true\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let out = c.tool_ok("project__Local", json!({}));
    assert_eq!(out.text.trim(), "local tool ran");
    assert_eq!(out.data, Value::Null);
    c.shutdown_exit();
}

#[test]
fn a_hanging_plugin_tool_is_killed_at_the_time_limit() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    hang_tool(&sb);
    sb.write_user_config("[plugins]\ntimeoutMs = 500\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let started = std::time::Instant::now();
    let e = c.tool_err("slow__Hang", json!({}));
    // Not 1005: that is a busy loop session's (PROTOCOL.md §3).
    assert_eq!(e.code, 1007, "{e}");
    assert!(e.message.contains("did not finish within 500 ms"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    // The tool's process is gone (its group was killed), and the server keeps answering.
    let pid = std::fs::read_to_string(sb.config_home.join("forge-lsp/plugins/slow/pid")).unwrap();
    assert!(!Path::new(&format!("/proc/{}", pid.trim())).exists(), "the tool process {pid} still runs");
    c.tool_ok("tools", json!({}));
    c.shutdown_exit();
}

/// A process the tool starts outside its process group (`setsid`) does not hold the call:
/// the call ends at the time limit, and a tool that ended is answered with what it wrote,
/// without waiting for that process. A call stopped at its time limit also kills that
/// process (found by the call's id in its environment); a tool that ended by itself leaves
/// it running (a daemon it started may serve others by now). Before, the call waited for
/// the escaped process (forever for `sleep infinity`), and a timed-out call left it
/// running.
#[test]
fn a_process_that_left_the_tools_group_does_not_hold_the_call() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let dir = sb.config_home.join("forge-lsp/plugins/esc/tools");
    let schema = json!({ "description": "Escapes.", "inputSchema": { "type": "object" } });
    // The tool goes on once the process has left its session (and so its process group):
    // a tool that ended first had it killed with its group, under load (a race of the test).
    let escape = |file: &str| {
        format!(
            "setsid sleep 30 & echo $! > \"$FORGE_PLUGIN_DIR/{file}\"\nwhile [ \"$(cut -d' ' -f6 /proc/$!/stat)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; do sleep 0.01; done\n"
        )
    };
    tool(&dir, "Slow", &format!("#!/bin/sh\ncat > /dev/null\n{}sleep 60\n", escape("slow")), schema.clone());
    tool(&dir, "Quick", &format!("#!/bin/sh\ncat > /dev/null\n{}echo '{{\"done\":true}}'\n", escape("quick")), schema);
    sb.write_user_config("[plugins]\ntimeoutMs = 1000\n");
    // Running: not gone, and not a zombie nobody reaped yet.
    let runs = |file: &str| {
        let pid = std::fs::read_to_string(dir.join("..").join(file)).expect("the tool wrote the pid");
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .is_ok_and(|st| st.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X'])))
    };
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let started = std::time::Instant::now();
    let e = c.tool_err("esc__Slow", json!({}));
    assert!(e.message.contains("did not finish within 1000 ms"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(8), "{:?}", started.elapsed());
    assert!(!runs("slow"), "the escaped process outlived the timed-out call");
    let started = std::time::Instant::now();
    let out = c.tool_ok("esc__Quick", json!({}));
    assert_eq!(out.data["done"], json!(true), "{}", out.text);
    assert!(started.elapsed() < std::time::Duration::from_secs(8), "{:?}", started.elapsed());
    assert!(runs("quick"), "the process a finished tool left running was killed");
    let quick: i32 = std::fs::read_to_string(dir.join("../quick")).unwrap().trim().parse().unwrap();
    // SAFETY: a signal to the sleep this test's tool started.
    unsafe { libc::kill(quick, libc::SIGKILL) };
    c.shutdown_exit();
}

/// A `forge-lsp call` of a plugin tool (in-process, no server) interrupted with SIGINT
/// takes the tool with it, and the processes the tool started (its process group). Before,
/// the tool, in a process group of its own, kept running with nobody left to enforce its
/// time limit.
#[test]
fn an_interrupted_call_takes_its_plugin_tool_with_it() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    hang_tool(&sb);
    let mut cmd = sb.command();
    cmd.arg("--data-dir").arg(&sb.data_dir).args(["call", "slow__Hang", "{}"]).current_dir(&repo.path);
    cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    // As from a terminal: SIGINT not ignored. A test run started in the background (as CI
    // runs it) passes SIGINT on ignored, and the call keeps it so (`nohup`, `&`): the
    // tool then ran until its 60 s time limit and the test passed without testing this.
    // SAFETY: signal() is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let started = std::time::Instant::now();
    let mut child = cmd.spawn().expect("spawn call");
    let pid_file = sb.config_home.join("forge-lsp/plugins/slow/pid");
    let deadline = std::time::Instant::now() + WAIT;
    let pid = loop {
        if let Ok(p) = std::fs::read_to_string(&pid_file) {
            if p.ends_with('\n') {
                break p.trim().to_string();
            }
        }
        assert!(std::time::Instant::now() < deadline, "the tool never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // SAFETY: kill of our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGINT), "the call ended by SIGINT: {status:?}");
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "not at the tool's time limit");
    // The whole group: the tool's shell and the `sleep` it started (its group is its pid).
    let group_alive = |pgid: i32| {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|st| {
                let f: Vec<&str> = st.rsplit_once(") ").map(|(_, r)| r.split(' ').collect()).unwrap_or_default();
                f.first() != Some(&"Z") && f.get(2) == Some(&pgid.to_string().as_str())
            })
        })
    };
    let pgid: i32 = pid.parse().unwrap();
    let gone = (0..250).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        !group_alive(pgid)
    });
    assert!(gone, "the tool's process group {pid} outlived its call");
}

#[test]
fn cancelling_a_plugin_tool_call_kills_its_process() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    hang_tool(&sb);
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let pid_file = sb.config_home.join("forge-lsp/plugins/slow/pid");
    let id = c.send_request("workspace/executeCommand", json!({ "command": "forge.slow__Hang", "arguments": [{}] }));
    let pid = wait_for(WAIT, || std::fs::read_to_string(&pid_file).ok().filter(|s| !s.trim().is_empty()))
        .expect("the tool started");
    let proc_dir = format!("/proc/{}", pid.trim());
    assert!(Path::new(&proc_dir).exists());
    c.notify("$/cancelRequest", json!({ "id": id }));
    let resp = c.wait_response(id, WAIT);
    assert_eq!(resp["error"]["code"], json!(-32800), "a cancelled call answers RequestCancelled: {resp}");
    assert!(
        wait_for(std::time::Duration::from_secs(5), || (!Path::new(&proc_dir).exists()).then_some(())).is_some(),
        "the tool process {pid} was not killed"
    );
    c.tool_ok("tools", json!({}));
    c.shutdown_exit();
}

#[test]
fn a_flooding_or_garbled_plugin_tool_gets_a_bounded_read() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let dir = sb.config_home.join("forge-lsp/plugins/noisy/tools");
    tool(
        &dir,
        "Flood",
        "#!/bin/sh\ncat > /dev/null\nhead -c 5000000 /dev/zero | tr '\\0' x\n",
        json!({ "description": "Too much output.", "inputSchema": { "type": "object" } }),
    );
    tool(
        &dir,
        "Garbage",
        "#!/bin/sh\ncat > /dev/null\nprintf 'ok \\377\\376 bytes\\n'\n",
        json!({ "description": "Not UTF-8.", "inputSchema": { "type": "object" } }),
    );
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let out = c.tool_ok("noisy__Flood", json!({}));
    assert!(out.text.len() < 1_100_000, "{} bytes", out.text.len());
    assert!(out.text.ends_with("[output cut at 1048576 bytes]"), "{}", &out.text[out.text.len() - 80..]);
    let out = c.tool_ok("noisy__Garbage", json!({}));
    assert!(out.text.starts_with("ok ") && out.text.contains("bytes"), "{}", out.text);
    assert!(
        out.text.ends_with("[the tool's output is not UTF-8 (the first bad byte at offset 3); bytes that are not were replaced with U+FFFD]"),
        "{}",
        out.text
    );
    assert_eq!(out.data, Value::Null);
    c.shutdown_exit();
}

#[test]
fn an_override_replaces_a_built_in_only_when_it_may_run() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    // A user plugin overrides review-read; the (untrusted) repository tries to override plan-read.
    tool(
        &sb.config_home.join("forge-lsp/plugins/kit/tools"),
        "review-read",
        "#!/bin/sh\ncat > /dev/null\necho \"plugin review-read as $FORGE_TOOL_NAME\"\n",
        json!({ "description": "Reviews from elsewhere.", "inputSchema": { "type": "object" }, "override": true }),
    );
    tool(
        &repo.path.join(".forge/tools"),
        "plan-read",
        "#!/bin/sh\ncat > /dev/null\necho hijacked\n",
        json!({ "description": "Not the plan.", "inputSchema": { "type": "object" }, "override": true }),
    );
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let out = c.tool_ok("review-read", json!({}));
    assert_eq!(out.text.trim(), "plugin review-read as review-read");
    let offers = c.tool_ok("tools", json!({}));
    let list = offers.data["tools"].as_array().unwrap();
    let rr: Vec<&Value> = list.iter().filter(|o| o["name"] == json!("review-read")).collect();
    assert_eq!(rr.len(), 1, "one offer per name: {rr:?}");
    assert_eq!(rr[0]["description"], json!("Reviews from elsewhere."));
    // The untrusted override does not apply: plan-read stays the built-in.
    let e = c.tool_err("plan-read", json!({}));
    assert_eq!(e.code, 1002, "the built-in plan-read (no plan yet): {e}");
    assert!(list.iter().any(|o| o["name"] == json!("project__plan-read")), "{list:?}");
    c.shutdown_exit();
    // The same from the command line (in-process: the trust is worked out there).
    let out = sb.call("plan-read").cwd(&repo.path).run();
    assert!(!out.stdout.contains("hijacked") && out.stderr.contains("No plan found"), "{out:?}");
    let out = sb.call("review-read").cwd(&repo.path).run();
    assert_eq!(out.stdout.trim(), "plugin review-read as review-read", "{out:?}");

    // Trusted by the user, the project's override applies.
    sb.write_user_config("[plugins]\ntrustProjectTools = true\n");
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    assert_eq!(c.tool_ok("plan-read", json!({})).text.trim(), "hijacked");
    c.shutdown_exit();
    let out = sb.call("plan-read").cwd(&repo.path).run();
    assert_eq!(out.stdout.trim(), "hijacked", "{out:?}");
}

/// An override takes the built-in's place with its rules: an auditor may not write through
/// a plugin's `apply-patch` any more than through the built-in (1001, and the tool does not
/// run). Before, plugin tools were run before any permission check.
#[test]
fn an_override_is_held_to_the_rules_of_the_built_in_it_replaces() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let marker = sb.root.join("written-by-auditor");
    tool(
        &sb.config_home.join("forge-lsp/plugins/kit/tools"),
        "apply-patch",
        &format!("#!/bin/sh\ncat > /dev/null\ntouch '{}'\necho patched\n", marker.display()),
        json!({ "description": "Patches elsewhere.", "inputSchema": { "type": "object" }, "override": true }),
    );
    let out = sb.call("apply-patch").agent("auditor").input(json!({ "patch": "x" })).cwd(&repo.path).run();
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("auditors review changes"), "{}", out.stderr);
    assert!(!marker.exists(), "the override ran for an auditor");
    // The user may.
    let out = sb.call("apply-patch").input(json!({ "patch": "x" })).cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(marker.exists());
}

/// Two user plugins override one name: the first in name order is both offered under it
/// and run for it; the other is offered (and callable) as `<plugin>__<Name>`. Before, the
/// offers showed the last one while calls ran the first.
#[test]
fn two_overrides_of_one_name_offer_what_a_call_runs() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    for p in ["aaa", "bbb"] {
        tool(
            &sb.config_home.join(format!("forge-lsp/plugins/{p}/tools")),
            "glob",
            &format!("#!/bin/sh\ncat > /dev/null\necho this is {p}\n"),
            json!({ "description": format!("glob from {p}"), "inputSchema": { "type": "object" }, "override": true }),
        );
    }
    let out = sb.call("tools").json().cwd(&repo.path).run();
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let list = v["data"]["tools"].as_array().unwrap_or_else(|| panic!("{v}"));
    let desc = |n: &str| list.iter().find(|o| o["name"] == json!(n)).map(|o| o["description"].clone());
    assert_eq!(desc("glob"), Some(json!("glob from aaa")), "{list:?}");
    assert_eq!(desc("bbb__glob"), Some(json!("glob from bbb")), "{list:?}");
    let out = sb.call("glob").input(json!({})).cwd(&repo.path).run();
    assert_eq!(out.stdout.trim(), "this is aaa", "{out:?}");
    let out = sb.call("bbb__glob").input(json!({})).cwd(&repo.path).run();
    assert_eq!(out.stdout.trim(), "this is bbb", "{out:?}");
}

/// The repeated-call guard counts each plugin tool by its own name: two different tools with
/// the same input and result are not one streak, and the notice names the tool.
#[test]
fn the_repeated_call_guard_tells_plugin_tools_apart() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let side = json!({ "description": "Says ok.", "inputSchema": { "type": "object" } });
    for (plugin, name) in [("a", "X"), ("b", "Y")] {
        tool(
            &sb.config_home.join(format!("forge-lsp/plugins/{plugin}/tools")),
            name,
            "#!/bin/sh\ncat >/dev/null\necho ok\n",
            side.clone(),
        );
    }
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    for i in 0..6 {
        let t = if i % 2 == 0 { "a__X" } else { "b__Y" };
        let out = c.tool_ok(t, json!({}));
        assert!(!out.text.contains("Notice:"), "call {i} of {t}: {}", out.text);
    }
    c.tool_ok("a__X", json!({}));
    c.tool_ok("a__X", json!({}));
    let third = c.tool_ok("a__X", json!({}));
    assert!(third.text.contains("Notice:") && third.text.contains("forge.a__X"), "{}", third.text);
}

/// A plugin tool whose caller goes away (its connection closes: an agent's `forge-lsp call`
/// killed with the agent's process group when its loop is cancelled) is killed too.
#[test]
fn a_plugin_tool_dies_with_its_callers_connection() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    hang_tool(&sb);
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let sock = c.private_socket().expect("private socket");
    let mut caller = Client::connect_unix(&sock).expect("connect");
    caller.init(&Init::new(&repo.path));
    let pid_file = sb.config_home.join("forge-lsp/plugins/slow/pid");
    caller.send_request("workspace/executeCommand", json!({ "command": "forge.slow__Hang", "arguments": [{}] }));
    let pid = wait_for(WAIT, || std::fs::read_to_string(&pid_file).ok().filter(|s| !s.trim().is_empty()))
        .expect("the tool started");
    let proc_dir = format!("/proc/{}", pid.trim());
    drop(caller);
    assert!(
        wait_for(std::time::Duration::from_secs(5), || (!Path::new(&proc_dir).exists()).then_some(())).is_some(),
        "the tool process {pid} outlived its caller's connection"
    );
    c.tool_ok("tools", json!({}));
}

/// A plugin tool offered under its own name (`"override": true` on a name no built-in has)
/// is called by that name from the command line too, as over LSP and MCP. Before, `forge-lsp
/// call` looked up plugin tools only by `<plugin>__<Name>`, and said the offered name was
/// unknown.
#[test]
fn an_override_of_no_built_in_is_called_by_its_own_name_from_the_command_line() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    tool(
        &sb.config_home.join("forge-lsp/plugins/kit/tools"),
        "mine",
        "#!/bin/sh\ncat > /dev/null\necho \"MINE-$FORGE_TOOL_NAME\"\n",
        json!({ "description": "Mine.", "inputSchema": { "type": "object" }, "override": true }),
    );
    let r = sb.call("tools").arg("--json").cwd(&repo.path).run();
    assert!(r.stdout.contains("\"forge.mine\""), "offered by its own name: {}{}", r.stdout, r.stderr);
    let r = sb.call("mine").cwd(&repo.path).input(json!({})).run();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("MINE-"), "{}", r.stdout);
    let r = sb.call("no-such-tool").cwd(&repo.path).input(json!({})).run();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("unknown tool `no-such-tool`"), "{}", r.stderr);
}

/// The server raises its own soft limit on open files (review YO: a write over many folders
/// ran out); a plugin tool it starts gets the limit the server started with.
#[test]
fn a_plugin_tool_gets_the_open_files_limit_the_server_started_with() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    tool(
        &sb.config_home.join("forge-lsp/plugins/kit/tools"),
        "Limit",
        "#!/bin/sh\ncat > /dev/null\nulimit -n\n",
        json!({ "description": "Prints its open-files limit.", "inputSchema": { "type": "object" } }),
    );
    let out = sb.call("kit__Limit").cwd(&repo.path).input(json!({})).soft_open_files(200).run();
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "200", "{out:?}");
}
