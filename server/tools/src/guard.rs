//! The repeated-call guard (PROTOCOL.md 10.3), per session: after the 3rd consecutive
//! identical call of a tool that also returned an identical result, a notice is appended to
//! the result telling the caller to change approach; after the 5th, the next identical call
//! of a read-only search tool (`grep`, `glob`, `ast-grep-search`) is refused (1003); other
//! tools stay warn-only. A call whose result differs resets the count; task controls are
//! exempt.
//!
//! Counted on results, not on calls: a call counts only if no other result of the session
//! arrived while it ran, so parallel identical calls cannot inflate the count.
//!
//! The state is process memory: a session's calls go to one server, or, without one, to
//! one `forge-lsp mcp` process ([`crate::run_on`] guards them too). The whole table is
//! cleared when more than [`MAX_SESSIONS`] sessions are tracked.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use forge_protocol::{CommandResult, Data, ToolError};
use serde_json::Value;

/// Sessions tracked at most before the table is cleared.
pub const MAX_SESSIONS: usize = 4096;
/// Identical results after which the notice is appended.
pub const NOTICE_AT: u32 = 3;
/// Identical results after which a search tool's next identical call is refused.
pub const REFUSE_AFTER: u32 = 5;

const SEARCH_TOOLS: &[&str] = &["grep", "glob", "ast-grep-search"];
const EXEMPT: &[&str] = &["task-status", "task-message", "task-cancel", "task-revive", "tools"];

#[derive(Default)]
struct Entry {
    call: u64,
    result: u64,
    count: u32,
    /// Results counted so far (any call): a call started at a different value lost a race.
    seen: u64,
}

static STATE: LazyLock<Mutex<HashMap<String, Entry>>> = LazyLock::new(Default::default);

/// The hasher of the digests: foldhash, seeded once per process (results can be megabytes,
/// and SipHash spent more time on a large plan-read than reading it). A collision between
/// two different consecutive results would only append a notice, or refuse a repeated
/// search early.
static SEED: LazyLock<foldhash::fast::RandomState> = LazyLock::new(Default::default);

/// The digest of a name and a JSON value (`serde_json::Value` hashes by walking itself: no
/// JSON text is built or escaped, and inputs and results can be megabytes).
fn digest(name: &str, value: &(impl std::hash::Hash + ?Sized)) -> u64 {
    use std::hash::BuildHasher;
    SEED.hash_one((name, value))
}

/// A call about to run: its identity and the session's result counter when it started.
pub struct Ticket {
    session: String,
    tool: String,
    call: u64,
    seen: u64,
}

/// Before a call: refuses a search tool's identical call after [`REFUSE_AFTER`] identical
/// results; otherwise returns the ticket to hand to [`finish`]. The same input in another
/// project (`project`: its id) is another call.
pub fn start(session: &str, project: &str, tool: &str, input: &Value) -> Result<Option<Ticket>, ToolError> {
    if EXEMPT.contains(&tool) {
        return Ok(None);
    }
    let call = digest(tool, &(project, input));
    let map = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let e = map.get(session);
    if let Some(e) = e {
        if e.call == call && e.count >= REFUSE_AFTER && SEARCH_TOOLS.contains(&tool) {
            return Err(ToolError::conflict(format!(
                "forge.{tool} refused: this is the same call, with the same input, that already returned the same result {} times in a row. Change the pattern, the path or the approach.",
                e.count
            )));
        }
    }
    let seen = e.map(|e| e.seen).unwrap_or(0);
    Ok(Some(Ticket { session: session.to_string(), tool: tool.to_string(), call, seen }))
}

/// After a successful call: records its result; returns the notice to append, if any.
pub fn finish(ticket: Ticket, result_text: &str, data: &Data) -> Option<String> {
    // Data built as JSON text hashes as its text (never parsed for this).
    let result = match data.as_json_text() {
        Some(json) => digest(result_text, json),
        None => digest(result_text, &**data),
    };
    let mut map = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() > MAX_SESSIONS && !map.contains_key(&ticket.session) {
        map.clear();
    }
    let e = map.entry(ticket.session).or_default();
    if e.seen != ticket.seen {
        // Another result of this session arrived while this call ran: not consecutive.
        e.seen += 1;
        return None;
    }
    e.seen += 1;
    if e.call == ticket.call && e.result == result {
        e.count += 1;
    } else {
        *e = Entry { call: ticket.call, result, count: 1, seen: e.seen };
    }
    (e.count >= NOTICE_AT).then(|| {
        let what = if SEARCH_TOOLS.contains(&ticket.tool.as_str()) && e.count >= REFUSE_AFTER {
            " The next identical call will be refused."
        } else {
            ""
        };
        format!(
            "\n\nNotice: this is the {} identical call of forge.{} in a row with the same result. Repeating it will not change the outcome: change your approach.{what}",
            ordinal(e.count),
            ticket.tool
        )
    })
}

/// A call that failed: the streak ends.
pub fn failed(ticket: Ticket) {
    let mut map = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = map.get_mut(&ticket.session) {
        e.seen += 1;
        e.count = 0;
    }
}

/// After a call, with its [`start`] ticket (none for exempt tools): records the outcome
/// and appends the notice, if any, to a successful result.
pub fn settle(ticket: Option<Ticket>, outcome: Result<CommandResult, ToolError>) -> Result<CommandResult, ToolError> {
    match (outcome, ticket) {
        (Ok(mut r), Some(t)) => {
            if let Some(notice) = finish(t, &r.text, &r.data) {
                r.text.push_str(&notice);
            }
            Ok(r)
        }
        (Err(e), Some(t)) => {
            failed(t);
            Err(e)
        }
        (outcome, None) => outcome,
    }
}

fn ordinal(n: u32) -> String {
    match n {
        1 => "1st".into(),
        2 => "2nd".into(),
        3 => "3rd".into(),
        n => format!("{n}th"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn once(session: &str, tool: &str, input: &Value, result: &str) -> Result<Option<String>, ToolError> {
        match start(session, "p1", tool, input)? {
            Some(t) => Ok(finish(t, result, &Data::default())),
            None => Ok(None),
        }
    }

    #[test]
    fn notices_from_the_third_identical_result_and_refusal_after_the_fifth_for_searches() {
        let input = json!({ "pattern": "x" });
        for k in 1..=5 {
            let notice = once("s-grep", "grep", &input, "same").unwrap();
            assert_eq!(notice.is_some(), k >= 3, "call {k}: {notice:?}");
        }
        let e = once("s-grep", "grep", &input, "same").unwrap_err();
        assert_eq!(e.kind, forge_protocol::ErrorKind::Conflict);
        // The same input in another project is not the same call (it was refused there,
        // though it never ran there).
        let other = start("s-grep", "p2", "grep", &input).unwrap().expect("a ticket");
        assert!(finish(other, "other", &Data::default()).is_none());
        // Another input is not the same call.
        assert!(once("s-grep", "grep", &json!({ "pattern": "y" }), "same").unwrap().is_none());
    }

    #[test]
    fn other_tools_stay_warn_only_and_a_different_result_resets() {
        let input = json!({});
        for _ in 0..7 {
            once("s-read", "plan-read", &input, "same").unwrap();
        }
        assert!(once("s-read", "plan-read", &input, "same").unwrap().is_some());
        assert!(once("s-read", "plan-read", &input, "changed").unwrap().is_none(), "reset by a new result");
        assert!(once("s-read", "plan-read", &input, "changed").unwrap().is_none());
    }

    #[test]
    fn parallel_identical_calls_count_once() {
        let input = json!({ "pattern": "p" });
        // Three calls start before any result arrives: only the first result counts.
        let tickets: Vec<Ticket> = (0..3).map(|_| start("s-par", "p1", "glob", &input).unwrap().unwrap()).collect();
        for t in tickets {
            finish(t, "same", &Data::default());
        }
        assert!(once("s-par", "glob", &input, "same").unwrap().is_none(), "2 counted, not 4");
        assert!(once("s-par", "glob", &input, "same").unwrap().is_some(), "the 3rd counted result");
    }

    #[test]
    fn task_controls_are_exempt() {
        assert!(start("s-task", "p1", "task-status", &json!({})).unwrap().is_none());
    }
}
