"""`forge.plan-read` (FORGE-REFERENCE §2.1): paging, search, recent plans, not found."""

from __future__ import annotations

import re

from conftest import COMPLETE_PLAN, expect_error, line_of, run

TEN = "\n".join(f"line {i}" for i in range(1, 11))  # 10 lines
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


async def test_whole_plan_numbered(forge):
    await run(forge.client, "plan-write", {"content": TEN})
    result = await run(forge.client, "plan-read")
    assert result["text"] == "(10 lines total)\n" + "\n".join(f"{i}: line {i}" for i in range(1, 11))
    data = result["data"]
    assert data["uri"] == forge.plan_uri
    assert (data["totalLines"], data["firstLine"], data["lastLine"], data["nextOffset"]) == (10, 1, 10, None)


async def test_paging_notice(forge):
    await run(forge.client, "plan-write", {"content": TEN})
    result = await run(forge.client, "plan-read", {"offset": 3, "limit": 4})
    assert result["text"] == (
        "(10 lines total)\n3: line 3\n4: line 4\n5: line 5\n6: line 6\n\n"
        "(Showing lines 3-6 of 10. Use offset=7 to continue.)"
    )
    assert result["data"]["nextOffset"] == 7
    # Following the notice reads the rest, without a notice.
    rest = await run(forge.client, "plan-read", {"offset": 7, "limit": 4})
    assert rest["text"] == "(10 lines total)\n7: line 7\n8: line 8\n9: line 9\n10: line 10"
    assert rest["data"]["nextOffset"] is None


async def test_paging_edges(forge):
    await run(forge.client, "plan-write", {"content": TEN})
    # offset 0 means 1
    zero = await run(forge.client, "plan-read", {"offset": 0, "limit": 1})
    assert zero["text"] == "(10 lines total)\n1: line 1\n\n(Showing lines 1-1 of 10. Use offset=2 to continue.)"
    # past the end: the header and an empty line
    past = await run(forge.client, "plan-read", {"offset": 50})
    assert past["text"] == "(10 lines total)\n"


async def test_search(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    one = await run(forge.client, "plan-read", {"pattern": "^Loop Name:"})
    assert one["text"] == "Found 1 match:\n\n  Line 6: Loop Name: add-oauth"
    assert one["data"]["matches"] == [{"line": 6, "text": "Loop Name: add-oauth"}]
    many = await run(forge.client, "plan-read", {"pattern": r"^## Phase \d"})
    p1, p2 = (line_of(COMPLETE_PLAN, h) + 1 for h in ("## Phase 1: Token store", "## Phase 2: Login flow"))
    assert many["text"] == f"Found 2 matches:\n\n  Line {p1}: ## Phase 1: Token store\n  Line {p2}: ## Phase 2: Login flow"
    none = await run(forge.client, "plan-read", {"pattern": "nothing like this"})
    assert none["text"] == "No matches found in plan"
    assert none["data"]["matches"] == []
    # An empty pattern is no pattern (Forge: `if (args.pattern)`): the plan's first page.
    empty = await run(forge.client, "plan-read", {"pattern": ""})
    whole = await run(forge.client, "plan-read", {})
    assert empty["text"] == whole["text"]
    assert empty["text"].startswith(f"({len(COMPLETE_PLAN.splitlines())} lines total)\n1: ")
    recent = await run(forge.client, "plan-read", {"recent": True, "pattern": ""})
    assert recent["text"] == (await run(forge.client, "plan-read", {"recent": True}))["text"]


async def test_invalid_regex_is_invalid(forge):
    await run(forge.client, "plan-write", {"content": TEN})
    message = await expect_error(run(forge.client, "plan-read", {"pattern": "(unclosed"}), 1006, "invalid")
    assert message.startswith("Invalid regex pattern: ")


async def test_not_found(forge):
    message = await expect_error(run(forge.client, "plan-read"), 1002, "not_found")
    assert message == "No plan found for current session"
    message = await expect_error(run(forge.client, "plan-read", {"session_id": "ses_nobody"}), 1002, "not_found")
    assert "ses_nobody" in message
    message = await expect_error(run(forge.client, "plan-read", {"loop_name": "no-such-loop"}), 1002, "not_found")
    assert "no-such-loop" in message


async def test_reads_another_sessions_plan(servers, client_caps):
    writer = await servers.start(client_caps)
    reader = await servers.start(client_caps)
    await run(writer.client, "plan-write", {"content": TEN})
    result = await run(reader.client, "plan-read", {"session_id": writer.session_id, "offset": 10})
    assert result["text"] == "(10 lines total)\n10: line 10"
    assert result["data"]["uri"] == writer.plan_uri


async def test_recent(servers, client_caps, workspace):
    a = await servers.start(client_caps)
    b = await servers.start(client_caps)
    empty = await run(a.client, "plan-read", {"recent": True})
    assert empty["text"] == "No recent plans found"
    await run(a.client, "plan-write", {"content": "# First plan\nsecond line\nthird line\nfourth line"})
    await run(b.client, "plan-write", {"content": "# Second plan\nneedle here"})
    listed = await run(a.client, "plan-read", {"recent": True})
    lines = listed["text"].split("\n")
    assert lines[0] == f"Recent plans for project {workspace.root_commit} (2 found)"
    # newest first
    assert re.fullmatch(rf"  session: {b.session_id} \| {ISO} \| # Second plan", lines[1]), lines[1]
    assert lines[2] == "    needle here"
    assert re.fullmatch(rf"  session: {a.session_id} \| {ISO} \| # First plan", lines[3]), lines[3]
    assert lines[4] == "    second line third line"
    assert len(lines) == 5
    assert [p["sessionId"] for p in listed["data"]["plans"]] == [b.session_id, a.session_id]
    limited = await run(a.client, "plan-read", {"recent": True, "count": 1})
    assert limited["text"].split("\n")[0] == f"Recent plans for project {workspace.root_commit} (1 found)"

    found = await run(a.client, "plan-read", {"recent": True, "pattern": "needle"})
    lines = found["text"].split("\n")
    assert lines[0] == "Found 1 recent plan match(es) for /needle/."
    assert re.fullmatch(rf"  session: {b.session_id} \| {ISO} \| # Second plan", lines[1]), lines[1]
    assert lines[2] == "    Line 2: needle here"
    missing = await run(a.client, "plan-read", {"recent": True, "pattern": "absent"})
    assert missing["text"] == "No matching recent plans found"
