//! Which `forge:` document a client URI names. A leaf: it imports no other module of
//! this crate.

use std::path::Path;

use forge_protocol::uri::ForgeUri;

/// The `forge:` document a URI names: a `forge://` URI, or a materialized copy under
/// `<project>/.forge/view/` (for clients that open files only).
pub fn forge_document(root: &Path, uri: &str) -> Option<ForgeUri> {
    if let Some(u) = ForgeUri::parse(uri) {
        return Some(u);
    }
    let path = local_path(uri).ok()??;
    // `.` and `..` resolved as written (`.forge/view/./plan/...` is the same copy).
    let lexical = normalize(Path::new(&path));
    let view = root.join(".forge/view");
    let rel = lexical.strip_prefix(&view).ok()?;
    ForgeUri::parse(&format!("forge://{}", rel.display()))
}

/// How the client spells the folder it opened, where the server spells it otherwise: a
/// symbolic link on its path, which the server resolves (`Project::detect`). The server
/// keys documents and builds URIs in its own spelling; a client that opened `~/link`
/// knows its files as `~/link/...`. So URIs from the client are turned into the server's
/// spelling as they arrive ([`Spelling::to_server`]) and the server's into the client's as
/// they leave ([`Spelling::to_client`]).
///
/// Invariant: empty, or a pair of different absolute prefixes, the link and what it
/// resolves to (the folder's common trailing components taken off).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spelling(Option<(std::path::PathBuf, std::path::PathBuf)>);

impl Spelling {
    /// The spelling of a folder as the client named it (resolved on the file system).
    pub fn of_folder(named: &Path) -> Spelling {
        let client = normalize(named);
        match client.canonicalize() {
            Ok(server) => Spelling::between(&client, &server, |p| p.canonicalize().ok()),
            Err(_) => Spelling::default(),
        }
    }

    /// The pair for `client` and `server`, two spellings of one folder (`resolve` resolves
    /// a folder on the file system). Trailing components are taken off both while they are
    /// the same and the parents are still two spellings of one folder, so the pair is the
    /// link itself: `/home/u/p` → `/var/home/u/p` gives `/home` and `/var/home`, never `/`
    /// and `/var` (which would map `/var/lib` to `/lib`).
    pub fn between(client: &Path, server: &Path, resolve: impl Fn(&Path) -> Option<std::path::PathBuf>) -> Spelling {
        let (mut c, mut s) = (client.to_path_buf(), server.to_path_buf());
        while c != s && c.file_name().is_some() && c.file_name() == s.file_name() {
            let (Some(cp), Some(sp)) = (c.parent(), s.parent()) else { break };
            if cp.parent().is_none() || resolve(cp).as_deref() != Some(sp) {
                break;
            }
            c.pop();
            s.pop();
        }
        // Not two spellings, or the server's inside the client's (no link resolves into
        // itself; `to_server` would not be idempotent). The client's may be inside the
        // server's (a link to a folder above it): no resolved path passes through it.
        if c == s || !c.is_absolute() || !s.is_absolute() || s.starts_with(&c) {
            return Spelling::default();
        }
        Spelling(Some((c, s)))
    }

    /// A client's URI in the server's spelling ([`canonical`] too).
    pub fn to_server(&self, uri: String) -> String {
        let Some((client, server)) = &self.0 else { return canonical(uri) };
        match local_path(&uri) {
            Ok(Some(path)) => match Path::new(&path).strip_prefix(client) {
                Ok(rest) => file_uri(&server.join(rest)),
                Err(_) => file_uri(Path::new(&path)),
            },
            _ => uri,
        }
    }

    /// A URI the server built, in the client's spelling.
    /// Whether the client names every folder as the server does.
    pub fn is_identity(&self) -> bool {
        self.0.is_none()
    }

    /// The start of every URI in the client's spelling of the folder it names another way
    /// than the server (`None` for the identity): a cheap test before [`Spelling::to_client`].
    pub fn client_uri_prefix(&self) -> Option<String> {
        self.0.as_ref().map(|(client, _)| file_uri(client))
    }

    pub fn to_client<'a>(&self, uri: &'a str) -> std::borrow::Cow<'a, str> {
        let Some((client, server)) = &self.0 else { return uri.into() };
        match local_path(uri) {
            // The folder itself is the client's folder, without the trailing slash an empty
            // `join` adds (a finding on the project root was published to `…/link/`).
            Ok(Some(path)) => match Path::new(&path).strip_prefix(server) {
                Ok(rest) if rest.as_os_str().is_empty() => file_uri(client).into(),
                Ok(rest) => file_uri(&client.join(rest)).into(),
                Err(_) => uri.into(),
            },
            _ => uri.into(),
        }
    }
}

/// Lexical normalisation (`.` and `..`), without touching the file system: the domain's
/// one (`forge_domain::path::lexical`), for the absolute paths this crate normalises.
pub use forge_domain::path::lexical as normalize;

/// `file://` URI of an absolute path: every byte but ASCII letters, digits and `-._~/`
/// percent-encoded, in uppercase hex. The one spelling the server uses for files.
pub fn file_uri(p: &Path) -> String {
    let mut s = String::from("file://");
    for b in p.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// A client's `file://` URI in the server's spelling ([`file_uri`]). Clients encode file
/// URIs differently (Neovim leaves `+`, `@`, `:` and others as they are and writes
/// lowercase hex; VS Code encodes `:`), and the server keys open documents and published
/// files by URI. Any other URI (and a `file:` URI with an authority) is returned as it is.
pub fn canonical(uri: String) -> String {
    match local_path(&uri) {
        Ok(Some(path)) => file_uri(Path::new(&path)),
        _ => uri,
    }
}

// Moved down to the protocol crate (no I/O), where the tools' `file` arguments read them too.
pub use forge_protocol::uri::{local_path, percent_decode};

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder opened through a link: the client's URIs are read in the server's spelling
    /// and the server's written in the client's; other URIs pass as they are.
    #[test]
    fn a_linked_folder_is_spelled_as_each_side_knows_it() {
        // The file system of the cases: `/home/u/link` is a link to `/data/proj`, `/home`
        // one to `/var/home`, `/tmp` one to `/private/tmp`.
        let resolve = |p: &Path| -> Option<std::path::PathBuf> {
            let p = p.to_str()?;
            Some(
                match p {
                    "/home/u/link" => "/data/proj".to_string(),
                    _ if p == "/home" || p.starts_with("/home/") => format!("/var{p}"),
                    _ if p == "/tmp" || p.starts_with("/tmp/") => format!("/private{p}"),
                    _ => p.to_string(),
                }
                .into(),
            )
        };
        let s = Spelling::between(Path::new("/home/u/link/sub"), Path::new("/data/proj/sub"), resolve);
        assert_eq!(s, Spelling(Some(("/home/u/link".into(), "/data/proj".into()))));
        // A link high up with the same names below it: the pair is the link, not `/`.
        let home = Spelling::between(Path::new("/home/u/p"), Path::new("/var/home/u/p"), resolve);
        assert_eq!(home, Spelling(Some(("/home".into(), "/var/home".into()))));
        assert_eq!(home.to_server("file:///home/u/p/a.rs".into()), "file:///var/home/u/p/a.rs");
        assert_eq!(
            home.to_server("file:///var/home/u/p/a.rs".into()),
            "file:///var/home/u/p/a.rs",
            "already the server's"
        );
        assert_eq!(home.to_client("file:///var/lib/x"), "file:///var/lib/x", "not under the link");
        let tmp = Spelling::between(Path::new("/tmp/p"), Path::new("/private/tmp/p"), resolve);
        assert_eq!(tmp, Spelling(Some(("/tmp".into(), "/private/tmp".into()))));
        // A link to a folder above it: the link is the pair.
        let up = Spelling::between(Path::new("/r/sub/up"), Path::new("/r"), resolve);
        assert_eq!(up, Spelling(Some(("/r/sub/up".into(), "/r".into()))));
        assert_eq!(up.to_server("file:///r/sub/up/a".into()), "file:///r/a");
        assert_eq!(up.to_server("file:///r/a".into()), "file:///r/a");
        assert_eq!(s.to_server("file:///home/u/link/a%20b.rs".into()), "file:///data/proj/a%20b.rs");
        assert_eq!(s.to_server("file:///elsewhere/x".into()), "file:///elsewhere/x");
        assert_eq!(s.to_server("forge://index.md".into()), "forge://index.md");
        assert_eq!(s.to_client("file:///data/proj/.forge/view/index.md"), "file:///home/u/link/.forge/view/index.md");
        assert_eq!(s.to_client("file:///data/projx/a"), "file:///data/projx/a");
        assert_eq!(s.to_client("file:///data/proj"), "file:///home/u/link", "the root: no trailing slash");
        assert_eq!(Spelling::between(Path::new("/p"), Path::new("/p"), resolve), Spelling::default());
        let none = Spelling::default();
        assert_eq!(none.to_server("file:///p/a%2Bb".into()), canonical("file:///p/a%2Bb".into()));
        assert_eq!(none.to_client("file:///p/a"), "file:///p/a");
    }

    /// `file://localhost/p` is `file:///p` (RFC 8089); another host is refused by name.
    #[test]
    fn a_file_uri_of_localhost_is_a_local_path() {
        let cases: &[(&str, Result<Option<&str>, &str>)] = &[
            ("file:///p/a%20b", Ok(Some("/p/a b"))),
            ("file://localhost/p/a", Ok(Some("/p/a"))),
            ("file://LOCALHOST/p", Ok(Some("/p"))),
            ("untitled:Untitled-1", Ok(None)),
            ("file://server/share/p", Err("host \"server\"")),
            ("file://localhost", Err("names no path")),
        ];
        for (uri, want) in cases {
            match (local_path(uri), want) {
                (Ok(got), Ok(w)) => assert_eq!(got.as_deref(), *w, "{uri}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{uri}: {e}"),
                (got, _) => panic!("{uri}: {got:?}"),
            }
        }
        assert_eq!(canonical("file://localhost/p/x".into()), "file:///p/x");
        assert!(forge_document(Path::new("/p"), "file://localhost/p/.forge/view/plan/session/ses_1.md").is_some());
    }

    /// A view copy's URI names its document however its path is spelled (`./`, `x/../`),
    /// and a `..` that leaves the view names none.
    #[test]
    fn view_copy_uris_are_read_with_dots_resolved() {
        let root = Path::new("/p");
        let want = Some(ForgeUri::SessionPlan("ses_1".into()));
        for uri in [
            "file:///p/.forge/view/plan/session/ses_1.md",
            "file:///p/.forge/view/./plan/session/ses_1.md",
            "file:///p/x/../.forge/view/plan/session/ses_1.md",
            "FORGE://plan/session/ses_1.md",
        ] {
            assert_eq!(forge_document(root, uri), want, "{uri}");
        }
        assert_eq!(forge_document(root, "file:///p/.forge/view/plan/../../../secret.md"), None);
    }

    #[test]
    fn file_uris_are_spelled_one_way() {
        for (client, canonical_form) in [
            // Neovim's vim.uri_from_fname: `+` and `@` kept, lowercase hex.
            ("file:///home/j%c3%bcrgen/c++/x@y.rs", "file:///home/j%C3%BCrgen/c%2B%2B/x%40y.rs"),
            ("file:///home/j%C3%BCrgen/c%2B%2B/x%40y.rs", "file:///home/j%C3%BCrgen/c%2B%2B/x%40y.rs"),
            ("file:///a%20b/c.rs", "file:///a%20b/c.rs"),
            ("file:///plain/path.rs", "file:///plain/path.rs"),
            // Not file paths: unchanged.
            ("forge://plan/session/ses_1.md", "forge://plan/session/ses_1.md"),
            ("file://host/share/x", "file://host/share/x"),
            ("untitled:Untitled-1", "untitled:Untitled-1"),
        ] {
            assert_eq!(canonical(client.to_string()), canonical_form, "{client}");
        }
        assert_eq!(file_uri(Path::new("/home/jürgen/c++/x@y.rs")), "file:///home/j%C3%BCrgen/c%2B%2B/x%40y.rs");
    }
}
