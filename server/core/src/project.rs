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

    /// What a finding's relative `file` is relative to: the repository's work tree (as for
    /// `forge-lsp call`, wherever in it the caller stands, and in a loop's worktree, a whole
    /// checkout), else the folder. An editor opened on a folder inside a repository names
    /// the same file with the same path as every other client.
    pub fn findings_root(&self) -> &Path {
        self.repo_root.as_deref().unwrap_or(&self.root)
    }
}

/// Why git refuses the repository that `folder` is in, when it refuses it as not safe to
/// open (owned by another user and not in `safe.directory`): [`Project::detect`] then
/// sees no repository, and a message saying only that would mislead.
pub fn refused_repository(folder: &Path) -> Option<String> {
    match git2::Repository::discover(folder) {
        Err(e) if e.code() == git2::ErrorCode::Owner => Some(e.message().to_string()),
        _ => None,
    }
}

/// The cache of the root commit, per repository (its common git directory, so a project
/// and all its worktrees share it): one `<root> <head> <working tree>` line per HEAD seen,
/// newest first; the working tree is `.` for the main one, else its git directory relative
/// to the common one (`worktrees/<name>`).
const ROOT_CACHE: &str = "forge-lsp-root";

/// How many HEADs the cache remembers per working tree (branches switched between), so
/// that busy loop worktrees never push out the main working tree's HEADs ...
const ROOT_CACHE_PER_TREE: usize = 4;
/// ... and in all.
const ROOT_CACHE_ENTRIES: usize = 64;

/// One line of the cache.
struct CacheEntry {
    root: git2::Oid,
    head: git2::Oid,
    tree: String,
}

/// [`root_commit`], remembered per repository so detection does not depend on the
/// history's size. A HEAD the cache knows is answered at once (the cached root is checked
/// to be a parentless commit, nothing more). Otherwise the history is walked from HEAD,
/// stopping at every commit the cache knows (its oldest root is already known): new
/// commits on top of a known HEAD cost only themselves, an unknown history (the first
/// detection of a clone, a rewritten branch, a HEAD moved back) costs a whole walk, once.
/// A cache that cannot be read or written only costs time.
fn cached_root_commit(repo: &git2::Repository) -> Option<String> {
    let head = repo.head().ok()?.peel_to_commit().ok()?.id();
    let path = repo.commondir().join(ROOT_CACHE);
    let entries = read_root_cache(&path);
    let is_root = |o: git2::Oid| repo.find_commit(o).is_ok_and(|c| c.parent_count() == 0);
    if let Some(e) = entries.iter().find(|e| e.head == head) {
        if is_root(e.root) {
            return Some(e.root.to_string());
        }
    }
    // Known HEADs whose cached root still checks out: the walk stops at them.
    let known: std::collections::HashMap<git2::Oid, git2::Oid> =
        entries.iter().filter(|e| e.head != head && is_root(e.root)).map(|e| (e.head, e.root)).collect();
    let root = oldest_root(repo, head, &known)?;
    let tree = match repo.path().strip_prefix(repo.commondir()) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.to_string_lossy().trim_end_matches('/').to_string(),
        Err(_) => repo.path().to_string_lossy().trim_end_matches('/').to_string(),
    };
    let mut kept = vec![CacheEntry { root, head, tree }];
    for e in entries {
        let same_tree = kept.iter().filter(|k| k.tree == e.tree).count();
        if e.head != head && same_tree < ROOT_CACHE_PER_TREE && kept.len() < ROOT_CACHE_ENTRIES {
            kept.push(e);
        }
    }
    let text: String = kept.iter().map(|e| format!("{} {} {}\n", e.root, e.head, e.tree)).collect();
    write_root_cache(&path, &text);
    Some(root.to_string())
}

/// The cache's entries, newest first; lines that make no sense are skipped (a line without
/// a working tree, as an earlier version wrote, is the main one's).
fn read_root_cache(path: &Path) -> Vec<CacheEntry> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let root = git2::Oid::from_str(it.next()?).ok()?;
            let head = git2::Oid::from_str(it.next()?.trim()).ok()?;
            let tree = it.next().map(str::trim).filter(|t| !t.is_empty()).unwrap_or(".").to_string();
            (!root.is_zero() && !head.is_zero()).then_some(CacheEntry { root, head, tree })
        })
        .take(ROOT_CACHE_ENTRIES)
        .collect()
}

/// Replaces the cache atomically (a temporary file renamed over it), so a detection in
/// another process never reads half a file.
fn write_root_cache(path: &Path, text: &str) {
    let tmp = path.with_file_name(format!("{ROOT_CACHE}.{}.tmp", std::process::id()));
    let r = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!("cannot cache the root commit in {}: {e}", path.display());
    }
}

/// The oldest parentless commit reachable from HEAD, as hex (the whole history).
#[cfg(test)]
fn root_commit(repo: &git2::Repository) -> Option<String> {
    let head = repo.head().ok()?.peel_to_commit().ok()?.id();
    oldest_root(repo, head, &Default::default()).map(|o| o.to_string())
}

/// The oldest root commit reachable from `head` (oldest committer time, ties broken by id
/// so the choice is stable). The walk does not go below a commit of `known` (a commit
/// whose oldest root is known): that root competes instead.
///
/// Each commit is read once from the object database and only its `parent` lines are
/// parsed (a revwalk plus `find_commit` parsed every commit twice and kept them all in
/// memory: 13 s and 900 MB for a million commits). A shallow repository or one with
/// grafts has parents that are not in its commits: there libgit2's own parsing decides.
fn oldest_root(
    repo: &git2::Repository,
    head: git2::Oid,
    known: &std::collections::HashMap<git2::Oid, git2::Oid>,
) -> Option<git2::Oid> {
    let odb = repo.odb().ok()?;
    let raw = !repo.is_shallow() && !repo.commondir().join("info/grafts").exists();
    let _uncached = WalkWithoutObjectCache::start();
    let mut best: Option<(i64, git2::Oid)> = None;
    let mut consider = |oid: git2::Oid| {
        let Ok(c) = repo.find_commit(oid) else { return };
        let t = c.time().seconds();
        if best.is_none_or(|(bt, bo)| t < bt || (t == bt && oid < bo)) {
            best = Some((t, oid));
        }
    };
    let mut seen: std::collections::HashSet<git2::Oid> = std::collections::HashSet::from([head]);
    let mut stack = vec![head];
    let mut parents: Vec<git2::Oid> = Vec::with_capacity(2);
    while let Some(oid) = stack.pop() {
        if let Some(root) = known.get(&oid) {
            consider(*root);
            continue;
        }
        parents.clear();
        if raw {
            let Ok(obj) = odb.read(oid) else { continue };
            if obj.kind() != git2::ObjectType::Commit {
                continue;
            }
            commit_parents(obj.data(), &mut parents);
        } else {
            let Ok(c) = repo.find_commit(oid) else { continue };
            parents.extend(c.parent_ids());
        }
        if parents.is_empty() {
            consider(oid);
        }
        for p in parents.drain(..) {
            if seen.insert(p) {
                stack.push(p);
            }
        }
    }
    best.map(|(_, o)| o)
}

/// Walks running now; libgit2's object cache is off while there is one.
static WALKS: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// libgit2 keeps every object it reads in a cache of up to 256 MB per repository, which a
/// walk over a long history fills with commits it never reads again (a million commits:
/// 8.4 s and 475 MB with it, 6.1 s and 204 MB without). The switch is process-wide, so it
/// is off only while a walk runs (counted, for walks on several threads); other git work
/// meanwhile only reads its objects again.
struct WalkWithoutObjectCache;

impl WalkWithoutObjectCache {
    fn start() -> WalkWithoutObjectCache {
        let mut n = WALKS.lock().unwrap_or_else(|e| e.into_inner());
        if *n == 0 {
            git2::opts::enable_caching(false);
        }
        *n += 1;
        WalkWithoutObjectCache
    }
}

impl Drop for WalkWithoutObjectCache {
    fn drop(&mut self) {
        let mut n = WALKS.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            git2::opts::enable_caching(true);
        }
    }
}

/// The `parent` lines of a raw commit object's header (they follow its `tree` line).
fn commit_parents(data: &[u8], out: &mut Vec<git2::Oid>) {
    for line in data.split(|b| *b == b'\n').skip(1) {
        let Some(hex) = line.strip_prefix(b"parent ") else { break };
        if let Some(o) = std::str::from_utf8(hex).ok().and_then(|h| git2::Oid::from_str(h).ok()) {
            out.push(o);
        }
    }
}

/// Resolves the data directory by precedence: initialization option, `--data-dir`,
/// `FORGE_DATA_DIR`, `$XDG_DATA_HOME/forge-lsp`, `~/.local/share/forge-lsp`.
///
/// Always absolute (a relative one is taken from the current directory): the path is a
/// key (one workspace per data directory in a server, its agents' `FORGE_DATA_DIR`), and
/// worktrees and sandbox shims are named from it, so two spellings of one directory must
/// not meet as two.
pub fn data_dir(init_option: Option<&str>, cli: Option<&Path>) -> PathBuf {
    let d = chosen_data_dir(init_option, cli);
    std::path::absolute(&d).unwrap_or(d)
}

fn chosen_data_dir(init_option: Option<&str>, cli: Option<&Path>) -> PathBuf {
    if let Some(d) = init_option.filter(|d| !d.trim().is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = cli {
        // An editor's configuration passes `--data-dir ~/d` with no shell to expand it.
        return match expand_home(d) {
            Ok(p) => p.unwrap_or_else(|| d.to_path_buf()),
            // Refused by the command line before this (`main`); a library caller's is kept.
            Err(e) => {
                tracing::warn!("--data-dir {}: {e}; taken as written", d.display());
                d.to_path_buf()
            }
        };
    }
    if let Some(d) = std::env::var_os("FORGE_DATA_DIR").filter(|d| !d.is_empty()) {
        if let Some(d) = env_data_dir(PathBuf::from(d)) {
            return d;
        }
    }
    // A relative value is ignored, as the XDG base directory specification says (it would
    // give one database per directory called from).
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| Path::new(d).is_absolute()) {
        return PathBuf::from(d).join("forge-lsp");
    }
    home_dir().join(".local/share/forge-lsp")
}

/// `FORGE_DATA_DIR` as given: `~` and `~/…` are the home directory (a quoted `"~/data"`
/// reaches us unexpanded, and made a folder named `~` in every directory a server was
/// started from); another relative path is taken from the current directory, as the
/// shell's tools take one, with a warning naming where that is: an editor starts its
/// server in the project, so `FORGE_DATA_DIR=data` put a database inside each project.
///
/// `None` (the variable is ignored, with a warning) when it starts with `~` and there is no
/// home directory to give it ([`home`]), or with another user's `~name`.
fn env_data_dir(d: PathBuf) -> Option<PathBuf> {
    match expand_home(&d) {
        Ok(Some(p)) => return Some(p),
        Ok(None) => {}
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| tracing::warn!("FORGE_DATA_DIR={}: {e}; the variable is ignored", d.display()));
            return None;
        }
    }
    if d.is_relative() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            let at = std::path::absolute(&d).unwrap_or_else(|_| d.clone());
            tracing::warn!(
                "FORGE_DATA_DIR={} is a relative path: the data directory is {} (taken from the directory forge-lsp was started in); set an absolute path to use one data directory from everywhere",
                d.display(),
                at.display()
            );
        });
    }
    Some(d)
}

/// `path` with its leading `~` component (`~`, `~/x`, `~//x`) replaced by the home
/// directory ([`home`]): `Ok(None)` when it does not start with `~`; `Err` naming why for
/// a named user's `~name` (not expanded: it made a folder named `~name`) and when there is
/// no home directory. The one reading of `~` for every way the data directory is given
/// (`FORGE_DATA_DIR`, `--data-dir`, the initialization option).
pub fn expand_home(path: &Path) -> Result<Option<PathBuf>, String> {
    let first = path.components().next().map(|c| c.as_os_str().as_encoded_bytes());
    match first {
        Some(b"~") => {}
        Some(name) if name.starts_with(b"~") => {
            return Err(format!("`{}` (a named user's home directory) is not expanded", String::from_utf8_lossy(name)))
        }
        _ => return Ok(None),
    }
    let rest = path.strip_prefix("~").unwrap_or(Path::new(""));
    let home = home().ok_or_else(|| {
        "`~` names the home directory, but HOME is not an absolute path and the password database names none"
            .to_string()
    })?;
    Ok(Some(if rest.as_os_str().is_empty() { home } else { home.join(rest) }))
}

/// The user's home directory: `HOME` when it is an absolute path, else the effective user's
/// home in the password database (as a shell's `~` does without `HOME`); `None` when
/// neither gives an absolute path. An unset, empty or relative `HOME` put the default data
/// directory at `/.local/share` or inside the project (a review).
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute()).or_else(passwd_home)
}

/// Every home directory of the user: [`home`], then the password database's when `HOME`
/// names another folder (a sandbox hides the secrets under both: with `HOME` pointed
/// elsewhere, the keys under the account's own home were readable in a loop; a review).
pub fn homes() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = home().into_iter().collect();
    if let Some(p) = passwd_home() {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The effective user's home directory in the password database (`getpwuid_r`). In a
/// debug build `FORGE_TEST_PASSWD_HOME` stands for it (empty: none), so that tests of an
/// unusable `HOME` never write into the real one.
fn passwd_home() -> Option<PathBuf> {
    #[cfg(debug_assertions)]
    if let Some(h) = std::env::var_os("FORGE_TEST_PASSWD_HOME") {
        return Some(PathBuf::from(h)).filter(|h| h.is_absolute());
    }
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: getpwuid_r writes the entry into `pwd`, its strings into `buf` (of the
        // length given) and `result`; all outlive the call, and `pw_dir` is read only while
        // `buf` lives.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc =
            unsafe { libc::getpwuid_r(libc::geteuid(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = unsafe { std::ffi::CStr::from_ptr(pwd.pw_dir) };
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        return p.is_absolute().then_some(p);
    }
}

/// The main working tree of the repository `dir` is a linked worktree of (a loop's
/// worktree: its project's directory); `None` when `dir` is not in a linked worktree or the
/// repository is bare.
pub fn main_worktree(dir: &Path) -> Option<PathBuf> {
    let repo = git2::Repository::open(dir).ok()?;
    if !repo.is_worktree() {
        return None;
    }
    let common = repo.commondir();
    (common.file_name()? == ".git").then(|| common.parent().map(Path::to_path_buf)).flatten()
}

/// [`home`], or `/` when there is none (said once in the log: the default data directory
/// is then `/.local/share/forge-lsp`, which only root can make).
pub fn home_dir() -> PathBuf {
    home().unwrap_or_else(|| {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "no home directory (HOME is not an absolute path and the password database names none): `/` stands for it, in the default data directory (/.local/share/forge-lsp) and user configuration (/.config/forge-lsp); set FORGE_DATA_DIR (or --data-dir) and XDG_CONFIG_HOME to absolute paths, or HOME"
            )
        });
        PathBuf::from("/")
    })
}

/// [`home`] as text, for the plan paths written as `~/…` (`ToolEnv::home`), with its links
/// resolved as the project root's are (a `HOME` that is a link to the real home matched no
/// project: a review); `None` when there is none or it is not UTF-8.
pub fn home_string() -> Option<String> {
    home().map(|h| h.canonicalize().unwrap_or(h)).and_then(|h| h.into_os_string().into_string().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_data_dir_is_absolute_however_it_is_given() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(data_dir(Some("rel/data"), None), cwd.join("rel/data"));
        assert_eq!(data_dir(None, Some(Path::new("data"))), cwd.join("data"));
        assert_eq!(data_dir(Some("/abs/d"), Some(Path::new("data"))), PathBuf::from("/abs/d"));
        // Two spellings of one relative directory are one key.
        assert_eq!(data_dir(Some("./d"), None), data_dir(Some("d"), None));
    }

    /// `FORGE_DATA_DIR`'s `~` is the home directory; another relative path stays relative
    /// (taken from the current directory by [`data_dir`]).
    #[test]
    fn forge_data_dir_expands_the_home_directory() {
        let home = home_dir();
        for (given, want) in [
            ("~", home.clone()),
            ("~/data", home.join("data")),
            ("~/a/b", home.join("a/b")),
            ("~//a", home.join("a")),
            ("~/", home.clone()),
            ("/abs/d", PathBuf::from("/abs/d")),
            ("rel/d", PathBuf::from("rel/d")),
        ] {
            assert_eq!(env_data_dir(PathBuf::from(given)), Some(want), "{given}");
        }
        // Another user's home is not expanded: the variable is ignored (named in a warning).
        assert_eq!(env_data_dir(PathBuf::from("~user/d")), None);
        let e = expand_home(Path::new("~user/d")).unwrap_err();
        assert_eq!(e, "`~user` (a named user's home directory) is not expanded");
        assert_eq!(expand_home(Path::new("x/~")), Ok(None));
        assert_eq!(expand_home(Path::new("/~")), Ok(None));
    }

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
        // A linked worktree knows its project's directory; the project itself is no worktree.
        let canon = |p: &Path| p.canonicalize().unwrap();
        assert_eq!(main_worktree(&wt).map(|m| canon(&m)), Some(canon(&repo)));
        assert_eq!(main_worktree(&repo), None);
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

    /// A repository `repo` under `dir` with one root commit; returns it and the root.
    fn repo_with_root(dir: &Path) -> (std::path::PathBuf, String) {
        let repo = dir.join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        commit_at(&repo, "root", "2020-01-01T00:00:00");
        let root = head(&repo);
        (repo, root)
    }

    fn uncached(dir: &Path) -> String {
        root_commit(&git2::Repository::discover(dir).unwrap()).unwrap()
    }

    #[test]
    fn the_cached_root_follows_new_commits_merges_branches_and_a_broken_cache() {
        let d = tempfile::tempdir().unwrap();
        let (repo, root) = repo_with_root(d.path());
        assert_eq!(Project::detect(&repo).id, root);
        let cache = repo.join(".git").join(ROOT_CACHE);
        assert_eq!(std::fs::read_to_string(&cache).unwrap(), format!("{root} {root} .\n"), "cached with its HEAD");

        // New commits on top: only they are walked; the root stays.
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "two"]);
        assert_eq!(Project::detect(&repo).id, root);
        let text = std::fs::read_to_string(&cache).unwrap();
        assert_eq!(text, format!("{root} {} .\n{root} {root} .\n", head(&repo)), "newest first, the old HEAD kept");

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

        // Back on main: its HEAD is still in the cache, answered without a walk.
        git(&repo, &["checkout", "-q", "main"]);
        let cached = std::fs::read_to_string(&cache).unwrap();
        assert_eq!(Project::detect(&repo).id, older);
        assert_eq!(std::fs::read_to_string(&cache).unwrap(), cached, "a cache hit writes nothing");
        git(&repo, &["checkout", "-q", "fresh"]);

        // A cache that makes no sense is ignored and rewritten.
        std::fs::write(&cache, "garbage\n").unwrap();
        assert_eq!(Project::detect(&repo).id, fresh);
        std::fs::write(&cache, format!("{} {}\n", "0".repeat(40), head(&repo))).unwrap();
        assert_eq!(Project::detect(&repo).id, fresh, "a cached root that is not a commit is not trusted");
        // A cached "root" that has parents is not trusted either.
        std::fs::write(&cache, format!("{} {}\n", head(&repo), head(&repo))).unwrap();
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "on fresh"]);
        let tip = head(&repo);
        std::fs::write(&cache, format!("{tip} {tip}\n")).unwrap();
        assert_eq!(Project::detect(&repo).id, fresh, "a cached root with parents is walked again");
        assert_eq!(uncached(&repo), fresh);
    }

    #[test]
    fn worktrees_share_the_cache_of_their_repository() {
        let d = tempfile::tempdir().unwrap();
        let (repo, root) = repo_with_root(d.path());
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "two"]);
        assert_eq!(Project::detect(&repo).id, root);
        let cache = repo.join(".git").join(ROOT_CACHE);
        // A worktree on the same commit: answered from the repository's cache.
        let wt = d.path().join("wt");
        git(&repo, &["worktree", "add", "-q", "-b", "forge/x", wt.to_str().unwrap()]);
        let before = std::fs::read_to_string(&cache).unwrap();
        assert_eq!(Project::detect(&wt).id, root);
        assert_eq!(std::fs::read_to_string(&cache).unwrap(), before, "hit: nothing written");
        assert!(!repo.join(".git/worktrees/wt").join(ROOT_CACHE).exists(), "no cache per worktree");
        git(&wt, &["commit", "-q", "--allow-empty", "-m", "in the worktree"]);
        assert_eq!(Project::detect(&wt).id, root);
        let text = std::fs::read_to_string(&cache).unwrap();
        assert!(text.starts_with(&format!("{root} {} worktrees/wt\n", head(&wt))), "{text}");
        assert_eq!(text.lines().count(), 2);

        // Many HEADs in the worktree do not push out the main working tree's.
        for i in 0..(ROOT_CACHE_PER_TREE + 2) {
            git(&wt, &["commit", "-q", "--allow-empty", "-m", &format!("more {i}")]);
            assert_eq!(Project::detect(&wt).id, root);
        }
        let text = std::fs::read_to_string(&cache).unwrap();
        assert_eq!(text.lines().filter(|l| l.ends_with(" worktrees/wt")).count(), ROOT_CACHE_PER_TREE, "{text}");
        assert!(text.contains(&format!(" {} .\n", head(&repo))), "the main HEAD is kept: {text}");
    }
}
