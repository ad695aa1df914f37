//! JSON helpers: string literals written fast, their escaped length, and number and kind
//! checks for inputs.
//!
//! The large replies (a plan of a few hundred KB in `plan-read` and `textDocumentContent`,
//! a page of findings) are mostly one long text. serde_json escapes a string one byte at a
//! time through a lookup table; that loop was the largest single cost of those replies
//! (a fifth of the server's samples in a `textDocumentContent` loop). [`push_string`]
//! writes exactly the bytes serde_json writes, through `json-escape-simd` (sonic-rs's
//! kernels: AVX2 or SSE2, as the processor has them), which finds the bytes that
//! need an escape 16 or 32 at a time and copies the runs between them whole.
//!
//! Invariant: for every `&str`, `push_string` appends what `serde_json::to_writer` writes
//! for it (tested below over every byte value at every offset and mixed texts).

/// How many bytes `s` takes inside a JSON string literal (what [`push_string`] writes for
/// it, without the quotes): `"`, `\\` and the controls with a short escape take two bytes,
/// the other controls below 0x20 six, every other byte one. For size limits that must hold
/// for the message on the wire, not just the text.
pub fn escaped_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// Rewrites, in `v` and everything in it, each number written with a fraction that is zero
/// (`2.0`, `1e3`) as the integer it is, when that is exact (at most 2^53 from zero). JSON
/// Schema counts `2.0` as an integer, and a client that writes every number as a float (as
/// JavaScript may) must not be refused where an integer is asked for: tool inputs and the
/// configuration both read numbers through this.
pub fn integral_floats_as_integers(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => {
            const EXACT: f64 = 9_007_199_254_740_992.0;
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() <= EXACT) {
                // Exact by the bound above: the cast loses nothing.
                *v = Value::from(f as i64);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(o) => o.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

/// What kind of JSON value `v` is, for a message: "null", "a list", "a string", "a number",
/// "a boolean" or "an object".
pub fn kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Array(_) => "a list",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Object(_) => "an object",
    }
}

/// Texts longer than this are escaped a piece at a time ([`push_string`]).
const LONG: usize = 1024 * 1024;
/// The size of those pieces.
const PIECE: usize = 256 * 1024;

/// Appends `s` as a JSON string literal, quotes included, escaped as serde_json does it.
///
/// The library reserves six bytes per byte of `s` beyond what is there (the most an
/// escape takes) before it writes: for a long text that is a reply buffer six times the
/// text's size (96 MB for a 16 MB plan), held while the reply waits to be written. A text
/// over [`LONG`] bytes is escaped in pieces of [`PIECE`] bytes (cut at character boundaries:
/// escaping is per character, so the pieces' escapes are the text's) through a scratch
/// buffer, and the output grows by what is written; the one copy more is of a few hundred
/// KB at memory speed.
pub fn push_string(out: &mut Vec<u8>, s: &str) {
    if s.len() <= LONG {
        json_escape_simd::escape_into(s, out);
        return;
    }
    let mut scratch = Vec::with_capacity(PIECE * 6 + 64);
    out.push(b'"');
    let mut rest = s;
    while !rest.is_empty() {
        let mut cut = rest.len().min(PIECE);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut);
        scratch.clear();
        json_escape_simd::escape_into(piece, &mut scratch);
        // Without the piece's own quotes.
        out.extend_from_slice(&scratch[1..scratch.len() - 1]);
        rest = tail;
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        push_string(&mut out, s);
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn every_ascii_byte_at_every_offset_in_a_block_is_escaped_as_serde_json_does() {
        for byte in 0u8..0x80 {
            let c = byte as char;
            // 80 bytes: every offset within the widest (32-byte) block, and past two of them.
            for at in 0..80 {
                let s: String = (0..80).map(|k| if k == at { c } else { 'a' }).collect();
                assert_eq!(ours(&s), serde_json::to_string(&s).unwrap(), "byte {byte:#04x} at {at}");
            }
        }
    }

    #[test]
    fn integral_floats_become_integers_and_nothing_else_changes() {
        let mut v = serde_json::json!({ "a": 2.0, "b": [1e3, -0.0, 2.5, 1e300, "3.0"], "c": { "d": 7 } });
        integral_floats_as_integers(&mut v);
        assert_eq!(v, serde_json::json!({ "a": 2, "b": [1000, 0, 2.5, 1e300, "3.0"], "c": { "d": 7 } }));
        assert!(v["a"].is_i64());
    }

    #[test]
    fn escaped_len_is_what_serde_json_writes() {
        for byte in 0u8..0x80 {
            let s = format!("a{}b", byte as char);
            assert_eq!(escaped_len(&s) + 2, serde_json::to_string(&s).unwrap().len(), "byte {byte:#04x}");
        }
        let mixed = "ünï \"q\" \\ \n\u{1}🦀";
        assert_eq!(escaped_len(mixed) + 2, serde_json::to_string(mixed).unwrap().len());
    }

    #[test]
    fn texts_match_serde_json() {
        let long_plan = "## Phase 1\n- step `a`: \"quoted\" \\ path\\to\tx\r\n".repeat(300);
        let cases = [
            "",
            "a",
            "\"",
            "\\\\",
            "plain ascii text longer than one word",
            "\u{1}\u{1f}\u{7f}",
            "ünïcödé — 漢字 🦀 and \"quotes\"\n",
            "12345678\"12345678\\1234567\n",
            "\n\n\n\n\n\n\n\n\n",
            long_plan.as_str(),
        ];
        for s in cases {
            assert_eq!(ours(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn texts_of_every_length_are_appended_after_what_is_there() {
        // Lengths around every block size, multi-byte characters across block edges, and
        // an output that already holds bytes (the reply's start) with spare capacity.
        let unit = "a\u{e9}\"\u{1F980}\n\\\u{1}";
        for n in 0..140 {
            let s: String = unit.chars().cycle().take(n).collect();
            let mut out = Vec::with_capacity(7);
            out.extend_from_slice(b"{\"text\":");
            push_string(&mut out, &s);
            out.push(b',');
            push_string(&mut out, "tail");
            let want = format!("{{\"text\":{},\"tail\"", serde_json::to_string(&s).unwrap());
            assert_eq!(String::from_utf8(out).unwrap(), want, "length {n}");
        }
    }

    /// Texts longer than a piece, with escapes and multi-byte characters across the cuts:
    /// the same bytes as serde_json, and no buffer six times the text's size.
    #[test]
    fn long_texts_are_escaped_in_pieces_with_the_same_bytes() {
        for unit in ["a\"\\\n\u{1}é🦀", "plain text of a plan line, with `code`\n", "🦀"] {
            for extra in [0, 1, 2, 3, 5] {
                let mut s = String::new();
                for c in unit.chars().cycle() {
                    if s.len() >= LONG + 3 * PIECE + extra {
                        break;
                    }
                    s.push(c);
                }
                let mut out = b"{".to_vec();
                push_string(&mut out, &s);
                assert_eq!(&out[1..], serde_json::to_string(&s).unwrap().as_bytes(), "{unit:?} +{extra}");
                assert!(out.capacity() < 4 * out.len() + 1024, "capacity {} for {} bytes", out.capacity(), out.len());
            }
        }
    }

    #[test]
    fn bytes_above_ascii_never_look_like_escapes() {
        // Every UTF-8 continuation and lead byte has its high bit set; none may be taken
        // for a control, a quote or a backslash by the word test.
        let s: String = ('\u{80}'..='\u{7ff}').chain(['\u{ffff}', '\u{10ffff}']).collect();
        assert_eq!(ours(&s), serde_json::to_string(&s).unwrap());
    }
}
