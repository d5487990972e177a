#!/bin/sh
# Builds automaton, makes a throw-away root with the example loop in it, and
# shows what an operator sees. Usage: examples/quickstart/run.sh [ROOT]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cargo build --quiet --manifest-path "$here/../../Cargo.toml"
bin="$here/../../target/debug/automaton"
root=${1:-$(mktemp -d)/root}
"$bin" --root "$root" init
"$bin" --root "$root" new hello --from "$here/hello.toml"
"$bin" --root "$root" approve hello --note "first run"
"$bin" --root "$root" status
"$bin" --root "$root" status hello
"$bin" --root "$root" history hello
echo "root: $root"
