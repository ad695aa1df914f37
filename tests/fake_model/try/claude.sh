#!/usr/bin/env bash
# Claude Code against the fake model server, offline: (a) Anthropic Messages API via
# ANTHROPIC_BASE_URL, (b) one shell command through CLAUDE_CODE_SHELL_PREFIX, (c) a stdio MCP
# tool, (d) usage from the stream-json `result` event, (e) a resumed session, plus (f) the
# provider-limit texts. Exits 0 when everything holds.
source "$(dirname "$0")/common.sh"
ensure_cli claude "@anthropic-ai/claude-code@${CLAUDE_VERSION:-2.1.332}" claude
enter_netns "$@"
setup
write_demo_script
start_server "$T/script.json"

# MCP servers for --mcp-config: a JSON string here (a file name works too).
MCP_JSON=$(printf '{"mcpServers": {"fake": {"type": "stdio", "command": "python3", "args": ["%s"], "env": {"ECHO_MCP_LOG": "%s"}}}}' \
  "$FM_DIR/mcp_echo.py" "$ECHO_MCP_LOG")
# The shell prefix gets the whole command line as ONE argument, to be run by a shell.
cat > "$T/prefix.sh" <<EOF2
#!/bin/bash
echo "prefix: \$#" >> "$T/prefix.log"
exec /bin/bash -c "\$1"
EOF2
chmod +x "$T/prefix.sh"

export ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT ANTHROPIC_API_KEY=sk-fake-key
export DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 \
       CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 ENABLE_TOOL_SEARCH=false
export CLAUDE_CODE_SHELL_PREFIX=$T/prefix.sh
export PATH=$SHIM:$PATH SHELL=$SHIM/sh

SID=$(python3 -c 'import uuid; print(uuid.uuid4())')
ARGS=(-p --output-format stream-json --verbose --model claude-fake
      --mcp-config "$MCP_JSON" --strict-mcp-config
      --allowedTools Bash Edit Write mcp__fake)
cd "$WORK"

# (a)-(d): first turn, prompt on stdin, session id chosen by us (must be a UUID).
start=$(log_lines); t0=$(date +%s%N)
echo "FAKE-DEMO: write out.txt, then call the echo tool." \
  | "$CLI_BIN" "${ARGS[@]}" --session-id "$SID" > "$T/run1.jsonl" 2> "$T/run1.err" \
  || fail "first run exited $?: $(tail -c 600 "$T/run1.err")"
echo "   first turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(log_lines)" -gt "$start" ] || fail "(a) no request reached the fake server"
ok "(a) Claude Code talked to the fake server ($(log_where "$start" 'e["path"]' | sort -u | tr '\n' ' '))"
check_common
grep -q '^prefix: 1$' "$T/prefix.log" 2>/dev/null || fail "CLAUDE_CODE_SHELL_PREFIX was not used"
ok "    the command ran through CLAUDE_CODE_SHELL_PREFIX (one argument: the command line)"
log_where "$start" '"token=tok-" in e["latest_input"]' | grep -q True \
  || fail "the shell command did not see FORGE_SESSION_TOKEN"
ok "    the command saw FORGE_SESSION_TOKEN"

# (d) usage: the final `result` event; per invocation in .usage, per model in .modelUsage.
read -r in1 out1 cr1 <<<"$(jq -r 'select(.type=="result") | "\(.usage.input_tokens) \(.usage.output_tokens) \(.usage.cache_read_input_tokens)"' "$T/run1.jsonl")"
exp_in=$(log_sum "$start" input); exp_out=$(log_sum "$start" output); exp_cr=$(log_sum "$start" cache_read)
[ "$in1 $out1 $cr1" = "$exp_in $exp_out $exp_cr" ] \
  || fail "(d) usage $in1/$out1/$cr1 != server's $exp_in/$exp_out/$exp_cr"
ok "(d) result.usage = sum of this run's responses: input=$in1 output=$out1 cacheRead=$cr1"
[ "$(jq -r 'select(.type=="result") | .session_id' "$T/run1.jsonl")" = "$SID" ] || fail "session id not kept"

# (e) resume the same session.
start2=$(log_lines); t0=$(date +%s%N)
echo "SECOND-TURN: anything else?" \
  | "$CLI_BIN" "${ARGS[@]}" --resume "$SID" > "$T/run2.jsonl" 2> "$T/run2.err" \
  || fail "resumed run exited $?: $(tail -c 600 "$T/run2.err")"
echo "   resumed turn: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
[ "$(jq -r 'select(.type=="result") | .result' "$T/run2.jsonl")" = "resumed ok" ] || fail "(e) no resumed reply"
[ "$(log_where "$start2" 'e.get("assistant_turns")' | head -1)" -ge 3 ] || fail "(e) the history was not resumed"
in2=$(jq -r 'select(.type=="result") | .usage.input_tokens' "$T/run2.jsonl")
tot=$(jq -r 'select(.type=="result") | [.modelUsage[].inputTokens] | add' "$T/run2.jsonl")
[ "$in2" = "$(log_sum "$start2" input)" ] || fail "(e) resumed usage is not per invocation"
[ "$tot" = "$(log_sum 0 input)" ] || fail "(e) modelUsage is not the session total ($tot)"
ok "(e) resumed session $SID: reply 'resumed ok', history kept; usage=$in2 (this run), modelUsage=$tot (whole session)"

# (f) provider limits: the error is in the result event on stdout (stderr stays quiet).
for m in quota-model forbidden-model; do
  rc=0; echo "FAKE-DEMO: x" | "$CLI_BIN" -p --output-format stream-json --verbose --model "$m" \
    > "$T/limit-$m.jsonl" 2> "$T/limit-$m.err" || rc=$?
  [ "$rc" != 0 ] || fail "(f) $m: exit 0"
  msg=$(jq -r 'select(.type=="result") | "\(.api_error_status) \(.result)"' "$T/limit-$m.jsonl")
  case "$m:$msg" in
    quota-model:"429 "*"exceeded your current quota"*) ;;
    forbidden-model:"403 "*) ;;
    *) fail "(f) $m: unexpected result: $msg";;
  esac
  ok "(f) $m: exit $rc, result: $msg"
done
echo "PASS claude $("$CLI_BIN" --version 2>/dev/null)"
