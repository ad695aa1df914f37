//! The `call` and `history` scenarios (issue 17, docs/performance.md):
//!
//! - `call`: what one `forge-lsp call` costs, spawn → exit, with no server running (the
//!   tool runs in-process) and with the project's server running (the call goes to it),
//!   beside the spawn → exit of a binary that does nothing (`forge-bench-anchor exit`).
//! - `history`: `initialize` and `forge-lsp call` on a repository with a long history
//!   (1,000,000 commits by default, built once with `git fast-import` and cached under
//!   `~/.cache/forge-lsp-bench/`) against a one-commit repository, interleaved.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::client::{Server, Target};
use super::fixture::{git, seed_findings, World};
use super::report::{ms, thousands, Latency, Report, Target as Goal};
use super::{create_schema, SETTLE};

/// The `call` every measurement makes: a read of the store with a small result.
const CALL: [&str; 3] = ["call", "plan-read", r#"{"recent":true}"#];

/// Runs `forge-lsp call plan-read {"recent":true}` once: spawn → exit.
fn run_call(t: &Target) -> Duration {
    let mut cmd = t.command();
    cmd.args(CALL).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let t0 = Instant::now();
    let out = cmd.output().expect("run forge-lsp call");
    let took = t0.elapsed();
    assert!(out.status.success(), "forge-lsp call failed: {}", String::from_utf8_lossy(&out.stderr));
    took
}

/// The route `forge-lsp call --verbose` reports (its standard error).
fn call_route(t: &Target) -> String {
    let out = t.command().args(["call", "--verbose", "plan-read", r#"{"recent":true}"#]).output().expect("call");
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines().find(|l| !l.trim().is_empty()).unwrap_or("(nothing on stderr)").trim().to_string()
}

fn run_exit(anchor: &Path) -> Duration {
    let t0 = Instant::now();
    let status = Command::new(anchor).arg("exit").stdin(Stdio::null()).status().expect("run forge-bench-anchor");
    let took = t0.elapsed();
    assert!(status.success(), "forge-bench-anchor exit failed");
    took
}

/// `forge-lsp call` spawn → exit, without and with the project's server running, and with
/// it running on 10,000 stored findings (a connection that published them would make
/// every call pay for it); with the server's CPU time per call.
pub fn scenario_call(bin: &Path, anchor: Option<&Path>, quick: bool, r: &mut Report) {
    let (warm, n) = if quick { (3, 20) } else { (10, 100) };
    eprintln!("[call] forge-lsp call plan-read {{\"recent\":true}}: spawn → exit, {n} runs");
    if anchor.is_none() {
        eprintln!("  process floor skipped: no forge-bench-anchor");
    }
    let files = 100;
    let w = World::new("call", bin, files, 110);
    create_schema(&w);
    let mut floor = vec![];
    let measure = |label: &str, server: Option<u32>, r: &mut Report, floor: &mut Vec<Duration>| {
        r.figure(format!("forge-lsp call route ({label})"), call_route(&w.target));
        let mut v = vec![];
        let mut cpu = Duration::ZERO;
        for i in 0..warm + n {
            let f = anchor.map(run_exit);
            let before = server.map(cpu_time);
            let c = run_call(&w.target);
            if i >= warm {
                v.push(c);
                floor.extend(f);
                if let (Some(pid), Some(before)) = (server, before) {
                    cpu += cpu_time(pid).saturating_sub(before);
                }
            }
        }
        if server.is_some() {
            r.figure(
                format!("server CPU time per forge-lsp call ({label})"),
                format!("{} ms (user + system, mean of {n}; the clock ticks are 10 ms)", ms(cpu / n as u32)),
            );
        }
        let l = r.latency(Latency::new(format!("forge-lsp call plan-read, spawn → exit ({label})"), v));
        let p50 = l.p50();
        r.targets.push(Goal {
            what: format!("forge-lsp call per process, p50 ({label}) (#17)"),
            measured: format!("{} ms", ms(p50)),
            limit: "≤ 3 ms".into(),
            met: p50 <= Duration::from_millis(3),
        });
    };
    measure("no server running: in-process", None, r, &mut floor);
    let (mut s, _) = Server::connect(&w.target);
    s.settle(SETTLE);
    measure("the project's server running", Some(s.pid()), r, &mut floor);
    // Stored behind the running server's back (it publishes them to new connections only).
    seed_findings(&mut w.open_db(), &w.project_id, 10_000, files, 1);
    measure("the project's server running, 10,000 findings stored", Some(s.pid()), r, &mut floor);
    s.stop();
    if anchor.is_some() {
        r.latency(Latency::new("process floor: spawn → exit of forge-bench-anchor exit", floor));
    }
}

/// The CPU time (user + system) process `pid` has used so far, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which is in parentheses and may hold spaces):
    // utime and stime are the 12th and 13th of them, in clock ticks.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// `git` in `dir`, output ignored; false when it failed.
fn git_quiet(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `~/.cache/forge-lsp-bench` (or `$XDG_CACHE_HOME/forge-lsp-bench`).
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("forge-lsp-bench")
}

/// Writes the fast-import stream of a `commits`-commit linear history on `main`: the
/// first commit adds README.md and history.txt, every 1,000th rewrites history.txt, the
/// others only move the history (same tree).
fn fast_import_stream(out: &mut impl Write, commits: usize) -> std::io::Result<()> {
    let base = 1_600_000_000u64;
    for i in 0..commits {
        let msg = format!("commit {i} of the long history\n");
        writeln!(out, "commit refs/heads/main")?;
        writeln!(out, "committer Forge Bench <bench@example.invalid> {} +0000", base + i as u64)?;
        write!(out, "data {}\n{msg}", msg.len())?;
        if i == 0 {
            let readme = "# history bench\n";
            write!(out, "M 100644 inline README.md\ndata {}\n{readme}\n", readme.len())?;
        }
        if i % 1000 == 0 {
            let text = format!("history at commit {i}\n");
            write!(out, "M 100644 inline history.txt\ndata {}\n{text}\n", text.len())?;
        }
        writeln!(out)?;
    }
    writeln!(out, "done")
}

/// The cached `commits`-commit repository, built with `git fast-import` if missing.
/// Returns the repository and how long building took (`None`: it was cached).
fn long_history(commits: usize) -> (PathBuf, Option<Duration>) {
    let dir = cache_dir().join(format!("history-{commits}"));
    let repo = dir.join("repo");
    if dir.join("complete").exists() && repo.join(".git").exists() {
        return (repo, None);
    }
    let t0 = Instant::now();
    eprintln!(
        "  building a {}-commit repository in {} (cached for later runs)",
        thousands(commits as u64),
        dir.display()
    );
    let tmp = cache_dir().join(format!("history-{commits}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let tmp_repo = tmp.join("repo");
    std::fs::create_dir_all(&tmp_repo).expect("create the history cache directory");
    git(&tmp_repo, &["init", "-q"]);
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet", "--done"])
        .current_dir(&tmp_repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .spawn()
        .expect("run git fast-import");
    {
        let mut input = std::io::BufWriter::with_capacity(1 << 20, child.stdin.take().expect("stdin"));
        fast_import_stream(&mut input, commits).expect("write the fast-import stream");
        input.flush().expect("flush the fast-import stream");
    }
    assert!(child.wait().expect("git fast-import").success(), "git fast-import failed");
    git(&tmp_repo, &["reset", "-q", "--hard", "main"]);
    let count = git(&tmp_repo, &["rev-list", "--count", "HEAD"]);
    assert_eq!(count.trim(), commits.to_string(), "the built history");
    std::fs::write(tmp.join("complete"), format!("{commits} commits\n")).expect("mark the cache complete");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).expect("move the built repository into the cache");
    (repo, Some(t0.elapsed()))
}

/// `initialize` and `forge-lsp call` on a long history vs a one-commit repository.
pub fn scenario_history(bin: &Path, commits: usize, quick: bool, r: &mut Report) {
    let c = thousands(commits as u64);
    eprintln!("[history] initialize and forge-lsp call: {c}-commit repository vs one commit");
    let (repo, built) = long_history(commits);
    r.figure(
        format!("{c}-commit repository"),
        match built {
            Some(d) => format!("built with git fast-import in {:.1} s, cached at {}", d.as_secs_f64(), repo.display()),
            None => format!("cached at {}", repo.display()),
        },
    );
    let repo = repo.canonicalize().expect("canonical history repository");
    // A world for the one-commit repository, or for the long history (its own tiny
    // repository unused): fresh data, config and runtime directories either way.
    let world = |long: bool| {
        let mut w = World::new(if long { "history-long" } else { "history-one" }, bin, 0, 0);
        if long {
            w.target.root = repo.clone();
        }
        w
    };
    // A world on a new linked working tree of the long history: a git directory of its
    // own, so nothing a server remembers per working tree is there yet.
    let new_tree = || {
        let mut w = World::new("history-tree", bin, 0, 0);
        let tree = w._scratch.dir.join("tree");
        let path = tree.to_str().expect("UTF-8 scratch path");
        git(&repo, &["worktree", "add", "-q", "--detach", path, "main"]);
        w.target.root = tree.canonicalize().expect("canonical working tree");
        w
    };
    let drop_tree = |w: World| {
        let _ = git_quiet(&repo, &["worktree", "remove", "--force", &w.target.root.to_string_lossy()]);
    };
    let _ = git_quiet(&repo, &["worktree", "prune"]);
    let start = |t: &Target| {
        let (s, took) = Server::start(t);
        s.stop();
        took
    };

    // Fresh data directories and a new working tree (long history) or repository (one
    // commit) every run: nothing the server may keep in its data directory or per working
    // tree is there yet.
    let w = new_tree();
    let first_long = start(&w.target);
    drop_tree(w);
    let (mut fresh, mut n) = if quick { (3, 5) } else { (5, 20) };
    if first_long > Duration::from_secs(1) {
        fresh = fresh.min(3);
        eprintln!(
            "  initialize on {c} commits took {:.1} s: {fresh} runs with a new working tree only",
            first_long.as_secs_f64()
        );
    }
    let (mut init_1, mut init_n, mut call_1, mut call_n) = (vec![], vec![], vec![], vec![]);
    for _ in 0..fresh {
        init_1.push(start(&world(false).target));
        let w = new_tree();
        init_n.push(start(&w.target));
        drop_tree(w);
        call_1.push(run_call(&world(false).target));
        let w = new_tree();
        call_n.push(run_call(&w.target));
        drop_tree(w);
    }
    let mut rows = vec![
        ("initialize: spawn → response, new repository or working tree", init_1, init_n),
        ("forge-lsp call plan-read, spawn → exit, new repository or working tree", call_1, call_n),
    ];

    // One data directory per repository, used again and again.
    let (one, long) = (world(false), world(true));
    let warm = if quick { 1 } else { 2 };
    let (mut init_1, mut init_n, mut call_1, mut call_n) = (vec![], vec![], vec![], vec![]);
    let mut i = 0;
    while i < warm + n {
        let a = start(&one.target);
        let b = start(&long.target);
        if i == 0 && b > Duration::from_secs(1) {
            n = n.min(3);
            eprintln!("  initialize on {c} commits took {:.1} s again: {n} measured runs only", b.as_secs_f64());
        }
        let x = run_call(&one.target);
        let y = run_call(&long.target);
        if i >= warm {
            init_1.push(a);
            init_n.push(b);
            call_1.push(x);
            call_n.push(y);
        }
        i += 1;
    }
    rows.push(("initialize: spawn → response, again", init_1, init_n));
    rows.push(("forge-lsp call plan-read, spawn → exit, again", call_1, call_n));
    for (what, one, long) in rows {
        let one = Latency::new(format!("{what}, one-commit repository"), one);
        let long = Latency::new(format!("{what}, {c}-commit repository"), long);
        let ratio = long.p50().as_secs_f64() / one.p50().as_secs_f64();
        r.targets.push(Goal {
            what: format!("{what}: {c} commits within 2× one commit (p50) (#17)"),
            measured: format!("{} ms vs {} ms = {ratio:.2}×", ms(long.p50()), ms(one.p50())),
            limit: "≤ 2×".into(),
            met: ratio <= 2.0,
        });
        r.latency(one);
        r.latency(long);
    }
}
