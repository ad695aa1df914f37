//! `forge.webfetch` over the real binary against local HTTP servers started by the test (a
//! std `TcpListener` thread each; two servers on different ports are different origins):
//! main-content markdown, `llms.txt` first for a site root, binary bodies saved 0600 under
//! the data directory, redirects (same-origin followed, cross-origin refused unless
//! configured), HTTP errors, the size limit and refused schemes. No network is used.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::json;

/// (path, status, content type, extra header, body)
type Route = (&'static str, u16, &'static str, String, Vec<u8>);

struct Server {
    port: u16,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(routes: Vec<Route>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(Mutex::new(vec![]));
        let seen = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    continue;
                }
                let mut if_none_match = None;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        if k.eq_ignore_ascii_case("if-none-match") {
                            if_none_match = Some(v.trim().to_string());
                        }
                    }
                }
                let path = first.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (mut status, ctype, extra, mut body) = match routes.iter().find(|r| r.0 == path) {
                    Some((_, s, c, e, b)) => (*s, *c, e.clone(), b.clone()),
                    None => (404, "text/plain", String::new(), b"no such page".to_vec()),
                };
                // A route with an ETag answers 304 to a request that names it.
                if let Some(tag) = &if_none_match {
                    if extra.contains(&format!("ETag: {tag}\r\n")) {
                        status = 304;
                        body.clear();
                    }
                }
                seen.lock().unwrap().push(if status == 304 { format!("{path} 304") } else { path.clone() });
                // A route whose extra headers start with `Delay: <ms>` answers that late.
                let extra = match extra.strip_prefix("Delay: ").and_then(|r| r.split_once("\r\n")) {
                    Some((ms, rest)) => {
                        std::thread::sleep(std::time::Duration::from_millis(ms.parse().unwrap()));
                        rest.to_string()
                    }
                    None => extra,
                };
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        Server { port, hits }
    }
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

fn html(path: &'static str, body: &str) -> Route {
    (path, 200, "text/html; charset=utf-8", String::new(), body.as_bytes().to_vec())
}

const PAGE: &str = "<!doctype html><html><head><title>T</title><style>.x{color:red}</style></head><body>\
<header><p>SITE BANNER</p></header><nav><a href=\"/a\">NAV LINK</a></nav>\
<main><h1>Install guide</h1><p>Run the <a href=\"/dl\">installer</a> and <em>wait</em>.</p>\
<script>var SECRET_SCRIPT = 1;</script><ul><li>first step</li><li>second step</li></ul></main>\
<footer>FOOTER TEXT</footer></body></html>";

fn client(sb: &Sandbox, repo: &GitRepo, config: Option<serde_json::Value>) -> Client {
    // Local servers only: a proxy from the environment must not see these requests.
    let data_dir = sb.db_path().parent().unwrap().to_path_buf();
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--data-dir").arg(&data_dir);
        for k in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] {
            cmd.env_remove(k);
        }
    });
    let mut init = Init::new(&repo.path);
    if let Some(cfg) = config {
        init = init.config(cfg);
    }
    c.init(&init);
    c
}

#[test]
fn html_becomes_markdown_or_text_from_the_main_content() {
    let server = Server::start(vec![html("/guide", PAGE)]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/guide") }));
    let t = &out.text;
    assert!(t.contains("# Install guide"), "{t}");
    assert!(t.contains("[installer](/dl)") && (t.contains("_wait_") || t.contains("*wait*")), "{t}");
    assert!(t.contains("first step") && t.contains("second step"), "{t}");
    for gone in ["SITE BANNER", "NAV LINK", "FOOTER TEXT", "SECRET_SCRIPT", "color:red"] {
        assert!(!t.contains(gone), "{gone} must be dropped: {t}");
    }
    assert_eq!(out.data["status"], 200);
    assert_eq!(out.data["source"], "page");

    let out = c.tool_ok("webfetch", json!({ "url": server.url("/guide"), "format": "text" }));
    assert!(out.text.contains("Install guide\nRun the installer and wait."), "{}", out.text);
    assert!(!out.text.contains('#') && !out.text.contains("NAV LINK"), "{}", out.text);

    let out = c.tool_ok("webfetch", json!({ "url": server.url("/guide"), "format": "html" }));
    assert!(out.text.contains("<nav><a href=\"/a\">NAV LINK</a></nav>"), "html is the body as sent: {}", out.text);

    let e = c.tool_err("webfetch", json!({ "url": server.url("/guide"), "format": "pdf" }));
    assert_eq!(e.code, -32602, "{e}");
    assert!(e.message.contains("format"), "{e}");
}

/// A page nesting 100,000 elements: converted (as plain text, with a note) without
/// overflowing a stack, and the server keeps serving. A page of ordinary depth is markdown.
#[test]
fn a_deeply_nested_page_does_not_bring_the_server_down() {
    let deep =
        format!("<html><body>{}<p>deep text</p>{}</body></html>", "<div>".repeat(100_000), "</div>".repeat(100_000));
    let fine = format!(
        "<html><body><main>{}<h1>Still markdown</h1>{}</main></body></html>",
        "<div>".repeat(250),
        "</div>".repeat(250)
    );
    let middle =
        format!("<html><body>{}<p>middle text</p>{}</body></html>", "<div>".repeat(1_000), "</div>".repeat(1_000));
    // `<div/>` leaves the div open (HTML ignores the slash there): as deep as the first.
    let selfclosed = format!("<html><body>{}<p>deep text</p></body></html>", "<div/>".repeat(100_000));
    let server = Server::start(vec![
        html("/deep", &deep),
        html("/selfclosed", &selfclosed),
        html("/middle", &middle),
        html("/fine", &fine),
    ]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    for (page, format) in [("/deep", "markdown"), ("/deep", "text"), ("/selfclosed", "markdown")] {
        let out = c.tool_ok("webfetch", json!({ "url": server.url(page), "format": format }));
        let head = &out.text[..out.text.len().min(300)];
        assert!(out.text.contains("deep text") && out.text.contains("shown as plain text"), "{format}: {head}");
    }
    // Deeper than the converter takes, shallow enough for the parser.
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/middle") }));
    let head = &out.text[..out.text.len().min(300)];
    assert!(out.text.contains("middle text") && out.text.contains("more than 256 levels"), "{head}");
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/fine") }));
    assert!(out.text.contains("# Still markdown") && !out.text.contains("plain text"), "{}", out.text);
}

#[test]
fn a_site_root_prefers_llms_txt() {
    let with = Server::start(vec![
        html("/", PAGE),
        ("/llms.txt", 200, "text/plain", String::new(), b"# Project\n\n> Docs for agents.\n".to_vec()),
    ]);
    let without = Server::start(vec![html("/", PAGE)]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let out = c.tool_ok("webfetch", json!({ "url": with.url("/") }));
    assert!(out.text.contains("> Docs for agents."), "{}", out.text);
    assert!(!out.text.contains("Install guide"), "{}", out.text);
    assert_eq!(out.data["source"], "llms.txt");
    assert_eq!(with.hits(), vec!["/llms.txt"], "the page itself is not fetched");
    // Other formats fetch the page itself.
    let out = c.tool_ok("webfetch", json!({ "url": with.url("/"), "format": "html" }));
    assert!(out.text.contains("Install guide"), "{}", out.text);
    // No llms.txt (404): the page, converted.
    let out = c.tool_ok("webfetch", json!({ "url": without.url("") }));
    assert!(out.text.contains("# Install guide"), "{}", out.text);
    assert_eq!(without.hits(), vec!["/llms.txt", "/"]);
}

#[test]
fn binary_bodies_are_saved_under_the_data_dir() {
    let png: Vec<u8> = [&[0x89u8, b'P', b'N', b'G', 0, 0, 1, 2][..], &[7u8; 300][..]].concat();
    let server = Server::start(vec![("/logo.png", 200, "image/png", String::new(), png.clone())]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/logo.png") }));
    let saved = std::path::PathBuf::from(out.data["savedTo"].as_str().expect("savedTo"));
    assert!(saved.starts_with(sb.db_path().parent().unwrap().join("webfetch")), "{}", saved.display());
    assert_eq!(saved.extension().unwrap(), "png");
    assert!(out.text.contains(&saved.display().to_string()) && out.text.contains("308 bytes"), "{}", out.text);
    assert_eq!(std::fs::read(&saved).unwrap(), png);
    assert_eq!(std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777, 0o600);
}

/// `timeout` is for the whole fetch: three same-origin hops of 0.7 s each do not fit in 1 s,
/// though each alone does.
#[test]
fn the_timeout_covers_every_redirect() {
    let server = Server::start(vec![
        ("/hop1", 302, "text/plain", "Delay: 700\r\nLocation: /hop2\r\n".into(), vec![]),
        ("/hop2", 302, "text/plain", "Delay: 700\r\nLocation: /hop3\r\n".into(), vec![]),
        ("/hop3", 200, "text/plain", "Delay: 700\r\n".into(), b"arrived".to_vec()),
    ]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let started = std::time::Instant::now();
    let e = c.tool_err("webfetch", json!({ "url": server.url("/hop1"), "timeout": 1 }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(!e.message.contains("arrived"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_millis(1900), "{:?}", started.elapsed());
    // With room for all three it arrives.
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/hop1"), "timeout": 5 }));
    assert!(out.text.contains("arrived"), "{}", out.text);
}

#[test]
fn redirects_same_origin_followed_cross_origin_refused_unless_configured() {
    let other = Server::start(vec![html("/target", "<html><body><main><p>OTHER ORIGIN</p></main></body></html>")]);
    let target = other.url("/target");
    let server = Server::start(vec![
        html("/page", PAGE),
        ("/moved", 301, "text/plain", "Location: /page\r\n".into(), vec![]),
        ("/away", 302, "text/plain", format!("Location: {target}\r\n"), vec![]),
    ]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/moved") }));
    assert!(out.text.contains("# Install guide"), "{}", out.text);
    assert_eq!(out.data["url"], server.url("/page"));
    let e = c.tool_err("webfetch", json!({ "url": server.url("/away") }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains(&target) && e.message.contains("another origin"), "{e}");
    assert!(other.hits().is_empty(), "the other origin was not contacted");
    drop(c);

    // The repository's own configuration file cannot allow it (a cloned repository must not
    // widen what the tool may do): the key is ignored there.
    repo.write_project_config("[webfetch]\nallowCrossOriginRedirects = true\n");
    let c = client(&sb, &repo, None);
    let e = c.tool_err("webfetch", json!({ "url": server.url("/away") }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(other.hits().is_empty(), "the other origin was not contacted");
    drop(c);

    let c = client(&sb, &repo, Some(json!({ "webfetch": { "allowCrossOriginRedirects": true } })));
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/away") }));
    assert!(out.text.contains("OTHER ORIGIN"), "{}", out.text);
    assert_eq!(out.data["url"], target);
}

#[test]
fn errors_limits_and_schemes() {
    let big = "x".repeat(5000);
    let server = Server::start(vec![("/big.txt", 200, "text/plain", String::new(), big.into_bytes())]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Some(json!({ "webfetch": { "maxBytes": 1000 } })));
    let e = c.tool_err("webfetch", json!({ "url": server.url("/missing") }));
    assert_eq!(e.code, 1006, "{e}");
    assert!(e.message.contains("HTTP 404") && e.message.contains("/missing"), "{e}");
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/big.txt") }));
    assert!(out.text.contains("TRUNCATED at 1000 bytes"), "{}", out.text);
    assert_eq!(out.data["truncated"], true);
    assert_eq!(out.data["bytes"], 1000);
    for bad in ["file:///etc/passwd", "ftp://example.org/x", "not a url"] {
        let e = c.tool_err("webfetch", json!({ "url": bad }));
        assert_eq!(e.code, -32602, "{bad}: {e}");
        assert!(e.message.contains("url"), "{e}");
    }
    let e = c.tool_err("webfetch", json!({ "url": server.url("/big.txt"), "timeout": 0 }));
    assert!(e.message.contains("timeout"), "{e}");
    // Nothing listens here: a connection error names the URL.
    let port = free_port();
    let e = c.tool_err("webfetch", json!({ "url": format!("http://127.0.0.1:{port}/x") }));
    assert!(e.message.contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[test]
fn a_kept_copy_is_revalidated_with_a_conditional_request() {
    let server = Server::start(vec![(
        "/doc.md",
        200,
        "text/markdown",
        "ETag: \"v1\"\r\n".into(),
        b"# Kept\n\nbody one\n".to_vec(),
    )]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/doc.md") }));
    assert!(out.text.contains("body one"), "{}", out.text);
    assert_eq!(out.data["cache"], "stored");
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/doc.md") }));
    assert!(out.text.contains("body one") && out.text.contains("not modified (HTTP 304)"), "{}", out.text);
    assert_eq!(out.data["cache"], "revalidated");
    assert_eq!(server.hits(), vec!["/doc.md", "/doc.md 304"]);
}

/// A session of a loop that runs sandboxed without network cannot fetch through the
/// server (which runs outside the sandbox): 1001, naming the setting. With network, or
/// without a sandbox, it can. Before, a loop agent with `sandbox.network = false` reached
/// the internet and the host's loopback services through `forge-lsp call webfetch`.
#[test]
fn a_loop_sandboxed_without_network_cannot_fetch_through_the_server() {
    let server = Server::start(vec![html("/guide", PAGE)]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    sb.ensure_db();
    let session = "ses_01JLOOPNONET0000000000000";
    {
        let db = sb.db();
        db.insert_loop(&LoopFixture::running(&repo.root_commit, "nonet", session, &repo.path));
        db.insert_loop_session(session, &repo.root_commit, "nonet", "coder", "tok");
        db.conn.execute("UPDATE loops SET sandbox = 1, sandbox_network = 0 WHERE loop_name = 'nonet'", []).unwrap();
    }
    let data_dir = sb.db_path().parent().unwrap().to_path_buf();
    let mut c = sb.stdio_with(|cmd| {
        cmd.arg("--data-dir").arg(&data_dir);
        for k in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] {
            cmd.env_remove(k);
        }
    });
    c.init(&Init::new(&repo.path).session(session).token("tok"));
    let e = c.tool_err("webfetch", json!({ "url": server.url("/guide") }));
    assert_eq!(e.code, 1001, "{e}");
    assert!(e.message.contains("sandbox.network = false") && e.message.contains("nonet"), "{e}");
    sb.db().conn.execute("UPDATE loops SET sandbox_network = 1 WHERE loop_name = 'nonet'", []).unwrap();
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/guide") }));
    assert!(out.text.contains("# Install guide"), "{}", out.text);
}

/// A page in another character set is decoded as its content type (or, for HTML, its
/// `<meta charset>`) says. Before, every body was read as UTF-8 (`caf� na�ve`).
#[test]
fn a_body_is_decoded_in_its_declared_charset() {
    let latin1 = b"<html><body><main><p>caf\xe9 na\xefve</p></main></body></html>".to_vec();
    let meta =
        b"<html><head><meta charset=\"windows-1252\"></head><body><main><p>\x93quoted\x94</p></main></body></html>"
            .to_vec();
    let server = Server::start(vec![
        ("/latin", 200, "text/html; charset=iso-8859-1", String::new(), latin1),
        ("/meta", 200, "text/html", String::new(), meta),
        ("/plain", 200, "text/plain; charset=\"ISO-8859-1\"", String::new(), b"se\xf1or".to_vec()),
        // Only an HTML page's <meta> declares; a text that mentions a charset does not.
        ("/mention", 200, "text/plain", String::new(), "set charset=utf-16 — ok".as_bytes().to_vec()),
        (
            "/utf16",
            200,
            "text/html",
            String::new(),
            "<meta charset=\"utf-16\"><main><p>naïve</p></main>".as_bytes().to_vec(),
        ),
    ]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/latin"), "format": "text" }));
    assert!(out.text.contains("café naïve"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/meta"), "format": "text" }));
    assert!(out.text.contains("\u{201c}quoted\u{201d}"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/plain") }));
    assert!(out.text.contains("señor"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/mention") }));
    assert!(out.text.contains("set charset=utf-16 — ok"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/utf16"), "format": "text" }));
    assert!(out.text.contains("naïve"), "{}", out.text);
}

/// Review YM: a compressed reply is refused (no encoding is asked for, none decoded); text
/// keeps the space between inline elements and a `<pre>` block's lines; a `<meta>` that
/// mentions a charset without declaring one does not end the scan; a UTF-8 body without a
/// content type cut inside a character is still text; a raw UTF-8 `Location` is followed.
#[test]
fn bodies_as_sent_text_as_written() {
    let mut meta =
        b"<html><head><meta name=\"x-charset-note\" content=\"y\"><meta charset=\"iso-8859-1\"></head>".to_vec();
    meta.extend(b"<body><main><p>caf\xe9</p></main></body></html>");
    let server = Server::start(vec![
        ("/gz", 200, "text/html; charset=utf-8", "Content-Encoding: gzip\r\n".to_string(), vec![0x1f, 0x8b, 8, 0, 1, 2]),
        html("/words", "<main><p><b>Hello</b> <i>world</i> and <a href=\"/x\">a link</a> <code>x</code></p><pre>fn main() {\n    println!(\"hi\");\n}</pre></main>"),
        ("/meta", 200, "text/html", String::new(), meta),
        ("/cut", 200, "", String::new(), "é".repeat(2000).into_bytes()),
        ("/moved", 302, "text/plain", "Location: /café\r\n".to_string(), vec![]),
        ("/none", 200, "text/html", "Content-Encoding: none\r\n".to_string(), b"<main><p>plain after all</p></main>".to_vec()),
        html("/pre", "<main><pre>line1\n\n\n    indented\nx<br>y<script>NO</script></pre><p>after</p></main>"),
        ("/caf%C3%A9", 200, "text/plain", String::new(), b"arrived".to_vec()),
        html("/ticks", "<main><pre>a ``` b</pre><pre><code>let x = 1;</code></pre><pre>\n\nblank first</pre></main>"),
    ]);
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, Some(json!({ "webfetch": { "maxBytes": 999 } })));
    let e = c.tool_err("webfetch", json!({ "url": server.url("/gz") }));
    assert!(e.message.contains("Content-Encoding: gzip"), "{e}");
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/words"), "format": "text" }));
    assert!(out.text.contains("Hello world and a link x"), "{}", out.text);
    assert!(out.text.contains("fn main() {\n    println!(\"hi\");\n}"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/meta"), "format": "text" }));
    assert!(out.text.contains("café"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/cut") }));
    assert_eq!(out.data["truncated"], true, "{}", out.text);
    assert!(out.text.contains("éé"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/moved") }));
    assert!(out.text.contains("arrived"), "{}", out.text);
    // Review YN: a coding that compresses nothing is no reason to refuse; a `<pre>` block
    // keeps its blank lines and its `<br>`, and leaves out what is dropped elsewhere.
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/none"), "format": "text" }));
    assert!(out.text.contains("plain after all"), "{}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/pre"), "format": "text" }));
    assert!(out.text.contains("line1\n\n\n    indented\nx\ny\nafter"), "{:?}", out.text);
    assert!(!out.text.contains("NO") && !out.text.contains('\u{E000}'), "{:?}", out.text);
    // As markdown, a `<pre>` without `<code>` is a fenced block as written (it was its text
    // between blank lines, joined and unindented by any Markdown reader); `<pre><code>`
    // stays the converter's fenced block.
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/pre") }));
    assert!(out.text.contains("```\nline1\n\n\n    indented\nx\ny\n```\n"), "{:?}", out.text);
    assert!(!out.text.contains("NO"), "{:?}", out.text);
    let out = c.tool_ok("webfetch", json!({ "url": server.url("/ticks") }));
    assert!(out.text.contains("````\na ``` b\n````"), "{:?}", out.text);
    assert!(out.text.contains("```\nlet x = 1;\n```"), "{:?}", out.text);
    // HTML drops the line break right after `<pre>`, not the blank line after it.
    assert!(out.text.contains("```\n\nblank first\n```"), "{:?}", out.text);
}

/// A server on a free port answering one request with a body of a byte every 20 ms:
/// (its port, a message once the body starts, a message once the reader hung up).
fn slow_body() -> (u16, std::sync::mpsc::Receiver<()>, std::sync::mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let (sending, sent) = std::sync::mpsc::channel();
    let (gone, hung_up) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else { return };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
            line.clear();
        }
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n";
        let _ = stream.write_all(head.as_bytes());
        let _ = sending.send(());
        // A byte every 20 ms, until the reader hangs up (or for at most 30 s).
        for _ in 0..1500 {
            if stream.write_all(b"x").and_then(|_| stream.flush()).is_err() {
                let _ = gone.send(());
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    (port, sent, hung_up)
}

/// A cancelled fetch stops reading its body: before, `$/cancelRequest` answered the call
/// -32800 while the fetch read a slow body on to its timeout for nobody.
#[test]
fn a_cancelled_fetch_stops_reading_its_body() {
    let (port, sent, hung_up) = slow_body();
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let c = client(&sb, &repo, None);
    let id = c.send_request(
        "workspace/executeCommand",
        json!({ "command": "forge.webfetch", "arguments": [{ "url": format!("http://127.0.0.1:{port}/slow"), "timeout": 60 }] }),
    );
    sent.recv_timeout(WAIT).expect("the fetch never reached the server");
    std::thread::sleep(std::time::Duration::from_millis(200));
    c.notify("$/cancelRequest", json!({ "id": id }));
    let r = c.wait_response(id, WAIT);
    assert_eq!(r["error"]["code"], json!(-32800), "{r}");
    hung_up.recv_timeout(std::time::Duration::from_secs(10)).expect("the fetch read on after its cancel");
}
