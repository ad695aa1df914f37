//! Seeded fuzz harness for the plan decomposer (`forge_domain::plan::decompose`), run by CI
//! as an ordinary test for a bounded number of cases (cargo-fuzz needs a nightly toolchain).
//! `FUZZ_CASES` (default 3000) and `FUZZ_SEED` choose the run; a failure names both.
//!
//! Invariants: no panic; deterministic; at most `MAX_TOTAL_SECTIONS` sections, numbered in
//! order; produced ≤ non-empty ≤ markers; each section's lines are in order and inside the
//! text (marker < start = marker + 1 ≤ end ≤ line count), sections do not overlap; titles
//! are non-empty and at most 60 UTF-16 units (or `Section <k>`); bodies are non-empty. (The
//! fuzzer found that a heading of whitespace only, `##\r\u{feff}`, gave an empty title; such a
//! heading now names nothing and the next heading, or `Section <k>`, is the title.)

use forge_domain::plan::decompose::{decompose, marker_lines};
use forge_domain::plan::MAX_TOTAL_SECTIONS;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

const LINES: &[&str] = &[
    "<!-- forge-section -->",
    "<!--forge-section-->",
    "  <!-- forge-section -->  ",
    "<!-- forge-section:start -->",
    "<!-- forge-section:end -->",
    "<!-- forge-plan:start -->",
    "<!-- forge-plan:end -->",
    "## Verification",
    "## Decisions",
    "## Conventions",
    "## Key Context",
    "## Phase: do the thing",
    "##",
    "## ",
    "# Title",
    "```",
    "~~~",
    "```rust",
    "    ```",
    "",
    "   ",
    "text",
    "\u{feff}\u{3000}",
    "## 😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀",
    "## é",
    "\r",
];

fn plan(rng: &mut Rng) -> String {
    let n = rng.below(80);
    let mut s = String::new();
    for _ in 0..n {
        match rng.below(10) {
            0 => {
                // Random characters, multi-byte ones included.
                for _ in 0..rng.below(20) {
                    let c = char::from_u32(rng.below(0x2_0000) as u32).unwrap_or('?');
                    s.push(c);
                }
            }
            1 => s.push_str(&"x".repeat(rng.below(200))),
            _ => s.push_str(LINES[rng.below(LINES.len())]),
        }
        s.push(if rng.below(8) == 0 { '\r' } else { '\n' });
    }
    s
}

#[test]
fn the_decomposer_keeps_its_invariants_on_random_plans() {
    let cases = env_or("FUZZ_CASES", 3000);
    let seed = env_or("FUZZ_SEED", 0xdec0_4905);
    let started = std::time::Instant::now();
    for case in 0..cases {
        let mut rng = Rng(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let text = plan(&mut rng);
        let ctx = format!("seed {seed:#x} case {case}: {text:?}");
        let d = decompose(&text);
        assert_eq!(d, decompose(&text), "{ctx}: not deterministic");
        let line_count = text.split('\n').count();
        assert!(d.sections.len() <= MAX_TOTAL_SECTIONS, "{ctx}");
        assert!(d.sections.len() <= d.uncapped_count && d.uncapped_count <= d.marker_count, "{ctx}: {d:?}");
        assert_eq!(marker_lines(&text).len(), d.marker_count, "{ctx}");
        let mut prev_end = 0;
        for (i, s) in d.sections.iter().enumerate() {
            assert_eq!(s.index, i, "{ctx}");
            assert_eq!(s.start_line, s.marker_line + 1, "{ctx}: {s:?}");
            assert!(s.start_line <= s.end_line && s.end_line <= line_count, "{ctx}: {s:?}");
            assert!(s.marker_line >= prev_end, "{ctx}: sections overlap: {s:?}");
            prev_end = s.end_line.max(s.start_line);
            assert!(!s.content.is_empty(), "{ctx}: {s:?}");
            assert!(
                !s.title.is_empty()
                    && (s.title.encode_utf16().count() <= 60 || s.title == format!("Section {}", i + 1)),
                "{ctx}: title too long: {:?}",
                s.title
            );
        }
    }
    println!("{cases} cases in {:?}", started.elapsed());
}
