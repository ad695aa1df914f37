//! Seeded fuzz harness for the apply-patch parser and planner (`forge_domain::patch`), run by
//! CI as an ordinary test for a bounded number of cases (cargo-fuzz needs nightly).
//! `FUZZ_CASES` (default 3000) and `FUZZ_SEED` choose the run; a failure names both.
//!
//! Patches are assembled from fragments that mix valid structure (Begin/End, the three file
//! headers, `Move to`, `@@` anchors, context/remove/add lines) with junk, against a small set
//! of files with drift (CRLF, no final newline, curly quotes, non-breaking spaces).
//! Invariants: no panic; deterministic; every error names the patch line (`patch line N:`)
//! or the path it could not read; every planned path is relative, inside the root and
//! normalized; a planned Add or Update ends with a newline exactly when its source did
//! (Updates) or always (Adds); a Delete names a file that exists.

use std::collections::BTreeMap;

use forge_domain::patch::{apply_patch, FileChange};

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
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

const PATHS: &[&str] =
    &["a.txt", "dir/b.rs", "crlf.txt", "nofinal.txt", "quotes.md", "new.txt", "../x", "/abs", "", "dir/../a.txt"];
const LINES: &[&str] = &[
    "alpha",
    "beta",
    "gamma",
    "let x = 1;",
    "“quoted”",
    "\"quoted\"",
    "a\u{a0}b",
    "a b",
    "end — dash",
    "end - dash",
    "",
    "   ",
];

fn files() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("a.txt".into(), "alpha\nbeta\ngamma\nalpha\nbeta\n".into()),
        ("dir/b.rs".into(), "let x = 1;\nlet y = 2;\n".into()),
        ("crlf.txt".into(), "alpha\r\nbeta\r\ngamma\r\n".into()),
        ("nofinal.txt".into(), "alpha\nbeta".into()),
        ("quotes.md".into(), "“quoted”\na\u{a0}b\nend — dash\n".into()),
    ])
}

fn patch(rng: &mut Rng) -> String {
    let mut out = String::new();
    if rng.below(10) > 0 {
        out.push_str("*** Begin Patch\n");
    }
    for _ in 0..1 + rng.below(3) {
        let path = rng.pick(PATHS);
        match rng.below(5) {
            0 => {
                out.push_str(&format!("*** Add File: {path}\n"));
                for _ in 0..rng.below(3) {
                    out.push_str(&format!("+{}\n", rng.pick(LINES)));
                }
            }
            1 => out.push_str(&format!("*** Delete File: {path}\n")),
            2 => out.push_str(&format!("{}\n", rng.pick(&["junk", "*** Unknown: x", "@@", "+orphan", " context"]))),
            _ => {
                out.push_str(&format!("*** Update File: {path}\n"));
                if rng.below(6) == 0 {
                    out.push_str(&format!("*** Move to: {}\n", rng.pick(PATHS)));
                }
                for _ in 0..rng.below(3) {
                    if rng.below(4) > 0 {
                        out.push_str(&format!("@@ {}\n", if rng.below(2) == 0 { "" } else { rng.pick(LINES) }));
                    }
                    for _ in 0..rng.below(5) {
                        let prefix = rng.pick(&[" ", "-", "+", " ", "-", "+", ""]);
                        out.push_str(&format!("{prefix}{}\n", rng.pick(LINES)));
                    }
                    if rng.below(8) == 0 {
                        out.push_str("*** End of File\n");
                    }
                }
            }
        }
    }
    if rng.below(10) > 0 {
        out.push_str("*** End Patch\n");
    }
    if rng.below(15) == 0 {
        out = out.replace('\n', "\r\n");
    }
    out
}

fn run(text: &str) -> Result<Vec<FileChange>, String> {
    let files = files();
    apply_patch(text, None, |p| Ok::<_, String>(files.get(p).cloned()))
        .map(|plan| plan.changes)
        .map_err(|e| e.to_string())
}

fn check_path(ctx: &str, p: &str) {
    assert!(!p.is_empty(), "{ctx}: empty path planned");
    assert!(!p.starts_with('/'), "{ctx}: absolute path planned: {p}");
    assert!(p.split('/').all(|c| !c.is_empty() && c != ".." && c != "."), "{ctx}: path not normalized: {p}");
}

#[test]
fn random_patches_never_panic_and_keep_their_invariants() {
    let cases = env_or("FUZZ_CASES", 3000);
    let seed = env_or("FUZZ_SEED", 0x05ee_d0fb_a7c4);
    let mut rng = Rng(seed | 1);
    let (mut ok, mut refused) = (0, 0);
    for case in 0..cases {
        let text = patch(&mut rng);
        let ctx = format!("FUZZ_SEED={seed} case {case}: {text:?}");
        let first = std::panic::catch_unwind(|| run(&text)).unwrap_or_else(|_| panic!("{ctx}: panicked"));
        assert_eq!(first, run(&text), "{ctx}: not deterministic");
        match first {
            Ok(changes) => {
                ok += 1;
                let files = files();
                for c in &changes {
                    match c {
                        FileChange::Add { path, content } => {
                            check_path(&ctx, path);
                            assert!(
                                content.is_empty() || content.ends_with('\n'),
                                "{ctx}: added file without final newline"
                            );
                        }
                        FileChange::Update { path, content } => {
                            check_path(&ctx, path);
                            let before =
                                files.get(path).unwrap_or_else(|| panic!("{ctx}: update of a missing file {path}"));
                            assert_eq!(
                                before.ends_with('\n'),
                                content.ends_with('\n') || content.is_empty(),
                                "{ctx}: final newline changed"
                            );
                        }
                        FileChange::Delete { path } => {
                            check_path(&ctx, path);
                            assert!(files.contains_key(path), "{ctx}: delete of a missing file {path}");
                        }
                        FileChange::Move { from, to, .. } => {
                            check_path(&ctx, from);
                            check_path(&ctx, to);
                        }
                    }
                }
            }
            Err(message) => {
                refused += 1;
                assert!(message.starts_with("patch line "), "{ctx}: error does not name its line: {message}");
            }
        }
    }
    println!("{cases} patches (seed {seed}): {ok} planned, {refused} refused");
    assert!(ok > 0 && refused > 0, "the generator must reach both outcomes: {ok} planned, {refused} refused");
}
