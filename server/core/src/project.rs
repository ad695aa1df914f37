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
        let id = cached_root_commit(&repo).unwrap_or_else(|| GLOBAL.to_string());
        Project { id, root, repo_root }
    }

    pub fn is_global(&self) -> bool {
        self.id == GLOBAL
    }
}

/// The cache of the root commit, per working tree (its git directory): `<root> <head>`.
const ROOT_CACHE: &str = "forge-lsp-root";

/// [`root_commit`], remembered per working tree so detection does not depend on the
/// history's size: with the HEAD of the last detection the cached root is reused at once;
/// when that HEAD is an ancestor of today's (new commits on top), only the new commits are
/// walked; otherwise (another branch, a rewritten history) the whole history is walked
/// again. A cache that cannot be read or written only costs time.
fn cached_root_commit(repo: &git2::Repository) -> Option<String> {
    let head = repo.head().ok()?.peel_to_commit().ok()?.id();
    let path = repo.path().join(ROOT_CACHE);
    let cached = std::fs::read_to_string(&path).ok().and_then(|t| {
        let mut it = t.split_whitespace();
        let root = git2::Oid::from_str(it.next()?).ok()?;
        let at = git2::Oid::from_str(it.next()?).ok()?;
        Some((root, at))
    });
    let root = match cached {
        Some((root, at)) if at == head && repo.find_commit(root).is_ok() => return Some(root.to_string()),
        Some((root, at)) if repo.find_commit(root).is_ok() && repo.graph_descendant_of(head, at).unwrap_or(false) => {
            oldest_root(repo, head, Some(at), Some(root))?
        }
        _ => oldest_root(repo, head, None, None)?,
    };
    if let Err(e) = std::fs::write(&path, format!("{root} {head}\n")) {
        tracing::debug!("cannot cache the root commit in {}: {e}", path.display());
    }
    Some(root.to_string())
}

/// The oldest parentless commit reachable from HEAD, as hex (the whole history).
#[cfg(test)]
fn root_commit(repo: &git2::Repository) -> Option<String> {
    let head = repo.head().ok()?.peel_to_commit().ok()?.id();
    oldest_root(repo, head, None, None).map(|o| o.to_string())
}

/// The oldest root commit reachable from `head`; with `known`, only the commits not
/// reachable from `hide` are walked and `known` (the oldest root below `hide`) competes.
fn oldest_root(
    repo: &git2::Repository,
    head: git2::Oid,
    hide: Option<git2::Oid>,
    known: Option<git2::Oid>,
) -> Option<git2::Oid> {
    let mut walk = repo.revwalk().ok()?;
    walk.push(head).ok()?;
    if let Some(h) = hide {
        walk.hide(h).ok()?;
    }
    let mut best: Option<(i64, git2::Oid)> = known.and_then(|k| Some((repo.find_commit(k).ok()?.time().seconds(), k)));
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
    best.map(|(_, o)| o)
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

    /// `git commit` at a fixed author and committer date (the committer time orders roots).
    fn commit_at(dir: &Path, message: &str, date: &str) {
        let ok = Command::new("git")
            .args(["commit", "-q", "--allow-empty", "-m", message])
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .env("GIT_AUTHOR_DATE", date)
            .env("GIT_COMMITTER_DATE", date)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git commit {message}");
    }

    fn head(dir: &Path) -> String {
        String::from_utf8(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(dir).output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string()
    }

    fn uncached(dir: &Path) -> String {
        root_commit(&git2::Repository::discover(dir).unwrap()).unwrap()
    }

    #[test]
    fn the_cached_root_follows_new_commits_merges_branches_and_a_broken_cache() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        commit_at(&repo, "root", "2020-01-01T00:00:00");
        let root = head(&repo);
        assert_eq!(Project::detect(&repo).id, root);
        let cache = repo.join(".git").join(ROOT_CACHE);
        assert_eq!(std::fs::read_to_string(&cache).unwrap(), format!("{root} {root}\n"), "cached with its HEAD");

        // New commits on top: only they are walked; the root stays.
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "two"]);
        assert_eq!(Project::detect(&repo).id, root);
        assert!(std::fs::read_to_string(&cache).unwrap().ends_with(&format!(" {}\n", head(&repo))));

        // Merging an unrelated, older history: the older root wins, as a full walk says.
        git(&repo, &["checkout", "-q", "--orphan", "old"]);
        commit_at(&repo, "older root", "2010-01-01T00:00:00");
        let older = head(&repo);
        git(&repo, &["checkout", "-q", "main"]);
        assert_eq!(Project::detect(&repo).id, root, "cache refreshed on main");
        git(&repo, &["merge", "-q", "--allow-unrelated-histories", "-m", "merge", "old"]);
        assert_eq!(Project::detect(&repo).id, older);
        assert_eq!(uncached(&repo), older);

        // Another branch whose HEAD is not a descendant: a whole walk, its own root.
        git(&repo, &["checkout", "-q", "--orphan", "fresh"]);
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "fresh root"]);
        let fresh = head(&repo);
        assert_eq!(Project::detect(&repo).id, fresh);

        // A cache that makes no sense is ignored and rewritten.
        std::fs::write(&cache, "garbage\n").unwrap();
        assert_eq!(Project::detect(&repo).id, fresh);
        std::fs::write(&cache, format!("{} {}\n", "0".repeat(40), head(&repo))).unwrap();
        assert_eq!(Project::detect(&repo).id, fresh, "a cached root that is not a commit is not trusted");
    }
}
