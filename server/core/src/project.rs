//! The project a connection works on, and where its data lives.
//!
//! The project id is the hash of the repository's root commit (the oldest parentless
//! commit reachable from `HEAD`), so a project and its loop worktrees share one id; a
//! folder without a commit is the project `global` (PROTOCOL.md §2).

use std::path::{Path, PathBuf};

/// The id of projects without a committed repository.
pub const GLOBAL: &str = "global";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    pub id: String,
    /// The workspace folder (the first one the client named).
    pub root: PathBuf,
    /// The repository's work tree root, when the folder is inside one.
    pub repo_root: Option<PathBuf>,
}

impl Project {
    /// Identifies the project of `folder`.
    pub fn detect(folder: &Path) -> Project {
        let root = folder.canonicalize().unwrap_or_else(|_| folder.to_path_buf());
        let Ok(repo) = git2::Repository::discover(&root) else {
            return Project { id: GLOBAL.into(), root, repo_root: None };
        };
        let repo_root = repo.workdir().map(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf()));
        let id = root_commit(&repo).unwrap_or_else(|| GLOBAL.to_string());
        Project { id, root, repo_root }
    }

    pub fn is_global(&self) -> bool {
        self.id == GLOBAL
    }
}

/// The oldest parentless commit reachable from HEAD, as hex.
fn root_commit(repo: &git2::Repository) -> Option<String> {
    let head = repo.head().ok()?.peel_to_commit().ok()?;
    let mut walk = repo.revwalk().ok()?;
    walk.push(head.id()).ok()?;
    let mut best: Option<(i64, git2::Oid)> = None;
    for oid in walk.flatten() {
        let Ok(c) = repo.find_commit(oid) else { continue };
        if c.parent_count() == 0 {
            let t = c.time().seconds();
            // Oldest wins; ties broken by id so the choice is stable.
            if best.is_none_or(|(bt, bo)| t < bt || (t == bt && oid < bo)) {
                best = Some((t, oid));
            }
        }
    }
    best.map(|(_, o)| o.to_string())
}

/// Resolves the data directory by precedence: initialization option, `--data-dir`,
/// `FORGE_DATA_DIR`, `$XDG_DATA_HOME/forge-lsp`, `~/.local/share/forge-lsp`.
pub fn data_dir(init_option: Option<&str>, cli: Option<&Path>) -> PathBuf {
    if let Some(d) = init_option.filter(|d| !d.trim().is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = cli {
        return d.to_path_buf();
    }
    if let Some(d) = std::env::var_os("FORGE_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("forge-lsp");
    }
    home_dir().join(".local/share/forge-lsp")
}

pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn id_is_root_commit_and_shared_by_worktrees() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        assert_eq!(Project::detect(&repo).id, GLOBAL);
        git(&repo, &["init", "-q"]);
        assert_eq!(Project::detect(&repo).id, GLOBAL, "no commit yet");
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "root"]);
        let root = String::from_utf8(
            Command::new("git").args(["rev-parse", "HEAD"]).current_dir(&repo).output().unwrap().stdout,
        )
        .unwrap();
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "second"]);
        let p = Project::detect(&repo);
        assert_eq!(p.id, root.trim());
        let wt = d.path().join("wt");
        git(&repo, &["worktree", "add", "-q", "-b", "forge/x", wt.to_str().unwrap()]);
        git(&wt, &["commit", "-q", "--allow-empty", "-m", "on branch"]);
        assert_eq!(Project::detect(&wt).id, p.id);
    }
}
