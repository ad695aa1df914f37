//! `plan-read` output (FORGE-REFERENCE §2.1): paging, searching one plan, and the
//! recent-plans list and search.
//!
//! Which plan is read (loop, session, caller) is the caller's business; these
//! functions only format.
//!
//! * Paging numbers lines from 1: `(<T> lines total)`, then `<n>: <text>` lines,
//!   then, when the window stops before the end, a blank line and
//!   `(Showing lines <A>-<B> of <T>. Use offset=<B+1> to continue.)`.
//! * Search lists every matching line: `Found 1 match:` / `Found <n> matches:`, a
//!   blank line, `  Line <k>: <text>`.
//! * Recent plans: `Recent plans for project <id> (<n> found)` then, per plan,
//!   `  <label> | <ISO time> | <first line>` and `    <lines 2-3>`; the recent
//!   search shows the first matching line instead of the preview.

use super::{js_trim, user_regex};
use crate::text::{iso_millis, split_lines};
use std::fmt::Write as _;

/// Lines shown when `limit` is not given.
pub const DEFAULT_LIMIT: u64 = 2000;
/// The most bytes of plan text one page shows: a page stops before the line that would
/// pass it (its notice gives the next offset), so that a reply stays under the 64 MiB a
/// client may refuse, even if every character escapes to six bytes (a review sent an
/// 88 MB reply for `limit: 200000`).
pub const PAGE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Recent plans listed when `count` is not given.
pub const DEFAULT_RECENT_COUNT: usize = 20;
/// Most recent plans listed.
pub const MAX_RECENT_COUNT: usize = 100;

/// One page of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Lines in the plan.
    pub total_lines: usize,
    /// 1-based number of the first line of the window.
    pub first: usize,
    /// 1-based number of the last line shown; 0 when none is shown.
    pub last: usize,
    /// The `offset` that continues the read, when the window stops before the end.
    pub next_offset: Option<usize>,
    /// The tool output.
    pub text: String,
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A window of the plan: `offset` is the 1-based first line (absent or 0 means 1),
/// `limit` the most lines shown (absent means 2000, 0 shows none). An offset past
/// the end shows the header and an empty line.
pub fn page(plan: &str, offset: Option<u64>, limit: Option<u64>) -> Page {
    let lines = split_lines(plan);
    let total = lines.len();
    let offset = to_usize(offset.unwrap_or(1).max(1));
    let limit = to_usize(limit.unwrap_or(DEFAULT_LIMIT));
    let start = (offset - 1).min(total);
    let mut shown = &lines[start..start + limit.min(total - start)];
    // Cut at the byte budget (at least one line is shown).
    let mut bytes = 0usize;
    if let Some(cut) = shown.iter().position(|l| {
        bytes += l.len() + 12;
        bytes > PAGE_BYTES_MAX
    }) {
        shown = &shown[..cut.max(1)];
    }

    // One buffer for the whole page (a string per line was most of plan-read's time).
    let mut text = String::with_capacity(32 + shown.iter().map(|l| l.len() + 8).sum::<usize>());
    let _ = writeln!(text, "({total} lines total)");
    // Numbers through itoa: `write!` per line was a tenth of a 2,000-line read.
    let mut number = itoa::Buffer::new();
    for (i, line) in shown.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(number.format(offset.saturating_add(i)));
        text.push_str(": ");
        text.push_str(line);
    }

    let through = (offset as u128 - 1) + limit as u128;
    let last_shown = offset - 1 + shown.len();
    let cut = last_shown < total && (last_shown as u128) < through && !shown.is_empty();
    let next_offset = if through < total as u128 || cut {
        text.push_str(&format!(
            "\n\n(Showing lines {offset}-{last_shown} of {total}. Use offset={} to continue.)",
            last_shown + 1
        ));
        Some(last_shown + 1)
    } else {
        None
    };

    Page { total_lines: total, first: offset, last: if shown.is_empty() { 0 } else { last_shown }, next_offset, text }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    /// 1-based line number.
    pub line: usize,
    /// The line's text.
    pub text: String,
}

/// Every line of the plan matching `pattern`, and the tool output. `Err` is
/// `Invalid regex pattern: <reason>`.
pub fn search(plan: &str, pattern: &str) -> Result<(Vec<SearchHit>, String), String> {
    let re = user_regex(pattern)?;
    let hits: Vec<SearchHit> = split_lines(plan)
        .iter()
        .enumerate()
        .filter(|(_, line)| re.is_match(line))
        .map(|(i, line)| SearchHit { line: i + 1, text: (*line).to_string() })
        .collect();
    if hits.is_empty() {
        return Ok((hits, "No matches found in plan".to_string()));
    }
    let heading = if hits.len() == 1 { "Found 1 match:".to_string() } else { format!("Found {} matches:", hits.len()) };
    let body: Vec<String> = hits.iter().map(|h| format!("  Line {}: {}", h.line, h.text)).collect();
    let text = format!("{heading}\n\n{}", body.join("\n"));
    Ok((hits, text))
}

/// A stored plan of the project, for the recent list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentPlan {
    /// `loop: <name>` or `session: <id>`.
    pub label: String,
    /// Last update, epoch milliseconds.
    pub updated_at: i64,
    /// The plan text.
    pub content: String,
}

/// `count` for the recent list: 20 when absent, clamped to 1..=100.
pub fn clamp_count(count: Option<u64>) -> usize {
    count.map_or(DEFAULT_RECENT_COUNT, |c| to_usize(c.clamp(1, MAX_RECENT_COUNT as u64)))
}

/// How many plans the recent search scans for `n` results: `max(n × 5, 100)`.
pub fn recent_scan_size(n: usize) -> usize {
    n.saturating_mul(5).max(100)
}

fn entry_head(plan: &RecentPlan) -> String {
    let first = split_lines(&plan.content).first().copied().unwrap_or("");
    format!("  {} | {} | {}", plan.label, iso_millis(plan.updated_at), js_trim(first))
}

/// The recent list. `plans` are newest first and already cut to N by the caller.
pub fn recent_list(project_id: &str, plans: &[RecentPlan]) -> String {
    if plans.is_empty() {
        return "No recent plans found".to_string();
    }
    let mut out = vec![format!("Recent plans for project {project_id} ({} found)", plans.len())];
    for plan in plans {
        out.push(entry_head(plan));
        let lines = split_lines(&plan.content);
        let preview = lines.iter().skip(1).take(2).copied().collect::<Vec<_>>().join(" ");
        out.push(format!("    {}", js_trim(&preview)));
    }
    out.join("\n")
}

/// The recent search: the first `n` of `plans` (newest first; the caller passes the
/// newest [`recent_scan_size`]) with a line matching `pattern`. Returns the indexes
/// of the matching plans in `plans` and the tool output; `Err` is
/// `Invalid regex pattern: <reason>`.
pub fn recent_search(plans: &[RecentPlan], pattern: &str, n: usize) -> Result<(Vec<usize>, String), String> {
    let re = user_regex(pattern)?;
    let mut found: Vec<(usize, usize, &str)> = Vec::new();
    for (index, plan) in plans.iter().enumerate() {
        if found.len() >= n {
            break;
        }
        let first_match = split_lines(&plan.content).into_iter().enumerate().find(|(_, line)| re.is_match(line));
        if let Some((line, text)) = first_match {
            found.push((index, line + 1, text));
        }
    }
    if found.is_empty() {
        return Ok((Vec::new(), "No matching recent plans found".to_string()));
    }
    let mut out = vec![format!("Found {} recent plan match(es) for /{pattern}/.", found.len())];
    for &(index, line, text) in &found {
        if let Some(plan) = plans.get(index) {
            out.push(entry_head(plan));
            out.push(format!("    Line {line}: {text}"));
        }
    }
    Ok((found.iter().map(|f| f.0).collect(), out.join("\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "one\ntwo\nthree\nfour\nfive";

    #[test]
    fn whole_plan_by_default() {
        let p = page(PLAN, None, None);
        assert_eq!(p.text, "(5 lines total)\n1: one\n2: two\n3: three\n4: four\n5: five");
        assert_eq!((p.first, p.last, p.next_offset), (1, 5, None));
    }

    #[test]
    fn trailing_newline_counts_an_empty_line() {
        let p = page("a\nb\n", None, None);
        assert_eq!(p.total_lines, 3);
        assert_eq!(p.text, "(3 lines total)\n1: a\n2: b\n3: ");
    }

    #[test]
    fn window_with_notice() {
        let p = page(PLAN, Some(2), Some(2));
        assert_eq!(p.text, "(5 lines total)\n2: two\n3: three\n\n(Showing lines 2-3 of 5. Use offset=4 to continue.)");
        assert_eq!((p.first, p.last, p.next_offset), (2, 3, Some(4)));
    }

    #[test]
    fn window_reaching_the_end_has_no_notice() {
        let p = page(PLAN, Some(4), Some(2));
        assert_eq!(p.text, "(5 lines total)\n4: four\n5: five");
        assert_eq!(p.next_offset, None);
        assert_eq!(page(PLAN, Some(4), Some(99)).next_offset, None);
    }

    #[test]
    fn offset_zero_is_one() {
        assert_eq!(page(PLAN, Some(0), Some(1)).text, page(PLAN, Some(1), Some(1)).text);
        assert!(page(PLAN, Some(0), Some(1)).text.starts_with("(5 lines total)\n1: one\n\n"));
    }

    #[test]
    fn limit_zero_shows_no_lines() {
        let p = page(PLAN, None, Some(0));
        assert_eq!(p.text, "(5 lines total)\n\n\n(Showing lines 1-0 of 5. Use offset=1 to continue.)");
        assert_eq!((p.last, p.next_offset), (0, Some(1)));
    }

    #[test]
    fn offset_past_end_shows_header_and_empty_line() {
        let p = page(PLAN, Some(9), None);
        assert_eq!(p.text, "(5 lines total)\n");
        assert_eq!((p.last, p.next_offset), (0, None));
        let huge = page(PLAN, Some(u64::MAX), Some(u64::MAX));
        assert_eq!(huge.text, "(5 lines total)\n");
    }

    #[test]
    fn a_page_stops_at_its_byte_budget_and_says_where_to_go_on() {
        let line = "x".repeat(1024 * 1024);
        let plan = vec![line.as_str(); 20].join("\n");
        let p = page(&plan, None, Some(100));
        assert_eq!((p.first, p.last, p.next_offset), (1, 7, Some(8)));
        assert!(p.text.len() <= PAGE_BYTES_MAX + 100, "{}", p.text.len());
        assert!(
            p.text.ends_with("(Showing lines 1-7 of 20. Use offset=8 to continue.)"),
            "{}",
            &p.text[p.text.len() - 80..]
        );
        // One line over the budget is still shown alone.
        let huge = "y".repeat(PAGE_BYTES_MAX + 1);
        let p = page(&format!("{huge}\nz"), None, None);
        assert_eq!((p.last, p.next_offset), (1, Some(2)));
        // The last page: no notice.
        let p = page(&plan, Some(15), None);
        assert_eq!((p.last, p.next_offset), (20, None));
    }

    #[test]
    fn default_limit_is_2000() {
        let plan = (1..=2500).map(|i| i.to_string()).collect::<Vec<_>>().join("\n");
        let p = page(&plan, None, None);
        assert_eq!(p.last, 2000);
        assert!(p.text.ends_with("2000: 2000\n\n(Showing lines 1-2000 of 2500. Use offset=2001 to continue.)"));
    }

    #[test]
    fn search_one_and_many() {
        let (hits, text) = search(PLAN, "^t").unwrap_or_default();
        assert_eq!(hits.len(), 2);
        assert_eq!(text, "Found 2 matches:\n\n  Line 2: two\n  Line 3: three");
        let (_, text) = search(PLAN, "ive$").unwrap_or_default();
        assert_eq!(text, "Found 1 match:\n\n  Line 5: five");
        let (hits, text) = search(PLAN, "zzz").unwrap_or_default();
        assert!(hits.is_empty());
        assert_eq!(text, "No matches found in plan");
    }

    #[test]
    fn search_invalid_regex() {
        let err = search(PLAN, "(unclosed").unwrap_err();
        assert!(err.starts_with("Invalid regex pattern: "), "{err}");
        assert!(!err.contains('\n'));
    }

    fn plans() -> Vec<RecentPlan> {
        vec![
            RecentPlan {
                label: "loop: add-oauth".into(),
                updated_at: 1_733_150_000_123,
                content: "  # OAuth plan  \nLine two\n  line three  \nline four with token".into(),
            },
            RecentPlan { label: "session: ses_1".into(), updated_at: 0, content: "# Single".into() },
        ]
    }

    #[test]
    fn recent_list_format() {
        assert_eq!(recent_list("p1", &[]), "No recent plans found");
        assert_eq!(
            recent_list("p1", &plans()),
            "Recent plans for project p1 (2 found)\n  loop: add-oauth | 2024-12-02T14:33:20.123Z | # OAuth plan\n    Line two   line three\n  session: ses_1 | 1970-01-01T00:00:00.000Z | # Single\n    "
        );
    }

    #[test]
    fn recent_search_format_and_limit() {
        let (idx, text) = recent_search(&plans(), "[Ss]ingle|token", 20).unwrap_or_default();
        assert_eq!(idx, vec![0, 1]);
        assert_eq!(
            text,
            "Found 2 recent plan match(es) for /[Ss]ingle|token/.\n  loop: add-oauth | 2024-12-02T14:33:20.123Z | # OAuth plan\n    Line 4: line four with token\n  session: ses_1 | 1970-01-01T00:00:00.000Z | # Single\n    Line 1: # Single"
        );
        let (idx, _) = recent_search(&plans(), "[Ss]ingle|token", 1).unwrap_or_default();
        assert_eq!(idx, vec![0]);
        let (idx, text) = recent_search(&plans(), "nothing", 5).unwrap_or_default();
        assert!(idx.is_empty());
        assert_eq!(text, "No matching recent plans found");
        assert!(recent_search(&plans(), "[", 5).unwrap_err().starts_with("Invalid regex pattern: "));
    }

    #[test]
    fn count_clamping() {
        assert_eq!(clamp_count(None), 20);
        assert_eq!(clamp_count(Some(0)), 1);
        assert_eq!(clamp_count(Some(7)), 7);
        assert_eq!(clamp_count(Some(1000)), 100);
        assert_eq!(recent_scan_size(20), 100);
        assert_eq!(recent_scan_size(30), 150);
    }
}
