#!/usr/bin/env bash
# The office-hours example gate in each language, side by side in one run:
# component size, first compile (`gate compile`, whole process), a cached
# evaluation (`gate test`, fresh instance + evaluate), and the gate's time
# in a CLI tick and in a daemon tick (history's `micros`: load + evaluate),
# with what the gate adds to a whole CLI tick against the same loop without
# it (interleaved rounds, medians).
#
# usage: examples/gates/measure.sh [BIN]   (default: target/release/automaton)
# env:   ROUNDS (15)  DAEMON_SECS (12)  LANGS ("rust python javascript c")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$(realpath "${1:-$repo/target/release/automaton}")
rounds=${ROUNDS:-15}
daemon_secs=${DAEMON_SECS:-12}
langs=${LANGS:-rust python javascript c}
work=$(mktemp -d)
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

root="$work/root"
"$bin" --root "$root" init >/dev/null
# Office hours of 00:00-24:00: the gate proceeds on weekdays, so the step
# runs as it does without the gate.
loop_toml() { # GATE_LINE...
  printf 'step = ["true"]\n[schedule]\nevery = "1s"\n'
  for g in "$@"; do printf '%s\n' "$g"; done
}
loop_toml > "$work/plain.toml"
"$bin" --root "$root" new plain --from "$work/plain.toml" >/dev/null
"$bin" --root "$root" gate context > "$work/context.json"

for lang in $langs; do
  echo "building $lang" >&2
  sh "$here/$lang/build.sh" "$work/$lang.wasm" >/dev/null 2>&1
  loop_toml '[[gate]]' 'path = "gates/office-hours.wasm"' 'params = { start_hour = 0, end_hour = 24 }' > "$work/$lang.toml"
  "$bin" --root "$root" new "$lang" --from "$work/$lang.toml" >/dev/null 2>&1
  mkdir -p "$root/loops/$lang/gates"
  cp "$work/$lang.wasm" "$root/loops/$lang/gates/office-hours.wasm"
  start=$(date +%s%N)
  "$bin" --root "$root" -q gate compile "$root/loops/$lang/gates/office-hours.wasm" >/dev/null
  echo $(( ($(date +%s%N) - start) / 1000 )) > "$work/$lang.compile_us"
  "$bin" --root "$root" tick "$lang" >/dev/null # remembers the file's sha256
done

export BIN=$bin ROOT=$root WORK=$work ROUNDS=$rounds LANGS=$langs
python3 - <<'PY' > "$work/cli.json"
import json, os, statistics, subprocess, time
bin_, root, work, rounds = os.environ["BIN"], os.environ["ROOT"], os.environ["WORK"], int(os.environ["ROUNDS"])
langs = os.environ["LANGS"].split()
wall = {l: [] for l in langs + ["plain"]}
evals = {l: [] for l in langs}
for _ in range(rounds):
    for l in ["plain"] + langs:
        t = time.perf_counter()
        subprocess.run([bin_, "--root", root, "-q", "tick", l], check=True, stdout=subprocess.DEVNULL)
        wall[l].append((time.perf_counter() - t) * 1000)
    for l in langs:
        out = subprocess.run([bin_, "--root", root, "-q", "gate", "test", f"{work}/{l}.wasm",
                              "--context", f"{work}/context.json", "--json"],
                             check=True, capture_output=True, text=True).stdout
        evals[l].append(json.loads(out)["elapsed_us"] / 1000)
print(json.dumps({"wall": {l: statistics.median(v) for l, v in wall.items()},
                  "eval": {l: statistics.median(v) for l, v in evals.items()}}))
PY

# The daemon: one language at a time, so their ticks do not share the cores.
for lang in $langs; do
  echo "daemon: $lang" >&2
  wc -l < "$root/loops/$lang/history.jsonl" > "$work/$lang.before"
  for l in $langs plain; do [ "$l" = "$lang" ] || "$bin" --root "$root" -q pause "$l" >/dev/null; done
  "$bin" --root "$root" -q resume "$lang" >/dev/null 2>&1 || true
  "$bin" --root "$root" -q daemon 2>/dev/null &
  daemon_pid=$!
  sleep "$daemon_secs"
  kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=
done

python3 - <<'PY'
import json, os, statistics
root, work = os.environ["ROOT"], os.environ["WORK"]
langs = os.environ["LANGS"].split()
cli = json.load(open(f"{work}/cli.json"))
def micros(lang, since, until=None):
    lines = open(f"{root}/loops/{lang}/history.jsonl").read().splitlines()[since:until]
    return [json.loads(l)["micros"] / 1000 for l in lines if '"kind":"gate"' in l]
rows = {
    "component size": lambda l: f"{os.path.getsize(f'{work}/{l}.wasm') / 1e6:.2f} MB" if os.path.getsize(f'{work}/{l}.wasm') > 1e6 else f"{os.path.getsize(f'{work}/{l}.wasm') / 1e3:.0f} KB",
    "first compile (`gate compile`, whole process)": lambda l: f"{int(open(f'{work}/{l}.compile_us').read()) / 1e6:.2f} s",
    "cached evaluation (`gate test`: fresh instance + evaluate)": lambda l: f"{cli['eval'][l]:.2f} ms",
    "gate time in a CLI tick (history `micros`, median)": lambda l: f"{statistics.median(micros(l, 0, int(open(f'{work}/{l}.before').read()))[1:]):.2f} ms",
    "a CLI tick, with the gate / without (wall, median)": lambda l: f"{cli['wall'][l]:.1f} / {cli['wall']['plain']:.1f} ms",
    "gate time in a daemon tick (median; min)": lambda l: (lambda m: f"{statistics.median(m):.2f}; {min(m):.2f} ms ({len(m)} ticks)")(micros(l, int(open(f'{work}/{l}.before').read()))[1:]),
}
print("| | " + " | ".join(langs) + " |")
print("|---|" + "---|" * len(langs))
for name, f in rows.items():
    print(f"| {name} | " + " | ".join(f(l) for l in langs) + " |")
PY
