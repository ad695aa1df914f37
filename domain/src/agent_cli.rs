//! Pure parts of the agent hosts (engine/src/host.rs, engine/src/agents/): splitting a
//! command string with shell rules, the stable `{session_uuid}` of a session, dropping an
//! empty `{resume}` together with its flag, and recognising provider limits.
//!
//! The per-CLI output parsers (usage, the CLI's own session id, the final reply, the
//! structured error) are in [`crate::agent_output`].

use sha2::{Digest, Sha256};

/// Splits `agent.command` given as one string with POSIX shell rules (quotes and
/// backslashes; no expansion): `claude -p "fix it"` is three arguments.
pub fn split_command(s: &str) -> Result<Vec<String>, String> {
    match shlex::split(s) {
        Some(v) if !v.is_empty() => Ok(v),
        Some(_) => Err("the command is empty".to_string()),
        None => Err(format!("the command {s:?} has an unterminated quote or a trailing backslash")),
    }
}

/// A stable UUID for a session id: the first 16 bytes of SHA-256 over a fixed namespace
/// and the id, with the version (8, "custom") and RFC 9562 variant bits set. The same
/// session always gets the same UUID, so every turn of a session can name it (Claude Code
/// and Gemini CLI take a caller-chosen UUID as their session id).
pub fn session_uuid(session_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"forge-lsp session uuid\0");
    h.update(session_id.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// The placeholder a resumed turn fills with its session id.
pub const RESUME: &str = "{resume}";

/// On a session's first turn (`resume_empty`), drops the arguments that would carry an
/// empty `{resume}`: an argument that is exactly `{resume}` together with the flag right
/// before it (an argument starting with `-`, other than `--`, that holds no placeholder
/// itself), and an argument `<flag>={resume}` (`--session={resume}`). Other arguments are
/// kept (their `{resume}` expands to nothing). On later turns nothing is dropped.
pub fn drop_empty_resume(argv: &[String], resume_empty: bool) -> Vec<String> {
    if !resume_empty {
        return argv.to_vec();
    }
    let mut out: Vec<String> = Vec::with_capacity(argv.len());
    let mut prev_is_flag = false;
    for a in argv {
        if a == RESUME {
            if prev_is_flag {
                out.pop();
            }
            prev_is_flag = false;
            continue;
        }
        if a.starts_with('-') && a.ends_with(&format!("={RESUME}")) {
            prev_is_flag = false;
            continue;
        }
        prev_is_flag = a.starts_with('-') && a != "--" && !a.contains('{');
        out.push(a.clone());
    }
    out
}

/// Is an agent's error a provider limit (quota, billing, authorization, rate limit), as
/// opposed to an ordinary error? Matches the texts the agent CLIs print (see
/// tests/fake_model/CLIS.md): `usage limit`, `insufficient_quota`, `exceeded your current
/// quota`, `Quota exceeded`, `exhausted your … quota`, `RESOURCE_EXHAUSTED`,
/// `ProviderAuthError`, HTTP 403 and HTTP 429 (`429 Too Many Requests`, `status 429`,
/// `"statusCode":429`, `"code": 429`, `(429)`, `HTTP 429`, `error 429`).
pub fn is_provider_limit(msg: &str) -> bool {
    static PATTERNS: &str = concat!(
        r"(?i)usage\s*limit|quota\s*(exceeded|reached)|insufficient_quota|exceeded\s+your\s+current\s+quota",
        r"|exhausted\s+your\s+(\w+\s+)?quota|RESOURCE_EXHAUSTED|ProviderAuthError|\b403\b",
        r"|\b429\s+too\s+many\s+requests|\bhttp(/[\d.]+)?\s*429\b|status(_?code)?\W{0,3}\s*429\b",
        r"|\bcode\W{0,3}\s*429\b|\(429\)|\berror\W{0,2}\s*429\b|\brate[_ ]limit(ed)?\b.{0,40}\b429\b"
    );
    regex::Regex::new(PATTERNS).map(|re| re.is_match(msg)).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn split_command_follows_shell_rules() {
        let table: &[(&str, Result<Vec<String>, ()>)] = &[
            ("a b  c", Ok(v(&["a", "b", "c"]))),
            (r#"claude -p "fix the bug" --x"#, Ok(v(&["claude", "-p", "fix the bug", "--x"]))),
            ("run '/a path/with spaces' {prompt_file}", Ok(v(&["run", "/a path/with spaces", "{prompt_file}"]))),
            (r"a\ b c", Ok(v(&["a b", "c"]))),
            ("a 'it''s'", Ok(v(&["a", "its"]))),
            ("echo $HOME", Ok(v(&["echo", "$HOME"]))),
            ("a 'unterminated", Err(())),
            ("   ", Err(())),
            ("", Err(())),
        ];
        for (input, want) in table {
            let got = split_command(input).map_err(|_| ());
            assert_eq!(&got, want, "{input:?}");
        }
        assert!(split_command("a \"b").unwrap_err().contains("unterminated"));
    }

    #[test]
    fn session_uuid_is_stable_and_well_formed() {
        let a = session_uuid("ses_01JABC");
        assert_eq!(a, session_uuid("ses_01JABC"));
        assert_ne!(a, session_uuid("ses_01JABD"));
        let re = regex::Regex::new(r"^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$").unwrap();
        for s in ["", "x", "ses_01JABC", "a much longer session id with spaces and ünïcode"] {
            assert!(re.is_match(&session_uuid(s)), "{}", session_uuid(s));
        }
    }

    #[test]
    fn an_empty_resume_drops_its_flag() {
        let table: &[(&[&str], bool, &[&str])] = &[
            (&["a", "{resume}"], true, &["a"]),
            (&["a", "--resume", "{resume}", "b"], true, &["a", "b"]),
            (&["a", "-r", "{resume}"], true, &["a"]),
            (&["a", "--session={resume}", "b"], true, &["a", "b"]),
            (&["a", "-s={resume}"], true, &["a"]),
            // not a flag before it: only the placeholder goes
            (&["a", "resume", "{resume}"], true, &["a", "resume"]),
            (&["a", "--", "{resume}"], true, &["a", "--"]),
            // a flag that carries a placeholder of its own stays
            (&["a", "--model={model}", "{resume}"], true, &["a", "--model={model}"]),
            // an argument that merely contains {resume} stays (it expands to nothing)
            (&["a", "log-{resume}.txt"], true, &["a", "log-{resume}.txt"]),
            (&["--x", "{resume}", "{resume}"], true, &[]),
            // later turns: nothing dropped
            (&["a", "--resume", "{resume}"], false, &["a", "--resume", "{resume}"]),
            (&["a", "--session={resume}"], false, &["a", "--session={resume}"]),
        ];
        for (argv, empty, want) in table {
            assert_eq!(drop_empty_resume(&v(argv), *empty), v(want), "{argv:?} empty={empty}");
        }
    }

    #[test]
    fn provider_limits_are_recognised() {
        let yes = [
            "usage limit reached for c/z",
            "You have reached your usage limit",
            "Quota exceeded. Check your plan and billing details.",
            "You exceeded your current quota, please check your plan and billing details. (insufficient_quota)",
            r#"{"error":{"code":"insufficient_quota"}}"#,
            "You have exhausted your daily quota on this model.",
            r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}"#,
            "ProviderAuthError: bad key",
            "unexpected status 403 Forbidden: nope",
            "exceeded retry limit, last status: 429 Too Many Requests",
            "API Error: Request rejected (429) · slow down",
            r#"{"statusCode":429,"isRetryable":true}"#,
            r#""api_error_status":429"#,
            "HTTP 429",
            "HTTP/1.1 429",
            "status 429",
            "error 429: try later",
            r#"{"code": 429, "message": "x"}"#,
            "rate_limit_error (status 429)",
        ];
        for m in yes {
            assert!(is_provider_limit(m), "should be a provider limit: {m}");
        }
        let no = [
            "agent exit status 1: boom",
            "file has 4290 lines",
            "wrote 429 bytes",
            "line 1429: syntax error",
            "model not found",
            "connection refused",
            "section 403b",
            "",
        ];
        for m in no {
            assert!(!is_provider_limit(m), "should not be a provider limit: {m}");
        }
    }
}
