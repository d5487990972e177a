#!/usr/bin/env bash
# A cached gate under `automaton daemon`, builds side by side at the same
# time (so a busy machine slows them alike): each over its own root of N
# loops every second (step `true`), each loop gated by GATE (a component:
# by default the Python office-hours example's build, with params that
# proceed all day), plus a third daemon (BIN) whose loops have no gate, to
# show what a tick costs apart from its gate. One `gate compile` warms a
# cache all the roots share. Measured for SECS after WARM seconds of
# warm-up, per daemon:
#   - the gate's `micros` from history (what the tick waits for: a `stat`
#     of the file, then the evaluation): median, p90, fastest;
#   - the daemon's own CPU (the time on CPU of all its threads, from
#     /proc/<pid>/task/*/schedstat: exact, where utime+stime are sampled
#     at the clock tick and skewed by short bursts) per tick, and that minus the gateless daemon's:
#     the gate's CPU per evaluation, wherever in the process it is spent;
#     and the part of it spent by the thread that makes instances ahead and
#     drops spent ones (`gate-spares`), off the ticks' path;
#   - its resident memory (VmRSS) at the end;
#   - the load average at the start and the end.
#
# usage: BEFORE=<older build> BIN=<build> bench/gate-daemon.sh
# env:   GATE (see above)  N (4 loops)  SECS (60)  WARM (15)  PARAMS
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
: "${BEFORE:?BEFORE=<older build> is needed}" "${BIN:?BIN=<build> is needed}"
gate=${GATE:-$(ls "$repo"/target/tmp/example-gates/office-hours-python-*.wasm 2>/dev/null | head -1)}
[ -f "$gate" ] || { echo "GATE=<component> is needed (no example build found)" >&2; exit 2; }
gate=$(realpath "$gate")
params=${PARAMS:-'{ start_hour = 0, end_hour = 24 }'}
n=${N:-4}
secs=${SECS:-60}
warm=${WARM:-15}
work=$(mktemp -d)
pids=()
cleanup() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null && wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

printf 'step = ["true"]\n[schedule]\nevery = "1s"\n' > "$work/none.toml"
{ cat "$work/none.toml"; printf '[[gate]]\npath = "%s"\nparams = %s\n' "$gate" "$params"; } > "$work/gated.toml"
daemons=("before=$BEFORE=gated" "after=$BIN=gated" "no-gate=$BIN=none")
"$BIN" --root "$work/cache-root" init >/dev/null
echo "compiling $(basename "$gate") once for every root..." >&2
"$BIN" --root "$work/cache-root" -q gate compile "$gate" >/dev/null
for d in "${daemons[@]}"; do
  IFS== read -r label bin toml <<< "$d"
  root="$work/$label"
  "$bin" --root "$root" init >/dev/null
  rm -rf "$root/cache" && ln -s "$work/cache-root/cache" "$root/cache"
  for ((i = 0; i < n; i++)); do
    "$bin" --root "$root" new "l$i" --from "$work/$toml.toml" >/dev/null
  done
done
for d in "${daemons[@]}"; do
  IFS== read -r label bin _ <<< "$d"
  "$bin" --root "$work/$label" -q daemon 2>"$work/$label.log" &
  pids+=($!)
done
sleep "$warm"
# Nanoseconds on CPU of the daemon's threads (those named $2 only, if given).
cpu() {
  local t total=0
  for t in /proc/"$1"/task/*; do
    [ -z "${2:-}" ] || [ "$(cat "$t/comm" 2>/dev/null)" = "$2" ] || continue
    total=$((total + $(cut -d' ' -f1 "$t/schedstat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
# The spares thread's (0 in a build without one).
spares_cpu() { cpu "$1" gate-spares; }
lines() { cat "$1"/loops/*/history.jsonl | wc -l; }
declare -A cpu0 spares0
for i in "${!daemons[@]}"; do
  label=${daemons[$i]%%=*}
  cpu0[$label]=$(cpu "${pids[$i]}")
  spares0[$label]=$(spares_cpu "${pids[$i]}")
  for f in "$work/$label"/loops/*/history.jsonl; do wc -l < "$f" > "$f.mark"; done
done
load0=$(cut -d' ' -f1 /proc/loadavg)
sleep "$secs"
load1=$(cut -d' ' -f1 /proc/loadavg)
declare -A cpu1 spares1
for i in "${!daemons[@]}"; do
  label=${daemons[$i]%%=*}
  cpu1[$label]=$(cpu "${pids[$i]}")
  spares1[$label]=$(spares_cpu "${pids[$i]}")
done
printf '\n## %s under the daemon: %s loops each every 1 s, %s s (load %s -> %s)\n\n' \
  "$(basename "$gate")" "$n" "$secs" "$load0" "$load1"
for i in "${!daemons[@]}"; do
  label=${daemons[$i]%%=*}
  for f in "$work/$label"/loops/*/history.jsonl; do
    tail -n +"$(( $(cat "$f.mark") + 1 ))" "$f"
  done > "$work/$label.window"
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/${pids[$i]}/status")
  echo "$label $(( cpu1[$label] - cpu0[$label] )) $(( spares1[$label] - spares0[$label] )) $rss" >> "$work/cpu"
done
python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
cpu = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in open(f"{work}/cpu")}
rows = {}
for label in cpu:
    events = [json.loads(l) for l in open(f"{work}/{label}.window") if l.strip()]
    ticks = [e for e in events if e.get("kind") == "tick"]
    gates = sorted(e["micros"] / 1000 for e in events if e.get("kind") == "gate")
    own, spares = (c / 1e6 / max(len(ticks), 1) for c in cpu[label][:2])
    rows[label] = (len(ticks), gates, own, spares, cpu[label][2] / 1024)
base = rows["no-gate"][2]
print("| daemon | ticks | gate `micros` median | p90 | fastest | daemon CPU per tick | minus the gateless daemon's | of it, the spares thread | RSS |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for label, (ticks, g, per, spares, rss) in rows.items():
    if g:
        p90 = g[min(len(g) - 1, int(len(g) * 0.9))]
        cols = f"{statistics.median(g):.2f} ms | {p90:.2f} ms | {g[0]:.2f} ms"
        extra = f"{per - base:.2f} ms | {spares:.2f} ms"
    else:
        cols, extra = "— | — | —", "— | —"
    print(f"| {label} | {ticks} | {cols} | {per:.2f} ms | {extra} | {rss:.0f} MiB |")
PY
