#!/usr/bin/env bash
# The README's two commands on a fresh clone: `cargo build` (what the quick
# start runs), then `cargo test` (here `cargo test --no-run`: its build, not
# the suite). Prints each one's wall time and how many crates it compiled;
# the second should compile only automaton itself and the test-only crates.
# usage: bench/build-share.sh [REV]   (default HEAD; needs the registry cache)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$repo" rev-parse "${1:-HEAD}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet --no-checkout "$repo" "$work/src"
git -C "$work/src" checkout --quiet "$rev"
export CARGO_TARGET_DIR="$work/target"

run() { # label, cargo args... -> "label: Ns, N crates compiled"
  local label=$1; shift
  local start end
  start=$(date +%s.%N)
  (cd "$work/src" && cargo "$@" --locked 2>&1) > "$work/$label.log"
  end=$(date +%s.%N)
  printf '%-28s %6.1f s  %3d crates compiled\n' "$label" "$(echo "$end - $start" | bc)" \
    "$(grep -c '^ *Compiling ' "$work/$label.log")"
}

echo "rev $(git -C "$repo" rev-parse --short "$rev"), $(nproc) cores, empty target dir"
run "cargo build" build
run "cargo test (build only)" test --no-run
echo "compiled by the second command:"
sed -n 's/^ *Compiling \([^ ]*\) .*/  \1/p' "$work/cargo test (build only).log" | sort | tr '\n' ' '
echo
