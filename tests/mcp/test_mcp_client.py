"""`forge-lsp mcp` driven by a third-party client: the official MCP Python SDK (`mcp` on PyPI,
pinned in tests/requirements.txt), through its own stdio transport (`stdio_client`) and
`ClientSession`, exactly as an agent built on that SDK would use it (docs/mcp.md).

Each test gets a temporary git repository (the project), data directory and XDG/HOME
directories, and starts ``$FORGE_LSP_BIN --data-dir DATA mcp [flags]`` in the repository.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_HANDSHAKE_VERSION

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

PLAN = "# Plan: MCP client\n\n## Objective\nShow the SDK.\n\n## Phase 1: write\nWrite it.\n"


def server_binary() -> str:
    path = os.environ.get("FORGE_LSP_BIN") or str(REPO_ROOT / "target/debug/forge-lsp")
    if not os.access(path, os.X_OK):
        pytest.exit(
            f"forge-lsp binary not found at {path}: build it (cargo build --bins) and set FORGE_LSP_BIN",
            returncode=4,
        )
    return path


def git(cwd: pathlib.Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "Forge Test",
        "GIT_AUTHOR_EMAIL": "test@forge.invalid",
        "GIT_COMMITTER_NAME": "Forge Test",
        "GIT_COMMITTER_EMAIL": "test@forge.invalid",
    }
    out = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


class Env:
    """A project, data directory and private XDG/HOME directories under tmp_path."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        self.repo = tmp / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q")
        (self.repo / "README.md").write_text("# MCP client test\n")
        git(self.repo, "add", "README.md")
        git(self.repo, "commit", "-q", "-m", "initial commit")
        self.data = tmp / "data"
        self.env = {}
        for name, var in [("config", "XDG_CONFIG_HOME"), ("share", "XDG_DATA_HOME"), ("home", "HOME")]:
            (tmp / name).mkdir()
            self.env[var] = str(tmp / name)
        run = tmp / "run"
        run.mkdir(mode=0o700)
        self.env["XDG_RUNTIME_DIR"] = str(run)
        self.env["FORGE_LOG"] = "warn"

    def params(self, *flags: str, cwd: pathlib.Path | None = None, env: dict[str, str] | None = None):
        return StdioServerParameters(
            command=server_binary(),
            args=["--data-dir", str(self.data), "mcp", *flags],
            env={**self.env, **(env or {})},
            cwd=str(cwd or self.repo),
        )

    @asynccontextmanager
    async def session(self, *flags: str, **kw: Any):
        with open(self.tmp / "server-stderr.log", "a") as errlog:
            async with stdio_client(self.params(*flags, **kw), errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    yield session


@pytest.fixture
def env(tmp_path: pathlib.Path) -> Env:
    return Env(tmp_path)


def text_of(result) -> str:
    assert len(result.content) == 1, result
    assert result.content[0].type == "text", result
    return result.content[0].text


async def test_initialize_and_list_tools(env: Env):
    async with env.session() as s:
        init = await s.initialize()
        assert init.server_info.name == "forge-lsp"
        assert init.server_info.version
        # The SDK asks for its newest handshake version (2025-11-25 in 2.3.0); the server agrees.
        assert init.protocol_version == LATEST_HANDSHAKE_VERSION >= "2025-06-18", init.protocol_version
        assert init.capabilities.tools is not None

        listed = await s.list_tools()
        names = [t.name for t in listed.tools]
        for name in ["plan-read", "plan-write", "plan-edit", "review-write", "review-read", "review-delete",
                     "execute-plan", "loop-status", "tools"]:
            assert name in names, names
        # Exactly the offers of forge.tools (the registry), each with its schema.
        offers = (await s.call_tool("tools", {})).structured_content["tools"]
        assert names == [o["name"] for o in offers]
        for tool, offer in zip(listed.tools, offers):
            assert tool.description == offer["description"]
            assert tool.input_schema == offer["inputSchema"]
            assert tool.input_schema["type"] == "object"


async def test_reviews_and_plans_round_trip(env: Env):
    async with env.session() as s:
        await s.initialize()

        w = await s.call_tool(
            "review-write",
            {"file": "README.md", "line": 1, "severity": "bug", "description": "the title says nothing"},
        )
        assert not w.is_error, w
        assert text_of(w) == "Stored review finding at README.md:1 (bug)"
        finding = w.structured_content["finding"]
        assert finding["file"] == "README.md" and finding["line"] == 1 and finding["severity"] == "bug"

        r = await s.call_tool("review-read", {})
        assert not r.is_error, r
        assert "the title says nothing" in text_of(r)
        assert [f["id"] for f in r.structured_content["findings"]] == [finding["id"]]

        p = await s.call_tool("plan-write", {"content": PLAN})
        assert not p.is_error, p
        assert text_of(p).startswith("Plan stored: 7 lines")
        session_id = p.structured_content["sessionId"]
        assert session_id.startswith("ses_")

        # The same process is one session: the plan reads back.
        back = await s.call_tool("plan-read", {})
        assert not back.is_error, back
        assert "6: ## Phase 1: write" in text_of(back)
        assert back.structured_content["totalLines"] == 7
        assert back.structured_content["uri"] == f"forge://plan/session/{session_id}.md"


async def test_failures_are_tool_errors(env: Env):
    async with env.session() as s:
        await s.initialize()
        # Nothing to edit: a failed tool, reported in the result for the model to read.
        e = await s.call_tool("plan-edit", {"oldString": "absent", "newString": "x"})
        assert e.is_error is True
        assert text_of(e)
        assert e.structured_content["error"]["kind"] in ("not_found", "invalid")

        # Input the schema rejects names the field.
        e = await s.call_tool("review-write", {"file": "README.md", "line": "one", "severity": "bug",
                                               "description": "d"})
        assert e.is_error is True
        assert "line" in text_of(e)
        assert e.structured_content["error"] == {"code": -32602, "kind": "invalid_params"}

        # An unknown tool is a protocol error (MCP: -32602), and the session goes on.
        with pytest.raises(MCPError) as err:
            await s.call_tool("no-such-tool", {})
        assert err.value.code == -32602
        assert "no-such-tool" in err.value.message
        ok = await s.call_tool("review-read", {})
        assert not ok.is_error


async def test_identity_from_flags(env: Env):
    # An auditor writes findings but may not author plans (a denial naming the rule).
    async with env.session("--agent", "auditor") as s:
        await s.initialize()
        w = await s.call_tool("review-write", {"file": "README.md", "line": 1, "severity": "warning",
                                               "description": "from the auditor"})
        assert not w.is_error, w
        d = await s.call_tool("plan-write", {"content": PLAN})
        assert d.is_error is True
        assert d.structured_content["error"] == {"code": 1001, "kind": "denied"}
        assert "forge.plan-write" in text_of(d)

    # A user reads the auditor's finding from another process: one database.
    async with env.session("--session", "ses_01JSDKREADER0000000000000") as s:
        await s.initialize()
        r = await s.call_tool("review-read", {})
        assert "from the auditor" in text_of(r)


def test_outside_a_repository_exits_2(env: Env, tmp_path: pathlib.Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    out = subprocess.run(
        [server_binary(), "--data-dir", str(env.data), "mcp"],
        cwd=plain,
        env={"PATH": os.environ.get("PATH", ""), **env.env},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    assert "not inside a git repository" in out.stderr and "--project" in out.stderr
    assert out.stdout == ""


@asynccontextmanager
async def listen_server(env: Env):
    """A `forge-lsp serve --listen unix:` server of the env's data directory, once it
    listens: yields its socket and process, and stops it at the end."""
    import anyio

    sock = env.tmp / "s" / "forge.sock"
    log = env.tmp / "serve.log"
    with open(log, "w") as err:  # a file, never a pipe nobody drains
        server = subprocess.Popen(
            [server_binary(), "--data-dir", str(env.data), "serve", "--listen", f"unix:{sock}"],
            cwd=env.repo,
            env={"PATH": os.environ.get("PATH", ""), **env.env},
            stderr=err,
        )
    try:
        with anyio.fail_after(30):
            while "listening on unix:" not in log.read_text():
                assert server.poll() is None, log.read_text()
                await anyio.sleep(0.05)
        yield sock, server
    finally:
        server.terminate()
        server.wait(timeout=10)


def forget_servers(env: Env) -> None:
    """Empties the database's `servers` table, as if no server had registered."""
    import sqlite3

    db = sqlite3.connect(env.data / "forge.db")
    db.execute("DELETE FROM servers")
    db.commit()
    db.close()


def hanging_tool(env: Env) -> pathlib.Path:
    """A user plugin tool `slow__Hang` that writes its pid and never ends; returns the pid file."""
    tools = env.tmp / "config" / "forge-lsp" / "plugins" / "slow" / "tools"
    tools.mkdir(parents=True)
    script = tools / "Hang"
    script.write_text('#!/bin/sh\necho $$ > "$FORGE_PLUGIN_DIR/pid"\nsleep 60 &\nwait\n')
    script.chmod(0o755)
    (tools / "Hang.json").write_text('{"description": "Never ends.", "inputSchema": {}}')
    return tools.parent / "pid"


@pytest.mark.parametrize("through_server", [False, True], ids=["in-process", "through-a-server"])
async def test_an_abandoned_call_stops_the_plugin_tool(env: Env, through_server: bool):
    """The SDK sends `notifications/cancelled` when its caller abandons a request (here: the
    task calling the tool is cancelled). The plugin tool's process is then killed, whether
    `forge-lsp mcp` runs it itself or a running server does, and the session goes on."""
    import anyio

    pid_file = hanging_tool(env)
    extra: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        if through_server:
            sock, _ = await stack.enter_async_context(listen_server(env))
            extra["FORGE_LSP_SOCKET"] = str(sock)
        async with env.session(env=extra) as s:
            await s.initialize()
            assert "slow__Hang" in [t.name for t in (await s.list_tools()).tools]
            pid = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(s.call_tool, "slow__Hang", {})
                with anyio.fail_after(30):
                    while not (pid_file.exists() and pid_file.read_text().strip()):
                        await anyio.sleep(0.05)
                pid = pid_file.read_text().strip()
                tg.cancel_scope.cancel()
            with anyio.fail_after(10):
                while pathlib.Path(f"/proc/{pid}").exists():
                    await anyio.sleep(0.05)
            r = await s.call_tool("review-read", {})
            assert not r.is_error, r


async def test_a_running_server_is_found_by_its_socket_file(env: Env):
    """Without FORGE_LSP_SOCKET, `forge-lsp mcp` finds the project's running server by the
    socket file the server wrote (`<data dir>/servers/<project id>`), without the database's
    `servers` table: with the table emptied, loop control (which only a server runs) still
    reaches the server (which answers that no loop runs). Without the file it would run
    in-process and be refused."""
    async with listen_server(env) as (_, server):
        async with env.session() as s:
            await s.initialize()
            # The first call finds the server in the table (its row for any project); the
            # server then registers this project, which writes the project's socket file.
            r = await s.call_tool("task-status", {})
            assert text_of(r) == "No active loops.", text_of(r)
            project = git(env.repo, "rev-list", "--max-parents=0", "HEAD")
            named = (env.data / "servers" / project).read_text()
            assert named.endswith(f"/{server.pid}/forge.sock\n"), named
            forget_servers(env)
            r = await s.call_tool("task-status", {})
            assert text_of(r) == "No active loops.", text_of(r)
            # The control: without the file (and the rows the server wrote again) the call
            # has no server to go to.
            forget_servers(env)
            (env.data / "servers" / project).unlink()
            r = await s.call_tool("task-status", {})
            assert r.is_error and "needs a running forge-lsp server" in text_of(r), text_of(r)
