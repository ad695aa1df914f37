//! Paths by name only, never touching the file system: the one lexical normalisation the
//! server uses (route rewriting, view-copy lookup, diagnostics, finding keys).

use std::path::{Component, Path, PathBuf};

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
/// spelling for every client: `.` and `..` resolved by name, a trailing `/` dropped, and an
/// absolute path inside one of `roots` (the project's work tree, the caller's loop
/// worktree; each as given and as the file system resolves it) made relative to it. Any
/// other path is kept (normalised). A path that normalises to nothing is kept as given.
pub fn finding_file(file: &str, roots: &[&Path]) -> String {
    let p = lexical(Path::new(file));
    if p.is_absolute() {
        for root in roots {
            if let Ok(rel) = p.strip_prefix(lexical(root)) {
                if !rel.as_os_str().is_empty() {
                    return rel.to_string_lossy().into_owned();
                }
            }
        }
    }
    match p.to_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => file.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("../up.txt", "../up.txt"),
            // The root itself stays absolute (no empty key); `.` stays `.`.
            ("/p", "/p"),
            (".", "."),
        ];
        for (file, key) in table {
            assert_eq!(finding_file(file, &roots), key, "{file}");
        }
    }

    #[test]
    fn lexical_resolves_by_name() {
        for (p, want) in [("/a/./b/../c", "/a/c"), ("/..", "/"), ("../x", "../x"), ("a/../../x", "../x"), ("a/", "a")] {
            assert_eq!(lexical(Path::new(p)), Path::new(want), "{p}");
        }
    }
}
