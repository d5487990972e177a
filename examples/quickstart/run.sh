#!/bin/sh
# Builds automaton, makes a throw-away root with the example loop in it, and
# runs the embedded scheduler on it in the foreground: the loop ticks every
# 5 seconds, one log line a tick. Ctrl-C stops the daemon (running ticks
# finish first); the loop's status and history are shown after.
# Usage: examples/quickstart/run.sh [ROOT]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# --all-targets builds what `cargo test` builds (the tests' dev-dependencies
# turn on more features of crates wasmtime shares), so the test suite run
# after this reuses the whole build instead of compiling wasmtime again.
cargo build --all-targets --quiet --manifest-path "$here/../../Cargo.toml"
bin="$here/../../target/debug/automaton"
root=${1:-$(mktemp -d)/root}
[ -d "$root/loops" ] || "$bin" --root "$root" init
[ -d "$root/loops/hello" ] || "$bin" --root "$root" new hello --from "$here/hello.toml"
echo "root: $root"
echo "running the daemon; Ctrl-C stops it"
echo "after 3 ticks the loop awaits approval; from another terminal:"
echo "  $bin --root $root approve hello --note 'carry on'"
# The shell outlives Ctrl-C (the daemon handles it) to show what happened.
trap : INT
"$bin" --root "$root" daemon || true
trap - INT
"$bin" --root "$root" status hello
"$bin" --root "$root" history hello --limit 5
echo "root: $root"
