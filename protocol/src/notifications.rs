//! Server → client notifications of the Forge protocol.

use serde::{Deserialize, Serialize};

/// Method name of the loop status notification.
pub const LOOP_STATUS: &str = "forge/loopStatus";

/// The last persisted transition of a loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastTransition {
    pub kind: String,
    pub event: String,
    pub from: String,
    pub to: Option<String>,
    pub at: i64,
}

/// `forge/loopStatus` params (PROTOCOL.md §7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopStatusParams {
    pub loop_name: String,
    pub status: String,
    pub phase: String,
    pub iteration: i64,
    pub max_iterations: i64,
    pub section_index: Option<i64>,
    pub total_sections: i64,
    pub section_title: Option<String>,
    pub audit_count: i64,
    pub error_count: i64,
    pub termination_reason: Option<String>,
    pub worktree_dir: String,
    pub branch: Option<String>,
    pub session_id: String,
    pub started_at: i64,
    pub completed_at: Option<i64>,
    pub last_transition: Option<LastTransition>,
    /// A `running` loop whose server has ended (killed, crashed): the process id it had.
    /// Nothing runs the loop until it is restarted or cancelled; sent by the replay after
    /// `initialized` (absent otherwise). An extension of PROTOCOL.md §7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_gone: Option<i64>,
}
