#!/bin/sh
# Builds gate.wasm (or the path given) from app.py with componentize-py
# (pinned in requirements.txt). The packages of requirements.txt live in a
# virtual environment beside this script, installed again whenever that
# file changes, and componentize-py runs with VIRTUAL_ENV pointing at it, so
# what app.py imports from them goes into the component. A componentize-py
# of the pinned version on PATH is used as it is; otherwise the one in the
# virtual environment.
set -eu
cd "$(dirname "$0")"
out="${1:-gate.wasm}"
pin=$(sed -n 's/^componentize-py==\([^ ;#]*\).*/\1/p' requirements.txt)
if [ -n "$pin" ] && [ "$(componentize-py --version 2>/dev/null)" = "componentize-py $pin" ]; then
  cpy=componentize-py
  grep -v '^componentize-py==' requirements.txt >.requirements.wanted || true
else
  cpy="$PWD/.venv/bin/componentize-py"
  cp requirements.txt .requirements.wanted
fi
echo "# for $cpy" >>.requirements.wanted
if ! cmp -s .requirements.wanted .venv/requirements.installed 2>/dev/null; then
  [ -x .venv/bin/pip ] || python3 -m venv .venv
  if grep -q '^[^#[:space:]]' .requirements.wanted; then
    .venv/bin/pip install --quiet --disable-pip-version-check -r .requirements.wanted
  fi
  mv .requirements.wanted .venv/requirements.installed
else
  rm .requirements.wanted
fi
VIRTUAL_ENV="$PWD/.venv" "$cpy" -d wit -w gate componentize app -o "$out"
