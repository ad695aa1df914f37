//! Which section a finding belongs to, and which findings a read, a delete or an
//! audit verdict looks at.
//!
//! Sections are 0-based (`sectionIndex`). `None` is a cross-section finding, or a
//! finding with no section at all (stored as `-1`).
//!
//! Only the `coding` and `auditing` phases of a running sectioned loop are
//! section-scoped. `post_action` runs after every section is done, so it is treated
//! like a non-sectioned context (findings default to cross-section, reads see every
//! section); the same holds for any other phase name, including 0.9.1's
//! `final_auditing` / `final_audit_fix`, which this project does not have.

use super::Finding;
use forge_protocol::inputs::Severity;

/// The caller's loop as the scoping rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopScope {
    /// The loop's name: the findings bucket.
    pub loop_name: String,
    /// `status = 'running'`.
    pub running: bool,
    /// `coding`, `auditing` or `post_action`.
    pub phase: String,
    /// Number of sections; 0 for a non-sectioned loop.
    pub total_sections: u32,
    /// 0-based index of the section being worked on.
    pub current_section: u32,
}

impl LoopScope {
    /// The loop is running, sectioned, in a section phase (`coding` / `auditing`)
    /// and its current section exists. Only then do findings default to the current
    /// section and reads narrow to the section scope.
    pub fn sectioned_running(&self) -> bool {
        self.running
            && self.total_sections > 0
            && self.current_section < self.total_sections
            && matches!(self.phase.as_str(), "coding" | "auditing")
    }

    /// The current section when [`LoopScope::sectioned_running`], else `None`.
    pub fn section_in_scope(&self) -> Option<u32> {
        self.sectioned_running().then_some(self.current_section)
    }
}

/// Section filter of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionFilter {
    /// Every section and every cross-section finding.
    All,
    /// Only cross-section findings (`section_index` NULL / `-1`).
    CrossOnly,
    /// Exactly this section.
    Only(u32),
    /// The default read of a running sectioned loop: this section, every earlier
    /// section, and the cross-section findings. Findings of later, not-yet-started
    /// sections are left out.
    ///
    /// This follows the seeds ("Sectioned loops scope findings to the current and
    /// earlier sections plus cross-section findings unless overridden"), which win
    /// over FORGE-REFERENCE §2.7 (0.9.1 read only the current section). It is also
    /// exactly the set the blocking-bug gate ([`blocking`]) looks at, so an auditor's
    /// default read shows every finding that can keep its audit dirty.
    ScopeOf(u32),
}

impl SectionFilter {
    /// Whether a stored section index passes this filter.
    pub fn admits(&self, section: Option<u32>) -> bool {
        match (*self, section) {
            (SectionFilter::All, _) => true,
            (SectionFilter::CrossOnly, s) => s.is_none(),
            (SectionFilter::Only(k), s) => s == Some(k),
            (SectionFilter::ScopeOf(_), None) => true,
            (SectionFilter::ScopeOf(k), Some(s)) => s <= k,
        }
    }
}

/// What a `review-read` looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPlan {
    /// The `loop_name` bucket; `""` = findings written outside loops.
    pub loop_bucket: String,
    /// Which sections of that bucket.
    pub section: SectionFilter,
}

/// Section filter of a `review-delete` (the rows at `file:line` it removes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteFilter {
    /// Only the cross-section row.
    CrossOnly,
    /// Only the row of this section.
    Only(u32),
    /// Every row at `file:line` in the bucket, whatever its section (may be several).
    Any,
}

impl DeleteFilter {
    /// The same selection as a [`SectionFilter`].
    pub fn as_section_filter(&self) -> SectionFilter {
        match *self {
            DeleteFilter::CrossOnly => SectionFilter::CrossOnly,
            DeleteFilter::Only(k) => SectionFilter::Only(k),
            DeleteFilter::Any => SectionFilter::All,
        }
    }
}

/// Section a new finding is written to (`None` = cross-section / none).
///
/// * `crossSection: true` wins: `None`.
/// * An explicit `sectionIndex` must be an integer (`2.0` counts, as in JavaScript):
///   `Invalid sectionIndex 1.5: must be an integer.` In a running sectioned loop it
///   must name an existing section: `Invalid sectionIndex 7: must be between 0 and 3.`
///   Elsewhere it is kept as given but must still be a non-negative integer that fits
///   in `u32` (a negative index would collide with the `-1` "no section" marker).
/// * Otherwise the current section of a running sectioned loop, else `None`.
pub fn write_section(
    scope: Option<&LoopScope>,
    cross_section: bool,
    explicit: Option<&serde_json::Number>,
) -> Result<Option<u32>, String> {
    if cross_section {
        return Ok(None);
    }
    match explicit {
        Some(n) => explicit_section(scope, n).map(Some),
        None => Ok(scope.and_then(LoopScope::section_in_scope)),
    }
}

/// Section scope of a `review-delete`.
///
/// `crossSection: true` → only the cross-section row; an explicit `sectionIndex`
/// (validated as in [`write_section`]) → exactly that section; a running sectioned
/// loop → its current section; anything else → [`DeleteFilter::Any`], which may
/// remove several rows at the same `file:line`.
///
/// The sectioned default stays the current section only (FORGE-REFERENCE §2.8). The
/// seeds give `review-delete` a `crossSection` argument "to delete cross-section
/// findings", which only makes sense if the default does not already reach them.
/// A caller that deletes by an explicit `loopName` (user extension) should pass
/// `scope = None` so that every row at `file:line` of that loop goes.
pub fn delete_filter(
    scope: Option<&LoopScope>,
    cross_section: bool,
    explicit: Option<&serde_json::Number>,
) -> Result<DeleteFilter, String> {
    if cross_section {
        return Ok(DeleteFilter::CrossOnly);
    }
    if let Some(n) = explicit {
        return explicit_section(scope, n).map(DeleteFilter::Only);
    }
    Ok(match scope.and_then(LoopScope::section_in_scope) {
        Some(k) => DeleteFilter::Only(k),
        None => DeleteFilter::Any,
    })
}

/// What a `review-read` looks at.
///
/// * A `loopName` that is non-empty after trimming selects that loop's bucket (any
///   status, including completed loops) and every section of it; `crossSection`
///   narrows to the cross-section findings. Whitespace-only counts as absent.
/// * Otherwise the caller's loop (`""`, the non-loop bucket, when there is none).
///   In a running sectioned loop without `allSections`: `crossSection` → only the
///   cross-section findings, else [`SectionFilter::ScopeOf`] the current section.
///   In every other case `crossSection` is ignored and every section is read.
pub fn read_plan(
    scope: Option<&LoopScope>,
    loop_name_arg: Option<&str>,
    cross_section: bool,
    all_sections: bool,
) -> ReadPlan {
    if let Some(name) = loop_name_arg.map(str::trim).filter(|n| !n.is_empty()) {
        return ReadPlan {
            loop_bucket: name.to_string(),
            section: if cross_section { SectionFilter::CrossOnly } else { SectionFilter::All },
        };
    }
    let Some(scope) = scope else {
        return ReadPlan { loop_bucket: String::new(), section: SectionFilter::All };
    };
    let section = match scope.section_in_scope() {
        Some(_) if all_sections => SectionFilter::All,
        Some(_) if cross_section => SectionFilter::CrossOnly,
        Some(k) => SectionFilter::ScopeOf(k),
        None => SectionFilter::All,
    };
    ReadPlan { loop_bucket: scope.loop_name.clone(), section }
}

/// Whether a finding passes a read's section filter.
pub fn matches_filter(f: &Finding, filter: &SectionFilter) -> bool {
    filter.admits(f.section_index)
}

/// The open findings that keep an audit dirty (seed `blockingBugFindings`).
///
/// `findings` are the loop's open findings. With `sectioned_current = Some(k)` (a
/// sectioned loop on section `k`): the `bug` findings of section `k`, of any earlier
/// section, and the cross-section ones; warnings never block and bugs of later
/// sections do not block yet. With `None` (a non-sectioned plan loop): every finding,
/// whatever its severity.
pub fn blocking(findings: &[Finding], sectioned_current: Option<u32>) -> Vec<&Finding> {
    findings
        .iter()
        .filter(|f| match sectioned_current {
            Some(k) => f.severity == Severity::Bug && SectionFilter::ScopeOf(k).admits(f.section_index),
            None => true,
        })
        .collect()
}

/// Bug findings attributed to exactly section `k` (not cross-section, not earlier or
/// later sections): what decides whether a restart into section coding uses the
/// continuation prompt (seeds "Restart Semantics": "outstanding bug findings for the
/// current section").
pub fn current_section_bugs(findings: &[Finding], k: u32) -> usize {
    findings.iter().filter(|f| f.severity == Severity::Bug && f.section_index == Some(k)).count()
}

/// The audit verdict from the findings store: clean when nothing blocks
/// ([`blocking`]); a non-sectioned loop also needs at least one completed audit.
/// (A clean section audit additionally needs the auditor's summary; that lives in
/// the handoff, not here.)
pub fn audit_is_clean(findings: &[Finding], sectioned_current: Option<u32>, audit_count: i64) -> bool {
    blocking(findings, sectioned_current).is_empty() && (sectioned_current.is_some() || audit_count >= 1)
}

/// Validates an explicit `sectionIndex` against the scope.
fn explicit_section(scope: Option<&LoopScope>, n: &serde_json::Number) -> Result<u32, String> {
    let shown = js_number(n);
    let Some(value) = integer_value(n) else {
        return Err(format!("Invalid sectionIndex {shown}: must be an integer."));
    };
    if let Some(scope) = scope.filter(|s| s.sectioned_running()) {
        let last = scope.total_sections.saturating_sub(1);
        return u32::try_from(value)
            .ok()
            .filter(|v| *v <= last)
            .ok_or_else(|| format!("Invalid sectionIndex {shown}: must be between 0 and {last}."));
    }
    if value < 0 {
        return Err(format!("Invalid sectionIndex {shown}: must be a non-negative integer."));
    }
    u32::try_from(value).map_err(|_| format!("Invalid sectionIndex {shown}: must be between 0 and {}.", u32::MAX))
}

/// The integer a JSON number stands for, if it is one (JavaScript
/// `Number.isInteger`). Huge integral floats saturate, which keeps them out of range.
fn integer_value(n: &serde_json::Number) -> Option<i128> {
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    let f = n.as_f64()?;
    (f.is_finite() && f.fract() == 0.0).then_some(f as i128)
}

/// A JSON number printed the way JavaScript's `String(x)` prints it, for messages.
fn js_number(n: &serde_json::Number) -> String {
    if n.is_u64() || n.is_i64() {
        return n.to_string();
    }
    let Some(f) = n.as_f64() else {
        return n.to_string();
    };
    if f == 0.0 {
        return "0".to_string();
    }
    if !f.is_finite() {
        return n.to_string();
    }
    let abs = f.abs();
    if (1e-6..1e21).contains(&abs) {
        if f.fract() == 0.0 {
            format!("{f:.0}")
        } else {
            format!("{f}")
        }
    } else {
        // JavaScript writes an explicit sign on positive exponents: 1e+21.
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(total: u32, current: u32) -> LoopScope {
        LoopScope {
            loop_name: "feat".into(),
            running: true,
            phase: "coding".into(),
            total_sections: total,
            current_section: current,
        }
    }

    fn num(s: &str) -> serde_json::Number {
        serde_json::from_str(s).expect("test number")
    }

    #[test]
    fn current_section_bugs_count_only_the_section_itself() {
        use Severity::*;
        type Case<'a> = (&'a str, Vec<(Severity, Option<u32>)>, u32, usize);
        let cases: Vec<Case> = vec![
            ("none", vec![], 1, 0),
            ("a bug of the section", vec![(Bug, Some(1))], 1, 1),
            ("a warning of the section", vec![(Warning, Some(1))], 1, 0),
            ("cross-section bugs block but are not the section's", vec![(Bug, None)], 1, 0),
            ("an earlier section's bug", vec![(Bug, Some(0))], 1, 0),
            ("a later section's bug", vec![(Bug, Some(2))], 1, 0),
            ("mixed", vec![(Bug, Some(1)), (Bug, None), (Bug, Some(0)), (Bug, Some(1)), (Warning, Some(1))], 1, 2),
        ];
        for (name, fs, k, want) in cases {
            let list: Vec<Finding> = fs.iter().enumerate().map(|(i, (s, sec))| finding(i as i64, *s, *sec)).collect();
            assert_eq!(current_section_bugs(&list, k), want, "{name}");
        }
    }

    fn finding(id: i64, severity: Severity, section: Option<u32>) -> Finding {
        Finding {
            id,
            file: "src/a.rs".into(),
            line: id,
            severity,
            description: format!("finding {id}"),
            scenario: None,
            loop_name: Some("feat".into()),
            section_index: section,
            created_at: 0,
        }
    }

    #[test]
    fn sectioned_running_needs_running_sections_and_a_section_phase() {
        assert!(scope(4, 1).sectioned_running());
        let mut s = scope(4, 1);
        s.phase = "auditing".into();
        assert!(s.sectioned_running());
        s.phase = "post_action".into();
        assert!(!s.sectioned_running());
        s.phase = "final_auditing".into();
        assert!(!s.sectioned_running());
        assert!(!scope(0, 0).sectioned_running());
        assert!(!scope(4, 4).sectioned_running());
        let mut done = scope(4, 3);
        done.running = false;
        assert!(!done.sectioned_running());
    }

    #[test]
    fn write_section_cross_section_wins() {
        let s = scope(4, 2);
        assert_eq!(write_section(Some(&s), true, Some(&num("1"))), Ok(None));
        assert_eq!(write_section(Some(&s), true, Some(&num("1.5"))), Ok(None));
        assert_eq!(write_section(None, true, None), Ok(None));
    }

    #[test]
    fn write_section_defaults() {
        assert_eq!(write_section(Some(&scope(4, 2)), false, None), Ok(Some(2)));
        assert_eq!(write_section(Some(&scope(0, 0)), false, None), Ok(None));
        assert_eq!(write_section(None, false, None), Ok(None));
        let mut post = scope(4, 3);
        post.phase = "post_action".into();
        assert_eq!(write_section(Some(&post), false, None), Ok(None));
    }

    #[test]
    fn write_section_explicit() {
        let s = scope(4, 2);
        assert_eq!(write_section(Some(&s), false, Some(&num("0"))), Ok(Some(0)));
        assert_eq!(write_section(Some(&s), false, Some(&num("3"))), Ok(Some(3)));
        assert_eq!(write_section(Some(&s), false, Some(&num("2.0"))), Ok(Some(2)));
        assert_eq!(
            write_section(Some(&s), false, Some(&num("1.5"))),
            Err("Invalid sectionIndex 1.5: must be an integer.".to_string())
        );
        assert_eq!(
            write_section(Some(&s), false, Some(&num("7"))),
            Err("Invalid sectionIndex 7: must be between 0 and 3.".to_string())
        );
        assert_eq!(
            write_section(Some(&s), false, Some(&num("4"))),
            Err("Invalid sectionIndex 4: must be between 0 and 3.".to_string())
        );
        assert_eq!(
            write_section(Some(&s), false, Some(&num("-1"))),
            Err("Invalid sectionIndex -1: must be between 0 and 3.".to_string())
        );
        assert_eq!(
            write_section(Some(&s), false, Some(&num("1e21"))),
            Err("Invalid sectionIndex 1e+21: must be between 0 and 3.".to_string())
        );
        assert_eq!(
            write_section(Some(&s), false, Some(&num("18446744073709551615"))),
            Err("Invalid sectionIndex 18446744073709551615: must be between 0 and 3.".to_string())
        );
    }

    #[test]
    fn write_section_explicit_without_section_scope() {
        assert_eq!(write_section(None, false, Some(&num("9"))), Ok(Some(9)));
        assert_eq!(write_section(Some(&scope(0, 0)), false, Some(&num("5"))), Ok(Some(5)));
        assert_eq!(
            write_section(None, false, Some(&num("-2"))),
            Err("Invalid sectionIndex -2: must be a non-negative integer.".to_string())
        );
        assert_eq!(
            write_section(None, false, Some(&num("0.25"))),
            Err("Invalid sectionIndex 0.25: must be an integer.".to_string())
        );
        assert_eq!(
            write_section(None, false, Some(&num("4294967296"))),
            Err("Invalid sectionIndex 4294967296: must be between 0 and 4294967295.".to_string())
        );
        assert_eq!(write_section(None, false, Some(&num("-0.0"))), Ok(Some(0)));
    }

    #[test]
    fn js_number_formats() {
        assert_eq!(js_number(&num("1.5")), "1.5");
        assert_eq!(js_number(&num("3.0")), "3");
        assert_eq!(js_number(&num("-0.0")), "0");
        assert_eq!(js_number(&num("1e-7")), "1e-7");
        assert_eq!(js_number(&num("2.5e30")), "2.5e+30");
        assert_eq!(js_number(&num("-12")), "-12");
    }

    #[test]
    fn read_plan_sectioned_default_is_current_earlier_and_cross() {
        let plan = read_plan(Some(&scope(4, 2)), None, false, false);
        assert_eq!(plan.loop_bucket, "feat");
        assert_eq!(plan.section, SectionFilter::ScopeOf(2));
        let f = SectionFilter::ScopeOf(2);
        assert!(f.admits(Some(2)), "current section");
        assert!(f.admits(Some(0)) && f.admits(Some(1)), "earlier sections");
        assert!(f.admits(None), "cross-section");
        assert!(!f.admits(Some(3)), "later section");
    }

    #[test]
    fn read_plan_overrides() {
        let s = scope(4, 2);
        assert_eq!(read_plan(Some(&s), None, true, false).section, SectionFilter::CrossOnly);
        assert_eq!(read_plan(Some(&s), None, false, true).section, SectionFilter::All);
        // allSections wins over crossSection.
        assert_eq!(read_plan(Some(&s), None, true, true).section, SectionFilter::All);
    }

    #[test]
    fn read_plan_explicit_loop_name() {
        let s = scope(4, 2);
        let plan = read_plan(Some(&s), Some("  old-loop "), false, false);
        assert_eq!(plan, ReadPlan { loop_bucket: "old-loop".into(), section: SectionFilter::All });
        let plan = read_plan(None, Some("old-loop"), true, false);
        assert_eq!(plan.section, SectionFilter::CrossOnly);
        assert_eq!(plan.loop_bucket, "old-loop");
        assert_eq!(read_plan(None, Some("old-loop"), false, true).section, SectionFilter::All);
    }

    #[test]
    fn read_plan_whitespace_loop_name_is_absent() {
        let s = scope(4, 2);
        assert_eq!(read_plan(Some(&s), Some("  \t\n"), false, false), read_plan(Some(&s), None, false, false));
        assert_eq!(read_plan(None, Some(""), false, false).loop_bucket, "");
    }

    #[test]
    fn read_plan_cross_section_ignored_outside_sectioned_running_loop() {
        // No loop: the non-loop bucket, every section.
        let plan = read_plan(None, None, true, false);
        assert_eq!(plan.loop_bucket, "");
        assert_eq!(plan.section, SectionFilter::All);
        // Non-sectioned running loop.
        let plan = read_plan(Some(&scope(0, 0)), None, true, false);
        assert_eq!(plan, ReadPlan { loop_bucket: "feat".into(), section: SectionFilter::All });
        // Completed (final bucket) sectioned loop.
        let mut done = scope(4, 3);
        done.running = false;
        assert_eq!(read_plan(Some(&done), None, true, false).section, SectionFilter::All);
        assert_eq!(read_plan(Some(&done), None, false, false).section, SectionFilter::All);
        // post_action of a sectioned loop.
        let mut post = scope(4, 3);
        post.phase = "post_action".into();
        assert_eq!(read_plan(Some(&post), None, true, false).section, SectionFilter::All);
    }

    #[test]
    fn delete_filter_cases() {
        let s = scope(4, 2);
        assert_eq!(delete_filter(Some(&s), true, Some(&num("1"))), Ok(DeleteFilter::CrossOnly));
        assert_eq!(delete_filter(Some(&s), false, Some(&num("1"))), Ok(DeleteFilter::Only(1)));
        assert_eq!(delete_filter(Some(&s), false, None), Ok(DeleteFilter::Only(2)));
        assert_eq!(
            delete_filter(Some(&s), false, Some(&num("9"))),
            Err("Invalid sectionIndex 9: must be between 0 and 3.".to_string())
        );
        assert_eq!(
            delete_filter(None, false, Some(&num("1.5"))),
            Err("Invalid sectionIndex 1.5: must be an integer.".to_string())
        );
        assert_eq!(delete_filter(None, false, Some(&num("6"))), Ok(DeleteFilter::Only(6)));
    }

    #[test]
    fn delete_filter_without_section_scope_is_any() {
        assert_eq!(delete_filter(None, false, None), Ok(DeleteFilter::Any));
        assert_eq!(delete_filter(Some(&scope(0, 0)), false, None), Ok(DeleteFilter::Any));
        let mut done = scope(4, 1);
        done.running = false;
        assert_eq!(delete_filter(Some(&done), false, None), Ok(DeleteFilter::Any));
        // Any reaches every row at file:line across sections.
        let rows = [
            finding(1, Severity::Bug, Some(0)),
            finding(2, Severity::Bug, Some(3)),
            finding(3, Severity::Warning, None),
        ];
        let filter = DeleteFilter::Any.as_section_filter();
        assert_eq!(rows.iter().filter(|f| matches_filter(f, &filter)).count(), 3);
        let only = DeleteFilter::Only(3).as_section_filter();
        assert_eq!(rows.iter().filter(|f| matches_filter(f, &only)).count(), 1);
        let cross = DeleteFilter::CrossOnly.as_section_filter();
        assert_eq!(rows.iter().filter(|f| matches_filter(f, &cross)).count(), 1);
    }

    #[test]
    fn matches_filter_variants() {
        let cross = finding(1, Severity::Bug, None);
        let s1 = finding(2, Severity::Bug, Some(1));
        assert!(matches_filter(&cross, &SectionFilter::All));
        assert!(matches_filter(&cross, &SectionFilter::CrossOnly));
        assert!(!matches_filter(&s1, &SectionFilter::CrossOnly));
        assert!(matches_filter(&s1, &SectionFilter::Only(1)));
        assert!(!matches_filter(&cross, &SectionFilter::Only(1)));
        assert!(!matches_filter(&s1, &SectionFilter::ScopeOf(0)));
        assert!(matches_filter(&s1, &SectionFilter::ScopeOf(1)));
    }

    #[test]
    fn blocking_sectioned() {
        let all = [
            finding(1, Severity::Bug, Some(2)),     // current
            finding(2, Severity::Bug, Some(0)),     // earlier
            finding(3, Severity::Bug, None),        // cross-section
            finding(4, Severity::Bug, Some(3)),     // later
            finding(5, Severity::Warning, Some(2)), // warning
        ];
        let ids: Vec<i64> = blocking(&all, Some(2)).iter().map(|f| f.id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        assert!(!audit_is_clean(&all, Some(2), 5));
        // Only a later bug and a warning left: clean.
        assert!(audit_is_clean(&all[3..], Some(2), 0));
        // The later section's bug blocks once that section is current.
        assert!(!audit_is_clean(&all[3..], Some(3), 1));
    }

    #[test]
    fn blocking_non_sectioned() {
        let warn = [finding(1, Severity::Warning, None)];
        assert_eq!(blocking(&warn, None).len(), 1);
        assert!(!audit_is_clean(&warn, None, 3));
        assert!(audit_is_clean(&[], None, 1));
        assert!(!audit_is_clean(&[], None, 0), "needs one audit");
        assert!(audit_is_clean(&[], Some(0), 0));
    }
}
