"""The real agent CLIs against the fake model server (try/<cli>.sh), opt-in.

They install pinned CLIs from npm into the cache folder and take 10-60 s each, so they run
only with FORGE_AGENT_CLIS=1 (or a comma-separated list of CLI names); otherwise they are
reported as skipped.
"""

import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WANTED = os.environ.get("FORGE_AGENT_CLIS", "")


@pytest.mark.parametrize("cli", ["opencode", "codex", "claude", "gemini"])
def test_cli_demo(cli):
    if WANTED not in ("1", "all") and cli not in WANTED.split(","):
        pytest.skip("agent CLI demos run with FORGE_AGENT_CLIS=1 (or =%s)" % cli)
    proc = subprocess.run(["bash", os.path.join(HERE, "try", cli + ".sh")], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS " + cli in proc.stdout
