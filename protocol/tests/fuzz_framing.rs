//! Seeded fuzz harness for the frame decoder (`forge_protocol::framing`), run by CI as an
//! ordinary test for a bounded number of cases (cargo-fuzz needs a nightly toolchain).
//!
//! `FUZZ_CASES` (default 3000) and `FUZZ_SEED` choose the run; a failure names the seed and
//! the case, so `FUZZ_SEED=<seed> FUZZ_CASES=<case+1>` replays it.
//!
//! Invariants, for any byte stream cut into any chunks:
//! - the decoder never panics and its buffer stays bounded (header limit + one chunk + the
//!   body limit);
//! - the frames (and oversized-message reports) do not depend on how the stream was cut;
//! - it always recovers: after any input, enough filler and one valid frame, that frame is
//!   decoded.

use forge_protocol::framing::{encode, Decoder, Event, MAX_HEADER};

const LIMIT: usize = 512;
const MAX_CHUNK: usize = 300;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One piece of a generated stream.
fn piece(rng: &mut Rng, out: &mut Vec<u8>) {
    match rng.below(12) {
        0..=3 => {
            let body: Vec<u8> =
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"m\"}}", rng.below(1000)).into_bytes();
            out.extend_from_slice(&encode(&body));
        }
        4 => {
            let n = rng.below(40);
            out.extend_from_slice(&rng.bytes(n));
        }
        5 => out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", rng.below(LIMIT * 3)).as_bytes()),
        6 => out.extend_from_slice(b"Content-Length: 99999999999999999999999\r\n\r\n"),
        7 => out
            .extend_from_slice(["\r\n", "\n", "\r", ":", "Content-Le", "content-type: x\r\n"][rng.below(6)].as_bytes()),
        8 => {
            let n = rng.below(LIMIT);
            out.extend_from_slice(&encode(&rng.bytes(n)));
        }
        9 => out.extend_from_slice(format!("Content-Length: {}\r\nX: y\r\n\r\n", rng.below(20)).as_bytes()),
        10 => {
            // A valid stream with flipped bytes.
            let mut f = encode(b"{\"a\":1}");
            let at = rng.below(f.len());
            f[at] = rng.next() as u8;
            out.extend_from_slice(&f);
        }
        _ => out.extend(std::iter::repeat_n(b'a', rng.below(MAX_HEADER + 100))),
    }
}

fn decode(input: &[u8], cuts: &mut dyn FnMut() -> usize) -> (Vec<Event>, Decoder) {
    let mut d = Decoder::with_limit(LIMIT);
    let mut events = vec![];
    let mut at = 0;
    while at < input.len() {
        let n = cuts().clamp(1, MAX_CHUNK).min(input.len() - at);
        d.push(&input[at..at + n]);
        at += n;
        while let Some(e) = d.next_event() {
            events.push(e);
        }
        assert!(d.buffered() <= MAX_HEADER + MAX_CHUNK + LIMIT, "buffer grew to {}", d.buffered());
    }
    (events, d)
}

fn frames(events: &[Event]) -> Vec<&Event> {
    events.iter().filter(|e| matches!(e, Event::Frame(_) | Event::TooLarge { .. })).collect()
}

#[test]
fn the_frame_decoder_survives_random_streams() {
    let cases = env_or("FUZZ_CASES", 3000);
    let seed = env_or("FUZZ_SEED", 0x5eed_f0e5);
    let started = std::time::Instant::now();
    for case in 0..cases {
        let mut rng = Rng(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut input = vec![];
        for _ in 0..rng.below(12) + 1 {
            piece(&mut rng, &mut input);
        }
        let ctx = format!("seed {seed:#x} case {case}");
        let (whole, _) = decode(&input, &mut || MAX_CHUNK);
        let mut cut_rng = Rng(rng.next() | 1);
        let (cut, mut d) = decode(&input, &mut || cut_rng.below(MAX_CHUNK) + 1);
        assert_eq!(frames(&whole), frames(&cut), "{ctx}: frames depend on chunking");

        // Recovery: filler that ends any body or header block, then one good frame. (A body
        // announced as too long to skip is never recovered from: the server closes the
        // connection instead, see server/lsp/src/transport.rs.)
        if d.discarding() > 1 << 20 {
            continue;
        }
        let filler = d.discarding() as usize + LIMIT + MAX_HEADER + 2;
        let mut tail = vec![b'.'; filler];
        tail.extend_from_slice(b"\r\n");
        tail.extend_from_slice(&encode(b"{\"marker\":true}"));
        let mut last = None;
        for c in tail.chunks(MAX_CHUNK) {
            d.push(c);
            while let Some(e) = d.next_event() {
                if let Event::Frame(b) = e {
                    last = Some(b);
                }
            }
        }
        assert_eq!(last.as_deref(), Some(&b"{\"marker\":true}"[..]), "{ctx}: did not recover");
    }
    println!("{cases} cases in {:?}", started.elapsed());
}
