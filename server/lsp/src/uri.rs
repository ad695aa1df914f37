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
    let path = uri.strip_prefix("file://")?;
    let path = percent_decode(path);
    let view = root.join(".forge/view");
    let rel = std::path::Path::new(&path).strip_prefix(&view).ok()?;
    ForgeUri::parse(&format!("forge://{}", rel.display()))
}

/// Decodes `%XX` escapes of a URI path.
pub fn percent_decode(s: &str) -> String {
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
    String::from_utf8_lossy(&out).into_owned()
}
