#!/usr/bin/env bash
# The PostgreSQL store against the file store, one binary, on one machine.
#
# 1. CLI operations (hyperfine, warm, both stores): one `tick` (one stock
#    gate, step `true`), one `pause`+`resume` pair (two operator commits),
#    `status` of one loop, `list` over 101 loops. Wall time (mean) and CPU
#    time (user + system of the command, from hyperfine) each.
# 2. Daemons over 1,000 loops due every EVERY (step `true`; 1s: the
#    daemons are saturated; 10s: 100 ticks/s, within one daemon's reach,
#    so a fall as daemons are added shows): ticks/s achieved with 1, 2 and 4 daemons, each
#    on a root of its own with its own AUTOMATON_HOST (as on separate
#    hosts), over one database; and one daemon over the same loops in the
#    file store. CPU per tick: the daemons' own (threads) and their step
#    processes', and with PGDATA given, the server's. Busy skips per tick:
#    firings that found the loop's lock held (the daemons' debug lines).
#    Statements per tick: with pg_stat_statements in the database (the
#    server started with shared_preload_libraries=pg_stat_statements and
#    the extension created), every statement the server ran, BEGIN and
#    COMMIT included: the round trips.
# 3. The wake-up path: one daemon over 1,000 loops that are not due; from
#    another root, `new` makes a loop 20 times, one after the other; how
#    long from the commit of its creation to its first tick starting (both
#    times from the store). The loop exists only in the database, so only
#    the notification tells the daemon of it. And the idle daemon's CPU.
#
# usage: bench/pg-store.sh BIN URL [PGDATA]
#   e.g. bench/pg-store.sh target/release/automaton \
#          'postgresql://automaton@/postgres?host=/tmp/pg' /tmp/pg/data
# URL: a database the role may create schemas in (each part uses a schema
# of its own, dropped at the end). PGDATA: the server's data directory, on
# this machine, to read its CPU time from /proc (optional).
# env: SECS (15: seconds each daemon run is measured)  RUNS (30: hyperfine runs)
#      PARTS (1 2 3: the parts run)  WARMUP (10: seconds before each daemon run is measured)
#      EVERY (1s: the cadence of part 2's loops)  DAEMONS (1 2 4: part 2's daemon counts)
set -euo pipefail
bin=$(realpath "$1"); url=$2; pgdata=${3:-}
secs=${SECS:-15}
work=$(mktemp -d)
hz=$(getconf CLK_TCK)
schemas=()
daemons=()
cleanup() {
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for s in "${schemas[@]}"; do psql "$url" -qc "DROP SCHEMA $s CASCADE" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
command -v psql >/dev/null || { echo "needs psql" >&2; exit 2; }
parts=" ${PARTS:-1 2 3} "
part() { [[ $parts == *" $1 "* ]]; }
if part 1; then command -v hyperfine >/dev/null || { echo "needs hyperfine" >&2; exit 2; }; fi
# Statements the server has run, when pg_stat_statements is there.
statements() {
  psql "$url" -qAtc "SELECT sum(calls) FROM pg_stat_statements" 2>/dev/null || echo ""
}

# schema NAME -> the URL of a fresh schema NAME (its tables made by `init`).
schema() {
  local s="bench_$$_$1" sep='?'
  case "$url" in *\?*) sep='&';; esac
  psql "$url" -qc "CREATE SCHEMA $s" >/dev/null
  schemas+=("$s")
  echo "$url${sep}options=-c%20search_path%3D$s"
}
sql() { psql "$1" -qAtc "$2"; }
# cpu PID -> "own children" CPU in clock ticks (stat fields 14+15, 16+17).
cpu() { awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"; }
# The server's CPU in clock ticks: the postmaster with the backends it
# reaped, and the live ones.
server_cpu() {
  [ -n "$pgdata" ] || { echo 0; return; }
  local pm total=0 p
  pm=$(head -n 1 "$pgdata/postmaster.pid")
  total=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for p in $(pgrep -P "$pm"); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
ms() { awk -v t="$1" -v n="$2" -v hz="$hz" 'BEGIN { if (n > 0) printf "%.2f", t * 1000 / hz / n; else print "-" }'; }

# make_file_root ROOT N TOML: N loops made from TOML, one by `new` and the
# rest copied from it (state and history name no loop), so setup is quick.
make_file_root() {
  local root=$1 n=$2 toml=$3 i
  "$bin" --root "$root" --store file init >/dev/null
  "$bin" --root "$root" --store file new l0 --from "$toml" >/dev/null
  for ((i = 1; i < n; i++)); do cp -r "$root/loops/l0" "$root/loops/l$i"; done
}

if part 1; then
echo "## 1. CLI operations, file store vs PostgreSQL (hyperfine, ${RUNS:-30} runs, warm)"
echo
cat > "$work/bench.toml" <<'TOML'
step = ["true"]
[[gate]]
stock = "max-failures"
params = { max = 3 }
TOML
pg=$(schema ops)
"$bin" --root "$work/pg" --store "$pg" init >/dev/null
"$bin" --root "$work/file" --store file init >/dev/null
for s in file pg; do
  st=file; [ $s = pg ] && st=$pg
  "$bin" --root "$work/$s" --store "$st" new bench --from "$work/bench.toml" >/dev/null
  for i in $(seq 100); do "$bin" --root "$work/$s" --store "$st" new "l$i" --step true >/dev/null; done
  "$bin" --root "$work/$s" --store "$st" tick bench >/dev/null
done
hyperfine -N -w 5 -r "${RUNS:-30}" --export-json "$work/ops.json" \
  -n "tick, file" "$bin --root $work/file --store file tick bench" \
  -n "tick, pg" "$bin --root $work/pg --store $pg tick bench" \
  -n "pause+resume, file" "sh -c '$bin --root $work/file --store file pause bench >/dev/null; $bin --root $work/file --store file resume bench'" \
  -n "pause+resume, pg" "sh -c '$bin --root $work/pg --store \"$pg\" pause bench >/dev/null; $bin --root $work/pg --store \"$pg\" resume bench'" \
  -n "status, file" "$bin --root $work/file --store file status bench" \
  -n "status, pg" "$bin --root $work/pg --store $pg status bench" \
  -n "list 101, file" "$bin --root $work/file --store file list" \
  -n "list 101, pg" "$bin --root $work/pg --store $pg list" >/dev/null
echo "| operation | wall (mean ± sd) | CPU (user + system) |"
echo "|---|---|---|"
jq -r '.results[] | "| \(.command) | \(.mean * 1000 * 100 | round / 100) ± \(.stddev * 1000 * 100 | round / 100) ms | \((.user + .system) * 1000 * 100 | round / 100) ms |"' "$work/ops.json"
echo
fi

if part 2; then
every=${EVERY:-1s}
echo "## 2. Daemons over 1,000 loops due every $every (step \`true\`), ${secs} s each"
echo
cat > "$work/due.toml" <<TOML
step = ["true"]
[schedule]
every = "$every"
TOML
make_file_root "$work/due" 1000 "$work/due.toml"
pg=$(schema daemons)
cp -r "$work/due" "$work/due-pg"
"$bin" migrate --from "$work/due-pg" --to "$pg" >/dev/null
for i in 1 2 3 4; do "$bin" --root "$work/host$i" --store "$pg" init >/dev/null; done
ticks_pg() { sql "$pg" "SELECT coalesce(sum((state->>'tick')::bigint), 0) FROM loops"; }
ticks_file() { cat "$work/due"/loops/*/.state.loop | grep -o '"tick": *[0-9]*' | awk -F: '{s += $2} END {print s + 0}'; }

# run_daemons STORE N: N daemons, each on its own root, measured for $secs s
# after $WARMUP s of warm-up (each daemon reads every loop's config and
# state when it starts); prints a table row.
run_daemons() {
  local store=$1 n=$2 i t0 t1 s0 s1 own=0 kids=0 c
  daemons=()
  for ((i = 1; i <= n; i++)); do
    if [ "$store" = file ]; then
      RUST_LOG=automaton=debug "$bin" --root "$work/due" --store file daemon 2>"$work/d$i.log" &
    else
      RUST_LOG=automaton=debug AUTOMATON_HOST="host$i" "$bin" --root "$work/host$i" --store "$pg" daemon 2>"$work/d$i.log" &
    fi
    daemons+=($!)
  done
  sleep "${WARMUP:-10}"
  declare -A c0
  for p in "${daemons[@]}"; do c0[$p]=$(cpu "$p"); done
  if [ "$store" = file ]; then t0=$(ticks_file); else t0=$(ticks_pg); fi
  s0=$(server_cpu)
  local busy0 busy1 q0 q1
  busy0=$(busy_lines "$n")
  q0=$(statements)
  sleep "$secs"
  if [ "$store" = file ]; then t1=$(ticks_file); else t1=$(ticks_pg); fi
  s1=$(server_cpu)
  busy1=$(busy_lines "$n")
  q1=$(statements)
  for p in "${daemons[@]}"; do
    read -r a b <<<"$(cpu "$p")"; read -r a0 b0 <<<"${c0[$p]}"
    own=$((own + a - a0)); kids=$((kids + b - b0))
  done
  for p in "${daemons[@]}"; do kill -TERM "$p"; done
  for p in "${daemons[@]}"; do wait "$p" || true; done
  daemons=()
  local ticks=$((t1 - t0)) server="-" queries="-"
  [ "$store" = pg ] && [ -n "$pgdata" ] && server="$(ms $((s1 - s0)) "$ticks") ms"
  [ "$store" = pg ] && [ -n "$q0" ] && queries=$(per "$((q1 - q0))" "$ticks")
  printf '| %s | %s | %s | %s | %s ms | %s ms | %s | %s |\n' "$store" "$n" \
    "$(awk -v t="$ticks" -v s="$secs" 'BEGIN { printf "%.0f", t / s }')" \
    "$(per $((busy1 - busy0)) "$ticks")" "$(ms "$own" "$ticks")" "$(ms "$kids" "$ticks")" "$server" "$queries"
}
# busy_lines N -> the busy skips the N daemons' logs have said so far.
busy_lines() {
  local i total=0 c
  for ((i = 1; i <= $1; i++)); do
    c=$(grep -cE ' tick [0-9]+: busy' "$work/d$i.log" || true)
    total=$((total + c))
  done
  echo "$total"
}
per() { awk -v a="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.3g", a / n; else print "-" }'; }
echo "| store | daemons (4 workers each) | ticks/s | busy skips per tick | daemon CPU per tick | step CPU per tick | server CPU per tick | statements per tick |"
echo "|---|---|---|---|---|---|---|---|"
run_daemons file 1
for n in ${DAEMONS:-1 2 4}; do run_daemons pg "$n"; done
crashed=$(sql "$pg" "SELECT count(*) FROM events WHERE event->>'kind' = 'crashed'")
ticks=$(ticks_pg); events=$(sql "$pg" "SELECT count(*) FROM events WHERE event->>'kind' = 'tick'")
echo
echo "PostgreSQL: $ticks ticks counted in the loops' states, $events tick events, $crashed crashed"
echo
if command -v hyperfine >/dev/null; then
  echo "\`list\` over those 1,000 loops (hyperfine, ${RUNS:-30} runs, warm):"
  echo
  hyperfine -N -w 3 -r "${RUNS:-30}" --export-json "$work/list.json" \
    -n "list 1000, file" "$bin --root $work/due --store file list" \
    -n "list 1000, pg" "$bin --root $work/host1 --store $pg list" >/dev/null
  echo "| operation | wall (mean ± sd) | CPU (user + system) |"
  echo "|---|---|---|"
  jq -r '.results[] | "| \(.command) | \(.mean * 1000 * 100 | round / 100) ± \(.stddev * 1000 * 100 | round / 100) ms | \((.user + .system) * 1000 * 100 | round / 100) ms |"' "$work/list.json"
  echo
fi
fi

part 3 || exit 0
echo "## 3. The wake-up path: a loop made on another host, to its first tick"
echo
cat > "$work/idle.toml" <<'TOML'
step = ["true"]
[schedule]
every = "1h"
TOML
pg=$(schema wake)
make_file_root "$work/idle" 1000 "$work/idle.toml"
"$bin" --root "$work/w1" --store "$pg" init >/dev/null
"$bin" --root "$work/w2" --store "$pg" init >/dev/null
"$bin" migrate --from "$work/idle" --to "$pg" >/dev/null
# Every loop ticked once, so none is due for an hour.
for i in $(seq 0 999); do echo "l$i"; done | xargs -P 4 -n 50 sh -c 'for l; do "$0" --root "$1" --store "$2" tick "$l" >/dev/null; done' "$bin" "$work/w2" "$pg" 2>/dev/null || true
AUTOMATON_HOST=runner "$bin" --root "$work/w1" --store "$pg" daemon 2>"$work/wake.log" &
daemons=($!)
sleep 3
read -r a0 _ <<<"$(cpu "${daemons[0]}")"
s0=$(server_cpu)
sleep "$secs"
read -r a1 _ <<<"$(cpu "${daemons[0]}")"
s1=$(server_cpu)
idle_daemon=$(awk -v t=$((a1 - a0)) -v s="$secs" -v hz="$hz" 'BEGIN { printf "%.1f", t * 1000 / hz / s }')
idle_server=$(awk -v t=$((s1 - s0)) -v s="$secs" -v hz="$hz" 'BEGIN { printf "%.1f", t * 1000 / hz / s }')
lat=()
for i in $(seq 20); do
  AUTOMATON_HOST=ops "$bin" --root "$work/w2" --store "$pg" new "w$i" --from "$work/idle.toml" >/dev/null
  until [ "$(sql "$pg" "SELECT state->>'last_tick' IS NOT NULL FROM loops WHERE name = 'w$i'")" = t ]; do sleep 0.02; done
  lat+=("$(sql "$pg" "SELECT round(extract(epoch FROM (l.state->'last_tick'->>'started_at')::timestamptz - e.at) * 1000) FROM loops l JOIN events e ON e.loop = l.name AND e.v = 1 AND e.n = 1 WHERE l.name = 'w$i'")")
done
kill -TERM "${daemons[0]}"; wait "${daemons[0]}" || true; daemons=()
sorted=$(printf '%s\n' "${lat[@]}" | sort -n)
echo "| | value |"
echo "|---|---|"
echo "| creation committed → first tick started, median of 20 | $(echo "$sorted" | sed -n 10p) ms |"
echo "| the same, slowest of 20 | $(echo "$sorted" | tail -n 1) ms |"
echo "| idle daemon over 1,000 loops, CPU | $idle_daemon ms/s |"
[ -n "$pgdata" ] && echo "| the server meanwhile, CPU | $idle_server ms/s |"
exit 0
