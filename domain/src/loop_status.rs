//! `loop-status` text (FORGE-REFERENCE.md §6, without the usage block, which comes
//! with usage tracking).

use crate::text::iso_millis;

/// What the formatter needs of one loop.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoopView {
    pub name: String,
    pub status: String,
    pub phase: String,
    pub iteration: i64,
    pub max_iterations: i64,
    pub session: String,
    pub worktree: String,
    pub branch: Option<String>,
    pub started_at: i64,
    pub completed_at: Option<i64>,
    pub termination_reason: Option<String>,
    /// (k 0-based, total, title) for sectioned loops.
    pub section: Option<(i64, i64, String)>,
    pub audit_count: i64,
    pub error_count: i64,
    /// Failed turns in a row: (coding, auditing).
    pub failed_turns: (i64, i64),
    pub last_audit: Option<String>,
    pub post_action_report: Option<String>,
    pub completion_summary: Option<String>,
    pub execution_model: Option<String>,
    pub auditor_model: Option<String>,
    /// Whether a session of the loop is busy right now.
    pub busy: bool,
    /// A running loop whose server process has ended (SIGKILL, a crash) without ending
    /// it: that process's id. Its sessions' `busy` marks are stale; the loop waits for a
    /// restart (or a cancel).
    pub server_gone: Option<i64>,
    pub last_activity_at: Option<i64>,
    /// Cumulative usage (stored rows, the live session merged), when any was captured.
    pub usage: Option<crate::usage::Totals>,
    /// The start of the loop's plan (its prompt), for a running loop's `Prompt:` line.
    pub prompt: Option<String>,
    /// The loop's last agent replies, oldest first (`Session Output:`, `Recent Activity:`).
    pub recent_replies: Vec<String>,
    /// What the loop's work changed against the commit it started from, committed or not,
    /// as counted at its last turn's end: (files, added lines, deleted lines), or why it
    /// could not be counted; `None` before any count.
    pub files_changed: Option<Result<(usize, usize, usize), String>>,
}

/// A line break of any kind (shown as a space on one line).
fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// The `Session Output:` block (FORGE-REFERENCE §6), with a blank line before it; empty
/// when there is nothing to show. Each reply on one line ([`one_line`]), at most 1,000
/// characters; then `Files changed: F (+A/-D lines)`, or why it could not be counted.
/// Forge also lists the session's token usage here; ours is the `Cumulative Usage:` block.
pub fn session_output(replies: &[String], files_changed: Option<&Result<(usize, usize, usize), String>>) -> String {
    session_output_in(replies, files_changed, false)
}

/// [`session_output`]; `markdown`: for the status document, each agent's text escaped as
/// literal Markdown ([`crate::text::md_inline`]: a reply's link, image or HTML is shown as
/// written, not rendered: a review had a reply put an image and a fake history link in the
/// rendered document).
fn session_output_in(
    replies: &[String],
    files_changed: Option<&Result<(usize, usize, usize), String>>,
    markdown: bool,
) -> String {
    if replies.is_empty() && files_changed.is_none() {
        return String::new();
    }
    let shown = |t: String| if markdown { crate::text::md_inline(&t) } else { t };
    let mut out = String::from("\nSession Output:\n");
    if !replies.is_empty() {
        out.push_str("  Recent Activity:\n");
        for r in replies {
            let flat: String = one_line(r).chars().take(1000).collect();
            out.push_str(&format!("  [assistant] {}\n", shown(flat)));
        }
    }
    match files_changed {
        Some(Ok((f, a, d))) => out.push_str(&format!("  Files changed: {f} (+{a}/-{d} lines)\n")),
        Some(Err(why)) => out.push_str(&format!("  Files changed: unavailable ({})\n", shown(one_line(why)))),
        None => {}
    }
    out
}

use crate::text::one_line;

/// loop-cancel's answer for a loop that is not running: Forge's sentence, then how it
/// ended (its status and termination reason), and for a restartable end whose work is
/// still there (`recoverable`: its worktree or branch) how to resume it:
/// "already completed" alone misled for a loop that errored or was cancelled.
pub fn already_ended(name: &str, status: &str, reason: Option<&str>, recoverable: bool) -> String {
    let how = match reason.filter(|r| !r.is_empty() && *r != status) {
        // On one line without escapes: an error's reason quotes the agent's output (review XE).
        Some(r) => format!("{status}, {}", one_line(r)),
        None => status.to_string(),
    };
    let resume = if recoverable && matches!(status, "cancelled" | "errored" | "stalled") {
        format!("; `loop-status` with name={name} restart=true resumes it")
    } else {
        String::new()
    };
    format!("Loop \"{name}\" has already completed. It ended {how}{resume}.")
}

/// `<h>h <m>m`, `<m>m <s>s` or `<s>s`.
pub fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    if s >= 3600 {
        format!("{}h {}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m {}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn iterations(v: &LoopView) -> String {
    if v.max_iterations > 0 {
        format!("{} / {}", v.iteration, v.max_iterations)
    } else {
        format!("{} (unlimited)", v.iteration)
    }
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(max).collect::<String>())
    }
}

/// The list (no name given).
pub fn render_list(loops: &[LoopView], now: i64) -> String {
    if loops.is_empty() {
        return "No loops found.".into();
    }
    let running: Vec<&LoopView> = loops.iter().filter(|l| l.status == "running").collect();
    let done: Vec<&LoopView> = loops.iter().filter(|l| l.status != "running").collect();
    let mut out = String::new();
    let recent = |out: &mut String, items: &[&LoopView], limit: usize| {
        for (i, l) in items.iter().take(limit).enumerate() {
            let end = l.completed_at.unwrap_or(now);
            out.push_str(&format!(
                "{}. {}\n   Status: {} | Iterations: {} | Duration: {} | Completed: {}\n\n",
                i + 1,
                l.name,
                // On one line, without terminal escapes: an error's reason quotes the
                // agent's output (a review had one set the terminal's title).
                one_line(l.termination_reason.as_deref().unwrap_or("unknown")),
                l.iteration,
                duration(end - l.started_at),
                l.completed_at.map(iso_millis).unwrap_or_else(|| "unknown".into())
            ));
            if let Some(u) = &l.usage {
                out.insert_str(out.len() - 1, &format!("   Usage: {}\n", crate::usage::line(u)));
            }
        }
        if items.len() > limit {
            out.push_str(&format!("   ... and {} more\n\n", items.len() - limit));
        }
    };
    if running.is_empty() {
        out.push_str("Recent Loops\n\n");
        recent(&mut out, &done, usize::MAX);
        out.push_str("Use loop-status name=<name> for details.");
        return out;
    }
    out.push_str(&format!("Active Loops ({})\n\n", running.len()));
    for (i, l) in running.iter().enumerate() {
        let section = l.section.as_ref().map(|(k, n, _)| format!(" | Section: {}/{}", k + 1, n)).unwrap_or_default();
        out.push_str(&format!(
            "{}. {}\n   Phase: {} | Iteration: {}{section} | Duration: {} | Status: {}\n\n",
            i + 1,
            l.name,
            l.phase,
            iterations(l),
            duration(now - l.started_at),
            running_status(l)
        ));
        if let Some(u) = &l.usage {
            out.insert_str(out.len() - 1, &format!("   Usage: {}\n", crate::usage::line(u)));
        }
    }
    if !done.is_empty() {
        out.push_str("Recent Loops:\n\n");
        recent(&mut out, &done, 10);
    }
    out.push_str("Use loop-status name=<name> for details.\nUse loop-cancel name=<name> to stop a loop.");
    out
}

/// A running loop's status word: `busy`, `idle`, or `server stopped` when the process that
/// ran it has ended (its sessions' marks are stale then).
fn running_status(l: &LoopView) -> &'static str {
    if l.server_gone.is_some() {
        "server stopped"
    } else if l.busy {
        "busy"
    } else {
        "idle"
    }
}

/// One loop in detail, in Forge's order (FORGE-REFERENCE §6). `restart_line` is the
/// `Restart...` line, `usage_block` the `Cumulative Usage:` block (empty when nothing was
/// used). A running loop: identity, state, the last audit, the restart line and usage,
/// then the counters, models and activity, then the plan's start (`Prompt:`). A stopped
/// one: identity, times, models, its reports, the restart line and usage. Lines Forge does
/// not have (docs/protocol.md): `Status:` of a stopped loop, `Section:`, a dead server's
/// `Server:`, the failed turns in a row, and the counters of a stopped loop.
pub fn render_detail(l: &LoopView, restart_line: &str, usage_block: &str, now: i64) -> String {
    let heading = if l.status == "running" { "Loop Status\n\n" } else { "Loop Status (Inactive)\n\n" };
    format!("{heading}{}", detail_body(l, restart_line, usage_block, Some(now)))
}

/// The loop's status document (`forge://loop/<name>/status.md`): [`render_detail`]'s
/// lines under a `# Loop <name>` heading, with no time said relative to now (a document
/// stays open between its refreshes, which come with the loop's changes): a running
/// loop's `Duration:` is left out (`Started:` is there) and its last activity is a time.
/// What agents and plans wrote is literal Markdown ([`detail_body`]); `usage_block` comes
/// escaped ([`crate::usage::render_markdown`]).
pub fn render_document(l: &LoopView, restart_line: &str, usage_block: &str) -> String {
    format!("# Loop {}\n\n{}", l.name, detail_body(l, restart_line, usage_block, None))
}

/// [`render_detail`] after its heading; `now` `None` for [`render_document`], where every
/// text an agent or a plan wrote is literal Markdown: a line escaped
/// ([`crate::text::md_inline`]), a block (`Last Audit:`, the reports) in a code fence of its
/// own ([`fenced`]). A review had an agent's text put images, a fake history link and a
/// link definition for every `[assistant]` label in the rendered document, and a block cut
/// inside a code fence turn the rest of it into code.
fn detail_body(l: &LoopView, restart_line: &str, usage_block: &str, now: Option<i64>) -> String {
    let md = now.is_none();
    // Each on one line without terminal escapes (a reason quotes the agent's output, a
    // title is the plan's: a review had them set the terminal's title and clear it), and
    // literal Markdown in the document.
    let text = |s: &str| {
        let line = one_line(s);
        if md {
            crate::text::md_inline(&line)
        } else {
            line
        }
    };
    // A block: on the label's line (`same_line`) or under it as text; fenced under it in
    // the document.
    let block = |label: &str, body: &str, same_line: bool| -> String {
        let body = &crate::text::plain_lines(body);
        if md {
            format!("\n{label}\n{}\n", fenced(body))
        } else if same_line {
            format!("\n{label} {body}\n")
        } else {
            format!("\n{label}\n{body}\n")
        }
    };
    let mut out = String::new();
    let running = l.status == "running";
    out.push_str(&format!("Name: {}\nSession: {}\nWorktree: {}\n", l.name, l.session, l.worktree));
    if running {
        out.push_str(&format!("Status: {}\nPhase: {}\n", running_status(l), l.phase));
        if let Some(pid) = l.server_gone {
            out.push_str(&format!(
                "Server: process {pid}, which ran this loop, has ended; nothing runs it until a restart (force=true) or a cancel\n"
            ));
        }
    } else {
        out.push_str(&format!("Status: {}\n", l.status));
    }
    out.push_str(&format!("Iteration: {}\n", iterations(l)));
    if let Some((k, n, title)) = &l.section {
        out.push_str(&format!("Section: {}/{} {}\n", k + 1, n, text(title)));
    }
    if let Some(end) = l.completed_at.or(now) {
        out.push_str(&format!("Duration: {}\n", duration(end - l.started_at)));
    }
    let counters = |out: &mut String| {
        out.push_str(&format!("Error count: {} (retries before termination: 3)\n", l.error_count));
        out.push_str(&format!("Audit count: {}\n", l.audit_count));
        for (n, turns) in [(l.failed_turns.0, "coding turns"), (l.failed_turns.1, "audit turns")] {
            if n > 0 {
                out.push_str(&format!("Failed {turns} in a row: {n} (the loop ends at 3)\n"));
            }
        }
    };
    let models = |out: &mut String| {
        out.push_str(&format!("Model: {}\n", text(l.execution_model.as_deref().unwrap_or("default"))));
        out.push_str(&format!("Auditor model: {}\n", text(l.auditor_model.as_deref().unwrap_or("default"))));
    };
    if running {
        if let Some(b) = &l.branch {
            out.push_str(&format!("Branch: {}\n", text(b)));
        }
        out.push_str(&session_output_in(&l.recent_replies, l.files_changed.as_ref(), md));
        if let Some(a) = &l.last_audit {
            out.push_str(&block("Last Audit:", &cut(a, 300), true));
        }
        out.push_str(&format!("\n{restart_line}\n"));
        out.push_str(usage_block);
        out.push_str(&format!("\nStarted: {}\n", iso_millis(l.started_at)));
        counters(&mut out);
        models(&mut out);
        match (l.last_activity_at, now) {
            (Some(t), Some(now)) => out.push_str(&format!("Last activity: {}s ago\n", ((now - t).max(0)) / 1000)),
            (Some(t), None) => out.push_str(&format!("Last activity: {}\n", iso_millis(t))),
            (None, _) => {}
        }
        if let Some(p) = &l.prompt {
            let flat: String = p.chars().map(|c| if is_break(c) { ' ' } else { c }).collect();
            let shown = if flat.chars().count() > 100 { cut(&flat, 97) } else { flat };
            out.push_str(&format!("\nPrompt: {}", text(&shown)));
        }
        return out.trim_end().to_string();
    }
    if let Some(r) = &l.termination_reason {
        out.push_str(&format!("Reason: {}\n", text(r)));
    }
    if let Some(b) = &l.branch {
        out.push_str(&format!("Branch: {}\n", text(b)));
    }
    out.push_str(&format!("Started: {}\n", iso_millis(l.started_at)));
    if let Some(c) = l.completed_at {
        out.push_str(&format!("Completed: {}\n", iso_millis(c)));
    }
    counters(&mut out);
    models(&mut out);
    if let Some(r) = &l.post_action_report {
        out.push_str(&block("Post-Action Report:", r.trim_end_matches('\n'), false));
    } else if let Some(s) = &l.completion_summary {
        out.push_str(&block("Completion Summary (post-action):", &cut(s, 1000), false));
    }
    if let Some(a) = &l.last_audit {
        out.push_str(&block("Last Audit:", &cut(a, 300), true));
    }
    out.push_str(&session_output_in(&l.recent_replies, l.files_changed.as_ref(), md));
    out.push_str(&format!("\n{restart_line}\n"));
    out.push_str(usage_block);
    out.trim_end().to_string()
}

/// `body` as a fenced code block, literal whatever it holds: a fence of backticks longer
/// than any run of them in it (at least three), with the info string `text`.
fn fenced(body: &str) -> String {
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}text\n{}\n{fence}", body.trim_end_matches(['\n', '\r']))
}

/// What to tell the user of the stopped loops the TTL sweep took off the list while their
/// worktree is still there (name, status, worktree folder), `None` for none.
pub fn swept_notice(left: &[(String, String, String)], ttl_ms: u64) -> Option<String> {
    if left.is_empty() {
        return None;
    }
    // Whole days as days (the default is 7), anything else as `loop-status` shows times.
    let ttl = match ttl_ms / 86_400_000 {
        d if d > 0 && ttl_ms.is_multiple_of(86_400_000) => format!("{d} day{}", if d == 1 { "" } else { "s" }),
        _ => duration(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
    };
    let one = left.len() == 1;
    let named: Vec<String> = left.iter().map(|(n, s, d)| format!("{n} ({s}, {d})")).collect();
    Some(format!(
        "{} stopped loop{} not restarted within completedLoopTtlMs ({ttl}) {} taken off the loop list: {}. {} worktree and branch are kept: work on there by hand, or remove one with `forge-lsp cleanup loop <name>`.",
        left.len(),
        if one { "" } else { "s" },
        if one { "was" } else { "were" },
        named.join("; "),
        if one { "Its" } else { "Their" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_of_an_ended_loop_says_how_it_ended() {
        let table = [
            ("completed", Some("completed"), "Loop \"a\" has already completed. It ended completed."),
            (
                "errored",
                Some("error_max_retries: boom"),
                "Loop \"a\" has already completed. It ended errored, error_max_retries: boom; `loop-status` with name=a restart=true resumes it.",
            ),
            (
                "cancelled",
                None,
                "Loop \"a\" has already completed. It ended cancelled; `loop-status` with name=a restart=true resumes it.",
            ),
        ];
        for (status, reason, want) in table {
            assert_eq!(already_ended("a", status, reason, true), want);
        }
        // Nothing left to restart from: no hint.
        assert_eq!(
            already_ended("a", "cancelled", None, false),
            "Loop \"a\" has already completed. It ended cancelled."
        );
    }

    fn v(name: &str, status: &str) -> LoopView {
        LoopView {
            name: name.into(),
            status: status.into(),
            phase: "coding".into(),
            iteration: 2,
            started_at: 0,
            ..Default::default()
        }
    }

    #[test]
    fn the_sweep_notice_names_each_loop_and_the_ttl() {
        assert_eq!(swept_notice(&[], 1), None);
        let a = ("a".to_string(), "errored".to_string(), "/d/a".to_string());
        let b = ("b".to_string(), "cancelled".to_string(), "/d/b".to_string());
        let one = swept_notice(std::slice::from_ref(&a), 7 * 86_400_000).unwrap();
        assert!(one.starts_with("1 stopped loop not restarted within completedLoopTtlMs (7 days) was taken off the loop list: a (errored, /d/a). Its worktree"), "{one}");
        let two = swept_notice(&[a, b], 3_600_000).unwrap();
        assert!(two.starts_with("2 stopped loops not restarted within completedLoopTtlMs (1h 0m) were taken off the loop list: a (errored, /d/a); b (cancelled, /d/b). Their worktree"), "{two}");
        assert!(swept_notice(&[("c".into(), "stalled".into(), "/c".into())], 86_400_000).unwrap().contains("(1 day)"));
    }

    #[test]
    fn lists_and_details() {
        assert_eq!(render_list(&[], 0), "No loops found.");
        let mut done = v("old", "completed");
        done.termination_reason = Some("completed".into());
        done.completed_at = Some(65_000);
        let t = render_list(&[done.clone()], 100_000);
        assert!(t.starts_with("Recent Loops\n\n1. old\n   Status: completed | Iterations: 2 | Duration: 1m 5s"), "{t}");
        let mut run = v("live", "running");
        run.section = Some((1, 4, "Phase 2".into()));
        let t = render_list(&[run.clone(), done], 7_200_000);
        assert!(t.starts_with("Active Loops (1)\n\n1. live\n   Phase: coding | Iteration: 2 (unlimited) | Section: 2/4 | Duration: 2h 0m"), "{t}");
        assert!(t.contains("Recent Loops:"));
        // Usage shows for completed loops too, under the loop's line.
        let mut used = v("spent", "completed");
        used.usage =
            Some(crate::usage::Totals { cost: 0.25, input: 1500, output: 20, messages: 2, ..Default::default() });
        let t = render_list(&[used], 1000);
        assert!(
            t.contains("1. spent\n   Status: unknown | Iterations: 2 | Duration: 1s | Completed: unknown\n   Usage: $0.2500 | Tokens: 1.5k in / 20 out / 0 reasoning / 0 cache read / 0 cache write\n\n"),
            "{t}"
        );
        run.prompt = Some(format!("# Plan\n\n{}", "word ".repeat(40)));
        let d = render_detail(
            &run,
            "Restart: available with force=true",
            "\nCumulative Usage:\n  Total Cost: $0.0000\n",
            1000,
        );
        assert!(d.starts_with("Loop Status\n\nName: live\n"));
        // Forge's order: the restart line and usage, then the counters and models, then the prompt.
        assert!(
            d.contains("Section: 2/4 Phase 2\nDuration: 1s\n\nRestart: available with force=true\n\nCumulative Usage:\n  Total Cost: $0.0000\n\nStarted: 1970-01-01T00:00:00.000Z\nError count: 0 (retries before termination: 3)\nAudit count: 0\nModel: default\nAuditor model: default\n\nPrompt: # Plan  word word"),
            "{d}"
        );
        assert!(d.ends_with("word..."), "97 characters and ...: {d}");
        assert_eq!(d.lines().last().unwrap().chars().count(), "Prompt: ".len() + 100, "{d}");
        let mut stopped = v("old", "cancelled");
        stopped.termination_reason = Some("cancelled".into());
        stopped.completed_at = Some(5000);
        let ds = render_detail(&stopped, "Restart: available with loop-status name=old restart=true", "", 9000);
        assert!(
            ds.ends_with("Completed: 1970-01-01T00:00:05.000Z\nError count: 0 (retries before termination: 3)\nAudit count: 0\nModel: default\nAuditor model: default\n\nRestart: available with loop-status name=old restart=true"),
            "{ds}"
        );
        assert!(d.contains("Status: idle\n") && !d.contains("Server:"), "{d}");
        // A loop whose server died: not `busy`, whatever its sessions' stale marks say.
        let orphan = LoopView { busy: true, server_gone: Some(4242), ..run };
        let d = render_detail(&orphan, "", "", 1000);
        assert!(
            d.contains("Status: server stopped\nPhase: coding\nServer: process 4242, which ran this loop, has ended;"),
            "{d}"
        );
        let t = render_list(&[orphan], 1000);
        assert!(t.contains("| Status: server stopped\n"), "{t}");
    }

    #[test]
    fn the_session_output_block() {
        type Row<'a> = (&'a [&'a str], Option<Result<(usize, usize, usize), String>>, &'a str);
        let table: &[Row] = &[
            (&[], None, ""),
            (&[], Some(Ok((0, 0, 0))), "\nSession Output:\n  Files changed: 0 (+0/-0 lines)\n"),
            (
                &["first\nline\r\ntwo", "done"],
                Some(Ok((3, 12, 4))),
                "\nSession Output:\n  Recent Activity:\n  [assistant] first line two\n  [assistant] done\n  Files changed: 3 (+12/-4 lines)\n",
            ),
            (
                &[],
                Some(Err("cannot open\nthe worktree".into())),
                "\nSession Output:\n  Files changed: unavailable (cannot open the worktree)\n",
            ),
        ];
        for (replies, files, want) in table {
            let replies: Vec<String> = replies.iter().map(|r| r.to_string()).collect();
            assert_eq!(session_output(&replies, files.as_ref()), *want);
        }
        // Terminal escapes left out, control characters as spaces.
        for (raw, want) in [
            ("\u{1b}[31mRED\u{1b}[0m end", "RED end"),
            ("a\tb\u{b}c\u{c}d\u{2028}e\u{85}f", "a b c d e f"),
            ("\u{1b}]0;title\u{7}x\u{1b}]8;;u\u{1b}\\y", "xy"),
            ("cr\ronly", "cr only"),
            ("\u{1b}", ""),
            ("\u{1b}[", ""),
            (
                "\u{1b}[1mbold\u{1b}(B\u{1b}[m normal; charset \u{1b})0 ok; C1 \u{9b}31mred\u{9b}0m",
                "bold normal; charset  ok; C1 red",
            ),
            ("before \u{1b}]0;unterminated title\nEND", "before  END"),
            ("\u{9d}8;;http://x\u{7}link", "link"),
        ] {
            assert_eq!(one_line(raw), want, "{raw:?}");
        }
        // At most 1,000 characters of a reply.
        let long = session_output(&["é".repeat(1500)], None);
        assert_eq!(long.lines().nth(3).unwrap().chars().count(), "  [assistant] ".len() + 1000);
        // In a running loop's detail: after the branch, before the last audit; in a
        // stopped one's after the last audit, before the restart line.
        let mut run = v("live", "running");
        run.branch = Some("forge/live".into());
        run.last_audit = Some("clean".into());
        run.recent_replies = vec!["did it".into()];
        run.files_changed = Some(Ok((1, 2, 0)));
        let d = render_detail(&run, "Restart: available with force=true", "", 1000);
        assert!(d.contains("Branch: forge/live\n\nSession Output:\n  Recent Activity:\n  [assistant] did it\n  Files changed: 1 (+2/-0 lines)\n\nLast Audit: clean\n\nRestart:"), "{d}");
        let stopped = LoopView { status: "completed".into(), completed_at: Some(5000), ..run };
        let d = render_detail(&stopped, "Restart: not available (completed)", "", 9000);
        assert!(d.contains("\nLast Audit: clean\n\nSession Output:\n  Recent Activity:\n  [assistant] did it\n  Files changed: 1 (+2/-0 lines)\n\nRestart: not available (completed)"), "{d}");
    }

    #[test]
    fn a_block_is_fenced_longer_than_any_run_of_backticks_in_it() {
        assert_eq!(fenced("plain"), "```text\nplain\n```");
        assert_eq!(fenced("a\n```sh\nx\n"), "````text\na\n```sh\nx\n````");
        assert_eq!(fenced("`````"), "``````text\n`````\n``````");
        assert_eq!(fenced("~~~\n<img src=x>"), "```text\n~~~\n<img src=x>\n```");
    }

    /// What agents and plans wrote reaches a terminal without its escape sequences: a
    /// reason, a section title, the prompt on one line; an audit's notes with their lines.
    #[test]
    fn agents_text_reaches_the_terminal_without_escapes() {
        let ended = already_ended("old", "errored", Some("boom \u{1b}]0;T\u{7}\u{202e}x"), false);
        assert_eq!(ended, "Loop \"old\" has already completed. It ended errored, boom x.");
        let esc = "\u{1b}]0;TITLE\u{7}\u{1b}[2J\u{1b}[31mRED\u{202e}x";
        let mut done = v("old", "errored");
        done.termination_reason = Some(format!("error: boom {esc}"));
        done.completed_at = Some(1000);
        done.section = Some((0, 1, format!("Sec {esc}")));
        done.last_audit = Some(format!("notes {esc}\nsecond line"));
        let list = render_list(std::slice::from_ref(&done), 2000);
        assert!(list.contains("   Status: error: boom REDx | "), "{list}");
        let d = render_detail(&done, "R", "", 2000);
        assert!(d.contains("\nReason: error: boom REDx\n") && d.contains("\nSection: 1/1 Sec REDx\n"), "{d}");
        assert!(d.contains("\nLast Audit: notes REDx\nsecond line\n"), "{d}");
        assert!(!d.contains('\u{1b}') && !d.contains('\u{202e}'), "{d}");
        let doc = render_document(&done, "R", "");
        assert!(doc.contains("\nLast Audit:\n```text\nnotes REDx\nsecond line\n```\n"), "{doc}");
        assert!(!doc.contains('\u{1b}'), "{doc}");
    }

    /// The status document: the detail's lines under the loop's name, with no time said
    /// relative to when it was rendered (it stays open until the loop's next change).
    #[test]
    fn the_status_document_is_the_detail_without_relative_times() {
        let mut run = v("live", "running");
        run.last_activity_at = Some(61_000);
        run.recent_replies = vec!["did it".into()];
        let detail = render_detail(&run, "Restart: available with force=true", "", 120_000);
        let doc = render_document(&run, "Restart: available with force=true", "");
        assert!(doc.starts_with("# Loop live\n\nName: live\nSession: "), "{doc}");
        assert!(detail.contains("Duration: 2m 0s\n") && detail.ends_with("Last activity: 59s ago"), "{detail}");
        assert!(!doc.contains("Duration:") && !doc.contains(" ago"), "{doc}");
        assert!(doc.ends_with("Last activity: 1970-01-01T00:01:01.000Z"), "{doc}");
        // Otherwise the same lines, in the same order.
        fn same(t: &str) -> Vec<&str> {
            t.lines().filter(|l| !l.starts_with("Duration:") && !l.starts_with("Last activity:")).skip(2).collect()
        }
        assert_eq!(same(&doc), same(&detail));
        // An agent's text is literal Markdown in the document, as written in the detail.
        let mut md = run.clone();
        md.recent_replies = vec!["![i](http://e/p.png) [x](http://e/) <img src=x>".into()];
        let doc = render_document(&md, "", "");
        assert!(doc.contains("  [assistant] !\\[i\\](http://e/p.png) \\[x\\](http://e/) \\<img src=x\\>\n"), "{doc}");
        let detail = render_detail(&md, "", "", 1);
        assert!(detail.contains("  [assistant] ![i](http://e/p.png) [x](http://e/) <img src=x>\n"), "{detail}");
        // A block is literal in a fence of its own: one cut inside a code fence leaves the
        // rest of the document as it is, and a link definition in it defines nothing.
        md.last_audit =
            Some(format!("clean\n[assistant]: http://e/\n```sh\n{}```", "cargo test -p crate\n".repeat(20)));
        let doc = render_document(&md, "Restart: available with force=true", "");
        assert!(doc.contains("\nLast Audit:\n````text\nclean\n[assistant]: http://e/\n```sh\n"), "{doc}");
        assert!(doc.contains("\ncargo...\n````\n\nRestart: available with force=true"), "{doc}");
        let detail = render_detail(&md, "Restart: available with force=true", "", 1);
        assert!(detail.contains("\nLast Audit: clean\n[assistant]: http://e/\n```sh\n"), "{detail}");
        // A stopped loop's duration is fixed: both show it.
        let stopped = LoopView { status: "completed".into(), completed_at: Some(65_000), ..run };
        let doc = render_document(&stopped, "Restart: not available (completed)", "");
        assert!(doc.starts_with("# Loop live\n\n") && doc.contains("Duration: 1m 5s\n"), "{doc}");
        assert_eq!(
            &doc["# Loop live\n\n".len()..],
            &render_detail(&stopped, "Restart: not available (completed)", "", 1)["Loop Status (Inactive)\n\n".len()..]
        );
    }
}
