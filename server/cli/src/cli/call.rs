//! `forge-lsp call <tool> [JSON|-]` (docs/protocol.md, "forge-lsp call").
//!
//! With `FORGE_LSP_SOCKET` (set for agents in a loop) the call goes through that server.
//! Otherwise it goes to the project's running server named by its socket file
//! (`<data dir>/servers/<project id>`, read without opening the database), else to one in the
//! database's `servers` table (an editor's server registers for its project; a `serve
//! --listen` server for any project, and for each project a call names to it); with none it runs tools that only touch the database in-process, and refuses
//! loop control. `--verbose` says on standard error which route it took. The route and the
//! dispatch are `forge_tools::route`, shared with `forge-lsp mcp`; this file parses the
//! command line and prints.

use std::io::Read;
use std::path::PathBuf;

use forge_protocol::{CommandResult, ErrorKind, ToolError};
use serde_json::{json, Value};

use forge_engine::start::{shell_watch_line, WATCH_IN_EDITOR};
use forge_tools as tools;
use forge_tools::route::{Route, RouteArgs};

/// Options of one call.
pub struct CallArgs {
    pub tool: String,
    pub input: Option<String>,
    pub json: bool,
    pub agent: Option<String>,
    pub session: Option<String>,
    pub data_dir: Option<PathBuf>,
    /// `--project DIR`: the project, instead of the working directory's repository.
    pub project: Option<PathBuf>,
    /// `--verbose`: say on standard error which route the call took.
    pub verbose: bool,
}

/// Process exit status: 0 success, 1 tool failure (or a standard output that cannot be
/// written: a full disk), 2 usage error, 141 a reader that stopped reading (a closed pipe:
/// said by the code alone). Never panics on a closed stream.
pub fn run(args: CallArgs) -> i32 {
    use std::io::{IsTerminal, Write};
    // What a terminal shows: the results quote agents, repositories and web pages (a
    // finding's description, a grep match, a plugin's output), whose escape sequences
    // would act on the terminal (set its title, clear it) and whose bidirectional controls
    // would reorder what is shown (review XF). Left out there, line breaks and tabs kept;
    // a pipe (an agent, a script) gets the text as it is.
    let shown = |text: String, terminal: bool| if terminal { forge_domain::text::plain_lines(&text) } else { text };
    match call_tool(&args) {
        Ok(r) => {
            let text = if args.json {
                // Through a tree, so data built as JSON text is indented too.
                serde_json::to_value(&r).and_then(|v| serde_json::to_string_pretty(&v)).unwrap_or_default()
            } else {
                r.text
            };
            let text = shown(text, std::io::stdout().is_terminal());
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{text}").and_then(|_| out.flush()) {
                Ok(()) => 0,
                // The reader stopped reading (`| head`): nothing to say, as other command-line
                // tools say nothing (a review found an error line). The exit code still says
                // the output was cut.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 141,
                Err(e) => {
                    let _ =
                        writeln!(std::io::stderr(), "forge-lsp call: cannot write the result to standard output: {e}");
                    1
                }
            }
        }
        Err(e) => {
            let terminal = std::io::stderr().is_terminal();
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}", shown(e.message.clone(), terminal));
            if args.json {
                let line = json!({ "error": { "code": e.kind.code(), "message": e.message, "data": { "kind": e.kind.as_str() } } });
                let _ = writeln!(err, "{}", shown(line.to_string(), terminal));
            }
            if matches!(e.kind, ErrorKind::InvalidParams) {
                2
            } else {
                1
            }
        }
    }
}

fn parse_input(raw: Option<&str>) -> Result<Value, ToolError> {
    let text = match raw {
        None => return Ok(json!({})),
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| ToolError::invalid_params(format!("cannot read the input from standard input: {e}")))?;
            s
        }
        Some(s) => s.to_string(),
    };
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| ToolError::invalid_params(format!("the input is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ToolError::invalid_params("the input must be one JSON object, e.g. '{\"content\": \"...\"}'"));
    }
    Ok(v)
}

/// Runs one call and returns its result (what `run` prints); the demo's agent uses it too.
pub fn call_tool(args: &CallArgs) -> Result<CommandResult, ToolError> {
    forge_tools::plugins::on_signal_kill_running_tools();
    let Some(tool) = tools::find(&args.tool) else {
        // A plugin tool from files (`<plugin>__<Name>`, PROTOCOL.md 10.4) of the project,
        // or one offered under its own name (`"override": true`): the name `tools` lists.
        {
            let route_args = RouteArgs {
                agent: args.agent.clone(),
                session: args.session.clone(),
                data_dir: args.data_dir.clone(),
                project: args.project.clone(),
                verbose: args.verbose,
                label: "forge-lsp call",
            };
            let name = args.tool.strip_prefix(forge_protocol::COMMAND_PREFIX).unwrap_or(&args.tool);
            // Outside a project a bare unknown name is only that; a plugin's name says why
            // its project was not found.
            match Route::new(&route_args, &format!("to call forge.{name} on")) {
                Ok(route) if route.plugin(name).is_some() => {
                    let input = parse_input(args.input.as_deref())?;
                    return route.call_named(name, false, input);
                }
                Err(e) if name.contains("__") => return Err(e),
                _ => {}
            }
        }
        return Err(ToolError::invalid_params(format!(
            "unknown tool `{}`; `forge-lsp call --help` lists the tools (and `forge-lsp call tools` the plugin tools)",
            args.tool
        )));
    };
    let input = parse_input(args.input.as_deref())?;
    let route_args = RouteArgs {
        agent: args.agent.clone(),
        session: args.session.clone(),
        data_dir: args.data_dir.clone(),
        project: args.project.clone(),
        verbose: args.verbose,
        label: "forge-lsp call",
    };
    let mut route = Route::new(&route_args, &format!("to call forge.{} on", tool.name))?;
    // A plan written from a shell belongs to a session the caller must name again to edit
    // it: choose it here, so the reply can say which.
    let fresh = route.session.is_none();
    let chosen_session = (fresh && matches!(tool.name, "plan-write" | "plan-edit")).then(forge_core::fresh_session);
    if chosen_session.is_some() {
        route.session = chosen_session.clone();
    }
    // A plan named in the input (`loop_name`, `session_id`) is not looked for in the session.
    let names_a_plan = ["loop_name", "session_id"].iter().any(|k| input.get(*k).is_some_and(|v| !v.is_null()));
    let mut result = route.call(tool, input);
    if let (Ok(r), "execute-plan", false) = (&mut result, tool.name, route.in_loop()) {
        // From a shell there is no editor to watch the loop in: say how to watch it here.
        if let Some(name) = r.data.get("loopName").and_then(Value::as_str).map(str::to_string) {
            r.text = r
                .text
                .lines()
                .map(|l| if l.starts_with(WATCH_IN_EDITOR) { shell_watch_line(&name) } else { l.to_string() })
                .collect::<Vec<_>>()
                .join("\n");
        }
    }
    if !route.in_loop() && !args.json && matches!(tool.name, "loop-status" | "loop-cancel" | "execute-plan") {
        // Forge's hints name a tool's inputs (`loop-status name=<name>`): from a shell, the
        // command to type instead (a review found them pasted as they were). Only the loop
        // tools' own texts, whose hints these are (a plan or a file that happens to hold
        // such a line is data), and not for `--json`, whose text is the tool's.
        match &mut result {
            Ok(r) => r.text = shell_hints(&r.text),
            Err(e) => e.message = shell_hints(&e.message),
        }
    }
    // The session that holds the plan (PROTOCOL.md 10.2): the fresh one, the one named, or
    // the one the input names (`session_id`, the user agent's).
    let holder = |r: &forge_protocol::CommandResult| {
        let named = r.data.get("sessionId").and_then(Value::as_str).map(str::to_string);
        named.filter(|_| matches!(tool.name, "plan-write" | "plan-edit"))
    };
    match (result, chosen_session) {
        (Ok(mut r), chosen) => {
            if let Some(s) = holder(&r).or(chosen) {
                // Quoted for a shell when it has to be, so the hint can be pasted back.
                let q = shell_word(&s);
                r.text.push_str(&format!(
                    "\n\nSession: {s} (this plan's session: pass --session {q} or FORGE_SESSION_ID={q} to read or edit it)"
                ));
            }
            Ok(r)
        }
        // Each call from a shell is a session of its own unless one is named: the plan
        // written by an earlier call is in that call's session.
        (Err(mut e), _)
            if fresh
                && !names_a_plan
                && e.kind == forge_protocol::ErrorKind::NotFound
                && matches!(tool.name, "plan-edit" | "plan-read") =>
        {
            e.message.push_str(
                "\n(this call ran as a fresh session: pass the --session <id> that plan-write printed, or find the plan with plan-read '{\"recent\":true}')",
            );
            Err(e)
        }
        (r, _) => r,
    }
}

/// The first sentence of a description: up to the first ". " outside parentheses (so
/// "(e.g. *.rs)" does not end it), without its full stop.
fn first_sentence(d: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in d.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            '.' if depth <= 0 && d[i + 1..].starts_with(' ') => return &d[..i],
            _ => {}
        }
    }
    d.trim_end_matches('.')
}

/// The `call --help` list of tools.
pub fn tools_help() -> String {
    let mut s =
        String::from("Tools (input is one JSON object; `forge-lsp call tools --json`, run in a project, prints every input schema):\n");
    let width = tools::TOOLS.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in tools::TOOLS {
        s.push_str(&format!("  {:<width$}  {}\n", t.name, first_sentence(t.description)));
    }
    s.push_str("\nIdentity: FORGE_SESSION_ID + FORGE_SESSION_TOKEN (a loop session), else --agent and --session.\nExit status: 0 success, 1 the tool failed (message on stderr), 2 usage error, 141 the reader of the output stopped reading (`| head`).");
    s
}

/// `text` (a loop tool's) with Forge's hints for a tool's inputs given as `forge-lsp call`
/// commands: `loop-status name=<name>` and `loop-cancel name=<name>` (the lists' last
/// lines, whole lines only), a stopped loop's `Restart: available with loop-status name=X
/// restart=true` (a whole line) and an ended loop's "`loop-status` with name=X
/// restart=true resumes it" (in execute-plan's refusal, which starts `Loop "X" has
/// already completed.`).
fn shell_hints(text: &str) -> String {
    let call = |tool: &str, input: Value| format!("forge-lsp call {tool} {}", shell_word(&input.to_string()));
    let restart = |name: &str| call("loop-status", serde_json::json!({ "name": name, "restart": true }));
    const RESTART: &str = "Restart: available with loop-status name=";
    let mut out = text
        .split('\n')
        .map(|l| match l {
            "Use loop-status name=<name> for details." => {
                format!("Use {} for details.", call("loop-status", serde_json::json!({ "name": "<name>" })))
            }
            "Use loop-cancel name=<name> to stop a loop." => {
                format!("Use {} to stop a loop.", call("loop-cancel", serde_json::json!({ "name": "<name>" })))
            }
            _ => match l.strip_prefix(RESTART).and_then(|r| r.strip_suffix(" restart=true")) {
                Some(name) => format!("Restart: available with {}", restart(name)),
                None => l.to_string(),
            },
        })
        .collect::<Vec<_>>()
        .join("\n");
    const RESUMES: (&str, &str) = ("`loop-status` with name=", " restart=true resumes it");
    if !(out.starts_with("Loop \"") && out.contains("\" has already completed.")) {
        return out;
    }
    if let Some(at) = out.find(RESUMES.0) {
        if let Some(len) = out[at + RESUMES.0.len()..].find(RESUMES.1) {
            let name = out[at + RESUMES.0.len()..][..len].to_string();
            let end = at + RESUMES.0.len() + len + RESUMES.1.len();
            out.replace_range(at..end, &format!("`{}` resumes it", restart(&name)));
        }
    }
    out
}

/// `s` as one word of a POSIX shell: as it is when it has nothing the shell reads, else in
/// single quotes (a `'` inside written `'\''`).
fn shell_word(s: &str) -> String {
    // A leading `=` is zsh's `=cmd` expansion.
    let plain = !s.is_empty()
        && !s.starts_with('=')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.,:/@%+=".contains(&b));
    if plain {
        s.to_string()
    } else {
        forge_domain::text::shell_quote(s)
    }
}

#[cfg(test)]
mod shell_hint_tests {
    #[test]
    fn forges_input_hints_become_commands() {
        let table = [
            (
                "Recent Loops\n\nUse loop-status name=<name> for details.",
                r#"Recent Loops

Use forge-lsp call loop-status '{"name":"<name>"}' for details."#,
            ),
            (
                "Use loop-status name=<name> for details.\nUse loop-cancel name=<name> to stop a loop.",
                r#"Use forge-lsp call loop-status '{"name":"<name>"}' for details.
Use forge-lsp call loop-cancel '{"name":"<name>"}' to stop a loop."#,
            ),
            (
                "Audit count: 0\n\nRestart: available with loop-status name=my-plan restart=true",
                r#"Audit count: 0

Restart: available with forge-lsp call loop-status '{"name":"my-plan","restart":true}'"#,
            ),
            (
                "Loop \"a\" has already completed. It ended cancelled; `loop-status` with name=a restart=true resumes it.",
                r#"Loop "a" has already completed. It ended cancelled; `forge-lsp call loop-status '{"name":"a","restart":true}'` resumes it."#,
            ),
            ("Restart: available with force=true", "Restart: available with force=true"),
            // Not whole lines, or not execute-plan's refusal: left as they are.
            ("- Use loop-status name=<name> for details.", "- Use loop-status name=<name> for details."),
            ("Note: `loop-status` with name=a restart=true resumes it.", "Note: `loop-status` with name=a restart=true resumes it."),
            ("nothing to change", "nothing to change"),
        ];
        for (text, want) in table {
            assert_eq!(super::shell_hints(text), want, "{text}");
        }
    }
}

#[cfg(test)]
mod shell_word_tests {
    #[test]
    fn words_are_quoted_only_when_the_shell_would_read_them() {
        for (s, want) in
            [("ses_01ABC", "ses_01ABC"), ("a b", "'a b'"), ("it's", "'it'\\''s'"), ("$(x)", "'$(x)'"), ("", "''")]
        {
            assert_eq!(super::shell_word(s), want, "{s:?}");
        }
    }
}
