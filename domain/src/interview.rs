//! Interview state (`forge.interview-submit-state`): the unified-diff applier that turns
//! a turn's `diff` into the next spec, and the `forge://interview/<sessionId>.md`
//! document.
//!
//! The applier is small and strict on purpose. A unified diff carries line numbers, so a
//! hunk is tried where its header says first, then at the nearest place where its old
//! lines match exactly (an offset, as `patch(1)` does), then the nearest place where they
//! match ignoring trailing whitespace. Ambiguity cannot arise: the nearest place to the
//! stated line wins, ties going to the earlier line. The hunk counts in the header are
//! not enforced (models get them wrong), the body is what counts. A hunk whose old lines
//! are found nowhere is an error naming the hunk (its number and header line) and the
//! first old line it could not place. Added lines are written exactly as authored; the
//! spec keeps its final-newline state.
//!
//! (The project's `patch` module applies the `*** Begin Patch` format, whose hunks have
//! no line numbers and which refuses ambiguity; spec text repeats lines such as blank
//! lines and `---` rules, so a line-number-guided applier fits unified diffs better.)

/// One line of a hunk body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffLine {
    Context(String),
    Remove(String),
    Add(String),
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffHunk {
    /// 1-based number of the hunk in the diff.
    pub number: usize,
    /// 1-based line of the diff where its `@@` header is.
    pub line: usize,
    /// The header line as written.
    pub header: String,
    /// 1-based start line in the old text (0 for an insertion into an empty text).
    pub old_start: usize,
    pub lines: Vec<DiffLine>,
}

impl DiffHunk {
    fn old(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                DiffLine::Context(s) | DiffLine::Remove(s) => Some(s.as_str()),
                DiffLine::Add(_) => None,
            })
            .collect()
    }
    fn name(&self) -> String {
        format!("hunk {} (diff line {}: `{}`)", self.number, self.line, self.header)
    }
}

fn parse_start(header: &str) -> Option<usize> {
    // `@@ -a,b +c,d @@ optional text`
    let rest = header.strip_prefix("@@ -")?;
    let old = rest.split_whitespace().next()?;
    let start = old.split(',').next()?;
    start.parse().ok()
}

/// Parses a unified diff (file headers `---`/`+++`, `diff --git` and `index` lines
/// before the first hunk are skipped). Errors name the diff line.
pub fn parse_unified(diff: &str) -> Result<Vec<DiffHunk>, String> {
    let mut hunks: Vec<DiffHunk> = Vec::new();
    let lines: Vec<&str> = diff.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    // A final newline does not make an empty last line.
    let n = if lines.last() == Some(&"") { lines.len() - 1 } else { lines.len() };
    for (i, raw) in lines[..n].iter().enumerate() {
        let at = i + 1;
        if raw.starts_with("@@") {
            let old_start = parse_start(raw).ok_or_else(|| {
                format!("diff line {at}: malformed hunk header `{raw}` (expected `@@ -start,count +start,count @@`)")
            })?;
            hunks.push(DiffHunk {
                number: hunks.len() + 1,
                line: at,
                header: raw.to_string(),
                old_start,
                lines: vec![],
            });
            continue;
        }
        let Some(h) = hunks.last_mut() else {
            if raw.starts_with("--- ")
                || raw.starts_with("+++ ")
                || raw.starts_with("diff ")
                || raw.starts_with("index ")
                || raw.trim().is_empty()
            {
                continue;
            }
            return Err(format!(
                "diff line {at}: expected a `@@ -start,count +start,count @@` hunk header, found `{raw}`"
            ));
        };
        match raw.chars().next() {
            None => h.lines.push(DiffLine::Context(String::new())),
            Some(' ') => h.lines.push(DiffLine::Context(raw[1..].to_string())),
            Some('-') => h.lines.push(DiffLine::Remove(raw[1..].to_string())),
            Some('+') => h.lines.push(DiffLine::Add(raw[1..].to_string())),
            Some('\\') => {}
            Some(_) => {
                return Err(format!(
                    "diff line {at} (in hunk {}): a hunk line must start with ' ', '-' or '+', found `{raw}`",
                    h.number
                ))
            }
        }
    }
    if hunks.is_empty() {
        return Err("the diff has no hunk (`@@ -start,count +start,count @@`)".to_string());
    }
    // Trailing empty context lines are separators, not content.
    for h in &mut hunks {
        while matches!(h.lines.last(), Some(DiffLine::Context(s)) if s.is_empty()) {
            h.lines.pop();
        }
        if h.lines.is_empty() {
            return Err(format!("{} is empty", h.name()));
        }
    }
    Ok(hunks)
}

/// For each line `p` of `text[lo..]`, the length of the longest prefix of `old` that ends
/// at `p` (`old.len()` where the whole of it does), compared exactly or, `loose`, without
/// trailing white space. Knuth-Morris-Pratt over lines: O(text + old) comparisons, where
/// comparing at every start was O(text * old) (a 60 KB diff against a 400 KB spec ran for
/// minutes, holding the store's writes).
fn prefix_ends(text: &[&str], lo: usize, old: &[&str], loose: bool) -> Vec<usize> {
    let key = |s: &'_ str| -> usize {
        if loose {
            s.trim_end().len()
        } else {
            s.len()
        }
    };
    let needle: Vec<&str> = old.iter().map(|l| &l[..key(l)]).collect();
    let mut ends = Vec::with_capacity(text.len().saturating_sub(lo));
    if needle.is_empty() {
        return ends;
    }
    let fail = crate::text::kmp_failure(&needle);
    let mut k = 0;
    for line in text.iter().skip(lo) {
        let line = &line[..key(line)];
        if k == needle.len() {
            k = fail[k - 1];
        }
        while k > 0 && line != needle[k] {
            k = fail[k - 1];
        }
        if line == needle[k] {
            k += 1;
        }
        ends.push(k);
    }
    ends
}

/// Of the starts `lo + i + 1 - len` of the lines `i` whose prefix length is `len`, the one
/// nearest to `want` (the lower of two as near).
fn nearest_start(ends: &[usize], lo: usize, len: usize, want: usize) -> Option<usize> {
    ends.iter()
        .enumerate()
        .filter(|&(_, &k)| k == len && len > 0)
        .map(|(i, _)| lo + i + 1 - len)
        .min_by_key(|&s| (s.abs_diff(want), s))
}

/// [`nearest_within`] without a budget (the tests).
#[cfg(test)]
fn nearest(text: &[&str], lo: usize, want: usize, old: &[&str], loose: bool) -> Option<usize> {
    let mut unlimited = usize::MAX;
    nearest_within(text, lo, want, old, loose, &mut unlimited).ok().flatten()
}

/// Lines one diff may compare while placing its hunks: a hunk found at or near its line
/// costs about its length, but each hunk found nowhere (or only with other trailing white
/// space) costs a pass over the spec, and a diff of thousands of them would hold the
/// store's writes for minutes.
const MAX_COMPARED: usize = 50_000_000;

/// The place nearest to `want` (within `lo..`) where `old` fits. Searched in windows
/// around `want` that double until one holds a match or covers the whole range: a hunk at
/// or near its line costs about its own length, not the spec's, however many hunks a diff
/// has. A match at distance `d` lies in every window of radius `d` or more, and any match
/// outside a window is farther than all inside it, so the first window with a match holds
/// the nearest one (ties included: a window reaches as far on both sides).
///
/// The lines compared are counted against `budget`; `Err` when it runs out.
fn nearest_within(
    text: &[&str],
    lo: usize,
    want: usize,
    old: &[&str],
    loose: bool,
    budget: &mut usize,
) -> Result<Option<usize>, ()> {
    if old.is_empty() || old.len() > text.len() || lo > text.len() - old.len() {
        return Ok(None);
    }
    let last = text.len() - old.len();
    let want = want.clamp(lo, last);
    let mut radius = old.len().max(16);
    loop {
        let from = want.saturating_sub(radius).max(lo);
        let to = (want + radius).min(last);
        let window = &text[..to + old.len()];
        *budget = budget.checked_sub(window.len() - from).ok_or(())?;
        if let Some(at) = nearest_start(&prefix_ends(window, from, old, loose), from, old.len(), want) {
            return Ok(Some(at));
        }
        if from == lo && to == last {
            return Ok(None);
        }
        radius = radius.saturating_mul(2);
    }
}

/// Applies a unified diff to `text`; every hunk applies or the error names the one
/// that does not.
pub fn apply_unified(text: &str, diff: &str) -> Result<String, String> {
    let hunks = parse_unified(diff)?;
    let final_newline = text.is_empty() || text.ends_with('\n');
    let body = text.strip_suffix('\n').unwrap_or(text);
    let old_lines: Vec<&str> = if text.is_empty() { vec![] } else { body.split('\n').collect() };
    let mut out: Vec<String> = Vec::new();
    let mut cursor = 0;
    let mut budget = MAX_COMPARED;
    for h in &hunks {
        let old = h.old();
        let want = h.old_start.saturating_sub(1);
        let at = if old.is_empty() {
            // Pure insertion: after line `old_start`.
            let at = h.old_start.min(old_lines.len());
            if at < cursor {
                return Err(format!("{} inserts before the previous hunk; hunks must be in order", h.name()));
            }
            at
        } else {
            let too_costly = |_| {
                format!(
                    "{} could not be placed: the diff's hunks are too far from the spec lines they name (over {MAX_COMPARED} lines compared); send fewer hunks with their current line numbers, or the whole spec",
                    h.name()
                )
            };
            let exact = nearest_within(&old_lines, cursor, want, &old, false, &mut budget).map_err(too_costly)?;
            let found = match exact {
                Some(at) => Some(at),
                None => nearest_within(&old_lines, cursor, want, &old, true, &mut budget).map_err(too_costly)?,
            };
            match found {
                Some(at) => at,
                None => {
                    // Say which old line is the problem: the longest prefix that fits,
                    // nearest to where the hunk says it is.
                    let ends = prefix_ends(&old_lines, cursor, &old, true);
                    let longest = ends.iter().copied().max().unwrap_or(0);
                    let best = nearest_start(&ends, cursor, longest, want).map(|s| (s, longest));
                    // Lines that are in the spec, but only where an earlier hunk already went.
                    let mut spare = MAX_COMPARED;
                    let before = nearest_within(&old_lines, 0, want, &old, true, &mut spare).ok().flatten();
                    let detail = match best {
                        _ if before.is_some_and(|b| b < cursor) => format!(
                            "its old lines are at spec line {}, before where the previous hunk ended (line {}); hunks must be in the spec's order and must not overlap",
                            before.unwrap_or(0) + 1,
                            cursor
                        ),
                        Some((s, k)) if k > 0 && k < old.len() => format!(
                            "its old lines match from spec line {} but line {} of the hunk (`{}`) differs from the spec (`{}`)",
                            s + 1,
                            k + 1,
                            old[k],
                            old_lines.get(s + k).copied().unwrap_or("<end of spec>")
                        ),
                        _ => format!("its first old line `{}` is not in the spec", old[0]),
                    };
                    return Err(format!("{} does not apply: {detail}", h.name()));
                }
            }
        };
        out.extend(old_lines[cursor..at].iter().map(|s| s.to_string()));
        // Context lines keep the spec's bytes; added lines are written as authored.
        let mut k = at;
        for l in &h.lines {
            match l {
                DiffLine::Context(_) => {
                    out.push(old_lines[k].to_string());
                    k += 1;
                }
                DiffLine::Remove(_) => k += 1,
                DiffLine::Add(s) => out.push(s.clone()),
            }
        }
        cursor = k;
    }
    out.extend(old_lines[cursor..].iter().map(|s| s.to_string()));
    let mut s = out.join("\n");
    if final_newline && !s.is_empty() {
        s.push('\n');
    }
    Ok(s)
}

/// The stored state of one interview, as the document shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterviewView<'a> {
    pub session_id: &'a str,
    pub status: &'a str,
    pub spec: &'a str,
    pub questions: &'a [String],
    pub turn: i64,
    pub updated_at: &'a str,
}

/// Renders `forge://interview/<sessionId>.md`.
pub fn render(v: &InterviewView) -> String {
    let mut out = format!(
        "# Interview {}\n\nStatus: {}\nTurn {} · updated {}\n\n## Open questions\n\n",
        v.session_id,
        v.status.trim(),
        v.turn,
        v.updated_at
    );
    if v.questions.is_empty() {
        out.push_str("None.\n");
    }
    for (i, q) in v.questions.iter().enumerate() {
        out.push_str(&format!("{}. {}\n", i + 1, q.trim()));
    }
    out.push_str("\n## Spec\n\n");
    out.push_str(v.spec.trim_end());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "# Spec\n\nGoal: a\n\n## Steps\n\n- one\n- two\n- three\n";

    #[test]
    fn applies() {
        let cases: &[(&str, &str, &str)] = &[
            // (name, diff, expected)
            (
                "replace one line",
                "--- a/spec\n+++ b/spec\n@@ -3,1 +3,1 @@\n-Goal: a\n+Goal: b\n",
                "# Spec\n\nGoal: b\n\n## Steps\n\n- one\n- two\n- three\n",
            ),
            (
                "context and add",
                "@@ -7,2 +7,3 @@\n - one\n+- one and a half\n - two\n",
                "# Spec\n\nGoal: a\n\n## Steps\n\n- one\n- one and a half\n- two\n- three\n",
            ),
            (
                "stale line number is an offset",
                "@@ -1,2 +1,2 @@\n - two\n-- three\n+- 3\n",
                "# Spec\n\nGoal: a\n\n## Steps\n\n- one\n- two\n- 3\n",
            ),
            (
                "two hunks in order",
                "@@ -1 +1 @@\n-# Spec\n+# Spec v2\n@@ -9 +9,2 @@\n - three\n+- four\n",
                "# Spec v2\n\nGoal: a\n\n## Steps\n\n- one\n- two\n- three\n- four\n",
            ),
            (
                "trailing whitespace drift",
                "@@ -3 +3 @@\n-Goal: a   \n+Goal: c\n",
                "# Spec\n\nGoal: c\n\n## Steps\n\n- one\n- two\n- three\n",
            ),
            (
                "nearest of repeated lines wins",
                "@@ -4,1 +4,1 @@\n-\n+(blank)\n",
                "# Spec\n\nGoal: a\n(blank)\n## Steps\n\n- one\n- two\n- three\n",
            ),
            (
                "pure insertion after line 9",
                "@@ -9,0 +10,1 @@\n+- four\n",
                "# Spec\n\nGoal: a\n\n## Steps\n\n- one\n- two\n- three\n- four\n",
            ),
            (
                "crlf diff",
                "@@ -3 +3 @@\r\n-Goal: a\r\n+Goal: d\r\n",
                "# Spec\n\nGoal: d\n\n## Steps\n\n- one\n- two\n- three\n",
            ),
        ];
        for (name, diff, want) in cases {
            assert_eq!(apply_unified(SPEC, diff).as_deref(), Ok(*want), "{name}");
        }
    }

    #[test]
    fn refuses() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("no hunk", "just text\n", &["expected a `@@"]),
            ("empty", "", &["no hunk"]),
            ("bad header", "@@ nonsense @@\n-a\n", &["diff line 1", "malformed hunk header"]),
            ("bad line", "@@ -1 +1 @@\n-# Spec\n*oops\n", &["diff line 3", "hunk 1"]),
            (
                "missing line",
                "@@ -3 +3 @@\n-Goal: z\n+Goal: y\n",
                &["hunk 1 (diff line 1", "`Goal: z` is not in the spec"],
            ),
            (
                "second hunk stale",
                "@@ -1 +1 @@\n-# Spec\n+# S\n@@ -7,2 +7,2 @@\n - one\n-- zwei\n+- 2\n",
                &["hunk 2 (diff line 4", "line 2 of the hunk (`- zwei`) differs", "(`- two`)"],
            ),
            (
                // The second hunk's lines are in the spec, before the first hunk's: said so,
                // not "not in the spec".
                "out of order",
                "@@ -3 +3 @@\n-Goal: a\n+Goal: b\n@@ -1 +1 @@\n-# Spec\n+# S\n",
                &["hunk 2", "at spec line 1, before where the previous hunk ended (line 3)", "in the spec's order"],
            ),
        ];
        for (name, diff, needles) in cases {
            let e = apply_unified(SPEC, diff).unwrap_err();
            for n in *needles {
                assert!(e.contains(n), "{name}: {e}");
            }
        }
    }

    /// The search is linear: a hunk of 20,000 repeated context lines against a spec of
    /// 200,000 such lines is placed (or refused, naming the differing line) at once. It was
    /// O(spec * hunk): minutes.
    #[test]
    fn long_repetitive_hunks_are_placed_in_linear_time() {
        let spec = "a\n".repeat(200_000);
        let stale = format!("@@ -1 +1 @@\n{}-b\n+c\n", " a\n".repeat(20_000));
        let e = apply_unified(&spec, &stale).unwrap_err();
        assert!(e.contains("line 20001 of the hunk (`b`) differs"), "{e}");
        // Many hunks, each at its line: linear in the diff, not hunks x spec.
        let numbered: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let diff: String =
            (0..5_000).map(|h| format!("@@ -{0} +{0} @@\n-line {1}\n+LINE {1}\n", h * 20 + 1, h * 20)).collect();
        let out = apply_unified(&numbered, &diff).unwrap();
        assert!(out.starts_with("LINE 0\nline 1\n") && out.contains("\nLINE 99980\n"), "placed at their lines");
        // Hunks found only by their loose match each cost a pass over the spec: a diff of
        // thousands of them is refused once the budget is spent, naming the hunk.
        let stale: String =
            (0..4_000).map(|h| format!("@@ -{0} +{0} @@\n-line {1}  \n+L\n", h * 10 + 1, h * 10)).collect();
        let spec40k: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
        let e = apply_unified(&spec40k, &stale).err().unwrap_or_default();
        assert!(e.contains("too far from the spec lines"), "{}", &e[..e.len().min(300)]);
        let fits = format!("@@ -150000 +150000 @@\n{}-a\n+c\n", " a\n".repeat(20_000));
        let out = apply_unified(&spec, &fits).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 200_000);
        assert_eq!(lines.iter().position(|l| *l == "c"), Some(149_999 + 20_000), "placed at its line");
    }

    /// The line search agrees with comparing at every start, nearest first, on generated
    /// texts of a few repeated lines (where overlapping and nearby matches abound).
    #[test]
    fn the_line_search_agrees_with_the_plain_one() {
        fn plain(text: &[&str], lo: usize, want: usize, old: &[&str], loose: bool) -> Option<usize> {
            let fits = |at: usize| {
                at + old.len() <= text.len()
                    && old
                        .iter()
                        .zip(&text[at..])
                        .all(|(a, b)| if loose { a.trim_end() == b.trim_end() } else { a == b })
            };
            (lo..text.len()).filter(|&s| fits(s)).min_by_key(|&s| (s.abs_diff(want), s))
        }
        let alphabet = ["x", "y", "x ", ""];
        let mut next = crate::text::test_rng();
        for _ in 0..3000 {
            let text: Vec<&str> = (0..next(30)).map(|_| alphabet[next(4)]).collect();
            let old: Vec<&str> = (0..1 + next(4)).map(|_| alphabet[next(4)]).collect();
            let (lo, want, loose) = (next(8), next(40), next(2) == 1);
            assert_eq!(
                nearest(&text, lo, want, &old, loose),
                plain(&text, lo, want, &old, loose),
                "{text:?} {old:?} lo {lo} want {want} loose {loose}"
            );
        }
    }

    #[test]
    fn keeps_final_newline_state() {
        assert_eq!(apply_unified("a\nb", "@@ -2 +2 @@\n-b\n+c\n").unwrap(), "a\nc");
        assert_eq!(apply_unified("", "@@ -0,0 +1 @@\n+x\n").unwrap(), "x\n");
    }

    #[test]
    fn renders() {
        let q = vec!["Which DB?".to_string()];
        let v = InterviewView {
            session_id: "ses_1",
            status: "asking",
            spec: "# S\n",
            questions: &q,
            turn: 2,
            updated_at: "t",
        };
        let doc = render(&v);
        assert!(doc.starts_with("# Interview ses_1\n"));
        assert!(doc.contains("1. Which DB?") && doc.contains("## Spec\n\n# S\n"));
    }
}
