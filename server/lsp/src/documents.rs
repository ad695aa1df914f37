//! The `forge:` virtual documents (PROTOCOL.md §4): rendering from the store.

use std::path::Path;
use std::sync::Arc;

use forge_core::Links;
use forge_domain::text::{iso_millis, md_inline};
use forge_protocol::uri::ForgeUri;
use forge_protocol::ToolError;
use rusqlite::Connection;

use crate::conn::Conn;
use forge_store::{loops, plans};
use forge_tools::{Db, ToolEnv};

/// Renders a document; unknown documents are `not_found` (1002).
pub async fn render(conn: &Conn, uri: &ForgeUri, links: Links) -> Result<String, ToolError> {
    let project = conn.project_id();
    let env = conn.env();
    let (root, base) = (env.project.root.clone(), env.project.findings_root().to_path_buf());
    let uri = uri.clone();
    conn.ws
        .store
        .read(move |db| render_sync(db, &env, &project, (&root, &base), links, &uri))
        .await
        .unwrap_or_else(|e| Err(ToolError::internal(e)))
}

/// A rendered document: a plan is shared with the store's plan cache, not copied.
#[derive(Clone)]
pub enum Rendered {
    Text(String),
    Plan(Arc<plans::PlanRow>),
}

impl Rendered {
    pub fn as_str(&self) -> &str {
        match self {
            Rendered::Text(t) => t,
            Rendered::Plan(p) => &p.content,
        }
    }
}

/// [`render`] on the calling thread ([`forge_store::Store::read_here`]): one document is a
/// short read, shorter than the hop to a reader thread.
pub fn render_here(conn: &Conn, uri: &ForgeUri, links: Links) -> Result<Rendered, ToolError> {
    let project = conn.project_id();
    let env = conn.env();
    let roots = (env.project.root.as_path(), env.project.findings_root());
    conn.ws
        .store
        .read_here(|db| render_shared(db, &env, &project, roots, links, uri))
        .unwrap_or_else(|e| Err(ToolError::internal(e)))
}

/// Renders a document; its links to other documents are written in the style `links`.
///
/// `roots`: the project's root (where the view copies are) and its findings' root
/// ([`forge_core::project::Project::findings_root`]); `env` the connection's, for the
/// loop status document (the `loop-status` tool's detail).
pub fn render_sync(
    db: &Connection,
    env: &ToolEnv,
    project: &str,
    roots: (&Path, &Path),
    links: Links,
    uri: &ForgeUri,
) -> Result<String, ToolError> {
    Ok(match render_shared(db, env, project, roots, links, uri)? {
        Rendered::Text(t) => t,
        Rendered::Plan(p) => Arc::unwrap_or_clone(p).content,
    })
}

/// The link to `uri` as a Markdown destination for a caller that follows `links`: a
/// `forge://` URI as it is (already encoded), a view copy's path encoded as a path.
fn md_link(uri: &ForgeUri, root: &Path, links: Links) -> String {
    let target = forge_core::caller::link(uri, root, links);
    match links {
        Links::Forge => forge_domain::text::md_link_destination(&target).into_owned(),
        Links::View => forge_domain::text::md_path_destination(&target),
    }
}

/// [`render_sync`], a plan shared with the store's plan cache instead of copied.
fn render_shared(
    db: &Connection,
    env: &ToolEnv,
    project: &str,
    (root, findings_root): (&Path, &Path),
    links: Links,
    uri: &ForgeUri,
) -> Result<Rendered, ToolError> {
    // Every use is a Markdown link's destination.
    let link = |u: &ForgeUri| md_link(u, root, links);
    let text = match uri {
        ForgeUri::SessionPlan(id) => {
            let plan = plans::session_shared(db, project, id).db()?;
            return plan
                .map(Rendered::Plan)
                .ok_or_else(|| ToolError::not_found(format!("No plan stored for session {id}.")));
        }
        ForgeUri::LoopPlan(name) => {
            let plan = plans::loop_shared(db, project, name).db()?;
            return plan
                .map(Rendered::Plan)
                .ok_or_else(|| ToolError::not_found(format!("No plan stored for loop \"{name}\".")));
        }
        ForgeUri::LoopSection(name, index) => render_section(db, project, name, *index),
        ForgeUri::LoopStatus(name) => render_status(db, env, project, name, &link),
        ForgeUri::LoopHistory(name) => {
            loops::get(db, project, name)
                .db()?
                .ok_or_else(|| ToolError::not_found(format!("No loop found for loop \"{name}\".")))?;
            let (t, a) = forge_store::loop_db::history(db, project, name).db()?;
            Ok(forge_domain::history::render(name, &t, &a))
        }
        ForgeUri::Interview(id) => {
            let row = forge_store::interviews::get(db, project, id)
                .db()?
                .ok_or_else(|| ToolError::not_found(format!("No interview stored for session {id}.")))?;
            Ok(forge_domain::interview::render(&forge_domain::interview::InterviewView {
                session_id: &row.session_id,
                status: &row.status,
                spec: &row.spec,
                questions: &row.questions,
                turn: row.turns,
                updated_at: &iso_millis(row.updated_at),
            }))
        }
        ForgeUri::Index => render_index(db, project, findings_root, &link, None),
    };
    text.map(Rendered::Text)
}

/// Renders a document for its read-only copy: as [`render`] with view links, except the
/// index, whose findings block comes from the connection's incremental counts.
pub async fn render_view(conn: &Conn, uri: &ForgeUri) -> Result<String, ToolError> {
    if *uri != ForgeUri::Index {
        return render(conn, uri, Links::View).await;
    }
    let work = conn.index_counts.lock().map(|mut c| c.take()).map_err(|_| ToolError::internal("index counts"))?;
    let project = conn.project_id();
    let env = conn.env();
    let (root, base) = (env.project.root.clone(), env.project.findings_root().to_path_buf());
    let r = conn
        .ws
        .store
        .read(move |db| {
            let counts = crate::findings_index::update(db, &project, work)?;
            let block = crate::findings_index::render_counts(&counts, &base);
            let link = |u: &ForgeUri| md_link(u, &root, Links::View);
            Ok::<_, ToolError>((render_index(db, &project, &base, &link, Some(block))?, counts))
        })
        .await
        .unwrap_or_else(|e| Err(ToolError::internal(e)));
    match r {
        Ok((text, counts)) => {
            if let Ok(mut c) = conn.index_counts.lock() {
                c.put(counts);
            }
            Ok(text)
        }
        Err(e) => {
            if let Ok(mut c) = conn.index_counts.lock() {
                c.all_changed();
            }
            Err(e)
        }
    }
}

/// How many plans the index lists (the most recently updated).
pub const INDEX_PLANS: usize = 100;
/// How many interviews the index lists (the most recently updated).
pub const INDEX_INTERVIEWS: usize = 20;

/// The index; `findings` is its open-findings block when the caller has it already;
/// `findings_root` is what the findings' relative paths are relative to.
fn render_index(
    db: &Connection,
    project: &str,
    findings_root: &Path,
    link: &dyn Fn(&ForgeUri) -> String,
    findings: Option<String>,
) -> Result<String, ToolError> {
    let mut out = format!("# Forge: project {project}\n\n## Plans\n\n");
    let recent = plans::recent(db, project, INDEX_PLANS).db()?;
    if recent.is_empty() {
        out.push_str("No plans yet.\n");
    }
    for p in &recent {
        let first = p.content.split('\n').next().unwrap_or("").trim();
        // Stored names and text are literal (`md_inline`): a name such as `x](http://e/)`
        // must not become a link, nor a line break end the list.
        out.push_str(&format!(
            "- [{}]({}) · updated {} · {}\n",
            md_inline(&p.label()),
            link(&p.uri()),
            iso_millis(p.updated_at),
            md_inline(first)
        ));
    }
    out.push_str("\n## Loops\n\n");
    let all = loops::list(db, project).db()?;
    if all.is_empty() {
        out.push_str("No loops yet.\n");
    }
    for l in &all {
        out.push_str(&format!(
            "- [{}]({}) · {} · {} · iteration {} · [plan]({})\n",
            md_inline(&l.loop_name),
            link(&ForgeUri::LoopStatus(l.loop_name.clone())),
            l.status,
            l.phase,
            l.iteration,
            link(&ForgeUri::LoopPlan(l.loop_name.clone()))
        ));
    }
    // Interviews are listed only once there is one (the index of a project without
    // interviews is unchanged).
    let interviews = forge_store::interviews::recent(db, project, INDEX_INTERVIEWS).db()?;
    if !interviews.is_empty() {
        out.push_str("\n## Interviews\n\n");
        for i in &interviews {
            out.push_str(&format!(
                "- [session {}]({}) · turn {} · updated {} · {}\n",
                md_inline(&i.session_id),
                link(&ForgeUri::Interview(i.session_id.clone())),
                i.turns,
                iso_millis(i.updated_at),
                md_inline(i.status.lines().next().unwrap_or(""))
            ));
        }
    }
    match findings {
        Some(block) => out.push_str(&block),
        None => out.push_str(&crate::findings_index::render(db, project, findings_root)?),
    }
    Ok(out)
}

fn render_section(db: &Connection, project: &str, name: &str, index: u32) -> Result<String, ToolError> {
    let row = db
        .query_row(
            "SELECT title, content, status, attempts, summary_done, summary_deviations, summary_follow_ups
             FROM section_plans WHERE project_id = ?1 AND loop_name = ?2 AND section_index = ?3",
            rusqlite::params![project, name, index],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ))
            },
        )
        .map(Some)
        .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })
        .db()?;
    let Some((title, content, status, attempts, done, dev, fu)) = row else {
        return Err(ToolError::not_found(format!("Section {index} not found in loop \"{name}\".")));
    };
    let total: i64 = db
        .query_row(
            "SELECT total_sections FROM loops WHERE project_id = ?1 AND loop_name = ?2",
            rusqlite::params![project, name],
            |r| r.get(0),
        )
        .unwrap_or(0);
    let mut out = format!(
        "# Section {}/{}: {title}\n\nStatus: {status} · attempts: {attempts}\n\n{}\n",
        index + 1,
        total.max(i64::from(index) + 1),
        content.trim_end()
    );
    let list = |label: &str, v: &Option<String>| -> String {
        let items: Vec<String> = v.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        if items.is_empty() {
            return String::new();
        }
        format!("\n### {label}\n\n{}\n", items.iter().map(|i| format!("- {i}")).collect::<Vec<_>>().join("\n"))
    };
    if status == "completed" {
        out.push_str("\n## Summary\n");
        out.push_str(&list("Done", &done));
        out.push_str(&list("Deviations", &dev));
        out.push_str(&list("Follow-ups", &fu));
    }
    Ok(out)
}

fn render_status(
    db: &Connection,
    env: &ToolEnv,
    project: &str,
    name: &str,
    link: &dyn Fn(&ForgeUri) -> String,
) -> Result<String, ToolError> {
    let l = loops::get(db, project, name)
        .db()?
        .ok_or_else(|| ToolError::not_found(format!("No loop found for loop \"{name}\".")))?;
    // The same lines as `loop-status name=<name>`, read in this read transaction.
    let mut out = forge_tools::loop_status_document(env, db, &l)?;
    out.push_str(&format!(
        "\n\n[History: transitions and plan amendments]({})\n",
        link(&ForgeUri::LoopHistory(name.to_string()))
    ));
    for i in 0..l.total_sections {
        out.push_str(&format!(
            "{}- [section {}]({})\n",
            if i == 0 { "\n" } else { "" },
            i + 1,
            link(&ForgeUri::LoopSection(name.to_string(), i as u32))
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view copy's link is a path, percent-encoded where a URL reader would take it
    /// otherwise; a `forge://` link is a URI, encoded already, and left as it is.
    #[test]
    fn links_are_encoded_as_paths_or_left_as_uris() {
        let root = Path::new("/p/100% C#");
        let uri = ForgeUri::LoopStatus("a b".into());
        let view = md_link(&uri, root, Links::View);
        assert!(view.starts_with("</p/100%25 C%23/.forge/view/") && view.ends_with('>'), "{view}");
        let forge = md_link(&uri, root, Links::Forge);
        assert_eq!(forge, forge_domain::text::md_link_destination(&uri.to_uri()));
        assert!(!forge.contains("%25"), "{forge}");
    }
}
