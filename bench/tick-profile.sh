#!/usr/bin/env bash
# Where a CLI tick's CPU goes, for each automaton binary given, next to the
# minimal durable tick (../shared/peers/floor.c): counts that a shared,
# loaded machine does not move.
#  - instructions in user space (callgrind, the runner only, not the step
#    it runs), split by the object they ran in (the binary, the dynamic
#    loader, glibc); a tick's guard is a clone(CLONE_VM) that callgrind
#    cannot follow, so only the start-up and the floor are counted;
#  - page faults and task-clock (perf stat, ROUNDS runs, means);
#  - system calls of the runner and its children (strace -c -f).
# Of `--version` (start-up alone) and of one `tick` (warm cache, one stock
# gate, step `true`), the set-up of bench/tick-cost.sh.
# usage: bench/tick-profile.sh [-n ROUNDS] LABEL=BIN...   env: SHARED
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
rounds=50
if [ "${1:-}" = "-n" ]; then rounds=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: $0 [-n ROUNDS] LABEL=BIN..." >&2; exit 2; }
for tool in valgrind callgrind_annotate perf strace; do
  command -v $tool >/dev/null || { echo "$0: $tool is needed" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/floor" "$shared/peers/floor.c"
mkdir -p "$work/floor-loop" && echo '{"tick":0,"status":"active"}' > "$work/floor-loop/.state.loop"
cat > "$work/bench.toml" <<'TOML'
step = ["true"]
[[gate]]
stock = "max-failures"
params = { max = 3 }
TOML

# perf stat over ROUNDS runs: "task-clock ms, page faults" (means).
stat() {
  perf stat -x, -r "$rounds" -e task-clock,page-faults "$@" 2>&1 >/dev/null |
    awk -F, '$3=="task-clock"{t=$1} $3=="page-faults"{f=$1} END{printf "%.2f ms CPU, %d faults", t, f}'
}
# Syscalls of one run and its children.
calls() {
  strace -f -c -o "$work/strace" "$@" >/dev/null 2>&1
  awk '$NF=="total"{print $4 " system calls"}' "$work/strace"
}
# Instructions of one run (the runner, not its children), by object.
instructions() {
  local out=$work/cg.out
  rm -f "$out"
  # A tick's guard is a clone(CLONE_VM) callgrind cannot follow (Linux
  # x86_64): its instructions are not counted, the start-up's are.
  if ! valgrind --tool=callgrind --callgrind-out-file="$out" --trace-children=no \
    "$@" >/dev/null 2>"$work/vg"; then
    echo "instructions not counted: $(grep -m1 -o 'Unsupported clone.*\|Valgrind does not support.*' "$work/vg" || echo 'callgrind failed')"
    return 0
  fi
  python3 - "$out" "$1" <<'PY'
import re, sys
# The self cost of each function, summed by the object it is in (ob=
# before fn=); a cost line after calls= is a call's inclusive cost.
names, by, ob, fnob, skip = {}, {}, None, None, False
for line in open(sys.argv[1], errors="replace"):
    line = line.rstrip("\n")
    m = re.match(r"(c?ob)=(?:\((\d+)\))? ?(.*)$", line)
    if m:
        key, i, name = m.groups()
        if i and name:
            names[i] = name
        if key == "ob":
            ob = names.get(i, name) if i else name
    elif line.startswith("fn="):
        fnob = ob
    elif line.startswith("calls="):
        skip = True
    elif line[:1].isdigit() or line[:1] in "+-*":
        if not skip and len(line.split()) >= 2:
            by[fnob] = by.get(fnob, 0) + int(line.split()[1])
        skip = False
def kind(o):
    o = o or ""
    if o == sys.argv[2]: return "binary"
    if "ld-linux" in o: return "loader"
    if "libc.so" in o or "libm.so" in o: return "glibc"
    return "other"
parts = {}
for o, n in by.items():
    parts[kind(o)] = parts.get(kind(o), 0) + n
print(f"{sum(by.values()) / 1e6:.2f} M instructions:",
      ", ".join(f"{k} {v / 1e6:.2f} M" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])))
PY
}

echo "floor.c tick"
echo "  $(stat "$work/floor" "$work/floor-loop")"
echo "  $(calls "$work/floor" "$work/floor-loop")"
echo "  $(instructions "$work/floor" "$work/floor-loop" | head -1)"
for spec in "$@"; do
  label=${spec%%=*} bin=$(realpath "${spec#*=}")
  root="$work/root-$label"
  "$bin" --root "$root" init >/dev/null
  "$bin" --root "$root" new bench --from "$work/bench.toml" >/dev/null
  "$bin" --root "$root" tick bench >/dev/null # compiles the gate into the cache
  echo "$label: binary $(wc -c <"$bin") bytes"
  echo "$label: --version"
  echo "  $(stat "$bin" --version)"
  echo "  $(calls "$bin" --version)"
  instructions "$bin" --version | sed 's/^/  /'
  echo "$label: tick"
  echo "  $(stat "$bin" --root "$root" tick bench)"
  echo "  $(calls "$bin" --root "$root" tick bench)"
  instructions "$bin" --root "$root" tick bench | sed 's/^/  /'
done
echo "load $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores"
