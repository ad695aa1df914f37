#!/usr/bin/env python3
"""A scripted fake model server for offline agent-CLI tests (Python 3 stdlib only).

It speaks four wire protocols on 127.0.0.1:

  * OpenAI Chat Completions   POST /v1/chat/completions     (JSON or SSE)
  * OpenAI Responses          POST /v1/responses            (JSON or SSE)
  * Anthropic Messages        POST /v1/messages             (JSON or SSE)
                              POST /v1/messages/count_tokens
  * Gemini                    POST /v1beta/models/<m>:generateContent
                              POST /v1beta/models/<m>:streamGenerateContent?alt=sse
                              POST /v1beta/models/<m>:countTokens

and answers every model request from a *script* (see README.md in this folder). Every
request is appended to a JSON-lines log so that tests can assert what the agent sent and
what it was told (including the usage the server reported).

Run:  python3 server.py --script s.json --port-file port.txt --log requests.jsonl
"""

import argparse
import copy
import gzip
import json
import os
import re
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# --------------------------------------------------------------------------------------
# Normalised view of a request
# --------------------------------------------------------------------------------------


class Conv:
    """A request reduced to what the script matcher needs, independent of the wire API."""

    def __init__(self, api, model, stream):
        self.api = api
        self.model = model or ""
        self.stream = stream
        self.system = ""          # all system / developer / instruction text
        self.messages = []        # [{"role": "user"|"assistant"|"tool", "text": str}]
        self.tools = []           # [{"name", "schema", "kind"}]
        self.json_schema = None   # structured-output schema when the request asks for one

    # messages -------------------------------------------------------------------------
    def add(self, role, text):
        """Append a message; consecutive assistant parts form one assistant turn."""
        text = text or ""
        if role == "assistant" and self.messages and self.messages[-1]["role"] == "assistant":
            self.messages[-1]["text"] += "\n" + text
            return
        self.messages.append({"role": role, "text": text})

    def assistant_turns(self):
        return sum(1 for m in self.messages if m["role"] == "assistant")

    def latest_input(self):
        """Text of everything after the last assistant turn (user text and tool results)."""
        out = []
        for m in reversed(self.messages):
            if m["role"] == "assistant":
                break
            out.append(m["text"])
        return "\n".join(reversed(out))

    def prompt_block(self):
        """(text, assistant turns after it) for the latest run of user (non-tool) messages."""
        last = None
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i]["role"] == "user":
                last = i
                break
        if last is None:
            return "", self.assistant_turns()
        first = last
        while first > 0 and self.messages[first - 1]["role"] == "user":
            first -= 1
        text = "\n".join(m["text"] for m in self.messages[first:last + 1])
        after = sum(1 for m in self.messages[last + 1:] if m["role"] == "assistant")
        return text, after

    def user_text(self):
        return "\n".join(m["text"] for m in self.messages if m["role"] == "user")

    def tool_names(self):
        return [qualified(t) for t in self.tools]


def _text_of(value):
    """Flatten any content shape (string, list of parts, dict) to plain text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text_of(v) for v in value)
    if isinstance(value, dict):
        for key in ("text", "content", "output", "input_text", "output_text"):
            if key in value and not isinstance(value[key], (int, float, bool)):
                return _text_of(value[key])
        return json.dumps(value, sort_keys=True)
    return str(value)


def parse_openai_chat(body):
    c = Conv("openai-chat", body.get("model"), bool(body.get("stream")))
    for msg in body.get("messages") or []:
        role = msg.get("role")
        if role in ("system", "developer"):
            c.system += _text_of(msg.get("content")) + "\n"
        elif role == "assistant":
            parts = [_text_of(msg.get("content"))]
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function") or {}
                parts.append("[call %s %s]" % (fn.get("name"), fn.get("arguments")))
            c.add("assistant", "\n".join(p for p in parts if p))
        elif role == "tool":
            c.add("tool", _text_of(msg.get("content")))
        else:
            c.add("user", _text_of(msg.get("content")))
    for t in body.get("tools") or []:
        fn = t.get("function") or t
        c.tools.append({"name": fn.get("name"), "schema": fn.get("parameters") or {}, "kind": "function"})
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        c.json_schema = (rf.get("json_schema") or {}).get("schema") or {}
    return c


def parse_openai_responses(body):
    c = Conv("openai-responses", body.get("model"), bool(body.get("stream")))
    c.system = _text_of(body.get("instructions")) + "\n"
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for it in items or []:
        typ = it.get("type") or ("message" if "role" in it else "")
        if typ == "message":
            role = it.get("role")
            if role in ("system", "developer"):
                c.system += _text_of(it.get("content")) + "\n"
            elif role == "assistant":
                c.add("assistant", _text_of(it.get("content")))
            else:
                c.add("user", _text_of(it.get("content")))
        elif typ in ("function_call", "custom_tool_call", "local_shell_call", "mcp_call",
                     "tool_search_call"):
            args = it.get("arguments", it.get("input", it.get("action")))
            c.add("assistant", "[call %s %s]" % (it.get("name", typ), _text_of(args)))
        elif typ.endswith("_output"):
            c.add("tool", _text_of(it.get("output")))
        elif typ == "reasoning":
            c.add("assistant", "")
        # other item kinds (compaction summaries, ...) carry no turn of their own
    for t in body.get("tools") or []:
        typ = t.get("type")
        if typ == "function":
            c.tools.append({"name": t.get("name"), "schema": t.get("parameters") or {}, "kind": "function"})
        elif typ == "custom":
            c.tools.append({"name": t.get("name"), "schema": {}, "kind": "custom"})
        elif typ == "local_shell":
            c.tools.append({"name": "local_shell", "schema": {}, "kind": "local_shell"})
        elif typ == "namespace":
            # MCP tools grouped under a namespace: expose them under "<ns>__<tool>" names
            for sub in t.get("tools") or []:
                c.tools.append({"name": sub.get("name"), "schema": sub.get("parameters") or {},
                                "kind": "function", "namespace": t.get("name")})
        elif t.get("name"):
            c.tools.append({"name": t.get("name"), "schema": t.get("parameters") or {}, "kind": typ or "function"})
    fmt = (body.get("text") or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        c.json_schema = fmt.get("schema") or {}
    return c


def parse_anthropic(body):
    c = Conv("anthropic", body.get("model"), bool(body.get("stream")))
    c.system = _text_of(body.get("system")) + "\n"
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if msg.get("role") == "assistant":
            parts = []
            for blk in content if isinstance(content, list) else [content]:
                if isinstance(blk, dict) and blk.get("type") == "tool_use":
                    parts.append("[call %s %s]" % (blk.get("name"), json.dumps(blk.get("input"))))
                elif isinstance(blk, dict) and blk.get("type") in ("thinking", "redacted_thinking"):
                    continue
                else:
                    parts.append(_text_of(blk))
            c.add("assistant", "\n".join(parts))
            continue
        blocks = content if isinstance(content, list) else [content]
        user_parts, tool_parts = [], []
        for blk in blocks:
            if isinstance(blk, dict) and blk.get("type") == "tool_result":
                tool_parts.append(_text_of(blk.get("content")))
            else:
                user_parts.append(_text_of(blk))
        if tool_parts:
            # text beside tool results (reminders the CLI attaches) belongs to the tool turn
            c.add("tool", "\n".join(tool_parts + user_parts))
        elif any(p.strip() for p in user_parts):
            c.add("user", "\n".join(user_parts))
    for t in body.get("tools") or []:
        if t.get("name"):
            c.tools.append({"name": t["name"], "schema": t.get("input_schema") or {},
                            "kind": "function" if "input_schema" in t else (t.get("type") or "function")})
    fmt = (body.get("output_format") or (body.get("output_config") or {}).get("format") or {})
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        c.json_schema = fmt.get("schema") or {}
    return c


def parse_gemini(body, model, stream):
    c = Conv("gemini", model, stream)
    si = body.get("systemInstruction") or body.get("system_instruction")
    c.system = _text_of((si or {}).get("parts") if isinstance(si, dict) else si) + "\n"
    for content in body.get("contents") or []:
        role = content.get("role") or "user"
        texts, calls, results = [], [], []
        for part in content.get("parts") or []:
            if "text" in part:
                if not part.get("thought"):
                    texts.append(part["text"])
            elif "functionCall" in part:
                fc = part["functionCall"]
                calls.append("[call %s %s]" % (fc.get("name"), json.dumps(fc.get("args"))))
            elif "functionResponse" in part:
                results.append(_text_of((part["functionResponse"] or {}).get("response")))
        if role == "model":
            c.add("assistant", "\n".join(texts + calls))
        else:
            if results:
                c.add("tool", "\n".join(results + texts))
            elif texts:
                c.add("user", "\n".join(texts))
    for group in body.get("tools") or []:
        for fd in group.get("functionDeclarations") or group.get("function_declarations") or []:
            c.tools.append({"name": fd.get("name"),
                            "schema": fd.get("parametersJsonSchema") or fd.get("parameters") or {},
                            "kind": "function"})
    gc = body.get("generationConfig") or {}
    schema = gc.get("responseJsonSchema") or gc.get("responseSchema")
    if schema or gc.get("responseMimeType") == "application/json":
        c.json_schema = schema or {}
    return c


# --------------------------------------------------------------------------------------
# The script
# --------------------------------------------------------------------------------------

SHELL_TOOL_NAMES = ["Bash", "bash", "run_shell_command", "shell_command", "exec_command",
                    "shell", "local_shell"]

# Requests that CLIs send on their own (titles, summaries, routing, next-speaker checks):
# answered without consuming a scripted turn. Matched against the system text.
BUILTIN_AUX = [
    {"system_contains": "title generator", "text": "Scripted session"},
    {"system_contains": "generate a title", "text": "Scripted session"},
    {"system_contains": "Generate a concise", "text": "Scripted session"},
    {"system_contains": "summarize this coding conversation", "text": "Scripted summary"},
    {"user_contains": "Please write a 5-10 word title", "text": "Scripted session"},
]


def _contains(haystack, needle):
    if needle is None:
        return True
    needles = needle if isinstance(needle, list) else [needle]
    return all(n in haystack for n in needles)


class Script:
    """The loaded script; reloaded when its file changes."""

    def __init__(self, path=None, data=None):
        self.path = path
        self.mtime = None
        self.lock = threading.Lock()
        self.cursors = {}          # sequential mode: conversation id -> next index
        self.limit_hits = {}       # limit index -> number of requests seen
        self.data = {}
        if data is not None:
            self.set(data)
        elif path:
            self.reload(force=True)

    def set(self, data):
        with self.lock:
            self.data = normalise_script(data)
            self.cursors = {}
            self.limit_hits = {}

    def reload(self, force=False):
        if not self.path:
            return
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            return
        if force or mtime != self.mtime:
            try:
                with open(self.path, encoding="utf-8") as f:
                    data = json.load(f)
            except ValueError:
                if force:
                    raise
                return  # being rewritten: keep the old script, try again on the next request
            self.mtime = mtime
            self.set(data)

    # limits ---------------------------------------------------------------------------
    def limit_for(self, model, api):
        with self.lock:
            for i, lim in enumerate(self.data.get("limits", [])):
                pattern = lim.get("model", "*")
                if pattern != "*" and pattern != model and not (
                        pattern.endswith("*") and model.startswith(pattern[:-1])):
                    continue
                if lim.get("api") and lim["api"] != api:
                    continue
                seen = self.limit_hits.get(i, 0)
                self.limit_hits[i] = seen + 1
                after = lim.get("after", 0)
                times = lim.get("times")
                if seen < after:
                    continue
                if times is not None and seen >= after + times:
                    continue
                return lim
        return None

    # selection ------------------------------------------------------------------------
    def choose(self, conv):
        """Return (response dict, info dict) for a normalised request."""
        data = self.data
        info = {"conversation": None, "turn": None, "aux": False, "mismatch": None}
        # Structured-output side requests (e.g. Gemini's next-speaker check).
        if conv.json_schema is not None and data.get("answer_json_requests", True):
            info["aux"] = True
            return {"json": fill_schema(conv.json_schema)}, info
        for rule in data.get("aux", []) + (BUILTIN_AUX if data.get("builtin_aux", True) else []):
            if ("system_contains" in rule and rule["system_contains"].lower() in conv.system.lower()) or \
               ("user_contains" in rule and rule["user_contains"] in conv.user_text()) or \
               ("model" in rule and rule["model"] == conv.model):
                info["aux"] = True
                return rule, info
        for cv in data["conversations"]:
            if not _contains(conv.user_text(), cv.get("marker")):
                continue
            if not _contains(conv.system, cv.get("system_marker")):
                continue
            if cv.get("api") and cv["api"] != conv.api:
                continue
            info["conversation"] = cv["id"]
            latest = conv.latest_input()
            for rule in cv.get("rules", []):
                if rule.get("when") is not None and _contains(latest, rule["when"]):
                    info["turn"] = "rule"
                    return rule, info
            turns = cv.get("turns", [])
            key = cv["id"]
            if "segments" in cv:
                # Turns counted from the latest user prompt that names the segment.
                prompt, after = conv.prompt_block()
                seg = next((i for i, sg in enumerate(cv["segments"])
                            if _contains(prompt, sg.get("prompt"))), None)
                if seg is None:
                    info["mismatch"] = "no segment matches the latest prompt"
                    return cv.get("on_mismatch", data.get("on_mismatch")), info
                info["segment"] = seg
                turns = cv["segments"][seg].get("turns", [])
                key = "%s#%d" % (cv["id"], seg)
                base = after
            else:
                base = conv.assistant_turns() - cv.get("offset", 0)
            with self.lock:
                if cv.get("mode") == "sequential":
                    idx = self.cursors.get(key, 0)
                    self.cursors[key] = idx + 1
                else:
                    idx = base
            info["turn"] = idx
            if 0 <= idx < len(turns):
                turn = turns[idx]
                if not _contains(latest, turn.get("when")):
                    info["mismatch"] = "turn %d expects %r in the latest input" % (idx, turn.get("when"))
                    return cv.get("on_mismatch", data.get("on_mismatch")), info
                return turn, info
            return cv.get("after_end", data.get("after_end")), info
        return data.get("default"), info


def normalise_script(data):
    data = copy.deepcopy(data or {})
    if "turns" in data and "conversations" not in data:
        data["conversations"] = [{"id": "main", "turns": data.pop("turns")}]
    data.setdefault("conversations", [])
    for i, cv in enumerate(data["conversations"]):
        cv.setdefault("id", "c%d" % i)
    data.setdefault("default", {"text": "OK."})
    data.setdefault("after_end", {"text": "Done."})
    data.setdefault("on_mismatch", {"text": "fake model: the script did not expect this input."})
    limits = data.get("limits", [])
    if isinstance(limits, dict):
        limits = [dict(v, model=k) for k, v in limits.items()]
    data["limits"] = limits
    return data


def fill_schema(schema, key=None):
    """A minimal value that satisfies a JSON schema (for structured side requests)."""
    if not isinstance(schema, dict):
        return None
    if key == "next_speaker":
        return "user"
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = typ[0]
    if isinstance(typ, str):
        typ = typ.lower()
    if typ == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: fill_schema(v, k) for k, v in props.items()}
    if typ == "array":
        return []
    if typ in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        if lo is None:
            return 0
        return lo + (1 if "minimum" not in schema else 0)
    if typ == "boolean":
        return False
    if typ == "string":
        return "fake"
    return None


# --------------------------------------------------------------------------------------
# Turning a scripted response into tool calls for the tools the request declares
# --------------------------------------------------------------------------------------


def qualified(tool):
    """A tool's full name: Codex groups MCP tools in namespaces (`mcp__<server>` + `echo`)."""
    if tool.get("namespace"):
        return tool["namespace"] + "__" + (tool["name"] or "")
    return tool["name"] or ""


def resolve_tool(name, conv, server=None, mcp=False):
    """Map a script's tool name onto a tool the request declares.

    `shell` is an alias for the CLI's shell tool. An MCP tool (`mcp`, optionally with its
    `server`) is found under each CLI's naming: `mcp__<server>__<tool>` (Claude Code, Codex's
    namespaces), `<server>_<tool>` (OpenCode), `mcp_<server>_<tool>` (Gemini CLI). Otherwise an
    exact name wins, then a declared name ending in `<separator><name>`.
    """
    tools = conv.tools
    if mcp or server:
        if server:
            wanted = ["mcp__%s__%s" % (server, name), "%s_%s" % (server, name),
                      "mcp_%s_%s" % (server, name), "%s__%s" % (server, name)]
            for w in wanted:
                for t in tools:
                    if qualified(t) == w:
                        return t
        for t in tools:
            q = qualified(t)
            if q.startswith("mcp") and (q.endswith("__" + name) or q.endswith("_" + name)):
                return t
    for t in tools:
        if t["name"] == name:
            return t
    if name == "shell":
        for cand in SHELL_TOOL_NAMES:
            for t in tools:
                if t["name"] == cand and not t.get("namespace"):
                    return t
    for t in tools:
        q = qualified(t)
        for sep in ("__", "_", ".", "-", "/"):
            if q.endswith(sep + name):
                return t
    return {"name": name, "schema": {}, "kind": "function", "unknown": True}


def shell_arguments(tool, command, extra):
    """Arguments for a CLI's shell tool, shaped by its declared schema."""
    props = (tool.get("schema") or {}).get("properties") or {}
    args = {}
    if "cmd" in props and "command" not in props:
        args["cmd"] = command
    elif (props.get("command") or {}).get("type") == "array" or tool["name"] == "shell" and not props:
        args["command"] = ["bash", "-lc", command]
    else:
        args["command"] = command
    if "description" in props:
        args["description"] = "Run a command"
    if "workdir" in props and "workdir" in (extra or {}):
        args["workdir"] = extra["workdir"]
    args.update({k: v for k, v in (extra or {}).items() if k in props and k not in args})
    return args


def build_calls(resp, conv):
    """List of {"id", "name", "arguments" (dict), "kind"} for the response's tool calls."""
    calls = []
    specs = list(resp.get("tool_calls") or [])
    if "shell" in resp:
        specs.insert(0, {"name": "shell", "command": resp["shell"]})
    if "mcp" in resp:
        specs.append({"mcp": resp["mcp"], "server": resp.get("server"),
                      "arguments": resp.get("arguments", {})})
    for spec in specs:
        if "mcp" in spec:
            spec = dict(spec, name=spec["mcp"])
        tool = resolve_tool(spec["name"], conv, spec.get("server"), "mcp" in spec)
        if spec["name"] == "shell" or "command" in spec and "arguments" not in spec:
            cmd = spec.get("command") or (spec.get("arguments") or {}).get("command", "")
            if tool["name"] in SHELL_TOOL_NAMES:
                args = shell_arguments(tool, cmd, spec.get("arguments"))
            else:
                args = spec.get("arguments") or {"command": cmd}
        else:
            args = spec.get("arguments") or {}
        if isinstance(args, str):
            args = json.loads(args)
        call = {"id": "call_" + uuid.uuid4().hex[:20], "name": tool["name"], "arguments": args,
                "kind": tool.get("kind", "function")}
        if tool.get("namespace"):
            call["namespace"] = tool["namespace"]
        if tool.get("unknown"):
            call["unknown"] = True
        if spec.get("input") is not None:
            call["input"] = spec["input"]   # freeform (custom) tools: raw text input
        calls.append(call)
    return calls


def estimate_tokens(nbytes):
    """About four bytes per token."""
    return max(1, (nbytes + 3) // 4)


def compute_usage(resp, raw_len, out_text, calls, script_data):
    """Usage for one response: the script's numbers (turn, then script-wide), else estimates."""
    base = dict(script_data.get("usage") or {})
    base.update(resp.get("usage") or {})
    out_len = len(out_text) + sum(len(json.dumps(c["arguments"])) for c in calls)
    return {
        "input": int(base.get("input", estimate_tokens(raw_len))),
        "output": int(base.get("output", estimate_tokens(out_len))),
        "cache_read": int(base.get("cache_read", 0)),
        "cache_write": int(base.get("cache_write", 0)),
        "reasoning": int(base.get("reasoning", 0)),
    }


# --------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------

LIMIT_TEXTS = {
    "insufficient_quota": "You exceeded your current quota, please check your plan and billing details. "
                          "(insufficient_quota)",
    "rate_limit": "Rate limit reached: too many requests. Please try again later.",
    "usage_limit": "You have reached your usage limit. Your limit resets later.",
    "forbidden": "Forbidden: your account does not have access to this model.",
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-model/1"

    def log_message(self, fmt, *args):  # quiet
        if self.server.verbose:
            sys.stderr.write("fake-model: " + (fmt % args) + "\n")

    # plumbing --------------------------------------------------------------------------
    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        else:
            raw = self.rfile.read(length) if length else b""
        enc = (self.headers.get("Content-Encoding") or "").lower()
        if enc == "gzip":
            raw = gzip.decompress(raw)
        elif enc == "deflate":
            raw = zlib.decompress(raw)
        elif enc in ("zstd", "br"):
            raise ValueError("request body compressed with %s is not supported" % enc)
        return raw

    def _send_json(self, status, obj, extra_headers=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _sse(self, obj, event=None):
        text = ""
        if event:
            text += "event: %s\n" % event
        text += "data: %s\n\n" % (obj if isinstance(obj, str) else json.dumps(obj))
        self._chunk(text)

    def _end_sse(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _log(self, entry):
        entry.setdefault("ts", time.time())
        self.server.write_log(entry)

    # routes -----------------------------------------------------------------------------
    def do_GET(self):
        path = urlsplit(self.path).path
        if path in ("/health", "/_fake/health"):
            return self._send_json(200, {"ok": True})
        if path.rstrip("/").endswith("/models"):
            self._log({"method": "GET", "path": self.path, "api": "models"})
            models = self.server.script.data.get("models") or ["fake-model"]
            if path.startswith("/v1beta"):
                return self._send_json(200, {"models": [
                    {"name": "models/" + m, "displayName": m, "supportedGenerationMethods":
                     ["generateContent", "streamGenerateContent", "countTokens"]} for m in models]})
            return self._send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake",
                 "type": "model", "display_name": m} for m in models], "models": []})
        self._log({"method": "GET", "path": self.path, "api": "unknown", "status": 404})
        self._send_json(404, {"error": {"message": "not found: " + path}})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        url = urlsplit(self.path)
        path = url.path
        try:
            raw = self._read_body()
            body = json.loads(raw or b"{}")
        except Exception as e:  # noqa: BLE001
            self._log({"method": "POST", "path": self.path, "status": 400, "error": str(e)})
            return self._send_json(400, {"error": {"message": "bad request: %s" % e}})
        self.server.script.reload()
        if path == "/_fake/script":
            self.server.script.set(body)
            return self._send_json(200, {"ok": True})
        if path == "/_fake/limits":
            with self.server.script.lock:
                lim = body if isinstance(body, list) else body.get("limits", [])
                self.server.script.data["limits"] = normalise_script({"limits": lim})["limits"]
                self.server.script.limit_hits = {}
            return self._send_json(200, {"ok": True})
        if path.endswith("/messages/count_tokens"):
            n = estimate_tokens(len(raw))
            self._log({"method": "POST", "path": self.path, "api": "anthropic-count", "input_tokens": n})
            return self._send_json(200, {"input_tokens": n})
        if path.endswith("/chat/completions"):
            return self._model_request("openai-chat", parse_openai_chat(body), raw, body)
        if path.endswith("/responses") or path.endswith("/responses/compact"):
            return self._model_request("openai-responses", parse_openai_responses(body), raw, body,
                                       compact=path.endswith("/compact"))
        if path.endswith("/messages"):
            return self._model_request("anthropic", parse_anthropic(body), raw, body)
        m = re.search(r"/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$", path)
        if m:
            model, method = m.group(1), m.group(2)
            if method == "countTokens":
                n = estimate_tokens(len(raw))
                self._log({"method": "POST", "path": self.path, "api": "gemini-count", "model": model})
                return self._send_json(200, {"totalTokens": n})
            stream = method == "streamGenerateContent"
            conv = parse_gemini(body, model, stream)
            conv.sse = parse_qs(url.query).get("alt", [""])[0] == "sse"
            return self._model_request("gemini", conv, raw, body)
        self._log({"method": "POST", "path": self.path, "api": "unknown", "status": 404,
                   "body": body if self.server.log_bodies else None})
        self._send_json(404, {"error": {"message": "not found: " + path}})

    # the model -------------------------------------------------------------------------
    def _model_request(self, api, conv, raw, body, compact=False):
        script = self.server.script
        entry = {"method": "POST", "path": self.path, "api": api, "model": conv.model,
                 "stream": conv.stream, "assistant_turns": conv.assistant_turns(),
                 "latest_input": conv.latest_input()[-2000:], "tools": conv.tool_names(),
                 "user_agent": self.headers.get("User-Agent")}
        # `watch`: strings looked for anywhere in the request (system text and messages),
        # e.g. a project instructions file's marker; the ones found are logged as `seen`.
        watch = (script.data or {}).get("watch") or []
        if watch:
            everything = conv.system + "\n" + "\n".join(m["text"] for m in conv.messages)
            entry["seen"] = [w for w in watch if w in everything]
        if self.server.log_bodies:
            entry["body"] = body
        limit = script.limit_for(conv.model, api)
        if limit:
            status, err = self._limit_error(api, limit)
            entry.update({"status": status, "limit": limit})
            self._log(entry)
            return self._send_json(status, err, self._limit_headers(limit))
        try:
            if compact:
                resp, info = {"text": "Summary of the conversation so far (fake)."}, {"aux": True}
            else:
                resp, info = script.choose(conv)
            resp = resp or {"text": "OK."}
            calls = build_calls(resp, conv)
        except Exception as e:  # noqa: BLE001 - a broken script must not kill the connection
            entry.update({"status": 500, "server_error": "%s: %s" % (type(e).__name__, e)})
            self._log(entry)
            return self._send_json(500, {"error": {"message": "fake model server: %s" % e}},
                                   {"x-should-retry": "false"})
        entry.update({k: v for k, v in info.items() if v is not None})
        if resp.get("delay"):
            time.sleep(float(resp["delay"]))
        if resp.get("error"):
            err_spec = dict(resp["error"])
            status, err = self._limit_error(api, err_spec)
            entry.update({"status": status, "error": err_spec})
            self._log(entry)
            return self._send_json(status, err, self._limit_headers(err_spec))
        text = resp.get("text") or ""
        if "json" in resp:
            text = json.dumps(resp["json"])
        usage = compute_usage(resp, len(raw), text, calls, script.data)
        entry.update({"status": 200, "response": {"text": text, "calls": [
            {"name": c["name"], "arguments": c["arguments"]} for c in calls]}, "usage": usage})
        unknown = [c["name"] for c in calls if c.get("unknown")]
        if unknown:
            entry["unknown_tools"] = unknown
        self._log(entry)
        model = conv.model or "fake-model"
        try:
            if api == "openai-chat":
                self._reply_chat(conv, model, text, calls, usage)
            elif api == "openai-responses":
                self._reply_responses(conv, model, text, calls, usage, resp)
            elif api == "anthropic":
                self._reply_anthropic(conv, model, text, calls, usage, resp)
            else:
                self._reply_gemini(conv, model, text, calls, usage)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _limit_headers(self, spec):
        """Retry-After when the script gives one; `x-should-retry: false` unless retryable."""
        headers = {}
        if spec.get("retry_after") is not None:
            headers["Retry-After"] = str(spec["retry_after"])
        if spec.get("retry_after_ms") is not None:
            headers["retry-after-ms"] = str(spec["retry_after_ms"])
        if not spec.get("retryable", False):
            headers["x-should-retry"] = "false"
        return headers

    def _limit_error(self, api, spec):
        kind = spec.get("kind", "insufficient_quota")
        status = int(spec.get("status", 403 if kind == "forbidden" else 429))
        msg = spec.get("message") or LIMIT_TEXTS.get(kind, kind)
        if api in ("openai-chat", "openai-responses"):
            code = {"rate_limit": "rate_limit_exceeded", "usage_limit": "usage_limit_reached",
                    "forbidden": "forbidden"}.get(kind, kind)
            typ = {"rate_limit": "requests", "usage_limit": "usage_limit_reached",
                   "forbidden": "invalid_request_error"}.get(kind, kind)
            return status, {"error": {"message": msg, "type": typ, "param": None, "code": code}}
        if api == "anthropic":
            typ = {429: "rate_limit_error", 403: "permission_error", 529: "overloaded_error",
                   401: "authentication_error"}.get(status, "api_error")
            return status, {"type": "error", "error": {"type": typ, "message": msg}}
        gstatus = {429: "RESOURCE_EXHAUSTED", 403: "PERMISSION_DENIED", 401: "UNAUTHENTICATED",
                   503: "UNAVAILABLE"}.get(status, "INTERNAL")
        err = {"code": status, "message": msg, "status": gstatus}
        if status == 429 and kind != "rate_limit":
            err["details"] = [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                 "quotaId": "GenerateRequestsPerDayPerProjectPerModel"}]}]
        return status, {"error": err}

    # OpenAI Chat Completions ------------------------------------------------------------
    def _reply_chat(self, conv, model, text, calls, usage):
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        finish = "tool_calls" if calls else "stop"
        u = {"prompt_tokens": usage["input"] + usage["cache_read"],
             "completion_tokens": usage["output"] + usage["reasoning"],
             "total_tokens": usage["input"] + usage["cache_read"] + usage["output"] + usage["reasoning"],
             "prompt_tokens_details": {"cached_tokens": usage["cache_read"]},
             "completion_tokens_details": {"reasoning_tokens": usage["reasoning"]}}
        tool_calls = [{"id": c["id"], "type": "function",
                       "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                      for c in calls]
        if not conv.stream:
            msg = {"role": "assistant", "content": text or None}
            if tool_calls:
                msg["tool_calls"] = tool_calls
            return self._send_json(200, {"id": cid, "object": "chat.completion", "created": created,
                                         "model": model, "choices": [{"index": 0, "message": msg,
                                                                      "finish_reason": finish}],
                                         "usage": u})
        self._start_sse()

        def chunk(delta, finish_reason=None, **extra):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
            obj.update(extra)
            self._sse(obj)

        chunk({"role": "assistant", "content": ""})
        for piece in _pieces(text):
            chunk({"content": piece})
        for i, tc in enumerate(tool_calls):
            chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                   "function": {"name": tc["function"]["name"], "arguments": ""}}]})
            chunk({"tool_calls": [{"index": i, "function": {"arguments": tc["function"]["arguments"]}}]})
        chunk({}, finish)
        self._sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": u})
        self._sse("[DONE]")
        self._end_sse()

    # OpenAI Responses ---------------------------------------------------------------------
    def _reply_responses(self, conv, model, text, calls, usage, resp):
        rid = "resp_" + uuid.uuid4().hex[:24]
        created = int(time.time())
        items = []
        if text:
            items.append({"type": "message", "id": "msg_" + uuid.uuid4().hex[:24], "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]})
        for c in calls:
            if c["kind"] == "custom":
                inp = c.get("input")
                if inp is None:
                    inp = c["arguments"].get("input", "") if isinstance(c["arguments"], dict) else str(c["arguments"])
                items.append({"type": "custom_tool_call", "id": "ctc_" + c["id"][5:], "call_id": c["id"],
                              "name": c["name"], "input": inp, "status": "completed"})
            elif c["kind"] == "local_shell":
                cmd = c["arguments"].get("command")
                if isinstance(cmd, str):
                    cmd = ["bash", "-lc", cmd]
                items.append({"type": "local_shell_call", "id": "lsh_" + c["id"][5:], "call_id": c["id"],
                              "status": "completed", "action": {"type": "exec", "command": cmd}})
            else:
                item = {"type": "function_call", "id": "fc_" + c["id"][5:], "call_id": c["id"],
                        "name": c["name"], "arguments": json.dumps(c["arguments"]), "status": "completed"}
                if c.get("namespace"):
                    item["namespace"] = c["namespace"]
                items.append(item)
        u = {"input_tokens": usage["input"] + usage["cache_read"],
             "input_tokens_details": {"cached_tokens": usage["cache_read"]},
             "output_tokens": usage["output"] + usage["reasoning"],
             "output_tokens_details": {"reasoning_tokens": usage["reasoning"]},
             "total_tokens": usage["input"] + usage["cache_read"] + usage["output"] + usage["reasoning"]}
        base = {"id": rid, "object": "response", "created_at": created, "model": model,
                "status": "in_progress", "output": [], "usage": None}
        done = dict(base, status="completed", output=items, usage=u)
        if not conv.stream:
            done["output_text"] = text
            return self._send_json(200, done)
        self._start_sse()
        seq = [0]

        def ev(typ, **fields):
            obj = {"type": typ, "sequence_number": seq[0]}
            obj.update(fields)
            seq[0] += 1
            self._sse(obj, event=typ)

        ev("response.created", response=base)
        ev("response.in_progress", response=base)
        for idx, item in enumerate(items):
            if item["type"] == "message":
                ev("response.output_item.added", output_index=idx,
                   item=dict(item, status="in_progress", content=[]))
                ev("response.content_part.added", item_id=item["id"], output_index=idx, content_index=0,
                   part={"type": "output_text", "text": "", "annotations": []})
                for piece in _pieces(text):
                    ev("response.output_text.delta", item_id=item["id"], output_index=idx,
                       content_index=0, delta=piece)
                ev("response.output_text.done", item_id=item["id"], output_index=idx, content_index=0,
                   text=text)
                ev("response.content_part.done", item_id=item["id"], output_index=idx, content_index=0,
                   part=item["content"][0])
            elif item["type"] == "function_call":
                ev("response.output_item.added", output_index=idx,
                   item=dict(item, arguments="", status="in_progress"))
                ev("response.function_call_arguments.delta", item_id=item["id"], output_index=idx,
                   delta=item["arguments"])
                ev("response.function_call_arguments.done", item_id=item["id"], output_index=idx,
                   arguments=item["arguments"])
            else:
                ev("response.output_item.added", output_index=idx, item=item)
            ev("response.output_item.done", output_index=idx, item=item)
        ev("response.completed", response=done)
        self._end_sse()

    # Anthropic Messages -------------------------------------------------------------------
    def _reply_anthropic(self, conv, model, text, calls, usage, resp):
        mid = "msg_" + uuid.uuid4().hex[:24]
        stop = "tool_use" if calls else "end_turn"
        blocks = []
        if text:
            blocks.append({"type": "text", "text": text})
        for c in calls:
            blocks.append({"type": "tool_use", "id": "toolu_" + c["id"][5:], "name": c["name"],
                           "input": c["arguments"]})
        u = {"input_tokens": usage["input"], "output_tokens": usage["output"] + usage["reasoning"],
             "cache_creation_input_tokens": usage["cache_write"],
             "cache_read_input_tokens": usage["cache_read"]}
        if not conv.stream:
            return self._send_json(200, {"id": mid, "type": "message", "role": "assistant", "model": model,
                                         "content": blocks, "stop_reason": stop, "stop_sequence": None,
                                         "usage": u})
        self._start_sse()
        start_usage = dict(u, output_tokens=1)
        self._sse({"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}}, event="message_start")
        for i, blk in enumerate(blocks):
            if blk["type"] == "text":
                self._sse({"type": "content_block_start", "index": i,
                           "content_block": {"type": "text", "text": ""}}, event="content_block_start")
                for piece in _pieces(blk["text"]):
                    self._sse({"type": "content_block_delta", "index": i,
                               "delta": {"type": "text_delta", "text": piece}}, event="content_block_delta")
            else:
                self._sse({"type": "content_block_start", "index": i, "content_block": dict(blk, input={})},
                          event="content_block_start")
                self._sse({"type": "content_block_delta", "index": i,
                           "delta": {"type": "input_json_delta", "partial_json": json.dumps(blk["input"])}},
                          event="content_block_delta")
            self._sse({"type": "content_block_stop", "index": i}, event="content_block_stop")
        self._sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": u}, event="message_delta")
        self._sse({"type": "message_stop"}, event="message_stop")
        self._end_sse()

    # Gemini ---------------------------------------------------------------------------------
    def _reply_gemini(self, conv, model, text, calls, usage):
        parts = []
        if text:
            parts.append({"text": text})
        for c in calls:
            parts.append({"functionCall": {"name": c["name"], "args": c["arguments"], "id": c["id"]}})
        um = {"promptTokenCount": usage["input"] + usage["cache_read"],
              "candidatesTokenCount": usage["output"],
              "totalTokenCount": usage["input"] + usage["cache_read"] + usage["output"] + usage["reasoning"],
              "cachedContentTokenCount": usage["cache_read"]}
        if usage["reasoning"]:
            um["thoughtsTokenCount"] = usage["reasoning"]
        final = {"candidates": [{"content": {"role": "model", "parts": parts or [{"text": ""}]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": um, "modelVersion": model, "responseId": uuid.uuid4().hex[:16]}
        if not conv.stream:
            return self._send_json(200, final)
        if not getattr(conv, "sse", True):
            return self._send_json(200, [final])
        self._start_sse()
        pieces = _pieces(text) if text and not calls else []
        for piece in pieces[:-1]:
            self._sse({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}],
                       "modelVersion": model})
        if pieces:
            final["candidates"][0]["content"]["parts"] = [{"text": pieces[-1]}]
        self._sse(final)
        self._end_sse()


def _pieces(text, size=40):
    """Split text into streaming deltas."""
    if not text:
        return []
    return [text[i:i + size] for i in range(0, len(text), size)]


class FakeModelServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, script, log_path=None, log_bodies=False, verbose=False):
        super().__init__(addr, Handler)
        self.script = script
        self.log_path = log_path
        self.log_bodies = log_bodies
        self.verbose = verbose
        self._log_lock = threading.Lock()

    def write_log(self, entry):
        if not self.log_path:
            return
        line = json.dumps(entry, default=str)
        with self._log_lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def start(script, port=0, log_path=None, log_bodies=False, verbose=False):
    """Start a server in a background thread (for tests). Returns the server; .server_port is the port."""
    if not isinstance(script, Script):
        script = Script(data=script) if isinstance(script, dict) else Script(path=script)
    srv = FakeModelServer(("127.0.0.1", port), script, log_path, log_bodies, verbose)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", help="script JSON file (reloaded when it changes)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the chosen port here once listening")
    ap.add_argument("--log", help="append one JSON line per request here")
    ap.add_argument("--log-bodies", action="store_true", help="include full request bodies in the log")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    script = Script(path=a.script) if a.script else Script(data={})
    srv = FakeModelServer(("127.0.0.1", a.port), script, a.log, a.log_bodies, a.verbose)
    port = srv.server_port
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, a.port_file)
    print("fake-model listening on 127.0.0.1:%d" % port, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main()
