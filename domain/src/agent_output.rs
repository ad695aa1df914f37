//! What the agent CLIs print, read back: the CLI's own session id, the final reply, the
//! structured error of a failed run, and token usage (as [`UsageLine`]s for the usage
//! file). One parser per preset; the shapes are documented in tests/fake_model/CLIS.md.
//!
//! | CLI | output | usage |
//! |---|---|---|
//! | OpenCode `run --format json` | JSON lines; `sessionID` on every event | `step_finish.part.tokens`, per step |
//! | Codex `exec --json` | JSON lines; `thread.started.thread_id` | `turn.completed.usage`, running totals of the thread |
//! | Claude Code `-p --output-format stream-json` | JSON lines; `session_id` | final `result`: per model for this run |
//! | Gemini CLI `-p --output-format json` | one JSON object (stderr on failure) | `stats.models.<m>.tokens`, this run |

use serde_json::Value;

use crate::usage::UsageLine;

/// The agent CLIs with a preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    OpenCode,
    Codex,
    Claude,
    Gemini,
}

impl Cli {
    /// From `agent.preset`.
    pub fn parse(s: &str) -> Option<Cli> {
        match s {
            "opencode" => Some(Cli::OpenCode),
            "codex" => Some(Cli::Codex),
            "claude" => Some(Cli::Claude),
            "gemini" => Some(Cli::Gemini),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cli::OpenCode => "opencode",
            Cli::Codex => "codex",
            Cli::Claude => "claude",
            Cli::Gemini => "gemini",
        }
    }
}

/// The preset names, for error messages.
pub const PRESETS: &str = "\"opencode\", \"claude\", \"codex\" or \"gemini\"";

/// What one run printed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output {
    /// The CLI's own session id (OpenCode `ses_…`, Codex thread id, Claude / Gemini UUID).
    pub cli_session: Option<String>,
    /// The final assistant text.
    pub reply: Option<String>,
    /// The structured error of a failed run (message, with the HTTP status when given).
    pub error: Option<String>,
    /// Usage lines of this run (see `cumulative`).
    pub usage: Vec<UsageLine>,
    /// `usage` is the session's running total (Codex), not this run's: subtract what was
    /// recorded before ([`delta`]).
    pub cumulative: bool,
}

/// Parses a run's standard output and error.
pub fn parse(cli: Cli, stdout: &str, stderr: &str) -> Output {
    match cli {
        Cli::OpenCode => opencode(stdout),
        Cli::Codex => codex(stdout),
        Cli::Claude => claude(stdout),
        Cli::Gemini => gemini(stdout, stderr),
    }
}

fn json_lines(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.lines().map(str::trim).filter(|l| l.starts_with('{')).filter_map(|l| serde_json::from_str(l).ok())
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(x) => cur = x,
            None => return 0,
        }
    }
    cur.as_u64().unwrap_or(0)
}

fn s(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str().map(str::to_string).filter(|x| !x.is_empty())
}

fn with_status(msg: Option<String>, status: Option<u64>) -> Option<String> {
    match (msg, status) {
        (Some(m), Some(c)) if !m.contains(&c.to_string()) => Some(format!("{m} (status {c})")),
        (Some(m), _) => Some(m),
        (None, Some(c)) => Some(format!("status {c}")),
        (None, None) => None,
    }
}

fn opencode(stdout: &str) -> Output {
    let mut o = Output::default();
    for e in json_lines(stdout) {
        if o.cli_session.is_none() {
            o.cli_session = s(&e, &["sessionID"]);
        }
        match e.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(t) = s(&e, &["part", "text"]) {
                    o.reply = Some(t);
                }
            }
            Some("step_finish") => {
                let t = e.get("part").and_then(|p| p.get("tokens")).cloned().unwrap_or(Value::Null);
                o.usage.push(UsageLine {
                    model: None,
                    input: u(&t, &["input"]),
                    output: u(&t, &["output"]),
                    reasoning: u(&t, &["reasoning"]),
                    cache_read: u(&t, &["cache", "read"]),
                    cache_write: u(&t, &["cache", "write"]),
                    cost: e.get("part").and_then(|p| p.get("cost")).and_then(Value::as_f64).unwrap_or(0.0).max(0.0),
                    context_window: None,
                });
            }
            Some("error") => {
                let err = e.get("error").cloned().unwrap_or(Value::Null);
                let msg = s(&err, &["data", "message"]).or_else(|| s(&err, &["message"]));
                let name = s(&err, &["name"]);
                let msg = match (name, msg) {
                    (Some(n), Some(m)) => Some(format!("{n}: {m}")),
                    (n, m) => m.or(n),
                };
                o.error = with_status(msg, err.get("data").and_then(|d| d.get("statusCode")).and_then(Value::as_u64));
            }
            _ => {}
        }
    }
    o
}

fn codex(stdout: &str) -> Output {
    let mut o = Output { cumulative: true, ..Output::default() };
    let mut last_usage: Option<Value> = None;
    for e in json_lines(stdout) {
        match e.get("type").and_then(Value::as_str) {
            Some("thread.started") => o.cli_session = s(&e, &["thread_id"]).or(o.cli_session),
            Some("item.completed")
                if e.get("item").and_then(|i| i.get("type")).and_then(Value::as_str) == Some("agent_message") =>
            {
                if let Some(t) = s(&e, &["item", "text"]) {
                    o.reply = Some(t);
                }
            }
            // A completed turn succeeded, whatever `error` events came before it: Codex
            // reports each stream retry ("Reconnecting... 1/5") as one.
            Some("turn.completed") => {
                last_usage = e.get("usage").cloned();
                o.error = None;
            }
            Some("turn.failed") => o.error = s(&e, &["error", "message"]).or(o.error.take()),
            Some("error") if o.error.is_none() => o.error = s(&e, &["message"]),
            _ => {}
        }
    }
    if let Some(t) = last_usage {
        let cached = u(&t, &["cached_input_tokens"]);
        o.usage.push(UsageLine {
            model: None,
            input: u(&t, &["input_tokens"]).saturating_sub(cached),
            output: u(&t, &["output_tokens"]),
            reasoning: u(&t, &["reasoning_output_tokens"]),
            cache_read: cached,
            cache_write: u(&t, &["cache_write_input_tokens"]),
            cost: 0.0,
            context_window: None,
        });
    }
    o
}

fn claude(stdout: &str) -> Output {
    let mut o = Output::default();
    for e in json_lines(stdout) {
        if o.cli_session.is_none() {
            o.cli_session = s(&e, &["session_id"]);
        }
        if e.get("type").and_then(Value::as_str) != Some("result") {
            continue;
        }
        let text = s(&e, &["result"]);
        if e.get("is_error").and_then(Value::as_bool) == Some(true) {
            let status = e.get("api_error_status").and_then(Value::as_u64);
            o.error = with_status(text.or_else(|| s(&e, &["subtype"])), status);
        } else {
            o.reply = text;
        }
        o.usage.clear();
        let per_model = e.get("model_usage_since_last_result").and_then(Value::as_object).filter(|m| !m.is_empty());
        match per_model {
            Some(models) => {
                for (model, m) in models {
                    o.usage.push(UsageLine {
                        model: Some(model.clone()),
                        input: u(m, &["inputTokens"]),
                        output: u(m, &["outputTokens"]),
                        reasoning: 0,
                        cache_read: u(m, &["cacheReadInputTokens"]),
                        cache_write: u(m, &["cacheCreationInputTokens"]),
                        cost: m.get("costUSD").and_then(Value::as_f64).unwrap_or(0.0).max(0.0),
                        // Not `contextWindow`: these are sums over the run's requests, not
                        // the size of the last context, so a reuse check would misfire.
                        context_window: None,
                    });
                }
            }
            None => {
                if let Some(t) = e.get("usage").filter(|t| t.is_object()) {
                    o.usage.push(UsageLine {
                        model: None,
                        input: u(t, &["input_tokens"]),
                        output: u(t, &["output_tokens"]),
                        reasoning: 0,
                        cache_read: u(t, &["cache_read_input_tokens"]),
                        cache_write: u(t, &["cache_creation_input_tokens"]),
                        cost: e.get("total_cost_usd").and_then(Value::as_f64).unwrap_or(0.0).max(0.0),
                        context_window: None,
                    });
                }
            }
        }
    }
    o
}

/// The first JSON object in `text` that starts a line (Gemini prints warnings first).
fn first_object(text: &str) -> Option<Value> {
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('{') {
            let mut de = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
            if let Some(Ok(v)) = de.next() {
                return Some(v);
            }
        }
        start += line.len();
    }
    None
}

fn gemini(stdout: &str, stderr: &str) -> Output {
    let mut o = Output::default();
    for v in [first_object(stdout), first_object(stderr)].into_iter().flatten() {
        if o.cli_session.is_none() {
            o.cli_session = s(&v, &["session_id"]);
        }
        if let Some(r) = s(&v, &["response"]) {
            o.reply = Some(r);
        }
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            if o.error.is_none() {
                let status = err.get("code").and_then(Value::as_u64);
                o.error = with_status(s(err, &["message"]), status);
            }
        }
        if let Some(models) = v.get("stats").and_then(|st| st.get("models")).and_then(Value::as_object) {
            if o.usage.is_empty() {
                for (model, m) in models {
                    let t = m.get("tokens").cloned().unwrap_or(Value::Null);
                    let cached = u(&t, &["cached"]);
                    let input = match t.get("input").and_then(Value::as_u64) {
                        Some(i) => i,
                        None => u(&t, &["prompt"]).saturating_sub(cached),
                    };
                    o.usage.push(UsageLine {
                        model: Some(model.clone()),
                        input,
                        output: u(&t, &["candidates"]),
                        reasoning: u(&t, &["thoughts"]),
                        cache_read: cached,
                        cache_write: 0,
                        cost: 0.0,
                        context_window: None,
                    });
                }
            }
        }
    }
    o
}

/// This run's share of a running total: `total` minus what `previous` lines add up to
/// (never below zero). A total smaller than before (a new thread) counts as a whole.
pub fn delta(total: &UsageLine, previous: &[UsageLine]) -> UsageLine {
    let sum = |f: fn(&UsageLine) -> u64| previous.iter().map(f).sum::<u64>();
    let (pi, po) = (sum(|l| l.input), sum(|l| l.output));
    let (pr, pcr, pcw) = (sum(|l| l.reasoning), sum(|l| l.cache_read), sum(|l| l.cache_write));
    let restarted = total.input + total.cache_read < pi + pcr || total.output < po;
    if restarted {
        return total.clone();
    }
    UsageLine {
        model: total.model.clone(),
        input: total.input.saturating_sub(pi),
        output: total.output.saturating_sub(po),
        reasoning: total.reasoning.saturating_sub(pr),
        cache_read: total.cache_read.saturating_sub(pcr),
        cache_write: total.cache_write.saturating_sub(pcw),
        cost: 0.0,
        context_window: total.context_window,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(model: Option<&str>, i: u64, o: u64, r: u64, cr: u64, cw: u64, cost: f64) -> UsageLine {
        UsageLine {
            model: model.map(str::to_string),
            input: i,
            output: o,
            reasoning: r,
            cache_read: cr,
            cache_write: cw,
            cost,
            context_window: None,
        }
    }

    const OPENCODE_OK: &str = r#"{"type":"step_start","sessionID":"ses_abc","part":{}}
{"type":"tool_use","sessionID":"ses_abc","part":{"tool":"bash","state":{"status":"completed"}}}
{"type":"step_finish","sessionID":"ses_abc","part":{"reason":"tool-calls","tokens":{"total":1250,"input":1000,"output":50,"reasoning":0,"cache":{"read":200,"write":0}},"cost":0}}
{"type":"text","sessionID":"ses_abc","part":{"text":"first turn done"}}
{"type":"step_finish","sessionID":"ses_abc","part":{"reason":"stop","tokens":{"total":1300,"input":1100,"output":40,"reasoning":5,"cache":{"read":150,"write":10}},"cost":0.002}}
"#;
    const OPENCODE_LIMIT: &str = r#"{"type":"error","sessionID":"ses_q","error":{"name":"APIError","data":{"message":"You exceeded your current quota, please check your plan and billing details. (insufficient_quota)","statusCode":429,"isRetryable":true}}}"#;

    const CODEX_OK: &str = r#"{"type":"thread.started","thread_id":"0199a-thread"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"i0","type":"error","message":"Model metadata for `fake-model` not found."}}
{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion: 429 Too Many Requests)"}
{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"/bin/bash -c 'echo hi'","exit_code":0}}
{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"first turn done"}}
{"type":"turn.completed","usage":{"input_tokens":3600,"cached_input_tokens":600,"cache_write_input_tokens":0,"output_tokens":150,"reasoning_output_tokens":0}}
"#;
    const CODEX_LIMIT: &str = r#"{"type":"thread.started","thread_id":"t2"}
{"type":"error","message":"Quota exceeded. Check your plan and billing details."}
{"type":"turn.failed","error":{"message":"Quota exceeded. Check your plan and billing details."}}
"#;

    const CLAUDE_OK: &str = r#"{"type":"system","subtype":"init","session_id":"11111111-2222-8333-9444-555555555555","tools":[]}
{"type":"assistant","session_id":"11111111-2222-8333-9444-555555555555","message":{"usage":{"output_tokens":1}}}
{"type":"result","subtype":"success","is_error":false,"session_id":"11111111-2222-8333-9444-555555555555","result":"first turn done","total_cost_usd":0.01512,"usage":{"input_tokens":3000,"output_tokens":150,"cache_read_input_tokens":600,"cache_creation_input_tokens":0},"modelUsage":{"claude-fake":{"inputTokens":9000,"outputTokens":450,"cacheReadInputTokens":1800,"cacheCreationInputTokens":0,"costUSD":0.05,"contextWindow":1000000}},"model_usage_since_last_result":{"claude-fake":{"inputTokens":3000,"outputTokens":150,"cacheReadInputTokens":600,"cacheCreationInputTokens":7,"costUSD":0.01512,"contextWindow":1000000}}}
"#;
    const CLAUDE_NO_PER_MODEL: &str = r#"{"type":"result","subtype":"success","is_error":false,"session_id":"u1","result":"ok","total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":2,"cache_read_input_tokens":3,"cache_creation_input_tokens":4}}"#;
    const CLAUDE_LIMIT: &str = r#"{"type":"system","subtype":"init","session_id":"u2"}
{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","terminal_reason":"api_error","session_id":"u2","result":"API Error: Request rejected (429) · You exceeded your current quota, please check your plan and billing details. (insufficient_quota)"}"#;

    const GEMINI_OK: &str = r#"{
  "session_id": "aaaaaaaa-bbbb-8ccc-9ddd-eeeeeeeeeeee",
  "response": "first turn done",
  "stats": {
    "models": {
      "fake-gemini": {"api": {"totalRequests": 3}, "tokens": {"input": 3000, "prompt": 3600, "candidates": 150, "total": 3750, "cached": 600, "thoughts": 7, "tool": 0}},
      "flash-lite": {"tokens": {"prompt": 100, "candidates": 5, "cached": 20}}
    },
    "tools": {"totalCalls": 2}
  }
}
"#;
    const GEMINI_LIMIT_ERR: &str = "YOLO mode is enabled. All tool calls will be automatically approved.\nTerminalQuotaError: You have exhausted your daily quota on this model.\n{\n  \"session_id\": \"s3\",\n  \"error\": {\"type\": \"Error\", \"message\": \"You have exhausted your daily quota on this model.\", \"code\": 429}\n}\n";

    #[test]
    fn parses_each_clis_output() {
        struct Case {
            cli: Cli,
            out: &'static str,
            err: &'static str,
            session: Option<&'static str>,
            reply: Option<&'static str>,
            error: Option<&'static str>,
            usage: Vec<UsageLine>,
            cumulative: bool,
        }
        let table = vec![
            Case {
                cli: Cli::OpenCode,
                out: OPENCODE_OK,
                err: "",
                session: Some("ses_abc"),
                reply: Some("first turn done"),
                error: None,
                usage: vec![line(None, 1000, 50, 0, 200, 0, 0.0), line(None, 1100, 40, 5, 150, 10, 0.002)],
                cumulative: false,
            },
            Case {
                cli: Cli::OpenCode,
                out: OPENCODE_LIMIT,
                err: "",
                session: Some("ses_q"),
                reply: None,
                error: Some("APIError: You exceeded your current quota, please check your plan and billing details. (insufficient_quota) (status 429)"),
                usage: vec![],
                cumulative: false,
            },
            Case {
                cli: Cli::Codex,
                out: CODEX_OK,
                err: "Reading additional input from stdin...",
                session: Some("0199a-thread"),
                reply: Some("first turn done"),
                error: None,
                usage: vec![line(None, 3000, 150, 0, 600, 0, 0.0)],
                cumulative: true,
            },
            Case {
                cli: Cli::Codex,
                out: CODEX_LIMIT,
                err: "",
                session: Some("t2"),
                reply: None,
                error: Some("Quota exceeded. Check your plan and billing details."),
                usage: vec![],
                cumulative: true,
            },
            Case {
                cli: Cli::Claude,
                out: CLAUDE_OK,
                err: "",
                session: Some("11111111-2222-8333-9444-555555555555"),
                reply: Some("first turn done"),
                error: None,
                usage: vec![line(Some("claude-fake"), 3000, 150, 0, 600, 7, 0.01512)],
                cumulative: false,
            },
            Case {
                cli: Cli::Claude,
                out: CLAUDE_NO_PER_MODEL,
                err: "",
                session: Some("u1"),
                reply: Some("ok"),
                error: None,
                usage: vec![line(None, 10, 2, 0, 3, 4, 0.5)],
                cumulative: false,
            },
            Case {
                cli: Cli::Claude,
                out: CLAUDE_LIMIT,
                err: "",
                session: Some("u2"),
                reply: None,
                error: Some("API Error: Request rejected (429) · You exceeded your current quota, please check your plan and billing details. (insufficient_quota)"),
                usage: vec![],
                cumulative: false,
            },
            Case {
                cli: Cli::Gemini,
                out: GEMINI_OK,
                err: "YOLO mode is enabled.\n",
                session: Some("aaaaaaaa-bbbb-8ccc-9ddd-eeeeeeeeeeee"),
                reply: Some("first turn done"),
                error: None,
                usage: vec![
                    line(Some("fake-gemini"), 3000, 150, 7, 600, 0, 0.0),
                    line(Some("flash-lite"), 80, 5, 0, 20, 0, 0.0),
                ],
                cumulative: false,
            },
            Case {
                cli: Cli::Gemini,
                out: "",
                err: GEMINI_LIMIT_ERR,
                session: Some("s3"),
                reply: None,
                error: Some("You have exhausted your daily quota on this model. (status 429)"),
                usage: vec![],
                cumulative: false,
            },
            Case {
                cli: Cli::Gemini,
                out: "not json at all\n",
                err: "",
                session: None,
                reply: None,
                error: None,
                usage: vec![],
                cumulative: false,
            },
        ];
        for c in table {
            let o = parse(c.cli, c.out, c.err);
            let what = format!("{:?} {}", c.cli, &c.out[..c.out.len().min(60)]);
            assert_eq!(o.cli_session.as_deref(), c.session, "session of {what}");
            assert_eq!(o.reply.as_deref(), c.reply, "reply of {what}");
            assert_eq!(o.error.as_deref(), c.error, "error of {what}");
            assert_eq!(o.usage, c.usage, "usage of {what}");
            assert_eq!(o.cumulative, c.cumulative, "cumulative of {what}");
            if let Some(e) = &o.error {
                assert!(crate::agent_cli::is_provider_limit(e), "{e} should be a provider limit");
            }
        }
    }

    #[test]
    fn delta_subtracts_what_was_recorded() {
        let table: Vec<(UsageLine, Vec<UsageLine>, UsageLine)> = vec![
            // first run of a thread: the whole total
            (line(None, 3000, 150, 0, 600, 0, 0.0), vec![], line(None, 3000, 150, 0, 600, 0, 0.0)),
            // resumed run: total 4800 (incl. 800 cached) after 3600 (incl. 600)
            (
                line(None, 4000, 200, 3, 800, 0, 0.0),
                vec![line(None, 3000, 150, 0, 600, 0, 0.0)],
                line(None, 1000, 50, 3, 200, 0, 0.0),
            ),
            // several earlier runs
            (
                line(None, 60, 6, 0, 0, 0, 0.0),
                vec![line(None, 10, 1, 0, 0, 0, 0.0), line(None, 20, 2, 0, 0, 0, 0.0)],
                line(None, 30, 3, 0, 0, 0, 0.0),
            ),
            // smaller than before: a new thread, counted whole
            (line(None, 5, 1, 0, 0, 0, 0.0), vec![line(None, 100, 10, 0, 0, 0, 0.0)], line(None, 5, 1, 0, 0, 0, 0.0)),
        ];
        for (total, prev, want) in table {
            assert_eq!(delta(&total, &prev), want, "{total:?} after {prev:?}");
        }
    }

    #[test]
    fn presets_by_name() {
        for c in [Cli::OpenCode, Cli::Codex, Cli::Claude, Cli::Gemini] {
            assert_eq!(Cli::parse(c.name()), Some(c));
        }
        assert_eq!(Cli::parse("aider"), None);
        assert_eq!(Cli::parse("Claude"), None);
    }
}
