//! Paths by name only, never touching the file system: the one lexical normalisation the
//! server uses (route rewriting, view-copy lookup, diagnostics, finding keys).

use std::path::{Component, Path, PathBuf};

/// Whether `rel` (relative to a root) is forge-lsp's own project configuration, at any
/// depth: `.forge/config.toml` or anything under `.forge/tools/` of any folder (an editor
/// opened on that folder reads them). The server trusts such files when they are not
/// committed, so the file tools never write them: a model that could would choose the
/// program the next loop runs, turn its sandbox off or add a tool of its own.
pub fn is_forge_config(rel: &Path) -> bool {
    let parts: Vec<_> = rel.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect();
    // Without regard to ASCII case: on a file system that ignores case (macOS's, a casefold
    // folder) `.forge/Config.toml` is the configuration (review YB, from reading the code).
    let is = |c: &std::path::Component, name: &str| matches!(c, std::path::Component::Normal(n) if n.as_encoded_bytes().eq_ignore_ascii_case(name.as_bytes()));
    parts.windows(2).any(|w| is(&w[0], ".forge") && (is(&w[1], "config.toml") || is(&w[1], "tools")))
}

/// Whether a path component names a git directory: `.git` in any ASCII case (on a file
/// system that ignores case, `.GIT` is the git directory). The file tools never read or
/// write what lies there.
pub fn is_git_dir_name(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b".git")
}

/// `path` with `.` dropped and each `..` taking back the name before it. A leading `..` of
/// a relative path stays; `/..` is `/`. A trailing `/` is dropped.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) => {}
                _ => out.push(".."),
            },
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The key a review finding's `file` is stored and looked up by, so that one file has one
/// spelling for every client: `.` and `..` resolved by name, a trailing `/` dropped, and a
/// path inside one of `roots` (the project's work tree, the loop's worktree; each as given
/// and as the file system resolves it) made relative to the most specific root that holds
/// it. A relative path is taken from `base` (the root relative paths name) when it starts
/// with `..`, so `../p/a.rs` from `/x/p` is `a.rs`, as the shell's `/x/p/a.rs` is. Any other
/// path is kept (normalised); one that normalises to nothing is kept as given.
pub fn finding_file(file: &str, base: Option<&Path>, roots: &[&Path]) -> String {
    let mut p = lexical(Path::new(file));
    if p.starts_with("..") {
        if let Some(base) = base {
            p = lexical(&base.join(&p));
        }
    }
    if p.is_absolute() {
        let best = roots
            .iter()
            .map(|r| lexical(r))
            .filter_map(|r| p.strip_prefix(&r).ok().map(|rel| (r.components().count(), rel.to_path_buf())))
            .max_by_key(|(depth, _)| *depth);
        if let Some((_, rel)) = best {
            // The root itself is `.`, however spelled (review YK: `/p` was a key of its own).
            match rel.to_str() {
                Some("") => return ".".to_string(),
                Some(s) => return s.to_string(),
                None => {}
            }
        }
    }
    match p.to_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        // The root itself, however spelled (`./`, `.`, `a/..`): one key.
        Some(_) => ".".to_string(),
        None => file.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forge_config_is_the_config_file_and_the_tools_folder_at_the_root() {
        for (rel, is) in [
            (".forge/config.toml", true),
            ("./.forge/config.toml", true),
            (".forge/tools/x.toml", true),
            (".forge/tools", true),
            (".forge/tools/a/run.py", true),
            (".forge/view/index.md", false),
            (".forge/usage/x", false),
            ("sub/.forge/config.toml", true),
            ("a/b/.forge/tools/x", true),
            (".forge", false),
            // Any ASCII case (a file system that ignores case).
            (".Forge/Config.toml", true),
            (".FORGE/TOOLS/x", true),
            (".forge/config.tomlx", false),
            ("forge/config.toml", false),
            (".forge/config.toml.bak", false),
        ] {
            assert_eq!(is_forge_config(Path::new(rel)), is, "{rel}");
        }
    }

    #[test]
    fn one_file_has_one_key() {
        let roots = [Path::new("/p"), Path::new("/real/p")];
        // (file, key)
        let table = [
            ("a.txt", "a.txt"),
            ("./a.txt", "a.txt"),
            ("a.txt/", "a.txt"),
            ("src/../a.txt", "a.txt"),
            ("/p/a.txt", "a.txt"),
            ("/p/./src/../a.txt", "a.txt"),
            ("/real/p/src/x.rs", "src/x.rs"),
            // Outside every root: kept, normalised.
            ("/elsewhere/b.txt", "/elsewhere/b.txt"),
            ("/pp/b.txt", "/pp/b.txt"),
            // Without a base, a leading `..` stays.
            ("../up.txt", "../up.txt"),
            // The root itself is `.`, however spelled (review YK: `/p` was a key of its own).
            ("/p", "."),
            ("/real/p/", "."),
            (".", "."),
            // Every other spelling of the root is `.` too (review Z: `./` was a key of its own).
            ("./", "."),
            ("src/..", "."),
            ("./src/../", "."),
        ];
        for (file, key) in table {
            assert_eq!(finding_file(file, None, &roots), key, "{file}");
        }
        // `..` from the base that relative paths name, as the shell would give it.
        assert_eq!(finding_file("../p/a.rs", Some(Path::new("/p")), &roots), "a.rs");
        assert_eq!(finding_file("../q/b.rs", Some(Path::new("/p")), &roots), "/q/b.rs");
        // The most specific root: a loop worktree inside the project (a data directory in it).
        let nested = [Path::new("/p"), Path::new("/p/.data/worktrees/w")];
        assert_eq!(finding_file("/p/.data/worktrees/w/src/a.rs", None, &nested), "src/a.rs");
        assert_eq!(finding_file("/p/src/a.rs", None, &nested), "src/a.rs");
    }

    #[test]
    fn lexical_resolves_by_name() {
        for (p, want) in [("/a/./b/../c", "/a/c"), ("/..", "/"), ("../x", "../x"), ("a/../../x", "../x"), ("a/", "a")] {
            assert_eq!(lexical(Path::new(p)), Path::new(want), "{p}");
        }
    }
}
