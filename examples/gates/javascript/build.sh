#!/bin/sh
# Builds gate.wasm from gate.js with componentize-js (pinned in package.json).
# `jco componentize` does not work here; the componentize-js CLI does. stdio
# stays: what the gate prints (and what it threw) reaches the host's logs.
set -eu
cd "$(dirname "$0")"
# npm writes node_modules/.package-lock.json last: an install cut short is redone.
[ -f node_modules/.package-lock.json ] || npm ci --no-audit --no-fund
node node_modules/@bytecodealliance/componentize-js/src/cli.js gate.js \
  --wit wit/gate.wit --world-name gate -d http fetch-event random clocks \
  -o "${1:-gate.wasm}"
