#!/usr/bin/env bash
# What a gate's `history` (the last 10 runs, sums over 1 h, 24 h and 7 d)
# costs a tick on the PostgreSQL store with 10 and 10,000 recorded runs,
# read from the store's ledger of runs (one statement) beside the whole
# history read and made into a ledger in memory, in one run
# (benches/pg_windows.rs): wall and CPU per call, and the server's
# statements and execution time per call from pg_stat_statements.
#
# usage: bench/pg-windows.sh [URL]
#   URL: a database the role may create a schema in, whose server loaded
#   pg_stat_statements (without it the server's columns are empty).
#   Without URL, a throw-away server is started under a temporary
#   directory (as user postgres when run as root) and stopped at the end.
# env: PROFILE (bench: `cargo bench`'s release build; dev: the debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
url=${1:-}
dir=
cleanup() {
  if [ -n "$dir" ]; then
    as_pg "'$pgbin/pg_ctl' -D '$dir/data' -m immediate stop" >/dev/null 2>&1 || true
    rm -rf "$dir"
  fi
}
trap cleanup EXIT
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
if [ -z "$url" ]; then
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  dir=$(mktemp -d)
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_pg "'$pgbin/initdb' -D '$dir/data' -A trust -U automaton" >/dev/null
  as_pg "'$pgbin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -o \"-k $dir -c listen_addresses='' -c shared_preload_libraries=pg_stat_statements\" start" >/dev/null
  url="postgresql://automaton@/postgres?host=$dir"
  psql "$url" -qc "CREATE EXTENSION pg_stat_statements"
fi
AUTOMATON_BENCH_STORE=$url cargo bench --profile "${PROFILE:-bench}" --bench pg_windows
