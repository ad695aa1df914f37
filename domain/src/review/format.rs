//! Ordering, searching and rendering of findings, and the one-line results of
//! `review-write` / `review-delete` (FORGE-REFERENCE §2.6–2.8).

use super::Finding;
use forge_protocol::inputs::Severity;
use std::fmt::Write as _;

/// Whether a finding matches `pattern` (ECMAScript, as Forge reads it: `crate::ecma_regex`)
/// in its description and scenario; every finding matches no pattern or an empty one. The
/// pattern is compiled once, so a caller can test findings as it reads them. Errors:
/// `Invalid regex pattern: <reason>`.
pub fn pattern_matcher(pattern: Option<&str>) -> Result<impl Fn(&Finding) -> bool, String> {
    let re = match pattern.filter(|p| !p.is_empty()) {
        Some(p) => Some(crate::ecma_regex::compile(p).map_err(|e| format!("Invalid regex pattern: {e}"))?),
        None => None,
    };
    Ok(move |f: &Finding| {
        re.as_ref().is_none_or(|re| {
            let hay = format!("{} {}", f.description, f.scenario.as_deref().unwrap_or(""));
            re.is_match(&hay)
        })
    })
}

/// The `data` of a page of review-read, `{"findings": [...], "nextBeforeId": ...}`, as
/// JSON text: byte for byte what serde_json writes for the page's struct (each finding in
/// [`Finding`]'s serde form; tested below). Written by hand because serde_json escapes a
/// string a byte at a time, which was a tenth of a default page's time in the server;
/// [`forge_protocol::json::push_string`] escapes eight bytes at a time.
pub fn page_json(rows: &[Finding], next_before_id: Option<i64>) -> String {
    use forge_protocol::json::push_string;
    let text: usize = rows
        .iter()
        .map(|f| 160 + f.file.len() + f.description.len() + f.scenario.as_ref().map_or(4, String::len))
        .sum();
    let mut out: Vec<u8> = Vec::with_capacity(40 + text);
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(b"{\"findings\":[");
    for (i, f) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"id\":");
        out.extend_from_slice(num.format(f.id).as_bytes());
        out.extend_from_slice(b",\"file\":");
        push_string(&mut out, &f.file);
        out.extend_from_slice(b",\"line\":");
        out.extend_from_slice(num.format(f.line).as_bytes());
        out.extend_from_slice(b",\"severity\":\"");
        out.extend_from_slice(f.severity.as_str().as_bytes());
        out.extend_from_slice(b"\",\"description\":");
        push_string(&mut out, &f.description);
        out.extend_from_slice(b",\"scenario\":");
        match &f.scenario {
            Some(s) => push_string(&mut out, s),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"loopName\":");
        match &f.loop_name {
            Some(s) => push_string(&mut out, s),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"sectionIndex\":");
        match f.section_index {
            Some(k) => out.extend_from_slice(num.format(k).as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"createdAt\":");
        out.extend_from_slice(num.format(f.created_at).as_bytes());
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"nextBeforeId\":");
    match next_before_id {
        Some(n) => out.extend_from_slice(num.format(n).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    // Only UTF-8 went in: the strings whole or escaped, and ASCII around them.
    String::from_utf8(out).unwrap_or_default()
}

/// Sorts by file, then line; section (cross-section first) and id keep the order
/// stable when several findings share a `file:line`.
pub fn sort_findings(findings: &mut [Finding]) {
    // Ids are unique, so the order is total and an unstable sort gives the same result.
    findings.sort_unstable_by(|a, b| {
        a.file.cmp(&b.file).then(a.line.cmp(&b.line)).then(a.section_index.cmp(&b.section_index)).then(a.id.cmp(&b.id))
    });
}

/// The `review-read` listing, also the shared renderer for prompts.
///
/// ```text
/// 2 review findings:
///
/// - **src/a.rs:3**
///   - Severity: bug
///   - File: src/a.rs:3
///   - Description: ...
///   - Scenario: N/A
///   - Loop: feat
///   - Section: 1
///
/// - **src/b.rs:9**
///   ...
/// ```
///
/// `Section:` appears only for findings with a section; an empty scenario or loop
/// reads `N/A`. No findings: `No review findings found.`
pub fn render_findings(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "No review findings found.".to_string();
    }
    let noun = if findings.len() == 1 { "finding" } else { "findings" };
    // Sized once: the fixed labels take about 90 bytes an entry.
    let size = findings
        .iter()
        .map(|f| 2 * f.file.len() + f.description.len() + f.scenario.as_ref().map_or(0, String::len) + 120);
    let mut out = String::with_capacity(32 + size.sum::<usize>());
    out.push_str(itoa::Buffer::new().format(findings.len()));
    out.push_str(" review ");
    out.push_str(noun);
    out.push_str(":\n");
    for f in findings {
        out.push('\n');
        render_entry(&mut out, f);
    }
    // Entries are separated by one blank line; no trailing newline.
    while out.ends_with('\n') {
        out.pop();
    }
    out
}

/// Pushes the pieces (no `format!`/`writeln!`: a page renders thousands of entries, and
/// the formatting machinery was most of its text's cost).
fn render_entry(out: &mut String, f: &Finding) {
    let mut line = itoa::Buffer::new();
    let line = line.format(f.line);
    let at = |out: &mut String| {
        // A line break in a path is written `\n`: it split the entry.
        out.push_str(&crate::text::on_one_line(&f.file));
        out.push(':');
        out.push_str(line);
    };
    out.push_str("- **");
    at(out);
    out.push_str("**\n  - Severity: ");
    out.push_str(f.severity.as_str());
    out.push_str("\n  - File: ");
    at(out);
    out.push_str("\n  - Description: ");
    out.push_str(&f.description);
    out.push_str("\n  - Scenario: ");
    out.push_str(or_na(f.scenario.as_deref()));
    out.push_str("\n  - Loop: ");
    out.push_str(or_na(f.loop_name.as_deref()));
    out.push('\n');
    if let Some(k) = f.section_index {
        out.push_str("  - Section: ");
        out.push_str(itoa::Buffer::new().format(k));
        out.push('\n');
    }
}

fn or_na(s: Option<&str>) -> &str {
    s.filter(|s| !s.is_empty()).unwrap_or("N/A")
}

/// `Stored review finding at <file>:<line> (<severity>)`, plus ` for section <k>`
/// when the finding has a section (0-based).
pub fn stored_message(file: &str, line: i64, severity: Severity, section: Option<u32>) -> String {
    let mut s = format!("Stored review finding at {file}:{line} ({})", severity.as_str());
    if let Some(k) = section {
        let _ = write!(s, " for section {k}");
    }
    s
}

/// The conflict text of a write whose identity (loop, file, line, section) is taken.
pub fn duplicate_message(file: &str, line: i64) -> String {
    format!(
        "Finding already exists at {file}:{line}. Findings are write-once: \
         to replace it, delete it with review-delete (auditors and the user may) and write again."
    )
}

/// `Deleted review finding at <file>:<line>`, also when several rows went (Forge's text
/// is the same whatever the count; the count is in the result's data), or `No review
/// finding found at <file>:<line>`.
pub fn deleted_message(file: &str, line: i64, n: usize) -> String {
    match n {
        0 => format!("No review finding found at {file}:{line}"),
        _ => format!("Deleted review finding at {file}:{line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The findings `pattern` matches, in order (as review-read tests them).
    fn filter_pattern(findings: Vec<Finding>, pattern: Option<&str>) -> Result<Vec<Finding>, String> {
        let matches = pattern_matcher(pattern)?;
        Ok(findings.into_iter().filter(|f| matches(f)).collect())
    }

    /// `page_json` writes what serde_json writes for the page's struct: every field, `null`
    /// for absent ones, strings with quotes, backslashes, controls, non-ASCII and lengths
    /// around the eight-byte steps, negative and large numbers, an empty page.
    #[test]
    fn page_json_is_what_serde_json_writes() {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Page<'a> {
            findings: &'a [Finding],
            next_before_id: Option<i64>,
        }
        let mut rows = vec![f(1, "src/a.rs", 3)];
        let mut odd = f(i64::MAX, "dir/\"quoted\" \\ é.rs", -1);
        odd.severity = Severity::Warning;
        odd.description = "tab\there\nnew line \u{1} bell\u{7} \u{1f} end\r\u{8}\u{c}".into();
        odd.scenario = Some("ünïcødé ✓ and \"quotes\"".into());
        odd.loop_name = Some("loop-\\x".into());
        odd.section_index = Some(u32::MAX);
        odd.created_at = i64::MIN;
        rows.push(odd);
        for n in 0..20 {
            let mut g = f(100 + n, &"p".repeat(n as usize), n);
            g.description = "x".repeat(n as usize) + "\"" + &"y".repeat(n as usize % 9);
            g.scenario = Some(String::new());
            g.section_index = Some(0);
            rows.push(g);
        }
        for (rows, next) in [(&rows[..], Some(99)), (&rows[..1], None), (&rows[..0], None), (&rows[..0], Some(-5))] {
            let want = serde_json::to_string(&Page { findings: rows, next_before_id: next }).unwrap();
            assert_eq!(page_json(rows, next), want);
        }
    }

    fn f(id: i64, file: &str, line: i64) -> Finding {
        Finding {
            id,
            file: file.into(),
            line,
            severity: Severity::Bug,
            description: format!("desc {id}"),
            scenario: None,
            loop_name: None,
            section_index: None,
            created_at: 1_700_000_000_000,
        }
    }

    #[test]
    fn pattern_searches_description_and_scenario() {
        let mut a = f(1, "a.rs", 1);
        a.description = "null deref".into();
        let mut b = f(2, "b.rs", 1);
        b.description = "off by one".into();
        b.scenario = Some("when the list is empty".into());
        let c = f(3, "c.rs", 1);
        let all = vec![a, b, c];
        let hit = filter_pattern(all.clone(), Some("list is (empty|full)")).expect("valid");
        assert_eq!(hit.iter().map(|f| f.id).collect::<Vec<_>>(), vec![2]);
        // Description and scenario are joined by one space.
        let hit = filter_pattern(all.clone(), Some("one when")).expect("valid");
        assert_eq!(hit.len(), 1);
        let hit = filter_pattern(all.clone(), Some("deref $")).expect("valid");
        assert_eq!(hit.iter().map(|f| f.id).collect::<Vec<_>>(), vec![1]);
        assert_eq!(filter_pattern(all.clone(), None).expect("none").len(), 3);
        assert_eq!(filter_pattern(all, Some("")).expect("empty").len(), 3);
    }

    #[test]
    fn invalid_regex() {
        let err = filter_pattern(vec![f(1, "a", 1)], Some("(unclosed")).expect_err("invalid");
        assert!(err.starts_with("Invalid regex pattern: "), "{err}");
        assert!(!err.contains('\n'), "{err}");
        assert!(filter_pattern(Vec::new(), Some("[z-a]")).is_err());
    }

    #[test]
    fn sorting() {
        let mut a = f(5, "b.rs", 2);
        a.section_index = Some(1);
        let mut b = f(4, "b.rs", 2);
        b.section_index = None;
        let mut v = vec![f(1, "b.rs", 10), a, f(2, "a.rs", 7), b, f(3, "b.rs", 9)];
        sort_findings(&mut v);
        assert_eq!(v.iter().map(|f| f.id).collect::<Vec<_>>(), vec![2, 4, 5, 3, 1]);
    }

    #[test]
    fn render_none() {
        assert_eq!(render_findings(&[]), "No review findings found.");
    }

    #[test]
    fn render_singular_with_na_fields() {
        let out = render_findings(&[f(1, "src/x.rs", 4)]);
        assert_eq!(
            out,
            "1 review finding:\n\n\
             - **src/x.rs:4**\n  - Severity: bug\n  - File: src/x.rs:4\n  - Description: desc 1\n\
             \x20 - Scenario: N/A\n  - Loop: N/A"
        );
        assert!(!out.contains("Section:"));
    }

    /// A line break in a file's name is written `\n`, so the entry's lines stay its own.
    #[test]
    fn a_file_name_with_a_line_break_stays_on_its_line() {
        let out = render_findings(&[f(1, "two\nlines\r.rs", 4)]);
        assert!(out.contains("- **two\\nlines\\n.rs:4**\n  - Severity: bug\n  - File: two\\nlines\\n.rs:4\n"), "{out}");
    }

    #[test]
    fn render_plural_with_section() {
        let mut a = f(1, "a.rs", 1);
        a.scenario = Some("on retry".into());
        a.loop_name = Some("feat".into());
        a.section_index = Some(0);
        let mut b = f(2, "b.rs", 2);
        b.severity = Severity::Warning;
        b.loop_name = Some("feat".into());
        b.scenario = Some(String::new());
        let out = render_findings(&[a, b]);
        let expected = "2 review findings:\n\n\
            - **a.rs:1**\n  - Severity: bug\n  - File: a.rs:1\n  - Description: desc 1\n\
            \x20 - Scenario: on retry\n  - Loop: feat\n  - Section: 0\n\n\
            - **b.rs:2**\n  - Severity: warning\n  - File: b.rs:2\n  - Description: desc 2\n\
            \x20 - Scenario: N/A\n  - Loop: feat";
        assert_eq!(out, expected);
    }

    #[test]
    fn messages() {
        assert_eq!(
            stored_message("a.rs", 3, Severity::Bug, Some(2)),
            "Stored review finding at a.rs:3 (bug) for section 2"
        );
        assert_eq!(stored_message("a.rs", 3, Severity::Warning, None), "Stored review finding at a.rs:3 (warning)");
        assert!(duplicate_message("a.rs", 3).starts_with("Finding already exists at a.rs:3."));
        assert!(duplicate_message("a.rs", 3).contains("review-delete"));
        assert_eq!(deleted_message("a.rs", 3, 0), "No review finding found at a.rs:3");
        assert_eq!(deleted_message("a.rs", 3, 1), "Deleted review finding at a.rs:3");
        assert_eq!(deleted_message("a.rs", 3, 3), "Deleted review finding at a.rs:3");
    }
}
