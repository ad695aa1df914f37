//! Path sanitizing on the session write path (FORGE-REFERENCE §2.2 step 3).
//!
//! Plans are written inside one checkout but executed in a worktree elsewhere, so
//! absolute prefixes of the project directory are removed before a plan is stored:
//! every `<projectDir>/` and, when the project lies under the home directory, every
//! `~/<path below home>/`. What remains is repo-relative.

/// Removes every `<project_dir>/` from `text` and, when `project_dir` is below
/// `home`, every `~/<relative>/`. Trailing slashes of `project_dir` are ignored;
/// an empty (or `/`) project directory changes nothing. Occurrences are removed
/// left to right without overlapping, and removal does not rescan the result. The text
/// is borrowed when nothing was removed.
pub fn sanitize_paths<'t>(text: &'t str, project_dir: &str, home: Option<&str>) -> std::borrow::Cow<'t, str> {
    let dir = project_dir.trim_end_matches('/');
    if dir.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    // The `~` form first: with the home directory `/`, `~/<dir>/` holds `<dir>/`. A `<dir>/`
    // right after a `~` is a path below the home directory, not the project's (its removal
    // left `~y`: a review). A home written with a trailing `/` is the same directory.
    let mut prefixes = vec![];
    if let Some(home) = home.filter(|h| !h.is_empty()).map(|h| h.trim_end_matches('/')) {
        if let Some(relative) = dir.strip_prefix(home).filter(|r| r.starts_with('/')) {
            prefixes.push(format!("~{relative}/"));
        }
    }
    prefixes.push(format!("{dir}/"));
    // A plan rarely names its own directory: search first, copy only on a hit.
    let mut out = std::borrow::Cow::Borrowed(text);
    for prefix in &prefixes {
        if let Some(removed) = remove_all(&out, prefix) {
            out = std::borrow::Cow::Owned(removed);
        }
    }
    out
}

/// `text` without each occurrence of `prefix` that does not follow a `~` (left to right,
/// not overlapping); `None` when none was removed.
fn remove_all(text: &str, prefix: &str) -> Option<String> {
    let mut out = String::new();
    let mut last = 0;
    for (i, _) in text.match_indices(prefix) {
        if text[..i].ends_with('~') {
            continue;
        }
        out.push_str(&text[last..i]);
        last = i + prefix.len();
    }
    if last == 0 {
        return None;
    }
    out.push_str(&text[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_project_prefix() {
        let text = "Edit /home/u/proj/src/a.rs and `/home/u/proj/b.rs`; keep /home/u/other/c.rs";
        assert_eq!(sanitize_paths(text, "/home/u/proj", None), "Edit src/a.rs and `b.rs`; keep /home/u/other/c.rs");
    }

    #[test]
    fn trailing_slash_on_project_dir_is_ignored() {
        assert_eq!(sanitize_paths("/p/x/y", "/p/x///", None), "y");
    }

    #[test]
    fn removes_tilde_form_under_home() {
        let text = "see ~/proj/src/a.rs and /home/u/proj/b.rs and ~/projects/c";
        assert_eq!(sanitize_paths(text, "/home/u/proj", Some("/home/u")), "see src/a.rs and b.rs and ~/projects/c");
    }

    #[test]
    fn no_tilde_form_outside_home() {
        assert_eq!(sanitize_paths("~/p/a and /work/p/b", "/work/p", Some("/home/u")), "~/p/a and b");
        // A sibling that merely shares the prefix text is not "under" home.
        assert_eq!(sanitize_paths("~/2/p/a", "/home/u2/p", Some("/home/u")), "~/2/p/a");
    }

    /// A home directory of `/`, or written with a trailing `/`, is the same directory.
    #[test]
    fn a_home_at_the_root_or_with_a_trailing_slash() {
        let text = "A ~/proj/x B ~/home/u/proj/y C /home/u/proj/z";
        assert_eq!(sanitize_paths(text, "/home/u/proj", Some("/home/u/")), "A x B ~/home/u/proj/y C z");
        assert_eq!(sanitize_paths(text, "/home/u/proj", Some("/")), "A ~/proj/x B y C z");
    }

    #[test]
    fn directory_without_slash_is_kept() {
        assert_eq!(sanitize_paths("cd /home/u/proj now", "/home/u/proj", None), "cd /home/u/proj now");
    }

    #[test]
    fn empty_or_root_project_dir_changes_nothing() {
        assert_eq!(sanitize_paths("/a/b", "", None), "/a/b");
        assert_eq!(sanitize_paths("/a/b", "/", Some("/")), "/a/b");
    }
}
