#!/bin/sh
# Changing a gate safely, end to end, on a throw-away root: a loop runs a
# stricter budget in shadow beside the live one; the new policy is
# replayed against the recorded past (as CI would, by its exit status),
# its evidence read from `status`, and it is promoted, the old budget
# staying on as the shadow. BIN names an automaton binary (default: a
# debug build of this checkout, built if needed).
# Usage: [BIN=/path/to/automaton] examples/shadow/run.sh [ROOT]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${BIN:-}" ]; then
    cargo build --quiet --manifest-path "$here/../../Cargo.toml"
    BIN="$here/../../target/debug/automaton"
fi
root=${1:-$(mktemp -d)/root}
a() { "$BIN" --root "$root" "$@"; }
a init >/dev/null
a new spend --from "$here/loop.toml" >/dev/null

echo "== 10 ticks: the live budget (100) lets each run; the shadow (8) would halt from tick 9, once 8 dollars are spent"
i=0
while [ $i -lt 10 ]; do a tick spend >/dev/null; i=$((i + 1)); done

echo "== the evidence"
a status spend | grep 'shadow gate'

echo "== replay the past with the candidate's params (exit 11: a decision differs)"
set +e
a gate replay spend --gate stock:budget --params '{"metric": "cost_usd", "max": 8.0}' --diff-only
code=$?
set -e
echo "exit $code"
[ "$code" -eq 11 ]

echo "== promote it: 8 of its 10 evaluations agreed"
a gate promote spend stock:budget --min 8
a history spend --kind gate-promoted

echo "== loop.toml now"
sed -n '/^\[\[gate\]\]/,$p' "$root/loops/spend/loop.toml"

echo "== the next tick runs under the new budget, and halts"
set +e
a tick spend
code=$?
set -e
echo "exit $code"
[ "$code" -eq 7 ]
echo "root: $root"
