"""PROTOCOL.md §3 and §3.2: commands, `forge.tools` offers, argument validation."""

from __future__ import annotations

import asyncio

from conftest import WAIT, as_json, expect_error, run
from lsprotocol import types

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

# Tools whose input this suite can exercise with agent `user` outside a loop.
PLAN_TOOLS = ["plan-read", "plan-write", "plan-edit", "tools"]


def advertised(forge) -> list[str]:
    return list(forge.result.capabilities.execute_command_provider.commands)


async def test_every_command_has_an_offer(forge):
    result = await run(forge.client, "tools")
    offers = result["data"]["tools"]
    by_command = {o["command"]: o for o in offers}
    assert len(by_command) == len(offers), "duplicate offers"
    assert sorted(by_command) == sorted(advertised(forge))
    for command, offer in by_command.items():
        assert set(offer) == {"name", "command", "description", "inputSchema"}
        assert command == f"forge.{offer['name']}"
        assert offer["description"].strip()
        schema = offer["inputSchema"]
        assert schema.get("$schema") == DRAFT_2020_12, command
        assert schema.get("type") == "object", command
        assert schema.get("additionalProperties") is False, f"{command} accepts unknown fields"
        for name in schema.get("required", []):
            assert name in schema.get("properties", {}), f"{command}: required {name} is not a property"
    # The text lists every command with its description.
    lines = result["text"].split("\n")
    assert lines[0] == f"{len(offers)} tools:"
    assert sorted(lines[1:]) == sorted(f"- {o['name']} ({o['command']}): {o['description']}" for o in offers)


async def test_plan_tool_schemas_match_the_reference(forge):
    offers = {o["name"]: o["inputSchema"] for o in (await run(forge.client, "tools"))["data"]["tools"]}
    props = {name: set(schema.get("properties", {})) for name, schema in offers.items()}
    required = {name: set(schema.get("required", [])) for name, schema in offers.items()}
    assert props["plan-read"] == {"offset", "limit", "count", "pattern", "loop_name", "session_id", "recent"}
    assert required["plan-read"] == set()
    assert props["plan-write"] == {"content", "session_id"}
    assert required["plan-write"] == {"content"}
    assert props["plan-edit"] == {"oldString", "newString", "replaceAll", "session_id"}
    assert required["plan-edit"] == {"oldString", "newString"}
    assert props["tools"] == set()


async def test_unknown_field_is_invalid_params(forge):
    for tool in PLAN_TOOLS:
        message = await expect_error(run(forge.client, tool, {"zzUnknownField": 1}), -32602, "invalid_params")
        assert "zzUnknownField" in message, (tool, message)


BAD_INPUTS = [
    ("plan-write", {}, "content"),
    ("plan-write", {"content": 3}, "content"),
    ("plan-write", {"content": None}, "content"),
    ("plan-edit", {"oldString": "a"}, "newString"),
    ("plan-edit", {"oldString": "a", "newString": "b", "replaceAll": "yes"}, "replaceAll"),
    ("plan-read", {"offset": -1}, "offset"),
    ("plan-read", {"limit": 1.5}, "limit"),
    ("plan-read", {"recent": "true"}, "recent"),
]


async def test_missing_or_mistyped_field_is_invalid_params(forge):
    for tool, args, field in BAD_INPUTS:
        message = await expect_error(run(forge.client, tool, args), -32602, "invalid_params")
        assert field in message, (tool, args, message)


async def test_arguments_must_be_one_object(forge):
    # PROTOCOL.md §3: absent or a list of exactly one object; `[null]` is neither.
    for arguments in (["not an object"], [{}, {}], [[1]], [3], [None]):
        params = types.ExecuteCommandParams(command="forge.tools", arguments=arguments)
        await expect_error(
            asyncio.wait_for(forge.client.workspace_execute_command_async(params), WAIT), -32602, "invalid_params"
        )


async def test_absent_arguments_and_real_clients_empty_encodings_mean_empty_input(forge):
    # `[[]]`: Neovim's empty Lua table; `[]`: Helix and Zed (lsp-types always serializes it).
    for arguments in (None, [[]], [], [{}]):
        params = types.ExecuteCommandParams(command="forge.tools", arguments=arguments)
        result = await asyncio.wait_for(forge.client.workspace_execute_command_async(params), WAIT)
        assert as_json(result)["data"]["tools"]


async def test_unknown_command_is_invalid_params(forge):
    message = await expect_error(run(forge.client, "no-such-tool"), -32602, "invalid_params")
    assert "forge.no-such-tool" in message
