#!/usr/bin/env bash
# What a tick costs, as a new user would measure it: for each automaton
# binary given, its size, its start-up alone (`automaton --version`) and one
# `tick` (warm cache, one stock gate, step `true`), against the minimal
# durable tick
# (../shared/peers/floor.c, cc -O2) and `/usr/bin/true` (what any exec of a
# dynamically linked program costs here). 40 interleaved rounds by default
# (each round runs every command once, so load on a shared machine falls on
# all alike); wall time, CPU time (user + system of the process and the
# children it waited for, from getrusage via wait4) and page faults (minor
# and major, the same way); medians.
#
# Each binary is copied into the work directory first and the copy is
# timed: how a binary's file sits in the page cache changes what it costs
# to map (the same build, its file written an hour and a busy benchmark
# earlier, took 44 more page faults and 0.4 ms more CPU a tick than a copy
# made just before), so builds made at different times compare fairly only
# as fresh copies.
#
# Then, for each binary, where the tick's CPU goes, by difference (the
# same tick made smaller one part at a time, interleaved in the same
# rounds): the gate (the tick with its stock gate less the tick without
# one), the step's confinement (a gateless tick less the same with
# `confine = "off"`), start-up (`--version`), and the rest of the tick
# (an unconfined gateless tick less start-up: arguments, config and state,
# the lock, the run directory, the step's fork/exec and `true` itself,
# the commit and its syncs). PARTS=0 skips these runs.
# usage: bench/tick-cost.sh [-n ROUNDS] LABEL=BIN...   env: SHARED, PYTHON, PARTS, ROOTS
#   e.g. bench/tick-cost.sh before=/tmp/old/automaton after=target/release/automaton
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
py=${PYTHON:-/usr/bin/python3}
rounds=40
if [ "${1:-}" = "-n" ]; then rounds=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: $0 [-n ROUNDS] LABEL=BIN..." >&2; exit 2; }
# The roots go under $ROOTS, else in the temporary directory.
. "$(dirname "$0")/lib.sh"
bench_work
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/floor" "$shared/peers/floor.c"
mkdir -p "$work/floor-loop" && echo '{"tick":0,"status":"active"}' > "$work/floor-loop/.state.loop"

loop_toml gated > "$work/bench.toml"
# The parts: the same tick without its gate, and that unconfined too.
loop_toml gateless > "$work/gateless.toml"
loop_toml unconfined > "$work/unconfined.toml"
args=()
for spec in "$@"; do
  label=${spec%%=*}
  mkdir "$work/bin-$label"
  bin="$work/bin-$label/automaton"
  cp "$(realpath "${spec#*=}")" "$bin"
  root="$work/root-$label"
  "$bin" --root "$root" init >/dev/null
  "$bin" --root "$root" new bench --from "$work/bench.toml" >/dev/null
  if [ "${PARTS:-1}" != 0 ]; then
    "$bin" --root "$root" new gateless --from "$work/gateless.toml" >/dev/null
    "$bin" --root "$root" new unconfined --from "$work/unconfined.toml" >/dev/null
    "$bin" --root "$root" tick gateless >/dev/null
    "$bin" --root "$root" tick unconfined >/dev/null
  fi
  "$bin" --root "$root" tick bench >/dev/null # compiles the gate into the cache
  args+=("$label" "$bin" "$root")
done

UNDER_TMP=$under_tmp PARTS=${PARTS:-1} "$py" - "$rounds" "$work/floor" "$work/floor-loop" "${args[@]}" <<'PY'
import os, shutil, statistics, sys, time

rounds, floor, floor_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rest = sys.argv[4:]
bins = [rest[i:i + 3] for i in range(0, len(rest), 3)]
null = os.open(os.devnull, os.O_RDWR)

def run(argv):
    """(wall ms, CPU ms, page faults) of one run, CPU and faults counting
    waited-for descendants."""
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                                       (os.POSIX_SPAWN_DUP2, null, 1),
                                       (os.POSIX_SPAWN_DUP2, null, 2)])
    _, status, ru = os.wait4(pid, 0)
    wall = (time.perf_counter() - t) * 1e3
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv} failed")
    return wall, (ru.ru_utime + ru.ru_stime) * 1e3, ru.ru_minflt + ru.ru_majflt

parts = os.environ.get("PARTS", "1") != "0"
true = shutil.which("true") or "/usr/bin/true"
commands = {"floor.c tick": [floor, floor_dir], "true (exec alone)": [true]}
for label, binary, root in bins:
    commands[f"{label}: --version"] = [binary, "--version"]
    commands[f"{label}: tick"] = [binary, "--root", root, "tick", "bench"]
    if parts:
        for loop in ("gateless", "unconfined"):
            commands[f"{label}: {loop}"] = [binary, "--root", root, "tick", loop]
samples = {k: [] for k in commands}
for _ in range(3):  # warm-up
    for argv in commands.values():
        run(argv)
for _ in range(rounds):
    for k, argv in commands.items():
        samples[k].append(run(argv))

def med(k, i):
    return statistics.median(s[i] for s in samples[k])

fw, fc = med("floor.c tick", 0), med("floor.c tick", 1)
print(f"{rounds} interleaved rounds, medians; {os.cpu_count()} cores, "
      f"load {os.getloadavg()[0]:.1f}; roots in the steps' temporary directory: "
      f"{os.environ.get('UNDER_TMP', '?')}")
print(f"{'':28} {'wall ms':>8} {'CPU ms':>8}   {'x floor wall':>12} {'x floor CPU':>11} {'faults':>7}")
print(f"{'floor.c tick':28} {fw:8.2f} {fc:8.2f}   {'':>12} {'':>11} {med('floor.c tick', 2):7.0f}")
t = "true (exec alone)"
print(f"{t:28} {med(t, 0):8.2f} {med(t, 1):8.2f}   "
      f"{med(t, 0) / fw:11.2f}x {med(t, 1) / fc:10.2f}x {med(t, 2):7.0f}")
for label, binary, _ in bins:
    size = os.path.getsize(binary) / 1e6
    v = f"{label}: --version"
    t = f"{label}: tick"
    print(f"{label + ': binary':28} {size:7.1f} MB")
    print(f"{v:28} {med(v, 0):8.2f} {med(v, 1):8.2f}   "
          f"{med(v, 0) / fw:11.2f}x {med(v, 1) / fc:10.2f}x {med(v, 2):7.0f}")
    print(f"{t:28} {med(t, 0):8.2f} {med(t, 1):8.2f}   "
          f"{med(t, 0) / fw:11.2f}x {med(t, 1) / fc:10.2f}x {med(t, 2):7.0f}")
print("targets (docs/design.md): tick <= 2.5x the floor's wall time, <= 2x its CPU time; "
      "start-up (--version) <= 0.4x the floor's tick CPU")
if parts:
    print()
    print("where a tick's CPU goes, by difference (medians, ms; x the floor's tick CPU):")
    print(f"{'':28} {'start-up':>10} {'the rest':>10} {'confined':>10} {'the gate':>10} {'tick':>10}")
    for label, _, _ in bins:
        v, t, g, u = (med(f"{label}: {k}", 1) for k in ("--version", "tick", "gateless", "unconfined"))
        cells = [v, u - v, g - u, t - g, t]
        print(f"{label:28} " + " ".join(f"{c:10.2f}" for c in cells))
        print(f"{'':28} " + " ".join(f"{c / fc:9.2f}x" for c in cells))
PY
