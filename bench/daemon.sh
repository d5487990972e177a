#!/usr/bin/env bash
# The daemon at scale (targets: docs/design.md): N loops every 10 s (step `true`, one stock
# gate) under `automaton daemon`, for N in $SIZES, then the same firing done
# by a bash scheduler running `flock -n <lock> true` per tick, then an idle
# daemon over 5,000 loops, and (MEMORY_RUN=600) its memory over a long run.
#
# For each size it reports: ticks/s achieved against the rate needed, lag
# p50/p99 (how late ticks started; the daemon's figures come from the 15 s
# windows of <root>/daemon.json: p50 is the median window's, p99 the worst
# window's), the daemon's own CPU per tick (its threads: utime+stime from
# /proc), the step processes' CPU per tick (cutime+cstime, reported
# separately: each step's own process and its guard, `/bin/sh` waiting on a
# pipe), and RSS at the start and end of the measurement.
#
# usage: bench/daemon.sh
#        LOOPS=50000 bench/daemon.sh: one host's daemon over that many loops
#        every CADENCE (300 s by default in this mode) for RUN seconds (600):
#        its start-up (from exec to its first scan's "N loops scheduled"),
#        lag p50 / p99, its CPU per tick, RSS each minute, then the same
#        loops idle (a yearly cron); nothing else runs in this mode.
# env:   SIZES ("100 1000 5000")  CADENCE (10: seconds between a loop's ticks)
#        ROOTS (where the roots go; default the temporary directory, which
#        makes them roots in the steps' temporary directory: the costlier case)
#        SECONDS_PER (60)  MAX_CONCURRENT (8)
#        MEMORY_RUN (0: skip; else seconds of the memory run)  BIN (a built binary)
#        BEFORE (an older build: measured at each size just before BIN, one
#        row each, for a side-by-side run)
#        BASELINE (1; 0 skips the bash + flock baseline)  IDLE (1; 0 skips it)
#        STEADY (0; 1 gives every loop `[runs] keep = 5` and five runs already
#        made, as a daemon that has run a while: each tick then prunes one)
#        LOOP (gated: one stock gate, confined step; gateless: no gate;
#        unconfined: no gate and `confine = "off"`, so runs of each tell
#        what the gate and the confinement add to a daemon's tick)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
sizes=${SIZES:-100 1000 5000}
secs=${SECONDS_PER:-60}
workers=${MAX_CONCURRENT:-8}
memory_run=${MEMORY_RUN:-0}
cadence=${CADENCE:-10}
loops=${LOOPS:-0}
[ "$loops" -gt 0 ] && cadence=${CADENCE:-300}
# The roots go under $ROOTS, else in the temporary directory.
. "$(dirname "$0")/lib.sh"
bench_work
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
  BIN="${CARGO_TARGET_DIR:-$repo/target}/release/automaton"
fi
hz=$(getconf CLK_TCK)

# make_root ROOT N TOML: N loops made from TOML; one made by `new`, the rest
# copied from it (state and history name no loop), so setup takes seconds.
make_root() {
  local root=$1 n=$2 toml=$3
  "$BIN" --root "$root" init >/dev/null
  "$BIN" --root "$root" new l0 --from "$toml" >/dev/null
  local i
  if [ "${STEADY:-0}" = 1 ]; then
    for ((i = 1; i <= 5; i++)); do mkdir -p -m 700 "$root/loops/l0/runs/$i"; done
    sed -i 's/"tick": 0,/"tick": 5,/' "$root/loops/l0/.state.loop"
  fi
  python3 - "$root/loops" "$n" <<'PY'
import shutil, sys
loops, n = sys.argv[1], int(sys.argv[2])
for i in range(1, n):
    shutil.copytree(f"{loops}/l0", f"{loops}/l{i}", symlinks=True)
PY
}

# cpu PID -> "own children" in clock ticks (fields 14+15, 16+17 of stat).
cpu() { awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
record_field() { sed -n "s/.*\"$2\": *\([0-9]*\).*/\1/p" "$1"; }

start_daemon() { # ROOT LOG
  "$BIN" --root "$1" daemon --max-concurrent "$workers" 2>"$2" &
  daemon_pid=$!
}
stop_daemon() {
  kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=
}

# Waits for the next daemon record after the one dated $1; prints its date.
next_record() {
  local root=$1 last=$2 now
  while :; do
    now=$(sed -n 's/.*"updated": *"\([^"]*\)".*/\1/p' "$root/daemon.json" 2>/dev/null || true)
    if [ -n "$now" ] && [ "$now" != "$last" ]; then echo "$now"; return; fi
    sleep 0.5
  done
}

steady=; [ "${STEADY:-0}" = 1 ] && steady=', every loop at its `[runs] keep` (5)'
loop_toml "${LOOP:-gated}" "${cadence}s" > "$work/loop.toml"
[ "${STEADY:-0}" = 1 ] && printf '[runs]\nkeep = 5\n' >> "$work/loop.toml"
measure() { # LABEL N
  local label=$1 n=$2
  root="$work/r$n"
  make_root "$root" "$n" "$work/loop.toml"
  start_daemon "$root" "$work/d$n.log"
  # Warm-up: the first ticks are spread over one cadence.
  sleep $((cadence + 2))
  # Start on a fresh record, so the counts and the clock agree.
  stamp=$(next_record "$root" "")
  stamp=$(next_record "$root" "$stamp")
  read -r own0 kids0 < <(cpu "$daemon_pid")
  rss0=$(rss_kib "$daemon_pid")
  ticks0=$(record_field "$root/daemon.json" ticks)
  t0=$(date +%s.%N)
  p50s=() p99=0
  end=$(( $(date +%s) + secs ))
  while [ "$(date +%s)" -lt "$end" ]; do
    stamp=$(next_record "$root" "$stamp")
    p50s+=("$(record_field "$root/daemon.json" lag_p50_ms)")
    w99=$(record_field "$root/daemon.json" lag_p99_ms)
    [ "$w99" -gt "$p99" ] && p99=$w99
  done
  t1=$(date +%s.%N)
  read -r own1 kids1 < <(cpu "$daemon_pid")
  rss1=$(rss_kib "$daemon_pid")
  ticks1=$(record_field "$root/daemon.json" ticks)
  stop_daemon
  p50=$(printf '%s\n' "${p50s[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  awk -v label="$label" -v n="$n" -v c="$cadence" -v t0="$t0" -v t1="$t1" -v k0="$ticks0" -v k1="$ticks1" \
      -v o0="$own0" -v o1="$own1" -v c0="$kids0" -v c1="$kids1" -v hz="$hz" \
      -v p50="$p50" -v p99="$p99" -v r0="$rss0" -v r1="$rss1" 'BEGIN {
    ticks = k1 - k0; el = t1 - t0
    printf "| %s | %d | %.0f | %.1f | %d ms / %d ms | %.3f ms | %.3f ms | %.1f → %.1f MiB |\n",
      label, n, n / c, ticks / el, p50, p99, (o1 - o0) * 1000 / hz / ticks, (c1 - c0) * 1000 / hz / ticks,
      r0 / 1024, r1 / 1024 }'
  rm -rf "$root"
}
# LOOPS=N: one host over N loops, a long run, then the same loops idle.
if [ "$loops" -gt 0 ]; then
  run=${RUN:-600}
  printf '\n## automaton daemon over %s loops every %s s (max-concurrent %s), %s s; roots in the steps'"'"' temporary directory: %s\n\n' "$loops" "$cadence" "$workers" "$run" "$under_tmp"
  root="$work/big"
  make_root "$root" "$loops" "$work/loop.toml"
  t0=$(date +%s.%N)
  start_daemon "$root" "$work/big.log"
  until grep -q "loops scheduled" "$work/big.log" 2>/dev/null; do sleep 0.05; done
  t1=$(date +%s.%N)
  read -r own_s _ < <(cpu "$daemon_pid")
  awk -v t0="$t0" -v t1="$t1" -v o="$own_s" -v hz="$hz" -v r="$(rss_kib "$daemon_pid")" 'BEGIN {
    printf "start-up (exec to the first scan done): %.2f s wall, %.2f s CPU; RSS %.1f MiB\n", t1 - t0, o / hz, r / 1024 }'
  # Warm-up: a minute (or a cadence, when shorter) of the first ticks.
  sleep $((cadence < 60 ? cadence : 60))
  stamp=$(next_record "$root" "")
  read -r own0 kids0 < <(cpu "$daemon_pid")
  ticks0=$(record_field "$root/daemon.json" ticks)
  rss=() p50s=() p99=0
  start=$(date +%s); t0=$(date +%s.%N); next_rss=$start; end=$((start + run))
  while [ "$(date +%s)" -lt "$end" ]; do
    if [ "$(date +%s)" -ge "$next_rss" ]; then
      rss+=("$(awk '{printf "%.1f", $1 / 1024}' <<<"$(rss_kib "$daemon_pid")")"); next_rss=$((next_rss + 60))
    fi
    stamp=$(next_record "$root" "$stamp")
    p50s+=("$(record_field "$root/daemon.json" lag_p50_ms)")
    w99=$(record_field "$root/daemon.json" lag_p99_ms)
    [ "$w99" -gt "$p99" ] && p99=$w99
  done
  read -r own1 kids1 < <(cpu "$daemon_pid")
  ticks1=$(record_field "$root/daemon.json" ticks)
  t1=$(date +%s.%N)
  rss+=("$(awk '{printf "%.1f", $1 / 1024}' <<<"$(rss_kib "$daemon_pid")")")
  stop_daemon
  p50=$(printf '%s\n' "${p50s[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  awk -v n="$loops" -v c="$cadence" -v s="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" -v k="$((ticks1 - ticks0))" -v o="$((own1 - own0))" \
      -v ch="$((kids1 - kids0))" -v hz="$hz" -v p50="$p50" -v p99="$p99" 'BEGIN {
    printf "ticks: %d in %.0f s (%.1f/s, %.1f/s needed); lag p50 %d ms, worst 15 s window p99 %d ms\n", k, s, k / s, n / c, p50, p99
    printf "daemon CPU per tick %.3f ms; step CPU per tick %.3f ms\n", o * 1000 / hz / k, ch * 1000 / hz / k }'
  echo "RSS each minute (MiB): ${rss[*]}"
  # The same loops idle: a cron that fires once a year.
  find "$root/loops" -name loop.toml -exec sed -i 's/^every = .*/cron = "0 0 1 1 *"/' {} +
  start_daemon "$root" "$work/idle.log"
  until grep -q "loops scheduled" "$work/idle.log" 2>/dev/null; do sleep 0.2; done
  sleep 5
  read -r own0 _ < <(cpu "$daemon_pid"); t0=$(date +%s.%N)
  sleep "$secs"
  read -r own1 _ < <(cpu "$daemon_pid"); t1=$(date +%s.%N)
  awk -v o0="$own0" -v o1="$own1" -v t0="$t0" -v t1="$t1" -v hz="$hz" -v r="$(rss_kib "$daemon_pid")" 'BEGIN {
    printf "idle over the same loops: CPU %.3f %% of a core; RSS %.1f MiB\n", (o1 - o0) / hz / (t1 - t0) * 100, r / 1024 }'
  stop_daemon
  exit 0
fi

printf '\n## automaton daemon (max-concurrent %s), %s s per size after one cadence of warm-up%s; loops %s; roots in the steps'"'"' temporary directory: %s\n\n' "$workers" "$secs" "$steady" "${LOOP:-gated}" "$under_tmp"
printf '| build | loops | ticks/s needed | achieved | lag p50 / p99 | daemon CPU per tick | step CPU per tick | RSS start → end |\n'
printf '|---|---|---|---|---|---|---|---|\n'
builds=("after=$BIN")
[ -n "${BEFORE:-}" ] && builds=("before=$BEFORE" "after=$BIN")
for n in $sizes; do
  for build in "${builds[@]}"; do
    BIN=${build#*=} measure "${build%%=*}" "$n"
  done
done

if [ "${BASELINE:-1}" = 1 ]; then
# The baseline: a bash scheduler firing `flock -n <loop>/lock true` for each
# due loop, the loops spread over the cadence as the daemon spreads them.
cat > "$work/flock.sh" <<'SH'
n=$1 cadence=$2 secs=$3 dir=$4
for ((i = 0; i < n; i++)); do mkdir -p "$dir/l$i"; done
start=${EPOCHREALTIME/./}
end=$((start + secs * 1000000))
lags=() fired=0 k=0
while :; do
  i=$((k % n)); round=$((k / n))
  due=$((start + round * cadence * 1000000 + i * cadence * 1000000 / n))
  [ "$due" -ge "$end" ] && break
  now=${EPOCHREALTIME/./}
  if [ "$due" -gt "$now" ]; then
    wait_us=$((due - now))
    [ "$wait_us" -gt 2000 ] && sleep "$(printf '0.%06d' $((wait_us > 999999 ? 999999 : wait_us)))" && continue
  fi
  now=${EPOCHREALTIME/./}
  lags+=($(( (now - due) / 1000 )))
  flock -n "$dir/l$i/lock" true &
  fired=$((fired + 1)); k=$((k + 1))
done
wait
printf '%s\n' "${lags[@]}" > "$dir/lags"
echo "$fired" > "$dir/fired"
SH
printf '\n## bash + `flock -n` (the baseline), %s s per size\n\n' "$secs"
printf '| loops | ticks/s needed | achieved | lag p50 / p99 | bash CPU per tick | flock + true CPU per tick |\n'
printf '|---|---|---|---|---|---|\n'
for n in $sizes; do
  dir="$work/b$n"; mkdir -p "$dir"
  t0=$(date +%s.%N)
  bash "$work/flock.sh" "$n" "$cadence" "$secs" "$dir" &
  pid=$!
  # Sample CPU just before it exits: poll until the child is a zombie-to-be.
  last=
  while kill -0 "$pid" 2>/dev/null; do last=$(cpu "$pid" 2>/dev/null || echo "$last"); sleep 0.2; done
  wait "$pid"
  t1=$(date +%s.%N)
  read -r own kids <<<"$last"
  fired=$(cat "$dir/fired")
  sort -n "$dir/lags" | awk -v n="$n" -v c="$cadence" -v s="$secs" -v f="$fired" -v o="$own" -v k="$kids" -v hz="$hz" -v t0="$t0" -v t1="$t1" '
    {a[NR] = $1} END {
      # Behind, it fires everything due in its window, late: the rate is over the whole run.
      printf "| %d | %.0f | %.1f | %d ms / %d ms | %.3f ms | %.3f ms |\n", n, n / c, f / (t1 - t0),
        a[int((NR + 1) / 2)], a[int(NR * 0.99 + 0.99)], o * 1000 / hz / f, k * 1000 / hz / f }'
  rm -rf "$dir"
done
fi

if [ "${IDLE:-1}" = 1 ]; then
# Idle: 5,000 loops whose cron expression fires once a year.
printf '\n## idle daemon over 5,000 loops, %s s\n\n' "$secs"
cat > "$work/idle.toml" <<'TOML'
step = ["true"]
[schedule]
cron = "0 0 1 1 *"
[[gate]]
stock = "max-failures"
params = { max = 3 }
TOML
root="$work/idle"
make_root "$root" 5000 "$work/idle.toml"
start_daemon "$root" "$work/idle.log"
# The first scan reads all 5,000 configs and states: not idle yet.
sleep 15
read -r own0 _ < <(cpu "$daemon_pid"); t0=$(date +%s.%N)
sleep "$secs"
read -r own1 _ < <(cpu "$daemon_pid"); t1=$(date +%s.%N)
rss=$(rss_kib "$daemon_pid")
stop_daemon
awk -v o0="$own0" -v o1="$own1" -v t0="$t0" -v t1="$t1" -v hz="$hz" -v r="$rss" 'BEGIN {
  printf "CPU: %.3f %% of a core; RSS %.1f MiB\n", (o1 - o0) / hz / (t1 - t0) * 100, r / 1024 }'
rm -rf "$root"
fi

if [ "$memory_run" -gt 0 ]; then
  printf '\n## memory over %s s: 5,000 loops every 10 s, RSS each minute (MiB)\n\n' "$memory_run"
  root="$work/mem"
  make_root "$root" 5000 "$work/loop.toml"
  start_daemon "$root" "$work/mem.log"
  samples=()
  for ((s = 0; s <= memory_run; s += 60)); do
    samples+=("$(awk '{printf "%.1f", $1 / 1024}' <<<"$(rss_kib "$daemon_pid")")")
    [ "$s" -lt "$memory_run" ] && sleep 60
  done
  echo "${samples[*]}"
  stop_daemon
fi
