//! Checks on review-tool input that its JSON shape cannot express: non-empty
//! fields, a 1-based line, size caps, and the attempt-history page.
//!
//! Size caps: a description or a scenario may be up to [`MAX_TEXT_BYTES`] (8 MiB of
//! UTF-8) and is stored verbatim, so a 1 MB description is accepted unchanged; only
//! beyond the cap does the write fail, with a message naming the field, its size and
//! the cap. Text is never truncated. The cap sits well below the 64 MiB message limit
//! of the transport (PROTOCOL.md §8), so every stored finding can still be read back
//! and published as a diagnostic. File paths are capped at [`MAX_FILE_BYTES`].

/// Largest accepted `description` / `scenario`, in UTF-8 bytes (8 MiB).
pub const MAX_TEXT_BYTES: usize = 8 * 1024 * 1024;

/// Largest accepted `file`, in UTF-8 bytes.
pub const MAX_FILE_BYTES: usize = 4096;

/// Largest accepted finding `line`. LSP positions are unsigned 31-bit numbers, so line
/// 2^31 (position 2^31 - 1) is the last one an editor can show; a larger number would be
/// published on that line anyway, and past 2^53 a JavaScript client does not even read it
/// back exactly (a "Delete finding" action would name another line).
pub const MAX_LINE: i64 = 1 << 31;

/// Default attempt-history page size.
pub const DEFAULT_ATTEMPTS_LIMIT: i64 = 20;

/// Largest attempt-history page size.
pub const MAX_ATTEMPTS_LIMIT: i64 = 100;

/// A finding's `file` (as given, or the key it is stored under): non-empty after trimming,
/// at most [`MAX_FILE_BYTES`], free of NUL. The error names the field.
pub fn validate_file(file: &str) -> Result<(), String> {
    if file.trim().is_empty() {
        return Err("Invalid file: must be a non-empty path.".to_string());
    }
    if file.len() > MAX_FILE_BYTES {
        return Err(format!("Invalid file: {} bytes is longer than the {MAX_FILE_BYTES}-byte limit.", file.len()));
    }
    if file.contains('\0') {
        return Err("Invalid file: must not contain NUL characters.".to_string());
    }
    Ok(())
}

/// Validates a `review-write` beyond its JSON shape: `file` is non-empty after
/// trimming, at most [`MAX_FILE_BYTES`] and free of NUL ([`validate_file`]); `line` is 1 to [`MAX_LINE`];
/// `description` is non-empty after trimming; `description` and `scenario` are at
/// most [`MAX_TEXT_BYTES`]. The error names the field.
pub fn validate_write(file: &str, line: i64, description: &str, scenario: Option<&str>) -> Result<(), String> {
    validate_file(file)?;
    if line < 1 {
        return Err(format!("Invalid line {line}: must be a positive integer (lines are 1-based)."));
    }
    if line > MAX_LINE {
        return Err(format!(
            "Invalid line {line}: must be at most {MAX_LINE} (the last line an LSP position can name)."
        ));
    }
    if description.trim().is_empty() {
        return Err("Invalid description: must not be empty.".to_string());
    }
    check_size("description", description)?;
    if let Some(scenario) = scenario {
        check_size("scenario", scenario)?;
    }
    Ok(())
}

fn check_size(field: &str, text: &str) -> Result<(), String> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "Invalid {field}: {} bytes is larger than the {MAX_TEXT_BYTES}-byte (8 MiB) limit.",
            text.len()
        ));
    }
    // The cap holds on the wire too, where each quote, backslash and control character is
    // escaped (up to six bytes): a page of findings must fit in a 64 MiB message.
    let wire = forge_protocol::json::escaped_len(text);
    if wire > MAX_TEXT_BYTES {
        return Err(format!(
            "Invalid {field}: {} bytes are {wire} as JSON text (quotes, backslashes and control characters are escaped), larger than the {MAX_TEXT_BYTES}-byte (8 MiB) limit.",
            text.len()
        ));
    }
    Ok(())
}

/// Findings per page of `review-read` when `limit` is not given. An agent reads the page
/// whole into its context, and agent CLIs cap what one tool call may return (Claude Code
/// refuses an MCP result over 25,000 tokens and moves one over 50,000 characters into a
/// file): a hundred findings of a few hundred characters each stay under both.
pub const DEFAULT_FINDINGS_LIMIT: i64 = 100;
/// The largest page of findings `review-read` returns.
pub const MAX_FINDINGS_LIMIT: i64 = 5000;

/// The page of a findings read: `limit` (1..=[`MAX_FINDINGS_LIMIT`], default
/// [`DEFAULT_FINDINGS_LIMIT`]) findings older than `beforeId` (a positive id), newest first.
pub fn findings_page(limit: Option<i64>, before_id: Option<i64>) -> Result<(usize, Option<i64>), String> {
    page(limit, before_id, DEFAULT_FINDINGS_LIMIT, MAX_FINDINGS_LIMIT)
}

/// The attempt-history page of `review-read attempts: true`: `(limit, beforeId)`.
///
/// `limit` defaults to 20 and must be within 1..=100; `beforeId` must be a positive
/// integer. Out-of-range values are errors naming the field, not silently clamped.
pub fn attempts_page(limit: Option<i64>, before_id: Option<i64>) -> Result<(usize, Option<i64>), String> {
    page(limit, before_id, DEFAULT_ATTEMPTS_LIMIT, MAX_ATTEMPTS_LIMIT)
}

fn page(limit: Option<i64>, before_id: Option<i64>, default: i64, max: i64) -> Result<(usize, Option<i64>), String> {
    let limit = limit.unwrap_or(default);
    if !(1..=max).contains(&limit) {
        return Err(format!("Invalid limit {limit}: must be between 1 and {max}."));
    }
    if let Some(id) = before_id {
        if id < 1 {
            return Err(format!("Invalid beforeId {id}: must be a positive integer."));
        }
    }
    let limit = usize::try_from(limit).map_err(|_| format!("Invalid limit {limit}."))?;
    Ok((limit, before_id))
}

/// `attempts: true` reads attempt history, which has no file, pattern or
/// cross-section dimension: naming any of them is an error that lists them.
pub fn attempts_exclusive(file: Option<&str>, pattern: Option<&str>, cross_section: bool) -> Result<(), String> {
    let mut given = Vec::new();
    if file.is_some() {
        given.push("file");
    }
    if pattern.is_some() {
        given.push("pattern");
    }
    if cross_section {
        given.push("crossSection");
    }
    if given.is_empty() {
        Ok(())
    } else {
        Err(format!("attempts cannot be combined with {}.", given.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_ok() {
        assert_eq!(validate_write("src/a.rs", 1, "bad", None), Ok(()));
        assert_eq!(validate_write("a", MAX_LINE, "bad", Some("")), Ok(()));
    }

    #[test]
    fn write_fields() {
        assert!(validate_write("  ", 1, "d", None).expect_err("file").contains("file"));
        assert!(validate_write("a\0b", 1, "d", None).expect_err("nul").contains("file"));
        assert!(validate_write(&"x".repeat(MAX_FILE_BYTES + 1), 1, "d", None).expect_err("long file").contains("file"));
        assert_eq!(
            validate_write("a", 0, "d", None),
            Err("Invalid line 0: must be a positive integer (lines are 1-based).".to_string())
        );
        assert!(validate_write("a", -4, "d", None).expect_err("neg").contains("line -4"));
        for line in [MAX_LINE + 1, (1 << 53) + 1, i64::MAX] {
            let e = validate_write("a", line, "d", None).expect_err("too large");
            assert!(e.starts_with(&format!("Invalid line {line}: must be at most 2147483648")), "{e}");
        }
        assert!(validate_write("a", 1, " \n ", None).expect_err("desc").contains("description"));
    }

    #[test]
    fn one_megabyte_description_is_accepted() {
        let big = "é".repeat(500_000); // 1,000,000 bytes
        assert_eq!(validate_write("a", 1, &big, Some(&big)), Ok(()));
        let mib = "x".repeat(1024 * 1024);
        assert_eq!(validate_write("a", 1, &mib, None), Ok(()));
    }

    #[test]
    fn over_cap_is_rejected_by_field() {
        let huge = "x".repeat(MAX_TEXT_BYTES + 1);
        assert!(validate_write("a", 1, &huge, None).expect_err("desc").starts_with("Invalid description:"));
        assert!(validate_write("a", 1, "d", Some(&huge)).expect_err("scen").starts_with("Invalid scenario:"));
        let exact = "x".repeat(MAX_TEXT_BYTES);
        assert_eq!(validate_write("a", 1, &exact, None), Ok(()));
        // Measured as JSON text too: 5 MiB of quotes are 10 MiB on the wire.
        let quotes = "\"".repeat(5 << 20);
        assert!(validate_write("a", 1, &quotes, None).expect_err("escaped").contains("as JSON text"));
    }

    #[test]
    fn attempts_paging() {
        assert_eq!(attempts_page(None, None), Ok((20, None)));
        assert_eq!(attempts_page(Some(1), Some(7)), Ok((1, Some(7))));
        assert_eq!(attempts_page(Some(100), None), Ok((100, None)));
        assert_eq!(attempts_page(Some(0), None), Err("Invalid limit 0: must be between 1 and 100.".to_string()));
        assert!(attempts_page(Some(101), None).is_err());
        assert!(attempts_page(Some(i64::MIN), None).is_err());
        assert_eq!(attempts_page(None, Some(0)), Err("Invalid beforeId 0: must be a positive integer.".to_string()));
        assert!(attempts_page(None, Some(-3)).expect_err("neg").contains("beforeId"));
    }

    #[test]
    fn attempts_mode_exclusivity() {
        assert_eq!(attempts_exclusive(None, None, false), Ok(()));
        assert_eq!(
            attempts_exclusive(Some("a.rs"), None, true),
            Err("attempts cannot be combined with file, crossSection.".to_string())
        );
    }
}
