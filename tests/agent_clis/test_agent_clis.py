"""End to end: a two-section Forge loop with each real agent CLI, offline, sandbox on.

For each CLI of pins.py: install it (pinned, `npm install --save-exact`, cached under
${FORGE_TEST_CACHE:-~/.cache/forge-lsp-tests}/agents/<cli>), then run run_loop.py inside a
private network namespace with only loopback up (as root with `unshare`; otherwise it runs
without one and says so). The loop (`agent.preset = "<cli>"`, sandbox on) goes: coder edits
and hands off, the auditor writes a finding, the resumed coder fixes, the resumed auditor
deletes it and hands off clean, section two, completion. Asserted: the transitions, the
branch's commits and files, the finding reaching the coder, the coder's shell running in the
sandbox (a write outside the worktree fails), the CLI's own session resumed, the auditor
moving to its fallback model after a provider limit (insufficient quota) on its first
model, and usage rows per session equal to what the fake model server reported.

A CLI that cannot be installed (no npm, no registry) is skipped with the reason. Select
CLIs with FORGE_AGENT_CLIS=claude,codex (default: all); FORGE_LSP_BIN names the binary.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import pins  # noqa: E402

CACHE = os.environ.get("FORGE_TEST_CACHE") or os.path.expanduser("~/.cache/forge-lsp-tests")
WANTED = [c for c in os.environ.get("FORGE_AGENT_CLIS", "").split(",") if c and c not in ("1", "all")]

EXPECTED_TRANSITIONS = [
    "rotate coder-handoff coding->auditing it=1 s=0",
    "rotate auditor-handoff auditing->coding it=1 s=0",
    "rotate coder-handoff coding->auditing it=2 s=0",
    "advance-section auditor-handoff auditing->coding it=2 s=0",
    "rotate coder-handoff coding->auditing it=3 s=1",
    "terminate completed auditing->- it=3 s=1",
]


def forge_bin():
    b = os.environ.get("FORGE_LSP_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "debug", "forge-lsp")
    assert os.path.isfile(b), "build forge-lsp first (cargo build), or set FORGE_LSP_BIN: %s" % b
    return b


def install(cli):
    """The CLI's binary, installed once per pin; skips (with the reason) when it cannot be."""
    p = pins.CLIS[cli]
    spec = "%s@%s" % (p["package"], p["version"])
    d = os.path.join(CACHE, "agents", cli)
    stamp = os.path.join(d, ".installed-" + spec.replace("/", "_").replace("@", "_"))
    binary = os.path.join(d, "node_modules", ".bin", p["bin"])
    if os.path.exists(stamp) and os.access(binary, os.X_OK):
        return binary
    if shutil.which("npm") is None:
        pytest.skip("%s: npm is not installed, so %s cannot be installed" % (cli, spec))
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(os.path.join(d, "package.json")):
        with open(os.path.join(d, "package.json"), "w") as f:
            f.write('{"private":true}\n')
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--save-exact", spec],
                       cwd=d, capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not os.access(binary, os.X_OK):
        pytest.skip("%s: `npm install %s` failed: %s" % (cli, spec, (r.stderr or r.stdout)[-500:]))
    open(stamp, "w").close()
    return binary


def offline_prefix():
    """`unshare -n` with loopback up, when this user may (root); else nothing."""
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
            return ["unshare", "-n", "bash", "-c", 'ip link set lo up; exec "$@"', "_"]
    sys.stderr.write("NOTE agent CLI tests: no network namespace here (needs root + unshare); running online\n")
    return []


def run_loop(cli, tmp_path):
    binary = install(cli)
    out = tmp_path / "result.json"
    cmd = offline_prefix() + [sys.executable, os.path.join(HERE, "run_loop.py"), cli, binary, forge_bin(), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0 and out.exists(), "run_loop.py failed (%s):\n%s\n%s" % (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    with open(out) as f:
        return json.load(f)


@pytest.mark.parametrize("cli", list(pins.CLIS))
def test_two_section_loop(cli, tmp_path):
    if WANTED and cli not in WANTED:
        pytest.skip("FORGE_AGENT_CLIS=%s" % ",".join(WANTED))
    res = run_loop(cli, tmp_path)
    keep = "kept in %s (set E2E_KEEP=1 to keep passing runs)\nserver log:\n%s" % (res["tmp"], res["server_log"][-3000:])
    reqs = res["requests"]
    assert res["execute"]["code"] == 0, res["execute"]
    status = res.get("status") or {}
    assert status.get("status") == "completed" and status.get("terminationReason") == "completed", \
        "%s\n%s" % (json.dumps(status), keep)
    assert res["transitions"] == EXPECTED_TRANSITIONS, keep
    # loop-status's `Recent Activity:` keeps the CLI's final reply of each of the last five
    # turns, as the CLI reported it (the fake model's closing texts, in order).
    replies = [(r.get("role"), r.get("text")) for r in status.get("recentReplies") or []]
    assert replies == [("auditor", "Audit 1: one finding."), ("coder", "Fixed."), ("auditor", "Audit 2: clean."),
                       ("coder", "Section two written."), ("auditor", "Audit 3: clean.")], replies
    # `Files changed:`, counted at the last turn's end: work.txt's two lines.
    assert status.get("filesChanged") == {"files": 1, "added": 2, "deleted": 0}, status.get("filesChanged")

    # The fake model server saw only what the script expected.
    assert not [q for q in reqs if q["mismatch"] or q["unknown_tools"] or q["server_error"]], reqs
    main = [q for q in reqs if not q["aux"] and not q["limit"]]
    assert {q["conversation"] for q in main} == {"coder-1", "auditor-1", "coder-2", "auditor-2"}, main

    # Worktree commits: one checkpoint per section, with the coder's edits.
    assert res["log"] == ["section 2: Section two", "section 1: Section one", "init"], res["log"]
    assert res["work"] == "section one (fixed)\nsection two\n"

    # The auditor's tools went through MCP (the Forge server the preset wired in).
    if res["mcp"]:
        calls = [c for q in main if q["conversation"] == "auditor-1" for c in (q["calls"] or [])]
        names = [c.get("name", "").replace("_", "-") for c in calls]
        assert any("review-write" in n for n in names), calls
        seen_auditor = "".join(q["latest_input"] for q in main if q["conversation"] == "auditor-1")
        assert "Stored review finding" in seen_auditor or "E2E-FINDING" in seen_auditor, seen_auditor[-1500:]

    # Every tool name the CLI sent is one the providers take (letters, digits, `_`, `-`;
    # Gemini also `.` and `:`; at most 64 characters), the user's plugin tool among them and
    # the one whose name is too long not; its result reached the model, from the sandbox.
    if res["mcp"]:
        names = sorted({n for q in main for n in q["tool_names"]})
        allowed = r"[A-Za-z0-9_.:-]{1,64}" if cli == "gemini" else r"[A-Za-z0-9_-]{1,64}"
        assert not [n for n in names if not re.fullmatch(allowed, n)], names
        assert any(n.endswith("e2e__Echo") for n in names), names
        assert not [n for n in names if "Echoxxxx" in n], names
        seen_plugin = "".join(q["latest_input"] for q in main if q["conversation"] == "auditor-2")
        assert 'E2E-PLUGIN-ECHO {"text":"hi"}' in seen_plugin, seen_plugin[-1500:]
        if res["sandbox"]:
            assert "outside=refused" in seen_plugin and not res["plugin_outside_written"], seen_plugin[-1500:]
        # Forge's grep found the two lines (the second written by the coder's apply-patch
        # through MCP, checked in work.txt below), and the auditor's own patch was refused
        # with a reason the model sees, which is no assistant error.
        assert "work.txt:1: section one (fixed)" in seen_plugin and "work.txt:2: section two" in seen_plugin, \
            seen_plugin[-1500:]
        assert "auditors review changes; they do not write them" in seen_plugin, seen_plugin[-1500:]
        # The coder's edit went through Forge's apply-patch (not a CLI's own tool of that name).
        seen_coder2 = "".join(q["latest_input"] for q in main if q["conversation"] == "coder-2")
        assert "Patch applied." in seen_coder2, seen_coder2[-1500:]

    # The finding: written by the auditor, shown to the resumed coder, deleted by the auditor.
    assert res["findings"] == []
    coder_followups = [t for n, t in res["prompts"].items() if "(continuation)" in t.splitlines()[0]
                       and "· section 1/2 ·" in t.splitlines()[0]]
    assert len(coder_followups) == 1 and "E2E-FINDING" in coder_followups[0], list(res["prompts"])

    # The coder's shell ran in the loop's sandbox, in the worktree; a write outside failed.
    seen = "".join(q["latest_input"] for q in main if q["conversation"] == "coder-1")
    assert re.search(r"pwd=\S+/worktrees/e2e sandbox=1 dotenv=no apikey=unset", seen), seen[-1500:]
    assert "sshkey=hidden" in seen and "environ-clean" in seen, seen[-1500:]
    assert "outside-refused" in seen and not res["outside_written"], seen[-1500:]
    assert res["sandbox"], "bubblewrap cannot start a sandbox here"

    # The repository's own agent configuration (hooks, MCP servers, plugins) ran nothing on
    # the host: the project is not trusted.
    assert res["planted"] == [], res["planted"]
    # Nor did it send a file from outside the worktree to the model (Codex's project
    # `model_instructions_file`, for a project the user trusted in Codex).
    assert not [q for q in reqs if "E2E-OUTSIDE-SECRET" in (q.get("seen") or [])], \
        [(q["conversation"], q.get("seen")) for q in reqs]
    # The user's secrets (a key under ~/.ssh, a secret-named variable) reached no request:
    # the coder's shell saw neither (the agent CLI itself runs on the host, or has its own).
    assert not [q for q in reqs if {"E2E-SSH-KEY", "sk-e2e-env-key"} & set(q.get("seen") or [])], \
        [(q["conversation"], q.get("seen")) for q in reqs]
    # ... while its instruction file (AGENTS.md, CLAUDE.md, GEMINI.md) still reached the model.
    assert all("E2E-PROJECT-INSTRUCTIONS" in (q.get("seen") or []) for q in main if q["conversation"] == "coder-1"), \
        [(q["conversation"], q.get("seen")) for q in main]

    # The resumed sessions continued the CLI's own session (their history came along).
    assert len(res["cli_sessions"]) == 4, res["cli_sessions"]
    for conv in ("coder-1", "auditor-1"):
        resumed = [q for q in main if q["conversation"] == conv and q["segment"] == 1]
        assert resumed and resumed[0]["assistant_turns"] >= 3, resumed

    # A provider limit mid-audit: the auditor's first model is over its quota; the same
    # audit goes on with the fallback model, and it is not counted as an assistant error.
    limited = [q for q in reqs if q["model"] == "quota-model"]
    assert limited and all(q["status"] == 429 for q in limited), limited
    assert status.get("errorCount") == 0, status
    assert any(q["conversation"] == "auditor-1" and q["model"] != "quota-model" for q in main), main

    # The engine's time per turn change (previous CLI process ended -> next one started),
    # reported, not asserted (this machine's load varies); docs/performance-loops.md.
    gaps = sorted(res.get("gaps_ms") or [])
    if gaps:
        os.write(2, ("\n%s: engine time between turns (ms): median %.1f, max %.1f over %d; CLI turns median %.0f ms\n"
                     % (cli, gaps[len(gaps) // 2], gaps[-1], len(gaps),
                        sorted(res["turns_ms"])[len(res["turns_ms"]) // 2])).encode())

    # Usage rows: one per session (model, role), equal to what the server reported.
    model = pins.CLIS[cli]["model"]
    rows = [r for r in res["usage"] if r["input"] or r["output"] or r["cache_read"]]
    assert sorted(r["role"] for r in rows) == ["auditor", "auditor", "code", "code"], rows
    assert {r["model"] for r in rows} == {model}, rows
    for role, prefix in (("code", "coder-"), ("auditor", "auditor-")):
        for field in ("input", "output", "cache_read"):
            got = sum(r[field] for r in rows if r["role"] == role)
            want = sum((q["usage"] or {}).get(field, 0) for q in main if q["conversation"].startswith(prefix))
            assert got == want, "%s %s: rows %s, server %s; %s" % (role, field, got, want, rows)
