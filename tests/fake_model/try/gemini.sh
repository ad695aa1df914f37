#!/usr/bin/env bash
# Gemini CLI against the fake model server, offline: (a) the Gemini API via
# GOOGLE_GEMINI_BASE_URL (auth type gemini-api-key), (b) one shell command (Gemini runs
# `bash -c` found on PATH), (c) a stdio MCP tool, (d) usage from `--output-format json`
# stats (per invocation), (e) `--resume <session uuid>`, plus (f) the provider-limit texts.
source "$(dirname "$0")/common.sh"
ensure_cli gemini "@google/gemini-cli@${GEMINI_VERSION:-0.61.0}" gemini
enter_netns "$@"
setup
write_demo_script
start_server "$T/script.json"

# Settings from a file named by GEMINI_CLI_SYSTEM_SETTINGS_PATH (the "system" layer): no
# need to write into the user's ~/.gemini. Gemini skips that file when a parent directory is
# group- or world-writable (/tmp, /var/tmp): then the user file $HOME/.gemini/settings.json
# (HOME is a temp dir here) is used instead.
settings=$T/gemini-settings.json
d=$T
while [ "$d" != / ]; do
  if [ -n "$(find "$d" -maxdepth 0 -perm /022 2>/dev/null)" ]; then settings=$HOME/.gemini/settings.json; break; fi
  d=$(dirname "$d")
done
mkdir -p "$(dirname "$settings")"
cat > "$settings" <<JSON
{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "mcpServers": {
    "fake": {"command": "python3", "args": ["$FM_DIR/mcp_echo.py"],
             "env": {"ECHO_MCP_LOG": "$ECHO_MCP_LOG", "FORGE_SESSION_TOKEN": "\$FORGE_SESSION_TOKEN"},
             "trust": true}
  },
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true}
}
JSON
[ "$settings" = "$HOME/.gemini/settings.json" ] || export GEMINI_CLI_SYSTEM_SETTINGS_PATH=$settings
echo "   settings: $settings"
export GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:$PORT GEMINI_API_KEY=fake-key
export PATH=$SHIM:$PATH SHELL=$SHIM/sh
cd "$WORK"
SID=$(python3 -c 'import uuid; print(uuid.uuid4())')
ARGS=(--output-format json --approval-mode yolo --skip-trust -m fake-gemini)

# (a)-(d): first turn; the prompt on stdin (-p "" is needed for headless mode: -p is
# appended to stdin).
start=$(log_lines); t0=$(date +%s%N)
echo "FAKE-DEMO: write out.txt, then call the echo tool." \
  | "$CLI_BIN" -p "" "${ARGS[@]}" --session-id "$SID" > "$T/run1.json" 2> "$T/run1.err" \
  || fail "first run exited $?: $(tail -c 600 "$T/run1.err")"
echo "   first turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(log_lines)" -gt "$start" ] || fail "(a) no request reached the fake server"
ok "(a) Gemini CLI talked to the fake server ($(log_where "$start" 'e["path"].split("?")[0]' | sort -u | tr '\n' ' '))"
check_common
python3 -c 'import re,sys; sys.exit(not re.search(re.escape(sys.argv[2]) + r"/bash -c [^\n]*\n(.*\n)*?.*out\.txt", open(sys.argv[1]).read()))' \
  "$T/shim.log" "$SHIM" || fail "the command did not run through the PATH shim"
ok "    the command ran as: bash -c '<wrapped command>' with bash from PATH (the shim is used)"
log_where "$start" '"token=tok-" in e["latest_input"]' | grep -q True \
  || fail "the shell command did not see FORGE_SESSION_TOKEN"
ok "    the command saw FORGE_SESSION_TOKEN"
[ "$(jq -r .session_id "$T/run1.json")" = "$SID" ] || fail "session id not kept"

# (d) usage: stats.models.<model>.tokens, summed over this invocation's requests.
read -r prompt cached input cand <<<"$(jq -r '[.stats.models[].tokens] | "\(map(.prompt)|add) \(map(.cached)|add) \(map(.input)|add) \(map(.candidates)|add)"' "$T/run1.json")"
exp_prompt=$(( $(log_sum "$start" input) + $(log_sum "$start" cache_read) ))
[ "$prompt $cached $cand" = "$exp_prompt $(log_sum "$start" cache_read) $(log_sum "$start" output)" ] \
  || fail "(d) usage prompt=$prompt cached=$cached candidates=$cand does not match the server's"
ok "(d) stats.models.*.tokens: prompt=$prompt (cached $cached included) input=$input candidates=$cand; roles: $(jq -r '[.stats.models[].roles | keys[]] | unique | join(",")' "$T/run1.json")"

# (e) resume by the session uuid.
start2=$(log_lines); t0=$(date +%s%N)
echo "SECOND-TURN: anything else?" \
  | "$CLI_BIN" -p "" "${ARGS[@]}" --resume "$SID" > "$T/run2.json" 2> "$T/run2.err" \
  || fail "resumed run exited $?: $(tail -c 600 "$T/run2.err")"
echo "   resumed turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(jq -r .response "$T/run2.json")" = "resumed ok" ] || fail "(e) no resumed reply: $(jq -c . "$T/run2.json" | head -c 300)"
[ "$(log_where "$start2" 'e.get("assistant_turns") if e.get("tools") else None' | head -1)" -ge 3 ] \
  || fail "(e) the history was not resumed"
p2=$(jq -r '[.stats.models[].tokens.prompt] | add' "$T/run2.json")
[ "$p2" = "$(( $(log_sum "$start2" input) + $(log_sum "$start2" cache_read) ))" ] || fail "(e) resumed usage is not per invocation"
ok "(e) resumed session $SID: reply 'resumed ok', history kept, usage prompt=$p2 (this run only)"

# (f) provider limits: a JSON error object on STDERR (stdout empty), exit code = HTTP status & 255.
for m in quota-model forbidden-model; do
  rc=0; echo "FAKE-DEMO: x" | "$CLI_BIN" -p "" --output-format json --approval-mode yolo --skip-trust -m "$m" \
    > "$T/limit-$m.out" 2> "$T/limit-$m.err" || rc=$?
  msg=$(sed -n '/^{/,$p' "$T/limit-$m.err" | jq -r '"\(.error.code) \(.error.message)"' 2>/dev/null || true)
  case "$m:$rc:$msg" in
    quota-model:173:"429 You have exhausted your daily quota on this model.") ;;
    forbidden-model:147:"403 "*PERMISSION_DENIED*) ;;
    *) fail "(f) $m: exit $rc, unexpected error: $msg";;
  esac
  ok "(f) $m: exit $rc, stderr JSON error: $msg"
done
echo "PASS gemini $("$CLI_BIN" --version 2>/dev/null)"
