//! Loop names (FORGE-REFERENCE §3.4, and the execution name of §3.3).
//!
//! * [`slugify`] turns a title or a requested name into the loop name that
//!   `execute-plan` uses, and the slug of branches (`forge/<slug>`) and worktree
//!   directories.
//! * [`uniquify`] makes a requested name unique within the project by cutting it to
//!   25 characters and appending `-1`, `-2`, ... while the name is taken.
//! * [`execution_name`] is the sanitized form of a plan's display name, used when a
//!   launch takes its name from the plan's `Loop Name:`.
//!
//! Lengths are UTF-16 code units, as in JavaScript.

use crate::plan::{cut_utf16, is_js_space, js_trim};

/// Longest slug [`slugify`] returns.
pub const MAX_SLUG_LENGTH: usize = 50;
/// Length a requested loop name is cut to before a `-N` suffix is added.
pub const MAX_UNIQUE_BASE_LENGTH: usize = 25;
/// Longest execution name.
pub const MAX_EXECUTION_NAME_LENGTH: usize = 60;

/// Lowercases; deletes every character other than ASCII letters, digits, `_`,
/// whitespace and `-`; trims; turns whitespace runs into `-`; collapses repeated
/// dashes; cuts to 50. Edge dashes are kept (`"-a-"` stays `"-a-"`).
pub fn slugify(t: &str) -> String {
    let lowered = t.to_lowercase();
    let kept: String =
        lowered.chars().filter(|&c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || is_js_space(c)).collect();
    let mut slug = String::with_capacity(kept.len());
    let mut in_space = false;
    for c in js_trim(&kept).chars() {
        if is_js_space(c) {
            if !in_space {
                slug.push('-');
            }
            in_space = true;
            continue;
        }
        in_space = false;
        slug.push(c);
    }
    let mut collapsed = String::with_capacity(slug.len());
    for c in slug.chars() {
        if c == '-' && collapsed.ends_with('-') {
            continue;
        }
        collapsed.push(c);
    }
    cut_utf16(&collapsed, MAX_SLUG_LENGTH).to_string()
}

/// Cuts `base` to 25 characters; when that name is taken, appends `-1`, `-2`, ...
/// (after the cut, so the result may be longer than 25) and returns the first free
/// one. `taken` says whether a loop of the project already has a name.
pub fn uniquify(base: &str, taken: impl Fn(&str) -> bool) -> String {
    let cut = cut_utf16(base, MAX_UNIQUE_BASE_LENGTH);
    if !taken(cut) {
        return cut.to_string();
    }
    let mut suffix: u64 = 1;
    loop {
        let candidate = format!("{cut}-{suffix}");
        // `taken` covers a finite set of rows, so a free name always exists; the
        // bound only keeps a misbehaving predicate from looping forever.
        if !taken(&candidate) || suffix == u64::from(u32::MAX) {
            return candidate;
        }
        suffix += 1;
    }
}

/// The execution name of a display name: lowercase, every run of characters other
/// than `a-z`/`0-9` becomes `-`, edge dashes are trimmed, cut to 60; `loop` when
/// nothing is left.
pub fn execution_name(display_name: &str) -> String {
    let lowered = display_name.to_lowercase();
    let mut out = String::with_capacity(lowered.len());
    for c in lowered.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches('-');
    let cut = cut_utf16(trimmed, MAX_EXECUTION_NAME_LENGTH);
    if cut.is_empty() {
        "loop".to_string()
    } else {
        cut.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugify_basic() {
        assert_eq!(slugify("Add OAuth Login"), "add-oauth-login");
        assert_eq!(slugify("  Fix: the   bug!  "), "fix-the-bug");
        assert_eq!(slugify("snake_case stays"), "snake_case-stays");
    }

    #[test]
    fn slugify_collapses_dashes_and_keeps_edges() {
        assert_eq!(slugify("a - b"), "a-b");
        assert_eq!(slugify("a---b"), "a-b");
        assert_eq!(slugify("-edge-"), "-edge-");
        // Deleted punctuation next to whitespace leaves a dash at the edge.
        assert_eq!(slugify("! a"), "a");
        assert_eq!(slugify("a !"), "a");
    }

    #[test]
    fn slugify_deletes_non_ascii_and_cuts_to_50() {
        assert_eq!(slugify("Café crème"), "caf-crme");
        assert_eq!(slugify("日本語"), "");
        assert_eq!(slugify(&"ab ".repeat(40)).len(), 50);
        assert_eq!(slugify("tab\there\u{3000}wide"), "tab-here-wide");
    }

    #[test]
    fn uniquify_cuts_then_appends_first_free_suffix() {
        let taken = ["a-very-long-requested-loo", "a-very-long-requested-loo-1"];
        let name = uniquify("a-very-long-requested-loop-name", |n| taken.contains(&n));
        assert_eq!(name, "a-very-long-requested-loo-2");
        assert_eq!(uniquify("free", |_| false), "free");
        assert_eq!(uniquify("x", |n| n == "x"), "x-1");
    }

    #[test]
    fn uniquify_may_produce_double_dash() {
        // The 25-character cut can end in a dash; the suffix is appended anyway.
        let base = format!("{}-tail", "b".repeat(24));
        let cut = format!("{}-", "b".repeat(24));
        let name = uniquify(&base, |n| n == cut);
        assert_eq!(name, format!("{cut}-1"));
    }

    #[test]
    fn execution_name_sanitizes() {
        assert_eq!(execution_name("My Loop: v2!"), "my-loop-v2");
        assert_eq!(execution_name("--x--"), "x");
        assert_eq!(execution_name("!!!"), "loop");
        assert_eq!(execution_name(""), "loop");
        assert_eq!(execution_name("Über 😀 name"), "ber-name");
        assert_eq!(execution_name(&"a".repeat(70)).len(), 60);
    }
}

/// The result of matching a user-given loop name (FORGE-REFERENCE.md §4.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match<T> {
    One(T),
    Ambiguous(Vec<T>),
    None,
}

/// Matches `query` against candidates `(name, branch)` ordered newest first: an exact
/// (case-insensitive) name or branch wins; else a single substring match wins; several
/// substring matches are ambiguous.
pub fn partial_match<T: Clone>(query: &str, candidates: &[(T, String, Option<String>)]) -> Match<T> {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return Match::None;
    }
    let fields = |c: &(T, String, Option<String>)| {
        let mut v = vec![c.1.to_lowercase()];
        if let Some(b) = &c.2 {
            v.push(b.to_lowercase());
        }
        v
    };
    if let Some(c) = candidates.iter().find(|c| fields(c).contains(&q)) {
        return Match::One(c.0.clone());
    }
    let hits: Vec<T> =
        candidates.iter().filter(|c| fields(c).iter().any(|f| f.contains(&q))).map(|c| c.0.clone()).collect();
    match hits.len() {
        0 => Match::None,
        1 => Match::One(hits[0].clone()),
        _ => Match::Ambiguous(hits),
    }
}

#[cfg(test)]
mod partial_match_tests {
    use super::*;

    #[test]
    fn exact_substring_ambiguous() {
        let c = vec![
            ("add-oauth", "add-oauth".to_string(), Some("forge/add-oauth".to_string())),
            ("add-oauth-1", "add-oauth-1".to_string(), Some("forge/add-oauth-1".to_string())),
            ("fix-db", "fix-db".to_string(), None),
        ];
        assert_eq!(partial_match("ADD-OAUTH", &c), Match::One("add-oauth"));
        assert_eq!(partial_match("forge/add-oauth-1", &c), Match::One("add-oauth-1"));
        assert_eq!(partial_match("db", &c), Match::One("fix-db"));
        assert_eq!(partial_match("oauth", &c), Match::Ambiguous(vec!["add-oauth", "add-oauth-1"]));
        assert_eq!(partial_match("zzz", &c), Match::None);
        assert_eq!(partial_match("  ", &c), Match::None);
    }
}
