#!/usr/bin/env bash
# Runs every CLI demo in this folder (or those named: all.sh claude codex) and prints a
# summary; exits non-zero when one fails.
cd "$(dirname "$0")"
clis=("$@"); [ ${#clis[@]} -gt 0 ] || clis=(opencode codex claude gemini)
rc=0; summary=()
for c in "${clis[@]}"; do
  echo "== $c"
  s=$(date +%s)
  if ./"$c".sh; then summary+=("PASS $c ($(( $(date +%s) - s )) s)"); else rc=1; summary+=("FAIL $c"); fi
done
printf '%s\n' "${summary[@]}"
exit $rc
