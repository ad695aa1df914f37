#!/usr/bin/env bash
# A scripted agent for loop tests: one turn per run. It reads the prompt from stdin,
# acts by role, hands off with `forge-lsp call`, and prints a short reply.
#   coder:   appends a line to work.txt for the current section, hands off.
#   auditor: clean audit with a summary (sectioned) or without (non-sectioned).
#   post_action: records loop-complete.
set -euo pipefail
prompt=$(cat)
log=${FORGE_AGENT_LOG:-/dev/null}
echo "role=$FORGE_ROLE session=$FORGE_SESSION_ID loop=$FORGE_LOOP args=$*" >> "$log"
# Report usage like a real agent would (one JSON line per assistant message).
if [ -n "${FORGE_USAGE_FILE:-}" ]; then
  echo "{\"model\":\"test/${FORGE_ROLE}\",\"input\":1000,\"output\":100,\"cost\":0.01}" >> "$FORGE_USAGE_FILE"
fi
case "$FORGE_ROLE" in
  coder)
    echo "turn by $FORGE_SESSION_ID" >> work.txt
    forge-lsp call loop-handoff '{"changes":[{"summary":"appended to work.txt","reason":"the section asks for it"}],"verification":[{"command":"cat work.txt","cwd":".","outcome":"pass","changedAfter":false}]}' >> "$log"
    ;;
  auditor)
    if grep -q "forge-section" <<<"$prompt" || grep -qi "section [0-9]*/[0-9]*" <<<"$prompt"; then
      forge-lsp call loop-handoff '{"summary":{"done":["work.txt updated"]}}' >> "$log" 2>&1 || forge-lsp call loop-handoff '{}' >> "$log"
    else
      forge-lsp call loop-handoff '{}' >> "$log"
    fi
    ;;
  post_action)
    forge-lsp call loop-complete '{"outcome":"completed","steps":[{"name":"check","status":"done"}]}' >> "$log"
    ;;
esac
echo "done"
