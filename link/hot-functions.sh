#!/usr/bin/env bash
# Makes link/hot-functions.txt: the functions the release binary lays out
# first (build.rs passes the list to the linker), in the order a run of
# `--version`, a confined tick with a stock gate, an unconfined tick,
# `status` and `history` first enter them.
#
# A release build writes its link map (AUTOMATON_LINK_MAP), which names the
# functions of the stripped binary and says where each is; link/hottrace.c
# runs each command under ptrace with a breakpoint on every one and lists
# those entered. Run it again when the list has gone stale (a tick's code
# faulting in many more pages of text than it did: bench/tick-cost.sh's
# page faults, or `perf record -e page-faults -d`); a name the build no
# longer has is skipped, so a stale list costs page faults, never
# correctness. Needs a C compiler and python3; x86_64 Linux only.
#
# usage: link/hot-functions.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
mkdir -p "$target"
work=$(mktemp -d)
# A second root outside the temporary directory: a step's confinement
# takes another way when the temporary directory holds the root.
away=$(mktemp -d -p "$target")
trap 'rm -rf "$work" "$away"' EXIT

AUTOMATON_LINK_MAP="$work/automaton.map" cargo build --release --quiet --manifest-path "$repo/Cargo.toml"
cp "$target/release/automaton" "$work/automaton"
cc -O2 -o "$work/hottrace" "$repo/link/hottrace.c"

# Each function's address and name, from the map's input sections
# (`.text.<name>`, or `.text.unlikely.<name>` for code marked cold).
python3 - "$work/automaton.map" "$work/addrs" "$work/names" <<'PY'
import re, sys
pattern = re.compile(
    r"\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s+\S+:\(\.text\.(?:unlikely\.|hot\.|startup\.|exit\.)?(\S+)\)$")
names = {}
for line in open(sys.argv[1]):
    m = pattern.match(line)
    if m and int(m.group(2), 16) > 0:
        names.setdefault(int(m.group(1), 16), []).append(m.group(3))
with open(sys.argv[2], "w") as f:
    f.writelines(f"{a:x}\n" for a in sorted(names))
with open(sys.argv[3], "w") as f:
    f.writelines(f"{a:x} {n}\n" for a, ns in sorted(names.items()) for n in ns)
PY

bin=$work/automaton
trace() { # OUT ARGS...
  local out=$1
  shift
  "$work/hottrace" "$work/addrs" "$work/$out" -- "$bin" "$@" >/dev/null
}
. "$repo/bench/lib.sh"
loop_toml gated 1m >"$work/gated.toml"
loop_toml unconfined 1m >"$work/open.toml"
for root in "$work/root" "$away/root"; do
  "$bin" --root "$root" init >/dev/null
  "$bin" --root "$root" new gated --from "$work/gated.toml" >/dev/null
  "$bin" --root "$root" new open --from "$work/open.toml" >/dev/null
done
root=$work/root
# The first tick compiles the gate (once per machine): not what a tick runs.
"$bin" --root "$root" tick gated >/dev/null

trace version --version
trace gated --root "$root" tick gated
trace gated-away --root "$away/root" tick gated
trace open --root "$root" tick open
trace status-one --root "$root" status gated
trace status-all --root "$root" status
trace history --root "$root" history gated

python3 - "$work/names" "$repo/link/hot-functions.txt" \
  "$work"/{version,gated,gated-away,open,status-one,status-all,history} <<'PY'
import sys
names = {}
for line in open(sys.argv[1]):
    a, n = line.split()
    names.setdefault(int(a, 16), []).append(n)
seen, order = set(), []
for run in sys.argv[3:]:
    for line in open(run):
        a = int(line, 16)
        if a not in seen:
            seen.add(a)
            order.extend(names[a])
with open(sys.argv[2], "w") as f:
    f.write("# The functions laid out first in the release binary (build.rs), in the\n"
            "# order `--version`, a confined tick with a stock gate, an unconfined tick,\n"
            "# `status` and `history` first run them. Made by link/hot-functions.sh.\n")
    f.writelines(n + "\n" for n in order)
print(f"link/hot-functions.txt: {len(seen)} functions")
PY
