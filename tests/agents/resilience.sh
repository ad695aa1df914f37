#!/bin/bash
# Absolute shebang: the agent process runs on the host like an agent CLI (its state directory
# is outside the sandbox); the shells it starts through PATH / $SHELL are the sandbox shims.
# A scripted agent for the loop resilience tests (server/tests/loops_resilience.rs): one turn
# per run. The server starts it as
#   resilience.sh --session={session} --resume={resume} --model={model}
# in the loop's worktree with FORGE_ROLE, FORGE_SESSION_ID, FORGE_USAGE_FILE, ... and the
# prompt on stdin (docs/agents.md). Knobs come from the server's environment:
#   FORGE_TEST_STATE     a per-test directory: the turn logs, counters, pid and prompt files
#   FORGE_TEST_SCENARIO  what to do (default clean):
#     clean     coder appends to work.txt and hands off; auditor hands off clean (with a
#               summary in a sectioned loop)
#     hang      every turn prints nothing and sleeps 60 s (its sleep's pid is appended to
#               `sleepers`); once the file `behave` exists, turns act like clean (printing a
#               line every 100 ms while they run); while the file `hang-writes` exists, each
#               turn first writes `hung-<turn>.txt` (one line) in the worktree
#     starthang every turn prints one line at once (as agent CLIs print their start events)
#               and then hangs as `hang` does
#     listhang  every turn lists the Forge tools at once (as an agent CLI's MCP server does
#               when it starts: `forge-lsp call tools`) and then hangs as `hang` does
#     handhang  the coder's first turn hands off, then stays busy (prints nothing, sleeps
#               60 s); later turns act like clean
#     chatty    every turn prints a line every 100 ms while it runs; the coder works for
#               ~1.5 s before it hands off
#     fixonce   each section's (or the plan's) first audit writes a bug on work.txt:1 and
#               hands off dirty; the next audit deletes it and hands off clean. While the
#               file `hold-s1` exists, section 2's first coder turn writes `coder-s1-waiting`
#               and waits for `go-s1`
#     recur     every audit writes the same bug on work.txt:1 (never deleted), hands off dirty
#     limit     an auditor on a model listed in the file `limited` (one per line) fails with
#               a provider limit (exit 1, "usage limit reached" on stderr); otherwise it
#               hands off clean, first (while the file `hold-audit` exists) writing
#               `auditor-waiting` and waiting for `go-audit`
#     coderlimit the coder fails with a provider limit
#     modelerr  the coder's first turn fails with a model error (exit 1, "model not found" on
#               stderr); later turns act like fixonce
#   FORGE_TEST_CONTEXT=N every coder turn also reports a context of N tokens of a 1000-token
#                        window (for the standby compaction check)
#   FORGE_TEST_USAGE=1   every coder or auditor turn that does not fail appends two usage
#                        lines to FORGE_USAGE_FILE (coder: one a/x, one b/y; auditor: one b/y,
#                        one without a model)
# Every turn appends "<n> <role> <session> <pid>" to `turns` (the format of scenario.sh),
# "<n> <role> session=<{session}> resume=<{resume}> model=<{model}>" to `argv`, and saves its
# prompt as prompt-<n>.
set -uo pipefail
state=${FORGE_TEST_STATE:?FORGE_TEST_STATE must be set}
scenario=${FORGE_TEST_SCENARIO:-clean}

# bump NAME: increments the counter NAME (a file in $state) and prints the new value.
bump() {
  local n
  n=$(($(cat "$state/count-$1" 2> /dev/null || echo 0) + 1))
  echo "$n" > "$state/count-$1"
  echo "$n"
}

# Logged first, before reading the prompt: a turn killed early is still counted.
turn=$(bump turns)
echo "$turn $FORGE_ROLE $FORGE_SESSION_ID $$" >> "$state/turns"
session='' resume='' model=''
for a in "$@"; do
  case $a in
    --session=*) session=${a#*=} ;;
    --resume=*) resume=${a#*=} ;;
    --model=*) model=${a#*=} ;;
  esac
done
echo "$turn $FORGE_ROLE session=$session resume=$resume model=$model" >> "$state/argv"
prompt=$(cat)
printf '%s' "$prompt" > "$state/prompt-$turn"

# await FILE: waits until $state/FILE exists (at most ~60 s).
await() {
  for _ in $(seq 600); do
    [ -e "$state/$1" ] && return 0
    sleep 0.1
  done
  return 1
}

# The 0-based index of the current section, or "none" in a non-sectioned loop.
section() {
  local out
  out=$(forge-lsp call section-read '{}' 2> /dev/null) || { echo none; return; }
  sed -n 's/^  "index": \([0-9]*\),$/\1/p' <<< "$out"
}

coder_handoff() { # coder_handoff SUMMARY
  forge-lsp call loop-handoff "{\"changes\":[{\"summary\":\"$1\",\"reason\":\"the plan asks for it\"}],\
\"verification\":[{\"command\":\"cat work.txt\",\"cwd\":\".\",\"outcome\":\"pass\",\"changedAfter\":false}]}"
}

audit_clean() {
  if [ "$(section)" = none ]; then
    forge-lsp call loop-handoff '{}'
  else
    forge-lsp call loop-handoff '{"summary":{"done":["work.txt updated"],"deviations":[],"followUps":["none"]}}'
  fi
}

code() { # one line per turn in work.txt, then the handoff
  echo "turn $turn: section $(section) by $FORGE_SESSION_ID" >> work.txt
  coder_handoff "appended turn $turn to work.txt"
}

audit_bug() { # the same bug at work.txt:1 (a repeated write finds it already stored)
  forge-lsp call review-write "{\"file\":\"work.txt\",\"line\":1,\"severity\":\"bug\",\"description\":\"work.txt is still wrong\",\"scenario\":\"read work.txt\"}" \
    || true
  forge-lsp call loop-handoff '{"notes":"one bug left"}'
}

report_usage() { # the usage this turn reports (FORGE_TEST_USAGE=1)
  # FORGE_TEST_CONTEXT=N: the coder reports a context of N tokens of a 1000-token window.
  if [ -n "${FORGE_TEST_CONTEXT:-}" ] && [ "$FORGE_ROLE" = coder ]; then
    echo "{\"input\":$FORGE_TEST_CONTEXT,\"contextWindow\":1000}" >> "$FORGE_USAGE_FILE"
  fi
  [ "${FORGE_TEST_USAGE:-0}" = 1 ] || return 0
  case $FORGE_ROLE in
    coder)
      echo '{"model":"a/x","input":1000,"output":200,"reasoning":50,"cacheRead":300,"cacheWrite":100,"cost":0.0125}' >> "$FORGE_USAGE_FILE"
      echo '{"model":"b/y","input":500,"output":100,"cost":0.005}' >> "$FORGE_USAGE_FILE"
      ;;
    auditor)
      echo '{"model":"b/y","input":2000,"output":40,"cacheRead":1000,"cost":0.02}' >> "$FORGE_USAGE_FILE"
      echo '{"input":10,"output":5,"cost":0.001}' >> "$FORGE_USAGE_FILE"
      ;;
  esac
}

# A ticker: a line on stdout every 100 ms until the turn ends (activity for the watchdog).
ticker=''
start_ticker() {
  (
    for _ in $(seq 600); do
      echo "still working ($turn)"
      sleep 0.1
    done
  ) &
  ticker=$!
}
stop_ticker() {
  if [ -n "$ticker" ]; then
    kill "$ticker" 2> /dev/null
    wait "$ticker" 2> /dev/null
    ticker=''
  fi
}
trap stop_ticker EXIT

if [ "$scenario" = hang ] && [ -e "$state/behave" ]; then
  scenario=clean
  start_ticker
fi

case "$FORGE_ROLE:$scenario" in
  *:starthang)
    echo "started"
    sleep 60 &
    echo $! >> "$state/sleepers"
    wait $!
    exit 0
    ;;
  *:listhang)
    forge-lsp call tools '{}' > /dev/null
    sleep 60 &
    echo $! >> "$state/sleepers"
    wait $!
    exit 0
    ;;
  *:hang)
    if [ -e "$state/hang-writes" ]; then
      echo "hung turn $turn" > "hung-$turn.txt"
    fi
    sleep 60 &
    echo $! >> "$state/sleepers"
    wait $!
    exit 0
    ;;
  coder:handhang)
    if [ "$(bump coder-turns)" = 1 ]; then
      echo "turn $turn" >> work.txt
      coder_handoff "appended turn $turn to work.txt"
      sleep 60 &
      echo $! >> "$state/sleepers"
      wait $!
      exit 0
    fi
    code
    ;;
  *:chatty)
    start_ticker
    if [ "$FORGE_ROLE" = coder ]; then
      date +%s%3N > "$state/chatty-start"
      sleep 1.5
      date +%s%3N > "$state/chatty-end"
      code
    else
      audit_clean
    fi
    ;;
  coder:coderlimit)
    echo "Error: usage limit reached for $model" >&2
    exit 1
    ;;
  coder:modelerr)
    if [ "$(bump coder-turns)" = 1 ]; then
      echo "Error: model not found: $model" >&2
      exit 1
    fi
    code
    ;;
  coder:fixonce)
    k=$(section)
    if [ "$k" = 1 ] && [ -e "$state/hold-s1" ] && [ "$(bump coder-s1)" = 1 ]; then
      echo "$FORGE_SESSION_ID" > "$state/coder-s1-waiting"
      await go-s1
    fi
    report_usage
    code
    ;;
  coder:*)
    report_usage
    code
    ;;
  auditor:fixonce | auditor:modelerr)
    k=$(section)
    report_usage
    if [ "$(bump "audits-s$k")" = 1 ]; then
      audit_bug
    else
      forge-lsp call review-delete '{"file":"work.txt","line":1}'
      audit_clean
    fi
    ;;
  auditor:recur)
    audit_bug
    ;;
  auditor:limit)
    if grep -qxF -- "$model" "$state/limited" 2> /dev/null; then
      echo "Error: usage limit reached for $model" >&2
      exit 1
    fi
    if [ -e "$state/hold-audit" ]; then
      echo "$model" > "$state/auditor-waiting"
      await go-audit
    fi
    report_usage
    audit_clean
    ;;
  auditor:*)
    report_usage
    audit_clean
    ;;
esac
echo "turn $turn done"
