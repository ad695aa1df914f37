//! A lexical look at HTML, for pages that must not reach a tree builder: how deep a page
//! nests its elements, estimated from its tags alone, and its text with the tags stripped.
//!
//! Why: html5ever builds the tree of a page nesting `n` elements in time quadratic in `n`
//! (8,000 nested `<div>`s take 0.2 s, 100,000 about half a minute, and 10 MiB hold a
//! million), so `forge.webfetch` estimates the depth first and converts a page that nests
//! deeper than it should with [`strip_tags`], in linear time.
//!
//! The estimate counts every start tag that is not void, self-closed or one whose end tag
//! HTML lets be implied (`p`, `li`, `td`, ...), minus end tags; raw text (`script`, `style`,
//! `textarea`, `title`), comments and declarations are skipped. It can only run high on
//! sloppy HTML that leaves other elements open, which costs a plain-text rendering, never a
//! slow parse.

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
/// Elements that start a new line in [`strip_tags`]'s text.
const BLOCKS: &[&str] = &[
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
    /// A start tag: (lowercase name, self-closed).
    Start(String, bool),
    /// An end tag (lowercase name).
    End(String),
}

/// Splits `html` into text and tags, skipping comments, declarations and the content of
/// raw text elements (which is yielded as nothing).
fn pieces(html: &str, mut each: impl FnMut(Piece<'_>)) {
    let b = html.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let Some(lt) = memchr(b'<', &b[i..]).map(|k| i + k) else {
            each(Piece::Text(&html[i..]));
            return;
        };
        if lt > i {
            each(Piece::Text(&html[i..lt]));
        }
        let rest = &html[lt..];
        if let Some(comment) = rest.strip_prefix("<!--") {
            i = comment.find("-->").map_or(b.len(), |k| lt + 4 + k + 3);
            continue;
        }
        if rest.starts_with("<!") || rest.starts_with("<?") {
            i = memchr(b'>', &b[lt..]).map_or(b.len(), |k| lt + k + 1);
            continue;
        }
        let (closing, name_at) = if rest.starts_with("</") { (true, lt + 2) } else { (false, lt + 1) };
        let name_end = b[name_at..]
            .iter()
            .position(|c| !c.is_ascii_alphanumeric() && *c != b'-' && *c != b':')
            .map_or(b.len(), |k| name_at + k);
        if name_end == name_at || !b[name_at].is_ascii_alphabetic() {
            // Not a tag: a literal `<`.
            each(Piece::Text(&html[lt..lt + 1]));
            i = lt + 1;
            continue;
        }
        let name = html[name_at..name_end].to_ascii_lowercase();
        let Some(gt) = tag_end(b, name_end) else {
            return;
        };
        let self_closed = gt > 0 && b[gt - 1] == b'/';
        i = gt + 1;
        if closing {
            each(Piece::End(name));
            continue;
        }
        if RAW_TEXT.contains(&name.as_str()) && !self_closed {
            // Skip to the matching end tag (case-insensitive).
            let end = format!("</{name}");
            let lower = |k: usize| html.get(k..k + end.len()).is_some_and(|s| s.eq_ignore_ascii_case(&end));
            let mut k = i;
            while k < b.len() && !lower(k) {
                k += memchr(b'<', &b[k + 1..]).map_or(b.len() - k, |d| d + 1);
            }
            i = tag_end(b, k).map_or(b.len(), |g| g + 1);
            continue;
        }
        each(Piece::Start(name, self_closed));
    }
}

/// The `>` that ends a tag whose attributes start at `from` (quoted values skipped).
fn tag_end(b: &[u8], from: usize) -> Option<usize> {
    let mut quote = None;
    for (k, &c) in b.iter().enumerate().skip(from) {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(c),
            (None, b'>') => return Some(k),
            _ => {}
        }
    }
    None
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == needle)
}

/// The deepest nesting of `html`'s elements, estimated from its tags (module docs).
pub fn nesting_depth(html: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    pieces(html, |p| match p {
        Piece::Start(name, self_closed) => {
            if !self_closed && !VOID.contains(&name.as_str()) && !IMPLIED_END.contains(&name.as_str()) {
                depth += 1;
                max = max.max(depth);
            }
        }
        Piece::End(name) => {
            if !VOID.contains(&name.as_str()) && !IMPLIED_END.contains(&name.as_str()) {
                depth = depth.saturating_sub(1);
            }
        }
        Piece::Text(_) => {}
    });
    max
}

/// The text of `html` without its tags, comments and raw text elements (scripts, styles),
/// one line per block element, whitespace collapsed and the common entities decoded.
pub fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    pieces(html, |p| match p {
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
        Piece::Start(name, _) | Piece::End(name) => {
            if BLOCKS.contains(&name.as_str()) && !out.is_empty() && !out.ends_with('\n') {
                let trimmed = out.trim_end_matches(' ').len();
                out.truncate(trimmed);
                out.push('\n');
            }
        }
    });
    out.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n")
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
    fn nesting_is_estimated_from_the_tags() {
        let deep = |n: usize| format!("{}x{}", "<div>".repeat(n), "</div>".repeat(n));
        for (html, want) in [
            ("plain text", 0),
            ("<html><body><p>a<p>b</body></html>", 2),
            (deep(5).as_str(), 5),
            // Void, self-closed and implied-end elements do not nest.
            ("<div><br><img src=x><hr/><input></div>", 1),
            ("<ul><li>a<li>b<li>c</ul>", 1),
            ("<table><tr><td>a<td>b<tr><td>c</table>", 1),
            ("<div/><div/><div/>", 0),
            // Comments, declarations and raw text hide their tags.
            ("<!DOCTYPE html><!-- <div><div> --><div></div>", 1),
            ("<script>if (a<b) { x = '<div><div><div>'; }</script><div></div>", 1),
            ("<STYLE>p > a { }</style><DIV></DIV>", 1),
            // A `>` inside a quoted attribute value does not end the tag.
            ("<div title=\"a > b\"><span>x</span></div>", 2),
            // Unclosed tags only add up (an overestimate, never an underestimate).
            ("<div><div><div>", 3),
            ("a < b and c <3", 0),
        ] {
            assert_eq!(nesting_depth(html), want, "{html}");
        }
        assert_eq!(nesting_depth(&deep(100_000)), 100_000);
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
            let _ = nesting_depth(&page);
            let _ = strip_tags(&page);
        }
    }
}
