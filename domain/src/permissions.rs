//! Who may call what (PROTOCOL.md §5), as a pure function of the tool and the caller.
//!
//! Checks that need stored state (the caller's running loop, the loop's phase and
//! current session) are made by the tools themselves; this covers the agent rules and
//! the structural loop-session rules.

/// What the rules know about a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerFacts<'a> {
    /// `user`, `architect`, `code`, `auditor`, `auditor-loop` or `minion`.
    pub agent: &'a str,
    pub session: &'a str,
    /// `coder`, `auditor` or `post_action` when the connection is an authenticated loop
    /// phase session.
    pub loop_role: Option<&'a str>,
    /// The loop of that session.
    pub loop_name: Option<&'a str>,
}

fn deny(tool: &str, c: &CallerFacts, rule: &str) -> Result<(), String> {
    let who = match c.loop_role {
        Some(role) => format!("the {role} session {} of a loop (agent `{}`)", c.session, c.agent),
        None => format!("agent `{}` (session {})", c.agent, c.session),
    };
    Err(format!("forge.{tool} is not available to {who}: {rule}"))
}

/// Checks the agent and loop-session rules for `tool` (a tool name such as `plan-write`).
pub fn check(tool: &str, c: &CallerFacts) -> Result<(), String> {
    let in_loop = c.loop_role.is_some();
    match tool {
        "plan-write" | "plan-edit" => {
            if in_loop {
                // Forge's words (FORGE-REFERENCE §2.2), with the loop's name.
                let rule = format!(
                    "Cannot modify the plan from an active loop session (loop \"{}\"): plan authoring is denied inside loop and audit sessions; a running loop's plan is amended only with plan-adjust during a section audit",
                    c.loop_name.unwrap_or("?")
                );
                return deny(tool, c, &rule);
            }
            if !matches!(c.agent, "user" | "architect") {
                return deny(tool, c, "plan authoring is for the user and architect agents only");
            }
            Ok(())
        }
        "execute-plan" | "loop-cancel" | "loop-status" if in_loop => {
            deny(tool, c, "loop management is denied inside loop sessions so a loop cannot spawn more work")
        }
        "review-write" | "review-delete" => {
            if matches!(c.loop_role, Some("coder") | Some("post_action")) {
                return deny(tool, c, "only audit sessions record or delete review findings inside a loop");
            }
            if !matches!(c.agent, "user" | "auditor" | "auditor-loop") {
                return deny(
                    tool,
                    c,
                    "review findings are written and deleted by auditors (auditor, auditor-loop) and the user",
                );
            }
            Ok(())
        }
        "loop-handoff" | "loop-complete" => {
            if matches!(c.agent, "architect" | "auditor" | "minion")
                || (tool == "loop-complete" && c.agent == "auditor-loop")
            {
                return deny(tool, c, "this agent does not have the loop handoff tools");
            }
            if !in_loop {
                return deny(tool, c, "only the loop's current phase session may record a handoff");
            }
            Ok(())
        }
        "apply-patch" | "ast-grep-replace"
            if matches!(c.agent, "auditor" | "auditor-loop") || c.loop_role == Some("auditor") =>
        {
            deny(tool, c, "auditors review changes; they do not write them")
        }
        "shell" | "section-read" | "plan-adjust" if !in_loop => {
            deny(tool, c, "Not in a loop session: this tool is for loop sessions only")
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f<'a>(agent: &'a str, role: Option<&'a str>) -> CallerFacts<'a> {
        CallerFacts { agent, session: "ses_1", loop_role: role, loop_name: role.map(|_| "the-loop") }
    }

    #[test]
    fn plan_authoring() {
        assert!(check("plan-write", &f("user", None)).is_ok());
        assert!(check("plan-edit", &f("architect", None)).is_ok());
        for a in ["code", "minion", "auditor", "auditor-loop"] {
            let e = check("plan-write", &f(a, None)).unwrap_err();
            assert!(e.contains("forge.plan-write") && e.contains(a), "{e}");
        }
        let e = check("plan-write", &f("code", Some("coder"))).unwrap_err();
        assert!(e.contains("inside loop") && e.contains("ses_1"), "{e}");
        // Forge's words, the loop's name and the way out (FORGE-REFERENCE §2.2).
        assert!(
            e.contains("Cannot modify the plan from an active loop session (loop \"the-loop\")")
                && e.contains("plan-adjust"),
            "{e}"
        );
        for tool in ["section-read", "plan-adjust"] {
            let e = check(tool, &f("code", None)).unwrap_err();
            assert!(e.contains("Not in a loop session"), "{e}");
        }
        assert!(check("plan-read", &f("minion", Some("auditor"))).is_ok());
    }

    #[test]
    fn loop_management_and_reviews() {
        assert!(check("execute-plan", &f("code", Some("coder"))).is_err());
        assert!(check("loop-status", &f("user", None)).is_ok());
        assert!(check("review-write", &f("code", None)).is_err());
        assert!(check("review-write", &f("auditor-loop", Some("auditor"))).is_ok());
        assert!(check("review-delete", &f("code", Some("coder"))).is_err());
        assert!(check("review-write", &f("user", None)).is_ok());
        assert!(check("review-read", &f("code", None)).is_ok());
        assert!(check("ast-grep-replace", &f("auditor-loop", None)).is_err());
        assert!(check("ast-grep-replace", &f("code", Some("auditor"))).is_err());
        assert!(check("ast-grep-replace", &f("code", Some("coder"))).is_ok());
        assert!(check("ast-grep-search", &f("auditor", None)).is_ok());
    }

    #[test]
    fn handoffs_and_loop_only_tools() {
        assert!(check("loop-handoff", &f("code", Some("coder"))).is_ok());
        assert!(check("loop-handoff", &f("user", None)).is_err());
        assert!(check("loop-complete", &f("auditor-loop", Some("auditor"))).is_err());
        assert!(check("loop-handoff", &f("architect", Some("coder"))).is_err());
        assert!(check("shell", &f("user", None)).is_err());
        assert!(check("shell", &f("code", Some("coder"))).is_ok());
    }
}
