#!/bin/bash
# A scripted agent for the sandbox tests (server/tests/sandbox.rs). The shebang is an
# absolute path on purpose: `#!/usr/bin/env bash` would find the loop's sandbox shim on PATH
# and run this whole script inside the sandbox.
#
# The first coder turn of a session exercises forge.shell and the shell shims and writes
# what it saw to $FORGE_TEST_STATE/<session>/ (the file `done` last). Every other turn waits
# (the test cancels the loop, which kills the turn's process group).
set -u
state=${FORGE_TEST_STATE:?}
cat > /dev/null
d="$state/$FORGE_SESSION_ID"
if [ "$FORGE_ROLE" != coder ] || [ -e "$d/done" ]; then
  exec sleep 120
fi
mkdir -p "$d"
shell() { # <name> <json>: forge.shell, the --json result to <name>.json and the exit code to <name>.code
  forge-lsp call shell "$2" --json > "$d/$1.json" 2> "$d/$1.err"
  echo $? > "$d/$1.code"
}
shell pwd '{"command":"pwd"}'
# git reads the repository (read-only) from inside, also when the repository is under /tmp.
shell gitlog '{"command":"git log --oneline -1 && git status --short --untracked-files=no"}'
shell subdir '{"command":"mkdir -p sub/dir && cd sub/dir && pwd","cwd":"."}'
shell incwd '{"command":"pwd","cwd":"sub/./dir"}'
shell escape "{\"command\":\"touch '$state/escaped' && echo wrote\"}"
shell timeout '{"command":"echo start; sleep 30","timeoutMs":300}'
shell toolong '{"command":"true","timeoutMs":600001}'
# A process that left the command's group (setsid): killed with it on the timeout.
shell escaped "{\"command\":\"setsid sleep 31 >/dev/null 2>&1 </dev/null & echo \$! > '$d/escaped.pid'; sleep 30\",\"timeoutMs\":500}"
# A call whose caller goes away (killed): what its command started in a session of its own
# goes with it (review YJ).
timeout -s KILL 2 forge-lsp call shell "{\"command\":\"setsid sleep 32 >/dev/null 2>&1 </dev/null & echo \$! > '$d/dropped.pid'; sleep 30\"}" > /dev/null 2>&1
shell nulbyte '{"command":"echo a\u0000b"}'
# A command over one argument's 128 KiB, read from standard input (it is too long to be
# an argument of forge-lsp call too).
big=$(head -c 140000 /dev/zero | tr '\0' a)
printf '{"command":"echo %s"}' "$big" | forge-lsp call shell - --json > "$d/huge.json" 2> "$d/huge.err"
echo $? > "$d/huge.code"
shell dotdot '{"command":"pwd","cwd":"../.."}'
shell absolute '{"command":"pwd","cwd":"/etc"}'
echo "${PATH%%:*}" > "$d/path-head"
echo "$SHELL" > "$d/shell-var"
"$SHELL" -c 'echo $$ ${FORGE_SANDBOX:-host}; touch shim-made' > "$d/shim.txt" 2>&1
sh -c 'echo $$ ${FORGE_SANDBOX:-host}' > "$d/path-sh.txt" 2>&1
# git in the agent's own shells too (their sandbox is built apart from forge.shell's).
"$SHELL" -c 'git log --oneline -1 && git status --short --untracked-files=no; echo "exit $?"' > "$d/shim-git.txt" 2>&1
# A sandboxed process that drops its loop identity is refused by the server (it would be a
# fresh `user` session on a folder of its choice otherwise).
"$SHELL" -c 'env -u FORGE_SESSION_TOKEN -u FORGE_SESSION_ID FORGE_AGENT=user forge-lsp call tools' > "$d/untokened.out" 2> "$d/untokened.err"
echo $? > "$d/untokened.code"
# A loop session's call from outside its worktree (here /tmp, inside the sandbox) is still
# about its worktree.
"$SHELL" -c 'cd /tmp && forge-lsp call review-read "{}"' > "$d/fromtmp.out" 2> "$d/fromtmp.err"
echo $? > "$d/fromtmp.code"
# The user's runtime directory (session bus, ssh and gpg agents) is hidden inside the
# sandbox: its daemons act on the host.
if [ -n "${FORGE_TEST_RUNTIME_SOCKET:-}" ]; then
  { [ -S "$FORGE_TEST_RUNTIME_SOCKET" ] && echo host-sees || echo host-misses
    "$SHELL" -c '[ -S "$FORGE_TEST_RUNTIME_SOCKET" ] && echo sandbox-sees || echo sandbox-misses'; } > "$d/runtime.txt" 2>&1
fi
# A program in a PATH folder that is a link in the runtime directory (fnm's), found by
# forge.shell and the agent's shells.
if [ -n "${FORGE_TEST_PATH_TOOL:-}" ]; then
  shell pathtool "{\"command\":\"$FORGE_TEST_PATH_TOOL\"}"
  "$SHELL" -c "$FORGE_TEST_PATH_TOOL" > "$d/shim-pathtool.txt" 2>&1
  forge-lsp call box__Node '{}' > "$d/plugin-pathtool.txt" 2>&1
fi
# The server's socket directory is read-only inside: a sandboxed process cannot move the
# socket away and listen on its path (it would receive other sessions' tokens), nor put
# anything beside it.
"$SHELL" -c 'dir=$(dirname "$FORGE_LSP_SOCKET")
  if mv "$FORGE_LSP_SOCKET" "$dir/moved" 2>/dev/null; then echo moved; mv "$dir/moved" "$FORGE_LSP_SOCKET"; else echo kept; fi
  if touch "$dir/planted" 2>/dev/null; then echo planted; else echo refused; fi' > "$d/socketdir.txt" 2>&1
# A plugin tool from files (box__Probe, when the test installed it) runs in the sandbox too.
forge-lsp call box__Probe '{}' > "$d/plugin.out" 2> "$d/plugin.err"
echo $? > "$d/plugin.code"
# The user's secrets (sandbox.rs, secrets_stay_outside_the_loop_sandbox): the repository's
# probe.sh prints what it can see, run on the host (the control), through the shim, by
# forge.shell and by a plugin tool.
if [ -n "${FORGE_TEST_SECRETS:-}" ]; then
  /bin/sh probe.sh > "$d/secrets-host.txt" 2>&1
  # A secret-named variable whose name is no shell name: a shim could not drop it, so the
  # agent itself does not get it.
  if env | grep -q '^MY-API-KEY='; then echo present; else echo absent; fi > "$d/secrets-odd-name.txt"
  "$SHELL" -c 'sh probe.sh' > "$d/secrets-shim.txt" 2>&1
  forge-lsp call shell '{"command":"sh probe.sh"}' --json > "$d/secrets-shell.json" 2> "$d/secrets-shell.err"
  forge-lsp call box__Secrets '{}' > "$d/secrets-plugin.txt" 2> "$d/secrets-plugin.err"
fi
touch "$d/done"
echo "done"
