//! Scenario fixtures: scratch directories, committed git repositories, realistic plan
//! text, and direct database seeding with rusqlite.

use std::path::{Path, PathBuf};
use std::process::Command;

use rusqlite::{params, Connection};

use super::client::Target;

/// A scratch directory, removed when dropped.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(label: &str) -> Scratch {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("forge-bench-{}-{n}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        let dir = dir.canonicalize().expect("canonical scratch directory");
        Scratch { dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("FORGE_BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One scenario's world: a committed repository and private server directories.
pub struct World {
    /// Kept for its `Drop` (removes the directories).
    pub _scratch: Scratch,
    pub target: Target,
    /// The project id: the repository's root commit hash.
    pub project_id: String,
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Forge Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "Forge Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap_or_else(|e| panic!("cannot run git: {e}"));
    assert!(out.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The relative path of source file `i`.
pub fn source_file(i: usize) -> String {
    format!("src/m{:02}/file_{i:05}.rs", i % 50)
}

impl World {
    /// A fresh repository holding `files` source files of `lines` lines each (plus a
    /// README), committed once, and fresh data/config/runtime directories.
    pub fn new(label: &str, bin: &Path, files: usize, lines: usize) -> World {
        let scratch = Scratch::new(label);
        let root = scratch.dir.join("repo");
        std::fs::create_dir_all(&root).expect("repo dir");
        std::fs::write(root.join("README.md"), "# bench project\n").expect("README");
        for i in 0..files {
            let path = root.join(source_file(i));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("src dir");
            let mut text = String::with_capacity(lines * 48);
            for l in 1..=lines {
                text.push_str(&format!("    let value_{l} = compute_{i}(input, {l}); // line {l}\n"));
            }
            std::fs::write(path, text).expect("source file");
        }
        git(&root, &["init", "-q"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "initial"]);
        let project_id = git(&root, &["rev-list", "--max-parents=0", "HEAD"]).trim().to_string();
        let root = root.canonicalize().expect("canonical repo");
        let mk = |name: &str| {
            let p = scratch.dir.join(name);
            std::fs::create_dir_all(&p).expect("scratch subdir");
            p
        };
        let target = Target {
            bin: bin.to_path_buf(),
            root,
            data_dir: mk("data"),
            home: mk("home"),
            xdg_config: mk("config"),
            xdg_runtime: mk("run"),
            stderr_log: scratch.dir.join("server-stderr.log"),
        };
        World { _scratch: scratch, target, project_id }
    }

    pub fn db_path(&self) -> PathBuf {
        self.target.data_dir.join("forge.db")
    }

    /// Opens the server's database directly (the schema must exist: one server run
    /// that initialized creates it).
    pub fn open_db(&self) -> Connection {
        let c = Connection::open(self.db_path()).expect("open forge.db");
        c.busy_timeout(std::time::Duration::from_secs(10)).expect("busy timeout");
        c
    }
}

/// A realistic plan of exactly `total_lines` lines (`split('\n')` count, no trailing
/// newline) with `sections` `<!-- forge-section -->` + `## Phase k` sections, each with
/// `### Files`, `### Edits`, `### Acceptance Criteria` and `### Verification`, plus an
/// Objective, a `Loop Name:` line and the trailing Decisions / Conventions / Key Context
/// headings. `revision` changes one line; the preamble holds the unique token
/// `edit-token-A` for plan-edit.
pub fn plan_text(total_lines: usize, sections: usize, revision: usize) -> String {
    let pre: Vec<String> = vec![
        "# Plan: Stream the importer instead of loading whole batches".into(),
        String::new(),
        "## Objective".into(),
        "Replace the batch importer with a streaming pipeline that keeps memory flat,".into(),
        "reports progress per phase and can resume after a crash without re-reading input.".into(),
        format!("Revision: {revision} (edit-token-A)"),
        String::new(),
        "Loop Name: streaming-importer".into(),
        String::new(),
    ];
    let trailing: Vec<String> = [
        "## Decisions",
        "- Keep the public `Importer` API stable; the streaming path is an implementation detail.",
        "",
        "## Conventions",
        "- Follow rustfmt.toml; every new module gets unit tests next to it.",
        "",
        "## Key Context",
        "- The importer lives in src/import/ and is called from the CLI and the HTTP handler.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    const FIXED: usize = 19;
    let budget = total_lines.saturating_sub(pre.len() + trailing.len() + sections * FIXED);
    let per = budget / sections.max(1);
    let extra = budget % sections.max(1);
    let mut lines = pre;
    for k in 1..=sections {
        let edits = per + if k == sections { extra } else { 0 };
        lines.push("<!-- forge-section -->".into());
        lines.push(format!("## Phase {k}: Stream stage {k} of the importer"));
        lines.push(String::new());
        lines.push("### Files".into());
        lines.push(format!("- src/import/stage_{k}.rs"));
        lines.push(format!("- src/import/stage_{k}/reader.rs"));
        lines.push(format!("- tests/import_stage_{k}.rs"));
        lines.push(String::new());
        lines.push("### Edits".into());
        for e in 1..=edits {
            lines.push(format!(
                "- Stage {k}, step {e}: replace the buffered `Vec<Record>` with a bounded channel and flush every {} records.",
                64 * e
            ));
        }
        lines.push(String::new());
        lines.push("### Acceptance Criteria".into());
        lines.push(format!("- Stage {k} processes a 2 GB input with less than 64 MB resident memory."));
        lines.push(format!("- Progress for stage {k} is reported at least once per second."));
        lines.push(format!("- A crash during stage {k} resumes from the last committed checkpoint."));
        lines.push(String::new());
        lines.push("### Verification".into());
        lines.push(format!("- cargo test -p importer stage_{k}"));
        lines.push(format!("- scripts/replay.sh fixtures/stage_{k}.ndjson"));
        lines.push(String::new());
    }
    lines.extend(trailing);
    debug_assert_eq!(lines.len(), total_lines);
    lines.join("\n")
}

/// A short plan (about 40 lines) for seeding many rows.
pub fn small_plan(i: usize) -> String {
    let mut s =
        format!("# Plan {i}: tidy module {i}\n\n## Objective\nClean up module {i}.\n\nLoop Name: tidy-module-{i}\n\n");
    for k in 1..=3 {
        s.push_str(&format!(
            "<!-- forge-section -->\n## Phase {k}: Step {k}\n\n### Files\n- src/m{i}.rs\n\n### Edits\n- Refactor part {k} of module {i}.\n- Add tests for part {k}.\n\n### Acceptance Criteria\n- Part {k} is covered.\n\n### Verification\n- cargo test m{i}\n\n"
        ));
    }
    s.push_str("## Decisions\n- none\n\n## Conventions\n- rustfmt\n\n## Key Context\n- small module");
    s
}

/// Inserts `n` session plans with distinct session ids in one transaction.
pub fn seed_plans(db: &mut Connection, project: &str, n: usize) {
    let tx = db.transaction().expect("begin");
    {
        let mut st = tx
            .prepare(
                "INSERT INTO plans (project_id, session_id, content, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)",
            )
            .expect("prepare");
        let base = 1_700_000_000_000i64;
        for i in 0..n {
            st.execute(params![project, format!("ses_bench{i:06}"), small_plan(i), base + i as i64 * 1000])
                .expect("insert plan");
        }
    }
    tx.commit().expect("commit");
}

/// Description of seeded finding `k` (the pattern benchmark searches `handler_42\b`,
/// which matches about 1 in 97 findings).
fn description(k: usize) -> String {
    const KINDS: [&str; 5] = ["an unchecked unwrap", "an off-by-one", "a race", "a leaked handle", "a silent error"];
    format!("Possible {} in handler_{} when the input is empty.", KINDS[k % KINDS.len()], k % 97)
}

/// Inserts `n` findings (bucket '', cross-section) spread evenly over `files` source
/// files, at lines `1, 1 + step, 1 + 2 * step, ...` of each, in one transaction.
pub fn seed_findings(db: &mut Connection, project: &str, n: usize, files: usize, step: usize) {
    let tx = db.transaction().expect("begin");
    {
        let mut st = tx
            .prepare(
                "INSERT INTO review_findings (project_id, loop_name, file, line, section_index, severity, description, scenario, created_at)
                 VALUES (?1, '', ?2, ?3, -1, ?4, ?5, ?6, ?7)",
            )
            .expect("prepare");
        let names: Vec<String> = (0..files).map(source_file).collect();
        let base = 1_700_000_000_000i64;
        for k in 0..n {
            let file = &names[k % files];
            let line = 1 + (k / files) * step;
            let severity = if k.is_multiple_of(3) { "bug" } else { "warning" };
            let scenario = k.is_multiple_of(2).then(|| format!("Call the handler with {} items.", k % 13));
            st.execute(params![project, file, line as i64, severity, description(k), scenario, base + k as i64])
                .expect("insert finding");
        }
    }
    tx.commit().expect("commit");
}
