//! Git operations of the loop engine: the loop's isolated worktree, section checkpoints
//! and the audit scope.
//!
//! A loop runs in its own linked worktree on a new branch `forge/<name>` created from the
//! HEAD of the project's repository; the HEAD commit of the new worktree is the loop's
//! `base_commit` (seed "Worktree Isolation"). A clean section audit commits everything as
//! `section <N>: <title>`; the next section's audit scope starts at that checkpoint (the
//! base commit for the first section). When a loop's worktree directory is gone but its
//! branch survives, restart re-creates the worktree from the branch (seed
//! "Restartability"). Branches are never deleted, except to roll back a loop start that
//! failed (reference §3.4, §4.7) and by `forge-lsp cleanup loop`, which deletes only
//! `forge/` branches.
//!
//! Everything here uses libgit2 (`git2`), never the git CLI. Functions taking `repo_dir`
//! accept any path inside the repository (or one of its worktrees); functions taking
//! `worktree` want the root of the loop's worktree.

use std::fmt;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use git2::{
    BranchType, DiffFindOptions, DiffOptions, ErrorCode, IndexAddOption, Oid, Repository, Signature, Sort,
    StatusOptions, WorktreeAddOptions, WorktreePruneOptions,
};

/// What `info/exclude` gets, at any depth (`**/.forge/…`: a monorepo's packages too), so
/// forge-lsp's own files (the `.forge/view` copies, refused saves, a loop's sandbox shims,
/// temporary files and usage reports) are never staged, committed or listed as untracked,
/// and neither is a project's own `.forge/config.toml` (the user's configuration, trusted
/// only while it is not committed). Only these: the rest of `.forge/` (a project's tools,
/// files an agent makes there) is the project's. Before, all of `.forge/` was excluded, and a
/// loop's new files under it were lost when it completed (review YU).
const FORGE_OWN: [&str; 6] = ["view/", "rejected/", "bin/", "tmp/", "usage/", "config.toml"];
/// The comment line before the [`FORGE_OWN`] lines in `info/exclude`.
const FORGE_EXCLUDE_MARK: &str = "# forge-lsp: its own files, and the project's untracked .forge/config.toml";
/// The one line earlier versions appended: replaced by the [`FORGE_OWN`] lines.
const OLD_FORGE_EXCLUDE: &str = ".forge/";
/// Identity used when the repository has none configured.
const FALLBACK_NAME: &str = "forge-lsp";
const FALLBACK_EMAIL: &str = "forge-lsp@localhost";
/// The only branches [`delete_branch`] may delete.
const FORGE_BRANCH_PREFIX: &str = "forge/";

/// A loop's worktree as created by [`create_worktree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The worktree directory (absolute).
    pub dir: PathBuf,
    /// The short branch name, e.g. `forge/my-loop`.
    pub branch: String,
    /// The worktree's HEAD commit right after creation (hex id).
    pub base_commit: String,
}

/// A failed git operation. The message names the path or branch and what to do.
#[derive(Debug)]
pub enum GitError {
    /// No repository (or worktree) could be opened at `path`.
    Open { path: PathBuf, source: git2::Error },
    /// The repository has no commit yet.
    NoCommit { repo: PathBuf },
    /// The repository is bare (has no working tree).
    Bare { path: PathBuf },
    /// The worktree's `.git` does not name the linked worktree it was made as (`why`).
    Redirected { path: PathBuf, why: &'static str },
    /// `branch` is not a valid branch name.
    InvalidBranchName { branch: String },
    /// A new branch was asked for but it exists already.
    BranchExists { branch: String, repo: PathBuf },
    /// An existing branch was asked for but it does not exist.
    BranchNotFound { branch: String, repo: PathBuf },
    /// The branch is checked out in another worktree (or the main one).
    BranchCheckedOut { branch: String, at: PathBuf },
    /// [`delete_branch`] only deletes `forge/` branches.
    NotForgeBranch { branch: String },
    /// The target directory exists and is not empty.
    DirNotEmpty { dir: PathBuf },
    /// The target path exists and is not a directory.
    NotADirectory { path: PathBuf },
    /// The directory exists but is not a registered worktree of the repository.
    NotAWorktree { dir: PathBuf, repo: PathBuf },
    /// The worktree is locked (`git worktree lock`).
    WorktreeLocked { dir: PathBuf, reason: String },
    /// A commit id or revision did not resolve to a commit.
    UnknownCommit { rev: String, path: PathBuf, source: git2::Error },
    /// A file-system operation failed.
    Io { action: String, path: PathBuf, source: io::Error },
    /// Any other libgit2 failure.
    Git { action: String, path: PathBuf, source: git2::Error },
}

impl fmt::Display for GitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitError::Open { path, source } => write!(
                f,
                "cannot open a git repository at {}: {}; check that the path exists and is \
                 inside a git repository",
                path.display(),
                source.message()
            ),
            GitError::NoCommit { repo } => write!(
                f,
                "the git repository at {} has no commit yet; loops need a repository with at \
                 least one commit: commit first (e.g. `git add -A && git commit -m \"initial \
                 commit\"`) and retry",
                repo.display()
            ),
            GitError::Redirected { path, why } => write!(
                f,
                "the worktree {} is not the git worktree it was made as ({why}); its changes are not committed through it",
                path.display()
            ),
            GitError::Bare { path } => write!(
                f,
                "the git repository at {} is bare (it has no working tree); run loops in a \
                 repository with a working tree",
                path.display()
            ),
            GitError::InvalidBranchName { branch } => {
                write!(f, "`{branch}` is not a valid git branch name; use a name like `forge/my-loop`")
            }
            GitError::BranchExists { branch, repo } => write!(
                f,
                "branch `{branch}` already exists in the repository at {}; choose another loop \
                 name, or restart the loop that owns the branch",
                repo.display()
            ),
            GitError::BranchNotFound { branch, repo } => write!(
                f,
                "branch `{branch}` does not exist in the repository at {}; the loop's work \
                 cannot be recovered from it: start a new loop",
                repo.display()
            ),
            GitError::BranchCheckedOut { branch, at } => write!(
                f,
                "branch `{branch}` is checked out in the worktree at {}; remove that worktree \
                 (or switch it to another branch) and retry",
                at.display()
            ),
            GitError::NotForgeBranch { branch } => write!(
                f,
                "refusing to delete branch `{branch}`: only `{FORGE_BRANCH_PREFIX}` branches \
                 created by forge-lsp may be deleted"
            ),
            GitError::DirNotEmpty { dir } => write!(
                f,
                "the worktree directory {} already exists and is not empty; remove it or \
                 choose another loop name",
                dir.display()
            ),
            GitError::NotADirectory { path } => {
                write!(f, "{} exists and is not a directory; remove it or choose another loop name", path.display())
            }
            GitError::NotAWorktree { dir, repo } => write!(
                f,
                "{} is not a registered worktree of the repository at {}; refusing to delete \
                 it: remove it by hand if it is not needed",
                dir.display(),
                repo.display()
            ),
            GitError::WorktreeLocked { dir, reason } => write!(
                f,
                "the worktree at {} is locked ({reason}); unlock it with `git worktree unlock` \
                 and retry",
                dir.display()
            ),
            GitError::UnknownCommit { rev, path, source } => write!(
                f,
                "`{rev}` is not a commit of the repository at {}: {}; check the stored commit \
                 id",
                path.display(),
                source.message()
            ),
            GitError::Io { action, path, source } => {
                write!(f, "cannot {action} ({}): {source}; check the path's permissions and free space", path.display())
            }
            GitError::Git { action, path, source } => {
                write!(f, "git: cannot {action} in {}: {}", path.display(), source.message())
            }
        }
    }
}

impl std::error::Error for GitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GitError::Open { source, .. } | GitError::UnknownCommit { source, .. } | GitError::Git { source, .. } => {
                Some(source)
            }
            GitError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Attaches an action and a path to a libgit2 or I/O error.
trait Context<T> {
    fn ctx(self, action: &str, path: &Path) -> Result<T, GitError>;
}

impl<T> Context<T> for Result<T, git2::Error> {
    fn ctx(self, action: &str, path: &Path) -> Result<T, GitError> {
        self.map_err(|source| GitError::Git { action: action.to_string(), path: path.to_path_buf(), source })
    }
}

impl<T> Context<T> for Result<T, io::Error> {
    fn ctx(self, action: &str, path: &Path) -> Result<T, GitError> {
        self.map_err(|source| GitError::Io { action: action.to_string(), path: path.to_path_buf(), source })
    }
}

/// Branch name of a loop: "forge/<name>".
pub fn branch_for(name: &str) -> String {
    format!("{FORGE_BRANCH_PREFIX}{name}")
}

/// Whether a local branch exists. An invalid branch name cannot exist: `Ok(false)`.
pub fn branch_exists(repo_dir: &Path, branch: &str) -> Result<bool, GitError> {
    let repo = discover(repo_dir)?;
    if !valid_branch_name(branch) {
        return Ok(false);
    }
    let found = match repo.find_branch(branch, BranchType::Local) {
        Ok(_) => Ok(true),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(false),
        Err(e) => Err(e).ctx(&format!("look up branch `{branch}`"), repo_dir),
    };
    found
}

/// Create a worktree at `dir` on a NEW branch `branch` starting at HEAD of the repository
/// containing `repo_dir`.
///
/// Fails when the branch exists, when `dir` exists and is not an empty directory, or when
/// the repository has no commit. Records the worktree's HEAD commit as `base_commit` and
/// adds `.forge/` to the repository's (common) `info/exclude`. On failure nothing is left
/// behind (no branch, no directory, no registration).
pub fn create_worktree(repo_dir: &Path, dir: &Path, branch: &str) -> Result<Worktree, GitError> {
    create_worktree_at(repo_dir, dir, branch, None)
}

/// [`create_worktree`] with the branch made at the commit `at` (a full id) instead of
/// HEAD: a loop start records the commit before the branch exists (`forge_store::loop_starts`),
/// so a start killed between the two is undone by it.
pub fn create_worktree_at(repo_dir: &Path, dir: &Path, branch: &str, at: Option<&str>) -> Result<Worktree, GitError> {
    let repo = discover(repo_dir)?;
    let repo_path = repo_display_path(&repo);
    if !valid_branch_name(branch) {
        return Err(GitError::InvalidBranchName { branch: branch.to_string() });
    }
    let head_commit = match at {
        Some(id) => {
            let found = Oid::from_str(id).and_then(|oid| repo.find_commit(oid));
            found.map_err(|source| GitError::UnknownCommit { rev: id.to_string(), path: repo_path.clone(), source })?
        }
        None => head_commit_of(&repo, &repo_path)?,
    };
    match repo.find_branch(branch, BranchType::Local) {
        Ok(_) => return Err(GitError::BranchExists { branch: branch.to_string(), repo: repo_path }),
        Err(e) if e.code() == ErrorCode::NotFound => {}
        Err(e) => return Err(e).ctx(&format!("look up branch `{branch}`"), &repo_path),
    }
    let dir = absolute(dir)?;
    let removed_empty_dir = prepare_target_dir(&dir)?;
    ensure_forge_excluded(&repo)?;
    prune_stale_worktrees(&repo);

    let created = match repo.branch(branch, &head_commit, false) {
        // Created by another process since the check above (a loop start racing this one).
        Err(e) if e.code() == ErrorCode::Exists => {
            Err(GitError::BranchExists { branch: branch.to_string(), repo: repo_path.clone() })
        }
        r => r.ctx(&format!("create branch `{branch}`"), &repo_path),
    };
    let reference = match created {
        Ok(b) => b.into_reference(),
        Err(e) => {
            restore_empty_dir(&dir, removed_empty_dir);
            return Err(e);
        }
    };
    // Tests kill a loop start here: its branch made, its worktree not.
    crate::pause::at_blocking("start.branch");
    let added = add_worktree(&repo, &repo_path, &dir, &reference, branch);
    drop(reference);
    if let Err(e) = added {
        if let Ok(mut b) = repo.find_branch(branch, BranchType::Local) {
            let _ = b.delete();
        }
        restore_empty_dir(&dir, removed_empty_dir);
        return Err(e);
    }
    let base_commit = match head(&dir) {
        Ok(id) => id,
        Err(e) => {
            let _ = remove_worktree(repo_dir, &dir);
            if let Ok(mut b) = repo.find_branch(branch, BranchType::Local) {
                let _ = b.delete();
            }
            return Err(e);
        }
    };
    Ok(Worktree { dir, branch: branch.to_string(), base_commit })
}

/// Re-create a worktree at `dir` for an EXISTING branch (restart after the dir was removed).
///
/// Stale registrations (worktrees whose directory is gone) are pruned first. When `dir`
/// already is a registered worktree on `branch` this is a no-op.
pub fn reattach_worktree(repo_dir: &Path, dir: &Path, branch: &str) -> Result<(), GitError> {
    let repo = discover(repo_dir)?;
    let repo_path = repo_display_path(&repo);
    if !valid_branch_name(branch) {
        return Err(GitError::InvalidBranchName { branch: branch.to_string() });
    }
    let dir = absolute(dir)?;
    prune_stale_worktrees(&repo);
    let reference = match repo.find_branch(branch, BranchType::Local) {
        Ok(b) => b.into_reference(),
        Err(e) if e.code() == ErrorCode::NotFound => {
            return Err(GitError::BranchNotFound { branch: branch.to_string(), repo: repo_path })
        }
        Err(e) => return Err(e).ctx(&format!("look up branch `{branch}`"), &repo_path),
    };
    let refname = format!("refs/heads/{branch}");
    if let Some(at) = checked_out_at(&repo, &refname) {
        if same_path(&at, &dir) {
            return Ok(());
        }
        return Err(GitError::BranchCheckedOut { branch: branch.to_string(), at });
    }
    let removed_empty_dir = prepare_target_dir(&dir)?;
    ensure_forge_excluded(&repo)?;
    let added = add_worktree(&repo, &repo_path, &dir, &reference, branch);
    if added.is_err() {
        restore_empty_dir(&dir, removed_empty_dir);
    }
    added
}

/// Remove a worktree's directory and its registration (prune), keeping the branch.
///
/// A directory that does not exist (and is not registered) is not an error. A directory
/// that exists but is not a registered worktree of the repository is never deleted.
pub fn remove_worktree(repo_dir: &Path, dir: &Path) -> Result<(), GitError> {
    let repo = discover(repo_dir)?;
    let repo_path = repo_display_path(&repo);
    let dir = absolute(dir)?;
    let names =
        repo.worktrees().ctx("list worktrees", &repo_path)?.iter().flatten().map(str::to_string).collect::<Vec<_>>();
    let mut found = None;
    for name in names {
        let Ok(wt) = repo.find_worktree(&name) else {
            continue;
        };
        if same_path(wt.path(), &dir) {
            found = Some(wt);
            break;
        }
    }
    let Some(wt) = found else {
        prune_stale_worktrees(&repo);
        return match fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            _ => Err(GitError::NotAWorktree { dir, repo: repo_path }),
        };
    };
    if let Some(name) = wt.name() {
        if let Some(reason) = lock_reason(&repo, name) {
            return Err(GitError::WorktreeLocked { dir, reason });
        }
    }
    if fs::symlink_metadata(&dir).is_ok() {
        remove_dir_forcefully(&dir)?;
    }
    let mut opts = WorktreePruneOptions::new();
    opts.valid(true).working_tree(false).locked(false);
    match wt.prune(Some(&mut opts)) {
        Ok(()) => Ok(()),
        // Someone pruned it concurrently: the registration is gone either way.
        Err(_) if wt.name().is_some_and(|n| !worktree_gitdir(&repo, n).exists()) => Ok(()),
        Err(e) => Err(e).ctx(&format!("prune the registration of worktree {}", dir.display()), &repo_path),
    }
}

/// Delete a local `forge/` branch (`forge-lsp cleanup loop`; refuses names not starting
/// with "forge/"). A branch that does not exist is not an error.
pub fn delete_branch(repo_dir: &Path, branch: &str) -> Result<(), GitError> {
    if !branch.starts_with(FORGE_BRANCH_PREFIX) {
        return Err(GitError::NotForgeBranch { branch: branch.to_string() });
    }
    delete_created_branch(repo_dir, branch)
}

/// The repository's local branch names (one listing, for [`branch_clash`]).
pub fn local_branches(repo_dir: &Path) -> Result<Vec<String>, GitError> {
    let repo = discover(repo_dir)?;
    let repo_path = repo_display_path(&repo);
    let mut names = Vec::new();
    for b in repo.branches(Some(BranchType::Local)).ctx("list the branches", &repo_path)? {
        let (b, _) = b.ctx("list the branches", &repo_path)?;
        if let Ok(Some(name)) = b.name() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// The loop names that have refs of forge-lsp's own in the repository
/// (`refs/forge/<loop>/…`: attempt snapshots), which outlive a loop's row when the sweep
/// removes it. A new loop of such a name would find the old loop's snapshots as its own
/// (review YU), so names are made unique against these too. Unreadable refs are skipped.
pub fn loop_ref_names(repo_dir: &Path) -> Vec<String> {
    let Ok(repo) = discover(repo_dir) else { return vec![] };
    let Ok(refs) = repo.references_glob("refs/forge/*") else { return vec![] };
    let mut names: Vec<String> = refs
        .flatten()
        .filter_map(|r| r.name().and_then(|n| n.strip_prefix("refs/forge/")).map(str::to_string))
        .filter_map(|rest| rest.split_once('/').map(|(loop_name, _)| loop_name.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The existing branch that keeps `branch` from being created, if any: the same name, or
/// one that is a `/`-separated prefix of it or has it as one (git keeps `main` as a file
/// where `main/x` needs a directory, so the two cannot both exist).
pub fn branch_clash<'a>(existing: &'a [String], branch: &str) -> Option<&'a str> {
    let under = |outer: &str, inner: &str| {
        inner.len() > outer.len() && inner.starts_with(outer) && inner.as_bytes()[outer.len()] == b'/'
    };
    existing
        .iter()
        .find(|e| e.as_str() == branch)
        .or_else(|| existing.iter().find(|e| under(e, branch) || under(branch, e)))
        .map(String::as_str)
}

/// Whether `name` is a valid short branch name (as `git check-ref-format --branch`).
pub fn is_valid_branch_name(name: &str) -> bool {
    valid_branch_name(name)
}

/// The longest `/`-separated part of a branch name a loop accepts, in bytes: git keeps a
/// branch as a file named by that part, written through a `<part>.lock` beside it, and a
/// file name has at most 255 bytes.
pub const MAX_BRANCH_PART: usize = 250;

/// Why `name` cannot be a caller-chosen loop branch (argument `branch`), or `None`: not a
/// valid short branch name; a full ref name (`refs/heads/x` would become
/// `refs/heads/refs/heads/x`); a part longer than [`MAX_BRANCH_PART`].
pub fn branch_name_problem(name: &str) -> Option<String> {
    use forge_domain::text::prefix;
    let quote = |s: &str| {
        if s.len() <= 200 {
            format!("`{s}`")
        } else {
            format!("`{}…` ({} bytes)", prefix(s, 200), s.len())
        }
    };
    if let Some(short) = name.strip_prefix("refs/heads/") {
        return Some(format!(
            "{} is a full ref name (branch); pass the branch's own name, {}",
            quote(name),
            quote(short)
        ));
    }
    if name.starts_with("refs/") {
        return Some(format!(
            "{} names a ref outside refs/heads (branch); pass a branch name like `feature/my-loop`",
            quote(name)
        ));
    }
    if let Some(part) = name.split('/').find(|p| p.len() > MAX_BRANCH_PART) {
        return Some(format!(
            "{} has a part of {} bytes (branch); git stores each `/`-separated part as a file name, so each may have at most {MAX_BRANCH_PART} bytes",
            quote(name),
            part.len()
        ));
    }
    (!valid_branch_name(name))
        .then(|| format!("{} is not a valid git branch name (branch); use a name like `feature/my-loop`", quote(name)))
}

/// Delete a branch the loop start itself just created, whatever its prefix (the rollback
/// of a failed start with a caller-chosen branch). A missing branch is not an error.
pub fn delete_created_branch(repo_dir: &Path, branch: &str) -> Result<(), GitError> {
    let repo = discover(repo_dir)?;
    let repo_path = repo_display_path(&repo);
    if !valid_branch_name(branch) {
        return Err(GitError::InvalidBranchName { branch: branch.to_string() });
    }
    let mut b = match repo.find_branch(branch, BranchType::Local) {
        Ok(b) => b,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok(()),
        Err(e) => return Err(e).ctx(&format!("look up branch `{branch}`"), &repo_path),
    };
    if let Some(at) = checked_out_at(&repo, &format!("refs/heads/{branch}")) {
        return Err(GitError::BranchCheckedOut { branch: branch.to_string(), at });
    }
    b.delete().ctx(&format!("delete branch `{branch}`"), &repo_path)
}

/// Stage everything (like `git add -A`, honouring .gitignore and info/exclude; embedded
/// repositories, i.e. untracked directories with their own `.git`, are skipped) in the
/// worktree and commit with `message` when the tree differs from HEAD; returns the new
/// commit id, or None when nothing changed.
///
/// Author and committer: the repository's configured identity (`user.name`/`user.email`,
/// any config level) if any, else "forge-lsp <forge-lsp@localhost>". The message is
/// stored with trailing whitespace trimmed and one final newline; an empty message
/// becomes "checkpoint".
pub fn checkpoint(worktree: &Path, message: &str) -> Result<Option<String>, GitError> {
    checkpoint_on(worktree, None, message)
}

/// [`checkpoint`] on the loop's `branch`: when the agent detached HEAD or switched to
/// another branch in the worktree, and its HEAD is the branch's tip or ahead of it (it
/// committed there), the branch is first moved to that commit and HEAD put back on it (the
/// index and the files stay as they are), so the agent's commits and the checkpoint land
/// on the branch the loop reports. Before, they landed on the detached HEAD (dangling once
/// the worktree was removed) or on the agent's branch.
///
/// Left where it is, with a warning: a HEAD behind or beside the branch (an older commit
/// checked out: committing its files on the branch would revert the loop's work), a
/// rebase or merge in progress, a branch that is gone. A detached HEAD left that way whose
/// commit the branch does not hold is kept by a ref ([`kept_ref`]).
pub fn checkpoint_on(worktree: &Path, branch: Option<&str>, message: &str) -> Result<Option<String>, GitError> {
    let repo = open_worktree(worktree)?;
    if let Some(b) = branch {
        back_on_branch(&repo, worktree, b);
    }
    remove_stale_index_lock(&repo);
    let mut index = repo.index().ctx("read the index", worktree)?;
    // libgit2 refuses to stage an embedded repository (a directory with its own `.git`,
    // e.g. a clone made by the agent) and would fail the whole checkpoint: skip those,
    // they stay untracked (and are listed by `changes_since`).
    let mut skip_embedded = |path: &Path, _spec: &[u8]| -> i32 {
        let is_dir_entry = path.as_os_str().as_encoded_bytes().ends_with(b"/");
        let full = worktree.join(path);
        let is_dir = fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir());
        i32::from(is_dir_entry || (is_dir && full.join(".git").exists()))
    };
    index.add_all(["*"], IndexAddOption::DEFAULT, Some(&mut skip_embedded)).ctx("stage changes", worktree)?;
    index.update_all(["*"], None).ctx("stage deletions", worktree)?;
    index.write().ctx("write the index", worktree)?;
    let tree_id = index.write_tree().ctx("write a tree from the index (resolve any merge conflict first)", worktree)?;
    let parent = match repo.head() {
        Ok(h) => Some(h.peel_to_commit().ctx("read the HEAD commit", worktree)?),
        Err(e) if is_unborn(&e) => None,
        Err(e) => return Err(e).ctx("read HEAD", worktree),
    };
    let unchanged = match &parent {
        Some(p) => p.tree_id() == tree_id,
        None => index.is_empty(),
    };
    if unchanged {
        // The agent's own commits on a detached HEAD off the branch still need keeping.
        if let Some(b) = branch {
            keep_detached(&repo, worktree, b);
        }
        return Ok(None);
    }
    let tree = repo.find_tree(tree_id).ctx("read the staged tree", worktree)?;
    let sig = signature(&repo).ctx("build the commit signature", worktree)?;
    // A NUL byte cannot be in a commit message (review YU: a section title with one failed
    // its checkpoint, and the section's work went into the next one's).
    let message = message.replace('\0', "");
    let trimmed = message.trim_end();
    let message = if trimmed.trim().is_empty() { "checkpoint\n".to_string() } else { format!("{trimmed}\n") };
    let parents = parent.iter().collect::<Vec<_>>();
    let id = repo.commit(Some("HEAD"), &sig, &sig, &message, &tree, &parents).ctx("commit the checkpoint", worktree)?;
    if let Some(b) = branch {
        keep_detached(&repo, worktree, b);
    }
    Ok(Some(id.to_string()))
}

/// How old a worktree's `index.lock` no process holds open must be to be taken for one left
/// behind: git closes its lock a moment before it renames it into place.
const STALE_INDEX_LOCK: std::time::Duration = std::time::Duration::from_secs(1);

/// Removes the worktree's own `index.lock` (in its private git directory, never the common
/// one) when no process holds it open and it is older than [`STALE_INDEX_LOCK`] (or dated
/// in the future): a killed or careless `git` left it, and every later checkpoint failed on
/// it (review YU: the loop's work never reached its branch). A git command keeps its lock
/// open from the moment it takes it until it writes it (review YV: an age alone took a long
/// `git add`'s lock from under it); when the processes' open files cannot be read, the lock
/// is left.
fn remove_stale_index_lock(repo: &Repository) {
    let lock = repo.path().join("index.lock");
    let Ok(meta) = fs::symlink_metadata(&lock) else { return };
    let old = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_none_or(|age| age >= STALE_INDEX_LOCK);
    if !meta.is_file() || !old || held_open(&lock) {
        return;
    }
    match fs::remove_file(&lock) {
        Ok(()) => tracing::warn!("removed a stale {} (left by a git command that did not finish)", lock.display()),
        Err(e) => tracing::warn!("cannot remove the stale {}: {e}", lock.display()),
    }
}

/// Whether a process holds `path` open (a link in `/proc/<pid>/fd` names it); true when
/// that cannot be told.
fn held_open(path: &Path) -> bool {
    let Ok(path) = path.canonicalize() else { return true };
    let Ok(procs) = fs::read_dir("/proc") else { return true };
    for p in procs.flatten() {
        if !p.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = fs::read_dir(p.path().join("fd")) else { continue };
        if fds.flatten().any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t == path)) {
            return true;
        }
    }
    false
}

/// A detached HEAD left off the loop's branch (behind or beside it, see [`checkpoint_on`])
/// whose commit the branch does not hold is kept by a ref of forge-lsp's own,
/// `refs/forge-kept/<branch>/<short id>`, so the checkpoint (and what the agent committed
/// there) is not lost with the worktree. Not a branch: a name like `<branch>-detached`
/// could be another loop's or the user's branch, and moving it would pull it from under
/// its worktree. One ref per kept commit; an existing one is left as it is.
fn keep_detached(repo: &Repository, worktree: &Path, branch: &str) {
    if !repo.head_detached().unwrap_or(false) {
        return;
    }
    let Some(id) = repo.head().ok().and_then(|h| h.peel_to_commit().ok()).map(|c| c.id()) else { return };
    let tip = repo.find_reference(&format!("refs/heads/{branch}")).ok().and_then(|r| r.peel_to_commit().ok());
    if let Some(tip) = tip.map(|c| c.id()) {
        if tip == id || repo.graph_descendant_of(tip, id).unwrap_or(false) {
            return;
        }
    }
    let name = kept_ref(branch, id);
    if repo.find_reference(&name).is_ok() {
        return;
    }
    match repo.reference(&name, id, false, "forge-lsp: keep a detached checkpoint") {
        Ok(_) => tracing::warn!(
            "the worktree {}'s detached HEAD is not on the loop's branch {branch}; it is kept as {name} (`git log {name}`)",
            worktree.display()
        ),
        Err(e) => tracing::warn!("the worktree {}'s detached HEAD could not be kept as {name}: {e}", worktree.display()),
    }
}

/// The ref that keeps the detached commit `id` of a loop on `branch`.
pub fn kept_ref(branch: &str, id: git2::Oid) -> String {
    format!("refs/forge-kept/{branch}/{}", &id.to_string()[..12])
}

/// Puts the worktree's HEAD back on `refs/heads/<branch>` when that is safe (see
/// [`checkpoint_on`]); logs why not otherwise.
fn back_on_branch(repo: &Repository, worktree: &Path, branch: &str) {
    let want = format!("refs/heads/{branch}");
    let on_it = repo.find_reference("HEAD").ok().and_then(|h| h.symbolic_target().map(|t| t == want)) == Some(true);
    if on_it {
        return;
    }
    let why_not = (|| {
        if repo.state() != git2::RepositoryState::Clean {
            return Some("a rebase, merge or similar is in progress".to_string());
        }
        let Some(tip) = repo.find_reference(&want).ok().and_then(|r| r.peel_to_commit().ok()).map(|c| c.id()) else {
            return Some("the branch is gone".to_string());
        };
        let Some(head) = repo.head().ok().and_then(|h| h.peel_to_commit().ok()).map(|c| c.id()) else {
            return Some("its HEAD names no commit".to_string());
        };
        if head != tip && !repo.graph_descendant_of(head, tip).unwrap_or(false) {
            return Some(
                "its HEAD is not at or ahead of the branch (committing its files there would undo the loop's work)"
                    .into(),
            );
        }
        if let Err(e) = repo.reference(&want, head, true, "forge-lsp: the agent's commits onto the loop's branch") {
            return Some(format!("the branch cannot be moved: {e}"));
        }
        repo.set_head(&want).err().map(|e| format!("HEAD cannot be put back on it: {e}"))
    })();
    match why_not {
        None => tracing::warn!(
            "the worktree {} had left the loop's branch {branch}; HEAD is back on it",
            worktree.display()
        ),
        Some(why) => tracing::warn!(
            "the worktree {} left the loop's branch {branch}, and stays where it is: {why}",
            worktree.display()
        ),
    }
}

/// The latest commit on the worktree's HEAD (first-parent history) whose message starts
/// with "section " followed by a number and ":" (a section checkpoint), searching back no
/// further than `base_commit` (excluded); returns (commit id, first message line); None
/// when there is none (then the audit scope starts at base_commit).
pub fn last_checkpoint(worktree: &Path, base_commit: &str) -> Result<Option<(String, String)>, GitError> {
    let repo = open_worktree(worktree)?;
    let base = resolve_commit(&repo, worktree, base_commit)?;
    let head = match repo.head() {
        Ok(h) => h.peel_to_commit().ctx("read the HEAD commit", worktree)?,
        Err(e) if is_unborn(&e) => return Ok(None),
        Err(e) => return Err(e).ctx("read HEAD", worktree),
    };
    let mut walk = repo.revwalk().ctx("walk the history", worktree)?;
    walk.set_sorting(Sort::TOPOLOGICAL).ctx("walk the history", worktree)?;
    walk.push(head.id()).ctx("walk the history", worktree)?;
    walk.simplify_first_parent().ctx("walk the history", worktree)?;
    walk.hide(base).ctx("walk the history", worktree)?;
    for oid in walk {
        let oid = oid.ctx("walk the history", worktree)?;
        let commit = repo.find_commit(oid).ctx("read a commit", worktree)?;
        let message = String::from_utf8_lossy(commit.message_bytes());
        let first = message.lines().next().unwrap_or("");
        if is_section_message(first) {
            return Ok(Some((oid.to_string(), first.to_string())));
        }
    }
    Ok(None)
}

/// What a loop's worktree holds that its branch does not: every path `git status` shows
/// (modified, staged, deleted, untracked and not ignored; a directory with a repository of
/// its own, which [`checkpoint_on`] never stages, as one untracked entry), sorted. Empty
/// for a worktree that is gone. Removing a worktree is safe only when this is empty:
/// ignored files (build output) go with it, nothing else does.
pub fn left_behind(worktree: &Path) -> Result<Vec<String>, GitError> {
    if fs::symlink_metadata(worktree).is_err() {
        return Ok(vec![]);
    }
    let repo = open_worktree(worktree)?;
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(false).include_ignored(false);
    let statuses = repo.statuses(Some(&mut opts)).ctx("list what is not committed", worktree)?;
    let mut paths: Vec<String> = statuses
        .iter()
        .filter(|s| !s.status().is_empty() && !s.status().contains(git2::Status::IGNORED))
        .map(|s| String::from_utf8_lossy(s.path_bytes()).into_owned())
        .collect();
    // A submodule set up in a linked worktree keeps its git directory in the worktree's
    // own (`.git/worktrees/<name>/modules`), which goes with the worktree: its commits
    // that were never pushed would go too, even when its status is clean (`git worktree
    // remove` refuses such a worktree for that reason).
    let modules = repo.path().join("modules");
    if fs::symlink_metadata(&modules).is_ok() {
        paths.push(format!("the git directories of its submodules ({})", modules.display()));
    }
    // A `.forge/config.toml` the agent wrote (at any depth: a package's too) is excluded as
    // the user's own file, and is never committed: on a merge of the branch it would replace
    // the user's own without a word (review YV). It keeps the worktree, so it is not lost
    // with it (review YW: a package's one was).
    let mut ignored = StatusOptions::new();
    ignored.include_untracked(true).recurse_untracked_dirs(true).include_ignored(true).recurse_ignored_dirs(false);
    let statuses = repo.statuses(Some(&mut ignored)).ctx("list what is ignored", worktree)?;
    for s in statuses.iter().filter(|s| s.status().contains(git2::Status::IGNORED)) {
        let path = String::from_utf8_lossy(s.path_bytes()).into_owned();
        if path == ".forge/config.toml" || path.ends_with("/.forge/config.toml") {
            paths.push(format!("{path} (never committed: it would replace your own on a merge)"));
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// Whether a worktree holds nothing but what its checkout made: no entry in `git status`,
/// ignored files and submodules included; no submodule git directory of its own; no index
/// entry marked skip-worktree or assume-unchanged (their changes hide from `status`); and
/// at most one entry in its HEAD's reflog (a commit on a detached HEAD, then a checkout
/// back, leaves more). Stricter than [`left_behind`]: this decides whether a worktree that
/// nobody asked to remove may go (review YG: the count of changed files ignored submodules
/// and ignored files, and their work went with the worktree).
pub fn untouched_since_checkout(worktree: &Path) -> Result<bool, GitError> {
    let repo = open_worktree(worktree)?;
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(false).include_ignored(true).exclude_submodules(false);
    let statuses = repo.statuses(Some(&mut opts)).ctx("list what is not committed", worktree)?;
    if statuses.iter().any(|s| !s.status().is_empty()) {
        return Ok(false);
    }
    if fs::symlink_metadata(repo.path().join("modules")).is_ok() {
        return Ok(false);
    }
    let index = repo.index().ctx("read the index", worktree)?;
    // VALID (assume-unchanged) in the flags, SKIP_WORKTREE in the extended flags.
    if index.iter().any(|e| e.flags & 0x8000 != 0 || e.flags_extended & 0x4000 != 0) {
        return Ok(false);
    }
    let head_log = repo.reflog("HEAD").ctx("read the reflog of HEAD", worktree)?;
    Ok(head_log.len() <= 1)
}

/// The audit scope since `since`: tracked files changed between `since` and the working
/// tree (committed, staged and unstaged: each as "M path", "A path", "D path",
/// "R old -> new"; a type change is "M"), and untracked files (not ignored).
///
/// Both lists are sorted by path (the new path of a rename), then by entry.
pub fn changes_since(worktree: &Path, since: &str) -> Result<(Vec<String>, Vec<String>), GitError> {
    let repo = open_worktree(worktree)?;
    let commit = resolve_commit(&repo, worktree, since)?;
    let tree = repo.find_commit(commit).and_then(|c| c.tree()).ctx(&format!("read the tree of {since}"), worktree)?;
    let mut opts = DiffOptions::new();
    opts.include_typechange(true).include_untracked(false);
    let mut diff = repo
        .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))
        .ctx(&format!("diff {since} against the working tree"), worktree)?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true))).ctx("detect renames", worktree)?;
    let mut tracked: Vec<(String, String)> = Vec::new();
    for delta in diff.deltas() {
        let old = delta.old_file().path().map(|p| p.to_string_lossy().into_owned());
        let new = delta.new_file().path().map(|p| p.to_string_lossy().into_owned());
        let (key, line) = match delta.status() {
            git2::Delta::Added | git2::Delta::Copied => {
                let p = new.or(old).unwrap_or_default();
                (p.clone(), format!("A {p}"))
            }
            git2::Delta::Deleted => {
                let p = old.or(new).unwrap_or_default();
                (p.clone(), format!("D {p}"))
            }
            git2::Delta::Renamed => {
                let o = old.clone().unwrap_or_default();
                let n = new.or(old).unwrap_or_default();
                (n.clone(), format!("R {o} -> {n}"))
            }
            git2::Delta::Modified | git2::Delta::Typechange | git2::Delta::Conflicted => {
                let p = new.or(old).unwrap_or_default();
                (p.clone(), format!("M {p}"))
            }
            _ => continue,
        };
        tracked.push((key, line));
    }
    tracked.sort();
    tracked.dedup();

    let mut sopts = StatusOptions::new();
    sopts.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false).exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut sopts)).ctx("list untracked files", worktree)?;
    let mut untracked = statuses
        .iter()
        .filter(|s| s.status().contains(git2::Status::WT_NEW))
        .map(|s| String::from_utf8_lossy(s.path_bytes()).into_owned())
        .collect::<Vec<_>>();
    untracked.sort();
    untracked.dedup();
    Ok((tracked.into_iter().map(|(_, l)| l).collect(), untracked))
}

/// What a loop's work changed since commit `since`, committed or not: (files, added lines,
/// deleted lines), as `git add -A; git diff --cached --stat <since>` counts it (untracked
/// files that are not ignored included, renames found, a submodule's changes left out), but
/// that a file over 8 MiB counts as binary (no lines: a stray large file is not read whole).
/// Reads every tracked file whose stat differs from the index: can take seconds in a large
/// worktree, so never on a request's path (the runner counts after each turn).
pub fn files_changed(worktree: &Path, since: &str) -> Result<(usize, usize, usize), GitError> {
    let repo = open_worktree(worktree)?;
    let commit = resolve_commit(&repo, worktree, since)?;
    let tree = repo.find_commit(commit).and_then(|c| c.tree()).ctx(&format!("read the tree of {since}"), worktree)?;
    let mut opts = DiffOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .ignore_submodules(true)
        .max_size(8 << 20);
    let mut diff = repo
        .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))
        .ctx(&format!("diff {since} against the working tree"), worktree)?;
    stat_counts(&mut diff, DiffFindOptions::new().renames(true).for_untracked(true), worktree)
}

/// (files, added lines, deleted lines) of `diff`, renames found first ([`files_changed`],
/// [`files_changed_on_branch`]).
fn stat_counts(
    diff: &mut git2::Diff<'_>,
    find: &mut DiffFindOptions,
    at: &Path,
) -> Result<(usize, usize, usize), GitError> {
    diff.find_similar(Some(find)).ctx("detect renames", at)?;
    let stats = diff.stats().ctx("count changed lines", at)?;
    Ok((stats.files_changed(), stats.insertions(), stats.deletions()))
}

/// [`files_changed`] of a loop whose worktree is gone (a completed loop's, once all its
/// work is on its branch): from commit `since` to the tip of `branch` in the repository at
/// `repo_dir`. Reads no working tree.
pub fn files_changed_on_branch(repo_dir: &Path, since: &str, branch: &str) -> Result<(usize, usize, usize), GitError> {
    let repo = discover(repo_dir)?;
    let from = resolve_commit(&repo, repo_dir, since)?;
    let to = resolve_commit(&repo, repo_dir, &format!("refs/heads/{branch}"))?;
    let tree = |id: Oid, what: &str| {
        repo.find_commit(id).and_then(|c| c.tree()).ctx(&format!("read the tree of {what}"), repo_dir)
    };
    let (a, b) = (tree(from, since)?, tree(to, branch)?);
    let mut opts = DiffOptions::new();
    opts.ignore_submodules(true).max_size(8 << 20);
    let mut diff = repo
        .diff_tree_to_tree(Some(&a), Some(&b), Some(&mut opts))
        .ctx(&format!("diff {since}..{branch}"), repo_dir)?;
    stat_counts(&mut diff, DiffFindOptions::new().renames(true), repo_dir)
}

/// An attempt snapshot: a commit of the worktree's current state (tracked changes and
/// untracked files, as [`checkpoint`] would stage them) whose parent is HEAD, kept alive by
/// the ref `ref_name` (e.g. `refs/forge/<loop>/attempts/section-0-1`, the loop runner's
/// `attempts/<scope>-<n>`). Neither HEAD, the
/// branch nor the on-disk index moves: the staging happens in memory only. Returns the
/// commit id.
pub fn snapshot(worktree: &Path, ref_name: &str, message: &str) -> Result<String, GitError> {
    let repo = open_worktree(worktree)?;
    let mut index = repo.index().ctx("read the index", worktree)?;
    let mut skip_embedded = |path: &Path, _spec: &[u8]| -> i32 {
        let is_dir_entry = path.as_os_str().as_encoded_bytes().ends_with(b"/");
        let full = worktree.join(path);
        let is_dir = fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir());
        i32::from(is_dir_entry || (is_dir && full.join(".git").exists()))
    };
    index.add_all(["*"], IndexAddOption::DEFAULT, Some(&mut skip_embedded)).ctx("stage changes", worktree)?;
    index.update_all(["*"], None).ctx("stage deletions", worktree)?;
    // Not `index.write()`: the worktree's own index file stays as the agent left it.
    let tree_id = index.write_tree().ctx("write a tree of the worktree", worktree)?;
    let parent = head_commit_of(&repo, worktree)?;
    let tree = repo.find_tree(tree_id).ctx("read the snapshot tree", worktree)?;
    let sig = signature(&repo).ctx("build the commit signature", worktree)?;
    let message = format!("{}\n", message.trim_end());
    let id = repo.commit(None, &sig, &sig, &message, &tree, &[&parent]).ctx("commit the snapshot", worktree)?;
    repo.reference(ref_name, id, true, "forge-lsp: attempt snapshot")
        .ctx(&format!("create the ref {ref_name}"), worktree)?;
    Ok(id.to_string())
}

/// `git diff --numstat`-like summary from commit `from` to commit `to`: one line per
/// changed file (`M path +a -d`, `A`, `D`, `R old -> new`; binary files `-` counts),
/// after a first line `N file(s) changed, +A -D`; "no changes" when the trees are equal.
pub fn diff_summary(worktree: &Path, from: &str, to: &str) -> Result<String, GitError> {
    let repo = open_worktree(worktree)?;
    let a = resolve_commit(&repo, worktree, from)?;
    let b = resolve_commit(&repo, worktree, to)?;
    let ta = repo.find_commit(a).and_then(|c| c.tree()).ctx(&format!("read the tree of {from}"), worktree)?;
    let tb = repo.find_commit(b).and_then(|c| c.tree()).ctx(&format!("read the tree of {to}"), worktree)?;
    let mut diff = repo.diff_tree_to_tree(Some(&ta), Some(&tb), None).ctx(&format!("diff {from}..{to}"), worktree)?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true))).ctx("detect renames", worktree)?;
    let mut lines = Vec::new();
    let (mut adds, mut dels) = (0usize, 0usize);
    for i in 0..diff.deltas().len() {
        let Some(delta) = diff.get_delta(i) else { continue };
        let old = delta.old_file().path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let new = delta.new_file().path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let name = match delta.status() {
            git2::Delta::Added | git2::Delta::Copied => format!("A {new}"),
            git2::Delta::Deleted => format!("D {old}"),
            git2::Delta::Renamed => format!("R {old} -> {new}"),
            _ => format!("M {new}"),
        };
        let counts = match git2::Patch::from_diff(&diff, i).ctx("count changed lines", worktree)? {
            Some(patch) if !delta.flags().is_binary() => {
                let (_, a, d) = patch.line_stats().ctx("count changed lines", worktree)?;
                adds += a;
                dels += d;
                format!("+{a} -{d}")
            }
            _ => "binary".to_string(),
        };
        lines.push(format!("{name} {counts}"));
    }
    if lines.is_empty() {
        return Ok("no changes".into());
    }
    let n = lines.len();
    let head = format!("{n} file{} changed, +{adds} -{dels}", if n == 1 { "" } else { "s" });
    Ok(std::iter::once(head).chain(lines).collect::<Vec<_>>().join("\n"))
}

fn refs_under(repo: &Repository, repo_dir: &Path, prefix: &str) -> Result<Vec<String>, GitError> {
    Ok(repo
        .references()
        .ctx("list refs", repo_dir)?
        .filter_map(|r| r.ok().and_then(|r| r.name().map(String::from)))
        .filter(|n| n.starts_with(prefix))
        .collect())
}

/// How many refs exist under `prefix`.
pub fn count_refs(repo_dir: &Path, prefix: &str) -> Result<usize, GitError> {
    let repo = discover(repo_dir)?;
    Ok(refs_under(&repo, repo_dir, prefix)?.len())
}

/// Deletes every ref under `prefix` (e.g. `refs/forge/<loop>/`); missing refs are fine.
pub fn delete_refs(repo_dir: &Path, prefix: &str) -> Result<usize, GitError> {
    let repo = discover(repo_dir)?;
    let names = refs_under(&repo, repo_dir, prefix)?;
    for n in &names {
        if let Ok(mut r) = repo.find_reference(n) {
            r.delete().ctx(&format!("delete the ref {n}"), repo_dir)?;
        }
    }
    Ok(names.len())
}

/// The commit the local branch `branch` points at; `None` when there is no such branch.
pub fn branch_tip(repo_dir: &Path, branch: &str) -> Result<Option<String>, GitError> {
    let repo = discover(repo_dir)?;
    let repo_path = repo_display_path(&repo);
    let tip = match repo.find_branch(branch, BranchType::Local) {
        Ok(b) => Ok(b.get().target().map(|t| t.to_string())),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e).ctx(&format!("look up branch `{branch}`"), &repo_path),
    };
    tip
}

/// The full id of the HEAD commit of the repository containing `repo_dir` (what
/// [`create_worktree`] branches from).
pub fn repo_head(repo_dir: &Path) -> Result<String, GitError> {
    let repo = discover(repo_dir)?;
    let commit = head_commit_of(&repo, &repo_display_path(&repo))?;
    Ok(commit.id().to_string())
}

/// HEAD commit id of a worktree.
pub fn head(worktree: &Path) -> Result<String, GitError> {
    let repo = open_worktree(worktree)?;
    let commit = head_commit_of(&repo, worktree)?;
    Ok(commit.id().to_string())
}

// ----------------------------------------------------------------------------------------
// Helpers.

/// Whether `name` is a valid short branch name, and one git's commands can name: not
/// `HEAD`, nor `@` (which git reads as HEAD everywhere a branch is named: review YU), nor a
/// pseudo-ref's name (`FETCH_HEAD`, `ORIG_HEAD`, `AUTO_MERGE`, `BISECT_EXPECTED_REV`, …:
/// every name of capitals and `_` only, which git finds in its own directory before any
/// branch: reviews YV and YW).
fn valid_branch_name(name: &str) -> bool {
    let pseudo = name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
    !name.is_empty()
        && !name.starts_with('-')
        && name != "@"
        && !pseudo
        && git2::Branch::name_is_valid(name).unwrap_or(false)
}

fn discover(repo_dir: &Path) -> Result<Repository, GitError> {
    Repository::discover(repo_dir).map_err(|source| GitError::Open { path: repo_dir.to_path_buf(), source })
}

/// Opens the worktree at exactly `worktree` (no search upwards, so a deleted worktree
/// inside another repository is never mistaken for that repository), and only as the
/// linked worktree it was made as: what its `.git` names must be a linked worktree's git
/// directory outside the worktree, whose working tree is the worktree itself. A command
/// in the worktree could rewrite that file (the sandbox now binds it read-only) to name
/// another repository, or a repository it made with `core.worktree` set elsewhere, and the
/// server's own checkpoints then committed there on the host: into a repository the user
/// owns, or the files of a folder the sandbox hides into one it can read (found by a
/// review).
fn open_worktree(worktree: &Path) -> Result<Repository, GitError> {
    let repo = Repository::open(worktree).map_err(|source| GitError::Open { path: worktree.to_path_buf(), source })?;
    if repo.is_bare() {
        return Err(GitError::Bare { path: worktree.to_path_buf() });
    }
    let redirected = |why| Err(GitError::Redirected { path: worktree.to_path_buf(), why });
    let canonical = |p: &Path| p.canonicalize().ok();
    let Some(wt) = canonical(worktree) else { return redirected("it cannot be resolved") };
    if !repo.is_worktree() {
        return redirected("its .git names no linked worktree's git directory");
    }
    if repo.workdir().and_then(canonical).as_deref() != Some(wt.as_path()) {
        return redirected("its git directory's working tree is elsewhere");
    }
    if [repo.path(), repo.commondir()].iter().any(|p| canonical(p).is_none_or(|p| p.starts_with(&wt))) {
        return redirected("its git directory is inside the worktree");
    }
    Ok(repo)
}

/// Why `worktree` (which exists) is not a working linked worktree of the repository at
/// `repo_dir`, with what to do; `None` when it is one. The usual cause: the project was
/// moved or copied after the loop started, and the worktree's `.git` file still names the
/// old place (a restart then started agents whose every call was refused: a review).
pub fn worktree_problem(repo_dir: &Path, worktree: &Path) -> Option<String> {
    let repo = discover(repo_dir).ok()?;
    let repo_path = repo_display_path(&repo);
    let named = named_gitdir(worktree);
    let repair = format!(
        "move the project back, or point the worktree's `.git` file ({}/.git) at the project's `.git/worktrees/<name>` folder by hand, then try again",
        worktree.display()
    );
    match open_worktree(worktree) {
        Ok(wt) => {
            let canonical = |p: &Path| p.canonicalize().ok();
            if canonical(wt.commondir()) == canonical(repo.commondir()) {
                None
            } else {
                Some(format!(
                    "its worktree {} belongs to another repository ({}), not to {}; {repair}",
                    worktree.display(),
                    wt.commondir().display(),
                    repo_path.display()
                ))
            }
        }
        Err(e) => Some(match named.filter(|g| !g.exists()) {
            Some(g) => format!(
                "its worktree {} names the git directory {}, which does not exist (the project was moved or copied since the loop started); {repair}",
                worktree.display(),
                g.display()
            ),
            None => format!("its worktree {} cannot be opened as a worktree of {} ({e}); {repair}", worktree.display(), repo_path.display()),
        }),
    }
}

/// The git directory a worktree's `.git` file names (`gitdir: <path>`), if it is such a file.
fn named_gitdir(worktree: &Path) -> Option<PathBuf> {
    let text = fs::read_to_string(worktree.join(".git")).ok()?;
    text.strip_prefix("gitdir:").map(|g| PathBuf::from(g.trim()))
}

/// Makes `worktree` a working linked worktree of the repository at `repo_dir` again when
/// the project was moved after the loop started: its `.git` file names the old git
/// directory, and the moved repository's `worktrees/<id>` names this worktree back. Only
/// then is the file rewritten to the new place (both links checked, as `git worktree
/// repair` does); otherwise the problem is returned ([`worktree_problem`]).
pub fn relink_moved_worktree(repo_dir: &Path, worktree: &Path) -> Result<bool, String> {
    let Some(problem) = worktree_problem(repo_dir, worktree) else { return Ok(false) };
    let repo = discover(repo_dir).map_err(|e| e.to_string())?;
    let dot_git = worktree.join(".git");
    let Some(named) = named_gitdir(worktree).filter(|g| !g.exists()) else { return Err(problem) };
    let (Some(id), Some("worktrees")) =
        (named.file_name(), named.parent().and_then(Path::file_name).and_then(|n| n.to_str()))
    else {
        return Err(problem);
    };
    let admin = repo.commondir().join("worktrees").join(id);
    let back = fs::read_to_string(admin.join("gitdir")).map(|b| PathBuf::from(b.trim())).ok();
    let canonical = |p: &Path| p.canonicalize().ok();
    let back = back.as_deref().and_then(canonical);
    if back.is_none() || back != canonical(&dot_git) {
        return Err(problem);
    }
    let admin = canonical(&admin).unwrap_or(admin);
    // libgit2 writes the repository's git directory into `commondir` as an absolute path:
    // the old place too (or, when a clone took the old place, another repository's).
    // Git's own form is relative: `../..` from `worktrees/<id>`, this repository's by
    // construction.
    let commondir = admin.join("commondir");
    let old_common = fs::read_to_string(&commondir).ok();
    let old_dot_git = fs::read_to_string(&dot_git).ok();
    let ours = canonical(repo.commondir());
    if old_common.as_deref().is_some_and(|c| canonical(&admin.join(c.trim())) != ours) {
        fs::write(&commondir, "../..\n").map_err(|e| format!("cannot rewrite {}: {e}", commondir.display()))?;
    }
    let relinked = fs::write(&dot_git, format!("gitdir: {}\n", admin.display()))
        .map_err(|e| format!("cannot rewrite {}: {e}", dot_git.display()))
        .and_then(|()| match worktree_problem(repo_dir, worktree) {
            None => Ok(true),
            Some(still) => Err(still),
        });
    if relinked.is_err() {
        // Not half relinked: both files as they were (a review).
        if let Some(c) = &old_common {
            let _ = fs::write(&commondir, c);
        }
        if let Some(g) = &old_dot_git {
            let _ = fs::write(&dot_git, g);
        }
    }
    relinked
}

/// The path to name in messages: the working directory, else the git directory.
fn repo_display_path(repo: &Repository) -> PathBuf {
    repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf()
}

fn is_unborn(e: &git2::Error) -> bool {
    matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound)
}

fn head_commit_of<'r>(repo: &'r Repository, path: &Path) -> Result<git2::Commit<'r>, GitError> {
    match repo.head() {
        Ok(h) => h.peel_to_commit().ctx("read the HEAD commit", path),
        Err(e) if is_unborn(&e) => Err(GitError::NoCommit { repo: path.to_path_buf() }),
        Err(e) => Err(e).ctx("read HEAD", path),
    }
}

fn resolve_commit(repo: &Repository, path: &Path, rev: &str) -> Result<Oid, GitError> {
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .map(|c| c.id())
        .map_err(|source| GitError::UnknownCommit { rev: rev.to_string(), path: path.to_path_buf(), source })
}

fn absolute(p: &Path) -> Result<PathBuf, GitError> {
    std::path::absolute(p).ctx("resolve the path", p)
}

/// The canonical form of `p`; for a missing path, its canonical parent joined with its
/// name; else `p` made absolute.
fn normalize(p: &Path) -> PathBuf {
    if let Ok(c) = fs::canonicalize(p) {
        return c;
    }
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) {
        if let Ok(c) = fs::canonicalize(parent) {
            return c.join(name);
        }
    }
    abs
}

fn same_path(a: &Path, b: &Path) -> bool {
    normalize(a) == normalize(b)
}

/// Checks that `dir` can become a worktree: it must not exist or be an empty directory
/// (which is removed, because libgit2 creates the directory itself). Creates its parent.
/// Returns whether an empty directory was removed.
fn prepare_target_dir(dir: &Path) -> Result<bool, GitError> {
    let removed = match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e).ctx("inspect the worktree directory", dir),
        Ok(m) if !m.is_dir() => return Err(GitError::NotADirectory { path: dir.to_path_buf() }),
        Ok(_) => {
            let mut entries = fs::read_dir(dir).ctx("read the worktree directory", dir)?;
            if entries.next().is_some() {
                return Err(GitError::DirNotEmpty { dir: dir.to_path_buf() });
            }
            fs::remove_dir(dir).ctx("replace the empty worktree directory", dir)?;
            true
        }
    };
    if let Some(parent) = dir.parent() {
        forge_core::paths::create_private_dirs(parent).ctx("create the worktree's parent directory", parent)?;
    }
    Ok(removed)
}

fn restore_empty_dir(dir: &Path, removed: bool) {
    if removed && fs::symlink_metadata(dir).is_err() {
        let _ = fs::create_dir(dir);
    }
}

/// `<commondir>/worktrees/<name>`.
fn worktree_gitdir(repo: &Repository, name: &str) -> PathBuf {
    repo.commondir().join("worktrees").join(name)
}

/// The lock reason of a registered worktree, if it is locked. Read from the `locked`
/// file directly: `git2::Worktree::is_locked` panics on a non-UTF-8 reason.
fn lock_reason(repo: &Repository, name: &str) -> Option<String> {
    let file = worktree_gitdir(repo, name).join("locked");
    let bytes = fs::read(&file).ok()?;
    let reason = String::from_utf8_lossy(&bytes).trim().to_string();
    Some(if reason.is_empty() { "no reason given".to_string() } else { reason })
}

/// Prunes registrations whose worktree directory is gone (not locked ones). Best effort.
fn prune_stale_worktrees(repo: &Repository) {
    let Ok(names) = repo.worktrees() else {
        return;
    };
    for name in names.iter().flatten() {
        let Ok(wt) = repo.find_worktree(name) else {
            continue;
        };
        if wt.validate().is_ok() {
            continue;
        }
        if wt.is_prunable(None).unwrap_or(false) {
            let _ = wt.prune(None);
        }
    }
}

/// A worktree name (the name of `<commondir>/worktrees/<name>`) derived from the last
/// component of `dir`: characters outside `[A-Za-z0-9_-]` become `-`, edge dashes are
/// trimmed, at most 64 characters, "worktree" when nothing is left.
fn sanitize_worktree_name(dir: &Path) -> String {
    let raw = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mapped: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '-' }).collect();
    let trimmed: String = mapped.trim_matches('-').chars().take(64).collect();
    let trimmed = trimmed.trim_end_matches('-');
    if trimmed.is_empty() {
        "worktree".to_string()
    } else {
        trimmed.to_string()
    }
}

/// A worktree name for `dir` unused by the repository's worktrees (registered or not).
fn unique_worktree_name(repo: &Repository, dir: &Path) -> Result<String, GitError> {
    let base = sanitize_worktree_name(dir);
    let taken = repo
        .worktrees()
        .ctx("list worktrees", &repo_display_path(repo))?
        .iter()
        .flatten()
        .map(str::to_string)
        .collect::<Vec<_>>();
    let free = |n: &str| !taken.iter().any(|t| t == n) && !worktree_gitdir(repo, n).exists();
    if free(&base) {
        return Ok(base);
    }
    for i in 2..10_000u32 {
        let candidate = format!("{base}-{i}");
        if free(&candidate) {
            return Ok(candidate);
        }
    }
    Err(GitError::Io {
        action: "find a free worktree name".to_string(),
        path: repo.commondir().join("worktrees"),
        source: io::Error::other("too many worktrees with the same name"),
    })
}

/// `git worktree add <dir> <branch>` through libgit2, cleaning up on failure.
fn add_worktree(
    repo: &Repository,
    repo_path: &Path,
    dir: &Path,
    reference: &git2::Reference<'_>,
    branch: &str,
) -> Result<(), GitError> {
    // libgit2 may say a branch nobody has checked out "is already checked out" while other
    // worktrees of the repository are being removed (loops of other servers ending): when
    // no worktree has it, the add is tried again a few times before that is reported.
    let mut tries = 0;
    loop {
        match add_worktree_once(repo, repo_path, dir, reference, branch) {
            Err(GitError::BranchCheckedOut { at, .. }) if at.as_os_str().is_empty() && tries < 4 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(25 << tries));
            }
            Err(GitError::BranchCheckedOut { branch, at }) if at.as_os_str().is_empty() => {
                return Err(GitError::Git {
                    action: format!(
                        "add a worktree at {} for branch `{branch}` (git said it is checked out elsewhere, but no worktree has it; retry)",
                        dir.display()
                    ),
                    path: repo_path.to_path_buf(),
                    source: git2::Error::from_str("reference is already checked out"),
                })
            }
            r => return r,
        }
    }
}

/// One try of [`add_worktree`]. A `BranchCheckedOut` whose `at` is empty: git said so, but
/// no worktree has the branch.
fn add_worktree_once(
    repo: &Repository,
    repo_path: &Path,
    dir: &Path,
    reference: &git2::Reference<'_>,
    branch: &str,
) -> Result<(), GitError> {
    let name = unique_worktree_name(repo, dir)?;
    let gitdir = worktree_gitdir(repo, &name);
    let mut opts = WorktreeAddOptions::new();
    opts.reference(Some(reference));
    match repo.worktree(&name, dir, Some(&opts)) {
        Ok(_) => Ok(()),
        Err(e) => {
            // libgit2 leaves a partial registration and directory behind on failure. But a
            // directory or registration that already existed (`Exists`: another process
            // made it since the checks, a loop start racing this one) is that process's,
            // and is left alone; the caller may choose another name.
            let taken = e.code() == ErrorCode::Exists;
            if !taken && fs::symlink_metadata(dir).is_ok() {
                let _ = remove_dir_forcefully(dir);
            }
            // After `Exists`, a registration not written yet may be the other process's,
            // half made: only one that names this directory is removed.
            if gitdir.exists() && registration_is_ours(&gitdir, dir, !taken) {
                let _ = fs::remove_dir_all(&gitdir);
            }
            if taken {
                return Err(GitError::DirNotEmpty { dir: dir.to_path_buf() });
            }
            if e.message().contains("already checked out") {
                let at = checked_out_at(repo, &format!("refs/heads/{branch}")).unwrap_or_default();
                return Err(GitError::BranchCheckedOut { branch: branch.to_string(), at });
            }
            Err(e).ctx(&format!("add a worktree at {} for branch `{branch}`", dir.display()), repo_path)
        }
    }
}

/// Whether the worktree registration `gitdir` (`.git/worktrees/<name>`) is the one a failed
/// add for `dir` made: its `gitdir` file names `<dir>/.git` (compared resolved: libgit2
/// writes the real path), or, when `unwritten_is_ours`, it has no such file yet (libgit2
/// makes the directory first and writes the file last).
fn registration_is_ours(gitdir: &Path, dir: &Path, unwritten_is_ours: bool) -> bool {
    match fs::read_to_string(gitdir.join("gitdir")) {
        Ok(t) => {
            let named = Path::new(t.trim());
            let ours = dir.join(".git");
            let resolved = |p: &Path| {
                p.parent()
                    .and_then(|d| d.canonicalize().ok())
                    .map(|d| d.join(".git"))
                    .unwrap_or_else(|| p.to_path_buf())
            };
            named == ours || resolved(named) == resolved(&ours)
        }
        Err(e) => unwritten_is_ours && e.kind() == io::ErrorKind::NotFound,
    }
}

/// Where `refname` is checked out: the main working tree or a linked worktree whose
/// directory exists.
fn checked_out_at(repo: &Repository, refname: &str) -> Option<PathBuf> {
    let on = |r: &Repository| -> bool {
        r.find_reference("HEAD").ok().and_then(|h| h.symbolic_target().map(|t| t == refname)).unwrap_or(false)
    };
    if let Ok(main) = Repository::open(repo.commondir()) {
        if on(&main) {
            return Some(repo_display_path(&main));
        }
    }
    let names = repo.worktrees().ok()?;
    for name in names.iter().flatten() {
        let Ok(wt) = repo.find_worktree(name) else {
            continue;
        };
        if wt.validate().is_err() {
            continue;
        }
        if let Ok(r) = Repository::open_from_worktree(&wt) {
            if on(&r) {
                return Some(wt.path().to_path_buf());
            }
        }
    }
    None
}

/// Puts the [`FORGE_OWN`] lines into `<commondir>/info/exclude` (appended once, after
/// their mark), and takes out the line `.forge/` earlier versions appended (a user who wrote
/// that line loses it: it cannot be told from ours). The file is read and written as bytes
/// (a line that is not UTF-8 stays as it is), its mode kept; one that is a symbolic link is
/// rewritten where it leads.
fn ensure_forge_excluded(repo: &Repository) -> Result<(), GitError> {
    let info = repo.commondir().join("info");
    let file = info.join("exclude");
    let existing = match fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).ctx("read info/exclude", &file),
    };
    let trimmed = |l: &[u8]| -> Vec<u8> { l.trim_ascii().to_vec() };
    let marked = existing.split(|&b| b == b'\n').any(|l| trimmed(l) == FORGE_EXCLUDE_MARK.as_bytes());
    let old = existing.split(|&b| b == b'\n').any(|l| trimmed(l) == OLD_FORGE_EXCLUDE.as_bytes());
    if marked && !old {
        return Ok(());
    }
    fs::create_dir_all(&info).ctx("create the info directory", &info)?;
    // A linked file is rewritten where it leads (review YW: its old line stayed).
    let file = if fs::symlink_metadata(&file).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::canonicalize(&file).ctx("resolve info/exclude", &file)?
    } else {
        file
    };
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_else(|| info.clone());
    if old {
        // Rewritten whole (a temporary file renamed over it, with its mode): the old line
        // goes, the block comes in its place when it is not there yet.
        let mut out = Vec::with_capacity(existing.len() + 256);
        let body = existing.strip_suffix(b"\n").unwrap_or(&existing);
        for line in body.split(|&b| b == b'\n') {
            if trimmed(line) == OLD_FORGE_EXCLUDE.as_bytes() {
                if !marked {
                    out.extend_from_slice(forge_exclude_block().as_bytes());
                }
                continue;
            }
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        let tmp = dir.join(format!(".exclude.forge-lsp.{}", std::process::id()));
        fs::write(&tmp, &out).ctx("write info/exclude", &tmp)?;
        if let Ok(m) = fs::metadata(&file) {
            let _ = fs::set_permissions(&tmp, m.permissions());
        }
        return fs::rename(&tmp, &file)
            .inspect_err(|_| {
                let _ = fs::remove_file(&tmp);
            })
            .ctx("replace info/exclude", &file);
    }
    let mut out = fs::OpenOptions::new().create(true).append(true).open(&file).ctx("open info/exclude", &file)?;
    let mut block = String::new();
    if !existing.is_empty() && !existing.ends_with(b"\n") {
        block.push('\n');
    }
    block.push_str(&forge_exclude_block());
    out.write_all(block.as_bytes()).ctx("append to info/exclude", &file)
}

/// The mark and the [`FORGE_OWN`] lines (`**/.forge/<entry>`), a line each.
fn forge_exclude_block() -> String {
    std::iter::once(FORGE_EXCLUDE_MARK.to_string())
        .chain(FORGE_OWN.iter().map(|e| format!("**/.forge/{e}")))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Removes a directory tree; when that fails (e.g. read-only directories such as a Go
/// module cache), makes the directories writable and retries.
fn remove_dir_forcefully(dir: &Path) -> Result<(), GitError> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).ctx("inspect the worktree directory", dir),
    };
    if !meta.is_dir() {
        return fs::remove_file(dir).ctx("remove the worktree path", dir);
    }
    if fs::remove_dir_all(dir).is_ok() {
        return Ok(());
    }
    make_dirs_writable(dir);
    fs::remove_dir_all(dir).ctx("remove the worktree directory", dir)
}

fn make_dirs_writable(dir: &Path) {
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mut perms = meta.permissions();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        perms.set_mode(perms.mode() | 0o700);
    }
    #[cfg(not(unix))]
    {
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
    }
    let _ = fs::set_permissions(dir, perms);
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_dirs_writable(&entry.path());
        }
    }
}

/// The repository's configured identity, else forge-lsp's.
fn signature(repo: &Repository) -> Result<Signature<'static>, git2::Error> {
    let config = repo.config().ok();
    let get = |key: &str| config.as_ref().and_then(|c| c.get_string(key).ok()).filter(|v| !v.trim().is_empty());
    let (name, email) = identity(get("user.name"), get("user.email"));
    Signature::now(&name, &email).or_else(|_| Signature::now(FALLBACK_NAME, FALLBACK_EMAIL))
}

/// The configured identity when both parts are set, else the fallback.
fn identity(name: Option<String>, email: Option<String>) -> (String, String) {
    match (name, email) {
        (Some(n), Some(e)) => (n, e),
        _ => (FALLBACK_NAME.to_string(), FALLBACK_EMAIL.to_string()),
    }
}

/// "section <digits>:" at the start of a message line.
fn is_section_message(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("section ") else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && rest.as_bytes().get(digits) == Some(&b':')
}

/// Keeps `root/.forge/` out of git. A project that is a repository's top level: `.forge/`
/// in the repository's `info/exclude` (once, appended). A project that is a folder inside
/// a repository (a monorepo's package, a home directory kept in git): the repository's own
/// files are not the project's to change, so `.forge/` gets a `.gitignore` of its own
/// (`*`, written inside the project, never through a link).
pub fn exclude_forge_dir(root: &Path) {
    let flags = git2::RepositoryOpenFlags::NO_SEARCH;
    if let Ok(repo) = git2::Repository::open_ext(root, flags, std::iter::empty::<&str>()) {
        if let Err(e) = ensure_forge_excluded(&repo) {
            tracing::debug!("could not add .forge/ to the repository's info/exclude: {e}");
        }
        return;
    }
    let ignore = Path::new(".forge/.gitignore");
    if git2::Repository::discover(root).is_err() {
        return;
    }
    // Written once; one earlier versions wrote (`*`: all of `.forge/`) is replaced.
    match fs::read(root.join(ignore)) {
        Ok(b) if b != b"*\n" => return,
        Err(e) if e.kind() != io::ErrorKind::NotFound => return,
        _ if fs::symlink_metadata(root.join(ignore)).is_ok_and(|m| !m.is_file()) => return,
        _ => {}
    }
    if let Err(e) = forge_core::beneath::write_file(root, ignore, forge_gitignore().as_bytes(), 0o644) {
        tracing::debug!("could not write {}: {e}", root.join(ignore).display());
    }
}

/// `.forge/.gitignore` of a project inside another repository: the [`FORGE_OWN`] entries
/// relative to `.forge/`, and the file itself.
fn forge_gitignore() -> String {
    let mut out = format!("{FORGE_EXCLUDE_MARK}\n");
    for e in FORGE_OWN {
        out.push_str(&format!("/{e}\n"));
    }
    out.push_str("/.gitignore\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "Test Author")
            .env("GIT_AUTHOR_EMAIL", "author@example.com")
            .env("GIT_COMMITTER_NAME", "Test Committer")
            .env("GIT_COMMITTER_EMAIL", "committer@example.com")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("run git");
        assert!(out.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn write(path: &Path, text: &str) {
        if let Some(p) = path.parent() {
            fs::create_dir_all(p).unwrap();
        }
        fs::write(path, text).unwrap();
    }

    /// A repository with one commit: a.txt, c.txt, dir/b.txt, r.txt, .gitignore (*.log).
    fn repo_with_commit(root: &Path) -> PathBuf {
        let repo = root.join("repo");
        fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        write(&repo.join("a.txt"), "a\n");
        write(&repo.join("c.txt"), "c\n");
        write(&repo.join("dir/b.txt"), "b\n");
        write(&repo.join("r.txt"), "a file that will be renamed\nwith several lines\nof content\n");
        write(&repo.join(".gitignore"), "*.log\n");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "initial"]);
        repo
    }

    #[test]
    fn forge_is_excluded_only_in_the_projects_own_repository_and_by_appending() {
        let d = tempfile::tempdir().unwrap();
        // A home directory kept in git, with a project inside it that is not a repository.
        let home = repo_with_commit(&d.path().join("home"));
        let exclude = home.join(".git/info/exclude");
        fs::write(&exclude, "# mine\n*.log").unwrap();
        let project = home.join("notes");
        fs::create_dir_all(&project).unwrap();
        exclude_forge_dir(&project);
        assert_eq!(fs::read_to_string(&exclude).unwrap(), "# mine\n*.log", "the enclosing repository is untouched");
        // The project's own `.forge/` keeps itself out of the enclosing repository.
        assert_eq!(fs::read_to_string(project.join(".forge/.gitignore")).unwrap(), forge_gitignore());
        for own in ["view/plan.md", "rejected/x.md", "usage/u.json", "config.toml"] {
            write(&project.join(".forge").join(own), "forge-lsp's");
        }
        assert_eq!(git(&home, &["status", "--porcelain", "--untracked-files=all"]), "");
        // The rest of `.forge/` is the project's (review YU: a loop's new files there were lost).
        write(&project.join(".forge/tools/t.sh"), "#!/bin/sh\n");
        assert_eq!(git(&home, &["status", "--porcelain", "--untracked-files=all"]), "?? notes/.forge/tools/t.sh");
        // An earlier version's `*` is replaced; a file of the user's is left.
        fs::write(project.join(".forge/.gitignore"), "*\n").unwrap();
        exclude_forge_dir(&project);
        assert_eq!(fs::read_to_string(project.join(".forge/.gitignore")).unwrap(), forge_gitignore());
        fs::write(project.join(".forge/.gitignore"), "mine\n").unwrap();
        exclude_forge_dir(&project);
        assert_eq!(fs::read_to_string(project.join(".forge/.gitignore")).unwrap(), "mine\n");
        // The repository's own top level: appended once, the user's lines kept.
        exclude_forge_dir(&home);
        exclude_forge_dir(&home);
        assert_eq!(fs::read_to_string(&exclude).unwrap(), format!("# mine\n*.log\n{}", forge_exclude_block()));
        // An earlier version's `.forge/` line is replaced by the block, in its place.
        fs::write(&exclude, "# mine\n.forge/\n*.log\n").unwrap();
        exclude_forge_dir(&home);
        assert_eq!(fs::read_to_string(&exclude).unwrap(), format!("# mine\n{}*.log\n", forge_exclude_block()));
        exclude_forge_dir(&home);
        assert_eq!(fs::read_to_string(&exclude).unwrap(), format!("# mine\n{}*.log\n", forge_exclude_block()));
        // At any depth (review YV: the old line covered a package's `.forge/` too).
        write(&home.join("pkg/.forge/config.toml"), "[loop]\n");
        write(&home.join("pkg/.forge/view/x.md"), "copy");
        let status = git(&home, &["status", "--porcelain", "--untracked-files=all"]);
        assert!(!status.contains("pkg/.forge"), "{status}");
        // A line that is not UTF-8 stays as it is, and so does the file's mode.
        use std::os::unix::fs::PermissionsExt;
        fs::write(&exclude, b"caf\xe9\n.forge/\n").unwrap();
        fs::set_permissions(&exclude, fs::Permissions::from_mode(0o600)).unwrap();
        exclude_forge_dir(&home);
        let mut want = b"caf\xe9\n".to_vec();
        want.extend(forge_exclude_block().as_bytes());
        assert_eq!(fs::read(&exclude).unwrap(), want);
        assert_eq!(fs::metadata(&exclude).unwrap().permissions().mode() & 0o777, 0o600);
        // A linked file is rewritten where it leads (review YW), the link kept.
        let target = d.path().join("shared-exclude");
        fs::write(&target, "mine\n.forge/\n").unwrap();
        fs::remove_file(&exclude).unwrap();
        std::os::unix::fs::symlink(&target, &exclude).unwrap();
        exclude_forge_dir(&home);
        assert!(fs::symlink_metadata(&exclude).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&target).unwrap(), format!("mine\n{}", forge_exclude_block()));
    }

    fn setup() -> (tempfile::TempDir, PathBuf, Worktree) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = repo_with_commit(tmp.path());
        let wt = create_worktree(&repo, &tmp.path().join("wts/x"), "forge/x").unwrap();
        (tmp, repo, wt)
    }

    /// The count of a loop's changes in its worktree (committed, staged, untracked, a
    /// rename) and, once all is committed, on its branch: the same as git's.
    #[test]
    fn files_changed_counts_the_work_as_git_does() {
        let (_tmp, repo, wt) = setup();
        let base = git(&wt.dir, &["rev-parse", "HEAD"]);
        write(&wt.dir.join("a.txt"), "a\nmore\n");
        write(&wt.dir.join("new.txt"), "one\ntwo\n");
        git(&wt.dir, &["mv", "r.txt", "moved.txt"]);
        fs::remove_file(wt.dir.join("c.txt")).unwrap();
        write(&wt.dir.join("x.log"), "ignored\n");
        let counted = files_changed(&wt.dir, &base).unwrap();
        git(&wt.dir, &["add", "-A"]);
        let stat = git(&wt.dir, &["diff", "--cached", "--shortstat", &base]);
        assert_eq!(stat, "4 files changed, 3 insertions(+), 1 deletion(-)");
        assert_eq!(counted, (4, 3, 1));
        git(&wt.dir, &["-c", "user.email=t@e", "-c", "user.name=t", "commit", "-q", "-m", "work"]);
        assert_eq!(files_changed_on_branch(&repo, &base, "forge/x").unwrap(), (4, 3, 1));
        assert!(files_changed_on_branch(&repo, &base, "forge/none").is_err());
    }

    fn tree_files(dir: &Path, rev: &str) -> Vec<String> {
        let out = git(dir, &["ls-tree", "-r", "--name-only", rev]);
        out.lines().map(str::to_string).collect()
    }

    #[test]
    fn create_worktree_from_head() {
        let (tmp, repo, wt) = setup();
        assert_eq!(wt.branch, "forge/x");
        assert_eq!(wt.dir, tmp.path().join("wts/x"));
        assert!(branch_exists(&repo, "forge/x").unwrap());
        assert!(!branch_exists(&repo, "forge/y").unwrap());
        assert!(!branch_exists(&repo, "not a..valid name").unwrap());
        let repo_head = git(&repo, &["rev-parse", "HEAD"]);
        assert_eq!(wt.base_commit, repo_head);
        assert_eq!(head(&wt.dir).unwrap(), repo_head);
        assert_eq!(git(&repo, &["rev-parse", "forge/x"]), repo_head);
        assert_eq!(fs::read_to_string(wt.dir.join("a.txt")).unwrap(), "a\n");
        assert_eq!(fs::read_to_string(wt.dir.join("dir/b.txt")).unwrap(), "b\n");
        // The git CLI agrees: clean status, on the branch, listed as a worktree.
        assert_eq!(git(&wt.dir, &["status", "--porcelain"]), "");
        assert_eq!(git(&wt.dir, &["branch", "--show-current"]), "forge/x");
        let list = git(&repo, &["worktree", "list", "--porcelain"]);
        assert!(list.contains("branch refs/heads/forge/x"), "{list}");
        // The main checkout is untouched.
        assert_eq!(git(&repo, &["branch", "--show-current"]), "main");
        // forge-lsp's files excluded once, even after a second worktree.
        create_worktree(&repo, &tmp.path().join("wts/y"), "forge/y").unwrap();
        let exclude = fs::read_to_string(repo.join(".git/info/exclude")).unwrap();
        assert_eq!(exclude.lines().filter(|l| l.trim() == "**/.forge/view/").count(), 1, "{exclude}");
        // Owned by the current user and writable.
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let probe = tmp.path().join("probe");
            fs::write(&probe, "").unwrap();
            let me = fs::metadata(&probe).unwrap().uid();
            assert_eq!(fs::metadata(&wt.dir).unwrap().uid(), me);
            assert_eq!(fs::metadata(wt.dir.join("a.txt")).unwrap().uid(), me);
        }
        assert!(!fs::metadata(&wt.dir).unwrap().permissions().readonly());
        fs::write(wt.dir.join("new.txt"), "x").unwrap();
        fs::write(wt.dir.join("a.txt"), "changed").unwrap();
    }

    /// A failed worktree add removes a registration only when it is its own: one whose
    /// `gitdir` file names its directory, or one not written yet; another process's stays.
    #[test]
    fn only_a_failed_adds_own_registration_is_removed() {
        let d = tempfile::tempdir().unwrap();
        let (reg, dir) = (d.path().join("reg"), d.path().join("wt"));
        fs::create_dir(&reg).unwrap();
        assert!(registration_is_ours(&reg, &dir, true), "not written yet, after a failure of ours");
        assert!(!registration_is_ours(&reg, &dir, false), "not written yet, after `Exists`: maybe another's");
        fs::write(reg.join("gitdir"), format!("{}\n", dir.join(".git").display())).unwrap();
        assert!(registration_is_ours(&reg, &dir, false));
        fs::write(reg.join("gitdir"), format!("{}\n", d.path().join("other/.git").display())).unwrap();
        assert!(!registration_is_ours(&reg, &dir, true), "another process's");
        // Named through a link to the same directory.
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&dir, d.path().join("alias")).unwrap();
        fs::write(reg.join("gitdir"), format!("{}\n", dir.canonicalize().unwrap().join(".git").display())).unwrap();
        assert!(registration_is_ours(&reg, &d.path().join("alias"), false));
    }

    #[test]
    fn branch_clash_finds_the_same_name_and_path_prefixes_only() {
        let existing: Vec<String> =
            ["main", "feature/a", "forge/x", "mainline"].iter().map(|s| s.to_string()).collect();
        let table: &[(&str, Option<&str>)] = &[
            ("main", Some("main")),
            ("main/x", Some("main")),
            ("feature", Some("feature/a")),
            ("feature/a", Some("feature/a")),
            ("feature/a/b", Some("feature/a")),
            ("feature/b", None),
            ("forge/x-1", None),
            ("forge", Some("forge/x")),
            ("mai", None),
            ("mainline/2", Some("mainline")),
            ("other", None),
        ];
        for (new, clash) in table {
            assert_eq!(branch_clash(&existing, new), *clash, "{new}");
        }
    }

    #[test]
    fn create_worktree_refusals() {
        let (tmp, repo, _wt) = setup();
        let err = create_worktree(&repo, &tmp.path().join("wts/other"), "forge/x").unwrap_err();
        assert!(matches!(err, GitError::BranchExists { .. }), "{err}");
        assert!(err.to_string().contains("forge/x"), "{err}");
        assert!(!tmp.path().join("wts/other").exists());

        let full = tmp.path().join("full");
        write(&full.join("f"), "x");
        let err = create_worktree(&repo, &full, "forge/full").unwrap_err();
        assert!(matches!(err, GitError::DirNotEmpty { .. }), "{err}");
        assert!(err.to_string().contains("full"), "{err}");
        assert!(!branch_exists(&repo, "forge/full").unwrap());

        let err = create_worktree(&repo, &tmp.path().join("bad"), "forge/a..b").unwrap_err();
        assert!(matches!(err, GitError::InvalidBranchName { .. }), "{err}");

        // An existing empty directory is fine.
        let empty = tmp.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let wt = create_worktree(&repo, &empty, "forge/empty").unwrap();
        assert!(wt.dir.join("a.txt").exists());

        // Same last component in another parent: a distinct worktree name.
        let wt2 = create_worktree(&repo, &tmp.path().join("elsewhere/x"), "forge/x2").unwrap();
        assert!(wt2.dir.join("a.txt").exists());
        let list = git(&repo, &["worktree", "list"]);
        assert_eq!(list.lines().count(), 4, "{list}");
        let mut names = fs::read_dir(repo.join(".git/worktrees"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>();
        names.sort();
        assert_eq!(names, vec!["empty", "x", "x-2"]);
    }

    #[test]
    fn create_worktree_needs_a_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let dir = tmp.path().join("wt");
        let err = create_worktree(&repo, &dir, "forge/x").unwrap_err();
        assert!(matches!(err, GitError::NoCommit { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("commit first"), "{msg}");
        assert!(msg.contains(&repo.display().to_string()), "{msg}");
        assert!(!dir.exists());
        assert!(!branch_exists(&repo, "forge/x").unwrap());

        let not_repo = tmp.path().join("plain");
        fs::create_dir_all(&not_repo).unwrap();
        assert!(head(&not_repo).is_err());
    }

    /// A worktree whose `.git` was pointed elsewhere is not committed through: not into
    /// another repository, not into one made inside it with its working tree elsewhere
    /// (that committed the files of the folder it named, hidden from the sandbox).
    #[test]
    fn a_worktree_whose_git_file_names_another_repository_is_refused() {
        let (tmp, _repo, wt) = setup();
        let victim = repo_with_commit(&tmp.path().join("victim"));
        let before = git(&victim, &["rev-parse", "HEAD"]);
        let own = fs::read_to_string(wt.dir.join(".git")).unwrap();
        write(&wt.dir.join("pwned.txt"), "x\n");
        fs::write(wt.dir.join(".git"), format!("gitdir: {}\n", victim.join(".git").display())).unwrap();
        let e = checkpoint(&wt.dir, "loop: x").unwrap_err();
        assert!(matches!(e, GitError::Redirected { .. }), "{e}");
        assert_eq!(git(&victim, &["rev-parse", "HEAD"]), before);
        assert!(head(&wt.dir).is_err());
        // A repository made inside the worktree, its working tree elsewhere.
        let elsewhere = tmp.path().join("secrets");
        write(&elsewhere.join("key"), "SECRET\n");
        let evil = wt.dir.join("evil");
        fs::create_dir_all(&evil).unwrap();
        git(&evil, &["init", "-q"]);
        git(&evil, &["config", "core.worktree", elsewhere.to_str().unwrap()]);
        fs::write(wt.dir.join(".git"), format!("gitdir: {}\n", evil.join(".git").display())).unwrap();
        let e = checkpoint(&wt.dir, "loop: x").unwrap_err();
        assert!(e.to_string().contains("is not the git worktree it was made as"), "{e}");
        assert!(git(&evil, &["rev-list", "--all"]).trim().is_empty(), "nothing committed in the planted repository");
        // Its own `.git` back: committed as before.
        fs::remove_dir_all(&evil).unwrap();
        fs::write(wt.dir.join(".git"), own).unwrap();
        assert!(checkpoint(&wt.dir, "loop: x").unwrap().is_some());
    }

    #[test]
    fn checkpoint_commits_everything_not_ignored() {
        let (_tmp, _repo, wt) = setup();
        assert_eq!(checkpoint(&wt.dir, "section 1: nothing").unwrap(), None);

        write(&wt.dir.join("new/n.txt"), "n\n");
        write(&wt.dir.join("a.txt"), "a2\n");
        fs::remove_file(wt.dir.join("c.txt")).unwrap();
        write(&wt.dir.join("debug.log"), "ignored\n");
        // forge-lsp's own files are not committed; what the agent made under `.forge/` is
        // (review YU: lost when the loop completed), but not a `.forge/config.toml`, which a
        // merge would put over the user's own (review YV): that one keeps the worktree.
        write(&wt.dir.join(".forge/bin/sh"), "shim\n");
        write(&wt.dir.join(".forge/tmp/t"), "tmp\n");
        write(&wt.dir.join(".forge/usage/u.json"), "{}\n");
        write(&wt.dir.join(".forge/tools/new.sh"), "#!/bin/sh\n");
        write(&wt.dir.join(".forge/config.toml"), "[loop]\n");
        let id = checkpoint(&wt.dir, "section 1: first  \n\n").unwrap().expect("a commit");
        assert_eq!(head(&wt.dir).unwrap(), id);
        assert_eq!(
            tree_files(&wt.dir, "HEAD"),
            vec![".forge/tools/new.sh", ".gitignore", "a.txt", "dir/b.txt", "new/n.txt", "r.txt"]
        );
        let left = left_behind(&wt.dir).unwrap();
        assert!(left.len() == 1 && left[0].starts_with(".forge/config.toml"), "{left:?}");
        fs::remove_file(wt.dir.join(".forge/config.toml")).unwrap();
        // A package's one too (review YW: it was excluded, and went with the worktree).
        write(&wt.dir.join("pkg/.forge/config.toml"), "[loop]\n");
        let left = left_behind(&wt.dir).unwrap();
        assert!(left.len() == 1 && left[0].starts_with("pkg/.forge/config.toml"), "{left:?}");
        fs::remove_file(wt.dir.join("pkg/.forge/config.toml")).unwrap();
        assert_eq!(git(&wt.dir, &["show", "HEAD:a.txt"]), "a2");
        assert_eq!(git(&wt.dir, &["log", "-1", "--format=%B"]), "section 1: first");
        assert_eq!(git(&wt.dir, &["rev-parse", "HEAD~1"]), wt.base_commit);
        assert_eq!(git(&wt.dir, &["status", "--porcelain"]), "");
        // Nothing left to commit.
        assert_eq!(checkpoint(&wt.dir, "again").unwrap(), None);
        // The branch moved, the main checkout did not.
        assert_eq!(git(&wt.dir, &["rev-parse", "forge/x"]), id);
    }

    /// A worktree whose HEAD the agent detached (or moved to a branch of its own) at or
    /// ahead of the loop's branch is checkpointed on the loop's branch, the agent's own
    /// commits included; one whose HEAD is behind the branch is left where it is (its files
    /// committed on the branch would undo the loop's work).
    #[test]
    fn a_checkpoint_lands_on_the_loops_branch_when_head_is_at_or_ahead_of_it() {
        for leave in [&["checkout", "-q", "--detach"][..], &["checkout", "-q", "-b", "side"][..]] {
            let (_tmp, _repo, wt) = setup();
            git(&wt.dir, leave);
            write(&wt.dir.join("own.txt"), "own\n");
            git(&wt.dir, &["add", "own.txt"]);
            git(&wt.dir, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "agent's own"]);
            write(&wt.dir.join("work.txt"), "done\n");
            let id = checkpoint_on(&wt.dir, Some("forge/x"), "section 1: work").unwrap().expect("a commit");
            assert_eq!(git(&wt.dir, &["rev-parse", "forge/x"]), id, "{leave:?}");
            assert_eq!(git(&wt.dir, &["show", "forge/x:work.txt"]), "done");
            assert_eq!(git(&wt.dir, &["log", "-1", "--format=%s", "forge/x~1"]), "agent's own");
            assert_eq!(git(&wt.dir, &["rev-parse", "forge/x~2"]), wt.base_commit);
            assert_eq!(git(&wt.dir, &["symbolic-ref", "HEAD"]), "refs/heads/forge/x", "{leave:?}");
            assert_eq!(git(&wt.dir, &["status", "--porcelain"]), "");
        }
        // Behind the branch: the branch keeps its work.
        let (_tmp, _repo, wt) = setup();
        write(&wt.dir.join("work.txt"), "section 1\n");
        let s1 = checkpoint_on(&wt.dir, Some("forge/x"), "section 1: work").unwrap().expect("a commit");
        git(&wt.dir, &["checkout", "-q", "--detach", "HEAD~1"]);
        assert_eq!(checkpoint_on(&wt.dir, Some("forge/x"), "nothing new").unwrap(), None);
        assert_eq!(git(&wt.dir, &["for-each-ref", "refs/forge-kept/"]), "", "HEAD is on the branch's history");
        write(&wt.dir.join("other.txt"), "made on the old commit\n");
        let kept = checkpoint_on(&wt.dir, Some("forge/x"), "loop: x cancelled").unwrap().expect("a commit");
        assert_eq!(git(&wt.dir, &["rev-parse", "forge/x"]), s1, "the branch was rewound");
        // The detached checkpoint is kept by a ref of its own, not left dangling.
        let kept_id = git2::Oid::from_str(&kept).unwrap();
        assert_eq!(git(&wt.dir, &["rev-parse", &kept_ref("forge/x", kept_id)]), kept);
        // A further checkpoint on the same detached line: kept too.
        write(&wt.dir.join("other.txt"), "more\n");
        let later = checkpoint_on(&wt.dir, Some("forge/x"), "section 2: more").unwrap().expect("a commit");
        assert_eq!(git(&wt.dir, &["rev-parse", &kept_ref("forge/x", git2::Oid::from_str(&later).unwrap())]), later);
        // A detached HEAD on a commit the branch has: nothing to keep.
        git(&wt.dir, &["checkout", "-q", "--detach", "forge/x"]);
        assert_eq!(checkpoint_on(&wt.dir, Some("forge/x"), "nothing").unwrap(), None);
        // The agent's own commit elsewhere, with nothing left to checkpoint: kept.
        git(&wt.dir, &["checkout", "-q", "--detach", "HEAD~1"]);
        write(&wt.dir.join("beside.txt"), "beside\n");
        git(&wt.dir, &["add", "beside.txt"]);
        git(&wt.dir, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "agent beside"]);
        let own = git(&wt.dir, &["rev-parse", "HEAD"]);
        assert_eq!(checkpoint_on(&wt.dir, Some("forge/x"), "nothing to add").unwrap(), None);
        assert_eq!(checkpoint_on(&wt.dir, Some("forge/x"), "again").unwrap(), None);
        assert_eq!(git(&wt.dir, &["rev-parse", &kept_ref("forge/x", git2::Oid::from_str(&own).unwrap())]), own);
        // Three commits kept; no branch was made or moved.
        assert_eq!(git(&wt.dir, &["for-each-ref", "--format=%(refname)", "refs/forge-kept/"]).lines().count(), 3);
        assert_eq!(git(&wt.dir, &["branch", "--list", "forge/x-*"]), "");
    }

    /// Names git's commands cannot use as a branch's are refused (review YU: `@` made a
    /// branch that `git checkout @` and `git log @` read as HEAD).
    #[test]
    fn branch_names_git_reads_otherwise_are_refused() {
        for bad in ["@", "HEAD", "FETCH_HEAD", "ORIG_HEAD", "AUTO_MERGE", "-x", "a..b", "refs/heads/x", ""] {
            assert!(branch_name_problem(bad).is_some(), "{bad:?}");
        }
        for bad in ["MAIN", "BISECT_EXPECTED_REV", "MERGE_AUTOSTASH"] {
            assert!(branch_name_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["feature/x", "@x", "a@b", "x-@", "Main", "head", "fix/FETCH_HEAD", "V2"] {
            assert_eq!(branch_name_problem(good), None, "{good:?}");
        }
    }

    /// Review YU: an `index.lock` the agent left, and a NUL byte in the message, failed
    /// every checkpoint; a fresh lock (a git command writing the index now) is respected.
    #[test]
    fn checkpoint_survives_a_stale_index_lock_and_a_nul_in_its_message() {
        let (_tmp, _repo, wt) = setup();
        let lock = PathBuf::from(git(&wt.dir, &["rev-parse", "--git-dir"])).join("index.lock");
        let lock = if lock.is_absolute() { lock } else { wt.dir.join(lock) };
        write(&wt.dir.join("a.txt"), "locked\n");
        fs::write(&lock, "").unwrap();
        assert!(checkpoint(&wt.dir, "fresh lock").is_err(), "a lock just taken is left to its owner");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        fs::File::options().write(true).open(&lock).unwrap().set_modified(old).unwrap();
        // Held open by a process (a long `git add`): left, however old (review YV).
        let held = fs::File::open(&lock).unwrap();
        assert!(checkpoint(&wt.dir, "held lock").is_err(), "a lock a process holds is left");
        drop(held);
        let id = checkpoint(&wt.dir, "section 1: a\0b").unwrap().expect("a commit");
        assert!(!lock.exists());
        assert_eq!(git(&wt.dir, &["log", "-1", "--format=%B", &id]), "section 1: ab");
    }

    #[test]
    fn checkpoint_skips_embedded_repositories() {
        let (_tmp, _repo, wt) = setup();
        let nested = wt.dir.join("vendor/clone");
        write(&nested.join("f.txt"), "f\n");
        git(&nested, &["init", "-q", "-b", "main"]);
        git(&nested, &["add", "-A"]);
        git(&nested, &["commit", "-q", "-m", "nested"]);
        let fresh = wt.dir.join("fresh");
        write(&fresh.join("g.txt"), "g\n");
        git(&fresh, &["init", "-q", "-b", "main"]);
        write(&wt.dir.join("vendor/own.txt"), "own\n");
        checkpoint(&wt.dir, "section 1: with clones").unwrap().expect("a commit");
        assert_eq!(
            tree_files(&wt.dir, "HEAD"),
            vec![".gitignore", "a.txt", "c.txt", "dir/b.txt", "r.txt", "vendor/own.txt"]
        );
        let (tracked, untracked) = changes_since(&wt.dir, &wt.base_commit).unwrap();
        assert_eq!(tracked, vec!["A vendor/own.txt"]);
        assert_eq!(untracked, vec!["fresh/", "vendor/clone/"]);
    }

    #[test]
    fn checkpoint_uses_configured_identity() {
        let (_tmp, repo, wt) = setup();
        git(&repo, &["config", "user.name", "Local Person"]);
        git(&repo, &["config", "user.email", "local@example.com"]);
        write(&wt.dir.join("z.txt"), "z");
        checkpoint(&wt.dir, "").unwrap().expect("a commit");
        assert_eq!(
            git(&wt.dir, &["log", "-1", "--format=%an <%ae>|%cn <%ce>|%s"]),
            "Local Person <local@example.com>|Local Person <local@example.com>|checkpoint"
        );
        assert_eq!(identity(None, Some("e@x".into())), ("forge-lsp".to_string(), "forge-lsp@localhost".to_string()));
        assert_eq!(identity(Some("n".into()), Some("e@x".into())), ("n".to_string(), "e@x".to_string()));
    }

    #[test]
    fn last_checkpoint_finds_latest_section_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        write(&repo.join("a.txt"), "a\n");
        git(&repo, &["add", "-A"]);
        // A section commit before the base never counts.
        git(&repo, &["commit", "-q", "-m", "section 7: old loop"]);
        let wt = create_worktree(&repo, &tmp.path().join("wt"), "forge/x").unwrap();
        assert_eq!(last_checkpoint(&wt.dir, &wt.base_commit).unwrap(), None);

        write(&wt.dir.join("1"), "1");
        let s1 = checkpoint(&wt.dir, "section 1: one").unwrap().unwrap();
        assert_eq!(last_checkpoint(&wt.dir, &wt.base_commit).unwrap(), Some((s1, "section 1: one".to_string())));
        write(&wt.dir.join("2"), "2");
        checkpoint(&wt.dir, "fix: something").unwrap().unwrap();
        write(&wt.dir.join("3"), "3");
        let s2 = checkpoint(&wt.dir, "section 2: two\n\nbody line").unwrap().unwrap();
        for msg in ["sections 3: no", "section x: no", "section 4 no", "Section 5: no"] {
            write(&wt.dir.join(msg), msg);
            checkpoint(&wt.dir, msg).unwrap().unwrap();
        }
        assert_eq!(
            last_checkpoint(&wt.dir, &wt.base_commit).unwrap(),
            Some((s2.clone(), "section 2: two".to_string()))
        );
        // Short ids resolve too; an unknown base is a clear error.
        assert_eq!(last_checkpoint(&wt.dir, &wt.base_commit[..10]).unwrap().unwrap().0, s2);
        let err = last_checkpoint(&wt.dir, "0123456789abcdef").unwrap_err();
        assert!(matches!(err, GitError::UnknownCommit { .. }), "{err}");
        assert!(err.to_string().contains("0123456789abcdef"), "{err}");
        // Searching back no further than the base.
        assert_eq!(last_checkpoint(&wt.dir, &s2).unwrap(), None);
    }

    #[test]
    fn section_message_pattern() {
        assert!(is_section_message("section 1: a"));
        assert!(is_section_message("section 12:"));
        assert!(!is_section_message("section : a"));
        assert!(!is_section_message("section 1 : a"));
        assert!(!is_section_message("section 1a: a"));
        assert!(!is_section_message(" section 1: a"));
        assert!(!is_section_message(""));
    }

    /// What keeps a worktree from removal: changed, staged and untracked files, a
    /// repository made inside it, a submodule's git directory; not ignored files.
    #[test]
    fn left_behind_lists_what_the_branch_does_not_hold() {
        let (_tmp, _repo, wt) = setup();
        let d = &wt.dir;
        assert_eq!(left_behind(d).unwrap(), Vec::<String>::new());
        write(&d.join("x.log"), "ignored\n");
        assert_eq!(left_behind(d).unwrap(), Vec::<String>::new(), "ignored files go with it");
        write(&d.join("a.txt"), "changed\n");
        write(&d.join("new/n.txt"), "n\n");
        // A repository the agent made and committed in: clean in itself, not in the branch.
        git(d, &["init", "-q", "inner"]);
        write(&d.join("inner/f.txt"), "f\n");
        git(&d.join("inner"), &["add", "f.txt"]);
        git(&d.join("inner"), &["commit", "-qm", "inner"]);
        assert_eq!(left_behind(d).unwrap(), vec!["a.txt", "inner/", "new/"]);
        checkpoint(d, "section 1: a").unwrap().unwrap();
        assert_eq!(left_behind(d).unwrap(), vec!["inner/"], "the checkpoint never stages a repository");
        fs::remove_dir_all(d.join("inner")).unwrap();
        assert_eq!(left_behind(d).unwrap(), Vec::<String>::new());
        let gitdir = PathBuf::from(git(d, &["rev-parse", "--git-dir"]));
        fs::create_dir_all(gitdir.join("modules/sub")).unwrap();
        let left = left_behind(d).unwrap();
        assert!(left.len() == 1 && left[0].starts_with("the git directories of its submodules"), "{left:?}");
        assert_eq!(left_behind(&d.join("gone")).unwrap(), Vec::<String>::new(), "a worktree that is gone");
    }

    #[test]
    fn changes_since_lists_scope() {
        let (_tmp, _repo, wt) = setup();
        let d = &wt.dir;
        // Committed.
        write(&d.join("a.txt"), "a2\n");
        checkpoint(d, "section 1: a").unwrap().unwrap();
        // Staged: a new file and a rename.
        write(&d.join("n.txt"), "n\n");
        git(d, &["add", "n.txt"]);
        git(d, &["mv", "r.txt", "r2.txt"]);
        // Unstaged: a modification and a deletion.
        write(&d.join("dir/b.txt"), "b2\n");
        fs::remove_file(d.join("c.txt")).unwrap();
        // Untracked, ignored and forge files.
        write(&d.join("u.txt"), "u\n");
        write(&d.join("udir/deep/v.txt"), "v\n");
        write(&d.join("x.log"), "ignored\n");
        write(&d.join(".forge/usage/f.json"), "{}\n");
        write(&d.join(".forge/tools/t.sh"), "t\n");

        let (tracked, untracked) = changes_since(d, &wt.base_commit).unwrap();
        assert_eq!(tracked, vec!["M a.txt", "D c.txt", "M dir/b.txt", "A n.txt", "R r.txt -> r2.txt"]);
        // forge-lsp's own files are left out; what the agent made under `.forge/` is not.
        assert_eq!(untracked, vec![".forge/tools/t.sh", "u.txt", "udir/deep/v.txt"]);

        // Since the checkpoint, a.txt is no longer changed.
        let last = last_checkpoint(d, &wt.base_commit).unwrap().unwrap().0;
        let (tracked, _) = changes_since(d, &last).unwrap();
        assert!(!tracked.iter().any(|l| l.contains("a.txt")), "{tracked:?}");
        assert_eq!(tracked.len(), 4);
    }

    #[test]
    fn remove_and_reattach() {
        let (tmp, repo, wt) = setup();
        write(&wt.dir.join("work.txt"), "work\n");
        let id = checkpoint(&wt.dir, "section 1: work").unwrap().unwrap();
        // A read-only directory inside does not stop the removal.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            write(&wt.dir.join("ro/f"), "f");
            fs::set_permissions(wt.dir.join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
        }
        remove_worktree(&repo, &wt.dir).unwrap();
        assert!(!wt.dir.exists());
        assert!(branch_exists(&repo, "forge/x").unwrap());
        let list = git(&repo, &["worktree", "list", "--porcelain"]);
        assert!(!list.contains("forge/x"), "{list}");
        // Removing again is a no-op.
        remove_worktree(&repo, &wt.dir).unwrap();

        reattach_worktree(&repo, &wt.dir, "forge/x").unwrap();
        assert_eq!(fs::read_to_string(wt.dir.join("work.txt")).unwrap(), "work\n");
        assert_eq!(head(&wt.dir).unwrap(), id);
        assert_eq!(git(&wt.dir, &["status", "--porcelain"]), "");
        // Reattaching a present worktree is a no-op.
        reattach_worktree(&repo, &wt.dir, "forge/x").unwrap();

        // The directory deleted by hand (stale registration): reattach still works.
        fs::remove_dir_all(&wt.dir).unwrap();
        reattach_worktree(&repo, &wt.dir, "forge/x").unwrap();
        assert_eq!(head(&wt.dir).unwrap(), id);

        // The branch checked out elsewhere cannot be attached to a second dir.
        let err = reattach_worktree(&repo, &tmp.path().join("second"), "forge/x").unwrap_err();
        assert!(matches!(err, GitError::BranchCheckedOut { .. }), "{err}");

        let err = reattach_worktree(&repo, &tmp.path().join("z"), "forge/gone").unwrap_err();
        assert!(matches!(err, GitError::BranchNotFound { .. }), "{err}");
        assert!(err.to_string().contains("forge/gone"), "{err}");

        // A plain directory is never deleted.
        let plain = tmp.path().join("plain");
        write(&plain.join("keep"), "keep");
        let err = remove_worktree(&repo, &plain).unwrap_err();
        assert!(matches!(err, GitError::NotAWorktree { .. }), "{err}");
        assert!(plain.join("keep").exists());
    }

    #[test]
    fn delete_branch_rules() {
        let (_tmp, repo, wt) = setup();
        let err = delete_branch(&repo, "main").unwrap_err();
        assert!(matches!(err, GitError::NotForgeBranch { .. }), "{err}");
        assert!(err.to_string().contains("main"), "{err}");
        assert!(branch_exists(&repo, "main").unwrap());

        let err = delete_branch(&repo, "forge/x").unwrap_err();
        assert!(matches!(err, GitError::BranchCheckedOut { .. }), "{err}");
        assert!(branch_exists(&repo, "forge/x").unwrap());

        remove_worktree(&repo, &wt.dir).unwrap();
        delete_branch(&repo, "forge/x").unwrap();
        assert!(!branch_exists(&repo, "forge/x").unwrap());
        delete_branch(&repo, "forge/x").unwrap();
        assert_eq!(branch_for("my-loop"), "forge/my-loop");
    }

    #[test]
    fn worktree_names_are_sanitized() {
        assert_eq!(sanitize_worktree_name(Path::new("/a/my loop.v2")), "my-loop-v2");
        assert_eq!(sanitize_worktree_name(Path::new("/a/..")), "worktree");
        assert_eq!(sanitize_worktree_name(Path::new("/")), "worktree");
        assert_eq!(sanitize_worktree_name(Path::new("/a/-x-")), "x");
        assert_eq!(sanitize_worktree_name(Path::new("/a/ünï")), "n");
    }
}
