"""PROTOCOL.md §4: `forge:` virtual documents, their refresh, and materialized copies.

Neither recorded capability set of pytest-lsp declares `workspace.textDocumentContent`
(VS Code 1.65.2 and Neovim predate LSP 3.18), so both get materialized copies by default.
A current VS Code (vscode-languageclient 10+) declares it: the variant
`visual-studio-code+textDocumentContent` adds the declaration to the VS Code capabilities and
must get `workspace/textDocumentContent/refresh` instead of copies.
"""

from __future__ import annotations

import asyncio
import re
import stat
import subprocess

import pytest
from conftest import (
    COMPLETE_PLAN,
    WAIT,
    capabilities,
    content,
    declares_text_document_content,
    diagnostics_of,
    eventually,
    expect_error,
    run,
)

INDEX = "forge://index.md"

VARIANTS = {
    "visual-studio-code": ("visual-studio-code", None),
    "visual-studio-code+textDocumentContent": ("visual-studio-code", True),
    "neovim": ("neovim", None),
}


@pytest.fixture(params=list(VARIANTS))
def variant_caps(request):
    name, tdc = VARIANTS[request.param]
    return capabilities(name, text_document_content=tdc)


def link_to(uri: str) -> re.Pattern:
    return re.compile(r"\[[^\]]+\]\(" + re.escape(uri) + r"\)")


def view_file(workspace, uri: str):
    return workspace.view_dir / uri.removeprefix("forge://")


def as_copy_links(text: str, workspace) -> str:
    """A document as its read-only copy shows it: links point at the other copies
    (PROTOCOL.md 10.2), not at ``forge://`` URIs."""
    return re.sub(r"\]\(forge://([^)]*)\)", lambda m: f"]({workspace.view_dir.resolve() / m.group(1)})", text)


def read_or_none(path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


# --- workspace/textDocumentContent ----------------------------------------------------------


async def test_session_plan_document(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    assert await content(forge.client, forge.plan_uri) == COMPLETE_PLAN.strip()


async def test_session_id_from_initialization_options_names_the_document(servers, client_caps):
    s = await servers.start(client_caps, forge={"session": "ses_doc_custom"})
    await run(s.client, "plan-write", {"content": "# Custom\n\nx"})
    assert await content(s.client, "forge://plan/session/ses_doc_custom.md") == "# Custom\n\nx"


async def test_index_links_the_projects_plans(servers, client_caps, workspace):
    a = await servers.start(client_caps)
    b = await servers.start(client_caps)
    empty = await content(a.client, INDEX)
    assert workspace.root_commit in empty.split("\n")[0]
    assert "forge://plan/" not in empty
    await run(a.client, "plan-write", {"content": "# Plan A\n\nx"})
    await run(b.client, "plan-write", {"content": "# Plan B\n\ny"})
    index = await content(a.client, INDEX)
    assert link_to(a.plan_uri).search(index), index
    assert link_to(b.plan_uri).search(index), index


UNKNOWN_URIS = [
    "forge://nope.md",
    "forge://plan/session/x.txt",
    "forge://plan/other/x.md",
    "forge://plan/session/ses_nobody_has_this.md",
    "forge://plan/loop/no-such-loop.md",
    "forge://loop/no-such-loop/status.md",
    "forge://loop/no-such-loop/section/0.md",
    "file:///etc/hostname",
]


async def test_unknown_document_is_not_found(forge):
    for uri in UNKNOWN_URIS:
        message = await expect_error(content(forge.client, uri), 1002, "not_found")
        assert message, uri


async def test_own_plan_before_writing_is_not_found(forge):
    await expect_error(content(forge.client, forge.plan_uri), 1002, "not_found")


# --- announcements: refresh or materialized copies -------------------------------------------


async def test_plan_write_is_announced(servers, variant_caps, workspace):
    s = await servers.start(variant_caps)
    await run(s.client, "plan-write", {"content": COMPLETE_PLAN})
    if declares_text_document_content(variant_caps):
        await eventually(lambda: s.plan_uri in s.refreshes and INDEX in s.refreshes)
        await asyncio.sleep(0.3)
        assert not workspace.view_dir.exists(), "copies materialized for a client that reads forge: URIs"
    else:
        plan_copy = view_file(workspace, s.plan_uri)
        await eventually(lambda: read_or_none(plan_copy) == COMPLETE_PLAN.strip())
        # The copy of the index links the plan's copy, which such a client can open.
        copy_link = link_to(str(view_file(workspace, s.plan_uri).resolve()))
        await eventually(lambda: copy_link.search(read_or_none(view_file(workspace, INDEX)) or ""))
        await asyncio.sleep(0.3)
        assert s.refreshes == [], "refresh sent to a client that did not declare workspace.textDocumentContent"


async def test_plan_edit_is_announced(servers, variant_caps, workspace):
    s = await servers.start(variant_caps)
    await run(s.client, "plan-write", {"content": "# Plan\n\nold text"})
    if declares_text_document_content(variant_caps):
        await eventually(lambda: INDEX in s.refreshes)
        s.refreshes.clear()
        await run(s.client, "plan-edit", {"oldString": "old", "newString": "new"})
        await eventually(lambda: s.plan_uri in s.refreshes)
    else:
        plan_copy = view_file(workspace, s.plan_uri)
        await eventually(lambda: read_or_none(plan_copy) == "# Plan\n\nold text")
        await run(s.client, "plan-edit", {"oldString": "old", "newString": "new"})
        await eventually(lambda: read_or_none(plan_copy) == "# Plan\n\nnew text")
    assert await content(s.client, s.plan_uri) == "# Plan\n\nnew text"


async def test_materialized_copies_are_read_only_and_git_ignored(servers, workspace):
    s = await servers.start(capabilities("neovim"))
    await run(s.client, "plan-write", {"content": "# Plan\n\ncopied"})
    plan_copy = view_file(workspace, s.plan_uri)
    await eventually(lambda: read_or_none(plan_copy) == "# Plan\n\ncopied")
    await eventually(lambda: view_file(workspace, INDEX).exists())
    for path in (plan_copy, view_file(workspace, INDEX)):
        assert stat.S_IMODE(path.stat().st_mode) & 0o222 == 0, f"{path} is writable"
    exclude = (workspace.repo / ".git" / "info" / "exclude").read_text().split("\n")
    # forge-lsp's own folders under .forge/ (and the user's .forge/config.toml), not all of it.
    assert "**/.forge/view/" in exclude
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=workspace.repo,
        env=workspace.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == ""


async def test_existing_plans_are_materialized_at_startup(servers, workspace):
    writer = await servers.start(capabilities("visual-studio-code", text_document_content=True))
    await run(writer.client, "plan-write", {"content": "# Earlier\n\nplan"})
    assert not workspace.view_dir.exists()
    await servers.start(capabilities("neovim"))
    await eventually(lambda: read_or_none(view_file(workspace, writer.plan_uri)) == "# Earlier\n\nplan")


@pytest.mark.parametrize("materialize", [True, False])
async def test_documents_materialize_overrides_auto(servers, workspace, materialize):
    # true: copies even for a client reading forge: URIs; false: none even for one that cannot.
    caps = capabilities("visual-studio-code", text_document_content=True if materialize else None)
    s = await servers.start(caps, forge={"config": {"documents": {"materialize": materialize}}})
    if materialize:
        await run(s.client, "plan-write", {"content": "# Plan\n\nforced"})
        await eventually(lambda: read_or_none(view_file(workspace, s.plan_uri)) == "# Plan\n\nforced")
        await eventually(lambda: s.plan_uri in s.refreshes)
    else:
        # Fetch the (future) plan document so its diagnostics mark the end of the announcement.
        await run(s.client, "plan-write", {"content": "# Plan\n\nfirst"})
        await content(s.client, s.plan_uri)
        await eventually(lambda: diagnostics_of(s.client, s.plan_uri))
        await run(s.client, "plan-write", {"content": COMPLETE_PLAN})  # no warnings
        await eventually(lambda: diagnostics_of(s.client, s.plan_uri) == [])
        await asyncio.sleep(0.3)
        assert not workspace.view_dir.exists()
        assert s.refreshes == []


async def test_write_by_another_process_is_announced(servers):
    """§1: a process notices another process's writes (within 500 ms; generous wait here)."""
    watcher = await servers.start(capabilities("visual-studio-code", text_document_content=True))
    writer = await servers.start(capabilities("neovim"))
    await run(writer.client, "plan-write", {"content": "# From elsewhere\n\nx"})
    await eventually(lambda: writer.plan_uri in watcher.refreshes, timeout=WAIT)
    assert await content(watcher.client, writer.plan_uri) == "# From elsewhere\n\nx"
