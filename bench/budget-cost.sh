#!/usr/bin/env bash
# What a budget check adds to a tick on the file store: for each binary
# given, two loops alike (step `true`, no gate) but for two budgets the
# second belongs to (a root-wide daily one and one of its own,
# max_per_tick 1), so its tick reserves in the root's ledger before the
# step and settles after. Interleaved rounds (40 by default; every tick of
# every binary once a round, so a busy machine slows all alike); wall and
# CPU time (user + system of the tick and the children it waited for,
# getrusage via wait4); medians.
# usage: bench/budget-cost.sh [-n ROUNDS] BIN [BIN...]
set -euo pipefail
rounds=40
if [ "${1:-}" = "-n" ]; then rounds=$2; shift 2; fi
[ $# -ge 1 ] || { echo "usage: $0 [-n ROUNDS] BIN [BIN...]" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'step = ["true"]\n' > "$work/plain.toml"
printf 'step = ["true"]\nmax_per_tick = 1.0\n[[budget]]\nname = "own"\nwindow = "1h"\ncap = 1000000.0\n' > "$work/budgeted.toml"
args=()
i=0
for b in "$@"; do
  bin=$(realpath "$b")
  i=$((i + 1))
  root="$work/$i/root"
  "$bin" --root "$root" init >/dev/null
  cat >> "$root/automaton.toml" <<'TOML'

[[budget]]
name = "team-daily"
window = "1d"
tz = "Europe/Berlin"
cap = 1000000.0
scope = "root"
TOML
  # The root's budget takes in every loop: the plain loop's root is another.
  "$bin" --root "$work/$i/plain-root" init >/dev/null
  "$bin" --root "$work/$i/plain-root" new plain --from "$work/plain.toml" >/dev/null
  "$bin" --root "$root" new budgeted --from "$work/budgeted.toml" >/dev/null
  "$bin" --root "$work/$i/plain-root" tick plain >/dev/null
  "$bin" --root "$root" tick budgeted >/dev/null
  args+=("$b" "$bin" "$work/$i/plain-root" "$root")
done

python3 - "$rounds" "${args[@]}" <<'PY'
import os, statistics, sys, time
rounds = int(sys.argv[1])
builds = [sys.argv[i:i + 4] for i in range(2, len(sys.argv), 4)]
null = os.open(os.devnull, os.O_RDWR)
def run(argv):
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                                       (os.POSIX_SPAWN_DUP2, null, 1),
                                       (os.POSIX_SPAWN_DUP2, null, 2)])
    _, status, ru = os.wait4(pid, 0)
    wall = (time.perf_counter() - t) * 1e3
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv} failed")
    return wall, (ru.ru_utime + ru.ru_stime) * 1e3
cases = {}
for label, bin_, plain, budgeted in builds:
    cases[(label, "no budget")] = [bin_, "--root", plain, "tick", "plain"]
    cases[(label, "two budgets")] = [bin_, "--root", budgeted, "tick", "budgeted"]
got = {k: [] for k in cases}
for _ in range(rounds):
    for k, argv in cases.items():
        got[k].append(run(argv))
print(f"| build | tick ({rounds} rounds, medians) | wall | CPU |")
print("|---|---|---|---|")
for label, *_ in builds:
    med = {}
    for case in ("no budget", "two budgets"):
        v = got[(label, case)]
        w, c = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        med[case] = (w, c)
        print(f"| {label} | {case} | {w:.2f} ms | {c:.2f} ms |")
    d = (med["two budgets"][0] - med["no budget"][0], med["two budgets"][1] - med["no budget"][1])
    print(f"| {label} | difference | {d[0]:+.2f} ms | {d[1]:+.2f} ms |")
PY
