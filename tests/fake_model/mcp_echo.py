#!/usr/bin/env python3
"""A tiny MCP server over stdio (newline-delimited JSON-RPC, Python stdlib only).

It offers one tool, `echo` ({"text": string}), which answers `echo: <text>` and, when the
environment variable ECHO_MCP_LOG names a file, appends one JSON line per call to it, so a
test can prove that the agent really called the tool (and see the environment it ran in).
"""

import json
import os
import sys

TOOLS = [{
    "name": "echo",
    "description": "Echo the given text back (test tool).",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]},
}]

SUPPORTED = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def handle(msg):
    method = msg.get("method")
    msg_id = msg.get("id")
    params = msg.get("params") or {}
    if msg_id is None:          # a notification: nothing to answer
        return
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in SUPPORTED else SUPPORTED[0]
        return reply(msg_id, {"protocolVersion": version,
                              "capabilities": {"tools": {"listChanged": False}},
                              "serverInfo": {"name": "echo-mcp", "version": "1.0.0"}})
    if method == "ping":
        return reply(msg_id, {})
    if method == "tools/list":
        return reply(msg_id, {"tools": TOOLS})
    if method == "tools/call":
        name = params.get("name")
        args = params.get("arguments") or {}
        if name != "echo":
            return reply(msg_id, {"content": [{"type": "text", "text": "unknown tool %s" % name}],
                                  "isError": True})
        text = str(args.get("text", ""))
        log = os.environ.get("ECHO_MCP_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"tool": name, "arguments": args, "cwd": os.getcwd(),
                                    "forge_env": {k: v for k, v in os.environ.items()
                                                  if k.startswith("FORGE_")}}) + "\n")
        return reply(msg_id, {"content": [{"type": "text", "text": "echo: " + text}],
                              "structuredContent": {"echoed": text}, "isError": False})
    if method in ("resources/list", "prompts/list", "resources/templates/list"):
        key = method.split("/")[0] if method != "resources/templates/list" else "resourceTemplates"
        return reply(msg_id, {key: []})
    reply(msg_id, error={"code": -32601, "message": "method not found: %s" % method})


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            reply(None, error={"code": -32700, "message": "parse error"})
            continue
        for m in msg if isinstance(msg, list) else [msg]:
            handle(m)


if __name__ == "__main__":
    main()
