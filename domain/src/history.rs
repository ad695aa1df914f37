//! The loop history document (`forge://loop/<name>/history.md`): the transition log and the
//! plan amendments, merged into one timeline (seeds "Transition Log", "Plan Amendments").

use crate::text::iso_millis;

/// One `loop_transitions` row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TransitionEntry {
    pub event: String,
    pub kind: String,
    pub from: String,
    pub to: Option<String>,
    pub status: Option<String>,
    pub reason: Option<String>,
    pub iteration: i64,
    /// 0-based.
    pub section: Option<i64>,
    pub at: i64,
}

/// One section of an amendment snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AmendedSection {
    /// 0-based.
    pub index: i64,
    pub title: String,
    pub content: String,
}

/// One `plan_amendments` row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AmendmentEntry {
    pub rationale: String,
    /// 0-based section under audit when it was made.
    pub at_section: i64,
    pub before: Vec<AmendedSection>,
    pub after: Vec<AmendedSection>,
    pub at: i64,
}

fn sections(out: &mut String, label: &str, list: &[AmendedSection]) {
    out.push_str(&format!("\n**{label}** ({} section{}):\n\n", list.len(), if list.len() == 1 { "" } else { "s" }));
    if list.is_empty() {
        out.push_str("- (none)\n");
    }
    for s in list {
        out.push_str(&format!("- {}. {}\n", s.index + 1, s.title));
        for line in s.content.trim_end().lines() {
            out.push_str(&format!("  > {line}\n"));
        }
    }
}

/// The history document. Transitions and amendments are merged by time (a transition
/// before an amendment of the same millisecond); each transition reads
/// `<time> · <event>: <from> → <to>` with its kind, iteration, section and, for a
/// termination, status and reason; each amendment shows its rationale and the sections
/// before and after.
pub fn render(loop_name: &str, transitions: &[TransitionEntry], amendments: &[AmendmentEntry]) -> String {
    let mut out = format!("# History of loop {loop_name}\n\n");
    out.push_str(&format!(
        "{} transition{}, {} plan amendment{}.\n",
        transitions.len(),
        if transitions.len() == 1 { "" } else { "s" },
        amendments.len(),
        if amendments.len() == 1 { "" } else { "s" }
    ));
    if transitions.is_empty() && amendments.is_empty() {
        out.push_str("\nNo transitions yet: the loop is in its first phase.\n");
        return out;
    }
    let (mut i, mut j) = (0, 0);
    while i < transitions.len() || j < amendments.len() {
        let take_t = match (transitions.get(i), amendments.get(j)) {
            (Some(t), Some(a)) => t.at <= a.at,
            (Some(_), None) => true,
            _ => false,
        };
        if take_t {
            let t = &transitions[i];
            i += 1;
            let to = t.to.as_deref().unwrap_or("end");
            out.push_str(&format!("\n## {} · {}: {} → {to}\n\n", iso_millis(t.at), t.event, t.from));
            let mut facts = vec![format!("kind {}", t.kind), format!("iteration {}", t.iteration)];
            if let Some(k) = t.section {
                facts.push(format!("section {}", k + 1));
            }
            if let Some(s) = &t.status {
                facts.push(format!("status {s}"));
            }
            if let Some(r) = &t.reason {
                facts.push(format!("reason {r}"));
            }
            out.push_str(&format!("{}\n", facts.join(" · ")));
        } else {
            let a = &amendments[j];
            j += 1;
            out.push_str(&format!(
                "\n## {} · plan amendment during the audit of section {}\n\nRationale: {}\n",
                iso_millis(a.at),
                a.at_section + 1,
                a.rationale.trim()
            ));
            sections(&mut out, "Before", &a.before);
            sections(&mut out, "After", &a.after);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(event: &str, from: &str, to: Option<&str>, at: i64) -> TransitionEntry {
        TransitionEntry {
            event: event.into(),
            kind: "rotate".into(),
            from: from.into(),
            to: to.map(String::from),
            iteration: 1,
            section: Some(0),
            at,
            ..Default::default()
        }
    }

    #[test]
    fn renders_a_merged_timeline() {
        type Case<'a> = (&'a str, Vec<TransitionEntry>, Vec<AmendmentEntry>, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            ("empty", vec![], vec![], vec!["0 transitions, 0 plan amendments.", "No transitions yet"]),
            (
                "one transition",
                vec![t("coder-handoff", "coding", Some("auditing"), 1000)],
                vec![],
                vec![
                    "1 transition, 0 plan amendments.",
                    "## 1970-01-01T00:00:01.000Z · coder-handoff: coding → auditing\n\nkind rotate · iteration 1 · section 1\n",
                ],
            ),
            (
                "termination",
                vec![TransitionEntry {
                    kind: "terminate".into(),
                    status: Some("errored".into()),
                    reason: Some("handoff_missing".into()),
                    section: None,
                    ..t("no-handoff", "coding", None, 5)
                }],
                vec![],
                vec!["no-handoff: coding → end", "kind terminate · iteration 1 · status errored · reason handoff_missing"],
            ),
            (
                "amendment between transitions",
                vec![t("coder-handoff", "coding", Some("auditing"), 10), t("auditor-handoff", "auditing", Some("coding"), 30)],
                vec![AmendmentEntry {
                    rationale: " the plan forgot a step ".into(),
                    at_section: 0,
                    before: vec![],
                    after: vec![AmendedSection { index: 1, title: "Appended".into(), content: "Do it.\nTwice.".into() }],
                    at: 20,
                }],
                vec![
                    "1 plan amendment.",
                    "plan amendment during the audit of section 1\n\nRationale: the plan forgot a step\n",
                    "**Before** (0 sections):\n\n- (none)\n",
                    "**After** (1 section):\n\n- 2. Appended\n  > Do it.\n  > Twice.\n",
                ],
            ),
        ];
        for (name, ts, am, wants) in cases {
            let out = render("l", &ts, &am);
            assert!(out.starts_with("# History of loop l\n\n"), "{name}: {out}");
            for w in wants {
                assert!(out.contains(w), "{name}: {w:?} missing in\n{out}");
            }
        }
        // Order: transition (10), amendment (20), transition (30).
        let out = render(
            "l",
            &[t("a-ev", "coding", Some("auditing"), 10), t("b-ev", "auditing", Some("coding"), 30)],
            &[AmendmentEntry { rationale: "r".into(), at: 20, ..Default::default() }],
        );
        let (a, m, b) =
            (out.find("a-ev").unwrap(), out.find("plan amendment during").unwrap(), out.find("b-ev").unwrap());
        assert!(a < m && m < b, "{out}");
    }
}
