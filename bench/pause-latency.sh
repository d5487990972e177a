#!/usr/bin/env bash
# The emergency brake under back-to-back ticks: a loop whose step takes
# STEP seconds (4 by default) is due every EVERY seconds (2), so under the
# daemon each tick starts as the last one ends. A second into the tick
# after the first, `pause --timeout LIMIT` is run (30s by default); the
# time until it returns (and its exit code: 4 when it gave up) is printed
# for each of N rounds (5 by default), each with a fresh daemon, then the
# median in milliseconds. A pause that cannot get in counts as LIMIT.
# usage: bench/pause-latency.sh [-n ROUNDS] [BIN]
# env: STEP, EVERY, LIMIT (seconds); STORE: a postgresql:// URL.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=5
if [ "${1:-}" = "-n" ]; then rounds=$2; shift 2; fi
bin=$(realpath "${1:-$repo/target/release/automaton}")
step=${STEP:-4} every=${EVERY:-2} limit=${LIMIT:-30}
work=$(mktemp -d)
trap 'kill "${daemon:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
export AUTOMATON_ROOT=$work/root AUTOMATON_MIN_EVERY=1s
if [ -n "${STORE:-}" ]; then export AUTOMATON_STORE=$STORE; fi
"$bin" init >/dev/null
cat > "$work/loop.toml" <<TOML
step = "sleep $step"
[schedule]
every = "${every}s"
TOML
"$bin" new busy --from "$work/loop.toml" >/dev/null
ms=()
for round in $(seq "$rounds"); do
  "$bin" resume busy >/dev/null 2>&1 || true
  "$bin" daemon 2>"$work/daemon.log" &
  daemon=$!
  # A moment into the second tick, which began as the first ended.
  until grep -qs 'busy tick [0-9]*: ran' "$work/daemon.log"; do sleep 0.05; done
  sleep 1
  begun=$(date +%s%N)
  code=0
  "$bin" pause busy --timeout "${limit}s" >/dev/null 2>&1 || code=$?
  took=$(( ($(date +%s%N) - begun) / 1000000 ))
  echo "round $round: pause returned in ${took} ms (exit $code)"
  ms+=("$took")
  kill "$daemon"
  wait "$daemon" 2>/dev/null || true
done
printf '%s\n' "${ms[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "median %d ms over %d rounds\n", v[int((NR + 1) / 2)], NR }'
