//! The `anchors` scenario (issue 17, docs/performance.md "Anchors"): `forge-lsp` measured
//! side by side with reference servers in one run, interleaved.
//!
//! - raw framed echo (`forge-bench-anchor echo`): the transport floor;
//! - `tower-lsp-server` no-op (`forge-bench-anchor tower`): the framework floor, the
//!   denominator of every ratio;
//! - pygls no-op (`pygls_anchor.py` run by a Python that imports pygls), when one is found;
//! - the tower no-op plus one SQLite commit per call (`forge-bench-anchor tower DB`): the
//!   floor of a tool that replies after a durable write, beside review-write.
//!
//! Every iteration makes one call of each anchor and of each measured `forge-lsp` operation
//! (in an order rotated by one each iteration, so no operation always follows the same
//! one), so all of them see the same machine load. Then sequential and 32-in-flight rates
//! of review-write against the tower no-op and the commit floor, in alternating blocks.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{Server, LARGE};
use super::fixture::{plan_text, seed_findings, source_file, World};
use super::report::{ms, thousands, Latency, Report};
use super::{create_schema, exec, new_finding, EXEC, SETTLE};

/// The pygls no-op server, written to the scratch directory when used.
const PYGLS_SCRIPT: &str = include_str!("pygls_anchor.py");

/// The anchor programs found for this run.
pub struct Anchors {
    /// `forge-bench-anchor`, or why it is missing.
    pub bin: Result<PathBuf, String>,
    /// A Python that imports pygls and pygls's version, or why there is none.
    pub python: Result<(PathBuf, String), String>,
}

/// `forge-bench-anchor`: `--anchor PATH`, else next to this binary.
pub fn find_anchor_bin(arg: Option<PathBuf>) -> Result<PathBuf, String> {
    let p = match arg {
        Some(p) => p,
        None => std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("forge-bench-anchor")))
            .ok_or("cannot locate forge-bench's own directory")?,
    };
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} does not exist (cargo build --release -p forge-lsp --bins)", p.display()))
    }
}

/// The Python for the pygls anchor: `--python PATH`, else `FORGE_BENCH_PYTHON`, else
/// `tests/.venv/bin/python` of the working directory, else of the source tree forge-bench
/// was built from. It must import pygls.
pub fn find_python(arg: Option<PathBuf>) -> Result<(PathBuf, String), String> {
    let explicit = arg.or_else(|| std::env::var_os("FORGE_BENCH_PYTHON").filter(|v| !v.is_empty()).map(PathBuf::from));
    let python = match explicit {
        Some(p) => p,
        None => {
            let venv = Path::new("tests/.venv/bin/python");
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(venv);
            [venv.to_path_buf(), source].into_iter().find(|p| p.exists()).ok_or(
                "no tests/.venv/bin/python here or in the source tree (run scripts/python-env), and no --python or FORGE_BENCH_PYTHON",
            )?
        }
    };
    let out = Command::new(&python)
        .args(["-c", "import importlib.metadata as m, pygls; print(m.version('pygls'))"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} cannot import pygls: {}",
            python.display(),
            err.lines().last().unwrap_or("no error text").trim()
        ));
    }
    Ok((python, String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

/// Iteration counts of the scenario.
struct Counts {
    warm: usize,
    iterations: usize,
    findings: usize,
    files: usize,
    /// Writes per side in the rate comparison, in `rounds` alternating blocks.
    writes: usize,
    rounds: usize,
}

/// Starts an anchor (`initialize` + `initialized`).
fn start_anchor(cmd: Command, root: &Path) -> Server {
    let (mut s, _) = Server::spawn_command(cmd).initialize(root, true);
    s.initialized();
    s
}

/// Which server an operation goes to.
#[derive(Clone, Copy, PartialEq)]
enum Who {
    Echo,
    Tower,
    Pygls,
    /// Second echo and tower processes for the large-message floors, so that the no-op
    /// anchors are called once per iteration like every other row.
    EchoLarge,
    TowerLarge,
    /// The tower no-op with a database: one commit per `commitRow` call.
    TowerCommit,
    Ours,
}

/// One measured operation of the interleaved loop.
struct Op {
    name: String,
    who: Who,
    method: &'static str,
    /// The params of the i-th call.
    params: Box<dyn FnMut(usize) -> Value>,
    /// (goal as a ratio to the tower no-op p50, its text).
    goal: Option<f64>,
    samples: Vec<Duration>,
}

impl Op {
    fn new(
        name: impl Into<String>,
        who: Who,
        method: &'static str,
        params: impl FnMut(usize) -> Value + 'static,
    ) -> Op {
        Op { name: name.into(), who, method, params: Box::new(params), goal: None, samples: vec![] }
    }

    fn goal(mut self, ratio: f64) -> Op {
        self.goal = Some(ratio);
        self
    }
}

fn rate(n: usize, wall: Duration) -> f64 {
    n as f64 / wall.as_secs_f64()
}

pub fn scenario_anchors(bin: &Path, anchors: &Anchors, quick: bool, writes: usize, r: &mut Report) {
    let c = if quick {
        Counts { warm: 10, iterations: 60, findings: 2_000, files: 200, writes: writes.min(500), rounds: 5 }
    } else {
        Counts { warm: 100, iterations: 1_000, findings: 10_000, files: 1_000, writes, rounds: 10 }
    };
    let anchor_bin = match &anchors.bin {
        Ok(p) => p.clone(),
        Err(why) => {
            eprintln!("[anchors] skipped: {why}");
            r.figures.push(("anchors scenario".into(), format!("skipped: {why}")));
            return;
        }
    };
    let k = thousands(c.findings as u64);
    eprintln!(
        "[anchors] anchors (echo, tower-lsp-server no-op, pygls no-op, no-op + one SQLite commit) and forge-lsp interleaved ({} iterations; {k} findings over {} files)",
        c.iterations, c.files
    );
    let w = World::new("anchors", bin, c.files, 60);
    create_schema(&w);
    seed_findings(&mut w.open_db(), &w.project_id, c.findings, c.files, 1);
    let root = w.target.root.clone();

    // forge-bench-anchor in `mode`, its stderr dropped.
    let anchor = |mode: &str| {
        let mut cmd = Command::new(&anchor_bin);
        cmd.arg(mode).stderr(Stdio::null());
        start_anchor(cmd, &root)
    };
    let commit_floor = {
        let mut cmd = Command::new(&anchor_bin);
        cmd.arg("tower").arg(w._scratch.dir.join("commit-floor.db")).stderr(Stdio::null());
        start_anchor(cmd, &root)
    };
    let mut servers: Vec<(Who, Server)> = vec![
        (Who::Echo, anchor("echo")),
        (Who::Tower, anchor("tower")),
        (Who::EchoLarge, anchor("echo")),
        (Who::TowerLarge, anchor("tower")),
        (Who::TowerCommit, commit_floor),
    ];
    let pygls_label = match &anchors.python {
        Ok((python, version)) => {
            let script = w._scratch.dir.join("pygls_anchor.py");
            std::fs::write(&script, PYGLS_SCRIPT).expect("write the pygls anchor");
            let log = std::fs::File::create(w._scratch.dir.join("pygls-stderr.log")).expect("pygls log");
            let mut cmd = Command::new(python);
            cmd.arg(&script).stderr(log);
            servers.push((Who::Pygls, start_anchor(cmd, &root)));
            eprintln!("  pygls anchor: {} (pygls {version})", python.display());
            Some(format!("pygls {version} no-op: workspace/executeCommand → null"))
        }
        Err(why) => {
            eprintln!("  pygls anchor skipped: {why}");
            r.figures.push(("pygls anchor".into(), format!("skipped: {why}")));
            None
        }
    };

    let (mut ours, _) = Server::connect(&w.target);
    ours.wait_diagnostic_uris(c.files);
    let plans = Rc::new([plan_text(2000, 24, 0), plan_text(2000, 24, 1)]);
    ours.call("plan-write", json!({ "content": plans[0] }));
    let uri = format!("forge://plan/session/{}.md", ours.session_id);
    ours.settle(SETTLE);

    // Unfiltered review-read: measured in the loop only if the server pages it.
    let (_, out) = ours.timed(EXEC, &exec("review-read", json!({})));
    let page_bytes = ours.last_response_bytes;
    let returned = out["data"]["findings"].as_array().map(Vec::len);
    let paged = page_bytes <= LARGE && returned.is_some_and(|n| n < c.findings);
    if !paged {
        let why = format!(
            "returned {} of {k} findings ({:.1} MB): not paged, left out of the interleaved loop (the review scenario times the whole read)",
            returned.filter(|_| page_bytes <= LARGE).map_or("all".to_string(), |n| thousands(n as u64)),
            page_bytes as f64 / 1e6
        );
        eprintln!("  review-read, no filter: {why}");
        r.figure("anchors: forge.review-read, no filter", why);
    }
    ours.settle(SETTLE);

    let noop = Server::command("noop", json!({}));
    let mut ops = vec![
        Op::new("raw framed echo (transport floor)", Who::Echo, EXEC, {
            let p = noop.clone();
            move |_| p.clone()
        }),
        Op::new("tower-lsp-server no-op: workspace/executeCommand → null", Who::Tower, EXEC, {
            let p = noop.clone();
            move |_| p.clone()
        }),
    ];
    if let Some(label) = pygls_label {
        let p = noop.clone();
        ops.push(Op::new(label, Who::Pygls, EXEC, move |_| p.clone()));
    }
    // The plan's current edit token: plan-write sets A, plan-edit swaps it.
    let token_a = Rc::new(Cell::new(true));
    let files = c.files;
    let review_writes = Rc::new(Cell::new(0usize));
    // The commit floor stores the same arguments review-write is given.
    let commit_row = move |i: usize| Server::command("noop", json!({ "commitRow": new_finding(i, files, 20) }));
    ops.push(Op::new(
        "tower-lsp-server no-op + one SQLite commit (WAL, synchronous=NORMAL)",
        Who::TowerCommit,
        EXEC,
        commit_row,
    ));
    ops.push(Op::new("forge.tools", Who::Ours, EXEC, |_| exec("tools", json!({}))).goal(1.5));
    ops.push(Op::new("forge.plan-read (2,000 lines)", Who::Ours, EXEC, |_| exec("plan-read", json!({}))).goal(1.5));
    ops.push(
        Op::new(
            format!("forge.review-read file=… ({k} stored, {} per file)", c.findings / c.files),
            Who::Ours,
            EXEC,
            move |i| exec("review-read", json!({ "file": source_file(i % files) })),
        )
        .goal(1.5),
    );
    if paged {
        let name = format!(
            "forge.review-read, no filter: default page ({} of {k}, {:.1} KB)",
            thousands(returned.unwrap_or(0) as u64),
            page_bytes as f64 / 1e3
        );
        ops.push(Op::new(name, Who::Ours, EXEC, |_| exec("review-read", json!({}))).goal(1.5));
    }
    ops.push(
        Op::new("workspace/textDocumentContent (2,000-line plan)", Who::Ours, "workspace/textDocumentContent", {
            let uri = uri.clone();
            move |_| json!({ "uri": uri })
        })
        .goal(1.5),
    );
    ops.push(
        Op::new("forge.plan-write (2,000 lines, 24 sections)", Who::Ours, EXEC, {
            let (plans, token_a) = (plans.clone(), token_a.clone());
            move |i| {
                token_a.set(true);
                exec("plan-write", json!({ "content": plans[(i + 1) % 2] }))
            }
        })
        .goal(3.0),
    );
    ops.push(
        Op::new("forge.plan-edit (one small replacement)", Who::Ours, EXEC, {
            let token_a = token_a.clone();
            move |_| {
                let (old, new) = if token_a.get() { ("A", "B") } else { ("B", "A") };
                token_a.set(!token_a.get());
                exec(
                    "plan-edit",
                    json!({ "oldString": format!("edit-token-{old}"), "newString": format!("edit-token-{new}") }),
                )
            }
        })
        .goal(3.0),
    );
    ops.push(
        Op::new("forge.review-write", Who::Ours, EXEC, {
            let n = review_writes.clone();
            move |_| {
                let i = n.get();
                n.set(i + 1);
                exec("review-write", new_finding(i, files, 20))
            }
        })
        .goal(1.5),
    );

    interleave(&mut ops, &mut servers, &mut ours, c.warm + c.iterations, c.warm);
    let lat: Vec<(Latency, Option<f64>)> = ops.into_iter().map(|o| (Latency::new(o.name, o.samples), o.goal)).collect();
    let base = lat[1].0.p50();
    let mut t = String::from(
        "| interleaved, one call of each per iteration | n | mean ms | p50 ms | p99 ms | p50 ÷ tower no-op p50 | goal | result |\n|---|---:|---:|---:|---:|---:|---|---|\n",
    );
    for (l, goal) in &lat {
        let ratio = l.p50().as_secs_f64() / base.as_secs_f64();
        eprintln!("  {:<62} p50={} ms p99={} ms {ratio:.2}×", l.name, ms(l.p50()), ms(l.p99()));
        let (g, result) = match goal {
            Some(g) => (format!("≤ {g}×"), if ratio <= *g { "met" } else { "NOT MET" }),
            None => (String::new(), ""),
        };
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {ratio:.2}× | {g} | {result} |\n",
            l.name,
            l.n(),
            ms(l.mean()),
            ms(l.p50()),
            ms(l.p99())
        ));
    }
    ours.settle(Duration::from_millis(1200));

    // Rates: alternating blocks of the tower no-op, the commit floor and review-write.
    let m = (c.writes / c.rounds).max(1);
    let (mut tower_wall, mut ours_wall, mut commit_wall) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut tower_piped, mut ours_piped, mut commit_piped) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut commits = c.warm + c.iterations;
    for _ in 0..c.rounds {
        let s = pick(&mut servers, &mut ours, Who::Tower);
        let t0 = Instant::now();
        for _ in 0..m {
            s.timed(EXEC, &noop);
        }
        tower_wall += t0.elapsed();
        let s = pick(&mut servers, &mut ours, Who::TowerCommit);
        let t0 = Instant::now();
        for _ in 0..m {
            s.timed(EXEC, &commit_row(commits));
            commits += 1;
        }
        commit_wall += t0.elapsed();
        let t0 = Instant::now();
        for _ in 0..m {
            let i = review_writes.get();
            review_writes.set(i + 1);
            ours.timed(EXEC, &exec("review-write", new_finding(i, files, 20)));
        }
        ours_wall += t0.elapsed();
    }
    ours.settle(Duration::from_millis(1200));
    for _ in 0..c.rounds {
        let s = pick(&mut servers, &mut ours, Who::Tower);
        tower_piped += s.pipelined(m, 32, |_| (EXEC, noop.clone()));
        let s = pick(&mut servers, &mut ours, Who::TowerCommit);
        commit_piped += s.pipelined(m, 32, |i| (EXEC, commit_row(commits + i)));
        commits += m;
        let first = review_writes.get();
        ours_piped += ours.pipelined(m, 32, |i| (EXEC, exec("review-write", new_finding(first + i, files, 20))));
        review_writes.set(first + m);
    }
    let n = m * c.rounds;
    let (ts, cs, os) = (rate(n, tower_wall), rate(n, commit_wall), rate(n, ours_wall));
    let (tp, cp, op) = (rate(n, tower_piped), rate(n, commit_piped), rate(n, ours_piped));
    let share = os / ts;
    eprintln!(
        "  sequential: tower no-op {}/s, + one commit {}/s ({:.0}%), review-write {}/s ({:.0}%); 32 in flight: {}/s, {}/s, {}/s",
        thousands(ts as u64),
        thousands(cs as u64),
        cs / ts * 100.0,
        thousands(os as u64),
        share * 100.0,
        thousands(tp as u64),
        thousands(cp as u64),
        thousands(op as u64)
    );
    t.push_str(&format!(
        "\n| {} calls per side, {} alternating blocks | tower-lsp-server no-op | no-op + one SQLite commit | forge.review-write | commit floor ÷ no-op | review-write ÷ no-op | review-write ÷ commit floor | goal | result |\n|---|---:|---:|---:|---:|---:|---:|---|---|\n",
        thousands(n as u64),
        c.rounds
    ));
    t.push_str(&format!(
        "| sequential (one in flight) | {}/s | {}/s | {}/s | {:.0}% | {:.0}% | {:.0}% | review-write ≥ 70% of the no-op | {} |\n",
        thousands(ts as u64),
        thousands(cs as u64),
        thousands(os as u64),
        cs / ts * 100.0,
        share * 100.0,
        os / cs * 100.0,
        if share >= 0.7 { "met" } else { "NOT MET" }
    ));
    t.push_str(&format!(
        "| 32 in flight | {}/s | {}/s | {}/s | {:.0}% | {:.0}% | {:.0}% | review-write ≥ 15,000/s | {} |\n",
        thousands(tp as u64),
        thousands(cp as u64),
        thousands(op as u64),
        cp / tp * 100.0,
        op / tp * 100.0,
        op / cp * 100.0,
        if op >= 15_000.0 { "met" } else { "NOT MET" }
    ));
    r.tables.push(t);

    floors(&mut servers, &mut ours, &uri, &plans, paged, &c, r);

    ours.stop();
    for (_, s) in servers {
        s.stop();
    }
}

/// Runs `iterations` rounds of one call of each op, in an order rotated by one per round;
/// the first `warm` rounds are not kept.
fn interleave(ops: &mut [Op], servers: &mut [(Who, Server)], ours: &mut Server, iterations: usize, warm: usize) {
    let t0 = Instant::now();
    let n_ops = ops.len();
    for it in 0..iterations {
        for j in 0..n_ops {
            let op = &mut ops[(it + j) % n_ops];
            let params = (op.params)(it);
            let s = pick(servers, ours, op.who);
            let took = match s.timed_raw(op.method, &params) {
                (took, Ok(_)) => took,
                (_, Err(e)) => panic!("{} failed: {e}", op.name),
            };
            if it >= warm {
                op.samples.push(took);
            }
        }
    }
    eprintln!("  {iterations} iterations of {n_ops} calls in {:.1} s", t0.elapsed().as_secs_f64());
}

/// The floors of our large messages, in a loop of their own after the main one (in the
/// main loop their heavy calls slowed the rows measured beside them: forge.tools went from
/// 0.77-0.79x to 1.07-1.08x the no-op). The echo and the framework answer with a text as
/// long as plan-read's (forge-bench-anchor's `replyBytes`), the echo and the framework
/// no-op are given plan-write's plan; each of our large rows is shown against its framework
/// floor. When the default review-read page is `paged` (in the main loop), the echo and the
/// framework also answer with a text as long as the page's response is now (after the main
/// loop's writes, which fill the page with the bench's own findings), as the floor of the
/// default page.
fn floors(
    servers: &mut [(Who, Server)],
    ours: &mut Server,
    uri: &str,
    plans: &Rc<[String; 2]>,
    paged: bool,
    c: &Counts,
    r: &mut Report,
) {
    let (_, read) = ours.timed(EXEC, &exec("plan-read", json!({})));
    let text_bytes = read["text"].as_str().map_or(0, str::len);
    let large = Server::command("noop", json!({ "replyBytes": text_bytes }));
    let kb = text_bytes as f64 / 1e3;
    let plan_kb = plans[0].len() as f64 / 1e3;
    eprintln!("[anchors] floors of large messages ({kb:.0} KB replies, a {plan_kb:.0} KB request)");
    let noop = Server::command("noop", json!({}));
    let constant = |v: Value| move |_| v.clone();
    // Each row with the row of its floor (the framework given the same reply or request).
    let (reply_floor, request_floor) = (Some(2), Some(4));
    let mut rows = vec![
        (Op::new("tower-lsp-server no-op: workspace/executeCommand → null", Who::Tower, EXEC, constant(noop)), None),
        (
            Op::new(
                format!("raw framed echo answering a {kb:.0} KB text"),
                Who::EchoLarge,
                EXEC,
                constant(large.clone()),
            ),
            None,
        ),
        (
            Op::new(format!("tower-lsp-server returning a {kb:.0} KB text"), Who::TowerLarge, EXEC, constant(large)),
            None,
        ),
        (
            Op::new(format!("raw framed echo given a {plan_kb:.0} KB plan"), Who::EchoLarge, EXEC, {
                let plans = plans.clone();
                move |i| Server::command("noop", json!({ "content": plans[(i + 1) % 2] }))
            }),
            None,
        ),
        (
            Op::new(format!("tower-lsp-server no-op given a {plan_kb:.0} KB plan"), Who::TowerLarge, EXEC, {
                let plans = plans.clone();
                move |i| Server::command("noop", json!({ "content": plans[(i + 1) % 2] }))
            }),
            None,
        ),
        (
            Op::new("forge.plan-read (2,000 lines)", Who::Ours, EXEC, constant(exec("plan-read", json!({})))),
            reply_floor,
        ),
        (
            Op::new(
                "workspace/textDocumentContent (2,000-line plan)",
                Who::Ours,
                "workspace/textDocumentContent",
                constant(json!({ "uri": uri })),
            ),
            reply_floor,
        ),
        (
            Op::new("forge.plan-write (2,000 lines, 24 sections)", Who::Ours, EXEC, {
                let plans = plans.clone();
                move |i| exec("plan-write", json!({ "content": plans[(i + 1) % 2] }))
            }),
            request_floor,
        ),
    ];
    if paged {
        ours.timed(EXEC, &exec("review-read", json!({})));
        let bytes = ours.last_response_bytes;
        let page_kb = bytes as f64 / 1e3;
        let text = Server::command("noop", json!({ "replyBytes": bytes }));
        rows.push((
            Op::new(
                format!("raw framed echo answering a {page_kb:.0} KB text"),
                Who::EchoLarge,
                EXEC,
                constant(text.clone()),
            ),
            None,
        ));
        rows.push((
            Op::new(
                format!("tower-lsp-server returning a {page_kb:.0} KB text"),
                Who::TowerLarge,
                EXEC,
                constant(text),
            ),
            None,
        ));
        let floor = Some(rows.len() - 1);
        rows.push((
            Op::new(
                format!("forge.review-read, no filter: default page ({page_kb:.0} KB)"),
                Who::Ours,
                EXEC,
                constant(exec("review-read", json!({}))),
            ),
            floor,
        ));
    }
    let (mut ops, floor_of): (Vec<Op>, Vec<Option<usize>>) = rows.into_iter().unzip();
    interleave(&mut ops, servers, ours, c.warm + c.iterations, c.warm);
    let lat: Vec<Latency> = ops.into_iter().map(|o| Latency::new(o.name, o.samples)).collect();
    let base = lat[0].p50().as_secs_f64();
    let mut t = String::from(
        "| large messages and their floors, interleaved | n | p50 ms | ÷ tower no-op | ÷ its framework floor |\n|---|---:|---:|---:|---:|\n",
    );
    for (i, l) in lat.iter().enumerate() {
        let v = l.p50().as_secs_f64();
        let floor = floor_of[i].map_or(String::new(), |f| format!("{:.2}×", v / lat[f].p50().as_secs_f64()));
        eprintln!("  {:<62} p50={} ms {:.2}× {floor}", l.name, ms(l.p50()), v / base);
        t.push_str(&format!("| {} | {} | {} | {:.2}× | {floor} |\n", l.name, l.n(), ms(l.p50()), v / base));
    }
    r.tables.push(t);
}

/// The server an operation goes to.
fn pick<'a>(servers: &'a mut [(Who, Server)], ours: &'a mut Server, who: Who) -> &'a mut Server {
    if who == Who::Ours {
        return ours;
    }
    servers.iter_mut().find(|(w, _)| *w == who).map(|(_, s)| s).expect("anchor started")
}
