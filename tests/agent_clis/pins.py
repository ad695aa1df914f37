"""The agent CLIs the end-to-end tests install (pinned; the one place for their versions).

`dir` is the folder under ${FORGE_TEST_CACHE:-~/.cache/forge-lsp-tests}/agents/, `bin` the
executable under its node_modules/.bin/, `model` the model name the loop is configured with
(the fake model server answers any name), `limited` the auditor's first model, which the fake
server answers with a provider limit (insufficient quota) so the auditor falls back to `model`.
"""

CLIS = {
    "opencode": {"package": "opencode-ai", "version": "1.18.33", "bin": "opencode", "model": "fake/fake-model",
                 "limited": "fake/quota-model"},
    "codex": {"package": "@openai/codex", "version": "0.171.0", "bin": "codex", "model": "fake-model", "limited": "quota-model"},
    "claude": {"package": "@anthropic-ai/claude-code", "version": "2.1.332", "bin": "claude", "model": "claude-fake", "limited": "quota-model"},
    "gemini": {"package": "@google/gemini-cli", "version": "0.61.0", "bin": "gemini", "model": "fake-gemini", "limited": "quota-model"},
}
