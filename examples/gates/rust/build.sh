#!/bin/sh
# Builds gate.wasm (or the path given): a component straight from rustc's
# wasm32-wasip2 target. Not --locked: Cargo.lock pins what it holds, and
# cargo adds to it what a bumped version or a new dependency needs.
set -eu
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/office_hours_gate.wasm" "${1:-gate.wasm}"
