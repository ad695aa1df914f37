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
            let (rows, total) = conn
                .ws
                .store
                .read(move |db| {
                    let mut st = db.prepare(
                        "SELECT section_index, status, title, content FROM section_plans
                         WHERE project_id = ?1 AND loop_name = ?2",
                    )?;
                    let rows = st
                        .query_map(rusqlite::params![project, n], |r| {
                            Ok(plan_features::SectionRow {
                                index: r.get::<_, i64>(0)? as usize,
                                status: r.get(1)?,
                                title: r.get(2)?,
                                content: r.get(3)?,
                            })
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    let total: i64 = db
                        .query_row(
                            "SELECT total_sections FROM loops WHERE project_id = ?1 AND loop_name = ?2",
                            rusqlite::params![project, n],
                            |r| r.get(0),
                        )
                        .unwrap_or(0);
                    Ok::<_, rusqlite::Error>((rows, total as usize))
                })
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or_default();
            super::off_task(conn, move || Ok(plan_features::section_lenses(&text, &rows, total)))
                .await?
                .into_iter()
                .map(|(line, title)| {
                    json!({
                        "range": { "start": { "line": line, "character": 0 }, "end": { "line": line, "character": 0 } },
                        "command": { "title": title, "command": "forge.loop-status", "arguments": [{ "name": name }] }
                    })
                })
                .collect()
        }
        _ => vec![],
    };
    Ok(Some(typed(Value::Array(lenses))?))
}
