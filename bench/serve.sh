#!/usr/bin/env bash
# The console under load: a root with LOOPS loops (1,000 by default), a
# user, `automaton serve` on a free port; on the file store and, with a
# PostgreSQL URL given, on PostgreSQL too (the same loops, moved there by
# `migrate`, into a schema of their own, dropped at the end).
#
# 1. Live updates: STREAMS `GET /events` streams (200) kept open by curl,
#    each read by a shell loop that notes when each event arrives; the
#    server's resident memory (VmRSS) before they open, once every one has
#    had a first change, and after the changes. Then CHANGES commits (100)
#    to one loop, `pause` and `resume` by turns, each at a random moment
#    0-0.3 s after the last one reached the first stream: the time from
#    the command's return to the event's arrival, on every stream (on
#    PostgreSQL it can be below 0: the store notifies at the commit,
#    before the command has exited). Prints the p50, p95, p99 and largest
#    over every stream's events, the command's own median, and whether
#    every stream had every change.
# 2. Requests: ROUNDS requests (100) each of GET /api/loops and GET / (the
#    loops page) over all the loops, and one approval POST to each of
#    APPROVALS loops (100) awaiting approval. Prints the median and p95 of
#    each, in milliseconds (curl's time_total: a fresh connection each
#    request, as a browser's first).
# Then the live figures of both stores side by side.
#
# usage: bench/serve.sh [BIN [URL]]
#   e.g. bench/serve.sh target/debug/automaton 'postgresql://automaton@/postgres?host=/tmp/pg'
# URL: a database the role may create schemas in (needs psql).
# env: LOOPS, ROUNDS, APPROVALS, STREAMS, CHANGES override the counts.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "${1:-$repo/target/release/automaton}")
url=${2:-}
loops=${LOOPS:-1000}
rounds=${ROUNDS:-100}
approvals=${APPROVALS:-100}
streams=${STREAMS:-200}
changes=${CHANGES:-100}
work=$(mktemp -d)
schema=""
cleanup() {
  if [ -n "${server:-}" ]; then kill "$server" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  if [ -n "$schema" ]; then psql "$url" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
[ -z "$url" ] || command -v psql >/dev/null || { echo "needs psql" >&2; exit 2; }

# The root: gated loops awaiting approval, the rest plain.
export AUTOMATON_ROOT=$work/root
"$bin" init >/dev/null
cat > "$work/gated.toml" <<TOML
step = "true"
[[gate]]
stock = "approve-every"
params = { every = 1 }
TOML
for i in $(seq -w 1 "$approvals"); do
  "$bin" new "gated-$i" --from "$work/gated.toml" >/dev/null
  "$bin" tick "gated-$i" >/dev/null
  "$bin" tick "gated-$i" >/dev/null || true # awaits approval
done
for i in $(seq -w 1 $(( loops - approvals ))); do
  "$bin" new "plain-$i" --step true >/dev/null
done
if [ -n "$url" ]; then
  schema="bench_serve_$$"
  sep='?'; case "$url" in *\?*) sep='&';; esac
  psql "$url" -qc "CREATE SCHEMA $schema" >/dev/null
  pg="$url${sep}options=-c%20search_path%3D$schema"
  cp -r "$work/root" "$work/root-pg"
  "$bin" migrate --from "$work/root-pg" --to "$pg" >/dev/null
fi

# Prints the median and p95 of the times (seconds, one a line) in $1.
stats() {
  sort -n "$1" | awk -v what="$2" '{ t[NR] = $1 * 1000 } END {
    printf "%-28s n %d  median %.1f ms  p95 %.1f ms\n", what, NR, t[int((NR + 1) / 2)], t[int((NR * 95 + 99) / 100)] }'
}
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$server/status"; }

# stream N: one open /events stream; each event's arrival time and data,
# a line each, in $out/stream-N.
stream() {
  curl -sN -H "$auth" "$base/events" | while IFS= read -r line; do
    if [[ $line == data:* ]]; then echo "$EPOCHREALTIME ${line#data: }"; fi
  done > "$out/stream-$1"
}
# Lines in file $1, without a process.
lines() { local l=(); [ -e "$1" ] && mapfile -t l < "$1"; echo "${#l[@]}"; }
# The loop the changes are made to, and whether it is paused.
target=plain-$(seq -w 1 $(( loops - approvals )) | head -n 1)
paused=0
# One commit to it: pause, or resume.
flip() {
  if [ "$paused" = 0 ]; then "$bin" pause "$target" >/dev/null; paused=1
  else "$bin" resume "$target" >/dev/null; paused=0; fi
}

# live LABEL: part 1, its figures in $work/live-LABEL.
live() {
  local label=$1 before after end i s n got wanted began took
  out=$work/streams-$label; mkdir -p "$out"
  paused=0
  before=$(rss)
  for i in $(seq "$streams"); do stream "$i" & done
  # Once every stream has had a change, all are open.
  for _ in $(seq 50); do
    flip
    sleep 0.5
    n=0
    for i in $(seq "$streams"); do [ -s "$out/stream-$i" ] && n=$((n + 1)); done
    [ "$n" = "$streams" ] && break
  done
  [ "$n" = "$streams" ] || { echo "only $n of $streams streams opened" >&2; exit 1; }
  sleep 1
  after=$(rss)
  for i in $(seq "$streams"); do lines "$out/stream-$i" > "$out/base-$i"; done
  : > "$out/sent"
  for i in $(seq "$changes"); do
    began=$EPOCHREALTIME
    flip
    echo "$began $EPOCHREALTIME" >> "$out/sent"
    wanted=$(( $(cat "$out/base-1") + i ))
    for _ in $(seq 1000); do
      [ "$(lines "$out/stream-1")" -ge "$wanted" ] && break
      sleep 0.01
    done
    sleep "0.$(printf %03d $((RANDOM % 300)))"
  done
  sleep 2
  end=$(rss)
  got=0
  for i in $(seq "$streams"); do
    s=$(cat "$out/base-$i")
    tail -n +"$((s + 1))" "$out/stream-$i" | head -n "$changes" |
      paste -d ' ' "$out/sent" - | awk 'NF == 4 { printf "%.6f\n", $3 - $2 }' >> "$out/delays"
    [ "$(lines "$out/stream-$i")" -ge "$((s + changes))" ] && got=$((got + 1))
  done
  took=$(awk '{ printf "%.6f\n", $2 - $1 }' "$out/sent" | sort -n | awk '{ t[NR] = $1 * 1000 } END { printf "%.0f", t[int((NR + 1) / 2)] }')
  sort -n "$out/delays" | awk -v b="$before" -v a="$after" -v e="$end" -v n="$streams" -v got="$got" \
    -v took="$took" -v label="$label" '{ t[NR] = $1 * 1000 } END {
      printf "%s\t%.1f -> %.1f MiB (+%.1f); %.1f MiB after the changes\t%d of %d\t%d\t%s ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\n", label,
        b / 1024, a / 1024, (a - b) / 1024, e / 1024, got, n, NR, took,
        t[int((NR + 1) / 2)], t[int((NR * 95 + 99) / 100)], t[int((NR * 99 + 99) / 100)], t[NR] }' \
    > "$work/live-$label"
  awk -F '\t' '{ printf "live updates, %s: %d streams, server RSS %s; streams that had all %d changes: %s; the command: median %s; from its return to the event (n %d): p50 %s  p95 %s  p99 %s  max %s\n",
    $1, '"$streams"', $2, '"$changes"', $3, $5, $4, $6, $7, $8, $9 }' "$work/live-$label"
}

# requests: part 2.
requests() {
  local out=$work/requests-$1
  mkdir -p "$out"
  curl -sf -H "$auth" "$base/api/loops" -o "$out/loops.json"
  echo "loops listed: $(grep -c '"name"' "$out/loops.json" || true)"
  for _ in $(seq "$rounds"); do
    curl -sf -o /dev/null -w '%{time_total}\n' -H "$auth" "$base/api/loops" >> "$out/api"
  done
  stats "$out/api" "GET /api/loops"
  curl -s -c "$out/pre" -o "$out/signin.html" "$base/signin"
  csrf=$(sed -n 's/.*name="csrf" value="\([^"]*\)".*/\1/p' "$out/signin.html")
  curl -s -o /dev/null -b "$out/pre" -c "$out/jar" \
    --data-urlencode "token=$token" --data-urlencode "csrf=$csrf" "$base/signin"
  for _ in $(seq "$rounds"); do
    curl -sf -o /dev/null -w '%{time_total}\n' -b "$out/jar" "$base/" >> "$out/page"
  done
  stats "$out/page" "GET / (the loops page)"
  for i in $(seq -w 1 "$approvals"); do
    curl -sf -o /dev/null -w '%{time_total}\n' -H "$auth" -H 'Content-Type: application/json' \
      -d '{"note": "bench"}' "$base/api/loops/gated-$i/approve" >> "$out/approve"
  done
  stats "$out/approve" "POST approve"
}

# start LABEL: a server over the root's store.
start() {
  "$bin" serve --listen 127.0.0.1:0 > "$work/serve-$1.out" 2>"$work/serve-$1.log" &
  server=$!
  until [ -s "$work/serve-$1.out" ]; do sleep 0.05; done
  base=$(sed -n 's/^listening on //p' "$work/serve-$1.out")
}
# stop: SIGTERM; the drain ends the streams, and their readers with them.
stop() {
  kill -TERM "$server"; wait "$server"; server=""
  wait
}

# run LABEL: both parts against the root's store, each on a fresh server.
run() {
  echo "## $1"
  token=$("$bin" user add "bench-$1" --json | sed -n 's/.*"token": "\(.*\)".*/\1/p')
  auth="Authorization: Bearer $token"
  start "$1-live"; live "$1"; stop
  start "$1-requests"; requests "$1"; stop
  echo
}

run file
if [ -n "$url" ]; then
  AUTOMATON_ROOT=$work/root-pg AUTOMATON_STORE=$pg run postgresql
fi
echo "| live updates | $(cut -f1 "$work"/live-* | paste -sd '|' | sed 's/|/ | /g') |"
echo "|---|$(for _ in "$work"/live-*; do printf -- '---:|'; done)"
row() { echo "| $1 | $(cut -f"$2" "$work"/live-* | paste -sd '|' | sed 's/|/ | /g') |"; }
row "server RSS: before -> $streams streams open" 2
row "streams that had all $changes changes" 3
row "events timed" 4
row "the command (\`pause\`/\`resume\`), median" 5
row "its return -> the event, p50" 6
row "p95" 7
row "p99" 8
row "max" 9
