//! `textDocument/codeLens`: `Execute plan` on a session plan; the section status on
//! each section heading of a loop plan, with what plan-adjust made of it
//! (`plan_features::section_lenses`).

use forge_domain::plan::loop_name;
use forge_protocol::uri::ForgeUri;
use serde_json::{json, Value};
use tower_lsp_server::gen_lsp_types::{CodeLens, CodeLensParams};
use tower_lsp_server::jsonrpc::Result;

use crate::plan_features;
use crate::server::{typed, Backend};

pub async fn code_lens(backend: &Backend, params: CodeLensParams) -> Result<Option<Vec<CodeLens>>> {
    let conn = backend.conn()?;
    let Some((doc, text)) = super::plan_text(conn, &params.text_document.uri.0).await else {
        return Ok(None);
    };
    let zero = json!({ "start": { "line": 0, "character": 0 }, "end": { "line": 0, "character": 0 } });
    let lenses: Vec<Value> = match doc {
        ForgeUri::SessionPlan(_) => {
            let title = loop_name::detect(&text).display_name;
            vec![json!({
                "range": zero,
                "command": { "title": "Execute plan", "command": "forge.execute-plan", "arguments": [{ "title": title, "plan": text }] }
            })]
        }
        ForgeUri::LoopPlan(name) => {
            let project = conn.project_id();
            let n = name.clone();
            let (rows, adjusted, total) = conn
                .ws
                .store
                .read(move |db| {
                    let p = rusqlite::params![project, n];
                    let mut st = db.prepare(
                        "SELECT section_index, status, title FROM section_plans
                         WHERE project_id = ?1 AND loop_name = ?2",
                    )?;
                    let rows = st
                        .query_map(p, |r| {
                            Ok(plan_features::SectionRow {
                                index: r.get::<_, i64>(0)? as usize,
                                status: r.get(1)?,
                                title: r.get(2)?,
                            })
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    // The sections plan-adjust touched: what its amendments' snapshots name.
                    let mut st = db.prepare(
                        "SELECT sections_before, sections_after FROM plan_amendments
                         WHERE project_id = ?1 AND loop_name = ?2",
                    )?;
                    let mut adjusted = std::collections::HashSet::new();
                    for pair in st.query_map(p, |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
                        let (before, after) = pair?;
                        adjusted.extend(plan_features::snapshot_indexes(&before));
                        adjusted.extend(plan_features::snapshot_indexes(&after));
                    }
                    let total: i64 = db
                        .query_row(
                            "SELECT total_sections FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                            p,
                            |r| r.get(0),
                        )
                        .unwrap_or(0);
                    Ok::<_, rusqlite::Error>((rows, adjusted, total as usize))
                })
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or_default();
            super::off_task(conn, move || Ok(plan_features::section_lenses(&text, &rows, &adjusted, total)))
                .await?
                .into_iter()
                .scan((usize::MAX, 0), |(last, k), (line, title)| {
                    // The k-th lens of a line at character k: a client that orders a line's
                    // lenses by position (Neovim, with a sort that is not stable) keeps
                    // the sections in order.
                    *k = if *last == line { *k + 1 } else { 0 };
                    *last = line;
                    Some((line, *k, title))
                })
                .map(|(line, k, title)| {
                    json!({
                        "range": { "start": { "line": line, "character": k }, "end": { "line": line, "character": k } },
                        "command": { "title": title, "command": "forge.loop-status", "arguments": [{ "name": name }] }
                    })
                })
                .collect()
        }
        _ => vec![],
    };
    Ok(Some(typed(Value::Array(lenses))?))
}
