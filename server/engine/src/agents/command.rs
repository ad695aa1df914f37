//! The generic `command` host (`agent.command`, PROTOCOL.md §7): the argv template
//! (expanded by the host: `host::expand`); exit 0 with output is a reply, exit 0 without
//! output is no reply, any other exit an assistant error with the tail of standard error.

use std::path::Path;

use super::{AgentHost, Launch, Run};
use crate::turn::{tail_chars, TurnOutcome, TurnRequest};

/// `agent.command` for any agent program.
#[derive(Debug, Clone, Copy)]
pub struct CommandHost;

impl AgentHost for CommandHost {
    fn prepare(&self, req: &TurnRequest, _prompt_file: &Path) -> Result<Launch, String> {
        if req.argv.is_empty() {
            return Err("agent.command is empty".into());
        }
        // The host expands the template's placeholders (`host::expand`).
        Ok(Launch { argv: req.argv.clone(), template: true, ..Launch::default() })
    }

    fn finish(&self, _req: &TurnRequest, run: &Run) -> TurnOutcome {
        match run.code {
            Some(0) if !run.stdout.trim().is_empty() => TurnOutcome::Reply(run.stdout.clone()),
            Some(0) => TurnOutcome::NoReply,
            code => {
                let tail = tail_chars(run.stderr.trim(), 500);
                let code = code.map(|c| format!("exit status {c}")).unwrap_or_else(|| "killed by a signal".into());
                TurnOutcome::Error(if tail.is_empty() {
                    format!("agent {code}")
                } else {
                    format!("agent {code}: {tail}")
                })
            }
        }
    }
}
