//! Token and cost usage: parsing what agents report, aggregating, and the `loop-status`
//! usage block (FORGE-REFERENCE.md §6).
//!
//! The command host gives each turn a file (`FORGE_USAGE_FILE`) where the agent appends JSON
//! lines: `{"model": "...", "input": n, "output": n, "reasoning": n, "cacheRead": n,
//! "cacheWrite": n, "cost": x}` (every field optional; one line per assistant message).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One reported assistant message.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UsageLine {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cost: f64,
    /// The model's context window, when the agent knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

/// What to do with a standby session before resuming it (seeds: "Session Rotation").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Resume it as it is.
    Resume,
    /// Compact it first, then resume it.
    Compact,
    /// Do not resume it: start a fresh session.
    Fresh,
}

/// Decides on a standby from its last reported assistant message: the context it used
/// (input plus cache read and write) against `percent` of its context window. An unknown
/// window (no usage, no `contextWindow`, or 0) allows reuse without compaction; a session
/// over the threshold is compacted when the host can compact, else replaced; `percent` 0
/// disables reuse.
pub fn reuse_decision(lines: &[UsageLine], percent: u64, can_compact: bool) -> Reuse {
    if percent == 0 {
        return Reuse::Fresh;
    }
    let Some(last) = lines.last() else { return Reuse::Resume };
    let Some(window) = last.context_window.filter(|&w| w > 0) else { return Reuse::Resume };
    let used = last.input.saturating_add(last.cache_read).saturating_add(last.cache_write);
    if u128::from(used) * 100 < u128::from(window) * u128::from(percent) {
        Reuse::Resume
    } else if can_compact {
        Reuse::Compact
    } else {
        Reuse::Fresh
    }
}

/// Summed usage.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub cost: f64,
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub messages: u64,
}

impl Totals {
    pub fn add(&mut self, o: &Totals) {
        self.cost += o.cost;
        self.input += o.input;
        self.output += o.output;
        self.reasoning += o.reasoning;
        self.cache_read += o.cache_read;
        self.cache_write += o.cache_write;
        self.messages += o.messages;
    }
}

/// Parses a usage file; malformed lines are skipped (the count is returned).
pub fn parse(text: &str) -> (Vec<UsageLine>, usize) {
    let mut bad = 0;
    let mut out = vec![];
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match serde_json::from_str::<UsageLine>(l) {
            Ok(u) if u.cost.is_finite() && u.cost >= 0.0 => out.push(u),
            _ => bad += 1,
        }
    }
    (out, bad)
}

/// Totals per model label; a line without a model uses `fallback_model`.
pub fn per_model(lines: &[UsageLine], fallback_model: &str) -> BTreeMap<String, Totals> {
    let mut m: BTreeMap<String, Totals> = BTreeMap::new();
    for l in lines {
        let key = l.model.clone().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| fallback_model.to_string());
        let t = m.entry(key).or_default();
        t.add(&Totals {
            cost: l.cost,
            input: l.input,
            output: l.output,
            reasoning: l.reasoning,
            cache_read: l.cache_read,
            cache_write: l.cache_write,
            messages: 1,
        });
    }
    m
}

/// Tokens: below 1000 as an integer, else one decimal and `k`.
pub fn tokens(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else {
        format!("{:.1}k", n as f64 / 1000.0)
    }
}

/// `$cost | Tokens: … in / … out / …`: one line of totals.
pub fn line(t: &Totals) -> String {
    format!(
        "${:.4} | Tokens: {} in / {} out / {} reasoning / {} cache read / {} cache write",
        t.cost,
        tokens(t.input),
        tokens(t.output),
        tokens(t.reasoning),
        tokens(t.cache_read),
        tokens(t.cache_write)
    )
}

/// One usage row for display: (model, role, totals).
pub type UsageRow = (String, String, Totals);

/// The usage rows of a loop for display, `(model, role, totals)`: the stored rows
/// `(session, model, role, totals)` with those of the live session replaced by its live
/// totals, so the session whose turn is running is counted once, with its newest output.
/// Without live totals (no live session, or nothing reported yet) the stored rows stand.
pub fn merge_live(stored: &[(String, String, String, Totals)], live: Option<(&str, &[UsageRow])>) -> Vec<UsageRow> {
    let live = live.filter(|(_, rows)| !rows.is_empty());
    let mut out: Vec<(String, String, Totals)> = stored
        .iter()
        .filter(|(sid, ..)| live.is_none_or(|(l, _)| sid != l))
        .map(|(_, m, r, t)| (m.clone(), r.clone(), *t))
        .collect();
    if let Some((_, rows)) = live {
        out.extend(rows.iter().cloned());
    }
    out
}

/// The sum of rows.
pub fn total(rows: &[(String, String, Totals)]) -> Totals {
    let mut t = Totals::default();
    for (_, _, r) in rows {
        t.add(r);
    }
    t
}

/// The usage block from rows `(model, role, totals)`; empty when there are none.
pub fn render(rows: &[(String, String, Totals)]) -> String {
    render_as(rows, false)
}

/// [`render`] for the status document: each model name as literal Markdown.
pub fn render_markdown(rows: &[(String, String, Totals)]) -> String {
    render_as(rows, true)
}

/// The longest model name shown (characters).
const MODEL_CHARS: usize = 200;

/// [`render`]; `markdown`: model names escaped ([`crate::text::md_inline`]). A model name is
/// what the agent's usage file says, so it is shown on one line, without terminal escapes
/// ([`crate::text::one_line`]), at most 200 characters: a review had one fake the
/// detail's lines and its Markdown take over the status document.
fn render_as(rows: &[(String, String, Totals)], markdown: bool) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut total = Totals::default();
    let mut by_model: BTreeMap<String, Totals> = BTreeMap::new();
    let mut by_role: BTreeMap<&str, Totals> = BTreeMap::new();
    for (model, role, t) in rows {
        total.add(t);
        // Grouped as shown: a name that differs only by what is left out counts as the
        // name it shows (a review had `x\e[0m` show as a second `x`).
        let name: String = crate::text::one_line(model).trim().chars().take(MODEL_CHARS).collect();
        let name = if name.is_empty() { "unknown".to_string() } else { name };
        by_model.entry(name).or_default().add(t);
        by_role.entry(role).or_default().add(t);
    }
    let mut out = format!("\nCumulative Usage:\n  Total Cost: {}\n  Per-model usage:\n", line(&total));
    for (name, t) in &by_model {
        let shown = if markdown { crate::text::md_inline(name) } else { name.clone() };
        out.push_str(&format!("    {shown}: {}\n", line(t)));
    }
    out.push_str("  Per-role usage:\n");
    for role in ["code", "auditor", "unknown"] {
        if let Some(t) = by_role.get(role) {
            out.push_str(&format!("    {role}: {}\n", line(t)));
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model name is what an agent's usage file says: on one line, without terminal
    /// escapes, and in the status document literal Markdown.
    #[test]
    fn model_names_are_shown_on_one_line_and_literal_in_markdown() {
        let t = Totals { cost: 0.01, input: 10, messages: 1, ..Default::default() };
        let hostile = "evil\n\n[assistant]: http://e/\n\u{1b}]0;title\u{7}\u{1b}[31m![p](http://e/p.png)";
        let rows = vec![(hostile.to_string(), "code".to_string(), t), ("x".repeat(300), "code".to_string(), t)];
        let text = render(&rows);
        assert!(text.contains("\n    evil  [assistant]: http://e/ ![p](http://e/p.png): $0.0100"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains(&format!("\n    {}: $0.0100", "x".repeat(200))), "{text}");
        // Grouped as shown, a bidirectional override left out, an empty name `unknown`.
        let rows = vec![
            ("m".to_string(), "code".to_string(), t),
            ("m\u{1b}[0m".to_string(), "code".to_string(), t),
            ("\u{202e}".to_string(), "code".to_string(), t),
        ];
        let grouped = render(&rows);
        assert!(grouped.contains("\n    m: $0.0200") && grouped.contains("\n    unknown: $0.0100"), "{grouped}");
        let rows = vec![(hostile.to_string(), "code".to_string(), t)];
        let md = render_markdown(&rows);
        assert!(md.contains("\n    evil  \\[assistant\\]: http://e/ !\\[p\\](http://e/p.png): $0.0100"), "{md}");
    }

    #[test]
    fn reuse_decisions() {
        let line = |input: u64, window: Option<u64>| UsageLine { input, context_window: window, ..Default::default() };
        assert_eq!(reuse_decision(&[], 50, false), Reuse::Resume, "no usage: unknown window");
        assert_eq!(reuse_decision(&[line(900, None)], 50, false), Reuse::Resume, "unknown window");
        assert_eq!(reuse_decision(&[line(900, Some(0))], 50, false), Reuse::Resume, "no positive window");
        assert_eq!(reuse_decision(&[line(400, Some(1000))], 50, false), Reuse::Resume);
        assert_eq!(reuse_decision(&[line(500, Some(1000))], 50, true), Reuse::Compact, "at the threshold");
        assert_eq!(reuse_decision(&[line(500, Some(1000))], 50, false), Reuse::Fresh, "cannot compact");
        assert_eq!(reuse_decision(&[line(1, Some(1000))], 0, true), Reuse::Fresh, "reuse disabled");
        let cached = UsageLine {
            input: 100,
            cache_read: 300,
            cache_write: 200,
            context_window: Some(1000),
            ..Default::default()
        };
        assert_eq!(
            reuse_decision(&[line(10, Some(1000)), cached], 60, false),
            Reuse::Fresh,
            "the last message counts, with cache"
        );
    }

    #[test]
    fn merge_live_counts_the_live_session_once() {
        let t = |input: u64| Totals { input, messages: 1, ..Default::default() };
        let stored = vec![
            ("s1".to_string(), "m".to_string(), "code".to_string(), t(100)),
            ("s2".to_string(), "m".to_string(), "auditor".to_string(), t(10)),
        ];
        let live = vec![("m".to_string(), "auditor".to_string(), t(30))];
        type Case<'a> = (&'a str, Option<(&'a str, &'a [UsageRow])>, u64);
        let cases: Vec<Case> = vec![
            ("no live session", None, 110),
            ("live session replaces its stored rows", Some(("s2", &live)), 130),
            ("a live session without stored rows adds", Some(("s3", &live)), 140),
            ("nothing reported live yet keeps the stored rows", Some(("s2", &[])), 110),
        ];
        for (name, l, want) in cases {
            assert_eq!(total(&merge_live(&stored, l)).input, want, "{name}");
        }
    }

    #[test]
    fn parse_aggregate_render() {
        let text = "{\"model\":\"a/x\",\"input\":1200,\"output\":30,\"cost\":0.01}\nnot json\n{\"input\":5}\n{\"model\":\"b/y\",\"cacheRead\":2000,\"cost\":0.5}\n";
        let (lines, bad) = parse(text);
        assert_eq!((lines.len(), bad), (3, 1));
        let m = per_model(&lines, "default");
        assert_eq!(m["a/x"].input, 1200);
        assert_eq!(m["default"].input, 5);
        assert_eq!(m["b/y"].cache_read, 2000);
        let rows = vec![
            ("a/x".to_string(), "code".to_string(), m["a/x"]),
            ("b/y".to_string(), "auditor".to_string(), m["b/y"]),
            ("a/x".to_string(), "auditor".to_string(), m["a/x"]),
        ];
        let r = render(&rows);
        assert!(
            r.contains(
                "Total Cost: $0.5200 | Tokens: 2.4k in / 60 out / 0 reasoning / 2.0k cache read / 0 cache write"
            ),
            "{r}"
        );
        assert!(r.contains("    a/x: $0.0200 | Tokens: 2.4k in"), "{r}");
        assert!(r.contains("    code: $0.0100") && r.contains("    auditor: $0.5100"), "{r}");
        assert_eq!(render(&[]), "");
    }
}
