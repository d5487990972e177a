#!/usr/bin/env bash
# From an approval to its step's start under the daemon: a loop due every
# hour awaits an approval (approve-every, every = 1); the daemon serving
# the root is started and has read the loop; `approve` returns; the time
# until the released tick's step writes its first line. N rounds (20 by
# default), each with a fresh daemon; prints each latency and the median
# and p99 (the largest, at 20 rounds) in milliseconds.
# usage: bench/approval-latency.sh [-n ROUNDS] [BIN]
# env: STORE: a postgresql:// URL (a fresh schema's: the loop `gated` is
#      made there) to measure the PostgreSQL store, whose daemon hears of
#      the approval by notification; else the file store.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=20
if [ "${1:-}" = "-n" ]; then rounds=$2; shift 2; fi
bin=$(realpath "${1:-$repo/target/release/automaton}")
work=$(mktemp -d)
trap 'kill "${daemon:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
export AUTOMATON_ROOT=$work/root
if [ -n "${STORE:-}" ]; then export AUTOMATON_STORE=$STORE; fi
"$bin" init >/dev/null
cat > "$work/loop.toml" <<TOML
step = "date +%s%N > $work/started"
[schedule]
every = "1h"
[[gate]]
stock = "approve-every"
params = { every = 1 }
TOML
"$bin" new gated --from "$work/loop.toml" >/dev/null
"$bin" tick gated >/dev/null # runs; the next tick awaits
ms=()
for _ in $(seq "$rounds"); do
  "$bin" tick gated >/dev/null || true # awaits approval
  rm -f "$work/started"
  "$bin" daemon 2>"$work/daemon.log" &
  daemon=$!
  until grep -q 'loop "gated" scheduled' "$work/daemon.log"; do sleep 0.02; done
  "$bin" approve gated >/dev/null
  approved=$(date +%s%N)
  until [ -s "$work/started" ]; do sleep 0.005; done
  started=$(cat "$work/started")
  ms+=("$(( (started - approved) / 1000000 ))")
  kill -TERM "$daemon"; wait "$daemon" || true
done
printf '%s\n' "${ms[@]}" | sort -n > "$work/ms"
n=$(wc -l < "$work/ms")
median=$(sed -n "$(( (n + 1) / 2 ))p" "$work/ms")
p99=$(sed -n "$(( (n * 99 + 99) / 100 ))p" "$work/ms")
echo "approval to step start, ms: $(tr '\n' ' ' < "$work/ms")"
echo "rounds $n  median $median ms  p99 $p99 ms"
