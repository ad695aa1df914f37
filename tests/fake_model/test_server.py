"""Unit tests for the fake model server (stdlib client: urllib), one or more per wire API.

Run:  python3 -m pytest tests/fake_model      (pytest is the only dependency)
"""

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import server as fake  # noqa: E402

# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


@pytest.fixture
def srv(tmp_path):
    """Start a server for a script dict; returns a handle with .url, .log(), .set(script)."""
    servers = []

    class Handle:
        def __init__(self, script):
            self.script_path = tmp_path / "script.json"
            self.script_path.write_text(json.dumps(script))
            self.log_path = tmp_path / "requests.jsonl"
            self.server = fake.start(str(self.script_path), log_path=str(self.log_path))
            servers.append(self.server)
            self.url = "http://127.0.0.1:%d" % self.server.server_port

        def log(self):
            if not self.log_path.exists():
                return []
            return [json.loads(line) for line in self.log_path.read_text().splitlines()]

        def rewrite(self, script):
            self.script_path.write_text(json.dumps(script))
            # make sure the mtime changes even on coarse file systems
            st = self.script_path.stat()
            os.utime(self.script_path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))

    yield Handle
    for s in servers:
        s.shutdown()
        s.server_close()


def post(url, body, headers=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def sse(text):
    """[(event, data)] from an SSE body; data parsed as JSON when it is JSON."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        payload = "\n".join(data)
        try:
            payload = json.loads(payload)
        except ValueError:
            pass
        out.append((event, payload))
    return out


OPENCODE_TOOLS = [
    {"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
        "required": ["command"]}}},
    {"type": "function", "function": {"name": "fake_echo", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}},
]

DEMO = {
    "usage": {"input": 100, "output": 10, "cache_read": 20},
    "conversations": [{"id": "demo", "marker": "DEMO", "turns": [
        {"shell": "echo hi > out.txt"},
        {"mcp": "echo", "arguments": {"text": "ping"}},
        {"text": "all done"},
    ]}],
}


def chat_body(messages, stream=True, tools=OPENCODE_TOOLS, model="m1"):
    return {"model": model, "stream": stream, "messages": messages, "tools": tools,
            "stream_options": {"include_usage": True}}


# ------------------------------------------------------------------------------------------
# OpenAI Chat Completions
# ------------------------------------------------------------------------------------------


def test_chat_stream_tool_call_then_history_picks_next_turns(srv):
    s = srv(DEMO)
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "DEMO: go"}]
    status, headers, body = post(s.url + "/v1/chat/completions", chat_body(msgs))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [d for _, d in sse(body)]
    assert events[-1] == "[DONE]"
    calls = [tc for e in events[:-1] for ch in e["choices"] for tc in ch["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "bash"
    args = json.loads("".join(c["function"].get("arguments", "") for c in calls))
    assert args["command"] == "echo hi > out.txt" and "description" in args
    finish = [ch["finish_reason"] for e in events[:-1] for ch in e["choices"] if ch["finish_reason"]]
    assert finish == ["tool_calls"]
    usage = [e["usage"] for e in events[:-1] if e.get("usage")][0]
    assert usage["prompt_tokens"] == 120 and usage["completion_tokens"] == 10
    assert usage["prompt_tokens_details"]["cached_tokens"] == 20

    # second request: one assistant turn in the history -> the MCP tool, resolved to fake_echo
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "(no output)"}]
    _, _, body = post(s.url + "/v1/chat/completions", chat_body(msgs))
    calls = [tc for _, e in sse(body)[:-1] for ch in e["choices"] for tc in ch["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "fake_echo"
    assert json.loads(calls[1]["function"]["arguments"]) == {"text": "ping"}

    # third: text, non-streaming
    msgs += [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "fake_echo", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "echo: ping"}]
    status, _, body = post(s.url + "/v1/chat/completions", chat_body(msgs, stream=False))
    resp = json.loads(body)
    assert resp["choices"][0]["message"]["content"] == "all done"
    assert resp["choices"][0]["finish_reason"] == "stop"
    assert resp["usage"]["total_tokens"] == 130

    log = s.log()
    assert [e["turn"] for e in log] == [0, 1, 2]
    assert all(e["conversation"] == "demo" for e in log)
    assert log[1]["latest_input"] == "(no output)"
    assert log[0]["usage"] == {"input": 100, "output": 10, "cache_read": 20, "cache_write": 0, "reasoning": 0}


def test_after_end_default_and_builtin_title_request(srv):
    s = srv({"conversations": [{"marker": "DEMO", "turns": [{"text": "one"}]}],
             "after_end": {"text": "the end"}, "default": {"text": "who are you?"}})
    url = s.url + "/v1/chat/completions"
    hist = [{"role": "user", "content": "DEMO"}, {"role": "assistant", "content": "one"},
            {"role": "user", "content": "more"}]
    assert json.loads(post(url, chat_body(hist, stream=False))[2])["choices"][0]["message"]["content"] == "the end"
    other = [{"role": "user", "content": "something else"}]
    assert json.loads(post(url, chat_body(other, stream=False))[2])["choices"][0]["message"]["content"] == "who are you?"
    title = [{"role": "system", "content": "You are a title generator. Output a title."},
             {"role": "user", "content": "DEMO"}]
    r = json.loads(post(url, chat_body(title, stream=False, tools=[]))[2])
    assert r["choices"][0]["message"]["content"] == "Scripted session"
    assert [e.get("aux") for e in s.log()] == [False, False, True]


# ------------------------------------------------------------------------------------------
# OpenAI Responses (Codex)
# ------------------------------------------------------------------------------------------

CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
        "required": ["cmd"]}},
    {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
    {"type": "namespace", "name": "mcp__fake", "tools": [
        {"type": "function", "name": "echo", "parameters": {"type": "object", "properties": {}}}]},
    {"type": "web_search"},
]


def responses_body(items, stream=True):
    return {"model": "gpt-fake", "instructions": "You are Codex.", "input": items,
            "tools": CODEX_TOOLS, "stream": stream}


def test_responses_stream_events_and_codex_tools(srv):
    s = srv(DEMO)
    items = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "DEMO go"}]}]
    status, _, body = post(s.url + "/v1/responses", responses_body(items))
    assert status == 200
    evs = sse(body)
    types = [e for e, _ in evs]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert all(e == d["type"] for e, d in evs)
    done = [d["item"] for e, d in evs if e == "response.output_item.done"]
    assert done[0]["type"] == "function_call" and done[0]["name"] == "exec_command"
    assert json.loads(done[0]["arguments"]) == {"cmd": "echo hi > out.txt"}
    usage = evs[-1][1]["response"]["usage"]
    assert usage["input_tokens"] == 120 and usage["input_tokens_details"]["cached_tokens"] == 20
    assert usage["output_tokens"] == 10

    # after a call + output: the MCP tool inside Codex's namespace
    items += [{"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"},
              {"type": "function_call_output", "call_id": "c1", "output": "Process exited with code 0"}]
    evs = sse(post(s.url + "/v1/responses", responses_body(items))[2])
    item = [d["item"] for e, d in evs if e == "response.output_item.done"][0]
    assert (item["type"], item["name"], item["namespace"]) == ("function_call", "echo", "mcp__fake")

    items += [{"type": "function_call", "name": "echo", "namespace": "mcp__fake", "arguments": "{}",
               "call_id": "c2"}, {"type": "function_call_output", "call_id": "c2", "output": "{}"}]
    evs = sse(post(s.url + "/v1/responses", responses_body(items))[2])
    deltas = "".join(d["delta"] for e, d in evs if e == "response.output_text.delta")
    assert deltas == "all done"
    msg = [d["item"] for e, d in evs if e == "response.output_item.done"][0]
    assert msg["type"] == "message" and msg["content"][0]["text"] == "all done"
    assert [e["turn"] for e in s.log()] == [0, 1, 2]


def test_responses_custom_tool_and_non_streaming(srv):
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    s = srv({"turns": [{"tool_calls": [{"name": "apply_patch", "input": patch}]}]})
    status, _, body = post(s.url + "/v1/responses", responses_body("hello", stream=False))
    resp = json.loads(body)
    assert resp["status"] == "completed"
    assert resp["output"][0] == {"type": "custom_tool_call", "id": resp["output"][0]["id"],
                                 "call_id": resp["output"][0]["call_id"], "name": "apply_patch",
                                 "input": patch, "status": "completed"}


# ------------------------------------------------------------------------------------------
# Anthropic Messages (Claude Code)
# ------------------------------------------------------------------------------------------

CLAUDE_TOOLS = [
    {"name": "Bash", "input_schema": {"type": "object", "properties": {
        "command": {"type": "string"}, "description": {"type": "string"}}}},
    {"name": "Read", "input_schema": {"type": "object", "properties": {}}},
    {"name": "mcp__fake__echo", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}},
]


def claude_body(messages, stream=True):
    return {"model": "claude-fake", "max_tokens": 1000, "stream": stream,
            "system": [{"type": "text", "text": "You are Claude Code."}],
            "messages": messages, "tools": CLAUDE_TOOLS}


def test_anthropic_stream_tool_use_and_usage(srv):
    s = srv(DEMO)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"},
                                         {"type": "text", "text": "DEMO go"}]}]
    status, _, body = post(s.url + "/v1/messages?beta=true", claude_body(msgs))
    assert status == 200
    evs = sse(body)
    assert [e for e, _ in evs] == ["message_start", "content_block_start", "content_block_delta",
                                   "content_block_stop", "message_delta", "message_stop"]
    start = evs[1][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "Bash" and start["id"].startswith("toolu_")
    assert json.loads(evs[2][1]["delta"]["partial_json"]) == {"command": "echo hi > out.txt",
                                                             "description": "Run a command"}
    md = evs[4][1]
    assert md["delta"]["stop_reason"] == "tool_use"
    assert md["usage"] == {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": 20}

    # a tool_result with a reminder beside it is still one tool turn, not a new prompt
    msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                                          {"type": "text", "text": "<system-reminder>y</system-reminder>"}]}]
    evs = sse(post(s.url + "/v1/messages", claude_body(msgs))[2])
    assert evs[1][1]["content_block"]["name"] == "mcp__fake__echo"

    msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "mcp__fake__echo",
                                                "input": {}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                           "content": [{"type": "text", "text": "echo: ping"}]}]}]
    status, _, body = post(s.url + "/v1/messages", claude_body(msgs, stream=False))
    resp = json.loads(body)
    assert resp["content"] == [{"type": "text", "text": "all done"}]
    assert resp["stop_reason"] == "end_turn"
    assert [e["turn"] for e in s.log()] == [0, 1, 2]


def test_anthropic_count_tokens(srv):
    s = srv({})
    status, _, body = post(s.url + "/v1/messages/count_tokens?beta=true",
                           {"model": "m", "messages": [{"role": "user", "content": "x" * 400}]})
    assert status == 200 and json.loads(body)["input_tokens"] > 100


# ------------------------------------------------------------------------------------------
# Gemini
# ------------------------------------------------------------------------------------------

GEMINI_TOOLS = [{"functionDeclarations": [
    {"name": "run_shell_command", "parametersJsonSchema": {"type": "object", "properties": {
        "command": {"type": "string"}, "description": {"type": "string"}}}},
    {"name": "mcp_fake_echo", "parametersJsonSchema": {"type": "object", "properties": {}}},
]}]


def gemini_body(contents):
    return {"contents": contents, "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
            "tools": GEMINI_TOOLS, "generationConfig": {"temperature": 0}}


def test_gemini_stream_function_calls_and_usage(srv):
    s = srv(DEMO)
    contents = [{"role": "user", "parts": [{"text": "<session_context>setup</session_context>"}]},
                {"role": "user", "parts": [{"text": "DEMO go"}]}]
    url = s.url + "/v1beta/models/gemini-fake:streamGenerateContent?alt=sse"
    status, headers, body = post(url, gemini_body(contents))
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    chunks = [d for _, d in sse(body)]
    part = chunks[-1]["candidates"][0]["content"]["parts"][0]
    assert part["functionCall"]["name"] == "run_shell_command"
    assert part["functionCall"]["args"]["command"] == "echo hi > out.txt"
    um = chunks[-1]["usageMetadata"]
    assert (um["promptTokenCount"], um["cachedContentTokenCount"], um["candidatesTokenCount"]) == (120, 20, 10)

    contents += [{"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}]},
                 {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command",
                                                                  "response": {"output": "ok"}}}]}]
    chunks = [d for _, d in sse(post(url, gemini_body(contents))[2])]
    assert chunks[-1]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "mcp_fake_echo"

    contents += [{"role": "model", "parts": [{"functionCall": {"name": "mcp_fake_echo", "args": {}}}]},
                 {"role": "user", "parts": [{"functionResponse": {"name": "mcp_fake_echo",
                                                                  "response": {"output": "echo: ping"}}}]}]
    status, _, body = post(s.url + "/v1beta/models/gemini-fake:generateContent", gemini_body(contents))
    resp = json.loads(body)
    assert resp["candidates"][0]["content"]["parts"] == [{"text": "all done"}]
    assert resp["candidates"][0]["finishReason"] == "STOP"
    assert [e["turn"] for e in s.log()] == [0, 1, 2]
    assert all(e["model"] == "gemini-fake" for e in s.log())

    # streamGenerateContent without alt=sse: one JSON array
    status, _, body = post(s.url + "/v1beta/models/gemini-fake:streamGenerateContent", gemini_body(contents[:2]))
    assert isinstance(json.loads(body), list)


def test_gemini_structured_side_requests_and_count_tokens(srv):
    s = srv(DEMO)
    body = {"contents": [{"role": "user", "parts": [{"text": "DEMO classify"}]}],
            "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {
                "type": "object", "properties": {
                    "reasoning": {"type": "string"},
                    "complexity_score": {"type": "integer", "minimum": 1, "maximum": 100},
                    "next_speaker": {"type": "string", "enum": ["model", "user"]}}}}}
    status, _, text = post(s.url + "/v1beta/models/flash:generateContent", body)
    answer = json.loads(json.loads(text)["candidates"][0]["content"]["parts"][0]["text"])
    assert answer == {"reasoning": "fake", "complexity_score": 1, "next_speaker": "user"}
    assert s.log()[0]["aux"] is True and "turn" not in s.log()[0]
    status, _, text = post(s.url + "/v1beta/models/flash:countTokens", {"contents": []})
    assert json.loads(text)["totalTokens"] > 0


# ------------------------------------------------------------------------------------------
# Script features
# ------------------------------------------------------------------------------------------


def chat_text(s, messages, model="m1"):
    status, _, body = post(s.url + "/v1/chat/completions", chat_body(messages, stream=False, model=model))
    assert status == 200, body
    return json.loads(body)["choices"][0]["message"]["content"]


def test_conversations_are_told_apart_by_markers(srv):
    s = srv({"conversations": [
        {"id": "coder", "marker": "ROLE=coder", "turns": [{"text": "coding"}]},
        {"id": "auditor", "marker": ["ROLE=auditor", "Section 2"], "turns": [{"text": "auditing s2"}]},
        {"id": "auditor1", "marker": "ROLE=auditor", "system_marker": "strict", "turns": [{"text": "auditing"}]},
    ]})
    assert chat_text(s, [{"role": "user", "content": "ROLE=coder do it"}]) == "coding"
    assert chat_text(s, [{"role": "system", "content": "be strict"},
                         {"role": "user", "content": "ROLE=auditor Section 2"}]) == "auditing s2"
    assert chat_text(s, [{"role": "system", "content": "be strict"},
                         {"role": "user", "content": "ROLE=auditor Section 1"}]) == "auditing"
    assert chat_text(s, [{"role": "user", "content": "ROLE=auditor Section 1"}]) == "OK."
    assert [e.get("conversation") for e in s.log()] == ["coder", "auditor", "auditor1", None]


def test_segments_count_turns_from_the_latest_prompt(srv):
    s = srv({"conversations": [{"id": "c", "marker": "TASK", "segments": [
        {"prompt": "fix the findings", "turns": [{"text": "fixed"}, {"text": "fix done"}]},
        {"prompt": "TASK", "turns": [{"text": "first"}, {"text": "second"}]},
    ]}]})
    h = [{"role": "user", "content": "TASK: start"}]
    assert chat_text(s, h) == "first"
    h += [{"role": "assistant", "content": "first"}, {"role": "tool", "content": "r"}]
    assert chat_text(s, h) == "second"
    # a nudge or an extra turn does not shift the next segment
    h += [{"role": "assistant", "content": "second"}, {"role": "assistant", "content": "extra"},
          {"role": "user", "content": "please fix the findings"}]
    assert chat_text(s, h) == "fixed"
    h += [{"role": "assistant", "content": "fixed"}, {"role": "tool", "content": "r"}]
    assert chat_text(s, h) == "fix done"
    assert [e["segment"] for e in s.log()] == [1, 1, 0, 0]


def test_when_rules_and_mismatch(srv):
    s = srv({"conversations": [{"id": "c", "marker": "TASK",
                                "rules": [{"when": "PANIC", "text": "calm down"}],
                                "turns": [{"text": "one"}, {"when": "tests pass", "text": "two"}]}],
             "on_mismatch": {"text": "unexpected"}})
    h = [{"role": "user", "content": "TASK"}]
    assert chat_text(s, h) == "one"
    h += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "tests fail"}]
    assert chat_text(s, h) == "unexpected"
    assert "expects 'tests pass'" in s.log()[-1]["mismatch"]
    h[-1] = {"role": "user", "content": "tests pass"}
    assert chat_text(s, h) == "two"
    h[-1] = {"role": "user", "content": "PANIC now"}
    assert chat_text(s, h) == "calm down"
    assert s.log()[-1]["turn"] == "rule"


def test_sequential_mode_ignores_history(srv):
    s = srv({"conversations": [{"marker": "X", "mode": "sequential",
                                "turns": [{"text": "a"}, {"text": "b"}]}]})
    h = [{"role": "user", "content": "X"}]
    assert [chat_text(s, h) for _ in range(3)] == ["a", "b", "Done."]


def test_turn_error_and_delay(srv):
    s = srv({"turns": [{"error": {"status": 500, "kind": "server_error", "message": "boom"}}]})
    status, headers, body = post(s.url + "/v1/chat/completions", chat_body([{"role": "user", "content": "x"}]))
    assert status == 500 and json.loads(body)["error"]["message"] == "boom"
    s2 = srv({"turns": [{"text": "slow", "delay": 0.3}]})
    t0 = time.time()
    assert chat_text(s2, [{"role": "user", "content": "x"}]) == "slow"
    assert time.time() - t0 >= 0.3


def test_provider_limits_in_each_api_shape(srv):
    s = srv({"limits": [
        {"model": "quota", "kind": "insufficient_quota"},
        {"model": "slow*", "kind": "rate_limit", "retry_after": 7, "retryable": True},
        {"model": "denied", "kind": "forbidden"},
        {"model": "later", "kind": "usage_limit", "after": 1, "times": 1},
    ], "turns": [{"text": "fine"}]})
    u = s.url
    st, h, b = post(u + "/v1/chat/completions", chat_body([{"role": "user", "content": "x"}], model="quota"))
    assert st == 429 and json.loads(b)["error"]["code"] == "insufficient_quota"
    assert "exceeded your current quota" in json.loads(b)["error"]["message"]
    assert h.get("x-should-retry") == "false" and "Retry-After" not in h

    st, h, b = post(u + "/v1/responses", dict(responses_body("x"), model="slow-2"))
    assert st == 429 and h["Retry-After"] == "7" and "x-should-retry" not in h
    assert json.loads(b)["error"]["code"] == "rate_limit_exceeded"

    st, h, b = post(u + "/v1/messages", dict(claude_body([{"role": "user", "content": "x"}]), model="quota"))
    assert st == 429 and json.loads(b)["error"]["type"] == "rate_limit_error"
    st, h, b = post(u + "/v1/messages", dict(claude_body([{"role": "user", "content": "x"}]), model="denied"))
    assert st == 403 and json.loads(b)["error"]["type"] == "permission_error"

    st, h, b = post(u + "/v1beta/models/quota:streamGenerateContent?alt=sse", gemini_body([]))
    err = json.loads(b)["error"]
    assert st == 429 and err["status"] == "RESOURCE_EXHAUSTED"
    assert "PerDay" in err["details"][0]["violations"][0]["quotaId"]
    st, h, b = post(u + "/v1beta/models/denied:generateContent", gemini_body([]))
    assert st == 403 and json.loads(b)["error"]["status"] == "PERMISSION_DENIED"

    # `after`/`times`: the first request passes, the second is limited, then it passes again
    results = [post(u + "/v1/chat/completions", chat_body([{"role": "user", "content": "x"}], model="later"))[0]
               for _ in range(3)]
    assert results == [200, 429, 200]
    assert [e["status"] for e in s.log()][-3:] == [200, 429, 200]


def test_control_endpoints_and_script_reload(srv):
    s = srv({"turns": [{"text": "v1"}]})
    h = [{"role": "user", "content": "x"}]
    assert chat_text(s, h) == "v1"
    s.rewrite({"turns": [{"text": "v2"}]})
    assert chat_text(s, h) == "v2"
    assert post(s.url + "/_fake/script", {"turns": [{"text": "v3"}]})[0] == 200
    assert chat_text(s, h) == "v3"
    assert post(s.url + "/_fake/limits", [{"model": "m1", "kind": "usage_limit"}])[0] == 200
    st, _, b = post(s.url + "/v1/chat/completions", chat_body(h))
    assert st == 429 and "usage limit" in json.loads(b)["error"]["message"]
    post(s.url + "/_fake/limits", [])
    assert chat_text(s, h) == "v3"


def test_unknown_tool_names_are_logged(srv):
    s = srv({"turns": [{"tool_calls": [{"name": "nonexistent", "arguments": {"a": 1}}]}]})
    post(s.url + "/v1/chat/completions", chat_body([{"role": "user", "content": "x"}]))
    assert s.log()[0]["unknown_tools"] == ["nonexistent"]


def test_mcp_tool_with_server_name_prefers_that_server(srv):
    tools = [{"type": "function", "function": {"name": n, "parameters": {}}}
             for n in ["echo", "other_echo", "fake_echo"]]
    s = srv({"turns": [{"mcp": "echo", "server": "fake", "arguments": {"text": "t"}}]})
    status, _, body = post(s.url + "/v1/chat/completions",
                           chat_body([{"role": "user", "content": "x"}], stream=False, tools=tools))
    assert json.loads(body)["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "fake_echo"


def test_gzip_body_models_and_unknown_paths(srv):
    s = srv({"turns": [{"text": "zipped"}]})
    raw = gzip.compress(json.dumps(chat_body([{"role": "user", "content": "x"}], stream=False)).encode())
    status, _, body = post(s.url + "/v1/chat/completions", None, {"Content-Encoding": "gzip"}, raw=raw)
    assert json.loads(body)["choices"][0]["message"]["content"] == "zipped"
    status, body = get(s.url + "/v1/models")
    assert json.loads(body)["data"][0]["id"] == "fake-model"
    status, _, body = post(s.url + "/v1/unknown", {})
    assert status == 404
    assert s.log()[-1]["api"] == "unknown"


def test_main_writes_the_port_file(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"text": "from main"}]}))
    port_file = tmp_path / "port"
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), "--script", str(script),
                             "--port-file", str(port_file), "--log", str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.05)
        port = int(port_file.read_text())
        status, _, body = post("http://127.0.0.1:%d/v1/chat/completions" % port,
                               chat_body([{"role": "user", "content": "x"}], stream=False))
        assert json.loads(body)["choices"][0]["message"]["content"] == "from main"
        assert json.loads(log.read_text().splitlines()[0])["status"] == 200
    finally:
        proc.terminate()
        proc.wait(5)


def test_mcp_echo_server_over_stdio(tmp_path):
    log = tmp_path / "echo.jsonl"
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "mcp_echo.py")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, ECHO_MCP_LOG=str(log), FORGE_ROLE="coder"))

    def rpc(msg):
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline()) if "id" in msg else None

    try:
        init = rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert init["result"]["protocolVersion"] == "2025-06-18"
        rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
        assert [t["name"] for t in tools] == ["echo"]
        res = rpc({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"text": "hi"}}})["result"]
        assert res["content"] == [{"type": "text", "text": "echo: hi"}] and res["isError"] is False
        entry = json.loads(log.read_text())
        assert entry["arguments"] == {"text": "hi"} and entry["forge_env"] == {"FORGE_ROLE": "coder"}
        assert rpc({"jsonrpc": "2.0", "id": 4, "method": "nope"})["error"]["code"] == -32601
    finally:
        proc.stdin.close()
        proc.wait(5)


def test_a_broken_script_answers_500_and_logs_why(srv):
    s = srv({"turns": [{"tool_calls": [{"name": "bash", "arguments": "{not json"}]}]})
    status, headers, body = post(s.url + "/v1/chat/completions", chat_body([{"role": "user", "content": "x"}]))
    assert status == 500 and "fake model server" in json.loads(body)["error"]["message"]
    assert s.log()[0]["server_error"].startswith("JSONDecodeError")
