#!/bin/bash
# Absolute shebang: the agent process runs on the host like an agent CLI (its state directory
# is outside the sandbox); the shells it starts through PATH / $SHELL are the sandbox shims.
# A scripted agent for the loop end-to-end tests (server/tests/loops_*.rs): one turn per run.
# The server starts it in the loop's worktree with FORGE_ROLE, FORGE_SESSION_ID, ... and the
# prompt on stdin (docs/agents.md). Knobs come from the server's environment:
#   FORGE_TEST_STATE     a per-test directory: the turn log, counters, pid and output files
#   FORGE_TEST_SCENARIO  what to do (default clean):
#     clean     coder appends to work.txt and hands off; auditor hands off clean (with a
#               summary in a sectioned loop); post_action calls loop-complete
#     finding   clean, but section 2's first audit writes a bug finding on work.txt:1 and
#               hands off without a summary; its second audit deletes it and hands off clean
#     silent    the coder only prints text (never hands off); with the file `hold-silent`,
#               its first turn waits for `silent-go` first, later turns for `silent-release`
#     postlimit the post-action turn fails with a provider limit ("429 Too Many Requests")
#               without a record; otherwise as clean
#     mute      the coder's first turn only prints text, its second prints nothing at all
#               (no reply), its third works and hands off; then as clean
#     crash     every turn fails (exit 1)
#     auditcrash every audit fails (exit 1); the coder works as clean
#     auditkill every audit is killed by a signal (SIGKILL); the coder works as clean
#     block     the auditor records a clean handoff, writes its pid to auditor.pid and waits
#               for the file `release` (at most ~20 s) before ending its turn; while the file
#               `hold-coder` exists, the coder waits for `coder-release` before working; a
#               post-action turn writes post.pid and waits for `post-release`
#     alwaysbug every audit writes a bug finding and hands off dirty
#     adjust    the first audit appends a section with plan-adjust, then hands off clean
#     identity  the coder saves its credentials, tries loop-complete, waits for `coder-go`;
#               the auditor tries loop-handoff and forge.shell (stale-shell) as the previous
#               coder session, whose turn has ended, and a call with
#               a forged token, waits for `auditor-go`, then hands off clean
#     double    the coder calls loop-handoff twice in one turn (first, then second summary)
#     abortaudit the first audit records a clean handoff, then is killed by a signal (SIGKILL)
#     abortcoder the coder is killed by a signal (SIGKILL) without handing off
#     bgchild   the coder starts `sleep 600` in the background holding its stdout (its pid in
#               bg.pid) and one that left its process group (`setsid`, esc.pid), then works and hands off as clean and exits; then as clean
#     orphan    the first coder turn starts `sleep 600` in the background (its pid in bg.pid,
#               and a `setsid` one in esc.pid),
#               with FORGE_TEST_ORPHAN_SHELL=1 also a forge.shell command that writes its
#               pid to shell.pid and sleeps, writes its own pid to coder.pid and waits for
#               `coder-release` (at most ~20 s) before working; later turns work at once
#     subagent  the coder waits for `coder-go`, tries loop-handoff (saved as first-handoff),
#               waits for `coder-go2`, hands off, then waits for `coder-go3` before it ends
#     adjustbad the first coder tries plan-adjust; the first audit waits for `adjust-go`, tries
#               plan-adjust with a completed pending section, over 24 sections, a blank
#               rationale and a two-line title (adjust-completed/-over/-blank/-title), then
#               waits for `adjust-end`
# A session without a role (execute-plan mode new-session) saves its environment as
# newsession.env, tries plan-write and plan-read (newsession-write, newsession-read) and exits.
#     holdafter the first coder turn hands off, then waits for `coder-release` before it ends
#     task      the first coder turn prints a line, tries task-status on its own loop (saved as
#               task-self), writes its pid to coder.pid and waits for
#               `coder-release` (at most ~20 s) before working; later turns work at once
# Every turn appends "<n> <role> <session> <pid>" to `turns` and saves its prompt as prompt-<n>.
# Every turn saves its arguments (the expanded agent.command after the script) as args-<n>;
# with FORGE_TEST_FAIL_MODEL=<model>, a turn whose arguments include <model> fails (exit 1,
# "model error: ...") before doing anything.
# With FORGE_TEST_USAGE=1 every turn also reports one usage line (model test/usage, 1000
# input and 10 output tokens, $0.01) to $FORGE_DATA_DIR/usage/<session>.jsonl.
set -uo pipefail
state=${FORGE_TEST_STATE:?FORGE_TEST_STATE must be set}
scenario=${FORGE_TEST_SCENARIO:-clean}
prompt=$(cat)

# bump NAME: increments the counter NAME (a file in $state) and prints the new value.
bump() {
  local n
  n=$(($(cat "$state/count-$1" 2>/dev/null || echo 0) + 1))
  echo "$n" > "$state/count-$1"
  echo "$n"
}
turn=$(bump turns)
echo "$turn $FORGE_ROLE $FORGE_SESSION_ID $$" >> "$state/turns"
printf '%s' "$prompt" > "$state/prompt-$turn"

printf '%s\n' "$*" > "$state/args-$turn"
# With $state/watch.pid (a test writes another agent's pid there), every turn first notes in
# watch.log whether that process still ran when it started ("<session> alive|dead"; a zombie
# is dead).
if [ -e "$state/watch.pid" ]; then
  w=$(cat "$state/watch.pid")
  st=$(awk '{print $3}' "/proc/$w/stat" 2>/dev/null || true)
  if [ -n "$st" ] && [ "$st" != Z ]; then echo "$FORGE_SESSION_ID alive" >> "$state/watch.log"
  else echo "$FORGE_SESSION_ID dead" >> "$state/watch.log"; fi
fi
if [ -n "${FORGE_TEST_FAIL_MODEL:-}" ]; then
  for a in "$@"; do
    [ "$a" = "$FORGE_TEST_FAIL_MODEL" ] && { echo "model error: $a is not available" >&2; exit 1; }
  done
fi

if [ "${FORGE_TEST_USAGE:-}" = 1 ]; then
  mkdir -p "$FORGE_DATA_DIR/usage"
  echo '{"model":"test/usage","input":1000,"output":10,"cost":0.01}' >> "$FORGE_DATA_DIR/usage/$FORGE_SESSION_ID.jsonl"
fi

# run NAME CMD...: runs CMD, saving its stdout, stderr and exit code as NAME.out/.err/.code.
run() {
  local name=$1
  shift
  "$@" > "$state/$name.out" 2> "$state/$name.err"
  echo $? > "$state/$name.code"
}

# await FILE: waits until $state/FILE exists (at most ~20 s).
await() {
  for _ in $(seq 200); do
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

post_action() {
  forge-lsp call loop-complete '{"outcome":"completed","steps":[{"name":"run checks","status":"done","detail":"all green"}],"followUps":["ship it"],"notes":"post-action by the test agent"}'
}

code() { # the default coder turn: one line per turn in work.txt, then the handoff
  echo "turn $turn: section $(section) by $FORGE_SESSION_ID" >> work.txt
  coder_handoff "appended turn $turn to work.txt"
}

[ "$scenario" = crash ] && { echo "boom: the test agent crashed on purpose" >&2; exit 1; }
[ "$FORGE_ROLE:$scenario" = auditor:auditcrash ] && { echo "boom: audit $turn failed on purpose" >&2; exit 1; }
[ "$FORGE_ROLE:$scenario" = auditor:auditkill ] && kill -KILL $$

case "$FORGE_ROLE:$scenario" in
  coder:mute)
    case $(bump coder-mute) in
      1) echo "I will look at it." ;;
      2) ;;
      *) code ;;
    esac
    exit 0
    ;;
  coder:silent)
    # With `hold-silent`: the first turn waits for `silent-go` (after writing
    # silent-waiting), later ones for `silent-release`.
    if [ -e "$state/hold-silent" ]; then
      if [ "$turn" = 1 ]; then echo waiting > "$state/silent-waiting"; await silent-go; else await silent-release; fi
    fi
    echo "I looked at the plan and will get back to you."
    exit 0
    ;;
  coder:identity)
    echo "$FORGE_SESSION_ID $FORGE_SESSION_TOKEN" > "$state/coder.cred.tmp"
    mv "$state/coder.cred.tmp" "$state/coder.cred"
    run coder-complete forge-lsp call loop-complete '{"outcome":"completed","steps":[{"name":"x","status":"done"}]}'
    await coder-go
    code
    ;;
  coder:block)
    [ -e "$state/hold-coder" ] && await coder-release
    code
    ;;
  coder:double)
    echo "turn $turn" >> work.txt
    run first coder_handoff "FIRST-CALL summary"
    run second coder_handoff "SECOND-CALL summary"
    ;;
  coder:bgchild)
    # Left running, and holding the turn's stdout: the turn must end when this script does.
    sleep 600 &
    echo $! > "$state/bg.pid"
    # And one that leaves the turn's process group (its pid in esc.pid).
    setsid sleep 600 > /dev/null 2>&1 &
    echo $! > "$state/esc.pid"
    code
    exit 0
    ;;
  coder:orphan)
    if [ "$turn" = 1 ]; then
      sleep 600 > /dev/null 2>&1 &
      echo $! > "$state/bg.pid"
      setsid sleep 600 > /dev/null 2>&1 &
      echo $! > "$state/esc.pid"
      if [ -n "${FORGE_TEST_ORPHAN_SHELL:-}" ]; then
        forge-lsp call shell "{\"command\":\"echo \$\$ > $state/shell.pid; exec sleep 600\",\"timeoutMs\":600000}" \
          > "$state/shell.out" 2>&1 &
      fi
      echo $$ > "$state/coder.pid"
      await coder-release
    fi
    code
    ;;
  coder:abortcoder)
    echo "working" >> work.txt
    kill -KILL $$
    ;;
  coder:subagent)
    echo "turn $turn" >> work.txt
    if [ "$turn" = 1 ]; then
      await coder-go
      run first-handoff coder_handoff "refused while a subagent is busy"
      await coder-go2
      coder_handoff "after the subagent settled"
      await coder-go3
    else
      coder_handoff "turn $turn"
    fi
    ;;
  coder:adjustbad)
    [ "$turn" = 1 ] && run coder-adjust forge-lsp call plan-adjust '{"sections":[],"rationale":"coder tries"}'
    code
    ;;
  coder:task)
    if [ "$turn" = 1 ]; then
      echo "working on it"
      run task-self forge-lsp call task-status '{}'
      echo $$ > "$state/coder.pid"
      await coder-release
    fi
    code
    ;;
  coder:holdafter)
    code
    [ "$turn" = 1 ] && await coder-release
    ;;
  coder:*)
    code
    ;;
  auditor:finding)
    k=$(section)
    if [ "$k" = 1 ] && [ "$(bump section-2-audits)" = 1 ]; then
      forge-lsp call review-write '{"file":"work.txt","line":1,"severity":"bug","description":"section 2 is not done","scenario":"read work.txt"}'
      forge-lsp call loop-handoff '{"notes":"one bug left"}'
    else
      [ "$k" = 1 ] && forge-lsp call review-delete '{"file":"work.txt","line":1}'
      audit_clean
    fi
    ;;
  auditor:block)
    audit_clean
    echo $$ > "$state/auditor.pid"
    await release
    ;;
  auditor:alwaysbug)
    forge-lsp call review-write "{\"file\":\"work.txt\",\"line\":1,\"severity\":\"bug\",\"description\":\"still wrong ($turn)\"}" \
      || true # a second audit finds the same finding already stored
    forge-lsp call loop-handoff '{"notes":"still wrong"}'
    ;;
  auditor:adjust)
    if [ "$(bump adjusts)" = 1 ]; then
      run adjust forge-lsp call plan-adjust '{"sections":[{"title":"Appended section","content":"Append the word appended to work.txt."}],"rationale":"the plan forgot a step"}'
    fi
    audit_clean
    ;;
  auditor:abortaudit)
    audit_clean
    [ "$(bump audits)" = 1 ] && kill -KILL $$
    ;;
  auditor:adjustbad)
    if [ "$(bump adjustbad)" = 1 ]; then
      if [ "$(section)" = none ]; then
        run adjust-unsectioned forge-lsp call plan-adjust '{"sections":[],"rationale":"r"}'
      else
        await adjust-go
        run adjust-completed forge-lsp call plan-adjust '{"sections":[{"title":"T","content":"C"}],"rationale":"r"}'
        secs=$(printf '{"title":"S","content":"C"},%.0s' $(seq 24))
        run adjust-over forge-lsp call plan-adjust "{\"sections\":[${secs%,}],\"rationale\":\"too many\"}"
        run adjust-blank forge-lsp call plan-adjust '{"currentSection":{"title":"T","content":"C"},"rationale":"  "}'
        run adjust-sep forge-lsp call plan-adjust '{"currentSection":{"title":"A\u2028B","content":"C"},"rationale":"r"}'
        big=$(printf 'x%.0s' $(seq 5000))
        run adjust-big forge-lsp call plan-adjust "{\"currentSection\":{\"title\":\"T\",\"content\":\"$big\"},\"rationale\":\"r\"}"
        run adjust-title forge-lsp call plan-adjust '{"currentSection":{"title":"Line1\nLine2","content":"C"},"rationale":"r"}'
        await adjust-end
      fi
    fi
    audit_clean
    ;;
  auditor:identity)
    read -r cid ctok < "$state/coder.cred"
    run stale-handoff env FORGE_SESSION_ID="$cid" FORGE_SESSION_TOKEN="$ctok" forge-lsp call loop-handoff '{}' --json
    run stale-shell env FORGE_SESSION_ID="$cid" FORGE_SESSION_TOKEN="$ctok" forge-lsp call shell '{"command":"touch stale-shell-ran"}' --json
    run forged env FORGE_SESSION_TOKEN=garbage forge-lsp call loop-status '{}' --json
    await auditor-go
    audit_clean
    ;;
  auditor:*)
    audit_clean
    ;;
  post_action:postlimit)
    echo "Error: 429 Too Many Requests: rate limit reached" >&2
    exit 1
    ;;
  post_action:block)
    echo $$ > "$state/post.pid"
    await post-release
    post_action
    ;;
  post_action:*)
    post_action
    ;;
  :*)
    env | grep -E '^FORGE_(SESSION_ID|SESSION_TOKEN|LOOP|ROLE|AGENT|LSP_SOCKET)=' | sort > "$state/newsession.env"
    pwd > "$state/newsession.cwd"
    ulimit -n > "$state/newsession.nofile"
    run newsession-write forge-lsp call plan-write '{"content":"# Mine\n"}'
    run newsession-read forge-lsp call section-read '{}'
    echo "done" > "$state/newsession.done"
    ;;
esac
echo "turn $turn done"
