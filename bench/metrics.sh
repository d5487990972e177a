#!/usr/bin/env bash
# The cost of a scrape of /metrics: a root with LOOPS loops (1,000 by
# default), each scheduled, ticked TICKS times (2) with a stock gate (so
# its history has ticks and gate events), one in ten awaiting approval;
# `automaton serve` on a free port; ROUNDS scrapes (20) by curl with a
# user's token, on the file store and, with a PostgreSQL URL given, on
# PostgreSQL too (the same loops, moved there by `migrate`, into a schema
# of their own, dropped at the end). Prints the first scrape (the server
# reads every history), then the median and p95 of the rest (histories
# kept: only state, config and ledger mark read) with the server's CPU
# time per scrape (the figure that holds on a loaded machine), the
# answer's size and its count of series.
#
# usage: bench/metrics.sh [BIN [URL]]
#   e.g. bench/metrics.sh target/debug/automaton 'postgresql://automaton@/postgres?host=/tmp/pg'
# URL: a database the role may create schemas in (needs psql).
# env: LOOPS, TICKS, ROUNDS override the counts.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "${1:-$repo/target/release/automaton}")
url=${2:-}
loops=${LOOPS:-1000}
ticks=${TICKS:-2}
rounds=${ROUNDS:-20}
work=$(mktemp -d)
schema=""
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  if [ -n "$schema" ]; then psql "$url" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
[ -z "$url" ] || command -v psql >/dev/null || { echo "needs psql" >&2; exit 2; }

export AUTOMATON_ROOT=$work/root
"$bin" init >/dev/null
cat > "$work/plain.toml" <<TOML
step = "true"
[schedule]
every = "15m"
[labels]
team = "bench"
[[gate]]
stock = "max-ticks"
params = { max = 100000 }
TOML
cat > "$work/gated.toml" <<TOML
step = "true"
[schedule]
cron = "*/5 * * * *"
[[gate]]
stock = "approve-every"
params = { every = 1 }
TOML
for i in $(seq -w 1 "$loops"); do
  kind=plain; [ $((10#$i % 10)) = 0 ] && kind=gated
  "$bin" new "loop-$i" --from "$work/$kind.toml" >/dev/null
  for _ in $(seq "$ticks"); do "$bin" tick "loop-$i" >/dev/null || true; done
done
token=$("$bin" user add bench --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')

# The server's CPU time (user and system), in clock ticks.
ticks_per_s=$(getconf CLK_TCK)
cpu() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }

# scrape LABEL ROOT [STORE]: serve on ROOT, its figures printed: the
# first scrape's time, then the median and p95 of the others' (curl's
# time_total), and the median of the server's CPU time per scrape (ms).
scrape() {
  local label=$1 root=$2 store=${3:-} base line
  local args=(--root "$root")
  [ -z "$store" ] || args+=(--store "$store")
  "$bin" "${args[@]}" serve --listen 127.0.0.1:0 > "$work/serve-$label.out" 2> "$work/serve-$label.err" &
  server=$!
  for _ in $(seq 100); do [ -s "$work/serve-$label.out" ] && break; sleep 0.1; done
  line=$(head -n 1 "$work/serve-$label.out")
  base=${line#listening on }
  : > "$work/times-$label"
  : > "$work/cpu-$label"
  for r in $(seq 0 "$rounds"); do
    c0=$(cpu)
    curl -sf -o "$work/body-$label" -w '%{time_total}\n' -H "Authorization: Bearer $token" "$base/metrics" > "$work/t"
    c1=$(cpu)
    if [ "$r" = 0 ]; then first=$(cat "$work/t"); else
      cat "$work/t" >> "$work/times-$label"
      echo $(( (c1 - c0) * 1000 / ticks_per_s )) >> "$work/cpu-$label"
    fi
  done
  # The listing's own cost on the same server, for comparison.
  : > "$work/list-cpu-$label"
  for r in $(seq "$rounds"); do
    c0=$(cpu)
    curl -sf -o /dev/null -H "Authorization: Bearer $token" "$base/api/loops"
    c1=$(cpu)
    echo $(( (c1 - c0) * 1000 / ticks_per_s )) >> "$work/list-cpu-$label"
  done
  list_cpu=$(sort -n "$work/list-cpu-$label" | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }')
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
  cpu_median=$(sort -n "$work/cpu-$label" | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }')
  sort -n "$work/times-$label" | awk -v what="$label" -v first="$first" -v cpu="$cpu_median" \
    -v bytes="$(wc -c < "$work/body-$label")" -v series="$(grep -vc '^#' "$work/body-$label")" \
    '{ t[NR] = $1 * 1000 } END {
      printf "%-12s first %.0f ms  then n %d  median %.1f ms  p95 %.1f ms  server CPU %d ms a scrape  (%d bytes, %d series)\n",
        what, first * 1000, NR, t[int((NR + 1) / 2)], t[int((NR * 95 + 99) / 100)], cpu, bytes, series }'
  echo "             GET /api/loops on the same server: CPU $list_cpu ms a request (median)"
}

echo "## /metrics over $loops loops ($ticks ticks each), $(basename "$bin") $(uname -m)"
scrape file "$work/root"
if [ -n "$url" ]; then
  schema="bench_metrics_$$"
  sep='?'; case "$url" in *\?*) sep='&';; esac
  psql "$url" -qc "CREATE SCHEMA $schema" >/dev/null
  pg="$url${sep}options=-c%20search_path%3D$schema"
  cp -r "$work/root" "$work/root-pg"
  "$bin" migrate --from "$work/root-pg" --to "$pg" >/dev/null
  # The users live in the store: the console's user is made there too.
  token=$("$bin" --root "$work/root-pg" --store "$pg" user add bench --json | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
  scrape postgres "$work/root-pg" "$pg"
fi
