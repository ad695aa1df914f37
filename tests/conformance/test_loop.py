"""PROTOCOL.md §4 and §7: one full loop driven from a third-party client.

The project's agent is a scripted one (``tests/agents/``, configured in
``<repo>/.forge/config.toml``, sandbox off); it calls back with ``forge-lsp call``, so the
server's ``PATH`` starts with the directory of ``$FORGE_LSP_BIN``. The client declares
``window.workDoneProgress`` (both recorded clients do) and, in the VS Code variant,
``workspace.textDocumentContent``. Checked: the ``forge/loopStatus`` notifications (their
transitions), the loop's work-done progress (begin, reports, end), the ``window/showMessage``
to the session that started the loop, the loop's virtual documents (content, refresh or
materialized copy, code lenses), ``forge.loop-status`` and the branch's checkpoint commits;
and cancelling a running loop through ``window/workDoneProgress/cancel``."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import pathlib
import re
import subprocess
from typing import Any

import pytest
from conftest import (
    COMPLETE_PLAN,
    REPO_ROOT,
    WAIT,
    capabilities,
    content,
    declares_text_document_content,
    eventually,
    line_of,
    run,
    server_binary,
)
from lsprotocol import types
from test_documents import as_copy_links

# A whole loop (four agent turns, each a process calling back twice) on a loaded machine.
LOOP_WAIT = 60.0

AGENTS = REPO_ROOT / "tests" / "agents"

VARIANTS = {
    "vscode+textDocumentContent": ("visual-studio-code", True),
    "neovim": ("neovim", None),
}

SECTION_TITLES = ["Phase 1: Token store", "Phase 2: Login flow"]
PROGRESS_MESSAGE = re.compile(r"^section [12]/2 · (coding|auditing|post_action) · iteration \d+$")


@pytest.fixture(params=list(VARIANTS))
def variant_caps(request) -> types.ClientCapabilities:
    name, tdc = VARIANTS[request.param]
    return capabilities(name, text_document_content=tdc)


def configure_agent(workspace, script: pathlib.Path, env: dict[str, str] | None = None) -> None:
    """Makes ``script`` the project's agent (before the server starts): the project config,
    ``forge-lsp`` first on the server's PATH (the agent calls back with ``forge-lsp call``),
    and extra environment the agent inherits."""
    config = workspace.repo / ".forge" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    # A JSON string is a valid TOML basic string.
    config.write_text(f'[agent]\ncommand = [{json.dumps(str(script))}, "{{session}}"]\n\n[sandbox]\nenabled = false\n')
    bin_dir = os.path.dirname(os.path.abspath(server_binary()))
    workspace.env["PATH"] = os.pathsep.join([bin_dir, workspace.env.get("PATH", "/usr/bin:/bin")])
    workspace.env.update(env or {})


def record_loop_status(session) -> list[dict[str, Any]]:
    """Every ``forge/loopStatus`` the client receives (params as plain JSON), in order.

    pygls hands the params of a method it does not know to the handler as namedtuples,
    renaming fields that are Python keywords (``lastTransition.from`` becomes ``_2``), so
    the params are taken from the parsed message before pygls structures it."""
    received: list[dict[str, Any]] = []
    protocol = session.client.protocol
    structure = protocol.structure_message

    def capture(data):
        # json.loads' object_hook: nested objects arrive first as plain dicts.
        if data.get("method") == "forge/loopStatus" and "id" not in data:
            received.append(copy.deepcopy(data.get("params")))
        return structure(data)

    protocol.structure_message = capture

    @session.client.feature("forge/loopStatus")
    def _loop_status(params):
        pass

    return received


def of_loop(statuses: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in statuses if s["loopName"] == name]


def is_subsequence(wanted: list, seq: list) -> bool:
    it = iter(seq)
    return all(any(w == x for x in it) for w in wanted)


def describe(statuses: list[dict[str, Any]]) -> str:
    lines = []
    for s in statuses:
        t = s.get("lastTransition") or {}
        lines.append(
            f"  {s['status']} {s['phase']} s={s.get('sectionIndex')} it={s['iteration']} "
            f"last={t.get('kind')} {t.get('event')} {t.get('from')}->{t.get('to')}"
        )
    return "\n".join(lines)


def progress_of(client, name: str) -> tuple[str, list[Any]]:
    """The loop's progress token (``window/workDoneProgress/create`` answered with null by
    pytest-lsp's default handler) and the values sent on it."""
    tokens = [t for t in client.progress_reports if isinstance(t, str) and name in t]
    assert len(tokens) == 1, f"expected one progress token for {name}: {list(client.progress_reports)}"
    return tokens[0], client.progress_reports[tokens[0]]


def git_subjects(workspace, ref: str) -> list[str]:
    out = subprocess.run(
        ["git", "log", "--format=%s", ref],
        cwd=workspace.repo,
        env=workspace.env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.splitlines()


async def section_lenses(client, uri: str) -> list[tuple[int, str | None]]:
    """``textDocument/codeLens`` on ``uri``: (line, title) of each lens, by line."""
    lenses = await asyncio.wait_for(
        client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))),
        WAIT,
    )
    assert lenses is not None, uri
    return sorted((lens.range.start.line, lens.command.title if lens.command else None) for lens in lenses)


async def execute(client, plan: str) -> str:
    out = await run(client, "execute-plan", {"title": "Add OAuth", "plan": plan})
    assert "Loop activated!" in out["text"], out["text"]
    return out["data"]["loopName"]


async def test_a_two_section_loop_runs_to_completion(servers, workspace, variant_caps):
    configure_agent(workspace, AGENTS / "simple.sh", {"FORGE_AGENT_LOG": str(workspace.root / "agent.log")})
    s = await servers.start(variant_caps)
    client = s.client
    statuses = record_loop_status(s)

    name = await execute(client, COMPLETE_PLAN)
    try:
        end = await eventually(
            lambda: next((x for x in of_loop(statuses, name) if x["status"] != "running"), None), timeout=LOOP_WAIT
        )
    except AssertionError:
        log = (workspace.root / "agent.log").read_text() if (workspace.root / "agent.log").exists() else ""
        raise AssertionError(f"the loop did not end:\n{describe(of_loop(statuses, name))}\nagent log:\n{log}")
    mine = of_loop(statuses, name)
    assert end["status"] == "completed", describe(mine)
    assert end["terminationReason"] == "completed", end
    assert (end["sectionIndex"], end["totalSections"]) == (1, 2), end
    assert end["branch"] == f"forge/{name}", end
    assert end["completedAt"] is not None, end

    # forge/loopStatus: every transition of the loop, in order.
    seen = [(x["phase"], x.get("sectionIndex"), (x.get("lastTransition") or {}).get("kind")) for x in mine]
    expected = [
        ("auditing", 0, "rotate"),
        ("coding", 1, "advance-section"),
        ("auditing", 1, "rotate"),
        ("auditing", 1, "terminate"),
    ]
    assert is_subsequence(expected, seen), describe(mine)
    rotate = next(x["lastTransition"] for x in mine if (x.get("lastTransition") or {}).get("kind") == "rotate")
    assert (rotate["from"], rotate["to"], rotate["event"]) == ("coding", "auditing", "coder-handoff"), rotate
    first_end = next(i for i, x in enumerate(mine) if x["status"] != "running")
    assert all(x["status"] == "completed" for x in mine[first_end:]), describe(mine)

    # Work-done progress: begin, reports, end.
    token, values = progress_of(client, name)
    await eventually(lambda: any(isinstance(v, types.WorkDoneProgressEnd) for v in values), timeout=WAIT)
    begin, *reports, last = values
    assert isinstance(begin, types.WorkDoneProgressBegin), values
    assert begin.title == f"Forge: {name}"
    assert begin.cancellable is True
    assert begin.message and PROGRESS_MESSAGE.match(begin.message), begin.message
    assert reports and all(isinstance(r, types.WorkDoneProgressReport) for r in reports), values
    assert all(r.message and PROGRESS_MESSAGE.match(r.message) for r in reports), [r.message for r in reports]
    assert any(r.message.startswith("section 2/2 ·") for r in reports), [r.message for r in reports]
    percentages = [v.percentage for v in [begin, *reports] if v.percentage is not None]
    assert percentages == sorted(percentages) and all(0 <= p <= 100 for p in percentages), percentages
    assert isinstance(last, types.WorkDoneProgressEnd), values
    assert last.message and last.message.startswith("completed"), last.message

    # The session that started the loop is told it ended.
    shown = await eventually(lambda: [m for m in client.messages if name in m.message], timeout=WAIT)
    assert [(m.type, m.message) for m in shown] == [
        (types.MessageType.Info, f"Forge: loop {name} completed.")
    ], shown

    # The loop's documents.
    status_uri = f"forge://loop/{name}/status.md"
    plan_uri = f"forge://plan/loop/{name}.md"
    section_uris = [f"forge://loop/{name}/section/{k}.md" for k in range(2)]
    assert "Status: completed" in await content(client, status_uri)
    for k, uri in enumerate(section_uris):
        text = await content(client, uri)
        assert SECTION_TITLES[k] in text, text
        assert "completed" in text, text
    assert await content(client, plan_uri) == COMPLETE_PLAN
    if declares_text_document_content(s.caps):
        await eventually(lambda: {status_uri, plan_uri, *section_uris} <= set(s.refreshes), timeout=WAIT)
        assert not workspace.view_dir.exists(), "copies materialized for a client that reads forge: URIs"
    else:
        # docs/architecture.md: the index and the plans are materialized (not the loop views).
        copy_of_plan = workspace.view_dir / "plan" / "loop" / f"{name}.md"
        await eventually(lambda: copy_of_plan.exists(), timeout=WAIT)
        assert copy_of_plan.read_text() == COMPLETE_PLAN
        assert s.refreshes == [], "refresh sent to a client that did not declare workspace.textDocumentContent"

    lens_uris = [plan_uri]
    if not declares_text_document_content(s.caps):
        lens_uris.append(copy_of_plan.as_uri())  # lenses also work on the materialized copy
    for uri in lens_uris:
        assert await section_lenses(client, uri) == [
            (line_of(COMPLETE_PLAN, f"## {SECTION_TITLES[0]}"), "Section 1/2 · completed"),
            (line_of(COMPLETE_PLAN, f"## {SECTION_TITLES[1]}"), "Section 2/2 · completed"),
        ], uri

    out = await run(client, "loop-status", {"name": name})
    assert "Loop Status (Inactive)" in out["text"], out["text"]

    # One checkpoint commit per section on the loop's branch.
    subjects = git_subjects(workspace, f"forge/{name}")
    sections = [x for x in subjects if re.match(r"section \d+: ", x)]
    assert sections == [f"section 2: {SECTION_TITLES[1]}", f"section 1: {SECTION_TITLES[0]}"], subjects
    assert subjects[-1] == "initial commit", subjects


async def test_cancelling_the_progress_cancels_the_loop(servers, workspace):
    state = workspace.root / "agent-state"
    state.mkdir()
    configure_agent(
        workspace, AGENTS / "scenario.sh", {"FORGE_TEST_STATE": str(state), "FORGE_TEST_SCENARIO": "block"}
    )
    s = await servers.start(capabilities("visual-studio-code", text_document_content=True))
    client = s.client
    statuses = record_loop_status(s)
    try:
        name = await execute(client, COMPLETE_PLAN)
        # The first auditor records a clean handoff, then waits for the file `release`.
        await eventually(lambda: (state / "auditor.pid").exists(), timeout=LOOP_WAIT)
        await eventually(
            lambda: any(x["phase"] == "auditing" for x in of_loop(statuses, name)), timeout=LOOP_WAIT
        )
        token, values = progress_of(client, name)
        assert isinstance(values[0], types.WorkDoneProgressBegin) and values[0].cancellable is True, values

        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))

        end = await eventually(
            lambda: next((x for x in of_loop(statuses, name) if x["status"] != "running"), None), timeout=LOOP_WAIT
        )
        mine = of_loop(statuses, name)
        assert end["status"] == "cancelled", describe(mine)
        assert end["terminationReason"] == "cancelled", end
        assert (end["phase"], end["sectionIndex"]) == ("auditing", 0), end
        assert (end["lastTransition"] or {}).get("kind") == "terminate", end

        await eventually(lambda: isinstance(values[-1], types.WorkDoneProgressEnd), timeout=WAIT)
        assert values[-1].message and values[-1].message.startswith("cancelled"), values[-1]
        shown = await eventually(lambda: [m for m in client.messages if name in m.message], timeout=WAIT)
        assert [(m.type, m.message) for m in shown] == [
            (types.MessageType.Info, f"Forge: loop {name} was cancelled.")
        ], shown
        assert "Status: cancelled" in await content(client, f"forge://loop/{name}/status.md")
    finally:
        (state / "release").write_text("go\n")  # never leave the auditor waiting


async def test_the_materialized_index_follows_the_loop(servers, workspace):
    configure_agent(workspace, AGENTS / "simple.sh")
    s = await servers.start(capabilities("neovim"))
    client = s.client
    statuses = record_loop_status(s)
    name = await execute(client, COMPLETE_PLAN)
    end = await eventually(
        lambda: next((x for x in of_loop(statuses, name) if x["status"] != "running"), None), timeout=LOOP_WAIT
    )
    assert end["status"] == "completed", describe(of_loop(statuses, name))
    live = await content(client, "forge://index.md")
    assert f"[{name}](forge://loop/{name}/status.md) · completed" in live, live
    index = workspace.view_dir / "index.md"
    # Short wait: the copy is written right after the change is announced.
    await eventually(lambda: index.exists() and index.read_text() == as_copy_links(live, workspace), timeout=5.0)
