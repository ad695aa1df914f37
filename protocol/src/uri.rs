//! `forge:` virtual document URIs (PROTOCOL.md §4).

/// The URI scheme of virtual documents.
pub const SCHEME: &str = "forge";

/// A parsed `forge:` URI.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ForgeUri {
    /// `forge://plan/session/<sessionId>.md`
    SessionPlan(String),
    /// `forge://plan/loop/<loopName>.md`
    LoopPlan(String),
    /// `forge://loop/<loopName>/section/<index>.md`
    LoopSection(String, u32),
    /// `forge://loop/<loopName>/status.md`
    LoopStatus(String),
    /// `forge://loop/<loopName>/history.md`
    LoopHistory(String),
    /// `forge://interview/<sessionId>.md`
    Interview(String),
    /// `forge://index.md`
    Index,
}

/// The local path a `file:` URI names, decoded: `file:///p` and `file://localhost/p`
/// (RFC 8089: the same file). `None` for a URI of another scheme; an error naming the
/// host for a `file:` URI of another host, which this machine cannot open.
pub fn local_path(uri: &str) -> Result<Option<String>, String> {
    // The scheme in any case (RFC 3986: `FILE://` is `file://`), and RFC 8089's form
    // without an authority, `file:/path` (review YN: it became a relative path).
    let Some(after) = uri.get(..5).filter(|s| s.eq_ignore_ascii_case("file:")).map(|_| &uri[5..]) else {
        return Ok(None);
    };
    let rest = match after.strip_prefix("//") {
        Some(rest) => rest,
        None if after.starts_with('/') => after,
        None => return Ok(None),
    };
    let (host, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
        return Err(format!("{uri:?} names a file on host {host:?}; forge-lsp opens local files only (file:///path)"));
    }
    if path.is_empty() {
        return Err(format!("{uri:?} names no path; a file URI is file:///path"));
    }
    // Exactly the bytes it names: a lossy decoding names another file (review YK: `%FF`
    // and `%FE` were one key, a file that does not exist), and a NUL byte none.
    let bytes = percent_decode_bytes(path);
    if bytes.contains(&0) {
        return Err(format!("{uri:?} names a path with a NUL byte (%00)"));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| format!("{uri:?} names a path that is not UTF-8 (a %XX escape of a byte that is not); forge-lsp names files by UTF-8 paths"))
}

/// Decodes `%XX` escapes of a URI path; bytes that are not UTF-8 become U+FFFD.
pub fn percent_decode(s: &str) -> String {
    String::from_utf8_lossy(&percent_decode_bytes(s)).into_owned()
}

/// The bytes `s` names with its `%XX` escapes decoded.
fn percent_decode_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The longest session id taken, as its document's file name (`<encoded id>.md`, the name
/// of its `.forge/view/` copy): a file name has at most 255 bytes.
pub const MAX_SESSION_FILE_NAME: usize = 255;

/// Why `id` cannot be a session id, or `None`: its plan's copy under `.forge/view/` is named
/// by it, percent-encoded, and a longer name could never be written (every connection that
/// uses the copies was told "File name too long").
pub fn session_id_problem(id: &str) -> Option<String> {
    let name = encode(id).len() + ".md".len();
    (name > MAX_SESSION_FILE_NAME).then(|| {
        format!(
            "is {} bytes, {name} as a file name; session ids name files (`<id>.md`), which may have at most {MAX_SESSION_FILE_NAME} bytes",
            id.len()
        )
    })
}

impl ForgeUri {
    /// Parses a `forge://...` URI; `None` when it names no known document.
    pub fn parse(uri: &str) -> Option<Self> {
        // The scheme in any case (RFC 3986 §3.1: schemes are case-insensitive).
        let rest = uri.get(..8).filter(|s| s.eq_ignore_ascii_case("forge://")).map(|_| &uri[8..])?;
        let rest = rest.split(['?', '#']).next()?;
        if rest == "index.md" {
            return Some(Self::Index);
        }
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            ["plan", "session", file] => {
                let id = decode(file.strip_suffix(".md")?)?;
                (!id.is_empty()).then_some(Self::SessionPlan(id))
            }
            ["plan", "loop", file] => {
                let name = decode(file.strip_suffix(".md")?)?;
                (!name.is_empty()).then_some(Self::LoopPlan(name))
            }
            ["loop", name, "section", file] => {
                let idx = file.strip_suffix(".md")?;
                // One spelling per section: `01.md` is not `1.md`.
                if idx.is_empty() || !idx.bytes().all(|b| b.is_ascii_digit()) || (idx.len() > 1 && idx.starts_with('0'))
                {
                    return None;
                }
                let name = decode(name)?;
                (!name.is_empty()).then_some(Self::LoopSection(name, idx.parse().ok()?))
            }
            ["interview", file] => {
                let id = decode(file.strip_suffix(".md")?)?;
                (!id.is_empty()).then_some(Self::Interview(id))
            }
            ["loop", name, "status.md"] => {
                let name = decode(name)?;
                (!name.is_empty()).then_some(Self::LoopStatus(name))
            }
            ["loop", name, "history.md"] => {
                let name = decode(name)?;
                (!name.is_empty()).then_some(Self::LoopHistory(name))
            }
            _ => None,
        }
    }

    /// The canonical URI string.
    pub fn to_uri(&self) -> String {
        match self {
            Self::SessionPlan(id) => format!("forge://plan/session/{}.md", encode(id)),
            Self::LoopPlan(name) => format!("forge://plan/loop/{}.md", encode(name)),
            Self::LoopSection(name, i) => format!("forge://loop/{}/section/{i}.md", encode(name)),
            Self::LoopStatus(name) => format!("forge://loop/{}/status.md", encode(name)),
            Self::LoopHistory(name) => format!("forge://loop/{}/history.md", encode(name)),
            Self::Interview(id) => format!("forge://interview/{}.md", encode(id)),
            Self::Index => "forge://index.md".to_string(),
        }
    }

    /// The path of the materialized copy under `<project>/.forge/view/`.
    pub fn view_path(&self) -> String {
        self.to_uri().trim_start_matches("forge://").to_string()
    }

    /// Whether the document is a plan (has sections, symbols and folding).
    pub fn is_plan(&self) -> bool {
        matches!(self, Self::SessionPlan(_) | Self::LoopPlan(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for u in [
            ForgeUri::SessionPlan("ses_01ABC".into()),
            ForgeUri::SessionPlan("odd id/with:chars".into()),
            ForgeUri::LoopPlan("add-oauth".into()),
            ForgeUri::LoopSection("add-oauth".into(), 3),
            ForgeUri::LoopStatus("add-oauth".into()),
            ForgeUri::LoopHistory("add-oauth".into()),
            ForgeUri::Interview("ses_01ABC".into()),
            ForgeUri::Index,
        ] {
            assert_eq!(ForgeUri::parse(&u.to_uri()), Some(u));
        }
    }

    #[test]
    fn a_session_id_must_fit_a_file_name() {
        assert_eq!(session_id_problem("ses_01JD0000000000000000000000"), None);
        assert_eq!(session_id_problem(&"a".repeat(252)), None);
        assert!(session_id_problem(&"a".repeat(253)).is_some());
        // Percent-encoded: 90 spaces are 270 bytes of name.
        assert!(session_id_problem(&" ".repeat(90)).unwrap().contains("273 as a file name"));
    }

    #[test]
    fn rejects_unknown() {
        for s in [
            "forge://nope.md",
            "forge://plan/session/.md",
            "forge://plan/session/x.txt",
            "forge://loop/a/section/x.md",
            "forge://loop/a/section/01.md",
            "forge://loop/a/section/00.md",
            "file:///x.md",
            "forge://plan/session/%ZZ.md",
        ] {
            assert_eq!(ForgeUri::parse(s), None, "{s}");
        }
    }
}
