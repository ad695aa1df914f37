"""`forge.plan-edit` (FORGE-REFERENCE §2.3)."""

from __future__ import annotations

from conftest import COMPLETE_PLAN, content, expect_error, js_len, run


def report_head(text: str) -> str:
    return f"Plan stored: {len(text.split(chr(10)))} lines, {js_len(text)} chars."


async def test_replace_once_reports_the_touched_section(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    result = await run(forge.client, "plan-edit", {"oldString": "- a user can log in", "newString": "- a user can log in and out"})
    expected = COMPLETE_PLAN.strip().replace("- a user can log in", "- a user can log in and out")
    assert result["text"] == "\n".join(
        [
            "Replaced 1 occurrence(s).",
            report_head(expected),
            "Loop Name: add-oauth",
            "Sections (2):",
            "  2. Phase 2: Login flow",
        ]
    )
    assert result["data"]["replaced"] == 1
    assert result["data"]["sections"] == [{"index": 1, "title": "Phase 2: Login flow"}]
    assert await content(forge.client, forge.plan_uri) == expected


async def test_preamble_edit_lists_no_section(forge):
    await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    result = await run(forge.client, "plan-edit", {"oldString": "Add OAuth login to the API.", "newString": "Add OAuth."})
    expected = COMPLETE_PLAN.strip().replace("Add OAuth login to the API.", "Add OAuth.")
    assert result["text"] == "\n".join(
        ["Replaced 1 occurrence(s).", report_head(expected), "Loop Name: add-oauth", "Sections (2): none changed by this edit"]
    )


async def test_replace_all(forge):
    await run(forge.client, "plan-write", {"content": "# Plan\n\ncat one\ncat two\ncat three"})
    result = await run(forge.client, "plan-edit", {"oldString": "cat", "newString": "dog", "replaceAll": True})
    assert result["text"].split("\n")[0] == "Replaced 3 occurrence(s)."
    assert result["data"]["replaced"] == 3
    assert await content(forge.client, forge.plan_uri) == "# Plan\n\ndog one\ndog two\ndog three"


async def test_multiple_matches_is_an_error_and_changes_nothing(forge):
    await run(forge.client, "plan-write", {"content": "# Plan\n\ncat one\ncat two\ncat three"})
    before = await run(forge.client, "plan-read")
    message = await expect_error(
        run(forge.client, "plan-edit", {"oldString": "cat", "newString": "dog"}), 1006, "invalid"
    )
    assert message == (
        "plan-edit failed: found 3 matches for oldString. "
        "Add surrounding context to make it unique, or set replaceAll: true."
    )
    after = await run(forge.client, "plan-read")
    assert after == before  # same text, same updatedAt


async def test_identical_strings(forge):
    await run(forge.client, "plan-write", {"content": "# Plan\n\nbody"})
    message = await expect_error(
        run(forge.client, "plan-edit", {"oldString": "body", "newString": "body"}), 1006, "invalid"
    )
    assert message == "plan-edit failed: oldString and newString are identical."


async def test_old_string_not_found(forge):
    await run(forge.client, "plan-write", {"content": "# Plan\n\nbody"})
    message = await expect_error(
        run(forge.client, "plan-edit", {"oldString": "2: body", "newString": "x"}), 1003, "conflict"
    )
    assert message.startswith("plan-edit failed: oldString not found in the stored plan.")


async def test_edit_that_empties_the_plan(forge):
    await run(forge.client, "plan-write", {"content": "# Plan"})
    message = await expect_error(
        run(forge.client, "plan-edit", {"oldString": "# Plan", "newString": "  "}), 1006, "invalid"
    )
    assert message.startswith("plan-edit failed: replacement would leave the plan empty.")
    assert await content(forge.client, forge.plan_uri) == "# Plan"


async def test_empty_old_string_on_existing_plan(forge):
    await run(forge.client, "plan-write", {"content": "# Plan"})
    message = await expect_error(run(forge.client, "plan-edit", {"oldString": "", "newString": "x"}), 1006, "invalid")
    assert "oldString cannot be empty when editing an existing plan" in message


async def test_no_plan(forge):
    message = await expect_error(
        run(forge.client, "plan-edit", {"oldString": "a", "newString": "b"}), 1002, "not_found"
    )
    assert message == "plan-edit failed: no plan stored for this session. Use plan-write to create it first."


async def test_empty_old_string_creates_the_plan(forge):
    result = await run(forge.client, "plan-edit", {"oldString": "", "newString": "\n# New plan\n\nbody\n"})
    assert result["text"].split("\n")[:2] == ["Created plan.", report_head("# New plan\n\nbody")]
    assert result["data"]["created"] is True
    assert await content(forge.client, forge.plan_uri) == "# New plan\n\nbody"
