#!/usr/bin/env bash
# Two builds' daemons side by side at the same time, so a busy machine
# slows both alike: each over its own root of N loops every 10 s (step
# `true`, one stock gate, `[runs] keep = 5` and five runs already made, as
# a daemon that has run a while), measured for SECS seconds after 25 s of
# warm-up. Reports each one's ticks (summed from the loops' states), its
# own CPU per tick (its threads: utime+stime) and its steps' CPU per tick.
#
# usage: BEFORE=<older build> BIN=<build> bench/daemon-ab.sh
# env:   N (500 loops each)  SECS (60)  MAX_CONCURRENT (8)  ROOTS (where the
#        roots go; default the temporary directory, the costlier case)
#        BEFORE_LOOP, AFTER_LOOP (gated: one stock gate and the step
#        confined; gateless; unconfined: no gate, `confine = "off"`): one
#        build against itself with AFTER_LOOP=unconfined tells what the gate
#        and the confinement add to a tick
set -euo pipefail
n=${N:-500}
secs=${SECS:-60}
workers=${MAX_CONCURRENT:-8}
: "${BEFORE:?BEFORE=<older build> is needed}" "${BIN:?BIN=<build> is needed}"
# The roots go under $ROOTS, else in the temporary directory.
. "$(dirname "$0")/lib.sh"
bench_work
pids=()
cleanup() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null && wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)
# Each side's loops (BEFORE_LOOP, AFTER_LOOP: gated, gateless or unconfined).
loop_kind() { loop_toml "$1" 10s && printf '[runs]\nkeep = 5\n'; }
loop_kind "${BEFORE_LOOP:-gated}" > "$work/before.toml"
loop_kind "${AFTER_LOOP:-gated}" > "$work/after.toml"
builds=("before=$BEFORE" "after=$BIN")
for build in "${builds[@]}"; do
  bin=${build#*=} root="$work/${build%%=*}"
  "$bin" --root "$root" init >/dev/null
  "$bin" --root "$root" new l0 --from "$work/${build%%=*}.toml" >/dev/null
  for ((i = 1; i <= 5; i++)); do mkdir -p -m 700 "$root/loops/l0/runs/$i"; done
  sed -i 's/"tick": 0,/"tick": 5,/' "$root/loops/l0/.state.loop"
  for ((i = 1; i < n; i++)); do cp -r "$root/loops/l0" "$root/loops/l$i"; done
done
for build in "${builds[@]}"; do
  "${build#*=}" --root "$work/${build%%=*}" daemon --max-concurrent "$workers" 2>/dev/null &
  pids+=($!)
done
sleep 25
cpu() { awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"; }
ticks() { cat "$1"/loops/*/.state.loop | grep -o '"tick": [0-9]*' | awk '{s += $2} END {print s}'; }
declare -A own0 kids0 ticks0
for i in 0 1; do
  label=${builds[$i]%%=*}
  read -r "own0[$label]" "kids0[$label]" < <(cpu "${pids[$i]}")
  ticks0[$label]=$(ticks "$work/$label")
done
load0=$(cut -d' ' -f1 /proc/loadavg)
sleep "$secs"
load1=$(cut -d' ' -f1 /proc/loadavg)
printf '\n## two daemons at once, %s loops each every 10 s, %s s (load %s → %s); loops: before %s, after %s; roots in the steps'"'"' temporary directory: %s\n\n' "$n" "$secs" "$load0" "$load1" "${BEFORE_LOOP:-gated}" "${AFTER_LOOP:-gated}" "$under_tmp"
printf '| build | ticks | daemon CPU per tick | step CPU per tick |\n|---|---|---|---|\n'
for i in 0 1; do
  label=${builds[$i]%%=*}
  read -r own kids < <(cpu "${pids[$i]}")
  t=$(( $(ticks "$work/$label") - ticks0[$label] ))
  awk -v l="$label" -v t="$t" -v o="$((own - own0[$label]))" -v k="$((kids - kids0[$label]))" -v hz="$hz" 'BEGIN {
    printf "| %s | %d | %.3f ms | %.3f ms |\n", l, t, o * 1000 / hz / t, k * 1000 / hz / t }'
done
