//! `forge.interview-submit-state`: store the current state of an interview (spec, status,
//! open questions) for the caller's session without echoing it; the state is the document
//! `forge://interview/<sessionId>.md`.

use forge_protocol::uri::ForgeUri;
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use forge_store::interviews;

pub const NEEDS_SERVER: bool = false;

/// Writes the store: runs on the store's writer thread as one grouped write (crate docs).
pub const READ_ONLY: bool = false;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Store the current interview state of this session without printing it. Call once per interview turn: the first turn carries the full spec; later turns carry a one-line status, an optional unified diff against the stored spec (or a full replacement spec) and the open questions. The state is readable at forge://interview/<sessionId>.md.";

pub type Input = forge_protocol::inputs::InterviewSubmitStateInput;

/// Largest spec stored (bytes).
pub const MAX_SPEC: usize = 8 * 1024 * 1024;
/// Largest status (bytes): one line.
pub const MAX_STATUS: usize = 4096;
/// Most open questions, and the largest one (bytes). The status and the questions go into
/// the project's index document, which must stay a readable size.
pub const MAX_QUESTIONS: usize = 100;
pub const MAX_QUESTION: usize = 16 * 1024;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let status = input.status.trim();
    if status.is_empty() {
        return Err(ToolError::invalid("invalid argument `status`: must not be empty (one line saying where the interview stands)"));
    }
    if status.contains(forge_domain::text::LINE_BREAKS) {
        return Err(ToolError::invalid("invalid argument `status`: must be one line (it holds a line break)"));
    }
    if status.len() > MAX_STATUS {
        return Err(ToolError::invalid(format!(
            "invalid argument `status`: {} bytes, at most {MAX_STATUS} (one line saying where the interview stands)",
            status.len()
        )));
    }
    if let Some(q) = input.questions.as_ref() {
        if q.len() > MAX_QUESTIONS {
            return Err(ToolError::invalid(format!(
                "invalid argument `questions`: {} questions, at most {MAX_QUESTIONS}",
                q.len()
            )));
        }
        if let Some(i) = q.iter().position(|q| q.trim().is_empty()) {
            return Err(ToolError::invalid(format!("invalid argument `questions[{i}]`: a question must not be empty")));
        }
        if let Some(i) = q.iter().position(|q| q.len() > MAX_QUESTION) {
            return Err(ToolError::invalid(format!(
                "invalid argument `questions[{i}]`: {} bytes, at most {MAX_QUESTION}",
                q[i].len()
            )));
        }
    }
    let session = ctx.caller().session_id.clone();
    let stored = interviews::get(ctx.db, ctx.project_id(), &session).db()?;
    let spec = match (&stored, input.spec, input.diff) {
        (_, Some(spec), None) => {
            if spec.trim().is_empty() {
                return Err(ToolError::invalid("invalid argument `spec`: must not be empty"));
            }
            spec
        }
        (None, None, _) => {
            return Err(ToolError::invalid(format!(
                "session {session} has no interview yet: the first turn must carry the full `spec`"
            )))
        }
        (Some(row), None, Some(diff)) => {
            let spec = forge_domain::interview::apply_unified(&row.spec, &diff)
                .map_err(|e| ToolError::invalid(format!("invalid argument `diff`: {e}; nothing was stored")))?;
            if spec.trim().is_empty() {
                return Err(ToolError::invalid(
                    "invalid argument `diff`: it would leave the spec empty (a spec must not be empty); nothing was stored",
                ));
            }
            spec
        }
        (Some(row), None, None) => row.spec.clone(),
        (_, Some(_), Some(_)) => {
            return Err(ToolError::invalid(
                "give either `spec` (the whole spec) or `diff` (a unified diff against the stored spec), not both",
            ))
        }
    };
    if spec.len() > MAX_SPEC {
        return Err(ToolError::invalid(format!(
            "the spec would be {} bytes; at most {MAX_SPEC} are stored",
            spec.len()
        )));
    }
    let questions = match input.questions {
        Some(q) => q,
        None => stored.as_ref().map(|r| r.questions.clone()).unwrap_or_default(),
    };
    let turn = interviews::put(ctx.db, ctx.project_id(), &session, status, &spec, &questions, ctx.now).db()?;
    let uri = ForgeUri::Interview(session.clone()).to_uri();
    // Lines as `str::lines` counts them: a final line break ends the last line, it starts
    // none (the plan tools number a final empty line, as Forge's plan-read does).
    let lines = spec.lines().count();
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    ok(
        format!(
            "Interview state stored (session {session}, turn {turn}: spec {}, {}). Read it at {uri}.",
            plural(lines, "line", "lines"),
            plural(questions.len(), "open question", "open questions")
        ),
        json!({ "sessionId": session, "turn": turn, "uri": uri, "specLines": lines, "questions": questions.len() }),
    )
}
