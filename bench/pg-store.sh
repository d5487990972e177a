#!/usr/bin/env bash
# The PostgreSQL store against the file store, one binary, side by side
# (hyperfine, interleaving nothing but warm on both): one CLI `tick` (one
# stock gate, step `true`), one `pause`+`resume` pair (two operator
# commits), `status` of one loop, and `list` over 100 loops.
# usage: bench/pg-store.sh BIN URL      e.g. bench/pg-store.sh target/release/automaton \
#          'postgresql://automaton@/postgres?host=/tmp/pg'
set -euo pipefail
bin=$(realpath "$1"); url=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/bench.toml" <<'TOML'
step = ["true"]
[[gate]]
stock = "max-failures"
params = { max = 3 }
TOML
schema="bench_$$"
psql_url="$url"
"$bin" --root "$work/pg" --store "$url" init >/dev/null
# A schema of its own, so the numbers are of an otherwise empty store.
sep='?'; case "$url" in *\?*) sep='&';; esac
pg="$url${sep}options=-c%20search_path%3D$schema"
psql "$psql_url" -qc "CREATE SCHEMA $schema" 2>/dev/null || { echo "needs psql" >&2; exit 2; }
trap 'psql "$psql_url" -qc "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1; rm -rf "$work"' EXIT
"$bin" --root "$work/pg" --store "$pg" init >/dev/null
"$bin" --root "$work/file" init >/dev/null
for s in file pg; do
  st=file; [ $s = pg ] && st=$pg
  "$bin" --root "$work/$s" --store "$st" new bench --from "$work/bench.toml" >/dev/null
  for i in $(seq 100); do "$bin" --root "$work/$s" --store "$st" new "l$i" --step true >/dev/null; done
  "$bin" --root "$work/$s" --store "$st" tick bench >/dev/null
done
hyperfine -N -w 5 -r "${RUNS:-50}" --export-markdown "$work/out.md" \
  -n "tick file" "$bin --root $work/file --store file tick bench" \
  -n "tick pg" "$bin --root $work/pg --store $pg tick bench" \
  -n "pause+resume file" "sh -c '$bin --root $work/file --store file pause bench >/dev/null; $bin --root $work/file --store file resume bench'" \
  -n "pause+resume pg" "sh -c '$bin --root $work/pg --store \"$pg\" pause bench >/dev/null; $bin --root $work/pg --store \"$pg\" resume bench'" \
  -n "status file" "$bin --root $work/file --store file status bench" \
  -n "status pg" "$bin --root $work/pg --store $pg status bench" \
  -n "list 101 file" "$bin --root $work/file --store file list" \
  -n "list 101 pg" "$bin --root $work/pg --store $pg list" >/dev/null
cat "$work/out.md"
