#!/usr/bin/env bash
# The console under load: a root with LOOPS loops (1,000 by default), a
# user, `automaton serve` on a free port; then ROUNDS requests (100) each
# of GET /api/loops and GET / (the loops page) over all of them, and one
# approval POST to each of APPROVALS loops (100) awaiting approval.
# Prints the median and p95 of each, in milliseconds (curl's time_total:
# a fresh connection each request, as a browser's first).
# usage: bench/serve.sh [BIN]   (LOOPS=, ROUNDS=, APPROVALS= override)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "${1:-$repo/target/release/automaton}")
loops=${LOOPS:-1000}
rounds=${ROUNDS:-100}
approvals=${APPROVALS:-100}
work=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
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
token=$("$bin" user add bench --json | sed -n 's/.*"token": "\(.*\)".*/\1/p')
"$bin" serve --listen 127.0.0.1:0 > "$work/serve.out" 2>"$work/serve.log" &
server=$!
until [ -s "$work/serve.out" ]; do sleep 0.05; done
base=$(sed -n 's/^listening on //p' "$work/serve.out")

# Prints the median and p95 of the times (seconds, one a line) in $1.
stats() {
  sort -n "$1" | awk -v what="$2" '{ t[NR] = $1 * 1000 } END {
    printf "%-28s n %d  median %.1f ms  p95 %.1f ms\n", what, NR, t[int((NR + 1) / 2)], t[int((NR * 95 + 99) / 100)] }'
}
auth="Authorization: Bearer $token"
curl -sf -H "$auth" "$base/api/loops" -o "$work/loops.json"
echo "loops listed: $(grep -c '"name"' "$work/loops.json" || true)"
for _ in $(seq "$rounds"); do
  curl -sf -o /dev/null -w '%{time_total}\n' -H "$auth" "$base/api/loops" >> "$work/api"
done
stats "$work/api" "GET /api/loops"
curl -s -c "$work/pre" -o "$work/signin.html" "$base/signin"
csrf=$(sed -n 's/.*name="csrf" value="\([^"]*\)".*/\1/p' "$work/signin.html")
curl -s -o /dev/null -b "$work/pre" -c "$work/jar" \
  --data-urlencode "token=$token" --data-urlencode "csrf=$csrf" "$base/signin"
for _ in $(seq "$rounds"); do
  curl -sf -o /dev/null -w '%{time_total}\n' -b "$work/jar" "$base/" >> "$work/page"
done
stats "$work/page" "GET / (the loops page)"
for i in $(seq -w 1 "$approvals"); do
  curl -sf -o /dev/null -w '%{time_total}\n' -H "$auth" -H 'Content-Type: application/json' \
    -d '{"note": "bench"}' "$base/api/loops/gated-$i/approve" >> "$work/approve"
done
stats "$work/approve" "POST approve"
kill -TERM "$server"; wait "$server"
