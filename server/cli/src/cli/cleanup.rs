//! `forge-lsp cleanup plans|loop` (seeds "Management" → Cleanup).
//!
//! - `cleanup plans [--older-than 30d] [--project ID] [--dry-run]` deletes session plans
//!   (which have no TTL) not updated for the given age, and loop plans whose loop no longer
//!   exists; the plan of an existing loop is never deleted.
//! - `cleanup loop <name> [--project ID] [--dry-run] [--force]` removes one loop: its
//!   worktree, its branch when it starts with `forge/` (a caller-chosen branch outside that
//!   prefix is kept and reported), its row (child rows cascade) and its loop plan. There is
//!   no sandbox step: a loop's sandbox is one short-lived `bwrap` per command, nothing
//!   persists (engine/sandbox.rs). Review findings are kept, as the terminal-loop sweep
//!   keeps them. A running loop is refused
//!   without `--force`. Without a row (e.g. a cancelled loop the sweep deleted, whose
//!   worktree and branch were preserved) it removes what is left under the loop's name:
//!   `<dataDir>/worktrees/<name>`, `forge/<name>` of the repository of the working
//!   directory, and an orphaned loop plan.
//!
//! Both print every item they remove; `--dry-run` prints the same items and removes
//! nothing. Writes record `changes` rows, so running servers refresh their editors.
//! Exit status: 0 success, 1 failure, 2 usage error.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use forge_domain::text::iso_millis;
use forge_protocol::uri::ForgeUri;
use rusqlite::{params, Connection, OptionalExtension};

use forge_core::project::{self, Project};
use forge_engine::git;
use forge_store::changes::{self, Kind};
use forge_store::{self as store, loops};

/// The `cleanup` subcommands.
#[derive(Debug, Subcommand)]
pub enum CleanupCmd {
    /// Delete session plans (and plans of loops that no longer exist) not updated for a while.
    Plans {
        /// Minimum age since the last update: a number with a unit s, m, h or d (e.g. 12h, 30d).
        #[arg(long, value_name = "AGE", default_value = "30d", value_parser = Age::parse)]
        older_than: Age,
        /// Only plans of this project: its directory, or its id (default: every project).
        #[arg(long, value_name = "DIR|ID")]
        project: Option<String>,
        /// List what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove one loop: its worktree, its forge/ branch, its row and its loop plan.
    Loop {
        /// The loop name (exact). A name may start with `-` (a title such as `-rf --force`
        /// makes the loop `-rf-force`): it is read as the name (review YU).
        #[arg(allow_hyphen_values = true)]
        name: String,
        /// The loop's project: its directory, or its id (default: the working directory's).
        #[arg(long, value_name = "DIR|ID")]
        project: Option<String>,
        /// List what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Remove the loop even when its status is running.
        #[arg(long)]
        force: bool,
    },
}

/// An age given on the command line, e.g. `30d`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Age {
    pub ms: i64,
    pub text: String,
}

impl Age {
    /// Parses `<digits><unit>` with unit s, m, h or d.
    pub fn parse(s: &str) -> Result<Age, String> {
        let bad = || format!("`{s}` is not an age: use a whole number with a unit s, m, h or d, e.g. 12h or 30d");
        let t = s.trim();
        let unit_at = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (num, unit) = t.split_at(unit_at);
        let n: i64 = num.parse().map_err(|_| bad())?;
        let per: i64 = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let ms = n.checked_mul(per).ok_or_else(|| format!("`{s}` is too large"))?;
        Ok(Age { ms, text: t.to_string() })
    }
}

/// Why a cleanup did not succeed.
#[derive(Debug)]
enum Failure {
    /// Exit status 1.
    Failed(String),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::Failed(format!("database error: {e}"))
    }
}

fn failed(m: impl Into<String>) -> Failure {
    Failure::Failed(m.into())
}

/// Prints one line to stdout (a closed pipe is not an error).
fn say(line: impl fmt::Display) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Runs a cleanup subcommand; returns the process exit status.
pub fn run(cmd: CleanupCmd, data_dir: Option<PathBuf>) -> i32 {
    let data_dir = project::data_dir(None, data_dir.as_deref());
    let r = match cmd {
        CleanupCmd::Plans { older_than, project, dry_run } => {
            project_id(project.as_deref()).and_then(|p| cleanup_plans(&data_dir, &older_than, p.as_deref(), dry_run))
        }
        CleanupCmd::Loop { name, project, dry_run, force } => {
            project_arg(project.as_deref()).and_then(|p| cleanup_loop(&data_dir, &name, p, dry_run, force))
        }
    };
    match r {
        Ok(()) => 0,
        Err(Failure::Failed(m)) => {
            eprintln!("forge-lsp cleanup: {m}");
            1
        }
    }
}

/// The project id `--project` names: a directory's project (the repository it is in), or
/// an id as given (the root commit's hash, or `global`); a path that is no directory is
/// refused rather than taken for an id nothing has.
fn project_id(arg: Option<&str>) -> Result<Option<String>, Failure> {
    Ok(project_arg(arg)?.map(|(id, _)| id))
}

/// [`project_id`], with the repository detected when `--project` names a directory.
fn project_arg(arg: Option<&str>) -> Result<Option<(String, Option<Project>)>, Failure> {
    let Some(arg) = arg else { return Ok(None) };
    let dir = Path::new(arg);
    if dir.is_dir() {
        let detected = Project::detect(dir);
        if detected.is_global() {
            return Err(failed(format!(
                "--project {arg}: not inside a git repository with a commit (give the project's directory, or its id)"
            )));
        }
        return Ok(Some((detected.id.clone(), Some(detected))));
    }
    if arg.contains('/') || arg == "." || arg == ".." {
        return Err(failed(format!("--project {arg}: no such directory (give the project's directory, or its id)")));
    }
    Ok(Some((arg.to_string(), None)))
}

/// Opens `<data_dir>/forge.db` if it exists (a cleanup never creates a database).
fn open_db(data_dir: &Path) -> Result<Option<Connection>, Failure> {
    let path = data_dir.join("forge.db");
    if !path.exists() {
        return Ok(None);
    }
    store::open_connection(&path).map(Some).map_err(|e| failed(e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// cleanup plans
// ---------------------------------------------------------------------------------------------

/// A plan `cleanup plans` deletes.
#[derive(Debug, Clone)]
struct PlanItem {
    id: i64,
    project_id: String,
    loop_name: Option<String>,
    session_id: Option<String>,
    updated_at: i64,
}

impl PlanItem {
    fn uri(&self) -> String {
        match (&self.loop_name, &self.session_id) {
            (Some(l), _) => ForgeUri::LoopPlan(l.clone()).to_uri(),
            (_, Some(s)) => ForgeUri::SessionPlan(s.clone()).to_uri(),
            _ => ForgeUri::Index.to_uri(),
        }
    }
}

impl fmt::Display for PlanItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match (&self.loop_name, &self.session_id) {
            (Some(l), _) => format!("loop: {l}, whose loop no longer exists"),
            (_, Some(s)) => format!("session: {s}"),
            _ => String::new(),
        };
        write!(f, "plan {} ({label}) in project {}, updated {}", self.id, self.project_id, iso_millis(self.updated_at))
    }
}

/// Plans not updated since `before`: session plans, and loop plans without a loop row.
fn stale_plans(conn: &Connection, project: Option<&str>, before: i64) -> rusqlite::Result<Vec<PlanItem>> {
    let mut st = conn.prepare(
        "SELECT p.id, p.project_id, p.loop_name, p.session_id, p.updated_at FROM plans p
         WHERE p.updated_at < ?1 AND (?2 IS NULL OR p.project_id = ?2)
           AND (p.session_id IS NOT NULL
                OR NOT EXISTS (SELECT 1 FROM loops l WHERE l.project_id = p.project_id AND l.loop_name = p.loop_name))
         ORDER BY p.project_id, p.updated_at, p.id",
    )?;
    let rows = st.query_map(params![before, project], |r| {
        Ok(PlanItem {
            id: r.get(0)?,
            project_id: r.get(1)?,
            loop_name: r.get(2)?,
            session_id: r.get(3)?,
            updated_at: r.get(4)?,
        })
    })?;
    rows.collect()
}

fn cleanup_plans(data_dir: &Path, age: &Age, project: Option<&str>, dry_run: bool) -> Result<(), Failure> {
    let scope = match project {
        Some(p) => format!("in project {p}"),
        None => "in any project".to_string(),
    };
    let Some(mut conn) = open_db(data_dir)? else {
        say(format!("No database at {}: no plans to delete.", data_dir.join("forge.db").display()));
        return Ok(());
    };
    let now = store::now_ms();
    let before = now.saturating_sub(age.ms);
    if dry_run {
        let items = stale_plans(&conn, project, before)?;
        for it in &items {
            say(format!("would delete: {it}"));
        }
        say(format!(
            "Dry run: {} plan(s) {scope} not updated for {} would be deleted; nothing was deleted.",
            items.len(),
            age.text
        ));
        return Ok(());
    }
    let items = store::transact(&mut conn, |tx| -> rusqlite::Result<Vec<PlanItem>> {
        // Selected inside the write transaction, so exactly the listed rows are deleted.
        let items = stale_plans(tx, project, before)?;
        for it in &items {
            tx.execute("DELETE FROM plans WHERE id = ?1", params![it.id])?;
            changes::record(tx, &it.project_id, Kind::Plan, &it.uri(), now)?;
        }
        Ok(items)
    })?;
    for it in &items {
        say(format!("deleted: {it}"));
    }
    say(format!("Deleted {} plan(s) {scope} not updated for {}.", items.len(), age.text));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// cleanup loop
// ---------------------------------------------------------------------------------------------

/// One thing `cleanup loop` removes, in the order it is removed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Worktree(PathBuf),
    Branch(String),
    /// The attempt snapshot refs `refs/forge/<name>/…` (how many exist).
    SnapshotRefs(usize),
    LoopRow {
        status: String,
    },
    LoopPlan {
        id: i64,
        updated_at: i64,
    },
}

/// What `cleanup loop` will do.
struct LoopCleanup {
    project_id: String,
    name: String,
    /// The repository the worktree and branch belong to.
    repo: Option<PathBuf>,
    items: Vec<Item>,
    /// Things that stay, each with the reason (printed as `kept: …` / `absent: …`).
    notes: Vec<String>,
}

impl LoopCleanup {
    fn describe(&self, item: &Item) -> String {
        match item {
            Item::Worktree(d) => format!("worktree {}", d.display()),
            Item::Branch(b) => format!("branch {b}"),
            Item::SnapshotRefs(n) => format!("{n} attempt snapshot ref(s) refs/forge/{}/", self.name),
            Item::LoopRow { status } => format!(
                "loop {} (project {}, status {status}) with its sessions, sections, handoffs, attempts, usage, \
                 transitions and amendments",
                self.name, self.project_id
            ),
            Item::LoopPlan { id, updated_at } => {
                format!("loop plan of {} (plan {id}, updated {})", self.name, iso_millis(*updated_at))
            }
        }
    }
}

/// The repository at `dir` (any path inside it), if it can be opened.
fn open_repo(dir: &Path) -> Result<PathBuf, String> {
    git2::Repository::discover(dir)
        .map(|r| r.workdir().map(Path::to_path_buf).unwrap_or_else(|| r.path().to_path_buf()))
        .map_err(|e| e.message().to_string())
}

fn cleanup_loop(
    data_dir: &Path,
    name: &str,
    given: Option<(String, Option<Project>)>,
    dry_run: bool,
    force: bool,
) -> Result<(), Failure> {
    // A loop name is one path component, as loop-status lists it. A path (`./demo`,
    // `demo/.`, `/`, `..`) named the running loop's worktree under another spelling, or a
    // directory that is no loop's, and got past the running-loop check.
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(failed(format!(
            "{} is not a loop name: give the name as loop-status lists it (one word like `add-oauth`, not a path)",
            forge_domain::text::echo(name)
        )));
    }
    let (project, given_repo) = match given {
        Some((id, repo)) => (Some(id), repo),
        None => (None, None),
    };
    let project = project.as_deref();
    let from_a_directory = project.is_none() || given_repo.is_some();
    // The repository `--project DIR` names, else the working directory's.
    let detected = match given_repo {
        Some(p) => p,
        None => Project::detect(
            &std::env::current_dir().map_err(|e| failed(format!("cannot read the working directory: {e}")))?,
        ),
    };
    let project_id = project.map(str::to_string).unwrap_or_else(|| detected.id.clone());
    let Some(mut conn) = open_db(data_dir)? else {
        return Err(failed(format!(
            "no loop named `{name}`: there is no database at {}; check --data-dir / FORGE_DATA_DIR",
            data_dir.join("forge.db").display()
        )));
    };
    // Held from the decision to the last row removed: a restart or cancel of the loop by
    // another process waits for the cleanup (or the cleanup for it), never interleaves
    // with it (a restart between the decision and the git removals lost the restarted
    // loop's worktree and branch). A dry run changes nothing and takes no lock.
    let _lock = if dry_run {
        None
    } else {
        Some(
            forge_engine::loop_lock::acquire_blocking(data_dir, &project_id, name, forge_engine::loop_lock::WAIT)
                .map_err(|e| failed(format!("cannot clean up loop {name}: {e}")))?,
        )
    };
    let plan = plan_loop(&conn, data_dir, &detected, &project_id, from_a_directory, name, force)?;

    say(format!("Loop {name} in project {project_id}{}:", if dry_run { " (dry run)" } else { "" }));
    if dry_run {
        for it in &plan.items {
            say(format!("would remove: {}", plan.describe(it)));
        }
        for n in &plan.notes {
            say(n);
        }
        say(format!("Dry run: {} item(s) would be removed; nothing was removed.", plan.items.len()));
        return Ok(());
    }

    // A running loop removed with --force whose server has ended: what its turns left
    // running (the agent's children, forge.shell commands) is stopped first, as a cancel
    // from a running server stops it; the records that find them go with the loop's rows
    // (review YM: both `sleep`s outlived the cleanup, for good). A live server stops its own
    // agent when it sees the row go.
    if force {
        if let Ok(Some(row)) = loops::get(&conn, &plan.project_id, &plan.name) {
            if let Ok(Some(pid)) = forge_engine::owner::server_gone(&conn, &plan.project_id, &row) {
                let recorded =
                    forge_store::loop_db::agent_processes(&conn, &plan.project_id, &plan.name).unwrap_or_default();
                let stopped: usize = recorded
                    .iter()
                    .map(|(session, rec)| match forge_engine::process::Leader::parse(rec) {
                        Some(leader) => forge_engine::process::kill_orphaned(&leader, session),
                        None => forge_engine::process::kill_session_marked(session),
                    })
                    .sum();
                if stopped > 0 {
                    say(format!("stopped {stopped} process(es) the loop's turns left running (its server, pid {pid}, has ended)"));
                }
            }
        }
    }

    let mut removed = 0usize;
    let stop = |removed: usize, what: String, e: &dyn fmt::Display| {
        failed(format!(
            "cannot remove {what}: {e}\n{removed} item(s) were removed before this and nothing after it (the \
             database rows are removed last), so the same cleanup can be run again once this is fixed"
        ))
    };
    for it in &plan.items {
        let (Item::Worktree(_) | Item::Branch(_) | Item::SnapshotRefs(_)) = it else { continue };
        let Some(repo) = plan.repo.as_deref() else {
            return Err(stop(removed, plan.describe(it), &"the loop's repository cannot be opened"));
        };
        let r = match it {
            Item::Worktree(d) => {
                // Its sandbox shims go with it (they are in the data directory).
                let _ = forge_engine::sandbox::remove_shims(data_dir, d);
                git::remove_worktree(repo, d)
            }
            Item::Branch(b) => git::delete_branch(repo, b),
            Item::SnapshotRefs(_) => git::delete_refs(repo, &format!("refs/forge/{}/", plan.name)).map(|_| ()),
            _ => Ok(()),
        };
        if let Err(e) = r {
            return Err(stop(removed, plan.describe(it), &e));
        }
        removed += 1;
        say(format!("removed: {}", plan.describe(it)));
    }

    let db_items: Vec<&Item> =
        plan.items.iter().filter(|i| matches!(i, Item::LoopRow { .. } | Item::LoopPlan { .. })).collect();
    if !db_items.is_empty() {
        let (p, n) = (plan.project_id.clone(), plan.name.clone());
        let now = store::now_ms();
        store::transact(&mut conn, |tx| -> Result<(), Failure> {
            for it in &db_items {
                match it {
                    Item::LoopRow { .. } => {
                        // Re-checked under the write lock: the loop may have been restarted since.
                        let status: Option<String> = tx
                            .query_row(
                                "SELECT status FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                                params![p, n],
                                |r| r.get(0),
                            )
                            .optional()?;
                        if status.as_deref() == Some("running") && !force {
                            return Err(failed(format!(
                                "loop {n} was restarted while cleaning up; its row was kept: {}",
                                running_hint(&n)
                            )));
                        }
                        tx.execute("DELETE FROM loops WHERE project_id = ?1 AND loop_name = ?2", params![p, n])?;
                        changes::record(tx, &p, Kind::Loop, &n, now)?;
                    }
                    Item::LoopPlan { id, .. } => {
                        tx.execute("DELETE FROM plans WHERE id = ?1", params![id])?;
                        changes::record(tx, &p, Kind::Plan, &ForgeUri::LoopPlan(n.clone()).to_uri(), now)?;
                    }
                    _ => {}
                }
            }
            Ok(())
        })?;
        for it in db_items {
            removed += 1;
            say(format!("removed: {}", plan.describe(it)));
        }
    }
    for n in &plan.notes {
        say(n);
    }
    say(format!("Removed {removed} item(s)."));
    Ok(())
}

fn running_hint(name: &str) -> String {
    format!(
        "it may be running in a forge-lsp server right now, and removing it would pull the worktree from under \
         its agent. Cancel it first (forge-lsp call loop-cancel '{{\"name\": \"{name}\"}}', or loop-cancel in the \
         editor), or pass --force to remove it anyway"
    )
}

/// Decides what `cleanup loop` removes; fails (removing nothing) when it must not run.
fn plan_loop(
    conn: &Connection,
    data_dir: &Path,
    detected: &Project,
    project_id: &str,
    project_detected: bool,
    name: &str,
    force: bool,
) -> Result<LoopCleanup, Failure> {
    let row = loops::get(conn, project_id, name)?;
    let loop_plan: Option<(i64, i64)> = conn
        .query_row(
            "SELECT id, updated_at FROM plans WHERE project_id = ?1 AND loop_name = ?2",
            params![project_id, name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let findings: i64 = conn.query_row(
        "SELECT count(*) FROM review_findings WHERE project_id = ?1 AND loop_name = ?2",
        params![project_id, name],
        |r| r.get(0),
    )?;
    // The working directory's repository, when it is the loop's project.
    let cwd_repo = detected.repo_root.clone().filter(|_| detected.id == project_id);

    let mut plan = LoopCleanup {
        project_id: project_id.to_string(),
        name: name.to_string(),
        repo: None,
        items: vec![],
        notes: vec![],
    };
    let (worktree_dir, branch, status) = match &row {
        Some(r) => {
            if r.status == "running" && !force {
                // Its server known to have ended: said so, not "may be running".
                if let Ok(Some(pid)) = forge_engine::owner::server_gone(conn, project_id, r) {
                    return Err(failed(format!(
                        "refusing to remove loop {name}: its status is running, and its server (pid {pid}) has ended. \
                         Cancel it (forge-lsp call loop-cancel '{{\"name\": \"{name}\"}}' through a running server, or \
                         loop-cancel in the editor), which also stops what its turns left running, or pass --force"
                    )));
                }
                return Err(failed(format!(
                    "refusing to remove loop {name}: its status is running; {}.",
                    running_hint(name)
                )));
            }
            plan.repo = match open_repo(Path::new(&r.project_dir)) {
                Ok(repo) => Some(repo),
                Err(e) => match cwd_repo {
                    Some(repo) => Some(repo),
                    None => {
                        plan.notes.push(format!(
                            "note: the loop's repository at {} cannot be opened ({e}); run this command from inside \
                             the project's repository to clean up its worktree and branch",
                            r.project_dir
                        ));
                        None
                    }
                },
            };
            (Some(PathBuf::from(&r.worktree_dir)), r.worktree_branch.clone(), Some(r.status.clone()))
        }
        None => {
            // Left-overs of a loop whose row is gone (a sweep keeps restartable worktrees).
            // Worktree directories are named by loop name only, for every project: one that
            // a loop row (of another project) still names is not a left-over.
            plan.repo = cwd_repo;
            let dir = data_dir.join("worktrees").join(name);
            let named: bool = conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM loops WHERE worktree_dir = ?1 OR loop_name = ?2)",
                params![dir.display().to_string(), name],
                |r| r.get(0),
            )?;
            // The same directory under another spelling (a data directory given through a
            // link, or relative) is the row's too.
            let owned = named || {
                let real = std::fs::canonicalize(&dir).ok();
                let mut st = conn.prepare("SELECT worktree_dir FROM loops")?;
                let dirs = st.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
                real.is_some_and(|real| dirs.iter().any(|d| std::fs::canonicalize(d).is_ok_and(|d| d == real)))
            };
            ((!owned).then_some(dir), Some(git::branch_for(name)), None)
        }
    };

    // Something of a row-less loop that stays but shows that the name is right.
    let mut leftover = false;
    if let Some(worktree_dir) = worktree_dir {
        if std::fs::symlink_metadata(&worktree_dir).is_ok() {
            if plan.repo.is_some() {
                plan.items.push(Item::Worktree(worktree_dir));
            } else if row.is_some() {
                return Err(failed(format!(
                    "cannot remove the worktree {} of loop {name}: its repository cannot be opened. Run this \
                     command from inside the project's repository, or remove the directory by hand and run it again",
                    worktree_dir.display()
                )));
            } else {
                leftover = true;
                plan.notes.push(format!(
                    "kept: worktree {} (no loop row names its repository: run this command from inside the \
                     project's repository to remove it)",
                    worktree_dir.display()
                ));
            }
        } else if row.is_some() {
            plan.notes.push(format!("absent: worktree {} (already removed)", worktree_dir.display()));
        }
    }

    if let Some(repo) = plan.repo.as_deref() {
        if let Ok(n) = git::count_refs(repo, &format!("refs/forge/{name}/")) {
            if n > 0 {
                plan.items.push(Item::SnapshotRefs(n));
            }
        }
    }
    // A branch another loop works on (a caller may choose `forge/<something>` as a loop's
    // branch) is that loop's, whatever this name says.
    let other_owner: Option<(String, String)> = match (&row, &branch) {
        (None, Some(b)) => conn
            .query_row(
                "SELECT loop_name, status FROM loops WHERE project_id = ?1 AND worktree_branch = ?2 LIMIT 1",
                params![project_id, b],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?,
        _ => None,
    };
    match branch {
        Some(b) if other_owner.is_some() => {
            let (owner, status) = other_owner.unwrap_or_default();
            plan.notes.push(format!("kept: branch {b} (the branch of loop {owner}, status {status})"));
        }
        Some(b) if !b.starts_with("forge/") => plan.notes.push(format!(
            "kept: branch {b} (chosen by the caller, not a forge/ branch; delete it yourself with `git branch -D {b}` \
             if it is no longer needed)"
        )),
        Some(b) => match plan.repo.as_deref() {
            Some(repo) => match git::branch_exists(repo, &b) {
                Ok(true) => plan.items.push(Item::Branch(b)),
                Ok(false) => {
                    if row.is_some() {
                        plan.notes.push(format!("absent: branch {b} (already deleted)"));
                    }
                }
                Err(e) => return Err(failed(format!("cannot look up branch {b}: {e}"))),
            },
            None => {
                if row.is_some() {
                    plan.notes.push(format!(
                        "kept: branch {b} (its repository cannot be opened; delete it there with `git branch -D {b}`)"
                    ))
                }
            }
        },
        None => {}
    }

    if let Some(status) = status {
        plan.items.push(Item::LoopRow { status });
    }
    if let Some((id, updated_at)) = loop_plan {
        plan.items.push(Item::LoopPlan { id, updated_at });
    }
    if findings > 0 {
        plan.notes.push(format!(
            "kept: {findings} review finding(s) of loop {name} (findings outlive their loop; remove them with review-delete)"
        ));
    }

    if row.is_none() && plan.items.is_empty() && !leftover {
        let elsewhere: Vec<String> = {
            let mut st = conn.prepare("SELECT project_id FROM loops WHERE loop_name = ?1 ORDER BY project_id")?;
            let rows = st.query_map(params![name], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let from = if project_detected {
            format!(" (the project of {}; pass --project to choose another)", detected.root.display())
        } else {
            String::new()
        };
        let hint = if elsewhere.is_empty() {
            String::new()
        } else {
            format!("; a loop with that name exists in project(s) {}: pass --project", elsewhere.join(", "))
        };
        return Err(failed(format!("no loop named `{name}` in project {project_id}{from}{hint}")));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(Age::parse("30d").unwrap().ms, 30 * 86_400_000);
        assert_eq!(Age::parse("12h").unwrap().ms, 12 * 3_600_000);
        assert_eq!(Age::parse("5m").unwrap().ms, 300_000);
        assert_eq!(Age::parse("0s").unwrap().ms, 0);
        for bad in ["", "d", "30", "30x", "-1d", "1.5d", "30 d", "99999999999999999999d"] {
            assert!(Age::parse(bad).is_err(), "{bad:?}");
        }
    }
}
