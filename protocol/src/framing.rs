//! LSP base-protocol framing (`Content-Length: N\r\n\r\n` + body), as pure functions over
//! byte buffers. No I/O: the server's transport, the `forge-lsp call` client and the
//! benchmark client feed the bytes they read into a [`Decoder`] and write what
//! [`encode`] returns.
//!
//! What the decoder guarantees, whatever the input:
//! - memory stays bounded: a header block is at most [`MAX_HEADER`] bytes, a body at most
//!   [`MAX_MESSAGE`]; a larger body is reported ([`Event::TooLarge`]) as soon as its
//!   header is read and then discarded as it arrives, never buffered;
//! - it resynchronizes: bytes that do not start an LSP header (a stray byte, the rest of
//!   a broken frame) are skipped up to the next `Content-Length` header, and reported
//!   once per run ([`Event::Garbage`]), so one bad byte loses no following frame;
//! - it never panics.

/// Largest accepted message body (PROTOCOL.md §8): 64 MiB.
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// Largest accepted header block (all header lines and the empty line).
pub const MAX_HEADER: usize = 8 * 1024;

const CONTENT_LENGTH: &[u8] = b"content-length";
const CONTENT_TYPE: &[u8] = b"content-type";

/// The header of a frame whose body is `len` bytes, with the empty line after it.
pub fn header(len: usize) -> Vec<u8> {
    format!("Content-Length: {len}\r\n\r\n").into_bytes()
}

/// Frames `body`: the `Content-Length` header, the empty line, the body.
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut f = header(body.len());
    f.extend_from_slice(body);
    f
}

/// What the decoder found in the bytes pushed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A complete message body (not validated: it may not even be UTF-8).
    Frame(Vec<u8>),
    /// Bytes that do not start an LSP header were skipped (reported once per run of such
    /// bytes; `sample` is the beginning of the run, lossily decoded).
    Garbage { sample: String },
    /// A header block without a usable `Content-Length` was skipped.
    BadHeader(String),
    /// A body over [`MAX_MESSAGE`] (`length` is `u64::MAX` when the header's number does
    /// not even fit): it is being discarded as it arrives.
    TooLarge { length: u64 },
}

impl Event {
    /// The JSON-RPC error code and message to answer a bad frame with (`None` for a frame).
    /// LSP prescribes -32700 (parse error) for what cannot be read as a message and
    /// -32600 (invalid request) for a message the server refuses.
    pub fn error(&self) -> Option<(i64, String)> {
        match self {
            Event::Frame(_) => None,
            Event::Garbage { sample } => Some((
                -32700,
                format!(
                    "Parse error: expected an LSP header (`Content-Length: N`), got {sample:?}; skipping to the next Content-Length header"
                ),
            )),
            Event::BadHeader(why) => Some((-32700, format!("Parse error: {why}"))),
            Event::TooLarge { length } => Some((
                -32600,
                if *length == u64::MAX {
                    format!("Invalid Request: message length exceeds the limit of {MAX_MESSAGE} bytes (64 MiB); its body is skipped")
                } else {
                    format!("Invalid Request: message of {length} bytes exceeds the limit of {MAX_MESSAGE} bytes (64 MiB); its body is skipped")
                },
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Body(usize),
    Discard(u64),
}

/// An incremental frame decoder: [`Decoder::push`] bytes as they arrive, then take
/// [`Decoder::next_event`] until it returns `None`.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    start: usize,
    state: State,
    in_garbage: bool,
    max_message: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::with_limit(MAX_MESSAGE)
    }

    /// A decoder with another body limit (tests).
    pub fn with_limit(max_message: usize) -> Decoder {
        Decoder { buf: Vec::new(), start: 0, state: State::Header, in_garbage: false, max_message }
    }

    /// Appends bytes read from the stream. Bytes of a body being discarded are dropped
    /// here, so a discarded body never occupies memory.
    pub fn push(&mut self, mut bytes: &[u8]) {
        if let State::Discard(left) = self.state {
            let n = (bytes.len() as u64).min(left);
            bytes = &bytes[n as usize..];
            self.state = if left > n { State::Discard(left - n) } else { State::Header };
        }
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes still owed by a body being discarded (0 when none).
    pub fn discarding(&self) -> u64 {
        match self.state {
            State::Discard(n) => n,
            _ => 0,
        }
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the decoder is between frames with nothing buffered (a clean end of stream).
    pub fn is_idle(&self) -> bool {
        self.state == State::Header && self.pending().iter().all(|b| matches!(b, b'\r' | b'\n'))
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// What the input cut off if it ends here, for the log: `None` at a clean end (between
    /// messages, blank lines aside). A short line of text (`garbage` typed at a terminal)
    /// is too short to be told from the start of a header while the input goes on, so it
    /// is reported only here.
    pub fn unfinished(&self) -> Option<String> {
        match self.state {
            State::Discard(left) => Some(format!("the body of a message that was being skipped, {left} bytes short")),
            State::Body(len) => {
                Some(format!("a message body announced as {len} bytes, of which {} arrived", self.buffered()))
            }
            // White space after the last message, or the rest of a run of bytes whose
            // skipping was already reported (`Event::Garbage`, `Event::BadHeader`); a
            // message that had begun after that run (its header, whole or in part) is
            // reported.
            State::Header if self.pending().iter().all(u8::is_ascii_whitespace) => None,
            State::Header if self.in_garbage && !self.header_begins() => None,
            State::Header => {
                let p = self.pending();
                let sample = String::from_utf8_lossy(&p[..p.len().min(60)]).into_owned();
                Some(format!("{} bytes that are not a complete LSP message: {sample:?}", p.len()))
            }
        }
    }

    /// Whether the bytes waiting, after blank lines, begin a header: a whole header name, or
    /// at least `Content-` of one (the end of a reported run that only looks like the start
    /// of one, `…abc` or `…cont`, is not named again: a review).
    fn header_begins(&self) -> bool {
        let p = self.pending();
        let rest = &p[p.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count()..];
        match starts_with_known_header(rest) {
            Prefix::Yes => true,
            Prefix::Partial => rest.len() >= b"Content-".len(),
            Prefix::No => false,
        }
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// The next event, or `None` when more bytes are needed.
    pub fn next_event(&mut self) -> Option<Event> {
        loop {
            match self.state {
                State::Discard(left) => {
                    let n = (self.buffered() as u64).min(left) as usize;
                    self.consume(n);
                    let left = left - n as u64;
                    if left > 0 {
                        self.state = State::Discard(left);
                        return None;
                    }
                    self.state = State::Header;
                }
                State::Body(len) => {
                    if self.buffered() < len {
                        return None;
                    }
                    let body = self.pending()[..len].to_vec();
                    self.consume(len);
                    self.state = State::Header;
                    return Some(Event::Frame(body));
                }
                State::Header => match self.header() {
                    Step::NeedMore => return None,
                    Step::Continue => {}
                    Step::Emit(e) => return Some(e),
                },
            }
        }
    }

    /// Skips `n` bytes that are not a header; the first skip of a run is reported.
    fn garbage(&mut self, n: usize) -> Step {
        let sample: String = String::from_utf8_lossy(&self.pending()[..n.min(60)]).into_owned();
        self.consume(n);
        if self.in_garbage {
            return Step::Continue;
        }
        self.in_garbage = true;
        Step::Emit(Event::Garbage { sample })
    }

    fn header(&mut self) -> Step {
        // Blank lines between frames are tolerated.
        let blanks = self.pending().iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
        self.consume(blanks);
        let p = self.pending();
        if p.is_empty() {
            return Step::NeedMore;
        }
        match starts_with_known_header(p) {
            Prefix::Partial => return Step::NeedMore,
            Prefix::No => {
                // Resynchronize: skip to the next `Content-Length`, keeping a tail that may
                // be the start of one.
                return match find_ci(&p[1..], CONTENT_LENGTH) {
                    Some(i) => self.garbage(i + 1),
                    None => {
                        let keep = CONTENT_LENGTH.len() - 1;
                        let n = p.len().saturating_sub(keep).max(1);
                        if p.len() <= keep && !self.in_garbage {
                            // Too short to tell: wait for more unless already skipping.
                            return Step::NeedMore;
                        }
                        self.garbage(n)
                    }
                };
            }
            Prefix::Yes => {}
        }
        // A header block: lines up to an empty line.
        let Some(end) = block_end(p) else {
            if p.len() > MAX_HEADER {
                return self.resync_after_bad_block("header block longer than 8192 bytes without an empty line".into());
            }
            return Step::NeedMore;
        };
        if end > MAX_HEADER {
            return self.resync_after_bad_block("header block longer than 8192 bytes".into());
        }
        let block = &p[..end];
        let mut length: Option<Result<u64, String>> = None;
        for line in block.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return self.resync_after_bad_block(format!(
                    "expected an LSP header line (`Name: value`), got {:?}",
                    String::from_utf8_lossy(&line[..line.len().min(60)])
                ));
            };
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            if name.is_empty() || !name.iter().all(|&b| b.is_ascii_graphic()) {
                return self.resync_after_bad_block(format!(
                    "invalid LSP header name {:?}",
                    String::from_utf8_lossy(&name[..name.len().min(60)])
                ));
            }
            if name.eq_ignore_ascii_case(CONTENT_LENGTH) {
                let v = String::from_utf8_lossy(value).trim().to_string();
                let parsed = parse_length(&v);
                if let (Some(Ok(a)), Ok(b)) = (&length, &parsed) {
                    if a != b {
                        return self.skip_block(end, format!("conflicting Content-Length headers ({a} and {b})"));
                    }
                }
                length = Some(parsed);
            }
        }
        self.in_garbage = false;
        match length {
            None => self.skip_block(end, "missing Content-Length header".into()),
            Some(Err(v)) => self.skip_block(end, format!("invalid Content-Length {v:?} (expected a byte count)")),
            Some(Ok(n)) if n > self.max_message as u64 => {
                self.consume(end);
                self.state = State::Discard(n);
                Step::Emit(Event::TooLarge { length: n })
            }
            Some(Ok(n)) => {
                self.consume(end);
                self.state = State::Body(n as usize);
                Step::Continue
            }
        }
    }

    fn skip_block(&mut self, end: usize, why: String) -> Step {
        self.consume(end);
        // What follows up to the next header (the refused message's body) belongs to this
        // report, not to one of its own.
        self.in_garbage = true;
        Step::Emit(Event::BadHeader(why))
    }

    /// A block that is not a valid header: report it, then resynchronize after its first byte.
    fn resync_after_bad_block(&mut self, why: String) -> Step {
        self.consume(1);
        self.in_garbage = true;
        Step::Emit(Event::BadHeader(why))
    }
}

enum Step {
    NeedMore,
    Continue,
    Emit(Event),
}

enum Prefix {
    Yes,
    No,
    Partial,
}

/// Whether `p` starts with `Content-Length` or `Content-Type` (any case).
fn starts_with_known_header(p: &[u8]) -> Prefix {
    let mut partial = false;
    for name in [CONTENT_LENGTH, CONTENT_TYPE] {
        let n = p.len().min(name.len());
        if p[..n].eq_ignore_ascii_case(&name[..n]) {
            if n == name.len() {
                return Prefix::Yes;
            }
            partial = true;
        }
    }
    if partial {
        Prefix::Partial
    } else {
        Prefix::No
    }
}

/// The end (exclusive) of the header block: just past its empty line.
fn block_end(p: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(nl) = p[i..].iter().position(|&b| b == b'\n') {
        let line = &p[i..i + nl];
        if line.is_empty() || line == b"\r" {
            return Some(i + nl + 1);
        }
        i += nl + 1;
    }
    None
}

/// Case-insensitive search for `needle` in `hay`.
fn find_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if hay.len() < needle.len() {
        return None;
    }
    (0..=hay.len() - needle.len()).find(|&i| hay[i..i + needle.len()].eq_ignore_ascii_case(needle))
}

/// A `Content-Length` value: decimal digits; a number too large for `u64` reads as `u64::MAX`.
fn parse_length(v: &str) -> Result<u64, String> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(v.chars().take(40).collect());
    }
    Ok(v.parse::<u64>().unwrap_or(u64::MAX))
}

/// Replaces every lone UTF-16 surrogate escape (`\ud800` without its pair) in JSON text
/// with `\ufffd`; `None` when there is none. JSON's grammar (RFC 8259) allows such escapes
/// but they denote no Unicode string, so a parser refuses them; this lets a server find the
/// id of the request that held one and answer it.
pub fn replace_lone_surrogates(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    let mut in_string = false;
    let hex = |at: usize| -> Option<u32> {
        let s = b.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
    };
    while i < b.len() {
        match b[i] {
            b'"' => {
                in_string = !in_string;
                i += 1;
            }
            b'\\' if in_string => {
                if b.get(i + 1) != Some(&b'u') {
                    i += 2;
                    continue;
                }
                let Some(u) = hex(i + 2) else {
                    i += 2;
                    continue;
                };
                let high = (0xD800..0xDC00).contains(&u);
                let low = (0xDC00..0xE000).contains(&u);
                if high && b.get(i + 6) == Some(&b'\\') && b.get(i + 7) == Some(&b'u') {
                    if let Some(u2) = hex(i + 8) {
                        if (0xDC00..0xE000).contains(&u2) {
                            i += 12;
                            continue;
                        }
                    }
                }
                if high || low {
                    let o = out.get_or_insert_with(String::new);
                    o.push_str(&text[copied..i]);
                    o.push_str("\\ufffd");
                    copied = i + 6;
                }
                i += 6;
            }
            _ => i += 1,
        }
    }
    let mut o = out?;
    o.push_str(text.get(copied..).unwrap_or(""));
    Some(o)
}

/// A JSON-RPC request on one line that a JSON parser refuses although its `id` can be read
/// (newline-delimited JSON-RPC: MCP's stdio transport): its id and why it cannot be
/// served. `None` for a line that parses (the transport serves it), and for one whose id
/// cannot be read or that has none (a notification, or no JSON at all: nothing to answer).
/// What it finds: a lone UTF-16 surrogate escape (which JavaScript's `JSON.stringify`
/// writes for half an emoji), bytes that are not UTF-8, nesting deeper than the parser's
/// 128 levels, or JSON the parser refuses after a readable id (not a number out of range,
/// which only a full parse finds).
pub fn unreadable_request(line: &[u8]) -> Option<(serde_json::Value, String)> {
    // A byte order mark before the JSON, as transports skip it.
    let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
    // Three passes a byte at a time at most, no value built: skipping values does not
    // check their strings' bytes or escapes, so those are checked first.
    let why = match std::str::from_utf8(line) {
        Err(_) => "Invalid Request: the message is not valid UTF-8 text".to_string(),
        Ok(text) if has_surrogate_escape(line) && replace_lone_surrogates(text).is_some() => {
            "Invalid Request: the message holds a lone UTF-16 surrogate escape (such as \\ud800 without its pair), which denotes no Unicode character; JSON-RPC strings must be valid Unicode".to_string()
        }
        // Skipping values has no depth limit, parsing them has (128 levels): a deep line is
        // parsed as the transport parses it.
        Ok(_) if nesting_over(line, 100) => match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(_) => return None,
            Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
                "Invalid Request: the message nests arrays and objects 128 levels deep or more".to_string()
            }
            Err(e) => format!("Invalid Request: the message cannot be read: {e}"),
        },
        Ok(_) => match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
            Ok(_) => return None,
            Err(e) => format!("Invalid Request: the message cannot be read: {e}"),
        },
    };
    // A request: a response (no `method`) is never answered (review YE).
    top_level_member(line, b"method")?;
    let id = top_level_member(line, b"id")
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(raw).ok())
        .filter(|id| id.is_string() || id.is_i64())?;
    Some((id, why))
}

/// Whether arrays and objects nest more than `levels` deep in the JSON text `line` (outside
/// its strings).
fn nesting_over(line: &[u8], levels: usize) -> bool {
    let (mut depth, mut in_string, mut i) = (0usize, false, 0);
    while i < line.len() {
        match line[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'[' | b'{' if !in_string => {
                depth += 1;
                if depth > levels {
                    return true;
                }
            }
            b']' | b'}' if !in_string => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    false
}

/// Whether `line` holds `\ud` or `\uD` anywhere (a surrogate escape may be there).
fn has_surrogate_escape(line: &[u8]) -> bool {
    line.windows(3).any(|w| w[0] == b'\\' && w[1] == b'u' && (w[2] | 0x20) == b'd')
}

/// The raw JSON value of member `key` of the object `line` holds at its top level, if it is
/// an object and has one: found by skipping strings and nested values, so a line no parser
/// takes (deep nesting, bad bytes or escapes inside its other members) still gives it.
fn top_level_member<'a>(line: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let mut i = line.iter().position(|b| !ws(b))?;
    if line[i] != b'{' {
        return None;
    }
    i += 1;
    // The end of the string starting at `at` (its closing quote's index + 1).
    let string_end = |at: usize| -> Option<usize> {
        let mut j = at + 1;
        while j < line.len() {
            match line[j] {
                b'\\' => j += 2,
                b'"' => return Some(j + 1),
                _ => j += 1,
            }
        }
        None
    };
    // The end of the value starting at `at`: a string, a nested array or object, or a
    // scalar up to the next `,` or `}`.
    let value_end = |at: usize| -> Option<usize> {
        match line.get(at)? {
            b'"' => string_end(at),
            b'{' | b'[' => {
                let (mut depth, mut j) = (0usize, at);
                while j < line.len() {
                    match line[j] {
                        b'"' => {
                            j = string_end(j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                None
            }
            _ => {
                Some(at + line[at..].iter().position(|b| matches!(b, b',' | b'}') || ws(b)).unwrap_or(line.len() - at))
            }
        }
    };
    loop {
        i += line[i..].iter().position(|b| !ws(b))?;
        if line[i] != b'"' {
            return None;
        }
        let k_end = string_end(i)?;
        let name = &line[i + 1..k_end - 1];
        i = k_end + line[k_end..].iter().position(|b| !ws(b))?;
        if line[i] != b':' {
            return None;
        }
        i += 1;
        i += line[i..].iter().position(|b| !ws(b))?;
        let v_end = value_end(i)?;
        if name == key {
            return Some(&line[i..v_end]);
        }
        i = v_end + line[v_end..].iter().position(|b| !ws(b))?;
        if line[i] != b',' {
            return None;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_request_is_found_with_its_id() {
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{{\"x\":{}{}}},\"id\":9}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        type Case = (Vec<u8>, Option<(serde_json::Value, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"x \ud83d y"}}"#.to_vec(),
                Some((serde_json::json!(1), "lone UTF-16 surrogate")),
            ),
            (
                br#"{"jsonrpc":"2.0","method":"m","params":{"a":"\udc00"},"id":"s-1"}"#.to_vec(),
                Some((serde_json::json!("s-1"), "lone UTF-16 surrogate")),
            ),
            (
                b"{\"id\":2,\"method\":\"m\",\"params\":{\"a\":\"\xff\xfe\"}}".to_vec(),
                Some((serde_json::json!(2), "not valid UTF-8")),
            ),
            (deep.into_bytes(), Some((serde_json::json!(9), "128 levels"))),
            (br#"{"id":3, "method":"m", "params":{"a":}}"#.to_vec(), Some((serde_json::json!(3), "cannot be read"))),
            (
                br#" { "a" : "}\"{" , "id" : 4 , "method": "m", "params": [1,"x"] "#.to_vec(),
                Some((serde_json::json!(4), "cannot be read")),
            ),
            // Nothing to answer: parses, a notification, no JSON, an id of no JSON-RPC kind.
            (br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#.to_vec(), None),
            (br#"{"jsonrpc":"2.0","method":"m","params":{"a":"\ud800"}}"#.to_vec(), None),
            (b"{not json".to_vec(), None),
            (b"\xff\xfe\xfd".to_vec(), None),
            (br#"{"id":null,"params":"\ud800"}"#.to_vec(), None),
            (br#"{"id":1.5,"params":"\ud800"}"#.to_vec(), None),
            (br#"[{"id":1,"params":"\ud800"}]"#.to_vec(), None),
            // Responses are never answered; an id beyond 64 signed bits is no id the
            // transport reads.
            (br#"{"jsonrpc":"2.0","id":5,"result":{"t":"\ud800"}}"#.to_vec(), None),
            (br#"{"id":18446744073709551615,"method":"m","params":"\ud800"}"#.to_vec(), None),
            // A byte order mark first.
            (
                b"\xef\xbb\xbf{\"id\":6,\"method\":\"m\",\"params\":\"\\ud800\"}".to_vec(),
                Some((serde_json::json!(6), "surrogate")),
            ),
            (br#"{"params":{"id":5},"x":"\ud800"}"#.to_vec(), None),
        ];
        for (line, want) in cases {
            let got = unreadable_request(&line);
            match (&got, &want) {
                (Some((id, why)), Some((wid, needle))) => {
                    assert_eq!(id, wid, "{}", String::from_utf8_lossy(&line));
                    assert!(why.starts_with("Invalid Request: ") && why.contains(needle), "{why}");
                }
                (None, None) => {}
                _ => panic!("{}: {got:?}", String::from_utf8_lossy(&line)),
            }
        }
    }

    fn decode_all(chunks: &[&[u8]], limit: usize) -> Vec<String> {
        let mut d = Decoder::with_limit(limit);
        let mut out = vec![];
        for c in chunks {
            d.push(c);
            while let Some(e) = d.next_event() {
                out.push(match e {
                    Event::Frame(b) => format!("frame:{}", String::from_utf8_lossy(&b)),
                    Event::Garbage { sample } => format!("garbage:{sample}"),
                    Event::BadHeader(w) => format!("bad:{w}"),
                    Event::TooLarge { length } => format!("large:{length}"),
                });
            }
        }
        out
    }

    fn whole(input: &[u8]) -> Vec<String> {
        decode_all(&[input], 100)
    }

    /// What the end of the input cuts off, after each input is decoded as far as it goes.
    #[test]
    fn unfinished_at_the_end_of_input() {
        let cases: &[(&[u8], Option<&str>)] = &[
            (b"", None),
            (b"\r\n\n", None),
            (b"Content-Length: 2\r\n\r\n{}", None),
            (b"Content-Length: 2\r\n\r\n{}\r\n", None),
            (b"Content-Length: 2\r\n\r\n{}  \t\n", None),
            // Reported already as a bad header: its leftover body is not reported again.
            (b"Content-Length: abc\r\n\r\n{}", None),
            (b"Content-Length: -1\r\n\r\n{}", None),
            // ... but a message begun after it is.
            (
                b"Content-Length: abc\r\n\r\n{}Content-Length: 50\r\n",
                Some("20 bytes that are not a complete LSP message"),
            ),
            (b"Content-Length: abc\r\n\r\n{}Content-Le", Some("10 bytes that are not a complete LSP message")),
            (
                b"some garbage that is long\nContent-Length: 50\r\n",
                Some("20 bytes that are not a complete LSP message"),
            ),
            // ... not the end of a reported run that only looks like the start of a header.
            (b"junk junk junk junk junk abc", None),
            (b"junk junk junk junk junk, see: cont", None),
            (b"Content-Length: abc\r\n\r\nabc", None),
            (b"garbage\n", Some("8 bytes that are not a complete LSP message: \"garbage\\n\"")),
            (b"Content-Len", Some("11 bytes that are not a complete LSP message: \"Content-Len\"")),
            (b"Content-Length: 5\r\n", Some("19 bytes that are not a complete LSP message")),
            (b"Content-Length: 5\r\n\r\n{}", Some("a message body announced as 5 bytes, of which 2 arrived")),
            (b"Content-Length: 500\r\n\r\n{}", Some("the body of a message that was being skipped, 498 bytes short")),
        ];
        for (input, want) in cases {
            let mut d = Decoder::with_limit(100);
            d.push(input);
            while d.next_event().is_some() {}
            let got = d.unfinished();
            match want {
                None => assert_eq!(got, None, "{input:?}"),
                Some(w) => assert!(got.as_deref().is_some_and(|g| g.starts_with(w)), "{input:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn table() {
        let cases: &[(&[u8], &[&str])] = &[
            (b"Content-Length: 2\r\n\r\n{}", &["frame:{}"]),
            (b"content-length:2\n\n{}", &["frame:{}"]),
            (b"\r\n\r\nContent-Length: 2\r\n\r\n{}", &["frame:{}"]),
            (b"Content-Type: x\r\nContent-Length: 1\r\n\r\nA", &["frame:A"]),
            (b"Content-Length: 1\r\nX-Other: y\r\n\r\nA", &["frame:A"]),
            (b"Content-Length: 0\r\n\r\n", &["frame:"]),
            // One stray byte: reported once, the frame still arrives.
            (b"xContent-Length: 1\r\n\r\nA", &["garbage:x", "frame:A"]),
            (b"garbage garbage\r\n\r\nContent-Length: 1\r\n\r\nA", &["garbage:garbage garbage\r\n\r\n", "frame:A"]),
            (
                b"Content-Length: lots\r\n\r\nContent-Length: 1\r\n\r\nA",
                &["bad:invalid Content-Length \"lots\" (expected a byte count)", "frame:A"],
            ),
            (b"Content-Length: -1\r\n\r\n", &["bad:invalid Content-Length \"-1\" (expected a byte count)"]),
            (b"Content-Type: x\r\n\r\nContent-Length: 1\r\n\r\nA", &["bad:missing Content-Length header", "frame:A"]),
            (
                b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nAB",
                &["bad:conflicting Content-Length headers (1 and 2)"],
            ),
            (b"Content-Length: 101\r\n\r\n", &["large:101"]),
            (b"Content-Length: 99999999999999999999999\r\n\r\n", &["large:18446744073709551615"]),
            (
                b"Content-Length: 1\r\nnot a header\r\n\r\nContent-Length: 1\r\n\r\nA",
                &["bad:expected an LSP header line (`Name: value`), got \"not a header\"", "frame:A"],
            ),
        ];
        for (input, want) in cases {
            assert_eq!(whole(input), *want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let input: &[u8] = b"xyContent-Length: 3\r\n\r\nabc\r\nContent-Length: 101\r\n\r\nContent-Length: 1\r\n\r\nZ";
        let mut big = input.to_vec();
        // The 101-byte body is discarded, then a last frame.
        let at = big.windows(4).rposition(|w| w == b"Cont").unwrap_or(0);
        big.splice(at..at, std::iter::repeat_n(b'.', 101));
        let chunks: Vec<&[u8]> = big.chunks(1).collect();
        // A garbage run's sample depends on how much had arrived; its place does not.
        let kinds = |v: Vec<String>| -> Vec<String> {
            v.into_iter().map(|e| if e.starts_with("garbage:") { "garbage".into() } else { e }).collect()
        };
        let split = kinds(decode_all(&chunks, 100));
        assert_eq!(split, kinds(whole(&big)));
        assert_eq!(split, ["garbage", "frame:abc", "large:101", "frame:Z"]);
    }

    #[test]
    fn oversized_header_block_is_refused_without_buffering_it() {
        let mut input = b"Content-Type: ".to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_HEADER + 10));
        let mut d = Decoder::new();
        d.push(&input);
        let e = d.next_event();
        assert!(matches!(e, Some(Event::BadHeader(ref w)) if w.contains("8192")), "{e:?}");
        while d.next_event().is_some() {}
        assert!(d.buffered() < CONTENT_LENGTH.len(), "{}", d.buffered());
    }

    #[test]
    fn discarded_bodies_are_not_buffered() {
        let mut d = Decoder::with_limit(10);
        d.push(b"Content-Length: 1000000\r\n\r\n");
        assert_eq!(d.next_event(), Some(Event::TooLarge { length: 1_000_000 }));
        for _ in 0..999 {
            d.push(&[b'{'; 1000]);
            assert_eq!(d.next_event(), None);
            assert_eq!(d.buffered(), 0);
        }
        d.push(&[b'{'; 1000]);
        d.push(b"Content-Length: 1\r\n\r\nA");
        assert_eq!(d.next_event(), Some(Event::Frame(b"A".to_vec())));
        assert_eq!(d.discarding(), 0);
    }

    #[test]
    fn encode_round_trips() {
        let mut d = Decoder::new();
        d.push(&encode(b"{\"a\":1}"));
        d.push(&encode(b""));
        assert_eq!(d.next_event(), Some(Event::Frame(b"{\"a\":1}".to_vec())));
        assert_eq!(d.next_event(), Some(Event::Frame(vec![])));
        assert!(d.is_idle());
    }

    #[test]
    fn error_codes() {
        assert_eq!(Event::Garbage { sample: "x".into() }.error().map(|e| e.0), Some(-32700));
        assert_eq!(Event::BadHeader("x".into()).error().map(|e| e.0), Some(-32700));
        let (code, msg) = Event::TooLarge { length: 70_000_000 }.error().unwrap_or_default();
        assert_eq!(code, -32600);
        assert!(msg.contains("70000000") && msg.contains("67108864"), "{msg}");
    }

    #[test]
    fn lone_surrogates() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"a":"\ud800"}"#, Some(r#"{"a":"\ufffd"}"#)),
            (r#"{"a":"\uDC00x"}"#, Some(r#"{"a":"\ufffdx"}"#)),
            (r#"{"a":"\ud83d\ude00"}"#, None),
            (r#"{"a":"\\ud800"}"#, None),
            (r#"{"a":"\ud800\ud800"}"#, Some(r#"{"a":"\ufffd\ufffd"}"#)),
            (r#"{"a":"\u00e9"}"#, None),
            (r#"{"\ud800":1}"#, Some(r#"{"\ufffd":1}"#)),
        ];
        for (input, want) in cases {
            assert_eq!(replace_lone_surrogates(input).as_deref(), *want, "{input}");
        }
    }
}
