//! A lexical look at HTML, for pages that must not reach a tree builder: whether a page
//! nests its elements deeper than a limit, estimated from its tags alone, and its text with
//! the tags stripped.
//!
//! Why: html5ever builds the tree of a page nesting `n` elements in time quadratic in `n`
//! (8,000 nested `<div>`s take 0.2 s, 100,000 about half a minute, and 10 MiB hold a
//! million), so `forge.webfetch` estimates the depth first and converts a page that nests
//! deeper than it should with [`strip_tags`], in linear time.
//!
//! The estimate must not run low by a growing amount, whatever the page does to the
//! tokenizer, and may run high (that costs a plain-text rendering, never a slow parse). So
//! where this model and the parser could disagree on where they stand, it reads more than
//! the parser, never less: comments and the content of raw text elements (`script`,
//! `style`, `textarea`, `title`, ...) are read as markup (only declarations, `<?...>` and
//! `</ x>` are skipped to their `>`, as the parser skips them). It keeps a stack of the open
//! elements with their namespace: a start tag opens one unless it is void or one whose end
//! tag HTML lets be implied (`p`, `li`, `td`, ...; a table and a list count the levels
//! their rows, cells and items make); `/>` closes nothing on an HTML element (the parser
//! ignores it there) but does in svg/math content, which ends at a breakout tag and is
//! read by HTML's rules inside integration points; an end tag closes its nearest open
//! element and what is above it (a formatting element only when on top, as the adoption
//! agency keeps what it encloses), and nothing inside raw text but the raw text element's
//! own. Checked against html5ever on random pages (`webfetch.rs`): the parser's depth
//! stays within twice the estimate and a few levels.

/// Elements without content.
const VOID: &[&str] =
    &["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"];
/// Elements whose end tag may be left out (closed by the next of their kind or by the
/// parent's end): they do not nest by themselves.
const IMPLIED_END: &[&str] = &[
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "tbody", "thead", "tfoot", "rb", "rt", "rp", "rtc",
    "colgroup", "caption",
];
/// Elements whose content is text up to their end tag.
const RAW_TEXT: &[&str] =
    &["script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "plaintext"];
/// Elements that start a new line in a page's text ([`strip_tags`], and webfetch's text of
/// a parsed page).
pub const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "br",
    "li",
    "ul",
    "ol",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "blockquote",
    "tr",
    "table",
    "dt",
    "dd",
    "hr",
    "header",
    "footer",
    "nav",
    "aside",
    "figure",
    "figcaption",
];

/// One lexical piece of a page.
enum Piece<'a> {
    Text(&'a str),
    /// A start tag: (lowercase name, self-closing `/>`, an `encoding` attribute naming
    /// HTML: what makes `annotation-xml` an HTML integration point).
    Start(String, bool, bool),
    /// An end tag (lowercase name).
    End(String),
}

/// What [`pieces`] does after handing over a piece.
#[derive(PartialEq)]
enum Flow {
    Go,
    Stop,
    /// (After a start tag) the element's content is raw text: skip to its end tag.
    RawText,
    /// (After a start tag) the element's content is raw text for the parser, but hand over
    /// its tags anyway, with no comments or declarations (the parser sees none there) and
    /// each tag ending at its first `>`, until the element's end tag.
    MarkupText,
}

/// Splits `html` into text and tags as the HTML tokenizer does for these purposes:
/// comments, declarations and processing instructions are skipped; the content of an
/// element is skipped to its end tag when the consumer says it is raw text (which depends
/// on where it stands: `<style>` in HTML is, in `svg` it is not).
fn pieces(html: &str, skip_comments: bool, mut each: impl FnMut(Piece<'_>) -> Flow) {
    let b = html.as_bytes();
    let mut i = 0;
    // Inside an element handed over as `MarkupText`: its end tag.
    let mut raw_until: Option<String> = None;
    while i < b.len() {
        let Some(lt) = memchr(b'<', &b[i..]).map(|k| i + k) else {
            each(Piece::Text(&html[i..]));
            return;
        };
        if lt > i && each(Piece::Text(&html[i..lt])) == Flow::Stop {
            return;
        }
        let rest = &b[lt..];
        let text_here = raw_until.is_some() && (rest.starts_with(b"<!") || rest.starts_with(b"<?"));
        if text_here || (!skip_comments && rest.starts_with(b"<!--")) {
            if each(Piece::Text(&html[lt..lt + 1])) == Flow::Stop {
                return;
            }
            i = lt + 1;
            continue;
        }
        if rest.starts_with(b"<!--") {
            i = comment_end(b, lt + 4);
            continue;
        }
        if rest.starts_with(b"<!") || rest.starts_with(b"<?") {
            i = memchr(b'>', &b[lt..]).map_or(b.len(), |k| lt + k + 1);
            continue;
        }
        let closing = rest.starts_with(b"</");
        let name_at = if closing { lt + 2 } else { lt + 1 };
        if !b.get(name_at).is_some_and(u8::is_ascii_alphabetic) {
            if closing {
                // `</>` is dropped, `</ x>` is a comment to the next `>`.
                i = memchr(b'>', &b[lt..]).map_or(b.len(), |k| lt + k + 1);
                continue;
            }
            // Not a tag: a literal `<`.
            if each(Piece::Text(&html[lt..lt + 1])) == Flow::Stop {
                return;
            }
            i = lt + 1;
            continue;
        }
        // The name runs to whitespace, `/` or `>`.
        let name_end = b[name_at..]
            .iter()
            .position(|c| c.is_ascii_whitespace() || *c == b'/' || *c == b'>')
            .map_or(b.len(), |k| name_at + k);
        let name = String::from_utf8_lossy(&b[name_at..name_end]).to_ascii_lowercase();
        let ended = if raw_until.is_some() {
            memchr(b'>', &b[name_end..]).map(|k| (name_end + k, k > 0 && b[name_end + k - 1] == b'/'))
        } else {
            tag_end(b, name_end)
        };
        let Some((gt, self_closing)) = ended else {
            return;
        };
        i = gt + 1;
        if closing {
            if raw_until.as_deref() == Some(name.as_str()) {
                raw_until = None;
            }
            if each(Piece::End(name)) == Flow::Stop {
                return;
            }
            continue;
        }
        let end = format!("</{name}");
        let html_encoding = {
            let attrs = String::from_utf8_lossy(&b[name_end..gt]).to_ascii_lowercase();
            attrs.contains("encoding") && (attrs.contains("text/html") || attrs.contains("application/xhtml+xml"))
        };
        let raw_name = name.clone();
        match each(Piece::Start(name, self_closing, html_encoding)) {
            Flow::Go => continue,
            Flow::Stop => return,
            Flow::MarkupText => {
                raw_until = Some(raw_name);
                continue;
            }
            Flow::RawText => {}
        }
        {
            // Skip to the matching end tag (case-insensitive): `</name` then whitespace,
            // `/` or `>`.
            let mut k = i;
            loop {
                let Some(d) = memchr(b'<', &b[k..]) else {
                    return;
                };
                k += d;
                let after = k + end.len();
                if b.len() >= after
                    && b[k..after].eq_ignore_ascii_case(end.as_bytes())
                    && b.get(after).is_none_or(|c| c.is_ascii_whitespace() || *c == b'/' || *c == b'>')
                {
                    break;
                }
                k += 1;
            }
            i = tag_end(b, k + end.len()).map_or(b.len(), |(g, _)| g + 1);
        }
    }
}

/// Where a comment whose text starts at `from` ends (just past it): `-->`, `--!>`, or at
/// once for `<!-->` and `<!--->`; the end of the page when it does not end.
fn comment_end(b: &[u8], from: usize) -> usize {
    let rest = &b[from..];
    if rest.starts_with(b">") {
        return from + 1;
    }
    if rest.starts_with(b"->") {
        return from + 2;
    }
    let mut k = from;
    while let Some(d) = memchr(b'-', &b[k..]) {
        k += d;
        if b[k..].starts_with(b"-->") {
            return k + 3;
        }
        if b[k..].starts_with(b"--!>") {
            return k + 4;
        }
        k += 1;
    }
    b.len()
}

/// The `>` that ends a tag whose attributes start at `from`, and whether the tag is
/// self-closing (`/>`). Quotes count only around an attribute value (after `=`), as the
/// tokenizer reads them: a quote inside an attribute name is part of the name.
fn tag_end(b: &[u8], from: usize) -> Option<(usize, bool)> {
    let mut k = from;
    let skip_ws = |k: &mut usize| {
        while b.get(*k).is_some_and(u8::is_ascii_whitespace) {
            *k += 1;
        }
    };
    loop {
        skip_ws(&mut k);
        match b.get(k)? {
            b'>' => return Some((k, false)),
            b'/' => {
                if b.get(k + 1) == Some(&b'>') {
                    return Some((k + 1, true));
                }
                k += 1;
                continue;
            }
            _ => {}
        }
        // An attribute name (its first character may be `=`), to whitespace, `/`, `>`, `=`.
        k += 1;
        while let Some(&c) = b.get(k) {
            if c.is_ascii_whitespace() || c == b'/' || c == b'>' || c == b'=' {
                break;
            }
            k += 1;
        }
        skip_ws(&mut k);
        if b.get(k) != Some(&b'=') {
            continue;
        }
        k += 1;
        skip_ws(&mut k);
        match b.get(k)? {
            q @ (b'"' | b'\'') => {
                let close = memchr(*q, &b[k + 1..])?;
                k += close + 2;
            }
            b'>' => return Some((k, false)),
            _ => {
                while let Some(&c) = b.get(k) {
                    if c.is_ascii_whitespace() || c == b'>' {
                        break;
                    }
                    k += 1;
                }
            }
        }
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == needle)
}

/// Start tags that leave `svg`/`math` content for HTML (the parser pops the foreign
/// elements first). Not `font`, which leaves only with some attributes: taken as staying,
/// which can only read high.
const BREAKOUT: &[&str] = &[
    "b",
    "big",
    "blockquote",
    "body",
    "br",
    "center",
    "code",
    "dd",
    "div",
    "dl",
    "dt",
    "em",
    "embed",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "hr",
    "i",
    "img",
    "li",
    "listing",
    "menu",
    "meta",
    "nobr",
    "ol",
    "p",
    "pre",
    "ruby",
    "s",
    "small",
    "span",
    "strong",
    "strike",
    "sub",
    "sup",
    "table",
    "tt",
    "u",
    "ul",
    "var",
];

/// Formatting elements (the adoption agency's).
const FORMATTING: &[&str] =
    &["a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u"];

/// The namespace of an open element.
#[derive(Clone, Copy, PartialEq)]
enum Ns {
    Html,
    Svg,
    Math,
}

/// Whether a foreign element of namespace `ns` is read by HTML's rules inside (an HTML
/// integration point in svg, a MathML text integration point, or `annotation-xml` whose
/// `encoding` names HTML).
fn integration(ns: Ns, name: &str, html_encoding: bool) -> bool {
    match ns {
        Ns::Svg => matches!(name, "foreignobject" | "desc" | "title"),
        Ns::Math => matches!(name, "mi" | "mo" | "mn" | "ms" | "mtext") || (name == "annotation-xml" && html_encoding),
        Ns::Html => false,
    }
}

/// The levels an open element adds to the estimate: a table holds its rows and cells,
/// whose tags are not counted (their end tags may be implied), and the parser nests
/// tbody, tr and td in it; a list holds its items.
fn weight(name: &str) -> usize {
    match name {
        "table" => 4,
        // Their items (li, dt, dd: implied ends, not counted) are a level of their own.
        "ul" | "ol" | "dl" | "menu" => 2,
        _ => 1,
    }
}

/// The deepest nesting of `html`'s elements as estimated from its tags (module docs), or
/// `limit + 1` as soon as it is deeper than `limit` (the scan stops there).
pub fn nesting_depth(html: &str, limit: usize) -> usize {
    // The open elements: (name, namespace, whether its content is read as foreign content:
    // an svg/math element that is not an integration point).
    let mut open: Vec<(String, Ns, bool)> = vec![];
    let mut levels = 0usize;
    let mut max = 0usize;
    // Inside a raw text element (HTML content): its name. Its tags are counted (high) but
    // other end tags close nothing: the parser sees only text there.
    let mut raw: Option<String> = None;
    // Comments are read as markup: skipping one is only safe where this model and the parser
    // agree on where they stand (in raw text, or in a CDATA section of svg content, the
    // parser sees no comment).
    pieces(html, false, |p| {
        let foreign_here = |open: &Vec<(String, Ns, bool)>| open.last().is_some_and(|(_, _, foreign)| *foreign);
        let flow = match p {
            Piece::Start(name, _, _) if raw.is_some() => {
                levels += weight(&name);
                open.push((name, Ns::Html, false));
                Flow::Go
            }
            Piece::Start(name, self_closing, html_encoding) => {
                let n = name.as_str();
                if foreign_here(&open) && !BREAKOUT.contains(&n) {
                    // A foreign element, of its parent's namespace (or svg's, math's): `/>`
                    // closes it; its content is markup, never raw text, unless it is an
                    // integration point.
                    if !self_closing {
                        // (`<svg>` in math content is a MathML element, except in
                        // `annotation-xml`; `<math>` in svg content is an svg element.)
                        let (parent_name, parent) = open.last().map_or(("", Ns::Html), |(t, ns, _)| (t.as_str(), *ns));
                        let ns = if n == "svg" && parent == Ns::Math && parent_name == "annotation-xml" {
                            Ns::Svg
                        } else {
                            parent
                        };
                        let foreign = !integration(ns, n, html_encoding);
                        levels += 1;
                        open.push((name, ns, foreign));
                    }
                    Flow::Go
                } else {
                    // Back to HTML: the parser closes foreign elements up to an HTML
                    // element or an integration point.
                    while foreign_here(&open) {
                        if let Some((top, ..)) = open.pop() {
                            levels -= weight(&top);
                        }
                    }
                    if n == "svg" || n == "math" {
                        if !self_closing {
                            levels += 1;
                            let ns = if n == "svg" { Ns::Svg } else { Ns::Math };
                            open.push((name, ns, true));
                        }
                        Flow::Go
                    } else if VOID.contains(&n) || IMPLIED_END.contains(&n) {
                        Flow::Go
                    } else if RAW_TEXT.contains(&n) {
                        // Its content is read as markup here (high), not skipped as the
                        // parser skips it: skipping is only safe where this model and the
                        // parser agree on where they stand. Its end tag closes what it
                        // opened.
                        raw = Some(name.clone());
                        levels += 1;
                        open.push((name, Ns::Html, false));
                        Flow::MarkupText
                    } else {
                        levels += weight(n);
                        open.push((name, Ns::Html, false));
                        Flow::Go
                    }
                }
            }
            Piece::End(name) if raw.as_ref().is_some_and(|r| *r != name) => Flow::Go,
            Piece::End(name) => {
                raw = None;
                // Closes the nearest open element of that name and everything above it:
                // the parser closes at least that much for most end tags (an HTML end tag
                // in svg/math content, a raw text element's), and closing too much can only
                // put this model in HTML content where the parser is in foreign content,
                // which reads high. Formatting elements close only on top: the parser's
                // adoption agency keeps what they enclose open.
                if let Some(at) = open.iter().rposition(|(t, ..)| *t == name) {
                    if !FORMATTING.contains(&name.as_str()) || at + 1 == open.len() {
                        for (t, ..) in open.drain(at..) {
                            levels -= weight(&t);
                        }
                    }
                }
                Flow::Go
            }
            Piece::Text(_) => Flow::Go,
        };
        max = max.max(levels);
        if max > limit {
            Flow::Stop
        } else {
            flow
        }
    });
    max.min(limit + 1)
}

/// The text of `html` without its tags, comments and raw text elements (scripts, styles),
/// one line per block element, whitespace collapsed and the common entities decoded.
pub fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    pieces(html, true, |p| {
        let raw = matches!(&p, Piece::Start(name, ..) if RAW_TEXT.contains(&name.as_str()));
        text_piece(&mut out, p);
        if raw {
            Flow::RawText
        } else {
            Flow::Go
        }
    });
    out.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n")
}

/// Adds one piece of a page to [`strip_tags`]'s text.
fn text_piece(out: &mut String, p: Piece<'_>) {
    match p {
        Piece::Text(t) => {
            let decoded = decode_entities(t);
            let words: Vec<&str> = decoded.split_whitespace().collect();
            if words.is_empty() {
                if !decoded.is_empty() && !out.is_empty() && !out.ends_with([' ', '\n']) {
                    out.push(' ');
                }
                return;
            }
            if decoded.starts_with(char::is_whitespace) && !out.is_empty() && !out.ends_with([' ', '\n']) {
                out.push(' ');
            }
            out.push_str(&words.join(" "));
            if decoded.ends_with(char::is_whitespace) {
                out.push(' ');
            }
        }
        Piece::Start(name, ..) | Piece::End(name) => {
            if BLOCKS.contains(&name.as_str()) && !out.is_empty() && !out.ends_with('\n') {
                let trimmed = out.trim_end_matches(' ').len();
                out.truncate(trimmed);
                out.push('\n');
            }
        }
    }
}

/// `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;`, `&#39;`, `&nbsp;` and numeric references;
/// anything else is kept as written.
fn decode_entities(t: &str) -> std::borrow::Cow<'_, str> {
    if !t.contains('&') {
        return t.into();
    }
    let mut out = String::with_capacity(t.len());
    let mut rest = t;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail.find(';').filter(|&k| k <= 10);
        let decoded = end.and_then(|k| {
            let name = &tail[1..k];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                _ => name
                    .strip_prefix("#x")
                    .or_else(|| name.strip_prefix("#X"))
                    .map(|h| u32::from_str_radix(h, 16))
                    .or_else(|| name.strip_prefix('#').map(str::parse::<u32>))
                    .and_then(Result::ok)
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, k))
        });
        match decoded {
            Some((c, k)) => {
                out.push(c);
                rest = &tail[k + 1..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_estimated_from_the_tags_and_never_low() {
        let deep = |n: usize| format!("{}x{}", "<div>".repeat(n), "</div>".repeat(n));
        let depth = |html: &str| nesting_depth(html, 10_000);
        for (html, want) in [
            ("plain text", 0),
            ("<html><body><p>a<p>b</body></html>", 2),
            (deep(5).as_str(), 5),
            // Void and implied-end elements do not nest.
            ("<div><br><img src=x><hr/><input></div>", 1),
            ("<ul><li>a<li>b<li>c</ul>", 2),
            ("<table><tr><td>a<td>b<tr><td>c</table>", 4),
            // `/>` closes nothing on an HTML element: the parser leaves it open.
            ("<div/><div/><div/>", 3),
            // ... but does inside svg and math, until a tag breaks out of them.
            ("<svg><path/><path/><g><rect/></g></svg>", 2),
            ("<svg/><div></div>", 1),
            ("<svg><path/><div/><div/>", 2),
            ("<math><mi/></math><div>", 1),
            // Inside svg/math, `style` and `script` are elements like any other: their
            // content is markup (a breakout tag then closes them with the svg).
            ("<svg><style><div><div><div><div><div>", 5),
            ("<svg><script><div><div>", 2),
            // Integration points read their content by HTML's rules: nothing is closed.
            ("<svg><foreignObject><div><div>", 4),
            ("<math><mi><div><div>", 4),
            // ... by namespace: `mi` in svg is an svg element.
            ("<svg><mi><xmp><b>", 3),
            // `svg` in math content is a MathML element (its `title` is no integration point).
            ("<math><svg><title><xmp><b><b>", 4),
            ("<svg><foreignObject><style><div></style><div>", 4),
            // annotation-xml is one only with an HTML encoding.
            ("<math><annotation-xml><style><g><xmp><b>", 5),
            ("<math><annotation-xml encoding='text/html'><style><div></style><div>", 4),
            // A stray end tag closes nothing; a mismatched one closes up to its element.
            ("<div><div></b></span>x", 2),
            ("<div><span></div><div>", 2),
            ("<b><div></b><b><div></b>", 4),
            // Comments and declarations hide their tags, ended as the parser ends them; raw
            // text is read as markup (high), its end tag closing what it opened.
            // Declarations are skipped to their `>` as the parser does; comments are read
            // as markup (high).
            ("<!DOCTYPE html><!-- <div><div> --><div></div>", 3),
            ("<!--><div><div>", 2),
            ("<!---><div>", 1),
            ("<!-- a --!><div>", 1),
            ("</ x><div>", 1),
            ("</><div>", 1),
            ("<script>if (a<b) { x = '<div><div><div>'; }</script><div></div>", 4),
            ("<script>x</scriptx><div></script><div>", 2),
            // Inside raw text no comment starts and no other end tag closes anything.
            ("<textarea><!--</textarea><div><div>", 2),
            ("<div><div><script></div></div></script><div>", 3),
            ("<STYLE>p > a { }</style><DIV></DIV>", 1),
            // Quotes count around attribute values only.
            ("<div title=\"a > b\"><span>x</span></div>", 2),
            ("<i a\"><div><div>", 3),
            ("<div a='x\"y'><div>", 2),
            ("<div a=b\"><div>", 2),
            // Unclosed tags only add up.
            ("<div><div><div>", 3),
            ("a < b and c <3", 0),
        ] {
            assert_eq!(depth(html), want, "{html}");
        }
        assert_eq!(depth(&deep(9_000)), 9_000);
        // The scan stops just past the limit, whatever the page's size.
        assert_eq!(nesting_depth(&deep(100_000), 2_000), 2_001);
        assert_eq!(nesting_depth(&"<div/>".repeat(1_100_000), 2_000), 2_001);
        assert_eq!(nesting_depth(&"<b><div></b>".repeat(5_000), 2_000), 2_001);
        assert_eq!(nesting_depth(&format!("<svg><style>{}", "<div>".repeat(100_000)), 2_000), 2_001);
        assert_eq!(nesting_depth(&"<svg><foreignObject><div>".repeat(1_000), 2_000), 2_001);
    }

    #[test]
    fn text_is_the_page_without_its_tags() {
        for (html, want) in [
            ("<p>Hello <b>world</b></p><p>Second</p>", "Hello world\nSecond"),
            ("<div>a</div><div>b</div>", "a\nb"),
            ("<script>var x = 1;</script><style>p{}</style><p>kept</p>", "kept"),
            (
                "<!-- hidden --><p>1 &lt; 2 &amp;&amp; 3 &gt; 2 &#65;&#x42; &nbsp;x&unknown;</p>",
                "1 < 2 && 3 > 2 AB x&unknown;",
            ),
            ("<span>a</span> <span>b</span>", "a b"),
            ("a < b", "a < b"),
            ("<div", ""),
        ] {
            assert_eq!(strip_tags(html), want, "{html}");
        }
        let deep = format!("{}deep text{}", "<div>".repeat(100_000), "</div>".repeat(100_000));
        assert_eq!(strip_tags(&deep), "deep text");
    }

    #[test]
    fn no_input_panics() {
        // Random pages from the characters that steer the scanner, multibyte ones included.
        let alphabet: Vec<char> = "<>/!-?\"'= &#;xa1pdivscriptSTYLE\u{e9}\u{1F600}\n".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..3_000 {
            let len = (seed % 64) as usize;
            let page: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            let _ = nesting_depth(&page, 8);
            let _ = strip_tags(&page);
        }
    }
}
