//! `forge.plan-read`: read the caller's (or a named) plan with paging or regex search,
//! or list and search the project's recent plans (FORGE-REFERENCE.md §2.1).

use forge_domain::plan::read;
use forge_protocol::uri::ForgeUri;
use forge_protocol::{CommandResult, ToolError};
use serde_json::json;

use super::{ok, Db, ToolCtx};
use forge_store::{loops, plans};

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Read the current session or loop plan, or list/search recent project plans. Reads work like the Read tool on the stored plan: `offset` (1-indexed) and `limit` (default 2000 lines), each line prefixed `N: `, with a notice giving the next offset when the window does not reach the end. `pattern` searches the plan with a regex; `loop_name` or `session_id` pick another plan; `recent: true` lists (or with `pattern` searches) the project's recent plans (`count`, default 20, max 100).";

pub type Input = forge_protocol::inputs::PlanReadInput;

fn recent_plan(p: &plans::PlanRow) -> read::RecentPlan {
    read::RecentPlan { label: p.label(), updated_at: p.updated_at, content: p.content.clone() }
}

fn regex_error(m: String) -> ToolError {
    ToolError::invalid(m)
}

pub fn execute(mut input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    let project = ctx.project_id().to_string();
    // An empty pattern is no pattern, as Forge tests it (`if (args.pattern)`): a page, or
    // the recent list, not a search matching every line.
    input.pattern = input.pattern.filter(|p| !p.is_empty());
    if input.recent == Some(true) {
        let n = read::clamp_count(input.count);
        return match input.pattern.as_deref() {
            None => {
                let rows = plans::recent(ctx.db, &project, n).db()?;
                let list: Vec<_> = rows.iter().map(recent_plan).collect();
                let text = read::recent_list(&project, &list);
                ok(text, json!({ "plans": rows.iter().map(plan_summary).collect::<Vec<_>>() }))
            }
            Some(pattern) => {
                let rows = plans::recent(ctx.db, &project, (n * 5).max(100)).db()?;
                let list: Vec<_> = rows.iter().map(recent_plan).collect();
                let (hits, text) = read::recent_search(&list, pattern, n).map_err(regex_error)?;
                ok(text, json!({ "plans": hits.iter().filter_map(|&i| rows.get(i)).map(plan_summary).collect::<Vec<_>>() }))
            }
        };
    }

    // A blank name is refused, not taken for none (review YP: a script's empty variable read
    // the caller's own plan, with success), as plan-write's and plan-edit's `session_id` is.
    for (field, value) in [("loop_name", &input.loop_name), ("session_id", &input.session_id)] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ToolError::invalid_params(format!(
                "invalid argument `{field}`: must not be blank; omit it to read your own session's plan"
            )));
        }
    }
    let loop_name = input.loop_name.as_deref().map(str::trim);
    let session_id = input.session_id.as_deref().map(str::trim);
    // Shared with the plan cache: the text is paged from where it is, not copied.
    let plan = if let Some(name) = loop_name {
        plans::loop_shared(ctx.db, &project, name).db()?
    } else if let Some(s) = session_id {
        plans::session_shared(ctx.db, &project, s).db()?
    } else if let Some(l) = loops::running_for_session(ctx.db, &project, &ctx.caller().session_id).db()? {
        plans::loop_shared(ctx.db, &project, &l.loop_name).db()?
    } else {
        plans::session_shared(ctx.db, &project, &ctx.caller().session_id).db()?
    };
    let Some(plan) = plan else {
        let what = match (loop_name, session_id) {
            (Some(l), _) => format!("No plan found for loop \"{l}\""),
            (_, Some(s)) => format!("No plan found for session {s}"),
            _ => "No plan found for current session".to_string(),
        };
        return Err(ToolError::not_found(what));
    };
    let uri = plan.uri().to_uri();
    if let Some(pattern) = input.pattern.as_deref() {
        let (hits, text) = read::search(&plan.content, pattern).map_err(regex_error)?;
        return ok(
            text,
            json!({ "uri": uri, "matches": hits.iter().map(|h| json!({ "line": h.line, "text": h.text })).collect::<Vec<_>>() }),
        );
    }
    let page = read::page(&plan.content, input.offset, input.limit);
    ok(
        page.text,
        json!({
            "uri": uri,
            "totalLines": page.total_lines,
            "firstLine": page.first,
            "lastLine": page.last,
            "nextOffset": page.next_offset,
            "updatedAt": plan.updated_at,
        }),
    )
}

fn plan_summary(p: &plans::PlanRow) -> serde_json::Value {
    let uri = match (&p.loop_name, &p.session_id) {
        (Some(l), _) => ForgeUri::LoopPlan(l.clone()).to_uri(),
        (_, Some(s)) => ForgeUri::SessionPlan(s.clone()).to_uri(),
        _ => String::new(),
    };
    json!({
        "label": p.label(),
        "loopName": p.loop_name,
        "sessionId": p.session_id,
        "uri": uri,
        "updatedAt": p.updated_at,
        "firstLine": p.content.split('\n').next().unwrap_or("").trim(),
    })
}
