"""PROTOCOL.md §6: review findings as diagnostics, with the recorded capabilities of real
clients (VS Code negotiates UTF-16; Neovim offers utf-8, so its ranges are in bytes):
URI, whole-line range, severity, source, code, message and data; republication on
delete; a finding written by ``forge-lsp call`` in another process; bad input; and the
``Delete finding`` code action; a line number beyond LSP's ``uinteger`` range."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import pytest
from conftest import WAIT, as_json, declares_utf8, diagnostics_of, eventually, expect_error, js_len, run, server_binary
from lsprotocol import types


def negotiated_utf8(forge) -> bool:
    enc = forge.result.capabilities.position_encoding
    # The server picks utf-8 exactly when the client offers it.
    assert (enc == types.PositionEncodingKind.Utf8) == declares_utf8(forge.caps), enc
    return enc == types.PositionEncodingKind.Utf8


def units(line: str, utf8: bool) -> int:
    return len(line.encode("utf-8")) if utf8 else js_len(line)


def data_of(diag: types.Diagnostic) -> dict:
    return as_json(diag.data)


def raw_request(client, method: str, params):
    """Sends a request and returns its result as plain JSON, bypassing lsprotocol's typed
    result. Needed for ``textDocument/codeAction``: lsprotocol structures every element
    that has a ``command`` key as a ``Command``, so a ``CodeAction`` carrying a command
    object comes back as a ``Command`` whose ``command`` is the dict's ``str()``."""
    msg_id = f"raw-{uuid.uuid4()}"
    # pygls' synchronous send_request registers the result type and sends at once; no
    # response can be handled before we drop the type (same event loop).
    future = client.protocol.send_request(method, params, msg_id=msg_id)
    client.protocol._result_types.pop(msg_id, None)

    async def result():
        return as_json(await asyncio.wrap_future(future))

    return result()


def write(workspace, rel: str, text: str) -> str:
    path = workspace.repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="")
    return path.as_uri()


async def test_a_finding_is_a_diagnostic_on_its_file_until_deleted(forge, workspace):
    client = forge.client
    utf8 = negotiated_utf8(forge)
    line2 = '    let café = "naïve";'
    uri = write(workspace, "src/my file.rs", f"fn main() {{\n{line2}\n}}\n")
    assert uri == f"file://{workspace.repo}/src/my%20file.rs"

    out = await run(
        client,
        "review-write",
        {
            "file": "src/my file.rs",
            "line": 2,
            "severity": "bug",
            "description": "The name shadows a builtin.",
            "scenario": "Any call of café().",
        },
    )
    assert out["text"] == "Stored review finding at src/my file.rs:2 (bug)"
    bug_id = out["data"]["finding"]["id"]

    diags = await eventually(lambda: diagnostics_of(client, uri))
    assert len(diags) == 1
    d = diags[0]
    assert d.range == types.Range(types.Position(1, 0), types.Position(1, units(line2, utf8)))
    assert d.severity == types.DiagnosticSeverity.Error
    assert d.source == "forge"
    assert d.code == bug_id
    assert d.message == "The name shadows a builtin.\n\nScenario: Any call of café()."
    data = data_of(d)
    assert {k: data[k] for k in ("findingId", "loopName", "sectionIndex", "crossSection")} == {
        "findingId": bug_id,
        "loopName": None,
        "sectionIndex": None,
        "crossSection": True,
    }

    warning = {"file": "src/my file.rs", "line": 3, "severity": "warning", "description": "w"}
    out = await run(client, "review-write", warning)
    warn_id = out["data"]["finding"]["id"]
    diags = await eventually(lambda: (d := diagnostics_of(client, uri)) and len(d) == 2 and d)
    w = next(x for x in diags if x.code == warn_id)
    assert w.severity == types.DiagnosticSeverity.Warning
    assert w.message == "w"
    assert w.range == types.Range(types.Position(2, 0), types.Position(2, 1))

    await run(client, "review-delete", {"file": "src/my file.rs", "line": 2})
    await eventually(lambda: [x.code for x in diagnostics_of(client, uri)] == [warn_id])
    await run(client, "review-delete", {"file": "src/my file.rs", "line": 3})
    await eventually(lambda: diagnostics_of(client, uri) == [])


async def test_emoji_and_cjk_lines_end_in_the_negotiated_encoding(forge, workspace):
    client = forge.client
    utf8 = negotiated_utf8(forge)
    line1 = 'let greeting = "😀 世界";'
    uri = write(workspace, "src/emoji.rs", f"{line1}\r\nnext();\r\n")
    await run(client, "review-write", {"file": "src/emoji.rs", "line": 1, "severity": "bug", "description": "emoji"})
    diags = await eventually(lambda: diagnostics_of(client, uri))
    # `let greeting = "` is 16; 😀 is 2 UTF-16 units / 4 bytes; 世界 2 units / 6 bytes; `";` 2.
    expected = 29 if utf8 else 23
    assert units(line1, utf8) == expected
    assert diags[0].range == types.Range(types.Position(0, 0), types.Position(0, expected))


async def test_a_finding_written_by_forge_lsp_call_reaches_the_client(forge, workspace):
    client = forge.client
    uri = write(workspace, "src/call.rs", "fn called() {}\n")
    args = [server_binary(), "--data-dir", str(workspace.data), "call", "review-write"]
    args.append('{"file": "src/call.rs", "line": 1, "severity": "warning", "description": "Written by call."}')

    def call():
        return subprocess.run(args, cwd=workspace.repo, env=workspace.env, capture_output=True, text=True, timeout=60)

    proc = await asyncio.to_thread(call)
    done = time.monotonic()
    assert proc.returncode == 0, proc.stderr
    assert "Stored review finding at src/call.rs:1 (warning)" in proc.stdout
    diags = await eventually(lambda: diagnostics_of(client, uri))
    latency = time.monotonic() - done
    print(f"diagnostics {latency:.3f}s after the call exited")
    assert latency < 3.0
    assert [(d.message, d.severity) for d in diags] == [("Written by call.", types.DiagnosticSeverity.Warning)]


async def test_bad_review_input(forge, workspace):
    client = forge.client
    message = await expect_error(
        run(client, "review-write", {"line": 1, "severity": "bug", "description": "d"}), -32602, "invalid_params"
    )
    assert "file" in message
    for line in (0, -5):
        message = await expect_error(
            run(client, "review-write", {"file": "a.rs", "line": line, "severity": "bug", "description": "d"}),
            -32602,
            "invalid_params",
        )
        assert "line" in message
    await expect_error(
        run(client, "review-write", {"file": "a.rs", "line": 1, "severity": "critical", "description": "d"}),
        -32602,
        "invalid_params",
    )

    write(workspace, "a.rs", "fn a() {}\n")
    await run(client, "review-write", {"file": "a.rs", "line": 1, "severity": "bug", "description": "first"})
    message = await expect_error(
        run(client, "review-write", {"file": "a.rs", "line": 1, "severity": "warning", "description": "again"}),
        1003,
        "conflict",
    )
    assert message.startswith("Finding already exists at a.rs:1.")

    # A path outside the project is stored verbatim and never read: range 0..0.
    outside = workspace.root / "outside" / "secret.rs"
    outside.parent.mkdir()
    outside.write_text("let secret = 1;\n")
    await run(client, "review-write", {"file": str(outside), "line": 1, "severity": "bug", "description": "out"})
    diags = await eventually(lambda: diagnostics_of(client, outside.as_uri()))
    assert diags[0].range == types.Range(types.Position(0, 0), types.Position(0, 0))

    # Still serving.
    read = await run(client, "review-read", {})
    assert [f["file"] for f in read["data"]["findings"]] == sorted(["a.rs", str(outside)])


async def test_the_delete_finding_code_action(forge, workspace):
    client = forge.client
    uri = write(workspace, "src/act.rs", "one\ntwo\n")
    out = await run(client, "review-write", {"file": "src/act.rs", "line": 2, "severity": "bug", "description": "x"})
    finding_id = out["data"]["finding"]["id"]
    diags = await eventually(lambda: diagnostics_of(client, uri))

    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=diags[0].range,
        context=types.CodeActionContext(diagnostics=diags),
    )
    actions = await asyncio.wait_for(raw_request(client, types.TEXT_DOCUMENT_CODE_ACTION, params), WAIT)
    assert isinstance(actions, list) and len(actions) == 1, actions
    action = actions[0]
    assert action["title"] == "Delete finding"
    command = action["command"]
    assert command["command"] == "forge.review-delete"
    arguments = command["arguments"]
    assert len(arguments) == 1 and arguments[0]["file"] == "src/act.rs" and arguments[0]["line"] == 2, arguments

    result = await asyncio.wait_for(
        client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=command["command"], arguments=arguments)
        ),
        WAIT,
    )
    assert as_json(result)["text"] == "Deleted review finding at src/act.rs:2"
    assert as_json(result)["data"]["findings"][0]["id"] == finding_id
    await eventually(lambda: diagnostics_of(client, uri) == [])


@pytest.mark.parametrize("client_name", ["visual-studio-code"])
async def test_vscode_negotiates_utf16(forge):
    assert not negotiated_utf8(forge)


async def test_the_last_line_lsp_can_name_is_published_and_a_larger_one_refused(forge, workspace):
    """LSP positions are `uinteger` (at most 2^31 - 1): a finding at line 2^31 is published
    on the last representable line, and clients can parse it; a larger line is refused."""
    client = forge.client
    uri = write(workspace, "src/far.rs", "one\n")
    too_far = {"file": "src/far.rs", "line": 2**31 + 1, "severity": "bug", "description": "too far"}
    await expect_error(run(client, "review-write", too_far), -32602, "invalid_params")
    far = {"file": "src/far.rs", "line": 2**31, "severity": "bug", "description": "far"}
    await run(client, "review-write", far)
    await run(client, "review-write", {"file": "src/far.rs", "line": 1, "severity": "bug", "description": "near"})
    diags = await eventually(lambda: (d := diagnostics_of(client, uri)) and len(d) == 2 and d)
    published = next(d for d in diags if d.message == "far")
    last = 2**31 - 1
    assert published.range == types.Range(types.Position(last, 0), types.Position(last, 0))
