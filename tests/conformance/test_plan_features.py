"""PROTOCOL.md §4: documentSymbol, foldingRange and codeLens on plan documents."""

from __future__ import annotations

import asyncio

from conftest import (
    COMPLETE_PLAN,
    WAIT,
    capabilities,
    content,
    declares_utf8,
    eventually,
    line_of,
    run,
    utf8_or_16,
)
from lsprotocol import types

PLAN = COMPLETE_PLAN.strip()
LINES = PLAN.split("\n")
SECTIONS = [
    # (marker line, heading line, last non-blank line, title)
    (line_of(PLAN, "## Phase 1: Token store") - 1, line_of(PLAN, "## Phase 1: Token store"),
     line_of(PLAN, "- cargo test tokens"), "Phase 1: Token store"),
    (line_of(PLAN, "## Phase 2: Login flow") - 1, line_of(PLAN, "## Phase 2: Login flow"),
     line_of(PLAN, "- cargo test login"), "Phase 2: Login flow"),
]
TRAILING = ["Decisions", "Conventions", "Key Context"]


def doc(uri: str) -> types.TextDocumentIdentifier:
    return types.TextDocumentIdentifier(uri=uri)


async def symbols(client, uri: str):
    return await asyncio.wait_for(client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=doc(uri))), WAIT)


async def folding(client, uri: str):
    return await asyncio.wait_for(client.text_document_folding_range_async(types.FoldingRangeParams(text_document=doc(uri))), WAIT)


async def lenses(client, uri: str):
    return await asyncio.wait_for(client.text_document_code_lens_async(types.CodeLensParams(text_document=doc(uri))), WAIT)


def pos(p: types.Position) -> tuple[int, int]:
    return (p.line, p.character)


def contains(outer: types.Range, inner: types.Range) -> bool:
    return pos(outer.start) <= pos(inner.start) and pos(inner.end) <= pos(outer.end)


async def test_document_symbols_list_preamble_sections_and_trailing_headings(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    result = await symbols(forge.client, forge.plan_uri)
    assert result, "no symbols"
    assert all(isinstance(s, types.DocumentSymbol) for s in result)

    utf8 = declares_utf8(forge.caps)
    previous_end = (-1, 0)
    for s in result:
        # LSP: the selection range must be inside the full range (VS Code rejects it otherwise).
        assert contains(s.range, s.selection_range), s
        assert pos(s.range.start) >= previous_end, "symbols overlap or are out of order"
        previous_end = pos(s.range.end)
        assert s.range.end.line < len(LINES)

    section_symbols = [s for s in result if any(title in s.name for *_, title in SECTIONS)]
    assert len(section_symbols) == 2
    for s, (marker, heading, last, title) in zip(section_symbols, SECTIONS):
        assert s.range.start.line in (marker, heading)
        assert s.range.end.line >= last
        assert s.selection_range.start == types.Position(heading, 0)
        assert s.selection_range.end == types.Position(heading, utf8_or_16(LINES[heading], utf8))

    before = [s for s in result if s.range.end.line < SECTIONS[0][0]]
    after = [s for s in result if s.range.start.line > SECTIONS[1][2]]
    assert before, "no preamble symbol"
    assert [s.name for s in after] == TRAILING


async def test_symbol_positions_use_the_negotiated_encoding(forge):
    heading = "## Phase 1: Café ✓ — naïve"
    text = f"# Plan\n\n<!-- forge-section -->\n{heading}\nbody"
    await run(forge.client, "plan-write", {"content": text})
    result = await symbols(forge.client, forge.plan_uri)
    section = next(s for s in result if "Café" in s.name)
    utf8 = declares_utf8(forge.caps)
    assert section.selection_range.end == types.Position(3, utf8_or_16(heading, utf8))
    # The two encodings differ on this line: the check is meaningful.
    assert utf8_or_16(heading, True) != utf8_or_16(heading, False)


async def test_folding_ranges_fold_each_section(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    result = await folding(forge.client, forge.plan_uri)
    assert result
    for r in result:
        assert r.start_line < r.end_line < len(LINES)
        # Both clients declare lineFoldingOnly.
        assert r.start_character is None and r.end_character is None
    ranges = {(r.start_line, r.end_line) for r in result}
    for marker, heading, last, _ in SECTIONS:
        assert (marker, last) in ranges or (heading, last) in ranges, (marker, heading, last, ranges)


async def test_code_lens_offers_execute_plan(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    result = await lenses(forge.client, forge.plan_uri)
    assert len(result) == 1
    lens = result[0]
    assert lens.command is not None
    assert lens.command.title == "Execute plan"
    assert lens.command.command == "forge.execute-plan"
    (arg,) = lens.command.arguments
    assert arg["plan"] == PLAN
    assert arg["title"] == "add-oauth"


async def test_code_lens_commands_are_advertised(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    commands = set(forge.result.capabilities.execute_command_provider.commands)
    found = await lenses(forge.client, forge.plan_uri)
    assert found, "a stored session plan has at least its Execute plan lens"
    for lens in found:
        assert lens.command.command in commands


async def symbol_names_until(client, uri: str, predicate) -> list[str]:
    """Asks for symbols until ``predicate(names)`` holds (notifications carry no reply to wait for)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        names = [s.name for s in (await symbols(client, uri)) or []]
        if predicate(names) or loop.time() > deadline:
            return names
        await asyncio.sleep(0.02)


async def test_features_follow_the_open_buffer(forge):
    await run(forge.client, "plan-write", {"content": "# Stored\n\nno sections"})
    client, uri = forge.client, forge.plan_uri
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="markdown", version=1, text=PLAN))
    )
    names = await symbol_names_until(client, uri, lambda n: any("Login flow" in x for x in n))
    assert any("Phase 2: Login flow" in n for n in names), names
    assert len(await lenses(client, uri)) == 1

    one_section = "# Plan\n\n<!-- forge-section -->\n## Phase 1: Only\nbody"
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=one_section)],
        )
    )
    names = await symbol_names_until(client, uri, lambda n: any("Phase 1: Only" in x for x in n))
    assert any("Phase 1: Only" in n for n in names) and not any("Login flow" in n for n in names), names

    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=doc(uri)))
    names = await symbol_names_until(client, uri, lambda n: not any("Phase" in x for x in n))
    assert not any("Phase" in n for n in names), names
    # Editing the buffer never changed the stored plan.
    assert await content(client, uri) == "# Stored\n\nno sections"


async def test_features_on_the_materialized_copy(servers, workspace):
    s = await servers.start(capabilities("neovim"))
    await run(s.client, "plan-write", {"content": COMPLETE_PLAN})
    copy = workspace.view_dir / "plan" / "session" / f"{s.session_id}.md"
    await eventually(lambda: copy.exists() and copy.read_text() == PLAN)
    file_uri = copy.as_uri()
    assert await symbols(s.client, file_uri) == await symbols(s.client, s.plan_uri)
    assert await folding(s.client, file_uri) == await folding(s.client, s.plan_uri)
    assert [lens.command.title for lens in await lenses(s.client, file_uri)] == ["Execute plan"]


async def test_no_plan_features_on_other_documents(forge, workspace):
    readme = (workspace.repo / "README.md").as_uri()
    assert not await symbols(forge.client, readme)
    assert not await folding(forge.client, readme)
    assert not await lenses(forge.client, readme)
    assert not await lenses(forge.client, "forge://index.md")
