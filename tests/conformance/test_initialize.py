"""PROTOCOL.md §2: initialization options, InitializeResult.capabilities and serverInfo."""

from __future__ import annotations

import re
import tomllib

import pytest
from conftest import REPO_ROOT, capabilities, declares_utf8, eventually, expect_error, run
from lsprotocol import types
from pygls.exceptions import JsonRpcException

SESSION_ID = re.compile(r"^ses_[0-9A-HJKMNP-TV-Z]{26}$")


def crate_version() -> str:
    workspace = tomllib.loads((REPO_ROOT / "Cargo.toml").read_text())
    return workspace["workspace"]["package"]["version"]


def raw(result: types.InitializeResult) -> dict:
    from lsprotocol.converters import get_converter

    return get_converter().unstructure(result)


async def test_capabilities_and_server_info(forge):
    result = raw(forge.result)
    caps = result["capabilities"]
    assert caps["textDocumentSync"]["openClose"] is True
    assert caps["textDocumentSync"]["change"] == 1
    # Saves of read-only .forge/view copies are adopted or refused (PROTOCOL.md 10.2).
    assert caps["textDocumentSync"]["save"] == {"includeText": True}
    commands = caps["executeCommandProvider"]["commands"]
    for command in ["forge.plan-read", "forge.plan-write", "forge.plan-edit", "forge.tools"]:
        assert command in commands
    assert all(c.startswith("forge.") for c in commands)
    assert len(set(commands)) == len(commands)
    assert caps["workspace"]["textDocumentContent"]["schemes"] == ["forge"]
    assert caps["documentSymbolProvider"] is True
    assert caps["foldingRangeProvider"] is True
    assert caps["codeLensProvider"] == {"resolveProvider": False}
    assert caps["codeActionProvider"] is True
    experimental = caps["experimental"]["forge"]
    assert experimental["protocolVersion"] == 1
    assert experimental["tools"] is True
    assert result["serverInfo"] == {"name": "forge-lsp", "version": crate_version()}


async def test_position_encoding_follows_client(forge):
    """UTF-16 unless the client offers utf-8 (Neovim 0.11 does, VS Code 1.65 offers nothing)."""
    expected = "utf-8" if declares_utf8(forge.caps) else "utf-16"
    assert raw(forge.result)["capabilities"]["positionEncoding"] == expected


async def test_fresh_session_id_per_connection(servers, client_caps):
    a = await servers.start(client_caps)
    b = await servers.start(client_caps)
    assert SESSION_ID.match(a.session_id), a.session_id
    assert SESSION_ID.match(b.session_id), b.session_id
    assert a.session_id != b.session_id


async def test_session_from_initialization_options(servers, client_caps):
    s = await servers.start(client_caps, forge={"session": "ses_conformance_custom"})
    assert s.session_id == "ses_conformance_custom"
    written = await run(s.client, "plan-write", {"content": "# Mine\n\nbody"})
    assert written["data"]["sessionId"] == "ses_conformance_custom"
    assert written["data"]["uri"] == "forge://plan/session/ses_conformance_custom.md"


async def test_second_connection_reclaims_session(servers, client_caps):
    """A plain (non-loop) session id can be claimed again, e.g. by a reconnecting editor."""
    first = await servers.start(client_caps, forge={"session": "ses_reconnect"})
    await run(first.client, "plan-write", {"content": "# Kept\n\nline"})
    second = await servers.start(client_caps, forge={"session": "ses_reconnect"})
    read = await run(second.client, "plan-read")
    assert read["text"] == "(3 lines total)\n1: # Kept\n2: \n3: line"


@pytest.mark.parametrize(
    "forge_options, field",
    [
        ({"agent": "wizard"}, "agent"),
        ({"bogus": True}, "bogus"),
    ],
)
async def test_bad_initialization_options_fail_initialize(servers, forge_options, field):
    with pytest.raises(JsonRpcException) as info:
        await servers.start(capabilities("neovim"), forge=forge_options)
    assert info.value.code == -32602
    assert field in info.value.message


async def test_agent_decides_allowed_commands(servers, client_caps):
    """§5: plan authoring is denied to `code`; plan-read stays available."""
    s = await servers.start(client_caps, forge={"agent": "code"})
    message = await expect_error(run(s.client, "plan-write", {"content": "# x"}), 1001, "denied")
    assert "forge.plan-write" in message and "code" in message
    await expect_error(run(s.client, "plan-read"), 1002, "not_found")


async def test_user_config_is_read_from_xdg_config_home(servers, client_caps, workspace):
    """§9: the user file is `$XDG_CONFIG_HOME/forge-lsp/config.toml`; an unknown key is reported
    once with window/showMessage (Warning) and otherwise ignored."""
    config = workspace.root / "config" / "forge-lsp" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[loop]\ndefaultMaxIterations = 5\nzzNotAKey = true\n")
    s = await servers.start(client_caps)
    messages = await eventually(lambda: [m for m in s.client.messages if "zzNotAKey" in m.message])
    assert len(messages) == 1
    assert messages[0].type == types.MessageType.Warning
    assert str(config) in messages[0].message
    # The server keeps working.
    await run(s.client, "plan-write", {"content": "# ok"})
