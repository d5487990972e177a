#!/usr/bin/env bash
# What a daemon holds of a PostgreSQL server's connections, and what it
# does when the server has no more to give.
#
# 1. Connections per daemon: one daemon with W workers (8, then 32) over
#    2W loops due every second whose step sleeps STEP (every worker busy);
#    the most connections of its (application_name = 'automaton') seen in
#    pg_stat_activity, sampled every 200 ms over SECS seconds.
# 2. A full server: DAEMONS daemons (each on a root of its own with its own
#    AUTOMATON_HOST, as on separate hosts) with 32 workers each over
#    LOOPS loops each due every EVERY whose step sleeps STEP, against a
#    server started with `max_connections = 100`; over SECS seconds: steps
#    stopped for a lease they could not keep (`crashed` records), ticks
#    that failed (daemons' "tick failed" lines, warnings and debug), ticks
#    run, and the most connections held at once.
#
# usage: bench/pg-connections.sh BIN URL
#   e.g. bench/pg-connections.sh target/release/automaton \
#          'postgresql://automaton@/postgres?host=/tmp/pg'
# env: PARTS (1 2)  WORKERS (8 32)  SECS (20)  STEP (part 1: 30; part 2: 60)
#      DAEMONS (4)  LOOPS (200: per daemon)  EVERY (60s)
set -euo pipefail
bin=$(realpath "$1"); url=$2
secs=${SECS:-20}
work=$(mktemp -d)
schemas=(); daemons=()
cleanup() {
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for s in "${schemas[@]}"; do psql "$url" -qc "DROP SCHEMA $s CASCADE" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
parts=" ${PARTS:-1 2} "
part() { [[ $parts == *" $1 "* ]]; }
schema() {
  local s="bench_$$_$1" sep='?'
  case "$url" in *\?*) sep='&';; esac
  psql "$url" -qc "CREATE SCHEMA $s" >/dev/null
  schemas+=("$s")
  echo "$url${sep}options=-c%20search_path%3D$s"
}
held() { psql "$url" -qAtc "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'automaton'"; }
# most_held SECS -> the most connections held at once, sampled every 200 ms
most_held() {
  local end=$((SECONDS + $1)) most=0 n
  while [ $SECONDS -lt $end ]; do
    n=$(held 2>/dev/null || true); [ "${n:-0}" -gt "$most" ] && most=$n
    sleep 0.2
  done
  echo "$most"
}
# loops URL ROOT N STEP EVERY: N loops made in the store at URL
loops() {
  local st=$1 root=$2 n=$3 step=$4 every=$5 i
  printf 'step = "sleep %s"\n[schedule]\nevery = "%s"\n' "$step" "$every" > "$work/l.toml"
  "$bin" --root "$root" --store "$st" init >/dev/null
  for ((i = 0; i < n; i++)); do
    AUTOMATON_MIN_EVERY=1s "$bin" --root "$root" --store "$st" new "l$i" --from "$work/l.toml" >/dev/null
  done
}

if part 1; then
echo "## 1. Connections per daemon (every worker busy)"
echo
echo "| workers | loops | connections held (most) | running ticks |"
echo "|---|---|---|---|"
for w in ${WORKERS:-8 32}; do
  st=$(schema "w$w")
  loops "$st" "$work/w$w" $((2 * w)) "${STEP:-30}" 1s
  "$bin" --root "$work/w$w" --store "$st" daemon --max-concurrent "$w" 2>"$work/w$w.log" &
  pid=$!; daemons+=("$pid")
  sleep 5
  most=$(most_held "$secs")
  running=$(psql "$st" -qAtc "SELECT count(*) FROM leases WHERE expires_at > now()")
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  echo "| $w | $((2 * w)) | $most | $running |"
done
echo
fi

if part 2; then
n=${DAEMONS:-4}; per=${LOOPS:-200}; every=${EVERY:-60s}; step=${STEP:-60}
limit=$(psql "$url" -qAtc "SHOW max_connections")
echo "## 2. $n daemons × 32 workers, $per loops each (step \`sleep $step\`, every $every), max_connections = $limit, ${secs} s"
echo
st=$(schema full)
loops "$st" "$work/full0" $((n * per)) "$step" "$every"
for ((d = 1; d < n; d++)); do "$bin" --root "$work/full$d" --store "$st" init >/dev/null; done
for ((d = 0; d < n; d++)); do
  AUTOMATON_HOST="host$d" "$bin" --root "$work/full$d" --store "$st" -v daemon --max-concurrent 32 \
    2>"$work/full$d.log" &
  daemons+=("$!")
done
most=$(most_held "$secs")
for ((d = n - 1; d >= 0; d--)); do kill -TERM "${daemons[-1]}" 2>/dev/null || true; wait "${daemons[-1]}" 2>/dev/null || true; unset 'daemons[-1]'; done
crashed=$(psql "$st" -qAtc "SELECT count(*) FROM events WHERE event->>'kind' = 'crashed'")
ran=$(psql "$st" -qAtc "SELECT count(*) FROM events WHERE event->>'kind' = 'tick'")
failed=$(cat "$work"/full*.log | grep -c "tick failed" || true)
lost=$(cat "$work"/full*.log | grep -ci "lease" | tr -d ' ' || true)
said=$(cat "$work"/full*.log | grep -c "refuses new connections (too many clients)" || true)
echo "| ticks recorded | steps stopped (crashed) | ticks failed | lines naming a lease | refusals said | connections held (most) |"
echo "|---|---|---|---|---|---|"
echo "| $ran | $crashed | $failed | $lost | $said | $most |"
fi
