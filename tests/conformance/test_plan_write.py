"""`forge.plan-write` (FORGE-REFERENCE §2.2) and its structure report (§3.5, §3.6)."""

from __future__ import annotations

from conftest import (
    COMPLETE_PLAN,
    WARN_PLAN,
    WARN_PLAN_WARNINGS,
    content,
    expect_error,
    js_len,
    line_of,
    run,
)


def stored_size(text: str) -> tuple[int, int]:
    stored = text.strip()
    return len(stored.split("\n")), js_len(stored)


async def test_report_with_loop_name_sections_and_warnings(forge):
    result = await run(forge.client, "plan-write", {"content": WARN_PLAN})
    lines, chars = stored_size(WARN_PLAN)
    assert result["text"] == "\n".join(
        [
            f"Plan stored: {lines} lines, {chars} chars.",
            "Loop Name: add-oauth",
            "Sections (2):",
            "  1. Phase 1: Token store",
            "  2. Phase 2: Login flow",
            "Warnings:",
            *(f"  - {w}" for w in WARN_PLAN_WARNINGS),
        ]
    )
    data = result["data"]
    assert data["sessionId"] == forge.session_id
    assert data["uri"] == forge.plan_uri
    assert data["written"] is True
    assert (data["lines"], data["chars"]) == (lines, chars)
    assert data["loopName"] == "add-oauth"
    assert data["sectionCount"] == 2
    assert data["sections"] == [
        {"index": 0, "title": "Phase 1: Token store"},
        {"index": 1, "title": "Phase 2: Login flow"},
    ]
    assert [w["message"] for w in data["warnings"]] == WARN_PLAN_WARNINGS
    stored = WARN_PLAN.strip()
    # The section warning points at the section's marker, the trailing one at no line.
    assert data["warnings"][1]["line"] == line_of(stored, "## Phase 2: Login flow") - 1
    assert data["warnings"][2]["line"] is None


async def test_complete_plan_has_no_warnings_block(forge):
    result = await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    lines, chars = stored_size(COMPLETE_PLAN)
    assert result["text"] == "\n".join(
        [
            f"Plan stored: {lines} lines, {chars} chars.",
            "Loop Name: add-oauth",
            "Sections (2):",
            "  1. Phase 1: Token store",
            "  2. Phase 2: Login flow",
        ]
    )
    assert result["data"]["warnings"] == []


async def test_plan_without_sections_or_loop_name(forge):
    text = "Refactor the parser\n\nMake it faster. ✓"
    result = await run(forge.client, "plan-write", {"content": text})
    lines, chars = stored_size(text)
    assert result["text"] == "\n".join(
        [
            f"Plan stored: {lines} lines, {chars} chars.",
            "Sections (0): none detected",
            "Warnings:",
            "  - No <!-- forge-section --> markers found: the whole plan will run as a single section.",
            '  - No "Loop Name:" line found: the loop name will be derived from the plan title.',
            "  - No Objective heading found before the first executable phase.",
            "  - Plan is missing trailing headings: Decisions, Conventions, Key Context.",
        ]
    )
    assert result["data"]["loopName"] is None
    assert result["data"]["sections"] == []


async def test_stored_text_is_trimmed_and_readable(forge):
    await run(forge.client, "plan-write", {"content": "\n\n  " + COMPLETE_PLAN + "\n\n"})
    assert await content(forge.client, forge.plan_uri) == COMPLETE_PLAN.strip()


async def test_plan_markers_select_the_body(forge):
    body = "# Inner plan\n\nthe body"
    wrapped = f"Here is the plan:\n<!-- forge-plan:start -->\n{body}\n<!-- forge-plan:end -->\nThanks."
    await run(forge.client, "plan-write", {"content": wrapped})
    assert await content(forge.client, forge.plan_uri) == body


async def test_project_paths_are_made_relative(forge, workspace):
    text = f"# Paths\n\nEdit {workspace.repo}/src/main.rs and `{workspace.repo}/Cargo.toml`."
    await run(forge.client, "plan-write", {"content": text})
    assert await content(forge.client, forge.plan_uri) == "# Paths\n\nEdit src/main.rs and `Cargo.toml`."


async def test_identical_rewrite_is_not_written(forge):
    first = await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    read_before = await run(forge.client, "plan-read")
    again = await run(forge.client, "plan-write", {"content": COMPLETE_PLAN})
    assert first["data"]["written"] is True
    assert again["data"]["written"] is False
    assert again["text"] == first["text"]
    read_after = await run(forge.client, "plan-read")
    assert read_after["data"]["updatedAt"] == read_before["data"]["updatedAt"]


async def test_overwrite_replaces_the_plan(forge):
    await run(forge.client, "plan-write", {"content": WARN_PLAN})
    await run(forge.client, "plan-write", {"content": "# Second\n\nonly this"})
    assert await content(forge.client, forge.plan_uri) == "# Second\n\nonly this"


async def test_empty_content_is_invalid(forge):
    for text in ("", "   \n\t\n "):
        message = await expect_error(run(forge.client, "plan-write", {"content": text}), 1006, "invalid")
        assert message == "plan-write failed: content is empty."
    # Nothing was stored.
    await expect_error(content(forge.client, forge.plan_uri), 1002, "not_found")


async def test_unbalanced_markers_are_invalid(forge):
    message = await expect_error(
        run(forge.client, "plan-write", {"content": "<!-- forge-plan:start -->\n# Plan\nno end"}), 1006, "invalid"
    )
    assert message == (
        "plan-write failed: content contains an unbalanced <!-- forge-plan:start --> / <!-- forge-plan:end --> marker."
    )


async def test_unknown_field_is_rejected_without_writing(forge):
    message = await expect_error(
        run(forge.client, "plan-write", {"content": COMPLETE_PLAN, "title": "x"}), -32602, "invalid_params"
    )
    assert "title" in message
    await expect_error(content(forge.client, forge.plan_uri), 1002, "not_found")


async def test_user_may_write_another_sessions_plan(forge):
    other = "ses_conformance_other"
    result = await run(forge.client, "plan-write", {"content": "# Theirs\n\nx", "session_id": other})
    assert result["data"]["sessionId"] == other
    assert await content(forge.client, f"forge://plan/session/{other}.md") == "# Theirs\n\nx"
    # The caller's own plan is untouched.
    await expect_error(content(forge.client, forge.plan_uri), 1002, "not_found")
