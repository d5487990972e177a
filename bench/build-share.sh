#!/usr/bin/env bash
# The README's two commands on a fresh clone: `cargo build --all-targets`
# (what the quick start runs), then `cargo test` (here `cargo test --no-run`:
# its build, not the suite). Prints each one's wall and CPU time and how many
# crates it compiled; the second should compile nothing.
# usage: bench/build-share.sh [REV]   (default HEAD; needs the registry cache)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$repo" rev-parse "${1:-HEAD}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet --no-checkout "$repo" "$work/src"
git -C "$work/src" checkout --quiet "$rev"
export CARGO_TARGET_DIR="$work/target"

run() { # label, cargo args... -> "label: N s wall, N s CPU, N crates compiled"
  local label=$1; shift
  (cd "$work/src" && /usr/bin/time -f '%e %U %S' -o "$work/$label.time" cargo "$@" --locked 2>&1) \
    > "$work/$label.log"
  read -r wall user sys < "$work/$label.time"
  printf '%-32s %6.1f s wall  %7.1f s CPU  %3d crates compiled\n' "$label" "$wall" \
    "$(echo "$user + $sys" | bc)" "$(grep -c '^ *Compiling ' "$work/$label.log" || true)"
}

echo "rev $(git -C "$repo" rev-parse --short "$rev"), $(nproc) cores, empty target dir"
run "cargo build --all-targets" build --all-targets
run "cargo test (build only)" test --no-run
echo "compiled by the second command:"
sed -n 's/^ *Compiling \([^ ]*\) .*/  \1/p' "$work/cargo test (build only).log" | sort | tr '\n' ' '
echo
