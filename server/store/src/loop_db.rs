//! The loop engine's reads and writes. Every function takes the connection (a
//! transaction when it writes); the runner groups them into one transaction per
//! persisted change.

use forge_domain::loop_machine::{Phase, Transition};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

/// A section row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionRow {
    pub index: u32,
    pub title: String,
    pub content: String,
    pub status: String,
    pub attempts: i64,
    pub done: Vec<String>,
    pub deviations: Vec<String>,
    pub follow_ups: Vec<String>,
}

fn list(v: Option<String>) -> Vec<String> {
    v.and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default()
}

pub fn sections(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Vec<SectionRow>> {
    let mut st = db.prepare_cached(
        "SELECT section_index, title, content, status, attempts, summary_done, summary_deviations, summary_follow_ups
         FROM section_plans WHERE project_id = ?1 AND loop_name = ?2 ORDER BY section_index",
    )?;
    let rows = st.query_map(params![project, loop_name], |r| {
        Ok(SectionRow {
            index: r.get::<_, i64>(0)? as u32,
            title: r.get(1)?,
            content: r.get(2)?,
            status: r.get(3)?,
            attempts: r.get(4)?,
            done: list(r.get(5)?),
            deviations: list(r.get(6)?),
            follow_ups: list(r.get(7)?),
        })
    })?;
    rows.collect()
}

pub fn insert_section(
    db: &Connection,
    project: &str,
    loop_name: &str,
    index: u32,
    title: &str,
    content: &str,
    now: i64,
) -> rusqlite::Result<()> {
    db.prepare_cached(
        "INSERT INTO section_plans (project_id, loop_name, section_index, title, content, status, created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)",
    )?
    .execute(params![project, loop_name, index, title, content, now])?;
    Ok(())
}

pub fn start_section(db: &Connection, project: &str, loop_name: &str, index: u32, now: i64) -> rusqlite::Result<()> {
    db.execute(
        "UPDATE section_plans SET status = 'in_progress', started_at = coalesce(started_at, ?4) WHERE project_id = ?1 AND loop_name = ?2 AND section_index = ?3 AND status != 'completed'",
        params![project, loop_name, index, now],
    )?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub fn complete_section(
    db: &Connection,
    project: &str,
    loop_name: &str,
    index: u32,
    done: &[String],
    deviations: &[String],
    follow_ups: &[String],
    checkpoint: Option<&str>,
    now: i64,
) -> rusqlite::Result<()> {
    let j = |v: &[String]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    db.execute(
        "UPDATE section_plans SET status = 'completed', summary_done = ?4, summary_deviations = ?5, summary_follow_ups = ?6,
            checkpoint_commit = ?7, completed_at = ?8 WHERE project_id = ?1 AND loop_name = ?2 AND section_index = ?3",
        params![project, loop_name, index, j(done), j(deviations), j(follow_ups), checkpoint, now],
    )?;
    Ok(())
}

pub fn bump_section_attempts(db: &Connection, project: &str, loop_name: &str, index: u32) -> rusqlite::Result<()> {
    db.execute(
        "UPDATE section_plans SET attempts = attempts + 1 WHERE project_id = ?1 AND loop_name = ?2 AND section_index = ?3",
        params![project, loop_name, index],
    )?;
    Ok(())
}

/// Registers a phase session (token stored hashed).
#[allow(clippy::too_many_arguments)]
pub fn insert_session(
    db: &Connection,
    project: &str,
    loop_name: &str,
    session_id: &str,
    role: &str,
    token: &str,
    section: Option<u32>,
    now: i64,
) -> rusqlite::Result<()> {
    db.prepare_cached(
        "INSERT INTO loop_sessions (session_id, project_id, loop_name, role, token_hash, status, section_index, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'idle', ?6, ?7)",
    )?
    .execute(params![session_id, project, loop_name, role, crate::loops::hash_token(token), section, now])?;
    Ok(())
}

pub fn set_session_status(db: &Connection, session_id: &str, status: &str) -> rusqlite::Result<()> {
    db.prepare_cached("UPDATE loop_sessions SET status = ?2 WHERE session_id = ?1 AND status != 'deleted'")?
        .execute(params![session_id, status])?;
    Ok(())
}

/// Replaces the turn's claim `claim` with its agent's `process`, only while the claim is
/// still the session's record: a turn killed before it got here must not overwrite the
/// claim of the session's next turn.
pub fn replace_claim(db: &Connection, session_id: &str, claim: &str, process: &str) -> rusqlite::Result<()> {
    db.prepare_cached("UPDATE loop_sessions SET agent_process = ?3 WHERE session_id = ?1 AND agent_process = ?2")?
        .execute(params![session_id, claim, process])?;
    Ok(())
}

/// Records `process` (`forge_engine::process::Leader`'s form, or a turn's claim) as the
/// record of the running turn of session `session_id`.
pub fn record_agent_process(db: &Connection, session_id: &str, process: &str) -> rusqlite::Result<()> {
    db.prepare_cached("UPDATE loop_sessions SET agent_process = ?2 WHERE session_id = ?1")?
        .execute(params![session_id, process])?;
    Ok(())
}

/// Forgets the record of a turn that ended, only while it still names `process` (a turn
/// that ended after the next one started leaves the next one's record alone).
pub fn forget_agent_process(db: &Connection, session_id: &str, process: &str) -> rusqlite::Result<()> {
    db.prepare_cached("UPDATE loop_sessions SET agent_process = NULL WHERE session_id = ?1 AND agent_process = ?2")?
        .execute(params![session_id, process])?;
    Ok(())
}

/// The recorded turn leaders of a loop's sessions, deleted ones included:
/// `(session_id, agent_process)`.
pub fn agent_processes(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Vec<(String, String)>> {
    let mut st = db.prepare_cached(
        "SELECT session_id, agent_process FROM loop_sessions
         WHERE project_id = ?1 AND loop_name = ?2 AND agent_process IS NOT NULL",
    )?;
    let rows = st.query_map(params![project, loop_name], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Forgets the recorded turn leaders of a loop (what they led was ended).
pub fn clear_agent_processes(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<()> {
    db.prepare_cached("UPDATE loop_sessions SET agent_process = NULL WHERE project_id = ?1 AND loop_name = ?2")?
        .execute(params![project, loop_name])?;
    Ok(())
}

/// Retires every session of a loop except `keep`.
pub fn delete_sessions(
    db: &Connection,
    project: &str,
    loop_name: &str,
    keep: Option<&str>,
    now: i64,
) -> rusqlite::Result<()> {
    db.execute(
        "UPDATE loop_sessions SET status = 'deleted', deleted_at = ?4
         WHERE project_id = ?1 AND loop_name = ?2 AND status != 'deleted' AND (?3 IS NULL OR session_id != ?3)",
        params![project, loop_name, keep, now],
    )?;
    Ok(())
}

/// Retires every session of a loop except those in `keep`.
pub fn delete_sessions_except(
    db: &Connection,
    project: &str,
    loop_name: &str,
    keep: &[String],
    now: i64,
) -> rusqlite::Result<()> {
    let mut st = db.prepare_cached(
        "SELECT session_id FROM loop_sessions WHERE project_id = ?1 AND loop_name = ?2 AND status != 'deleted'",
    )?;
    let ids: Vec<String> = st.query_map(params![project, loop_name], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    for id in ids.iter().filter(|id| !keep.contains(id)) {
        db.execute(
            "UPDATE loop_sessions SET status = 'deleted', deleted_at = ?2 WHERE session_id = ?1",
            params![id, now],
        )?;
    }
    Ok(())
}

/// Sessions of the loop other than `me` that are busy or retrying.
pub fn busy_others(db: &Connection, project: &str, loop_name: &str, me: &str) -> rusqlite::Result<Vec<String>> {
    let mut st = db.prepare_cached(
        "SELECT session_id FROM loop_sessions WHERE project_id = ?1 AND loop_name = ?2 AND session_id != ?3 AND status IN ('busy','retry')",
    )?;
    let rows = st.query_map(params![project, loop_name, me], |r| r.get(0))?;
    rows.collect()
}

/// A pending handoff record.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub id: i64,
    pub session_id: String,
    pub role: String,
    pub payload: Value,
}

pub fn pending(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Option<Pending>> {
    db.prepare_cached(
        "SELECT id, session_id, role, payload FROM loop_handoffs WHERE project_id = ?1 AND loop_name = ?2 AND status = 'pending'",
    )?
    .query_row(params![project, loop_name], |r| {
        let payload: String = r.get(3)?;
        Ok(Pending {
            id: r.get(0)?,
            session_id: r.get(1)?,
            role: r.get(2)?,
            payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
        })
    })
    .optional()
}

/// Records a pending handoff; the last call in a turn replaces the earlier record.
/// Returns whether an earlier record of this session was replaced.
#[allow(clippy::too_many_arguments)]
pub fn record_handoff(
    db: &Connection,
    project: &str,
    loop_name: &str,
    session_id: &str,
    role: &str,
    phase: &str,
    section: Option<u32>,
    iteration: i64,
    payload: &Value,
    now: i64,
) -> rusqlite::Result<bool> {
    if let Some(p) = pending(db, project, loop_name)? {
        if p.session_id == session_id && p.role == role {
            db.execute(
                "UPDATE loop_handoffs SET payload = ?2, created_at = ?3 WHERE id = ?1 AND status = 'pending'",
                params![p.id, payload.to_string(), now],
            )?;
            return Ok(true);
        }
        // A record of another session or role is stale: it can never be applied.
        resolve_handoff(db, p.id, "discarded", now)?;
    }
    db.execute(
        "INSERT INTO loop_handoffs (project_id, loop_name, session_id, role, phase, section_index, iteration, payload, status, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9)",
        params![project, loop_name, session_id, role, phase, section, iteration, payload.to_string(), now],
    )?;
    Ok(false)
}

/// Resolves a pending record exactly once (guarded on `status = 'pending'`).
pub fn resolve_handoff(db: &Connection, id: i64, status: &str, now: i64) -> rusqlite::Result<bool> {
    let n = db.execute(
        "UPDATE loop_handoffs SET status = ?2, resolved_at = ?3 WHERE id = ?1 AND status = 'pending'",
        params![id, status, now],
    )?;
    Ok(n == 1)
}

/// Applies the pending record of `session` for `role` (guarded); `None` when there is none.
pub fn apply_handoff(
    db: &Connection,
    project: &str,
    loop_name: &str,
    session: &str,
    role: &str,
    now: i64,
) -> rusqlite::Result<Option<Pending>> {
    let Some(p) = pending(db, project, loop_name)? else { return Ok(None) };
    if p.session_id != session || p.role != role {
        return Ok(None);
    }
    let n = db.execute(
        "UPDATE loop_handoffs SET status = 'applied', resolved_at = ?4 WHERE id = ?1 AND session_id = ?2 AND role = ?3 AND status = 'pending'",
        params![p.id, session, role, now],
    )?;
    Ok((n == 1).then_some(p))
}

/// Returns how many were discarded.
pub fn discard_pending(db: &Connection, project: &str, loop_name: &str, now: i64) -> rusqlite::Result<usize> {
    db.execute(
        "UPDATE loop_handoffs SET status = 'discarded', resolved_at = ?3 WHERE project_id = ?1 AND loop_name = ?2 AND status = 'pending'",
        params![project, loop_name, now],
    )
}

/// Appends the transition row of `t`.
pub fn log_transition(
    db: &Connection,
    project: &str,
    loop_name: &str,
    t: &Transition,
    now: i64,
) -> rusqlite::Result<()> {
    db.prepare_cached(
        "INSERT INTO loop_transitions (project_id, loop_name, event_type, transition_kind, from_phase, to_phase, status, reason, iteration, section_index, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        project,
        loop_name,
        t.event_type,
        t.kind.as_str(),
        t.from.as_str(),
        t.to.map(Phase::as_str),
        t.status().map(|s| s.as_str()),
        t.termination.as_ref().map(|r| r.to_stored()).or_else(|| t.detail.clone()),
        t.iteration,
        t.section,
        now
    ])?;
    Ok(())
}

/// A transition row: (kind, event, from, to, at).
pub type TransitionRow = (String, String, String, Option<String>, i64);

/// The last transition row.
pub fn last_transition(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Option<TransitionRow>> {
    db.prepare_cached(
        "SELECT transition_kind, event_type, from_phase, to_phase, created_at FROM loop_transitions
         WHERE project_id = ?1 AND loop_name = ?2 ORDER BY id DESC LIMIT 1",
    )?
    .query_row(params![project, loop_name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
    .optional()
}

pub fn set_large(
    db: &Connection,
    project: &str,
    loop_name: &str,
    last_audit: Option<&str>,
    report: Option<&str>,
) -> rusqlite::Result<()> {
    db.execute(
        "INSERT INTO loop_large_fields (project_id, loop_name, last_audit_result, post_action_report) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (project_id, loop_name) DO UPDATE SET
            last_audit_result = coalesce(excluded.last_audit_result, last_audit_result),
            post_action_report = coalesce(excluded.post_action_report, post_action_report)",
        params![project, loop_name, last_audit, report],
    )?;
    Ok(())
}

pub fn large(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<(Option<String>, Option<String>)> {
    Ok(db
        .query_row(
            "SELECT last_audit_result, post_action_report FROM loop_large_fields WHERE project_id = ?1 AND loop_name = ?2",
            params![project, loop_name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or((None, None)))
}

/// How many of a loop's last agent replies are kept ([`add_reply`]).
pub const RECENT_REPLIES: usize = 5;
/// The most characters of one reply kept.
pub const REPLY_CHARS: usize = 1000;

/// One kept reply: the role of the turn (`coder`, `auditor`, `post_action`) and its text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub role: String,
    pub text: String,
}

/// A kept reply as stored: `{role, text}`, or a plain string (migration 010's form).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum StoredReply {
    Reply(Reply),
    Text(String),
}

/// Keeps `text`, a turn's reply, as the loop's latest, dropping the oldest past
/// [`RECENT_REPLIES`]: on one line as a terminal shows it
/// ([`forge_domain::text::one_line`]), its first [`REPLY_CHARS`] characters, or its
/// last ones with `tail` (a command agent's output, whose end says how it ended). A reply
/// with nothing to show (blank, or only escape sequences) is not kept.
pub fn add_reply(
    db: &Connection,
    project: &str,
    loop_name: &str,
    role: &str,
    text: &str,
    tail: bool,
) -> rusqlite::Result<()> {
    let clean = forge_domain::text::one_line(text);
    let text = clean.trim();
    if text.is_empty() {
        return Ok(());
    }
    let n = text.chars().count();
    let kept: String = if tail {
        text.chars().skip(n.saturating_sub(REPLY_CHARS)).collect()
    } else {
        text.chars().take(REPLY_CHARS).collect()
    };
    let mut replies = recent_replies(db, project, loop_name)?;
    replies.push(Reply { role: role.to_string(), text: kept });
    let extra = replies.len().saturating_sub(RECENT_REPLIES);
    replies.drain(..extra);
    let json = serde_json::to_string(&replies).unwrap_or_else(|_| "[]".into());
    db.execute(
        "INSERT INTO loop_large_fields (project_id, loop_name, recent_replies) VALUES (?1, ?2, ?3)
         ON CONFLICT (project_id, loop_name) DO UPDATE SET recent_replies = excluded.recent_replies",
        params![project, loop_name, json],
    )?;
    Ok(())
}

/// The loop's last agent replies, oldest first ([`add_reply`]); none when none were kept
/// (or the stored text is not such a list).
pub fn recent_replies(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Vec<Reply>> {
    let stored: Vec<StoredReply> = large_json(db, project, loop_name, "recent_replies")?.unwrap_or_default();
    Ok(stored
        .into_iter()
        .map(|r| match r {
            StoredReply::Reply(r) => r,
            StoredReply::Text(text) => Reply { role: String::new(), text: forge_domain::text::one_line(&text) },
        })
        .collect())
}

/// The JSON kept in the loop's `column` of `loop_large_fields` (one of ours, never an
/// input), read as `T`; `None` when there is none or it is not a `T`.
fn large_json<T: serde::de::DeserializeOwned>(
    db: &Connection,
    project: &str,
    loop_name: &str,
    column: &'static str,
) -> rusqlite::Result<Option<T>> {
    let json: Option<String> = db
        .query_row(
            &format!("SELECT {column} FROM loop_large_fields WHERE project_id = ?1 AND loop_name = ?2"),
            params![project, loop_name],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    Ok(json.and_then(|j| serde_json::from_str(&j).ok()))
}

/// A count of changed files: (files, added lines, deleted lines), or why it could not be
/// taken.
pub type FilesChanged = Result<(usize, usize, usize), String>;

/// Records what the loop's worktree changed, as counted at `at` (ms): `Ok((files, added,
/// deleted))`, or why it could not be counted. A count taken earlier than the one stored
/// is dropped (counts run beside the loop and may end out of order).
pub fn set_files_changed(
    db: &Connection,
    project: &str,
    loop_name: &str,
    counted: &FilesChanged,
    at: i64,
) -> rusqlite::Result<()> {
    let json = match counted {
        Ok((files, added, deleted)) => {
            serde_json::json!({ "files": files, "added": added, "deleted": deleted, "at": at })
        }
        Err(e) => serde_json::json!({ "error": e, "at": at }),
    };
    db.execute(
        "INSERT INTO loop_large_fields (project_id, loop_name, files_changed) VALUES (?1, ?2, ?3)
         ON CONFLICT (project_id, loop_name) DO UPDATE SET files_changed = excluded.files_changed
         WHERE coalesce(json_extract(files_changed, '$.at'), -1) <= ?4",
        params![project, loop_name, json.to_string(), at],
    )?;
    Ok(())
}

/// The loop's last count of changed files ([`set_files_changed`]): `None` when none was
/// taken, `Some(Err(reason))` when it could not be.
pub fn files_changed(db: &Connection, project: &str, loop_name: &str) -> rusqlite::Result<Option<FilesChanged>> {
    let Some(v) = large_json::<serde_json::Value>(db, project, loop_name, "files_changed")? else { return Ok(None) };
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Ok(Some(Err(e.to_string())));
    }
    let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).map(|x| x as usize);
    Ok(match (n("files"), n("added"), n("deleted")) {
        (Some(f), Some(a), Some(d)) => Some(Ok((f, a, d))),
        _ => None,
    })
}

/// The loop's transition log and plan amendments, oldest first (the history document).
pub fn history(
    db: &Connection,
    project: &str,
    loop_name: &str,
) -> rusqlite::Result<(Vec<forge_domain::history::TransitionEntry>, Vec<forge_domain::history::AmendmentEntry>)> {
    use forge_domain::history::TransitionEntry;
    let mut st = db.prepare_cached(
        "SELECT event_type, transition_kind, from_phase, to_phase, status, reason, iteration, section_index, created_at
         FROM loop_transitions WHERE project_id = ?1 AND loop_name = ?2 ORDER BY id",
    )?;
    let transitions = st
        .query_map(params![project, loop_name], |r| {
            Ok(TransitionEntry {
                event: r.get(0)?,
                kind: r.get(1)?,
                from: r.get(2)?,
                to: r.get(3)?,
                status: r.get(4)?,
                reason: r.get(5)?,
                iteration: r.get(6)?,
                section: r.get(7)?,
                at: r.get(8)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((transitions, amendments(db, project, loop_name)?))
}

/// The loop's plan amendments (plan-adjust), oldest first, with the sections before and
/// after each.
pub fn amendments(
    db: &Connection,
    project: &str,
    loop_name: &str,
) -> rusqlite::Result<Vec<forge_domain::history::AmendmentEntry>> {
    use forge_domain::history::{AmendedSection, AmendmentEntry};
    let parse = |s: String| -> Vec<AmendedSection> {
        serde_json::from_str::<Vec<Value>>(&s)
            .unwrap_or_default()
            .into_iter()
            .map(|v| AmendedSection {
                index: v["index"].as_i64().unwrap_or(0),
                title: v["title"].as_str().unwrap_or("").to_string(),
                content: v["content"].as_str().unwrap_or("").to_string(),
            })
            .collect()
    };
    let mut st = db.prepare_cached(
        "SELECT rationale, applied_at_section, sections_before, sections_after, created_at
         FROM plan_amendments WHERE project_id = ?1 AND loop_name = ?2 ORDER BY id",
    )?;
    let rows = st
        .query_map(params![project, loop_name], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .map(|(rationale, at_section, b, a, at)| AmendmentEntry {
            rationale,
            at_section,
            before: parse(b),
            after: parse(a),
            at,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_replies_are_kept_cut_and_blank_ones_left_out() {
        let d = tempfile::tempdir().unwrap();
        let c = crate::test_store_with_loop(d.path());
        let texts =
            |c: &Connection| recent_replies(c, "p", "l").unwrap().into_iter().map(|r| r.text).collect::<Vec<_>>();
        assert_eq!(texts(&c), Vec::<String>::new());
        // The last audit and the replies share the loop's row; neither overwrites the other.
        set_large(&c, "p", "l", Some("audit"), None).unwrap();
        add_reply(&c, "p", "l", "coder", "  \n ", false).unwrap();
        assert_eq!(texts(&c), Vec::<String>::new());
        add_reply(&c, "p", "l", "coder", "\u{1b}[2J\u{1b}[H\u{1b}]0;title\u{7}\u{1b}[31m\u{1b}[0m", false).unwrap();
        assert_eq!(texts(&c), Vec::<String>::new(), "only escape sequences: nothing to show");
        for i in 1..=7 {
            let role = if i % 2 == 0 { "auditor" } else { "coder" };
            add_reply(&c, "p", "l", role, &format!(" reply\n{i}\n"), false).unwrap();
        }
        assert_eq!(texts(&c), ["reply 3", "reply 4", "reply 5", "reply 6", "reply 7"]);
        assert_eq!(recent_replies(&c, "p", "l").unwrap()[1], Reply { role: "auditor".into(), text: "reply 4".into() });
        // Migration 010 kept plain strings: still read, with no role.
        let saved = c.query_row("SELECT recent_replies FROM loop_large_fields", [], |r| r.get::<_, String>(0)).unwrap();
        c.execute(
            "UPDATE loop_large_fields SET recent_replies = '[\"old\\nline\", {\"role\": \"coder\", \"text\": \"new\"}]'",
            [],
        )
        .unwrap();
        assert_eq!(
            recent_replies(&c, "p", "l").unwrap(),
            [
                Reply { role: String::new(), text: "old line".into() },
                Reply { role: "coder".into(), text: "new".into() }
            ]
        );
        c.execute("UPDATE loop_large_fields SET recent_replies = ?1", [saved]).unwrap();
        // The start of a model's reply, the end of a command agent's output.
        let long = format!("{}END", "é".repeat(REPLY_CHARS));
        add_reply(&c, "p", "l", "coder", &long, false).unwrap();
        add_reply(&c, "p", "l", "coder", &long, true).unwrap();
        let kept = texts(&c);
        assert_eq!(kept.len(), RECENT_REPLIES);
        assert_eq!(kept[3], "é".repeat(REPLY_CHARS));
        assert_eq!(kept[4], format!("{}END", "é".repeat(REPLY_CHARS - 3)));
        assert_eq!(large(&c, "p", "l").unwrap(), (Some("audit".to_string()), None));
        set_large(&c, "p", "l", Some("audit 2"), None).unwrap();
        assert_eq!(texts(&c).len(), RECENT_REPLIES);
        // Counts: the latest taken wins, whatever order they are written in.
        assert_eq!(files_changed(&c, "p", "l").unwrap(), None);
        set_files_changed(&c, "p", "l", &Ok((2, 10, 1)), 200).unwrap();
        set_files_changed(&c, "p", "l", &Ok((1, 1, 0)), 100).unwrap();
        assert_eq!(files_changed(&c, "p", "l").unwrap(), Some(Ok((2, 10, 1))));
        set_files_changed(&c, "p", "l", &Err("the worktree is gone".into()), 300).unwrap();
        assert_eq!(files_changed(&c, "p", "l").unwrap(), Some(Err("the worktree is gone".into())));
        assert_eq!(texts(&c).len(), RECENT_REPLIES);
    }
}
