#!/usr/bin/env bash
# The console's loops page at LOOPS loops (1,000; 100 of them awaiting
# approval) on a phone's viewport in headless Chromium: the page's weight,
# its load time (median of RUNS loads, cache off) and height
# (bench/console-page.mjs, with playwright-core from tests/browser).
#
# usage: bench/console-page.sh [BIN] [PAGE...]   (PAGE defaults to /)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "${1:-$repo/target/debug/automaton}")
shift || true
[ $# -gt 0 ] || set -- /
loops=${LOOPS:-1000}
work=$(mktemp -d)
cleanup() {
  if [ -n "${server:-}" ]; then kill "$server" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export AUTOMATON_ROOT=$work/root
"$bin" init >/dev/null
printf 'step = "true"\n[[gate]]\nstock = "approve-every"\nparams = { every = 1 }\n' > "$work/gated.toml"
printf 'step = "true"\n[schedule]\nevery = "1h"\n' > "$work/plain.toml"
for i in $(seq -w 1 100); do
  "$bin" new "gated-$i" --from "$work/gated.toml" >/dev/null
  "$bin" tick "gated-$i" >/dev/null
  "$bin" tick "gated-$i" >/dev/null || true
done
for i in $(seq -w 1 $((loops - 100))); do
  "$bin" new "plain-$i" --from "$work/plain.toml" >/dev/null
done
token=$("$bin" user add bench --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
"$bin" serve --listen 127.0.0.1:0 > "$work/serve.out" 2>"$work/serve.err" &
server=$!
for _ in $(seq 1 100); do
  addr=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$work/serve.out" "$work/serve.err" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
for p in "$@"; do
  (cd "$repo/tests/browser" && CONSOLE_URL=${addr%/} TOKEN=$token PAGE=$p \
    node --input-type=module < "$repo/bench/console-page.mjs")
done
