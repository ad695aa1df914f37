#!/usr/bin/env python3
"""Measures `forge-lsp mcp` through the binary (docs/mcp.md, "Speed"): spawn + initialize,
tools/list, one tools/call (plan-read, in-process on a small database), then stdin closed.

Usage: tests/mcp/measure.py [BINARY] [RUNS]   (default target/debug/forge-lsp, 20 runs)
Python standard library only; a temporary repository and data directory, removed after.
"""

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

MESSAGES = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "measure", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
     "params": {"name": "plan-read", "arguments": {"recent": True}}},
]
STEPS = ["spawn + initialize", "tools/list", "tools/call plan-read", "all three (to last reply)", "until exit"]


def one(binary: str, data: str, cwd: str, env: dict) -> tuple:
    t0 = time.perf_counter()
    p = subprocess.Popen([binary, "--data-dir", data, "mcp"], cwd=cwd, env=env, text=True, bufsize=1,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    at = {}
    for m in MESSAGES:
        p.stdin.write(json.dumps(m) + "\n")
        p.stdin.flush()
        if "id" in m:
            reply = json.loads(p.stdout.readline())
            assert reply.get("id") == m["id"] and "error" not in reply, reply
            assert not reply["result"].get("isError"), reply
            at[m["id"]] = time.perf_counter() - t0
    p.stdin.close()
    p.wait()
    return at[1], at[2] - at[1], at[3] - at[2], at[3], time.perf_counter() - t0


def main() -> None:
    root = pathlib.Path(__file__).resolve().parents[2]
    binary = sys.argv[1] if len(sys.argv) > 1 else str(root / "target/debug/forge-lsp")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with tempfile.TemporaryDirectory() as tmp:
        repo = pathlib.Path(tmp, "repo")
        repo.mkdir()
        git = ["git", "-c", "user.name=m", "-c", "user.email=m@forge.invalid", "-c", "commit.gpgsign=false"]
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "init"], cwd=repo, check=True)
        env = {**os.environ, "XDG_CONFIG_HOME": str(pathlib.Path(tmp, "config")), "FORGE_LOG": "warn"}
        for k in ["FORGE_LSP_SOCKET", "FORGE_SESSION_ID", "FORGE_SESSION_TOKEN", "FORGE_DATA_DIR"]:
            env.pop(k, None)
        data = str(pathlib.Path(tmp, "data"))
        one(binary, data, str(repo), env)  # creates the database; not counted
        results = [one(binary, data, str(repo), env) for _ in range(runs)]
    print(f"{binary}, {runs} runs: median (min-max) in ms")
    for i, name in enumerate(STEPS):
        xs = sorted(r[i] * 1000 for r in results)
        print(f"  {name:28s} {statistics.median(xs):7.2f}  ({xs[0]:.2f}-{xs[-1]:.2f})")


if __name__ == "__main__":
    main()
