//! Who is calling, and with which project and configuration. Built by the front ends
//! (LSP `initialize`, `forge-lsp call`), read by the tools and handed to the engine as a
//! plain value.

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
}
