"""PROTOCOL.md §4: a plan's structure warnings as diagnostics on the plan document, published
once the client has fetched or opened the document, and kept current."""

from __future__ import annotations

import asyncio

import pytest
from conftest import (
    COMPLETE_PLAN,
    WARN_PLAN,
    WARN_PLAN_WARNINGS,
    capabilities,
    content,
    declares_utf8,
    diagnostics_of,
    eventually,
    run,
    utf8_or_16,
)
from lsprotocol import types

STORED = WARN_PLAN.strip()
STORED_LINES = STORED.split("\n")


def check_warning_diagnostics(diags, data_warnings, utf8: bool):
    assert [d.message for d in diags] == WARN_PLAN_WARNINGS
    for d, w in zip(diags, data_warnings):
        assert d.source == "forge"
        assert d.severity == types.DiagnosticSeverity.Warning
        if w["line"] is not None:
            line = w["line"]
            assert d.range.start == types.Position(line, 0)
            assert d.range.end == types.Position(line, utf8_or_16(STORED_LINES[line], utf8))
        assert d.range.start.line < len(STORED_LINES)


async def test_published_after_the_client_fetches_the_plan(forge):
    client = forge.client
    written = await run(client, "plan-write", {"content": WARN_PLAN})
    await asyncio.sleep(0.3)
    assert forge.plan_uri not in client.diagnostics, "published before the client saw the document"
    await content(client, forge.plan_uri)
    diags = await eventually(lambda: diagnostics_of(client, forge.plan_uri))
    check_warning_diagnostics(diags, written["data"]["warnings"], declares_utf8(forge.caps))


async def test_kept_current_after_writes_and_edits(forge):
    client = forge.client
    await run(client, "plan-write", {"content": WARN_PLAN})
    await content(client, forge.plan_uri)
    await eventually(lambda: diagnostics_of(client, forge.plan_uri))

    await run(client, "plan-write", {"content": COMPLETE_PLAN})
    await eventually(lambda: diagnostics_of(client, forge.plan_uri) == [])

    await run(client, "plan-edit", {"oldString": "## Conventions\n- snake_case modules\n\n", "newString": ""})
    diags = await eventually(lambda: diagnostics_of(client, forge.plan_uri))
    assert [d.message for d in diags] == ["Plan is missing trailing headings: Conventions."]


async def test_open_buffer_is_checked_as_typed(forge):
    client = forge.client
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=forge.plan_uri, language_id="markdown", version=1, text=STORED)
        )
    )
    diags = await eventually(lambda: diagnostics_of(client, forge.plan_uri))
    assert [d.message for d in diags] == WARN_PLAN_WARNINGS
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=forge.plan_uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=COMPLETE_PLAN)],
        )
    )
    await eventually(lambda: diagnostics_of(client, forge.plan_uri) == [])


async def test_other_clients_plan_is_not_published_unseen(servers, client_caps):
    a = await servers.start(client_caps)
    b = await servers.start(client_caps)
    await run(a.client, "plan-write", {"content": WARN_PLAN})
    await content(a.client, a.plan_uri)
    await eventually(lambda: diagnostics_of(a.client, a.plan_uri))
    await asyncio.sleep(0.3)
    assert a.plan_uri not in b.client.diagnostics
    await content(b.client, a.plan_uri)
    diags = await eventually(lambda: diagnostics_of(b.client, a.plan_uri))
    assert [d.message for d in diags] == WARN_PLAN_WARNINGS


async def test_published_on_the_opened_materialized_copy(servers, workspace):
    s = await servers.start(capabilities("neovim"))
    await run(s.client, "plan-write", {"content": WARN_PLAN})
    copy = workspace.view_dir / "plan" / "session" / f"{s.session_id}.md"
    await eventually(lambda: copy.exists() and copy.read_text() == STORED)
    uri = copy.as_uri()
    s.client.text_document_did_open(
        types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="markdown", version=1, text=STORED))
    )
    diags = await eventually(lambda: diagnostics_of(s.client, uri), timeout=2.0)
    assert [d.message for d in diags] == WARN_PLAN_WARNINGS
