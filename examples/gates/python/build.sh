#!/bin/sh
# Builds gate.wasm (or the path given) from app.py with componentize-py
# 0.25.1 (pinned in requirements.txt): the one on PATH when it is that
# version, else one installed in a virtual environment beside this script.
set -eu
cd "$(dirname "$0")"
out="${1:-gate.wasm}"
if [ "$(componentize-py --version 2>/dev/null)" = "componentize-py 0.25.1" ]; then
  cpy=componentize-py
else
  if [ ! -x .venv/bin/componentize-py ]; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet -r requirements.txt
  fi
  cpy=.venv/bin/componentize-py
fi
"$cpy" -d wit -w gate componentize app -o "$out"
