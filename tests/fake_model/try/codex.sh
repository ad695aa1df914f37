#!/usr/bin/env bash
# Codex CLI against the fake model server, offline: (a) Responses API through a custom
# model provider in $CODEX_HOME/config.toml, (b) one shell command (Codex starts /bin/bash
# itself), (c) a stdio MCP tool, (d) usage from `turn.completed` (running totals of the
# thread), (e) `codex exec resume <thread id>`, plus (f) the provider-limit texts and (g)
# Codex's own workspace-write sandbox (its bundled bwrap) refusing a write outside the work dir.
source "$(dirname "$0")/common.sh"
ensure_cli codex "@openai/codex@${CODEX_VERSION:-0.171.0}" codex
enter_netns "$@"
setup
write_demo_script
start_server "$T/script.json"

export CODEX_HOME=$HOME/.codex FAKE_MODEL_API_KEY=sk-fake-key
mkdir -p "$CODEX_HOME"
cat > "$CODEX_HOME/config.toml" <<TOML
model = "${CODEX_MODEL:-fake-model}"
model_provider = "fake"
# Run commands as \`/bin/bash -c\` (not a login shell): no profile files, no surprises.
allow_login_shell = false
check_for_update_on_startup = false

# Without this every \`codex exec\` lingers ~5 s at exit trying to flush analytics.
[analytics]
enabled = false

[model_providers.fake]
name = "Fake model server"
base_url = "http://127.0.0.1:$PORT/v1"
wire_api = "responses"
env_key = "FAKE_MODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0

# Keep the whole environment: the default policy drops names containing KEY, SECRET or
# TOKEN (FORGE_SESSION_TOKEN among them).
[shell_environment_policy]
inherit = "all"
ignore_default_excludes = true

[mcp_servers.fake]
command = "python3"
args = ["$FM_DIR/mcp_echo.py"]
env = { ECHO_MCP_LOG = "$ECHO_MCP_LOG" }
# MCP servers get only a few default variables (HOME, PATH, …): pass Forge's identity on.
env_vars = ["FORGE_SESSION_ID", "FORGE_SESSION_TOKEN", "FORGE_LSP_SOCKET"]
TOML
export PATH=$SHIM:$PATH SHELL=$SHIM/sh
cd "$WORK"
ARGS=(exec --json --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check)

# (a)-(d): first turn, prompt on stdin ("-").
start=$(log_lines); t0=$(date +%s%N)
echo "FAKE-DEMO: write out.txt, then call the echo tool." \
  | "$CLI_BIN" "${ARGS[@]}" - > "$T/run1.jsonl" 2> "$T/run1.err" \
  || fail "first run exited $?: $(tail -c 600 "$T/run1.err")"
echo "   first turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(log_lines)" -gt "$start" ] || fail "(a) no request reached the fake server"
ok "(a) Codex talked to the fake server ($(log_where "$start" 'e["path"]' | sort -u | tr '\n' ' '))"
check_common
cmd=$(jq -r 'select(.type=="item.completed" and .item.type=="command_execution") | .item.command' "$T/run1.jsonl")
case "$cmd" in "/bin/bash -c "*) ;; *) fail "unexpected command launch: $cmd";; esac
if [ -s "$T/shim.log" ] && grep -q 'out.txt' "$T/shim.log"; then fail "the PATH shim was used (unexpected)"; fi
ok "    the command ran as: $cmd (the PATH/SHELL shim is not used)"
log_where "$start" '"token=tok-" in e["latest_input"]' | grep -q True \
  || fail "the shell command did not see FORGE_SESSION_TOKEN"
ok "    the command saw FORGE_SESSION_TOKEN (shell_environment_policy)"

# (d) usage: turn.completed carries the thread's running totals.
TID=$(jq -r 'select(.type=="thread.started") | .thread_id' "$T/run1.jsonl")
read -r in1 cin1 out1 <<<"$(jq -r 'select(.type=="turn.completed") | "\(.usage.input_tokens) \(.usage.cached_input_tokens) \(.usage.output_tokens)"' "$T/run1.jsonl")"
exp_in=$(( $(log_sum 0 input) + $(log_sum 0 cache_read) ))
[ "$in1 $cin1 $out1" = "$exp_in $(log_sum 0 cache_read) $(log_sum 0 output)" ] \
  || fail "(d) usage $in1/$cin1/$out1 does not match the server's"
ok "(d) turn.completed usage: input=$in1 (cached $cin1 included) output=$out1"

# (e) resume the thread by id; the prompt again on stdin.
start2=$(log_lines); t0=$(date +%s%N)
echo "SECOND-TURN: anything else?" \
  | "$CLI_BIN" "${ARGS[@]}" resume "$TID" - > "$T/run2.jsonl" 2> "$T/run2.err" \
  || fail "resumed run exited $?: $(tail -c 600 "$T/run2.err")"
echo "   resumed turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
reply=$(jq -r 'select(.type=="item.completed" and .item.type=="agent_message") | .item.text' "$T/run2.jsonl")
[ "$reply" = "resumed ok" ] || fail "(e) no resumed reply: $reply"
[ "$(log_where "$start2" 'e.get("assistant_turns")' | head -1)" -ge 3 ] || fail "(e) the history was not resumed"
in2=$(jq -r 'select(.type=="turn.completed") | .usage.input_tokens' "$T/run2.jsonl")
[ "$in2" = "$(( $(log_sum 0 input) + $(log_sum 0 cache_read) ))" ] || fail "(e) resumed usage is not a running total ($in2)"
ok "(e) resumed thread $TID: reply 'resumed ok'; usage input=$in2 = running total over both runs"

# (f) provider limits: the error is on stdout ({"type":"error"} and {"type":"turn.failed"}), exit 1.
for m in quota-model forbidden-model; do
  rc=0; echo "FAKE-DEMO: x" | "$CLI_BIN" "${ARGS[@]}" --ephemeral -m "$m" - \
    > "$T/limit-$m.jsonl" 2> "$T/limit-$m.err" || rc=$?
  [ "$rc" != 0 ] || fail "(f) $m: exit 0"
  msg=$(jq -r 'select(.type=="turn.failed") | .error.message' "$T/limit-$m.jsonl")
  case "$m:$msg" in
    quota-model:"Quota exceeded. Check your plan and billing details.") ;;
    forbidden-model:"unexpected status 403 Forbidden"*) ;;
    *) fail "(f) $m: unexpected turn.failed message: $msg";;
  esac
  ok "(f) $m: exit $rc, turn.failed: $msg"
done

# (g) Codex's own sandbox (workspace-write): the work dir is writable, the rest is not.
cat > "$T/script-g.json" <<'JSON'
{"conversations": [{"id": "g", "marker": "FAKE-SANDBOX", "turns": [
  {"shell": "echo inside > inside.txt; echo outside > \"$OUTSIDE\" 2>&1; echo rc=$?"},
  {"text": "sandbox checked"}]}]}
JSON
cp "$T/script-g.json" "$T/script.json"   # the server reloads a changed script
export OUTSIDE=$T/outside.txt
rc=0; echo "FAKE-SANDBOX: try it" | "$CLI_BIN" exec --json --skip-git-repo-check --ephemeral \
  --sandbox workspace-write - > "$T/run-g.jsonl" 2> "$T/run-g.err" || rc=$?
[ "$rc" = 0 ] || fail "(g) sandboxed run exited $rc: $(tail -c 400 "$T/run-g.err")"
[ -f "$WORK/inside.txt" ] || fail "(g) the sandboxed command could not write the work dir: $(jq -c 'select(.item.type=="command_execution")' "$T/run-g.jsonl" | tail -1)"
[ ! -e "$OUTSIDE" ] || fail "(g) the sandboxed command wrote outside the work dir"
ok "(g) --sandbox workspace-write: inside.txt written, $OUTSIDE refused"
echo "PASS codex $("$CLI_BIN" --version 2>/dev/null | tail -1)"
