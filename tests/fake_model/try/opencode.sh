#!/usr/bin/env bash
# OpenCode against the fake model server, offline: (a) OpenAI Chat Completions through a
# custom provider (@ai-sdk/openai-compatible, bundled in the binary), (b) one shell command
# (OpenCode runs it with $SHELL -c), (c) a stdio MCP tool, (d) usage from the `step_finish`
# events (per step), (e) `opencode run --session <id>`, plus (f) the provider-limit texts.
source "$(dirname "$0")/common.sh"
ensure_cli opencode "opencode-ai@${OPENCODE_VERSION:-1.18.33}" opencode
enter_netns "$@"
setup
write_demo_script
# OpenCode retries 429s itself (5 session retries honouring retry-after[-ms], else 2-30 s
# back-off: ~85 s). retry-after-ms: 0 makes it give up in seconds.
python3 - "$T/script.json" <<'PY'
import json, sys
p = sys.argv[1]; s = json.load(open(p))
for lim in s["limits"]:
    lim["retry_after_ms"] = 0
json.dump(s, open(p, "w"))
PY
start_server "$T/script.json"

# The whole configuration in one environment variable: nothing written into the project.
export OPENCODE_CONFIG_CONTENT=$(cat <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "fake/fake-model",
  "small_model": "fake/fake-model",
  "provider": {
    "fake": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Fake model server",
      "options": {"baseURL": "http://127.0.0.1:$PORT/v1", "apiKey": "sk-fake-key"},
      "models": {
        "fake-model": {"name": "Fake model", "limit": {"context": 200000, "output": 8192}},
        "quota-model": {"name": "Quota-limited model"},
        "forbidden-model": {"name": "Forbidden model"}
      }
    }
  },
  "mcp": {
    "fake": {"type": "local", "command": ["python3", "$FM_DIR/mcp_echo.py"],
             "environment": {"ECHO_MCP_LOG": "$ECHO_MCP_LOG"}, "enabled": true}
  },
  "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny", "external_directory": "deny"}
}
JSON
)
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_LSP_DOWNLOAD=1 \
       OPENCODE_DISABLE_SHARE=1
export PATH=$SHIM:$PATH SHELL=$SHIM/sh
cd "$WORK"
export PWD=$WORK   # OpenCode takes its project directory from $PWD

# (a)-(d): first turn, prompt on stdin.
start=$(log_lines); t0=$(date +%s%N)
echo "FAKE-DEMO: write out.txt, then call the echo tool." \
  | "$CLI_BIN" run --format json > "$T/run1.jsonl" 2> "$T/run1.err" \
  || fail "first run exited $?: $(tail -c 600 "$T/run1.err")"
echo "   first turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(log_lines)" -gt "$start" ] || fail "(a) no request reached the fake server"
ok "(a) OpenCode talked to the fake server ($(log_where "$start" 'e["path"]' | sort -u | tr '\n' ' '))"
check_common
grep -q "^$SHIM/sh -c .*out.txt" "$T/shim.log" 2>/dev/null || fail "the command did not run through \$SHELL"
ok "    the command ran as: \$SHELL -c '<command>' (the SHELL shim is used)"
log_where "$start" '"token=tok-" in e["latest_input"]' | grep -q True \
  || fail "the shell command did not see FORGE_SESSION_TOKEN"
ok "    the command saw FORGE_SESSION_TOKEN"

# (d) usage: one step_finish per model response, tokens per step.
SID=$(jq -r 'select(.sessionID) | .sessionID' "$T/run1.jsonl" | head -1)
read -r in1 cr1 out1 <<<"$(jq -s -r '[.[] | select(.type=="step_finish") | .part.tokens] | "\(map(.input) | add) \(map(.cache.read) | add) \(map(.output) | add)"' "$T/run1.jsonl")"
# the title request (no tools) is not a step: count only requests that offered tools
main_in=$(log_where "$start" '(e.get("usage") or {}).get("input") if e.get("tools") else None' | paste -sd+ | bc)
main_cr=$(log_where "$start" '(e.get("usage") or {}).get("cache_read") if e.get("tools") else None' | paste -sd+ | bc)
[ "$in1 $cr1" = "$main_in $main_cr" ] || fail "(d) usage $in1/$cr1 != server's $main_in/$main_cr"
ok "(d) step_finish tokens (summed over $(jq -s '[.[]|select(.type=="step_finish")]|length' "$T/run1.jsonl") steps): input=$in1 (cached excluded) cache.read=$cr1 output=$out1"
aux=$(log_where "$start" 'e["latest_input"][:40] if e.get("aux") else None')
[ -z "$aux" ] || echo "   side request (not in the JSON events): $aux"

# (e) resume by session id.
start2=$(log_lines); t0=$(date +%s%N)
echo "SECOND-TURN: anything else?" \
  | "$CLI_BIN" run --format json --session "$SID" > "$T/run2.jsonl" 2> "$T/run2.err" \
  || fail "resumed run exited $?: $(tail -c 600 "$T/run2.err")"
echo "   resumed turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
reply=$(jq -r 'select(.type=="text") | .part.text' "$T/run2.jsonl")
[ "$reply" = "resumed ok" ] || fail "(e) no resumed reply: $reply"
[ "$(log_where "$start2" 'e.get("assistant_turns") if e.get("tools") else None' | head -1)" -ge 3 ] \
  || fail "(e) the history was not resumed"
[ "$(jq -r 'select(.sessionID) | .sessionID' "$T/run2.jsonl" | sort -u)" = "$SID" ] || fail "(e) another session id"
ok "(e) resumed session $SID: reply 'resumed ok', history kept"

# (f) provider limits: an {"type":"error"} event on stdout, exit 1, nothing on stderr.
for m in quota-model forbidden-model; do
  rc=0; t0=$(date +%s%N)
  echo "FAKE-DEMO: x" | "$CLI_BIN" run --format json -m "fake/$m" > "$T/limit-$m.jsonl" 2> "$T/limit-$m.err" || rc=$?
  [ "$rc" != 0 ] || fail "(f) $m: exit 0"
  msg=$(jq -r 'select(.type=="error") | "\(.error.name) \(.error.data.statusCode) \(.error.data.message)"' "$T/limit-$m.jsonl")
  case "$m:$msg" in
    quota-model:"APIError 429 "*"exceeded your current quota"*) ;;
    forbidden-model:"APIError 403 "*) ;;
    *) fail "(f) $m: unexpected error event: $msg";;
  esac
  ok "(f) $m: exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms, error: $msg"
done
echo "PASS opencode $("$CLI_BIN" --version 2>/dev/null)"
