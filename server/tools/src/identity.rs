//! Who a caller is: agent, session, and (for loop phase sessions) the loop binding
//! proven by the session token.

use forge_protocol::{ToolError, AGENTS};
use rusqlite::Connection;

use crate::{Caller, Db, LoopBinding};
use forge_store::loops;

/// Resolves a caller. A session id that belongs to a loop session can only be claimed
/// with its token (error 1001 naming the session, disclosing nothing about it), and, when
/// `project` is given, only for the project of its loop: a loop's agent cannot take its
/// loop identity to another folder (its file tools would work there, not in its worktree).
pub fn resolve(
    db: &Connection,
    agent: Option<&str>,
    session: Option<&str>,
    token: Option<&str>,
    project: Option<&str>,
) -> Result<Caller, ToolError> {
    let agent = agent.unwrap_or("user").to_string();
    if !AGENTS.contains(&agent.as_str()) {
        return Err(ToolError::invalid_params(format!("agent must be one of {}, got {agent:?}", AGENTS.join(", "))));
    }
    let Some(session) = session.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(Caller { agent, session_id: forge_core::fresh_session(), binding: None });
    };
    if let Some(why) = forge_protocol::uri::session_id_problem(session) {
        return Err(ToolError::invalid_params(format!("the session id {why}")));
    }
    let Some(row) = loops::session(db, session).db()? else {
        return Ok(Caller { agent, session_id: session.to_string(), binding: None });
    };
    let ok = row.status != "deleted" && token.is_some_and(|t| loops::hash_token(t) == row.token_hash);
    if !ok {
        return Err(ToolError::denied(format!("session {session} cannot be claimed: a missing or wrong token")));
    }
    if project.is_some_and(|p| p != row.project_id) {
        return Err(ToolError::denied(format!(
            "session {session} belongs to a loop of another project: connect from its loop's worktree (from inside it, this means the worktree's `.git` file is missing or damaged, so git no longer sees it as the project's: `git worktree repair <worktree>` run in the project restores it)"
        )));
    }
    let agent = if row.role == "auditor" { "auditor-loop" } else { "code" }.to_string();
    Ok(Caller {
        agent,
        session_id: session.to_string(),
        binding: Some(LoopBinding { loop_name: row.loop_name, role: row.role }),
    })
}
