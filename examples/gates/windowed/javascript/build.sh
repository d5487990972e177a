#!/bin/sh
# Builds gate.wasm (or the path given) from gate.js with componentize-js
# (pinned in package.json). `jco componentize` does not work here; the
# componentize-js CLI does. stdio stays: what the gate prints (and what it
# threw) reaches the host's logs.
#
# `npm install` runs again whenever package.json or package-lock.json
# changes: it installs what the lock file pins, and adds to it what a new
# dependency in package.json needs (`npm ci` would refuse the project).
# componentize-js takes one file: when
# package.json has dependencies, esbuild (pinned) bundles gate.js with them
# into dist/gate.js first, leaving the host's imports (automaton:gate/*) to
# the component; without any, gate.js goes in as it is, so a trap's
# position is a line of gate.js.
set -eu
cd "$(dirname "$0")"
out="${1:-gate.wasm}"
stamp=node_modules/.installed-from
if ! cat package.json package-lock.json | cmp -s - "$stamp" 2>/dev/null; then
  npm install --no-audit --no-fund
  cat package.json package-lock.json >"$stamp"
fi
src=gate.js
if node -e 'process.exit(Object.keys(require("./package.json").dependencies ?? {}).length ? 0 : 1)'; then
  mkdir -p dist
  node_modules/.bin/esbuild gate.js --bundle --format=esm --platform=neutral \
    --main-fields=module,main --external:'automaton:*' --log-level=warning \
    --outfile=dist/gate.js
  src=dist/gate.js
fi
node node_modules/@bytecodealliance/componentize-js/src/cli.js "$src" \
  --wit wit/gate.wit --world-name gate -d http fetch-event random clocks \
  -o "$out"
