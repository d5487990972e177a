#!/usr/bin/env bash
# Whole-process benchmarks, side by side in one run (targets: docs/design.md):
#   1. one `automaton tick` (warm cache, one stock gate, step `true`) against
#      the predecessor's tick (peers/pyautomaton, under /usr/bin/python3) and
#      the minimal durable tick in C (peers/floor.c, cc -O2);
#   1b. bench/tick-cost.sh: size, `--version` and a tick's wall and CPU time
#      (getrusage) against floor.c, interleaved (BEFORE=BIN adds an older build);
#   2. `automaton status` over 1,000 loops;
#   3. 64 processes doing 2,000 mixed operations on one loop: lost updates
#      (must be zero).
# Uses hyperfine when present (apt-get install hyperfine), else a shell loop.
# usage: bench/run.sh [RUNS]   env: SHARED (default ../shared), PYTHON
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
runs=${1:-200}
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
bin="$repo/target/release/automaton"
cc -O2 -o "$work/floor" "$shared/peers/floor.c"

# automaton: one loop, one stock gate, step `true`; a first tick warms the cache.
root="$work/root"
"$bin" --root "$root" init >/dev/null
cat > "$work/bench.toml" <<'TOML'
step = ["true"]
[[gate]]
stock = "max-failures"
params = { max = 3 }
TOML
"$bin" --root "$root" new bench --from "$work/bench.toml" >/dev/null
"$bin" --root "$root" tick bench >/dev/null
# The predecessor and the durable floor, each on a loop of its own.
peer="$work/peer"
"$py" "$shared/peers/pyautomaton/status.py" --root "$peer" --create-loop demo --step true >/dev/null
mkdir -p "$work/floor-loop" && echo '{"tick":0,"status":"active"}' > "$work/floor-loop/.state.loop"

median_ms() { # command... -> median wall time in ms
  if command -v hyperfine >/dev/null; then
    hyperfine -N --warmup 10 --runs "$runs" --style none --export-json "$work/h.json" "$*" >/dev/null
    "$py" -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["results"][0]["median"]*1e3))' "$work/h.json"
  else
    local ts=()
    for _ in $(seq "$runs"); do
      local s; s=$(date +%s%N); "$@" >/dev/null; ts+=($(( $(date +%s%N) - s )))
    done
    printf '%s\n' "${ts[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f\n", a[int((NR+1)/2)]/1e6}'
  fi
}

echo "== one tick (median of $runs, ms)"
t_auto=$(median_ms "$bin" --root "$root" tick bench)
t_peer=$(median_ms "$py" "$shared/peers/pyautomaton/loop-runner.py" tick demo --root "$peer")
t_floor=$(median_ms "$work/floor" "$work/floor-loop")
"$py" - "$t_auto" "$t_peer" "$t_floor" <<'PY'
import sys
a, p, f = map(float, sys.argv[1:])
print(f"automaton tick        {a:8.2f} ms")
print(f"pyautomaton tick      {p:8.2f} ms   automaton is {p/a:5.1f}x faster   (target >= 30x)")
print(f"floor.c durable tick  {f:8.2f} ms   automaton is {a/f:5.2f}x the floor  (target <= 3x)")
PY
echo "ticks run by automaton: $("$bin" --root "$root" status bench --json | sed -n 's/^  "tick": \([0-9]*\),/\1/p')"

echo "== a tick's wall and CPU time against the floor, 40 interleaved rounds"
# BEFORE=path/to/an/older/automaton puts that build beside this one.
"$repo/bench/tick-cost.sh" ${BEFORE:+before="$BEFORE"} automaton="$bin"

echo "== status over 1,000 loops"
for i in $(seq -w 1 1000); do
  "$bin" --root "$root" new "l$i" --step true >/dev/null
done
t_status=$(median_ms "$bin" --root "$root" status)
t_json=$(median_ms "$bin" --root "$root" status --json)
echo "status        ${t_status} ms   (target <= 150 ms)"
echo "status --json ${t_json} ms"

echo "== 64 processes, 2,000 mixed operations on one loop"
"$bin" --root "$root" new stress --step true >/dev/null
worker() { # 2000/64 operations each, round robin over the mix
  local w=$1
  for j in $(seq 0 31); do
    [ $(( w * 32 + j )) -ge 2000 ] && break
    case $(( (w + j) % 5 )) in
      0) "$bin" --root "$root" approve stress --ahead --note "w$w-$j" ;;
      1) "$bin" --root "$root" pause stress ;;
      2) "$bin" --root "$root" resume stress ;;
      3) "$bin" --root "$root" check-gate stress --apply ;;
      4) "$bin" --root "$root" tick stress ;;
    esac >/dev/null 2>>"$work/stress.err" || true
  done
}
for w in $(seq 0 63); do worker "$w" & done
wait
"$py" - "$root/loops/stress" <<'PY'
import json, sys
d = sys.argv[1]
state = json.load(open(d + "/.state.loop"))
events = [json.loads(l) for l in open(d + "/history.jsonl")]
kinds = [e["kind"] for e in events]
writes = sum(k in ("paused", "resumed", "approved", "check-gate") for k in kinds)
# A tick writes twice when its step runs (in_flight, then the result); this
# loop has no gates, so a tick that runs no step (paused: inactive; busy)
# writes nothing.
ticks = [e for e in events if e["kind"] == "tick"]
writes += 2 * sum("step" in t for t in ticks)
writes += 1  # created
approved = kinds.count("approved")
used = sum(len(e["ids"]) for e in events if e["kind"] == "approvals-used")
pending = len(state["pending_approvals"])
lost = (state["version"] - writes) + (approved - used - pending)
print(f"operations recorded: {len(kinds) - 1}, state version {state['version']}, expected {writes}")
print(f"approvals {approved} = used {used} + pending {pending}; tick counter {state['tick']} = ticks that ran {sum('step' in t for t in ticks)}")
print(f"lost updates: {lost}")
sys.exit(1 if lost else 0)
PY
