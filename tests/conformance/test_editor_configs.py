"""Helix and Zed (PROTOCOL.md 10.2): neither editor installs on these machines, so what can be
tested is tested here: their configuration files parse, and the server behaves as those
clients' capabilities ask (no ``workspace.textDocumentContent``: read-only copies under
``.forge/view/`` that follow the plans and carry the plan's symbols)."""

from __future__ import annotations

import pathlib
import tomllib

from lsprotocol import types

from conftest import REPO_ROOT, eventually, run
from test_documents import INDEX, read_or_none, view_file

EDITORS = pathlib.Path(REPO_ROOT) / "editors"


def helix_capabilities() -> types.ClientCapabilities:
    """What Helix 25 declares that matters here: UTF-8/UTF-32/UTF-16 positions, progress,
    code lenses, no ``workspace.textDocumentContent``."""
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(
            position_encodings=[types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf32, types.PositionEncodingKind.Utf16]
        ),
        window=types.WindowClientCapabilities(work_done_progress=True),
        workspace=types.WorkspaceClientCapabilities(workspace_folders=True, execute_command=types.ExecuteCommandClientCapabilities()),
        text_document=types.TextDocumentClientCapabilities(
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(),
            code_action=types.CodeActionClientCapabilities(),
            document_symbol=types.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True),
        ),
    )


def test_helix_languages_toml_parses_and_names_the_server():
    cfg = tomllib.loads((EDITORS / "helix" / "languages.toml").read_text())
    assert cfg["language-server"]["forge-lsp"]["command"] == "forge-lsp"
    langs = {lang["name"]: lang["language-servers"] for lang in cfg["language"]}
    assert "forge-lsp" in langs["markdown"]
    assert all("forge-lsp" in servers for servers in langs.values())


def test_zed_extension_toml_parses_and_registers_the_server():
    cfg = tomllib.loads((EDITORS / "zed" / "extension.toml").read_text())
    assert cfg["id"] == "forge-lsp"
    assert cfg["schema_version"] == 1
    assert "Markdown" in cfg["language_servers"]["forge-lsp"]["languages"]
    cargo = tomllib.loads((EDITORS / "zed" / "Cargo.toml").read_text())
    assert cargo["lib"]["crate-type"] == ["cdylib"]


async def test_a_helix_like_client_gets_read_only_copies_that_follow_the_plan(servers, workspace):
    s = await servers.start(helix_capabilities())
    await run(s.client, "plan-write", {"content": "# Plan\n\n## Objective\nfirst"})
    copy = view_file(workspace, s.plan_uri)
    await eventually(lambda: read_or_none(copy) == "# Plan\n\n## Objective\nfirst")
    await eventually(lambda: view_file(workspace, INDEX).exists())
    await run(s.client, "plan-edit", {"oldString": "first", "newString": "second"})
    await eventually(lambda: read_or_none(copy) == "# Plan\n\n## Objective\nsecond")
    # The copy is a plan document for the server: its sections are symbols.
    symbols = await s.client.text_document_document_symbol_async(
        types.DocumentSymbolParams(text_document=types.TextDocumentIdentifier(uri=copy.as_uri()))
    )
    assert symbols, "the materialized plan copy has document symbols"
