#!/bin/sh
# Builds gate.wasm: a component straight from rustc's wasm32-wasip2 target.
set -eu
cd "$(dirname "$0")"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --locked --release --target wasm32-wasip2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/windowed_gate.wasm" "${1:-gate.wasm}"
