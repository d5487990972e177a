#!/bin/sh
# Builds gate.wasm from gate.js with componentize-js (pinned in package.json).
# `jco componentize` does not work here; the componentize-js CLI does.
set -eu
cd "$(dirname "$0")"
[ -d node_modules/@bytecodealliance/componentize-js ] || npm ci --no-audit --no-fund
node node_modules/@bytecodealliance/componentize-js/src/cli.js gate.js \
  --wit wit/gate.wit --world-name gate -d http fetch-event stdio random clocks \
  -o "${1:-gate.wasm}"
