#!/bin/sh
# Builds the stock gates in release for wasm32-wasip2 into dist/<name>.wasm.
#
#   gates/build.sh          build and write dist/
#   gates/build.sh --check  rebuild into a temporary target directory and fail,
#                           naming the gate, if any differs from dist/
#
# Output is byte-for-byte reproducible for the toolchain pinned in
# ../rust-toolchain.toml: paths of the checkout and of CARGO_HOME are remapped,
# so a clone in any folder builds the same bytes.
set -eu

GATES="approve-every max-failures context-floor budget time-window max-ticks backoff no-progress"
TARGET=wasm32-wasip2

here=$(cd "$(dirname "$0")" && pwd -P)
root=$(cd "$here/.." && pwd -P)
cd "$here"

check=false
case "${1:-}" in
    "") ;;
    --check) check=true ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# The toolchain comes from ../rust-toolchain.toml through rustup; without
# rustup the installed toolchain must already have the target.
if command -v rustup >/dev/null 2>&1 &&
    ! rustup target list --installed | grep -qx "$TARGET"; then
    rustup target add "$TARGET"
fi

cargo_home=${CARGO_HOME:-$HOME/.cargo}
if [ -d "$cargo_home" ]; then
    cargo_home=$(cd "$cargo_home" && pwd -P)
fi

if $check; then
    target_dir=$(mktemp -d "${TMPDIR:-/tmp}/automaton-gates.XXXXXX")
    trap 'rm -rf "$target_dir"' EXIT INT TERM
else
    target_dir=${CARGO_TARGET_DIR:-$here/target}
fi

# Everything that could leak a local path or vary between machines is fixed
# here, so the environment of the caller does not change the output.
RUSTFLAGS="--remap-path-prefix=$root=/automaton --remap-path-prefix=$cargo_home=/cargo"
export RUSTFLAGS
unset CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS RUSTC_WRAPPER 2>/dev/null || true
export CARGO_TARGET_DIR="$target_dir"
export SOURCE_DATE_EPOCH=0

packages=""
for gate in $GATES; do
    packages="$packages -p gate-$gate"
done

# shellcheck disable=SC2086 # packages is a list of words
cargo build --locked --release --target "$TARGET" $packages

out="$target_dir/$TARGET/release"
status=0
for gate in $GATES; do
    built="$out/gate_$(echo "$gate" | tr - _).wasm"
    if $check; then
        if ! cmp -s "$built" "dist/$gate.wasm"; then
            echo "gate $gate: the build differs from gates/dist/$gate.wasm" >&2
            status=1
        fi
    else
        mkdir -p dist
        cp "$built" "dist/$gate.wasm"
        echo "dist/$gate.wasm $(wc -c <"dist/$gate.wasm") bytes"
    fi
done
if $check && [ $status -eq 0 ]; then
    echo "all stock gates match gates/dist/"
fi
exit $status
