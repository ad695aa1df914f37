//! Who is calling, and with which project and configuration. Built by the front ends
//! (LSP `initialize`, `forge-lsp call`), read by the tools and handed to the engine as a
//! plain value.

use std::path::Path;

use forge_protocol::uri::ForgeUri;

use crate::config::Config;
use crate::project::Project;

/// An authenticated loop phase session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopBinding {
    pub loop_name: String,
    /// `coder`, `auditor` or `post_action`.
    pub role: String,
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub agent: String,
    pub session_id: String,
    pub binding: Option<LoopBinding>,
}

impl Caller {
    pub fn facts(&self) -> forge_domain::permissions::CallerFacts<'_> {
        forge_domain::permissions::CallerFacts {
            agent: &self.agent,
            session: &self.session_id,
            loop_role: self.binding.as_ref().map(|b| b.role.as_str()),
            loop_name: self.binding.as_ref().map(|b| b.loop_name.as_str()),
        }
    }
}

/// Everything a call knows besides its input: the project, the caller, the merged
/// configuration and `$HOME` (for path sanitisation).
#[derive(Debug, Clone)]
pub struct ToolEnv {
    pub project: Project,
    pub caller: Caller,
    pub config: Config,
    pub home: Option<String>,
    /// How links to `forge:` documents are written for this caller.
    pub links: Links,
}

/// How a caller follows links to `forge:` documents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Links {
    /// `forge://...` URIs: the client reads them (`workspace.textDocumentContent`), or it is
    /// a program that passes them on.
    #[default]
    Forge,
    /// Absolute paths of the read-only copies under `<project>/.forge/view/`: the client
    /// cannot open `forge://` URIs and the server materializes copies for it.
    View,
}

/// The link to `uri` in the style `links`, for a project rooted at `root`.
pub fn link(uri: &ForgeUri, root: &Path, links: Links) -> String {
    match links {
        Links::Forge => uri.to_uri(),
        Links::View => root.join(".forge/view").join(uri.view_path()).display().to_string(),
    }
}

impl ToolEnv {
    /// The link to `uri` as this caller follows it.
    pub fn link(&self, uri: &ForgeUri) -> String {
        link(uri, &self.project.root, self.links)
    }
}
