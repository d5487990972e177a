#!/bin/sh
# Builds automaton, makes a throw-away root with the example loop in it,
# starts the web console on it (`automaton serve`, PORT or 8080) and prints
# a sign-in link, and runs the embedded scheduler in the foreground: the
# loop ticks every 5 seconds, one log line a tick. Ctrl-C stops the daemon
# (running ticks finish first) and the console; the loop's status and
# history are shown after. BIN names an automaton binary you already have
# (installed, a release build): it is used as is, and nothing is built.
# Usage: [PORT=8080] [BIN=/path/to/automaton] examples/quickstart/run.sh [ROOT]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# --all-targets builds what `cargo test` builds (the tests' dev-dependencies
# turn on more features of crates wasmtime shares), so the test suite run
# after this reuses the whole build instead of compiling wasmtime again.
if [ -n "${BIN:-}" ]; then
    bin=$BIN
else
    cargo build --all-targets --quiet --manifest-path "$here/../../Cargo.toml"
    bin="$here/../../target/debug/automaton"
fi
"$bin" --version
root=${1:-$(mktemp -d)/root}
[ -d "$root/loops" ] || "$bin" --root "$root" init
[ -d "$root/loops/hello" ] || "$bin" --root "$root" new hello --from "$here/hello.toml"
echo "root: $root"
# The console, signed in by a user of this root made for the purpose (a
# root kept from an earlier run gets its user a new token).
verb=add
"$bin" --root "$root" user list | grep -q '^me ' && verb=rotate
token=$("$bin" --root "$root" user "$verb" me --json | sed -n 's/.*"token": "\(.*\)".*/\1/p')
"$bin" --root "$root" serve --listen "127.0.0.1:${PORT:-8080}" > "$root/serve.out" &
serve=$!
until [ -s "$root/serve.out" ] || ! kill -0 "$serve" 2>/dev/null; do sleep 0.1; done
base=$(sed -n 's/^listening on //p' "$root/serve.out")
echo "the console: open this link; the token in it is user me's, made just now by"
echo "\`automaton user $verb me\` and shown only here, and it signs you in:"
echo "  $base/signin#token=$token"
echo "running the daemon; Ctrl-C stops it"
echo "after 3 ticks the loop awaits approval: approve it in the console, or from another terminal:"
echo "  $bin --root $root approve hello --note 'carry on'"
# The shell outlives Ctrl-C (the daemon and the console handle it) to show
# what happened.
trap : INT
"$bin" --root "$root" daemon || true
kill -TERM "$serve" 2>/dev/null || true
wait "$serve" || true
trap - INT
"$bin" --root "$root" status hello
"$bin" --root "$root" history hello --limit 5
echo "root: $root"
