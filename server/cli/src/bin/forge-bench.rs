//! `forge-bench`: drives the release `forge-lsp` binary over stdio and prints latency
//! percentiles, start-up time, idle memory and write throughput (docs/performance.md).
//!
//! ```text
//! cargo build --release -p forge-lsp --bins
//! target/release/forge-bench [--bin target/release/forge-lsp] [--anchor PATH] [--python PATH]
//!                            [--quick] [--writes N] [--commits N] [--only LIST]
//! ```
//!
//! The `anchors` scenario measures reference servers in the same run, interleaved with
//! `forge-lsp`: a raw framed echo and a tower-lsp-server no-op (`forge-bench-anchor`) and a
//! pygls no-op (`forge_bench/pygls_anchor.py`, when a Python with pygls is found).
//!
//! This is a benchmark that prints figures, not a test: it asserts nothing about speed.
//! Every scenario uses a fresh temporary git repository, data directory, config and
//! runtime directory; large stores are seeded directly with rusqlite after one server
//! run created the schema.

#[path = "forge_bench/anchors.rs"]
mod anchors;
#[path = "forge_bench/client.rs"]
mod client;
#[path = "forge_bench/fixture.rs"]
mod fixture;
#[path = "forge_bench/history.rs"]
mod history;
#[path = "forge_bench/loops.rs"]
mod loops;
#[path = "forge_bench/report.rs"]
mod report;
#[path = "forge_bench/tools.rs"]
mod tools;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use client::{rss_kib, RssSampler, Server, Target};
use fixture::{plan_text, seed_findings, seed_plans, source_file, World};
use report::{ms, thousands, Latency, Report};

const USAGE: &str =
    "usage: forge-bench [--bin PATH] [--anchor PATH] [--python PATH] [--quick] [--writes N] [--commits N] [--only LIST]

  --bin PATH     the forge-lsp binary (default: forge-lsp next to this binary)
  --anchor PATH  the forge-bench-anchor binary (default: next to this binary)
  --python PATH  a Python that imports pygls, for the pygls anchor (default: FORGE_BENCH_PYTHON,
                 else tests/.venv/bin/python of the working directory or of the source tree)
  --quick        small counts, for a smoke check (figures are not stable)
  --writes N     review-write throughput loop length (default 5000)
  --commits N    history of the long repository in the history scenario (default 1000000,
                 --quick 20000); built once and cached in ~/.cache/forge-lsp-bench/
  --only LIST    run only these scenarios (comma-separated): anchors, plans, startup, review,
                 diagnostics, throughput, call, history, loops, sandbox, tools
  FORGE_BENCH_KEEP=1 keeps the scratch directories";

/// Iteration counts and store sizes.
struct Counts {
    warm: usize,
    noop: usize,
    plan_read: usize,
    plan_write: usize,
    plan_edit: usize,
    content: usize,
    startups: usize,
    plans: usize,
    findings: usize,
    files: usize,
    review_write: usize,
    read_file: usize,
    read_pattern: usize,
    read_all: usize,
    diag_findings: usize,
    diag_files: usize,
    diag_runs: usize,
    writes: usize,
    /// review-write calls per side of the view-copies comparison (100,000 stored).
    copies_writes: usize,
}

impl Counts {
    fn full() -> Counts {
        Counts {
            warm: 50,
            noop: 2000,
            plan_read: 500,
            plan_write: 300,
            plan_edit: 500,
            content: 500,
            startups: 30,
            plans: 10_000,
            findings: 100_000,
            files: 1000,
            review_write: 1000,
            read_file: 300,
            read_pattern: 10,
            read_all: 3,
            diag_findings: 10_000,
            diag_files: 1000,
            diag_runs: 7,
            writes: 5000,
            copies_writes: 1000,
        }
    }

    fn quick() -> Counts {
        Counts {
            warm: 5,
            noop: 100,
            plan_read: 30,
            plan_write: 20,
            plan_edit: 30,
            content: 30,
            startups: 3,
            plans: 1000,
            findings: 10_000,
            files: 100,
            review_write: 50,
            read_file: 20,
            read_pattern: 3,
            read_all: 1,
            diag_findings: 1000,
            diag_files: 100,
            diag_runs: 1,
            writes: 500,
            copies_writes: 100,
        }
    }
}

struct Args {
    bin: PathBuf,
    anchor: Option<PathBuf>,
    python: Option<PathBuf>,
    quick: bool,
    writes: Option<usize>,
    commits: Option<usize>,
    only: Option<Vec<String>>,
}

const SCENARIOS: &[&str] = &[
    "anchors",
    "plans",
    "startup",
    "review",
    "diagnostics",
    "throughput",
    "call",
    "history",
    "loops",
    "sandbox",
    "tools",
];

fn parse_args() -> Args {
    let mut args =
        Args { bin: default_bin(), anchor: None, python: None, quick: false, writes: None, commits: None, only: None };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| usage_exit(&format!("{name} needs a value")));
        match a.as_str() {
            "--bin" => args.bin = PathBuf::from(value("--bin")),
            "--anchor" => args.anchor = Some(PathBuf::from(value("--anchor"))),
            "--python" => args.python = Some(PathBuf::from(value("--python"))),
            "--quick" => args.quick = true,
            "--commits" => {
                args.commits = Some(
                    value("--commits")
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .unwrap_or_else(|| usage_exit("--commits needs a positive number")),
                )
            }
            "--writes" => {
                args.writes = Some(value("--writes").parse().unwrap_or_else(|_| usage_exit("--writes needs a number")))
            }
            "--only" => {
                let only: Vec<String> = value("--only").split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                    usage_exit(&format!("unknown scenario {bad:?}"));
                }
                args.only = Some(only)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => usage_exit(&format!("unknown argument {other:?}")),
        }
    }
    args
}

fn usage_exit(msg: &str) -> ! {
    eprintln!("forge-bench: {msg}\n{USAGE}");
    std::process::exit(2);
}

fn default_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("forge-lsp")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("target/release/forge-lsp"))
}

/// The 1-minute load average (other work on the machine skews the figures).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Runs `f` `warm` times unmeasured, then `n` times; `f` gets a running index (so
/// alternating inputs stay consistent across warm-up and measurement).
fn measure(s: &mut Server, warm: usize, n: usize, mut f: impl FnMut(&mut Server, usize) -> Duration) -> Vec<Duration> {
    for i in 0..warm {
        f(s, i);
    }
    (warm..warm + n).map(|i| f(s, i)).collect()
}

fn exec(tool: &str, input: Value) -> Value {
    Server::command(tool, input)
}

const EXEC: &str = "workspace/executeCommand";
const SETTLE: Duration = Duration::from_millis(300);

/// Issue 2: no-op round trip and the plan tools on a 2,000-line, 24-section plan.
fn scenario_plans(bin: &std::path::Path, c: &Counts, r: &mut Report) {
    eprintln!("[plans] no-op round trip and plan tools (2,000-line plan, 24 sections)");
    let w = World::new("plans", bin, 0, 0);
    let (mut s, _) = Server::connect(&w.target);
    s.settle(SETTLE);

    // The three round-trip rows are measured interleaved (one of each per iteration), so
    // they see the same machine load and can be compared with each other.
    let noop = exec("tools", json!({}));
    // The transport alone: a request answered with an error without touching the store.
    let floor = json!({ "uri": "forge://no-such-document.md" });
    // The whole tool path (store thread, transaction) with a tiny result.
    let tiny = exec("review-read", json!({ "file": "no/such/file.rs" }));
    let (mut v_noop, mut v_floor, mut v_tiny) = (vec![], vec![], vec![]);
    for i in 0..c.warm * 4 + c.noop {
        let a = s.timed(EXEC, &noop).0;
        let b = s.timed_raw("workspace/textDocumentContent", &floor).0;
        let t = s.timed(EXEC, &tiny).0;
        if i >= c.warm * 4 {
            v_noop.push(a);
            v_floor.push(b);
            v_tiny.push(t);
        }
    }
    let bytes = s.timed(EXEC, &noop).1.to_string().len();
    r.latency(Latency::new("no-op round trip: forge.tools", v_noop));
    r.figure("forge.tools response size", format!("{:.1} KB", bytes as f64 / 1e3));
    r.latency(Latency::new("transport floor: textDocumentContent of an unknown URI (error)", v_floor));
    r.latency(Latency::new("small tool call: forge.review-read, no findings", v_tiny));
    s.settle(SETTLE);

    let plans = [plan_text(2000, 24, 0), plan_text(2000, 24, 1)];
    let first = s.call("plan-write", json!({ "content": plans[0] }));
    let d = &first["data"];
    assert_eq!(d["lines"], 2000, "plan-write report: {d}");
    assert_eq!(d["sectionCount"], 24, "plan-write report: {d}");
    if d["warnings"].as_array().is_some_and(|a| !a.is_empty()) {
        eprintln!("  note: the benchmark plan has structure warnings: {}", d["warnings"]);
    }
    s.settle(SETTLE);

    let read = exec("plan-read", json!({}));
    let (_, out) = s.timed(EXEC, &read);
    assert_eq!(out["data"]["totalLines"], 2000, "plan-read: {}", out["data"]);
    assert!(out["data"]["nextOffset"].is_null(), "plan-read shows the whole plan");
    let v = measure(&mut s, c.warm, c.plan_read, |s, _| s.timed(EXEC, &read).0);
    r.latency(Latency::new("forge.plan-read (2,000 lines)", v));
    s.settle(SETTLE);

    let writes =
        [exec("plan-write", json!({ "content": plans[0] })), exec("plan-write", json!({ "content": plans[1] }))];
    let v = measure(&mut s, c.warm, c.plan_write, |s, i| {
        let (d, out) = s.timed(EXEC, &writes[(i + 1) % 2]);
        debug_assert_eq!(out["data"]["written"], true);
        d
    });
    r.latency(Latency::new("forge.plan-write (2,000 lines, 24 sections)", v));
    s.settle(SETTLE);

    let edits = [
        exec("plan-edit", json!({ "oldString": "edit-token-A", "newString": "edit-token-B" })),
        exec("plan-edit", json!({ "oldString": "edit-token-B", "newString": "edit-token-A" })),
    ];
    let v = measure(&mut s, c.warm, c.plan_edit, |s, i| {
        let (d, out) = s.timed(EXEC, &edits[i % 2]);
        debug_assert_eq!(out["data"]["replaced"], 1);
        d
    });
    r.latency(Latency::new("forge.plan-edit (one small replacement)", v));
    s.settle(SETTLE);

    let uri = format!("forge://plan/session/{}.md", s.session_id);
    let content = json!({ "uri": uri });
    let (_, out) = s.timed("workspace/textDocumentContent", &content);
    assert!(out["text"].as_str().is_some_and(|t| t.split('\n').count() == 2000), "textDocumentContent of {uri}");
    let v = measure(&mut s, c.warm, c.content, |s, _| s.timed("workspace/textDocumentContent", &content).0);
    r.latency(Latency::new("workspace/textDocumentContent (session plan)", v));
    s.stop();
}

/// One server run that initializes creates the schema (and nothing else).
fn create_schema(w: &World) {
    let (mut s, _) = Server::connect(&w.target);
    s.settle(Duration::from_millis(50));
    s.stop();
    assert!(w.db_path().exists(), "the server created {}", w.db_path().display());
}

fn startups(t: &Target, warm: usize, n: usize) -> Vec<Duration> {
    let mut v = vec![];
    for i in 0..warm + n {
        let (s, took) = Server::start(t);
        s.stop();
        if i >= warm {
            v.push(took);
        }
    }
    v
}

/// Idle RSS after initialize, a few calls and 1 s of idling: (rss, peak) in KiB.
fn idle_rss(t: &Target) -> (u64, u64) {
    let (mut s, _) = Server::connect(t);
    s.call("tools", json!({}));
    s.call("plan-read", json!({ "recent": true }));
    s.call("plan-write", json!({ "content": fixture::small_plan(1) }));
    s.call("plan-read", json!({}));
    let _ = s.request("workspace/textDocumentContent", json!({ "uri": "forge://index.md" }));
    s.settle(Duration::from_millis(100));
    std::thread::sleep(Duration::from_secs(1));
    let rss = rss_kib(s.pid());
    s.stop();
    rss
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Issue 2: start-up time and idle memory, without and with 10,000 stored plans.
fn scenario_startup(bin: &std::path::Path, c: &Counts, r: &mut Report) {
    eprintln!("[startup] spawn → initialize response; idle RSS");
    let w = World::new("startup", bin, 0, 0);
    create_schema(&w);
    let warm = 3.min(c.startups);
    r.latency(Latency::new(
        "start-up: spawn → initialize response (empty store)",
        startups(&w.target, warm, c.startups),
    ));
    let (rss, hwm) = idle_rss(&w.target);
    r.figure("idle RSS (empty store)", format!("{} (peak {})", mib(rss), mib(hwm)));

    let t0 = Instant::now();
    seed_plans(&mut w.open_db(), &w.project_id, c.plans);
    eprintln!("  seeded {} plans in {:.2} s", c.plans, t0.elapsed().as_secs_f64());
    let name = format!("start-up: spawn → initialize response ({} plans)", thousands(c.plans as u64));
    r.latency(Latency::new(name, startups(&w.target, warm, c.startups)));
    let (rss, hwm) = idle_rss(&w.target);
    r.figure(format!("idle RSS ({} plans)", thousands(c.plans as u64)), format!("{} (peak {})", mib(rss), mib(hwm)));
    r.idle_rss_kib = Some(rss);
}

fn new_finding(i: usize, files: usize, first_line: usize) -> Value {
    json!({
        "file": source_file(i % files),
        "line": first_line + i / files,
        "severity": if i.is_multiple_of(2) { "bug" } else { "warning" },
        "description": format!("Bench finding {i}: the buffer is not flushed before the handle is dropped."),
        "scenario": "Close the writer while a flush is pending."
    })
}

/// Sequential review-write loop: (per-write latencies, wall time).
fn write_loop(s: &mut Server, n: usize, files: usize, first_line: usize) -> (Vec<Duration>, Duration) {
    let t0 = Instant::now();
    let v = (0..n).map(|i| s.timed(EXEC, &exec("review-write", new_finding(i, files, first_line))).0).collect();
    (v, t0.elapsed())
}

/// Pipelined review-write loop (`window` requests in flight): wall time.
fn write_loop_pipelined(s: &mut Server, n: usize, files: usize, first_line: usize, window: usize) -> Duration {
    s.pipelined(n, window, |i| (EXEC, exec("review-write", new_finding(i, files, first_line))))
}

/// Records a sequential write loop; `before` is (server requests, publishes) before it.
fn throughput_figures(
    r: &mut Report,
    label: &str,
    n: usize,
    lat: Vec<Duration>,
    wall: Duration,
    s: &Server,
    before: (u64, u64),
) {
    let rate = n as f64 / wall.as_secs_f64();
    r.throughput.push((label.to_string(), rate));
    r.figure(
        format!("review-write throughput, sequential ({label})"),
        format!(
            "{} writes/s ({} writes in {:.2} s; meanwhile {} server→client requests, {} publishDiagnostics)",
            thousands(rate as u64),
            thousands(n as u64),
            wall.as_secs_f64(),
            thousands(s.server_requests - before.0),
            thousands(s.diags.count - before.1)
        ),
    );
    r.latency(Latency::new(format!("review-write in the throughput loop ({label})"), lat));
}

/// Issue 3: review tools with 100,000 stored findings.
fn scenario_review(bin: &std::path::Path, c: &Counts, r: &mut Report) {
    let k = thousands(c.findings as u64);
    eprintln!("[review] review-write / review-read with {k} findings over {} files", c.files);
    let per_file = c.findings / c.files;
    let w = World::new("review", bin, c.files, per_file + 40);
    create_schema(&w);
    let t0 = Instant::now();
    seed_findings(&mut w.open_db(), &w.project_id, c.findings, c.files, 1);
    eprintln!("  seeded {k} findings in {:.2} s", t0.elapsed().as_secs_f64());

    let (mut s, _) = Server::connect(&w.target);
    let last = s.wait_diagnostic_uris(c.files);
    r.figure(
        format!("connect → last initial publishDiagnostics ({k} findings, {} files)", thousands(c.files as u64)),
        format!("{} ms (single run)", ms(last - s.spawned_at)),
    );
    s.settle(SETTLE);
    std::thread::sleep(Duration::from_secs(1));
    let (rss, hwm) = rss_kib(s.pid());
    r.figure(
        format!("server RSS after connecting ({k} findings; last initial publish, then 1 s idle)"),
        format!("{} (peak {})", mib(rss), mib(hwm)),
    );
    r.targets.push(report::Target {
        what: format!("server RSS after connecting with {k} findings (#17)"),
        measured: mib(rss),
        limit: "≤ 40 MiB".into(),
        met: rss <= 40 * 1024,
    });

    let v = measure(&mut s, c.warm, c.review_write, |s, i| {
        s.timed(EXEC, &exec("review-write", new_finding(i, c.files, per_file + 1))).0
    });
    r.latency(Latency::new(format!("forge.review-write ({k} stored)"), v));
    s.settle(Duration::from_millis(1200));

    let (_, out) = s.timed(EXEC, &exec("review-read", json!({ "file": source_file(7) })));
    let hits = out["data"]["findings"].as_array().map_or(0, Vec::len);
    assert!(hits >= per_file, "review-read file filter found {hits}");
    let v = measure(&mut s, c.warm.min(10), c.read_file, |s, i| {
        s.timed(EXEC, &exec("review-read", json!({ "file": source_file(i % c.files) }))).0
    });
    r.latency(Latency::new(format!("forge.review-read file=… ({k} stored, ~{per_file} hits)"), v));
    s.settle(SETTLE);

    let pattern = exec("review-read", json!({ "pattern": "handler_42\\b" }));
    let (_, out) = s.timed(EXEC, &pattern);
    let hits = out["data"]["findings"].as_array().map_or(0, Vec::len);
    let v = measure(&mut s, 2.min(c.read_pattern), c.read_pattern, |s, _| s.timed(EXEC, &pattern).0);
    r.latency(Latency::new(format!("forge.review-read pattern=… ({k} stored, {} hits)", thousands(hits as u64)), v));
    s.settle(SETTLE);

    let all = exec("review-read", json!({}));
    let sampler = RssSampler::start(s.pid(), Duration::from_millis(2));
    let (_, out) = s.timed(EXEC, &all);
    let bytes = s.last_response_bytes;
    let returned = match out["data"]["findings"].as_array() {
        Some(a) => thousands(a.len() as u64),
        None if bytes > client::LARGE => "all".into(),
        None => "?".into(),
    };
    let v = measure(&mut s, 0, c.read_all, |s, _| s.timed(EXEC, &all).0);
    r.latency(Latency::new(
        format!("forge.review-read, no filter ({returned} of {k}; response {:.1} MB)", bytes as f64 / 1e6),
        v,
    ));
    // Every finding, page by page (the largest pages the server allows), as a client
    // reading them all would.
    let (mut walks, mut pages, mut total) = (vec![], 0, 0);
    for _ in 0..c.read_all {
        let t0 = Instant::now();
        (pages, total) = (0, 0);
        let mut before = Value::Null;
        loop {
            let mut input = json!({ "limit": 5000 });
            if !before.is_null() {
                input["beforeId"] = before;
            }
            let (_, out) = s.timed(EXEC, &exec("review-read", input));
            pages += 1;
            total += out["data"]["findings"].as_array().map_or(0, Vec::len);
            before = out["data"]["nextBeforeId"].clone();
            if before.is_null() {
                break;
            }
        }
        walks.push(t0.elapsed());
    }
    let during = sampler.stop();
    r.latency(Latency::new(
        format!(
            "forge.review-read, no filter, every page (limit 5000, beforeId): {} findings in {pages} page(s)",
            thousands(total as u64)
        ),
        walks,
    ));
    let (rss, hwm) = rss_kib(s.pid());
    r.figure(format!("server RSS after the unfiltered review-read ({k})"), format!("{} (peak {})", mib(rss), mib(hwm)));
    s.settle(SETTLE);
    std::thread::sleep(Duration::from_secs(1));
    let (after, _) = rss_kib(s.pid());
    r.figure(
        format!("server RSS during / 1 s after the unfiltered review-reads (default page and every page; {k}; sampled every 2 ms)"),
        format!("max {} / {}", mib(during), mib(after)),
    );
    for (when, kib) in [("during", during), ("1 s after", after)] {
        r.targets.push(report::Target {
            what: format!("server RSS {when} the unfiltered review-reads of {k} findings (#17)"),
            measured: mib(kib),
            limit: "≤ 80 MiB".into(),
            met: kib <= 80 * 1024,
        });
    }

    let before = (s.server_requests, s.diags.count);
    let (lat, wall) = write_loop(&mut s, c.writes, c.files, per_file + 10);
    throughput_figures(r, &format!("{k} stored"), c.writes, lat, wall, &s, before);
    s.settle(Duration::from_millis(1200));
    let wall = write_loop_pipelined(&mut s, c.writes, c.files, per_file + 10 + c.writes / c.files + 1, 32);
    let rate = c.writes as f64 / wall.as_secs_f64();
    r.figure(
        format!("review-write throughput, 32 in flight ({k} stored)"),
        format!(
            "{} writes/s ({} writes in {:.2} s)",
            thousands(rate as u64),
            thousands(c.writes as u64),
            wall.as_secs_f64()
        ),
    );
    s.stop();
    view_copies(&w, c, per_file + 10 + 2 * c.writes / c.files + 4, r);
}

/// Issue 17: sequential review-write on the large store with `.forge/view` copies off (the
/// client declares `workspace.textDocumentContent`) and on (it does not), one server at a
/// time, alternating.
fn view_copies(w: &World, c: &Counts, first_line: usize, r: &mut Report) {
    let k = thousands(c.findings as u64);
    let rounds = if c.copies_writes >= 1000 { 2 } else { 1 };
    let m = c.copies_writes / rounds;
    eprintln!("  view copies off vs on: {m} sequential review-writes per connection, {rounds} round(s)");
    let (mut walls, mut next) = ([Duration::ZERO; 2], 0);
    for _ in 0..rounds {
        for (slot, content) in [(0, true), (1, false)] {
            let (mut s, _) = Server::connect_with(&w.target, content);
            s.wait_diagnostic_uris(c.files);
            s.settle(Duration::from_millis(1200));
            let t0 = Instant::now();
            for i in next..next + m {
                s.timed(EXEC, &exec("review-write", new_finding(i, c.files, first_line)));
            }
            walls[slot] += t0.elapsed();
            next += m;
            s.stop();
        }
    }
    let index = w.target.root.join(".forge/view/index.md");
    let copies = if index.exists() { "index copy written" } else { "NO index copy: copies were not on" };
    let [off, on] = walls.map(|wall| (m * rounds) as f64 / wall.as_secs_f64());
    r.figure(
        format!("review-write sequential, view copies off / on ({k} stored)"),
        format!(
            "{} /s / {} /s ({} writes each; .forge/view: {copies})",
            thousands(off as u64),
            thousands(on as u64),
            thousands((m * rounds) as u64)
        ),
    );
    r.targets.push(report::Target {
        what: format!("review-write with view copies on, within 1.3× the rate with copies off ({k} stored) (#17)"),
        measured: format!("{} /s vs {} /s = {:.2}×", thousands(on as u64), thousands(off as u64), off / on),
        limit: "≤ 1.3×".into(),
        met: off / on <= 1.3,
    });
}

/// Issue 3: connect → last initial publishDiagnostics with 10,000 findings over 1,000 files.
fn scenario_diagnostics(bin: &std::path::Path, c: &Counts, r: &mut Report) {
    let k = thousands(c.diag_findings as u64);
    let f = thousands(c.diag_files as u64);
    eprintln!("[diagnostics] connect → last initial publishDiagnostics ({k} findings, {f} files)");
    let w = World::new("diagnostics", bin, c.diag_files, 50);
    create_schema(&w);
    seed_findings(&mut w.open_db(), &w.project_id, c.diag_findings, c.diag_files, 5);
    let (mut init, mut first, mut last) = (vec![], vec![], vec![]);
    let (mut first_i, mut last_i) = (vec![], vec![]);
    for run in 0..c.diag_runs + 1 {
        let (mut s, took) = Server::connect(&w.target);
        let at = s.wait_diagnostic_uris(c.diag_files);
        if run > 0 {
            let initialized = s.initialized_at.expect("initialized sent");
            let published = s.diags.first.expect("published");
            init.push(took);
            first.push(published - s.spawned_at);
            last.push(at - s.spawned_at);
            first_i.push(published - initialized);
            last_i.push(at - initialized);
        }
        s.stop();
    }
    r.latency(Latency::new(format!("connect → initialize response ({k} findings)"), init));
    r.latency(Latency::new(format!("connect → first initial publishDiagnostics ({k} findings)"), first));
    r.latency(Latency::new(format!("connect → last initial publishDiagnostics ({f} files)"), last));
    for (which, v, limit) in [("first", first_i, 20), ("last", last_i, 120)] {
        let l = r.latency(Latency::new(
            format!("initialized → {which} initial publishDiagnostics ({k} findings, {f} files)"),
            v,
        ));
        let p50 = l.p50();
        r.targets.push(report::Target {
            what: format!("initialized → {which} publishDiagnostics, {k} findings in {f} files, p50 (#17)"),
            measured: format!("{} ms", ms(p50)),
            limit: format!("≤ {limit} ms"),
            met: p50 <= Duration::from_millis(limit),
        });
    }
}

/// Issue 3: review-write throughput on a fresh (empty) store.
fn scenario_throughput(bin: &std::path::Path, c: &Counts, r: &mut Report) {
    eprintln!("[throughput] sequential review-write loop, {} writes, empty store", c.writes);
    let w = World::new("throughput", bin, c.files, 40);
    let (mut s, _) = Server::connect(&w.target);
    s.settle(SETTLE);
    // Warm up on other lines, then measure.
    let _ = write_loop(&mut s, c.warm * 4, c.files, 1);
    s.settle(Duration::from_millis(1200));
    let before = (s.server_requests, s.diags.count);
    let (lat, wall) = write_loop(&mut s, c.writes, c.files, 2 + c.warm * 4 / c.files);
    throughput_figures(r, "empty store", c.writes, lat, wall, &s, before);
    s.settle(Duration::from_millis(1200));
    let wall = write_loop_pipelined(&mut s, c.writes, c.files, 3 + (c.warm * 4 + c.writes) / c.files, 32);
    let piped = c.writes as f64 / wall.as_secs_f64();
    r.figure(
        "review-write throughput, 32 in flight (empty store)",
        format!(
            "{} writes/s ({} writes in {:.2} s)",
            thousands(piped as u64),
            thousands(c.writes as u64),
            wall.as_secs_f64()
        ),
    );
    s.stop();
}

fn targets(r: &mut Report, plans: usize) {
    let mut out = vec![];
    if let Some(base) = r.find("no-op round trip: forge.tools").map(Latency::p50) {
        for name in [
            "forge.plan-read (2,000 lines)",
            "forge.plan-write (2,000 lines, 24 sections)",
            "forge.plan-edit (one small replacement)",
            "workspace/textDocumentContent (session plan)",
        ] {
            if let Some(l) = r.find(name) {
                let ratio = l.p50().as_secs_f64() / base.as_secs_f64();
                out.push(report::Target {
                    what: format!("{name}: p50 within 3× no-op p50 ({} ms)", ms(base)),
                    measured: format!("{} ms = {ratio:.2}×", ms(l.p50())),
                    limit: "≤ 3×".into(),
                    met: ratio <= 3.0,
                });
            }
        }
    }
    let name = format!("start-up: spawn → initialize response ({} plans)", thousands(plans as u64));
    if let Some(l) = r.find(&name) {
        out.push(report::Target {
            what: format!("start-up p50 with {} plans", thousands(plans as u64)),
            measured: format!("{} ms", ms(l.p50())),
            limit: "< 50 ms".into(),
            met: l.p50() < Duration::from_millis(50),
        });
        out.push(report::Target {
            what: format!("start-up p50 with {} plans (#17)", thousands(plans as u64)),
            measured: format!("{} ms", ms(l.p50())),
            limit: "< 20 ms".into(),
            met: l.p50() < Duration::from_millis(20),
        });
    }
    if let Some(kib) = r.idle_rss_kib {
        out.push(report::Target {
            what: format!("idle RSS with {} plans", thousands(plans as u64)),
            measured: mib(kib),
            limit: "< 20 MB".into(),
            met: (kib as f64) * 1024.0 < 20e6,
        });
    }
    for (label, rate) in &r.throughput {
        out.push(report::Target {
            what: format!("review-write throughput, sequential ({label})"),
            measured: format!("{} /s", thousands(*rate as u64)),
            limit: "> 5,000 /s".into(),
            met: *rate > 5000.0,
        });
    }
    // Rows the scenarios added themselves follow.
    r.targets.splice(0..0, out);
}

fn main() {
    let args = parse_args();
    let mut c = if args.quick { Counts::quick() } else { Counts::full() };
    let commits = args.commits.unwrap_or(if args.quick { 20_000 } else { 1_000_000 });
    if let Some(n) = args.writes {
        c.writes = n;
    }
    if !args.bin.exists() {
        usage_exit(&format!("{} does not exist; run `cargo build --release --bins` first", args.bin.display()));
    }
    let bin = args.bin.canonicalize().unwrap_or(args.bin.clone());
    let run = |name: &str| args.only.as_ref().is_none_or(|o| o.iter().any(|x| x == name));
    let started = Instant::now();
    let load_before = load_average();
    eprintln!(
        "forge-bench: {} · {} CPU(s), {} · {}",
        bin.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        if args.quick { "quick" } else { "full" }
    );
    let mut r = Report::default();
    let anchor_bin = anchors::find_anchor_bin(args.anchor.clone());
    if run("anchors") {
        let a = anchors::Anchors { bin: anchor_bin.clone(), python: anchors::find_python(args.python.clone()) };
        anchors::scenario_anchors(&bin, &a, args.quick, c.writes, &mut r);
    }
    if run("plans") {
        scenario_plans(&bin, &c, &mut r);
    }
    if run("startup") {
        scenario_startup(&bin, &c, &mut r);
    }
    if run("review") {
        scenario_review(&bin, &c, &mut r);
    }
    if run("diagnostics") {
        scenario_diagnostics(&bin, &c, &mut r);
    }
    if run("throughput") {
        scenario_throughput(&bin, &c, &mut r);
    }
    if run("call") {
        history::scenario_call(&bin, anchor_bin.as_deref().ok(), args.quick, &mut r);
    }
    if run("history") {
        history::scenario_history(&bin, commits, args.quick, &mut r);
    }
    targets(&mut r, c.plans);
    // loops.rs (after `targets`, to which they add their own rows).
    if run("loops") {
        loops::scenario_loops(&bin, args.quick, &mut r);
    }
    if run("sandbox") {
        loops::scenario_sandbox(&bin, args.quick, &mut r);
    }
    if run("tools") {
        tools::scenario_tools(&bin, args.quick, &mut r);
    }
    println!(
        "forge-bench ({}): {} · {} CPU(s) · {} · {:.0} s · load average {} → {}",
        if args.quick { "--quick, figures not stable" } else { "full" },
        bin.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        started.elapsed().as_secs_f64(),
        load_before,
        load_average()
    );
    r.print();
}
