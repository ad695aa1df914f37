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
                    use forge_store::loop_db;
                    let rows: Vec<plan_features::SectionRow> = loop_db::sections(db, &project, &n)?
                        .into_iter()
                        .map(|s| plan_features::SectionRow {
                            index: s.index as usize,
                            status: s.status,
                            title: s.title,
                        })
                        .collect();
                    // The sections plan-adjust touched: what its amendments' snapshots name.
                    let adjusted: std::collections::HashSet<usize> = loop_db::amendments(db, &project, &n)?
                        .iter()
                        .flat_map(|a| a.before.iter().chain(&a.after))
                        .map(|s| s.index.max(0) as usize)
                        .collect();
                    let total =
                        forge_store::loops::get(db, &project, &n)?.map_or(0, |l| l.total_sections.max(0) as usize);
                    Ok::<_, rusqlite::Error>((rows, adjusted, total))
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
