//! `forge.webfetch`: fetches an `http(s)` URL with `ureq` (rustls, no OpenSSL) off the
//! store thread ([`ToolCtx::after`]).
//!
//! - Redirects are followed by hand (at most [`MAX_REDIRECTS`]): same-origin ones always,
//!   a cross-origin one only with `webfetch.allowCrossOriginRedirects`; otherwise the call
//!   fails naming the target.
//! - `llms.txt`: with `format` markdown and a site root URL (path `/`, no query), the tool
//!   first asks `<origin>/llms.txt`; a 200 answer that is not HTML and not empty is the
//!   result. Any other answer falls back to the page itself.
//! - HTML becomes markdown (`htmd`) or plain text from its main content: the first
//!   `<main>`, else the first `<article>`, else `<body>`; script, style, noscript,
//!   template, nav, aside and footer are dropped (and header when no main/article exists).
//! - Text-like bodies (text/*, JSON, XML, JavaScript) are returned as they are; other
//!   content types are saved to `<data dir>/webfetch/<sha256>.<ext>` (0600) and the result
//!   names the file and its size.
//! - Conditional requests: a 200 answer with an `ETag` or `Last-Modified` is kept under
//!   `<data dir>/webfetch/cache/`; the next fetch of that URL sends `If-None-Match` /
//!   `If-Modified-Since`, and a 304 answer is served from the kept copy (the result says so).
//! - At most `webfetch.maxBytes` body bytes are read (default 10 MiB): a longer text body
//!   is cut and the result says so; a longer binary body is an error (a cut file is
//!   useless).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use forge_protocol::{CommandResult, ToolError};
use markup5ever_rcdom::{Node, NodeData};
use serde_json::json;
use sha2::{Digest, Sha256};
use url::Url;

use super::ToolCtx;

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Fetch an http(s) URL. format: markdown (default; the page's main content converted to markdown, and for a site root the site's /llms.txt when it has one), text (main content as plain text) or html (the body as sent). timeout: seconds (default 30, at most 120). Redirects within the same origin are followed; a redirect to another origin is refused with the target named unless the configuration allows it. Binary content (images, PDFs, archives) is saved to a file under forge's data directory and the result gives its path and size. A text body beyond webfetch.maxBytes (default 10 MiB) is cut, and the result says so; a longer binary body is an error and nothing is saved.";

pub type Input = forge_protocol::inputs::WebfetchInput;

const MAX_REDIRECTS: usize = 10;
const DEFAULT_TIMEOUT: u64 = 30;
const MAX_TIMEOUT: u64 = 120;

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Markdown,
    Text,
    Html,
}

struct Opts {
    format: Format,
    timeout: Duration,
    cross_origin: bool,
    max_bytes: u64,
    data_dir: PathBuf,
    /// Raised when the caller gave up: the fetch stops at the next redirect, probe or read
    /// of the body, and nothing is kept or saved.
    cancel: Arc<AtomicBool>,
}

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let url = Url::parse(input.url.trim())
        .map_err(|e| ToolError::invalid_params(format!("invalid argument `url`: {:?} is not a URL: {e}", input.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `url`: only http and https URLs are fetched, not {}:",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ToolError::invalid_params(format!("invalid argument `url`: {url} has no host")));
    }
    let format = match input.format.as_deref().map(str::trim).unwrap_or("markdown") {
        "markdown" | "md" | "" => Format::Markdown,
        "text" => Format::Text,
        "html" => Format::Html,
        other => {
            return Err(ToolError::invalid_params(format!(
                "invalid argument `format`: {other:?}; expected markdown, text or html"
            )))
        }
    };
    no_network_loop(ctx)?;
    let timeout = input.timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout == 0 || timeout > MAX_TIMEOUT {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `timeout`: must be between 1 and {MAX_TIMEOUT} seconds, got {timeout}"
        )));
    }
    let data_dir = ctx
        .db
        .path()
        .filter(|p| !p.is_empty())
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
        .ok_or_else(|| ToolError::internal("webfetch: the data directory is unknown (in-memory database)"))?;
    let cfg = &ctx.env.config;
    let opts = Opts {
        format,
        timeout: Duration::from_secs(timeout),
        cross_origin: cfg.webfetch_allow_cross_origin_redirects,
        max_bytes: cfg.webfetch_max_bytes.max(1),
        data_dir,
        cancel: ctx.cancel_flag(),
    };
    ctx.after = Some(Box::new(move || fetch(url, &opts)));
    Ok(CommandResult { text: String::new(), data: forge_protocol::Data::default() })
}

/// A loop session whose loop runs sandboxed without network may not fetch either: the
/// fetch runs in the server, outside the sandbox, and would hand the agent the network
/// (the internet, and services listening on the host's loopback) its sandbox keeps from it.
fn no_network_loop(ctx: &ToolCtx) -> Result<(), ToolError> {
    use crate::Db;
    let Some(b) = &ctx.caller().binding else { return Ok(()) };
    let row: Option<(bool, bool)> = rusqlite::OptionalExtension::optional(ctx.db.query_row(
        "SELECT sandbox, sandbox_network FROM loops WHERE project_id = ?1 AND loop_name = ?2",
        rusqlite::params![ctx.project_id(), b.loop_name],
        |r| Ok((r.get::<_, i64>(0)? != 0, r.get::<_, i64>(1)? != 0)),
    ))
    .db()?;
    match row {
        Some((true, false)) => Err(ToolError::denied(format!(
            "forge.webfetch is not available to the {} session of loop \"{}\": the loop runs in a sandbox without network (sandbox.network = false), and a fetch by the server would go around it",
            b.role, b.loop_name
        ))),
        _ => Ok(()),
    }
}

/// One response, redirects resolved.
struct Fetched {
    url: Url,
    status: u16,
    content_type: String,
    body: Vec<u8>,
    truncated: bool,
    /// `stored` (a new copy kept for revalidation), `revalidated` (304: the kept copy is
    /// the answer) or `none`.
    cache: &'static str,
}

/// A kept 200 answer with its validators (`<data dir>/webfetch/cache/<sha256(url)>.json`
/// and `.body`, both 0600).
#[derive(serde::Serialize, serde::Deserialize)]
struct Cached {
    url: String,
    etag: Option<String>,
    last_modified: Option<String>,
    content_type: String,
}

fn cache_paths(opts: &Opts, url: &Url) -> (PathBuf, PathBuf, PathBuf) {
    let digest = Sha256::digest(url.as_str().as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let dir = opts.data_dir.join("webfetch").join("cache");
    (dir.join(format!("{hex}.json")), dir.join(format!("{hex}.body")), dir)
}

fn cache_read(opts: &Opts, url: &Url) -> Option<(Cached, Vec<u8>)> {
    let (meta, body, _) = cache_paths(opts, url);
    let c: Cached = serde_json::from_slice(&std::fs::read(meta).ok()?).ok()?;
    if c.url != url.as_str() {
        return None;
    }
    Some((c, std::fs::read(body).ok()?))
}

/// Keeps a 200 answer that has a validator; a failure only costs the next revalidation.
fn cache_write(opts: &Opts, url: &Url, c: &Cached, body: &[u8]) -> bool {
    let (meta, body_path, dir) = cache_paths(opts, url);
    let Ok(json) = serde_json::to_vec(c) else { return false };
    let ok = write_private(&dir, &body_path, body).and_then(|_| write_private(&dir, &meta, &json));
    if let Err(e) = &ok {
        tracing::debug!("webfetch: cannot keep {url}: {e}");
    }
    ok.is_ok()
}

fn agent(opts: &Opts) -> ureq::Agent {
    ureq::Agent::config_builder()
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_global(Some(opts.timeout))
        .user_agent(concat!("forge-lsp/", env!("CARGO_PKG_VERSION"), " webfetch"))
        .build()
        .into()
}

fn fail(m: impl std::fmt::Display) -> ToolError {
    ToolError::invalid(format!("webfetch failed: {m}"))
}

/// GETs `start`, following same-origin redirects, all before `deadline` (the call's
/// `timeout` covers the whole fetch, redirects and the `llms.txt` probe included, not
/// each request).
fn get(agent: &ureq::Agent, start: &Url, opts: &Opts, deadline: std::time::Instant) -> Result<Fetched, ToolError> {
    let mut url = start.clone();
    for _ in 0..=MAX_REDIRECTS {
        given_up(opts)?;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(fail(format!("{url}: no answer within the timeout of {} s", opts.timeout.as_secs())));
        }
        let cached = cache_read(opts, &url);
        let mut req = agent
            .get(url.as_str())
            .config()
            .timeout_global(Some(left))
            .build()
            .header("Accept", "text/markdown, text/html;q=0.9, text/plain;q=0.8, */*;q=0.5")
            // The body as it is: no compression is decoded here (review YM: a server may
            // compress a reply to a request that names no encoding, and its gzip bytes were
            // answered as the page's text).
            .header("Accept-Encoding", "identity");
        if let Some((c, _)) = &cached {
            if let Some(etag) = &c.etag {
                req = req.header("If-None-Match", etag);
            }
            if let Some(lm) = &c.last_modified {
                req = req.header("If-Modified-Since", lm);
            }
        }
        let resp = req.call().map_err(|e| fail(format!("{url}: {e}")))?;
        let status = resp.status().as_u16();
        if status == 304 {
            if let Some((c, body)) = cached {
                let truncated = body.len() as u64 > opts.max_bytes;
                let mut body = body;
                body.truncate(opts.max_bytes as usize);
                return Ok(Fetched { url, status: 200, content_type: c.content_type, body, truncated, cache: "revalidated" });
            }
        }
        if (300..400).contains(&status) && status != 304 {
            // Raw UTF-8 is what servers send for a non-ASCII path (review YM: it was taken for
            // no header at all); the URL parser escapes it.
            let location = resp.headers().get("location").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let Some(loc) = location.as_deref() else {
                return Err(fail(format!("{url} answered {status} without a Location header")));
            };
            let next = url.join(loc).map_err(|e| fail(format!("{url} redirects to an invalid location {loc:?}: {e}")))?;
            if !matches!(next.scheme(), "http" | "https") {
                return Err(fail(format!("{url} redirects to {next}, which is not http or https")));
            }
            if next.origin() != url.origin() && !opts.cross_origin {
                return Err(fail(format!(
                    "{url} redirects to another origin: {next} (not followed; fetch that URL directly, or set webfetch.allowCrossOriginRedirects = true)"
                )));
            }
            url = next;
            continue;
        }
        let encoding = resp.headers().get("content-encoding").map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string());
        // Only the codings that compress: a server that sends `none` (or anything else it
        // made up) for a plain body is read as it is (review YN: such pages were refused).
        let compressed = |e: &String| {
            e.split(',').any(|c| {
                let c = c.trim().to_ascii_lowercase();
                matches!(c.as_str(), "gzip" | "x-gzip" | "deflate" | "br" | "compress" | "x-compress" | "zstd")
            })
        };
        if let Some(enc) = encoding.filter(compressed) {
            return Err(fail(format!(
                "{url} answered with Content-Encoding: {enc}, although asked for none (Accept-Encoding: identity); webfetch does not decode compressed bodies"
            )));
        }
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let resp_headers = resp.headers().clone();
        let mut body = vec![];
        let reader = resp.into_body().into_reader().take(opts.max_bytes + 1);
        Watched { inner: reader, cancel: &opts.cancel }.read_to_end(&mut body).map_err(|e| {
            if crate::files::gave_up(&opts.cancel) {
                crate::files::search_cancelled("webfetch")
            } else {
                fail(format!("reading {url}: {e}"))
            }
        })?;
        let truncated = body.len() as u64 > opts.max_bytes;
        body.truncate(opts.max_bytes as usize);
        let header = |k: &str| resp_headers.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        let (etag, last_modified) = (header("etag"), header("last-modified"));
        given_up(opts)?;
        let mut cache = "none";
        if status == 200 && !truncated && (etag.is_some() || last_modified.is_some()) {
            let c = Cached { url: url.to_string(), etag, last_modified, content_type: content_type.clone() };
            if cache_write(opts, &url, &c, &body) {
                cache = "stored";
            }
        }
        return Ok(Fetched { url, status, content_type, body, truncated, cache });
    }
    Err(fail(format!("{start}: more than {MAX_REDIRECTS} redirects")))
}

/// A body's reader that fails at its next read once the caller gave up, so a slow body
/// is not read on to the timeout for nobody.
struct Watched<'a, R> {
    inner: R,
    cancel: &'a AtomicBool,
}

impl<R: Read> Read for Watched<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if crate::files::gave_up(self.cancel) {
            return Err(std::io::Error::other("cancelled by the caller"));
        }
        self.inner.read(buf)
    }
}

/// Err once the caller gave up on the fetch.
fn given_up(opts: &Opts) -> Result<(), ToolError> {
    if crate::files::gave_up(&opts.cancel) {
        return Err(crate::files::search_cancelled("webfetch"));
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => " Bad Request",
        401 => " Unauthorized",
        403 => " Forbidden",
        404 => " Not Found",
        410 => " Gone",
        429 => " Too Many Requests",
        500 => " Internal Server Error",
        502 => " Bad Gateway",
        503 => " Service Unavailable",
        504 => " Gateway Timeout",
        _ => "",
    }
}

fn fetch(url: Url, opts: &Opts) -> Result<CommandResult, ToolError> {
    let agent = agent(opts);
    let deadline = std::time::Instant::now() + opts.timeout;
    if opts.format == Format::Markdown && url.path() == "/" && url.query().is_none() {
        let llms = url.join("/llms.txt").expect("a root URL joins /llms.txt");
        // A third of the time at most (and 10 s): a slow or hanging llms.txt leaves the page
        // its time (review YM: it used up the whole timeout, and the root failed).
        let probe = (opts.timeout / 3).min(std::time::Duration::from_secs(10));
        match get(&agent, &llms, opts, std::time::Instant::now() + probe) {
            Ok(f) if f.status == 200 && !is_html(&f.content_type, &f.body) && is_text(&f.content_type, &f.body) => {
                let text = decode(&f.content_type, &f.body);
                if !text.trim().is_empty() {
                    return Ok(result(&url, &f, text, "llms.txt"));
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("webfetch: no llms.txt at {llms}: {}", e.message),
        }
    }
    let f = get(&agent, &url, opts, deadline)?;
    if !(200..300).contains(&f.status) {
        let snippet: String = String::from_utf8_lossy(&f.body).chars().take(200).collect();
        return Err(fail(format!(
            "{} returned HTTP {}{}{}",
            f.url,
            f.status,
            reason(f.status),
            if snippet.trim().is_empty() { String::new() } else { format!(": {}", snippet.trim()) }
        )));
    }
    if is_html(&f.content_type, &f.body) {
        let html = decode(&f.content_type, &f.body);
        let text = match opts.format {
            Format::Html => html,
            Format::Markdown => markdown(&html),
            Format::Text => plain_text(&html),
        };
        return Ok(result(&url, &f, text, "page"));
    }
    if is_text(&f.content_type, &f.body) {
        let text = decode(&f.content_type, &f.body);
        return Ok(result(&url, &f, text, "page"));
    }
    given_up(opts)?;
    save_binary(&url, &f, opts)
}

fn result(requested: &Url, f: &Fetched, text: String, source: &str) -> CommandResult {
    let mut head = format!(
        "Fetched {}{} ({}, {} bytes){}",
        f.url,
        if source == "llms.txt" { format!(" (the site's llms.txt, for {requested})") } else { String::new() },
        if f.content_type.is_empty() { "no content type" } else { &f.content_type },
        f.body.len(),
        if f.truncated { format!("; TRUNCATED at {} bytes (webfetch.maxBytes)", f.body.len()) } else { String::new() }
    );
    if f.cache == "revalidated" {
        head.push_str("; not modified (HTTP 304): the copy kept from an earlier fetch");
    }
    head.push_str("\n\n");
    head.push_str(text.trim());
    CommandResult {
        text: head,
        data: json!({
            "url": f.url.as_str(),
            "requested": requested.as_str(),
            "status": f.status,
            "contentType": f.content_type,
            "bytes": f.body.len(),
            "truncated": f.truncated,
            "source": source,
            "cache": f.cache,
        }).into(),
    }
}

/// A text body as a string: in the `charset` of its content type, else the one an HTML
/// page declares in its first 1024 bytes (`<meta charset=...>` or `content="...;
/// charset=..."`), else UTF-8 (a byte order mark wins over both); what cannot be decoded
/// becomes U+FFFD.
fn decode(content_type: &str, body: &[u8]) -> String {
    let declared = charset_of(content_type).and_then(|l| encoding_rs::Encoding::for_label(l.as_bytes()));
    let encoding = declared
        .or_else(|| {
            let m = mime(content_type);
            let html = m == "text/html" || m == "application/xhtml+xml" || (m.is_empty() && is_html("", body));
            html.then(|| meta_charset(&body[..body.len().min(1024)])).flatten()
        })
        .unwrap_or(encoding_rs::UTF_8);
    encoding.decode(body).0.into_owned()
}

/// `charset=` of a content type.
fn charset_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("charset").then(|| v.trim().trim_matches('"').to_string())
    })
}

/// The encoding an HTML page's `<meta>` tags declare (`charset="..."`, or a `content`
/// with `charset=...`), read as ASCII, as the HTML prescan does: UTF-16 declared there means
/// UTF-8 (the bytes read it were ASCII-compatible), `x-user-defined` windows-1252.
fn meta_charset(head: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("<meta") {
        let tag = &rest[at..];
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        rest = &rest[at + 5..];
        let Some(c) = tag.find("charset") else { continue };
        // `charset` without `=` after it (`name="x-charset-note"`) is no declaration: the
        // next `<meta>` may hold it (review YM: the scan ended there).
        let Some(value) = tag[c + "charset".len()..].trim_start().strip_prefix('=') else { continue };
        let value = value.trim_start();
        let value = value.trim_start_matches(['"', '\'']);
        let end = value.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))).unwrap_or(value.len());
        let encoding = encoding_rs::Encoding::for_label(&value.as_bytes()[..end])?;
        return Some(match encoding.name() {
            "UTF-16LE" | "UTF-16BE" => encoding_rs::UTF_8,
            "x-user-defined" => encoding_rs::WINDOWS_1252,
            _ => encoding,
        });
    }
    None
}

fn mime(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

fn is_html(content_type: &str, body: &[u8]) -> bool {
    let m = mime(content_type);
    if m.is_empty() {
        let head: String = String::from_utf8_lossy(&body[..body.len().min(512)]).trim_start().to_ascii_lowercase();
        return head.starts_with("<!doctype html") || head.starts_with("<html");
    }
    m == "text/html" || m == "application/xhtml+xml"
}

fn is_text(content_type: &str, body: &[u8]) -> bool {
    let m = mime(content_type);
    if m.is_empty() {
        // UTF-8 but for at most an incomplete last character (a body cut at `maxBytes`
        // inside one; review YM: it was taken for binary and refused).
        let utf8 = match std::str::from_utf8(body) {
            Ok(_) => true,
            Err(e) => e.error_len().is_none() && body.len() - e.valid_up_to() < 4,
        };
        return utf8 && !body.contains(&0);
    }
    m.starts_with("text/")
        || m.ends_with("+json")
        || m.ends_with("+xml")
        || matches!(
            m.as_str(),
            "application/json" | "application/xml" | "application/javascript" | "application/x-javascript"
                | "application/ecmascript" | "application/toml" | "application/yaml" | "application/x-yaml"
        )
}

fn extension(content_type: &str, url: &Url) -> String {
    let m = mime(content_type);
    let known = match m.as_str() {
        "application/pdf" => "pdf",
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/x-icon" | "image/vnd.microsoft.icon" => "ico",
        "application/zip" => "zip",
        "application/gzip" | "application/x-gzip" => "gz",
        "application/x-tar" => "tar",
        "application/wasm" => "wasm",
        "audio/mpeg" => "mp3",
        "video/mp4" => "mp4",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_string();
    }
    let from_url = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .and_then(|name| name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()))
        .filter(|e| !e.is_empty() && e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()));
    from_url.unwrap_or_else(|| "bin".to_string())
}

fn save_binary(requested: &Url, f: &Fetched, opts: &Opts) -> Result<CommandResult, ToolError> {
    if f.truncated {
        return Err(fail(format!(
            "{} is a binary body ({}) larger than webfetch.maxBytes ({} bytes); nothing was saved",
            f.url,
            if f.content_type.is_empty() { "no content type" } else { &f.content_type },
            opts.max_bytes
        )));
    }
    let digest = Sha256::digest(&f.body);
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    let dir = opts.data_dir.join("webfetch");
    let path = dir.join(format!("{hex}.{}", extension(&f.content_type, &f.url)));
    write_private(&dir, &path, &f.body).map_err(|e| fail(format!("cannot save {}: {e}", path.display())))?;
    let text = format!(
        "Fetched {} ({}, {} bytes): binary content saved to {} ({} bytes).",
        f.url,
        if f.content_type.is_empty() { "no content type" } else { &f.content_type },
        f.body.len(),
        path.display(),
        f.body.len()
    );
    Ok(CommandResult {
        text,
        data: json!({
            "url": f.url.as_str(),
            "requested": requested.as_str(),
            "status": f.status,
            "contentType": f.content_type,
            "bytes": f.body.len(),
            "truncated": false,
            "source": "page",
            "cache": f.cache,
            "savedTo": path.display().to_string(),
        }).into(),
    })
}

/// Writes `body` to `path` with mode 0600, flushed to disk (a temporary of its own renamed
/// over it through `forge_core::beneath`; the directory 0700).
fn write_private(dir: &Path, path: &Path, body: &[u8]) -> std::io::Result<()> {
    use forge_core::beneath;
    forge_core::paths::create_private_dirs(dir)?;
    let name = path.file_name().ok_or_else(|| std::io::Error::other(format!("{} names no file", path.display())))?;
    beneath::stage(dir, Path::new(name), body, beneath::Mode::Exact(0o600), false, true)?.commit()
}

// --- HTML main content ------------------------------------------------------------------

const ALWAYS_DROPPED: &[&str] = &["script", "style", "noscript", "template", "nav", "aside", "footer", "iframe", "svg"];

fn tag(node: &Node) -> Option<String> {
    match &node.data {
        NodeData::Element { name, .. } => Some(name.local.to_string()),
        _ => None,
    }
}

/// The first element named `name`, in document order. Every walk of a page's tree here is
/// iterative: a page can nest elements as deep as its size allows, and a recursive walk of
/// 100,000 nested `<div>`s overflows a thread's stack (which aborts the server).
fn find(node: &Rc<Node>, name: &str) -> Option<Rc<Node>> {
    let mut stack = vec![node.clone()];
    while let Some(n) = stack.pop() {
        if tag(&n).as_deref() == Some(name) {
            return Some(n);
        }
        stack.extend(n.children.borrow().iter().rev().cloned());
    }
    None
}

/// Deepest nesting handed to the markdown converter (`htmd` walks the tree recursively);
/// a deeper page is converted as plain text, which is walked iteratively. Real pages nest
/// a few dozen levels.
const MAX_MARKDOWN_DEPTH: usize = 256;

/// Whether the tree under `node` nests deeper than `max` levels.
fn deeper_than(node: &Rc<Node>, max: usize) -> bool {
    let mut stack = vec![(node.clone(), 0usize)];
    while let Some((n, depth)) = stack.pop() {
        if depth > max {
            return true;
        }
        stack.extend(n.children.borrow().iter().map(|c| (c.clone(), depth + 1)));
    }
    false
}

/// The main content node and the tags to drop under it.
fn main_content(tree: &Rc<Node>) -> (Rc<Node>, Vec<&'static str>) {
    if let Some(n) = find(tree, "main").or_else(|| find(tree, "article")) {
        return (n, ALWAYS_DROPPED.to_vec());
    }
    let mut drop = ALWAYS_DROPPED.to_vec();
    drop.push("header");
    (find(tree, "body").unwrap_or_else(|| tree.clone()), drop)
}

/// Deepest nesting, estimated from the tags (`forge_domain::html`), of a page given to the
/// HTML parser, whose tree building takes time quadratic in the depth (8,000 levels 0.2 s,
/// 100,000 half a minute). A deeper page's text is taken from its tags alone.
const MAX_PARSED_DEPTH: usize = 2_000;

/// The note before the text of a page too deep for the parser or the converter.
fn too_deep(limit: usize) -> String {
    format!("(This page nests elements more than {limit} levels deep: shown as plain text.)\n\n")
}

fn markdown(html: &str) -> String {
    if forge_domain::html::nesting_depth(html, MAX_PARSED_DEPTH) > MAX_PARSED_DEPTH {
        return too_deep(MAX_PARSED_DEPTH) + &forge_domain::html::strip_tags(html);
    }
    let parser = htmd::HtmlToMarkdown::new();
    let Ok(tree) = parser.html_to_tree(html) else { return html.to_string() };
    let (node, drop) = main_content(&tree);
    if deeper_than(&node, MAX_MARKDOWN_DEPTH) {
        return too_deep(MAX_MARKDOWN_DEPTH) + &text_of(&node, &drop);
    }
    let mut skip = drop.clone();
    skip.push("head");
    let pre_drop = drop.clone();
    htmd::HtmlToMarkdown::builder()
        .skip_tags(skip)
        .add_handler(vec!["pre"], move |h: &dyn htmd::element_handler::Handlers, e: htmd::Element| {
            pre_block(h, e, &pre_drop)
        })
        .build()
        .tree_to_markdown(&node)
}

/// A `<pre>` block as a fenced code block. `<pre><code>` is left to the converter (a fenced
/// block already, with the code's language); the converter gave any other `<pre>` as its
/// text between blank lines, where Markdown joins its lines and drops its indentation
/// (review YN). Its text is taken as written, in a fence longer than any run of backticks
/// in it.
fn pre_block(
    h: &dyn htmd::element_handler::Handlers,
    e: htmd::Element,
    drop: &[&str],
) -> Option<htmd::element_handler::HandlerResult> {
    let only_code = {
        let children = e.node.children.borrow();
        let elements: Vec<_> = children.iter().filter(|c| matches!(c.data, NodeData::Element { .. })).collect();
        let blank_text = children.iter().all(|c| match &c.data {
            NodeData::Text { contents } => contents.borrow().trim().is_empty(),
            _ => true,
        });
        elements.len() == 1 && tag(elements[0]).as_deref() == Some("code") && blank_text
    };
    if only_code {
        return h.fallback(e);
    }
    let text = raw_text(e.node, drop);
    let text = text.trim_end_matches('\n');
    if text.trim().is_empty() {
        return None;
    }
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    Some(format!("\n\n{fence}\n{text}\n{fence}\n\n").into())
}

fn plain_text(html: &str) -> String {
    if forge_domain::html::nesting_depth(html, MAX_PARSED_DEPTH) > MAX_PARSED_DEPTH {
        return too_deep(MAX_PARSED_DEPTH) + &forge_domain::html::strip_tags(html);
    }
    let parser = htmd::HtmlToMarkdown::new();
    let Ok(tree) = parser.html_to_tree(html) else { return html.to_string() };
    let (node, drop) = main_content(&tree);
    text_of(&node, &drop)
}

/// The text under `node` without the `drop` elements, one line per block, runs of blank
/// lines collapsed.
fn text_of(node: &Rc<Node>, drop: &[&str]) -> String {
    let mut out = String::new();
    collect_text(node, drop, &mut out);
    // Collapse runs of blank lines and trailing spaces, except in a `<pre>` block.
    let mut lines: Vec<&str> = vec![];
    for l in out.lines() {
        if let Some(pre) = l.strip_prefix(PRE_LINE) {
            lines.push(pre);
            continue;
        }
        let l = l.trim_end();
        if l.trim().is_empty() && lines.last().is_none_or(|p| p.trim().is_empty()) {
            continue;
        }
        lines.push(l);
    }
    // A `<pre>` block's last line break is the block's end.
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n")
}

/// The text under `node` exactly as written (every text node's contents, in order; `<br>`
/// a line break; the `drop` elements left out: review YN).
fn raw_text(node: &Rc<Node>, drop: &[&str]) -> String {
    let mut out = String::new();
    let mut stack = vec![node.clone()];
    while let Some(n) = stack.pop() {
        match &n.data {
            NodeData::Text { contents } => out.push_str(&contents.borrow()),
            NodeData::Element { name, .. } => {
                let t: &str = &name.local;
                if t == "br" {
                    out.push('\n');
                }
                if drop.contains(&t) {
                    continue;
                }
            }
            _ => {}
        }
        stack.extend(n.children.borrow().iter().rev().cloned());
    }
    // The line break right after `<pre>` is not part of its text: the HTML parser drops it
    // already (review YR: dropping another lost the author's blank first line).
    out
}

/// Marks a line of a `<pre>` block in `collect_text`'s output (a private-use character).
const PRE_LINE: char = '\u{E000}';

/// One step of the text walk: a node to enter, or the end of a block element.
enum Step {
    Enter(Rc<Node>),
    EndBlock,
}

fn collect_text(node: &Rc<Node>, drop: &[&str], out: &mut String) {
    let mut stack = vec![Step::Enter(node.clone())];
    while let Some(step) = stack.pop() {
        let node = match step {
            Step::EndBlock => {
                if !out.ends_with('\n') {
                    out.push('\n');
                }
                continue;
            }
            Step::Enter(n) => n,
        };
        match &node.data {
            NodeData::Text { contents } => {
                let t = contents.borrow();
                let collapsed = t.split_whitespace().collect::<Vec<_>>().join(" ");
                // Only white space: one space between what stands around it (review YM:
                // `<b>Hello</b> <i>world</i>` was `Helloworld`).
                if collapsed.is_empty() && !t.is_empty() && !out.is_empty() && !out.ends_with([' ', '\n']) {
                    out.push(' ');
                }
                if !collapsed.is_empty() {
                    if t.starts_with(char::is_whitespace) && !out.ends_with([' ', '\n']) && !out.is_empty() {
                        out.push(' ');
                    }
                    out.push_str(&collapsed);
                    if t.ends_with(char::is_whitespace) {
                        out.push(' ');
                    }
                }
                continue;
            }
            NodeData::Element { name, .. } => {
                let t: &str = &name.local;
                if drop.contains(&t) || t == "head" {
                    continue;
                }
                if t == "pre" {
                    // Preformatted: its text as it is, line breaks and indentation kept
                    // (review YM: code blocks came out on one line, words glued). Each of
                    // its lines is marked, so that `text_of` neither trims nor collapses it.
                    if !out.ends_with('\n') && !out.is_empty() {
                        out.push('\n');
                    }
                    for line in raw_text(&node, drop).split('\n') {
                        out.push(PRE_LINE);
                        out.push_str(line);
                        out.push('\n');
                    }
                    continue;
                }
                if forge_domain::html::BLOCKS.contains(&t) {
                    if !out.ends_with('\n') && !out.is_empty() {
                        out.push('\n');
                    }
                    stack.push(Step::EndBlock);
                }
            }
            _ => {}
        }
        stack.extend(node.children.borrow().iter().rev().map(|c| Step::Enter(c.clone())));
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    /// The depth of the parsed tree under `<body>` (or the document), walked iteratively.
    fn parsed_depth(html: &str) -> usize {
        let tree = htmd::HtmlToMarkdown::new().html_to_tree(html).unwrap();
        // (`tree` must outlive the walk: dropping the document empties every node under it.)
        let top = find(&tree, "body").unwrap_or_else(|| tree.clone());
        let mut stack = vec![(top, 0usize)];
        let mut max = 0;
        while let Some((n, d)) = stack.pop() {
            if matches!(n.data, NodeData::Element { .. }) {
                max = max.max(d);
            }
            stack.extend(n.children.borrow().iter().map(|c| (c.clone(), d + 1)));
        }
        max
    }

    /// The estimate from the tags (`forge_domain::html`) against html5ever's tree, over
    /// random pages of the constructs that move either of them: it may run high, and low
    /// only by a constant factor and a few levels (the parser's own wrappers, implied
    /// `tbody`, list items), never by a growing amount.
    #[test]
    fn the_depth_estimate_is_never_far_below_the_parsed_depth() {
        let vocabulary = [
            "<div>", "</div>", "<div/>", "<b>", "</b>", "<i a\">", "<span x='>'>", "</span>", "<p>", "</p>", "<svg>",
            "<path/>", "</svg>", "<math>", "<mi/>", "</math>", "<!--", "-->", "<!-->", "--!>", "<script>", "</script>",
            "<table>", "<td>", "<tr>", "</table>", "<ul>", "<li>", "</ul>", "<dl>", "<dd>", "</ ", ">", "\"", "'", "x",
            "<textarea>", "</textarea>", "<template>", "</template>", "<a>", "</a>", "<select>", "<option>", "<br/>",
            "<font>", "<![CDATA[", "]]>", "<nobr>", "<button>", "<form>", "<h1>", "<pre>", "<style>", "</style>",
            "<title>", "</title>", "<foreignObject>", "</foreignObject>", "<desc>", "<mi>", "</mi>", "<mtext>",
            "<annotation-xml>", "<annotation-xml encoding=\"text/html\">", "<g>", "</g>", "<xmp>", "<plaintext>",
            "<noscript>", "<iframe>", "</iframe>",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2_000 {
            // A random prefix, then (every other round) a long run of one nesting tag, then
            // more random tokens: what a page built to fool the estimate looks like.
            // Contexts that change how what follows is read.
            let contexts = [
                "<svg>", "<math>", "<svg><foreignObject>", "<math><mi>", "<math><annotation-xml>", "<svg><style>",
                "<svg><script>", "<svg><title>", "<svg><desc>", "<table>", "<select>", "<textarea>", "<template>",
                "<p>", "<b>", "<a>", "<li>", "<!--", "<i a\">",
            ];
            let mut page = String::new();
            for _ in 0..(next() % 4) {
                page.push_str(contexts[(next() % contexts.len() as u64) as usize]);
                for _ in 0..(next() % 4) {
                    page.push_str(vocabulary[(next() % vocabulary.len() as u64) as usize]);
                }
            }
            if round % 2 == 0 {
                let tag = ["<div>", "<div/>", "<b>", "<span>", "<table>", "<ul>"][(next() % 6) as usize];
                page.push_str(&tag.repeat((next() % 400) as usize));
            }
            for _ in 0..(next() % 200) {
                page.push_str(vocabulary[(next() % vocabulary.len() as u64) as usize]);
            }
            let estimate = forge_domain::html::nesting_depth(&page, 100_000);
            let parsed = parsed_depth(&page);
            // Within a constant factor and a few levels: what matters is that no construct
            // nests ever deeper in the parser while the estimate stays put.
            assert!(parsed <= 2 * estimate + 8, "round {round}: parsed {parsed} > 2 × estimated {estimate} + 8: {page}");
        }
    }
}
