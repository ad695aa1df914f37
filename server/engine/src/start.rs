//! Starting loops (`execute-plan`), untracked sessions (`mode: "new-session"`) and
//! restarts (`loop-status restart`).
//!
//! A loop start creates, in order: the worktree on a new `forge/<name>` branch, the rows
//! (loop, loop plan, sections, coder session) in one transaction, and the first turn. A
//! failure at any step removes everything created before it (rows, worktree, branch).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use forge_domain::handoff::Role;
use forge_domain::loop_machine::{self, Phase, Status};
use forge_domain::naming::{slugify, uniquify};
use forge_domain::plan::decompose::decompose;
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::host::{self, TurnOutcome, TurnRequest};
use super::prompt_context::{self, Kind};
use super::runner::{self, FirstTurn};
use super::sandbox::{self, Sandbox};
use super::{git, Engine};
use forge_core::ToolEnv;
use forge_store::loop_db as db;
use forge_store::{loop_starts, loops, now_ms, plans};

fn internal(e: impl std::fmt::Display) -> ToolError {
    ToolError::internal(format!("loop start failed: {e}"))
}

/// Preconditions shared by loop starts and restarts.
fn preconditions(env: &ToolEnv) -> Result<(PathBuf, Vec<String>), ToolError> {
    if !env.config.loop_enabled {
        return Err(ToolError::precondition(
            "Failed to start loop: loops are disabled (loop.enabled = false in the configuration).",
        ));
    }
    let Some(repo) = env.project.repo_root.clone().filter(|_| !env.project.is_global()) else {
        return Err(ToolError::precondition(format!(
            "Failed to start loop: loops run in a git worktree and need a repository with at least one commit, but {} has none. Create the first commit (git add -A && git commit -m init), reconnect the editor so the project is identified, and retry.",
            env.project.root.display()
        )));
    };
    let Some(argv) = crate::agents::program(&env.config) else {
        // The user's file as this process reads it ($XDG_CONFIG_HOME), not a fixed path a
        // newcomer would write to in vain (review AA).
        return Err(ToolError::precondition(format!(
            "Failed to start loop: no agent host is configured. Set agent.preset (\"opencode\", \"claude\", \"codex\" or \"gemini\") or agent.command (the argv template that runs your coding agent for one turn), for example in {} or in a <project>/.forge/config.toml kept out of git (a committed one cannot set them):\n\n[agent]\ncommand = [\"my-agent\", \"--session\", \"{{session}}\", \"--prompt-file\", \"{{prompt_file}}\"]\n\nThe prompt is also given on standard input; see docs/agents.md.",
            forge_core::config::Loader::user_file().display()
        )));
    };
    // With a preset, agent.command names the preset CLI's program only (the preset adds
    // its own arguments); a template's placeholders there were passed to the program as
    // they are (`{session}` as a literal argument): say so instead (review AA).
    if let Some(cli) = crate::agents::preset(&env.config) {
        if let Some(p) =
            argv.iter().flat_map(|a| crate::host::PLACEHOLDERS.iter().filter(move |p| a.contains(**p))).next()
        {
            return Err(ToolError::precondition(format!(
                "Failed to start loop: agent.preset = \"{}\" is set, so agent.command names only the program that runs that CLI (for example [\"/opt/bin/{}\"]), and the preset adds its own arguments; it holds the placeholder {p}, which is for a command of your own. Remove agent.preset to run your command as a template, or leave only the program in agent.command.",
                cli.name(),
                cli.name()
            )));
        }
    }
    Ok((repo, argv))
}

pub async fn start_loop(
    engine: &Arc<Engine>,
    env: &ToolEnv,
    title: String,
    plan: String,
    loop_name: Option<String>,
    caller_branch: Option<String>,
) -> Result<CommandResult, ToolError> {
    let (repo, _) = preconditions(env)?;
    if engine.private_socket().is_none() {
        return Err(ToolError::precondition(
            "Failed to start loop: this server has no private callback socket (its log says why, e.g. a socket directory that is not private to this user), so the loop's agent could not call tools. Fix the directory named in the log (mode 0700, owned by you, not a symlink) and restart the server.",
        ));
    }
    // Sandbox (engine/sandbox.rs): probed before anything is created.
    let bwrap = sandbox::require(env.config.sandbox_enabled, &env.config.sandbox_mode, "Failed to start loop").await?;
    let project = env.project.id.clone();
    let requested = slugify(loop_name.as_deref().filter(|s| !s.trim().is_empty()).unwrap_or(&title));
    let requested = if requested.trim_matches('-').is_empty() { "loop".to_string() } else { requested };

    // Name, branch and worktree. The name is unique among the project's loops, the
    // branches (`forge/<name>` must not clash with one, `main/x` beside `main` included)
    // and the worktree directories. Another server may take the same name between the
    // check and the worktree's creation (a branch or directory that exists by then): the
    // name is then chosen again, a few times, before giving up.
    if let Some(b) = &caller_branch {
        if let Some(why) = git::branch_name_problem(b) {
            return Err(ToolError::invalid(format!("Failed to start loop: {why}")));
        }
    }
    const ATTEMPTS: usize = 3;
    let mut attempt = 0;
    undo_killed_starts(engine).await;
    let (name, branch, wt, start_key) = loop {
        attempt += 1;
        let (p, r2) = (project.clone(), repo.clone());
        let (taken, starting): (Vec<String>, Vec<String>) = engine
            .store
            .call(move |c| {
                let names = loops::list(c, &p)?.into_iter().map(|l| l.loop_name).collect();
                let dirs = loop_starts::all(c)?.into_iter().map(|s| s.worktree_dir).collect();
                Ok::<_, rusqlite::Error>((names, dirs))
            })
            .await
            .map_err(internal)?;
        let (branches, snapshot_names) =
            tokio::task::spawn_blocking(move || git::local_branches(&r2).map(|b| (b, git::loop_ref_names(&r2))))
                .await
                .map_err(internal)?
                .map_err(|e| ToolError::precondition(format!("Failed to start loop: {e}")))?;
        let worktrees = engine.data_dir.join("worktrees");
        if caller_branch.is_none() && branches.iter().any(|b| b == "forge") {
            // Every `forge/<name>` would clash with it (and no suffix would help).
            return Err(ToolError::conflict(
                "Failed to start loop: the branch `forge` keeps loops' branches (forge/<name>) from being created; rename it, or pass branch to choose the loop's branch",
            ));
        }
        // The name is reserved against `forge/<name>` and the branches under it; a branch
        // `forge` itself (possible only with a caller `branch`, refused above otherwise)
        // would clash with every name, and no suffix could move past it.
        let name = uniquify(&requested, |n| {
            taken.iter().any(|t| t == n)
                || git::branch_clash(&branches, &git::branch_for(n)).is_some_and(|c| c != "forge")
                || std::fs::symlink_metadata(worktrees.join(n)).is_ok()
                || snapshot_names.iter().any(|s| s == n)
                || starting.iter().any(|d| Path::new(d) == worktrees.join(n))
        });
        // A caller-chosen branch replaces forge/<name> (the name is still reserved against
        // forge/<name> above); it must be a new branch that clashes with none.
        let branch = match &caller_branch {
            Some(b) => {
                match git::branch_clash(&branches, b) {
                    Some(c) if c == b => {
                        return Err(ToolError::conflict(format!(
                            "Failed to start loop: branch `{b}` already exists; pass a new branch name (the loop creates it from HEAD) or omit branch to use forge/<name>"
                        )))
                    }
                    Some(c) => {
                        return Err(ToolError::conflict(format!(
                            "Failed to start loop: branch `{b}` cannot be created beside the existing branch `{c}` (git keeps one of them as a file where the other needs a directory); pass another branch name or omit branch to use forge/<name>"
                        )))
                    }
                    None => {}
                }
                b.clone()
            }
            None => git::branch_for(&name),
        };
        let dir = worktrees.join(&name);
        crate::pause::at("start.named").await;
        // Servers on this data directory that chose the same name create its worktree one
        // after the other (the second then finds the directory taken and chooses again).
        let named_lock = engine.loop_lock(&project, &name, crate::loop_lock::WAIT).await.ok();
        // Recorded before the branch and worktree exist, until the loop's rows do: a start
        // killed in between is undone by a later one (`undo_killed_starts`).
        let start_key = dir.display().to_string();
        // The commit the branch is made at, read first and recorded with the start: a start
        // killed after making its branch but before its worktree is undone by it too.
        let r0 = repo.clone();
        let base = tokio::task::spawn_blocking(move || git::repo_head(&r0).ok()).await.ok().flatten();
        let record = loop_starts::LoopStart {
            worktree_dir: start_key.clone(),
            project_id: project.clone(),
            loop_name: name.clone(),
            repo_dir: repo.display().to_string(),
            branch: branch.clone(),
            owner_pid: i64::from(std::process::id()),
            started_at: now_ms(),
            base_commit: base.clone(),
        };
        let held = engine.store.call(move |c| loop_starts::begin(c, &record)).await.map_err(internal)?;
        if !held {
            // Another server's start holds the folder: choose again.
            drop(named_lock);
            if attempt < ATTEMPTS {
                continue;
            }
            return Err(ToolError::conflict(format!(
                "Failed to start loop: another loop start is creating {}; try again",
                dir.display()
            )));
        }
        let (r3, d3, b3) = (repo.clone(), dir.clone(), branch.clone());
        let created =
            tokio::task::spawn_blocking(move || git::create_worktree_at(&r3, &d3, &b3, base.as_deref())).await;
        if !matches!(created, Ok(Ok(_))) {
            end_start(engine, &start_key).await;
        }
        let created = created.map_err(internal)?;
        drop(named_lock);
        if let Ok(wt) = &created {
            // What the undo of a start killed from here on compares the branch with.
            let (k, base) = (start_key.clone(), wt.base_commit.clone());
            if let Err(e) = engine.store.call(move |c| loop_starts::created(c, &k, &base)).await {
                tracing::warn!("cannot record the base commit of the loop start of {start_key}: {e}");
            }
        }
        crate::pause::at("start.created").await;
        match created {
            Ok(wt) => break (name, branch, wt, start_key),
            // Taken since the check, by another server's loop start.
            Err(git::GitError::BranchExists { .. } | git::GitError::DirNotEmpty { .. }) if attempt < ATTEMPTS => {
                continue
            }
            Err(e @ (git::GitError::BranchExists { .. } | git::GitError::DirNotEmpty { .. })) => {
                return Err(ToolError::conflict(format!("Failed to start loop: {e}")));
            }
            Err(e) => return Err(ToolError::precondition(format!("Failed to start loop: {e}"))),
        }
    };
    // Sandbox shims (engine/sandbox.rs).
    if let Some(b) = &bwrap {
        let sb = shim_sandbox(engine, env, &wt.dir, env.config.sandbox_network);
        if let Err(e) = sb.write_shim(b, &engine.data_dir) {
            abandon_start(engine, &repo, &wt.dir, &branch, &start_key).await;
            return Err(internal(format!("cannot write the sandbox shims: {e}")));
        }
    }

    // The agent command, checked before any row exists: a loop that cannot start is never
    // announced as running.
    if let Err(e) = probe_agent(env, &wt.dir) {
        abandon_start(engine, &repo, &wt.dir, &branch, &start_key).await;
        return Err(ToolError::precondition(format!("Failed to start loop: {e}")));
    }

    // 2. Rows.
    let decomposition = decompose(&plan);
    let total = decomposition.sections.len() as u32;
    // Sections past the cap are dropped (FORGE-REFERENCE §3.2): said in the reply, which
    // said nothing of them before (plan-write's report warns; a plan given inline has none).
    let dropped = decomposition.uncapped_count.saturating_sub(decomposition.sections.len());
    let session = forge_core::fresh_session();
    let token = host::new_token();
    let now = now_ms();
    let max_iterations = env.config.default_max_iterations as i64;
    let (p, n, s, tk) = (project.clone(), name.clone(), session.clone(), token.clone());
    let host_session = env.caller.session_id.clone();
    let (title2, plan2, wtdir, root) =
        (title.clone(), plan.clone(), wt.dir.display().to_string(), env.project.root.display().to_string());
    let (b4, base) = (branch.clone(), wt.base_commit.clone());
    let (sandbox, sandbox_network) = (bwrap.is_some(), bwrap.is_some() && env.config.sandbox_network);
    let (em, am, ev, av) = resolve_models(engine, &project, &env.config).await;
    let mut run_config = env.config.clone();
    run_config.execution_model = em.clone();
    run_config.auditor_model = am.clone();
    run_config.execution_variant = ev.clone();
    run_config.auditor_variant = av.clone();
    let run_model = em.clone();
    let key = start_key.clone();
    let rows = engine
        .store
        .call(move |c| {
            forge_store::transact(c, |tx| -> rusqlite::Result<()> {
                // Stale rows of a swept loop with the same name (its findings' files are
                // announced, so editors showing them clear them; a review found them kept).
                forge_store::findings::delete_bucket(tx, &p, &n, now)?;
                tx.execute("DELETE FROM plans WHERE project_id = ?1 AND loop_name = ?2", rusqlite::params![p, n])?;
                tx.execute(
                    "INSERT INTO loops (project_id, loop_name, title, status, phase, current_session_id, host_session_id, project_dir,
                        worktree_dir, worktree_branch, base_commit, max_iterations, iteration, current_section_index, total_sections,
                        sandbox, execution_model, auditor_model, owner_pid, started_at, last_activity_at, sandbox_network,
                        execution_variant, auditor_variant)
                     VALUES (?1, ?2, ?3, 'running', 'coding', ?4, ?5, ?6, ?7, ?8, ?9, ?10, 1, 0, ?11, ?12, ?13, ?14, ?15, ?16, ?16, ?17, ?18, ?19)",
                    rusqlite::params![p, n, title2, s, host_session, root, wtdir, b4, base, max_iterations, total, sandbox, em, am, std::process::id(), now, sandbox_network, ev, av],
                )?;
                plans::put_loop(tx, &p, &n, &plan2, now)?;
                for sec in &decomposition.sections {
                    db::insert_section(tx, &p, &n, sec.index as u32, &sec.title, &sec.content, now)?;
                }
                if total > 0 {
                    db::start_section(tx, &p, &n, 0, now)?;
                }
                db::insert_session(tx, &p, &n, &s, "coder", &tk, (total > 0).then_some(0), now)?;
                loop_starts::end(tx, &key)?;
                forge_store::status::touch(tx, &p, &n, now)
            })
        })
        .await;
    if let Err(e) = rows {
        abandon_start(engine, &repo, &wt.dir, &branch, &start_key).await;
        return Err(internal(e));
    }
    engine.store.wrote.wake();

    // 3. First turn.
    let prompt = first_prompt(engine, &project, &name, env, Kind::Initial).await;
    runner::spawn(
        engine,
        &project,
        &repo,
        &name,
        run_config,
        FirstTurn { session_id: session.clone(), token, role: Role::Coder, prompt },
    );

    let max = if max_iterations == 0 { "unlimited".to_string() } else { max_iterations.to_string() };
    let model = run_model.unwrap_or_else(|| "default".into());
    let status_link = env.link(&forge_protocol::uri::ForgeUri::LoopStatus(name.clone()));
    let mut text = format!(
        "Loop activated!\n\nSession: {session}\nTitle: {}\nLoop name: {name}\nWorktree: {}\nBranch: {branch}\nModel: {model}\nMax iterations: {max}\n\nThe loop runs on its own: each phase ends with a handoff and the next one starts.\n{}\nUse loop-status for details and loop-cancel to stop it.",
        // On one line without escapes: the caller's words, shown in a terminal (review XE).
        truncate(&format!("Loop: {}", forge_domain::text::one_line(&title)), 60),
        wt.dir.display(),
        watch_line(&status_link)
    );
    if dropped > 0 {
        text.push_str(&format!(
            "\n\nNote: the plan has {} sections; the {dropped} after the first {total} are dropped and will not run (at most {total} sections). Consolidate phases, or run the rest as another loop.",
            total as usize + dropped
        ));
    }
    Ok(CommandResult {
        text,
        data: json!({
            "loopName": name, "sessionId": session, "worktreeDir": wt.dir, "branch": branch, "baseCommit": wt.base_commit,
            "totalSections": total, "maxIterations": max_iterations, "droppedSections": dropped,
        }).into(),
    })
}

/// How the line of execute-plan's reply that says where to watch the loop starts.
pub const WATCH_IN_EDITOR: &str = "Your part is done; watch it in the editor";

/// The line of execute-plan's reply that says where to watch the loop (its status
/// document, as this client links it).
pub fn watch_line(status_link: &str) -> String {
    format!("{WATCH_IN_EDITOR} ({status_link}).")
}

/// The same line for a caller in a shell (the command line front end puts it in place of
/// [`watch_line`]): how to watch the loop with `forge-lsp call loop-status`.
pub fn shell_watch_line(name: &str) -> String {
    let input = serde_json::json!({ "name": name }).to_string();
    format!("Your part is done; watch it with `forge-lsp call loop-status '{input}'` (or open forge://loop/{name}/status.md in an editor).")
}

/// The loop's models and variants in the seeds' priority order. Execution: `executionModel`,
/// else the project's last-used execution model, else the agent's default (`None`). Auditor:
/// `auditorModel`, `executionModel`, the last-used auditor model, the last-used execution
/// model, else the default. Variants: the configured value, else the last-used value of the
/// same role (the auditor variant never inherits the execution variant; an empty value
/// counts as unset). Configured models and variants are remembered as the last used.
async fn resolve_models(
    engine: &Arc<Engine>,
    project: &str,
    c: &forge_core::config::Config,
) -> (Option<String>, Option<String>, Option<String>, Option<String>) {
    let (p, em, am) = (project.to_string(), c.execution_model.clone(), c.auditor_model.clone());
    let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
    let (ev, av) = (nonempty(&c.execution_variant), nonempty(&c.auditor_variant));
    engine
        .store
        .call(move |db| {
            let get = |k: &str| -> Option<String> {
                db.query_row("SELECT value FROM model_preferences WHERE project_id = ?1 AND key = ?2", rusqlite::params![p, k], |r| r.get(0))
                    .ok()
            };
            let last_exec = get("executionModel");
            let last_aud = get("auditorModel");
            let exec = em.clone().or(last_exec.clone());
            let aud = am.clone().or(em.clone()).or(last_aud).or(last_exec);
            let exec_variant = ev.clone().or(get("executionVariant"));
            let aud_variant = av.clone().or(get("auditorVariant"));
            let now = now_ms();
            for (k, v) in [("executionModel", &em), ("auditorModel", &am), ("executionVariant", &ev), ("auditorVariant", &av)] {
                if let Some(v) = v {
                    let saved = db.execute(
                        "INSERT INTO model_preferences (project_id, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (project_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                        rusqlite::params![p, k, v, now],
                    );
                    if let Err(e) = saved {
                        tracing::warn!("cannot remember the last used {k}: {e}");
                    }
                }
            }
            (exec, aud, exec_variant, aud_variant)
        })
        .await
}

/// A preset does not start in a folder with its CLI's configuration the user has not
/// trusted, where the CLI cannot be told to leave it out (`agents::config_refusal`).
fn config_refusal(env: &ToolEnv, cwd: &Path) -> Result<(), String> {
    let preset = crate::agents::preset(&env.config);
    crate::agents::config_refusal(preset, env.config.agent_trust_project_config, cwd).map_or(Ok(()), Err)
}

/// The sandbox whose shims a loop's agent goes through (written at its start and restart):
/// the agent program bound when it is a file outside the worktree, the configuration's
/// secret rules, the shims' folder.
fn shim_sandbox(engine: &Engine, env: &ToolEnv, worktree: &Path, network: bool) -> Sandbox {
    let mut sandbox = Sandbox::for_loop(worktree, network, engine.private_socket().as_deref());
    // Added to the loop's own binds (the repository's git directory under `/tmp`), not in
    // their place: replacing them left git failing in the agent's shells (found by a
    // review), while `forge.shell`, which builds its sandbox without this, worked.
    sandbox.ro_binds.extend(sandbox::program_binds(crate::agents::program(&env.config).as_deref(), worktree));
    // The agent's `PATH` (without the shims' folder, which is no link).
    let path = crate::host::agent_path(None, crate::host::self_bin().as_deref(), std::env::var_os("PATH"));
    sandbox.with_secrets(sandbox::Secrets::from_config(&env.config)).with_shims(&engine.data_dir).with_path_links(&path)
}

/// Checks that the agent command can be started at all: its program exists and may be
/// executed (a file without an execute bit would fail every turn, "Permission denied").
fn probe_agent(env: &ToolEnv, cwd: &Path) -> Result<(), String> {
    use crate::sandbox::is_executable as executable;
    let argv = crate::agents::program(&env.config).unwrap_or_default();
    let prog = argv.first().ok_or("agent.command is empty")?;
    // The first file of that name (a path, or as PATH finds it), and whether it may run.
    let found: Option<(PathBuf, bool)> = if prog.contains('/') {
        let p = if Path::new(prog).is_absolute() { PathBuf::from(prog) } else { cwd.join(prog) };
        p.is_file().then(|| (p.clone(), executable(&p)))
    } else {
        // The PATH the agent gets (the server's binary directory first); like execvp, a
        // file there that may not be executed is passed over for a later one.
        let path = crate::host::agent_path(None, crate::host::self_bin().as_deref(), std::env::var_os("PATH"));
        let files: Vec<PathBuf> = std::env::split_paths(&path).map(|d| d.join(prog)).filter(|p| p.is_file()).collect();
        files
            .iter()
            .find(|p| executable(p))
            .map(|p| (p.clone(), true))
            .or_else(|| files.first().map(|p| (p.clone(), false)))
    };
    // Name the setting the program came from.
    let from = match (&env.config.agent_preset, env.config.agent_command.is_none()) {
        (Some(p), true) => format!("agent.preset = {p:?}: the {p} CLI"),
        _ => "agent.command".to_string(),
    };
    // Said before the loop exists, not at its first turn.
    config_refusal(env, cwd)?;
    match found {
        Some((_, true)) => Ok(()),
        Some((file, false)) => Err(format!(
            "the agent command {prog:?} ({from}) is {}, which may not be executed; make it executable (chmod +x)",
            file.display()
        )),
        None => Err(format!("the agent command {prog:?} ({from}) was not found; check the path or PATH")),
    }
}

async fn first_prompt(engine: &Arc<Engine>, project: &str, name: &str, env: &ToolEnv, kind: Kind) -> String {
    let (p, n, config) = (project.to_string(), name.to_string(), env.config.clone());
    engine
        .store
        .call(move |c| {
            let row = loops::get(c, &p, &n)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            let ctx = prompt_context::load(c, &row, &config, None)?;
            Ok::<_, rusqlite::Error>(prompt_context::build(kind, &ctx))
        })
        .await
        .unwrap_or_default()
}

/// Rolls back a loop start that failed after its worktree was made: its sandbox shims,
/// its worktree and branch, then its record.
async fn abandon_start(engine: &Arc<Engine>, repo: &Path, worktree: &Path, branch: &str, key: &str) {
    let _ = sandbox::remove_shims(&engine.data_dir, worktree);
    rollback_git(repo, worktree, branch).await;
    end_start(engine, key).await;
}

/// Forgets a loop start that was rolled back (or never created anything).
async fn end_start(engine: &Arc<Engine>, key: &str) {
    let k = key.to_string();
    if let Err(e) = engine.store.call(move |c| loop_starts::end(c, &k)).await {
        tracing::warn!("cannot forget the loop start of {key}: {e}");
    }
}

/// Undoes the loop starts of servers that were killed after creating a loop's branch and
/// worktree and before writing its rows (`forge_store::loop_starts`): the worktree is
/// removed, then the branch, and the record with them. Before (FF 8), both stayed, unknown
/// to every tool, and the next loop of that name got a suffix.
///
/// Each record is claimed first (`loop_starts::claim`: it names this process from then
/// on), so two processes never undo one record, and none undoes a folder a new start holds
/// (review YD: an undo working from a list read before another server undid the same
/// record and started a loop in that folder removed that running loop's worktree and
/// branch). A start killed before its worktree was made has only its branch undone, when
/// it is still at the recorded commit and checked out nowhere. Left alone, with the record
/// dropped: a folder a loop uses, and one someone worked in: its HEAD or branch not at the
/// recorded base commit, anything beyond its checkout (`git::untouched_since_checkout`),
/// or no base commit recorded (a repository without commits, or a record of an older
/// server).
async fn undo_killed_starts(engine: &Arc<Engine>) {
    let dead = engine
        .store
        .call(|c| {
            let mut dead = vec![];
            for s in loop_starts::all(c)? {
                if crate::owner::process_gone(c, s.owner_pid, s.started_at)? {
                    dead.push(s);
                }
            }
            Ok::<_, rusqlite::Error>(dead)
        })
        .await;
    let dead = match dead {
        Ok(d) => d,
        Err(e) => return tracing::warn!("cannot read the loop starts in progress: {e}"),
    };
    let me = i64::from(std::process::id());
    crate::pause::at("start.undo").await;
    for s in dead {
        let at = now_ms();
        let s2 = s.clone();
        let claimed = engine
            .store
            .call(move |c| {
                if !loop_starts::claim(c, &s2, me, at)? {
                    return Ok(None);
                }
                loops::worktree_folders(c).map(Some)
            })
            .await;
        let loop_folders = match claimed {
            Ok(Some(folders)) => folders,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("cannot claim the loop start of {}: {e}", s.worktree_dir);
                continue;
            }
        };
        let (repo, dir, branch) = (PathBuf::from(&s.repo_dir), PathBuf::from(&s.worktree_dir), s.branch.clone());
        let base = s.base_commit.clone();
        let undone = tokio::task::spawn_blocking(move || {
            // A loop's folder, however either is spelled (review YF: another spelling of
            // the data directory passed a comparison of the strings).
            let same = |d: &String| same_folder(Path::new(d), &dir);
            if loop_folders.iter().any(same) {
                return Ok(Undo::LeftAlone);
            }
            if std::fs::symlink_metadata(&dir).is_err() {
                // Killed before its worktree was made (or the folder was removed since): its
                // branch, if it was made and is still at the recorded commit, holds nothing
                // but that commit (before, it stayed, and the next loop of that name got a
                // suffix). Checked out somewhere since: it stays.
                let tip = git::branch_tip(&repo, &branch).ok().flatten();
                return Ok(match (tip, base) {
                    (None, _) => Undo::LeftAlone,
                    (Some(tip), Some(base)) if tip == base => match git::delete_created_branch(&repo, &branch) {
                        Ok(()) => Undo::BranchRemoved,
                        Err(e) => Undo::BranchKept(e.to_string()),
                    },
                    _ => Undo::Worked,
                });
            }
            // Untouched since it was made: its HEAD and its branch still at the commit
            // they were made at (review YF: a reflog's length told a branch with commits
            // after its reflog expired from one never moved), and no change in the tree.
            let Some(base) = base else { return Ok(Undo::Worked) };
            let head = git::head(&dir).ok();
            let tip = git::branch_tip(&repo, &branch).ok().flatten();
            let clean = git::untouched_since_checkout(&dir).unwrap_or(false);
            if head.as_deref() != Some(base.as_str()) || tip.as_deref() != Some(base.as_str()) || !clean {
                return Ok(Undo::Worked);
            }
            git::remove_worktree(&repo, &dir)?;
            // Checked out elsewhere (a worktree of the user's): the branch stays.
            Ok::<_, git::GitError>(match git::delete_created_branch(&repo, &branch) {
                Ok(()) => Undo::Removed,
                Err(e) => Undo::BranchKept(e.to_string()),
            })
        })
        .await;
        match undone {
            Ok(Ok(Undo::Removed)) => tracing::info!(
                loop_name = %s.loop_name,
                "undid a loop start killed before its loop was recorded (server pid {}): removed {} and branch {}",
                s.owner_pid,
                s.worktree_dir,
                s.branch
            ),
            Ok(Ok(Undo::BranchRemoved)) => tracing::info!(
                loop_name = %s.loop_name,
                "undid a loop start killed before its loop was recorded (server pid {}): deleted branch {} (its worktree {} was never made, or is gone)",
                s.owner_pid,
                s.branch,
                s.worktree_dir
            ),
            Ok(Ok(Undo::LeftAlone)) => {}
            Ok(Ok(Undo::BranchKept(why))) => tracing::warn!(
                loop_name = %s.loop_name,
                "undid a loop start killed before its loop was recorded: removed {}; its branch {} stays: {why}",
                s.worktree_dir,
                s.branch
            ),
            Ok(Ok(Undo::Worked)) => tracing::warn!(
                loop_name = %s.loop_name,
                "a loop start killed before its loop was recorded left {} and branch {}, and someone worked there since: kept (`forge-lsp cleanup loop {}` or git removes them)",
                s.worktree_dir,
                s.branch,
                s.loop_name
            ),
            Ok(Err(e)) => tracing::warn!(
                loop_name = %s.loop_name,
                "a loop start killed before its loop was recorded left {} and branch {}; cannot remove them: {e}",
                s.worktree_dir,
                s.branch
            ),
            // The blocking task failed: the claim stays, and is undone when this process is gone.
            Err(_) => continue,
        }
        let key = s.worktree_dir.clone();
        if let Err(e) = engine.store.call(move |c| loop_starts::end_claimed(c, &key, me, at)).await {
            tracing::warn!("cannot forget the loop start of {}: {e}", s.worktree_dir);
        }
    }
}

/// Whether two paths name the same existing folder (device and inode).
fn same_folder(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// What [`undo_killed_starts`] did with a killed start's worktree and branch.
enum Undo {
    Removed,
    /// Only the branch: the worktree folder was not there.
    BranchRemoved,
    /// The worktree removed; the branch could not be deleted (checked out elsewhere).
    BranchKept(String),
    /// A loop uses the folder, or it is gone.
    LeftAlone,
    /// Changes in the worktree, commits on the branch or at its HEAD, or no base commit
    /// recorded (killed while the worktree was made): kept.
    Worked,
}

async fn rollback_git(repo: &Path, dir: &Path, branch: &str) {
    let (r, d, b) = (repo.to_path_buf(), dir.to_path_buf(), branch.to_string());
    let _ = tokio::task::spawn_blocking(move || {
        if let Err(e) = git::remove_worktree(&r, &d) {
            tracing::warn!("rolling back a failed loop start: cannot remove worktree {}: {e}", d.display());
        }
        if let Err(e) = git::delete_created_branch(&r, &b) {
            tracing::warn!("rolling back a failed loop start: cannot delete branch {b}: {e}");
        }
    })
    .await;
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(max.saturating_sub(3)).collect::<String>())
    }
}

/// `mode: "new-session"`: one untracked agent session with the plan, in the project
/// root, no worktree and no loop.
pub async fn new_session(
    engine: &Arc<Engine>,
    env: &ToolEnv,
    title: String,
    plan: String,
) -> Result<CommandResult, ToolError> {
    let Some(argv) = crate::agents::program(&env.config) else {
        return Err(ToolError::precondition(
            "Failed to start new session: no agent host is configured. Set agent.command (see docs/agents.md).",
        ));
    };
    probe_agent(env, &env.project.root)
        .map_err(|e| ToolError::precondition(format!("Failed to start new session: {e}")))?;
    let session = forge_core::fresh_session();
    let title = truncate(&title, 60);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, u32, TurnOutcome)>();
    host::start_turn(
        TurnRequest {
            argv,
            session_id: session.clone(),
            token: String::new(),
            role: String::new(),
            agent: "code".into(),
            model: env.config.execution_model.clone(),
            variant: env.config.execution_variant.clone().filter(|v| !v.trim().is_empty()),
            loop_name: String::new(),
            cwd: env.project.root.clone(),
            title: title.clone(),
            prompt: plan,
            resume: false,
            socket: None,
            data_dir: engine.data_dir.clone(),
            prompt_dir: engine.data_dir.join("prompts").join("sessions"),
            turn: 1,
            shim_dir: None,
            activity: engine.activity.clone(),
            preset: crate::agents::preset(&env.config),
            project_config: env.config.agent_trust_project_config,
            secrets: crate::secrets::Secrets::from_config(&env.config),
            record: None,
            claim: None,
        },
        tx,
    );
    tokio::spawn(async move {
        if let Some((s, _, outcome)) = rx.recv().await {
            tracing::info!(session = %s, ?outcome, "untracked session ended");
        }
    });
    let model = env.config.execution_model.clone().unwrap_or_else(|| "default".into());
    Ok(CommandResult {
        text: format!(
            "New session started!\n\nSession: {session}\nTitle: {}\nModel: {model}\n\nThe session runs the code agent with the plan in {}. It is not a loop: loop-status and loop-cancel do not track it.",
            forge_domain::text::one_line(&title),
            env.project.root.display()
        ),
        data: json!({ "sessionId": session, "title": title, "model": model }).into(),
    })
}

/// `loop-status restart`: the seeds' restart semantics.
pub async fn restart(engine: &Arc<Engine>, env: &ToolEnv, name: &str, force: bool) -> Result<CommandResult, ToolError> {
    let (repo, _) = preconditions(env)?;
    let project = env.project.id.clone();
    // Bounded: a cancel of this process ahead of it waits for the runner's answer.
    let _one_at_a_time = tokio::time::timeout(crate::loop_lock::WAIT, engine.restart_lock(&project, name))
        .await
        .map_err(|_| {
            ToolError::busy(format!(
                "Cannot restart \"{name}\": a restart or cancel of it in this process did not finish within {:?}; retry the restart",
                crate::loop_lock::WAIT
            ))
        })?;
    // The row is read and checked; when this process runs the loop, its runner is stopped
    // (without ending the loop: no termination row, teardown commit or cancelled notice) and
    // the row read and checked again, since the runner may have ended or advanced the loop
    // before it stopped.
    let mut stopped_runner = false;
    // Taken once no runner of this process runs the loop; held until the loop's row is
    // written (`loop_lock`): a runner of another process finishes the step it is in (its
    // commits and its write) before this restart reads the row, or starts it after.
    let mut locked: Option<crate::loop_lock::LoopLock> = None;
    let (row, dir, branch, bwrap, sbx_network) = loop {
        let (p, n) = (project.clone(), name.to_string());
        let row = engine.store.call(move |c| loops::get(c, &p, &n)).await.map_err(internal)?;
        let Some(row) = row else { return Err(ToolError::not_found(format!("No loop found for loop \"{name}\"."))) };
        let status = Status::parse(&row.status).unwrap_or(Status::Errored);
        if status == Status::Completed {
            return Err(ToolError::conflict(format!(
                "Loop \"{name}\" completed successfully and cannot be restarted."
            )));
        }
        if status == Status::Running && !force {
            // Forge's wording, with why when the server that ran it has ended.
            let (p, r2) = (project.clone(), row.clone());
            let gone = engine.store.call(move |c| crate::owner::server_gone(c, &p, &r2)).await.ok().flatten();
            let why = gone
                .map(|pid| format!(" (it only looks active: its server, process {pid}, has ended and nothing runs it)"))
                .unwrap_or_default();
            return Err(ToolError::conflict(format!(
                "Loop \"{name}\" is currently active. Use force=true to restart it{why}."
            )));
        }
        let dir = PathBuf::from(&row.worktree_dir);
        let branch = row.worktree_branch.clone().unwrap_or_else(|| git::branch_for(name));
        let (dir_ok, branch_ok) = crate::runner::work_left(&repo, &row);
        loop_machine::restartable(status, &row.worktree_dir, dir_ok, branch_ok)
            .map_err(|m| ToolError::precondition(format!("Cannot restart \"{name}\": {m}")))?;
        // A worktree that is there but no longer one of this repository: relinked when the
        // project was moved (both links agree), else refused before anything is stopped
        // (before, the restart was accepted and every call of its agent refused).
        if dir.exists() {
            let (r, d) = (repo.clone(), dir.clone());
            match tokio::task::spawn_blocking(move || git::relink_moved_worktree(&r, &d)).await.map_err(internal)? {
                Ok(true) => {
                    tracing::info!(loop_name = %name, "relinked the worktree {} to the moved project", dir.display())
                }
                Ok(false) => {}
                Err(why) => return Err(ToolError::precondition(format!("Cannot restart \"{name}\": {why}."))),
            }
        }
        // A worktree with configuration of the preset's CLI the user has not trusted (a
        // turn may have written it): refused before the runner is stopped.
        if dir.exists() {
            config_refusal(env, &dir)
                .map_err(|e| ToolError::precondition(format!("Cannot restart \"{name}\": {e}")))?;
        }
        // Sandbox (engine/sandbox.rs): the loop's own saved settings, probed before the runner stops.
        let (sbx, sbx_network) = sandbox::saved(engine, &project, name).await?;
        let bwrap = sandbox::require(sbx, "bwrap", &format!("Cannot restart \"{name}\"")).await?;
        match engine.runner(&project, name).filter(|_| !stopped_runner) {
            Some(h) => {
                if !h.stop().await {
                    return Err(ToolError::busy(format!(
                        "Cannot restart \"{name}\": its runner in this process did not stop within 10 s (it stops as soon as its current step ends); retry the restart"
                    )));
                }
                stopped_runner = true;
            }
            // Read and checked once more under the lock: another process's runner may have
            // ended or advanced the loop while this restart waited for it.
            None if locked.is_none() => {
                let lock = engine
                    .loop_lock(&project, name, crate::loop_lock::WAIT)
                    .await
                    .map_err(|e| ToolError::busy(format!("Cannot restart \"{name}\": {e}; retry the restart")))?;
                locked = Some(lock);
                crate::pause::at("restart.locked").await;
            }
            None => break (row, dir, branch, bwrap, sbx_network),
        }
    };
    // No runner of this process runs the loop now (one that did was stopped, its turn
    // killed). When no live server ran it, what the turn of a server that died left running
    // is ended before a new agent starts.
    let elsewhere = !stopped_runner && runner::owned_elsewhere(engine, &project, name).await;
    if !stopped_runner && !elsewhere {
        runner::end_orphaned_turns(engine, &project, name).await;
    }
    if !dir.exists() {
        let (r, d, b) = (repo.clone(), dir.clone(), branch.clone());
        tokio::task::spawn_blocking(move || git::reattach_worktree(&r, &d, &b))
            .await
            .map_err(internal)?
            .map_err(|e| ToolError::precondition(format!("Cannot restart \"{name}\": {e}")))?;
        config_refusal(env, &dir).map_err(|e| ToolError::precondition(format!("Cannot restart \"{name}\": {e}")))?;
    }
    if let Some(b) = &bwrap {
        shim_sandbox(engine, env, &dir, sbx_network).write_shim(b, &engine.data_dir).map_err(|e| {
            ToolError::internal(format!("Cannot restart \"{name}\": cannot write the sandbox shims: {e}"))
        })?;
    }
    let facts = row.facts(runner::post_action_configured(&env.config));
    let plan = loop_machine::restart(&facts);
    let session = forge_core::fresh_session();
    let token = host::new_token();
    let now = now_ms();
    let (p, n, s, tk, pl) = (project.clone(), name.to_string(), session.clone(), token.clone(), plan.clone());
    let role = match plan.phase {
        Phase::PostAction => Role::PostAction,
        _ => Role::Coder,
    };
    engine
        .store
        .call(move |c| {
            forge_store::transact(c, |tx| -> rusqlite::Result<()> {
                db::discard_pending(tx, &p, &n, now)?;
                db::delete_sessions(tx, &p, &n, None, now)?;
                if pl.finish_instead {
                    tx.execute(
                        "UPDATE loops SET status = 'completed', termination_reason = 'completed', completed_at = ?3 WHERE project_id = ?1 AND loop_name = ?2",
                        rusqlite::params![p, n, now],
                    )?;
                } else {
                    tx.execute(
                        "UPDATE loops SET status = 'running', phase = ?3, iteration = 1, error_count = 0, audit_count = 0, model_failed = 0,
                            failed_coding_turns = 0, failed_audit_turns = 0, auditor_fallback_index = 0, stall_count = 0, nudge_count = 0, current_session_id = ?4, standby_session_id = NULL,
                            started_at = ?5, completed_at = NULL, termination_reason = NULL, completion_summary = NULL, owner_pid = ?6
                         WHERE project_id = ?1 AND loop_name = ?2",
                        rusqlite::params![p, n, pl.phase.as_str(), s, now, std::process::id()],
                    )?;
                    db::insert_session(tx, &p, &n, &s, role.as_str(), &tk, pl.section_index, now)?;
                    if let Some(k) = pl.section_index {
                        db::start_section(tx, &p, &n, k, now)?;
                    }
                }
                if let Some(t) = &pl.transition {
                    db::log_transition(tx, &p, &n, t, now)?;
                }
                forge_store::status::touch(tx, &p, &n, now)
            })
        })
        .await
        .map_err(internal)?;
    drop(locked);
    engine.store.wrote.wake();
    if elsewhere {
        // The other server stops its agent when it sees the row just written; the new
        // agent starts after that.
        runner::await_turns_ended(engine, &project, name, &session, std::time::Duration::from_secs(10)).await;
    }
    if plan.finish_instead {
        // Completed: as a loop that completes by itself, what the worktree holds is
        // committed to the loop's branch, and then the worktree goes (the branch stays).
        // Left behind before: the sweep takes a completed loop's worktree as gone. A
        // worktree whose work could not be committed is kept.
        let (d2, b2) = (dir.clone(), row.worktree_branch.clone());
        let msg = format!(
            "loop: {name} completed after {} iteration{}",
            row.iteration,
            if row.iteration == 1 { "" } else { "s" }
        );
        let committed = tokio::task::spawn_blocking(move || {
            if d2.exists() {
                crate::git::checkpoint_on(&d2, b2.as_deref(), &msg).map(|_| ())
            } else {
                Ok(())
            }
        })
        .await;
        let kept = match committed {
            Ok(Ok(())) => {
                if crate::runner::remove_worktree_logged(engine.data_dir.clone(), repo.clone(), dir.clone(), None).await
                {
                    String::new()
                } else {
                    format!(
                        " Its worktree {} was kept: it holds what is not committed to the branch (`git -C {} status` lists it).",
                        dir.display(),
                        dir.display()
                    )
                }
            }
            Ok(Err(e)) => format!(" Its worktree {} was kept: its work could not be committed ({e}).", dir.display()),
            Err(e) => format!(" Its worktree {} was kept ({e}).", dir.display()),
        };
        if !kept.is_empty() {
            tracing::warn!(loop_name = name, "{}", kept.trim());
        }
        return Err(ToolError::conflict(format!(
            "Loop \"{name}\" stopped in post-action, which is no longer configured: it was marked completed; nothing to restart.{kept}"
        )));
    }
    // Continuation prompt when the current section has open bugs.
    let (p, n) = (project.clone(), name.to_string());
    let bugs = engine
        .store
        .call(move |c| {
            let row = loops::get(c, &p, &n)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            // Only the current section's own bugs (not cross-section or earlier ones).
            Ok::<_, rusqlite::Error>(match row.section() {
                Some(k) => forge_domain::review::current_section_bugs(&prompt_context::outstanding(c, &row)?, k),
                None => 0,
            })
        })
        .await
        .unwrap_or(0);
    let kind = match plan.prompt(bugs as u32) {
        loop_machine::RestartPrompt::PostAction => Kind::PostAction,
        loop_machine::RestartPrompt::SectionContinuation => Kind::Continuation,
        _ => Kind::Initial,
    };
    let prompt = first_prompt(engine, &project, name, env, kind).await;
    // The loop keeps the models it was started with (configuration, else last used).
    let mut run_config = env.config.clone();
    run_config.execution_model = env.config.execution_model.clone().or(row.execution_model.clone());
    run_config.auditor_model = env.config.auditor_model.clone().or(row.auditor_model.clone());
    // ... and its variants.
    let (p, n) = (project.clone(), name.to_string());
    let (ev, av): (Option<String>, Option<String>) = engine
        .store
        .call(move |c| {
            c.query_row(
                "SELECT execution_variant, auditor_variant FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                rusqlite::params![p, n],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .await
        .unwrap_or((None, None));
    let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
    run_config.execution_variant = nonempty(&env.config.execution_variant).or(ev);
    run_config.auditor_variant = nonempty(&env.config.auditor_variant).or(av);
    runner::spawn(
        engine,
        &project,
        &repo,
        name,
        run_config,
        FirstTurn { session_id: session.clone(), token, role, prompt },
    );
    let mut text = format!(
        "Restarted loop \"{name}\"\n\nNew session: {session}\nContinuing from iteration: 1\nDirectory: {}",
        dir.display()
    );
    text.push_str(&format!("\nBranch: {branch}"));
    Ok(CommandResult {
        text,
        data: json!({ "loopName": name, "sessionId": session, "iteration": 1, "phase": plan.phase.as_str() }).into(),
    })
}
