# Shared helpers for the per-CLI demos in this folder (sourced, not run).
#
#   FORGE_TEST_CACHE  cache root (default ~/.cache/forge-lsp-tests); each CLI is installed
#                     once, pinned, into $FORGE_TEST_CACHE/agents/<cli>
#   TRY_KEEP=1        keep the temporary directory (its path is printed)
#   TRY_NO_NETNS=1    do not re-run inside a private network namespace
#
# When run as root with `unshare` available, a demo re-executes itself inside a fresh
# network namespace with only loopback up (after installing its CLI from npm): the fake
# model server and the CLI then share 127.0.0.1, and nothing the CLI tries on its own
# (telemetry, update checks, model catalogues) can leave the machine.
set -euo pipefail

FM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${FORGE_TEST_CACHE:-$HOME/.cache/forge-lsp-tests}
AGENTS=$CACHE/agents

# ensure_cli <dir> <npm-spec> <bin>: install a pinned CLI into $AGENTS/<dir> once; sets CLI_BIN.
ensure_cli() {
  local dir=$AGENTS/$1 spec=$2 bin=$3
  local stamp="$dir/.installed-$(printf '%s' "$spec" | tr '/@' '__')"
  if [ ! -f "$stamp" ] || [ ! -x "$dir/node_modules/.bin/$bin" ]; then
    if [ -n "${TRY_IN_NETNS:-}" ]; then echo "FAIL: $spec is not installed and the network is off" >&2; exit 1; fi
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"private":true}' > "$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --save-exact "$spec" >/dev/null)
    touch "$stamp"
  fi
  CLI_BIN=$dir/node_modules/.bin/$bin
}

# enter_netns "$@": re-run this script offline (see above). Call after ensure_cli.
enter_netns() {
  if [ -z "${TRY_IN_NETNS:-}" ] && [ -z "${TRY_NO_NETNS:-}" ] && [ "$(id -u)" = 0 ] \
     && command -v unshare >/dev/null && command -v ip >/dev/null && unshare -n true 2>/dev/null; then
    export TRY_IN_NETNS=1
    exec unshare -n bash -c 'ip link set lo up; exec "$@"' \
      _ bash "$0" "$@"
  fi
}

# setup: a temp dir (not under /tmp: Codex refuses to create its helper links there) with an
# isolated HOME, a git work dir, and the paths the checks use.
setup() {
  local base=${TRY_TMP:-$CACHE/tmp}
  mkdir -p "$base"
  T=$(mktemp -d "$base/try.XXXXXX")
  export HOME=$T/home XDG_CONFIG_HOME=$T/home/.config XDG_DATA_HOME=$T/home/.local/share \
         XDG_CACHE_HOME=$T/home/.cache XDG_STATE_HOME=$T/home/.local/state
  mkdir -p "$HOME" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_STATE_HOME"
  export TMPDIR=$T/tmp   # CLIs' temp files (Gemini's error reports, Claude's cwd files) stay in $T
  WORK=$T/work
  mkdir -p "$WORK" "$TMPDIR"
  git -C "$WORK" init -q
  git -C "$WORK" -c user.email=t@example.invalid -c user.name=t commit -q --allow-empty -m init
  export ECHO_MCP_LOG=$T/echo-mcp.jsonl
  LOG=$T/requests.jsonl
  # A stand-in for the Forge sandbox shims: `sh` and `bash` first on PATH, SHELL=<dir>/sh.
  SHIM=$T/shim
  mkdir -p "$SHIM"
  for s in sh bash; do
    printf '#!/bin/sh\necho "$0 $*" >> %s/shim.log\nexec /bin/bash "$@"\n' "$T" > "$SHIM/$s"
    chmod +x "$SHIM/$s"
  done
  # The identity a Forge loop session gives its agent (a token-like name, which some CLIs
  # filter out of the environment of commands or MCP servers).
  export FORGE_SESSION_ID=ses-demo FORGE_SESSION_TOKEN=tok-$$ FORGE_LSP_SOCKET=$T/forge.sock
  trap cleanup EXIT
}

cleanup() {
  local rc=$?
  if [ -n "${SERVER_PID:-}" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  if [ "$rc" != 0 ] || [ -n "${TRY_KEEP:-}" ]; then echo "kept: $T" >&2; else rm -rf "$T"; fi
  exit "$rc"
}

# start_server <script.json>: starts server.py; sets PORT.
start_server() {
  python3 "$FM_DIR/server.py" --script "$1" --port-file "$T/port" --log "$LOG" \
    ${FM_LOG_BODIES:+--log-bodies} >"$T/server.out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 200); do [ -s "$T/port" ] && break; sleep 0.05; done
  [ -s "$T/port" ] || fail "the fake model server did not start: $(cat "$T/server.out")"
  PORT=$(cat "$T/port")
}

# The script every demo replays: the CLI's shell tool, the MCP echo tool, a reply; then a
# reply to the resumed turn. Fixed usage per response so the CLIs' totals can be checked.
write_demo_script() {
  cat > "$T/script.json" <<'JSON'
{
  "usage": {"input": 1000, "output": 50, "cache_read": 200},
  "conversations": [{
    "id": "demo", "marker": "FAKE-DEMO",
    "turns": [
      {"shell": "echo hi > out.txt && echo \"token=${FORGE_SESSION_TOKEN:-unset} shell=$0\""},
      {"mcp": "echo", "arguments": {"text": "ping"}},
      {"text": "first turn done"},
      {"when": "SECOND-TURN", "text": "resumed ok"}
    ]
  }],
  "limits": [{"model": "quota-model", "kind": "insufficient_quota"},
             {"model": "forbidden-model", "kind": "forbidden"}]
}
JSON
}

# log_lines: number of requests logged so far (to split the log per run).
log_lines() { [ -f "$LOG" ] && wc -l < "$LOG" || echo 0; }

# log_sum <from-line> <field>: sum of a usage field over the model requests after a line.
log_sum() {
  python3 - "$LOG" "$1" "$2" <<'PY'
import json, sys
path, start, field = sys.argv[1], int(sys.argv[2]), sys.argv[3]
total = 0
with open(path) as f:
    for i, line in enumerate(f):
        if i < start:
            continue
        e = json.loads(line)
        total += (e.get("usage") or {}).get(field, 0)
print(total)
PY
}

# log_field <from-line> <python-expr over e>: values of an expression for requests after a line.
log_where() {
  python3 - "$LOG" "$1" "$2" <<'PY'
import json, sys
path, start, expr = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path) as f:
    for i, line in enumerate(f):
        if i < start:
            continue
        e = json.loads(line)
        v = eval(expr, {"e": e})
        if v is not None and v is not False:
            print(v)
PY
}

check_common() {
  [ "$(cat "$WORK/out.txt" 2>/dev/null)" = hi ] || fail "(b) out.txt was not written by the shell tool"
  ok "(b) the shell command ran: out.txt = hi"
  grep -q '"text": "ping"' "$ECHO_MCP_LOG" 2>/dev/null || fail "(c) the MCP echo tool was not called"
  ok "(c) the MCP echo tool was called"
  local seen
  seen=$(jq -r '.forge_env | "\(.FORGE_SESSION_ID) \(.FORGE_SESSION_TOKEN) \(.FORGE_LSP_SOCKET)"' "$ECHO_MCP_LOG" | head -1)
  [ "$seen" = "$FORGE_SESSION_ID $FORGE_SESSION_TOKEN $FORGE_LSP_SOCKET" ] \
    || fail "(c) the MCP server did not get the FORGE_* identity: $seen"
  ok "    the MCP server got FORGE_SESSION_ID, FORGE_SESSION_TOKEN, FORGE_LSP_SOCKET"
  local mism
  mism=$(log_where 0 'e.get("mismatch") or (e.get("unknown_tools") and str(e["unknown_tools"]))')
  [ -z "$mism" ] || fail "the script saw unexpected input: $mism"
}

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
