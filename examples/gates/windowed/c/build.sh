#!/bin/sh
# Builds gate.wasm (or the path given) from gate.c with the toolchain
# Debian ships (clang-19, lld-19, wasi-libc, libclang-rt-19-dev-wasm32),
# and the C template's wit-c (../../c/tools, its crates pinned in
# Cargo.lock) for the two component-model steps: the C bindings of
# wit/gate.wit (whose switches trap on a tag the WIT does not have), and
# the component made of the linked module with the WASI preview1 reactor
# adapter.
set -eu
cd "$(dirname "$0")"
out="${1:-gate.wasm}"
cc="${CC:-clang-19}"
wit_c() {
  cargo run --quiet --locked --release --manifest-path ../../c/tools/Cargo.toml -- "$@"
}
wit_c bindings wit bindings
# --strip-debug: wasi-libc's debug info would triple the size; the names
# stay, so a trap still says which function it was in.
"$cc" --target=wasm32-wasi -mexec-model=reactor -Os -Wall -Wextra -Werror \
  -Ibindings gate.c bindings/gate.c bindings/gate_component_type.o \
  -Wl,--strip-debug -o bindings/core.wasm
wit_c component bindings/core.wasm "$out"
