//! The pure path checks of a patch: every path must name a file inside the root.
//!
//! Both `/` and `\` separate components (a patch written on Windows must not slip a
//! `..\..` past the check). `.` components are dropped and `..` pops one component;
//! popping past the root is refused. An absolute path is accepted only when a root is
//! given and the path lies inside it; it is then made relative. The result uses `/`.
//! Symbolic links are the caller's business: this is string work only.

/// Why the file tools refuse `.forge/config.toml` and `.forge/tools/`.
pub const FORGE_CONFIG_REFUSAL: &str = "is forge-lsp's project configuration (.forge/config.toml or .forge/tools/), which the file tools do not change: the server trusts it when it is not committed; edit it yourself";

/// The root-relative, normalised form of `raw`, or why it is refused.
pub fn normalize_path(raw: &str, root: Option<&str>) -> Result<String, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err("is empty".to_string());
    }
    if raw.contains('\0') {
        return Err("contains a NUL character".to_string());
    }
    if raw == "~" || raw.starts_with("~/") || raw.starts_with("~\\") {
        return Err("is relative to a home directory; give it relative to the root".to_string());
    }
    let relative = if is_absolute(raw) {
        let Some(root) = root else {
            return Err("is absolute; give it relative to the root".to_string());
        };
        let root_parts = components(root).map_err(|_| "is absolute and the root is not a plain path".to_string())?;
        let parts = components(raw).map_err(|_| "escapes the root with '..'".to_string())?;
        if !is_absolute(root) || drive(root) != drive(raw) || !parts.starts_with(&root_parts) {
            return Err(format!("is outside the root '{root}'"));
        }
        parts[root_parts.len()..].join("/")
    } else {
        components(raw).map_err(|_| "escapes the root with '..'".to_string())?.join("/")
    };
    if relative.is_empty() {
        return Err("names the root directory, not a file".to_string());
    }
    if raw.rsplit(['/', '\\']).next().is_some_and(|last| last.is_empty() || last == ".") {
        return Err("ends with a slash (or `/.`), so it names a directory, not a file".to_string());
    }
    // Git's own files (hooks, config, a worktree's `.git` link) are not the project's code:
    // a patch that wrote there could make git run a program of its choosing.
    if relative.split('/').any(|part| crate::path::is_git_dir_name(part.as_bytes())) {
        return Err("is inside a git directory (.git), which apply-patch does not change".to_string());
    }
    // The server trusts its uncommitted project configuration: a patch must not choose the
    // program the next loop runs or add a tool.
    if crate::path::is_forge_config(std::path::Path::new(&relative)) {
        return Err(FORGE_CONFIG_REFUSAL.to_string());
    }
    Ok(relative)
}

fn is_absolute(path: &str) -> bool {
    path.starts_with('/') || path.starts_with('\\') || drive(path).is_some()
}

/// `C:` of a Windows path.
fn drive(path: &str) -> Option<char> {
    let mut chars = path.chars();
    match (chars.next(), chars.next()) {
        (Some(letter), Some(':')) if letter.is_ascii_alphabetic() => Some(letter.to_ascii_uppercase()),
        _ => None,
    }
}

/// The components of `path` after `.` and `..` are resolved; `Err` when `..` climbs
/// above the start. A drive prefix is skipped.
fn components(path: &str) -> Result<Vec<&str>, ()> {
    let path = if drive(path).is_some() { &path[2..] } else { path };
    let mut out: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                out.pop().ok_or(())?;
            }
            name => out.push(name),
        }
    }
    Ok(out)
}
