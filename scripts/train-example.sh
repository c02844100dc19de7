#!/usr/bin/env bash
# Install fulmen (CPU) into .venv and train the toy example agent end to end: the validation
# reward printed at the end goes from about 0.2 to about 1.0 in a few minutes on 2 CPU cores.
# Extra arguments go to `fulmen train` (e.g. --set algorithm.steps=10).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# The exact CPU build of torch (an unpinned torch pulls a multi-GB CUDA build).
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[train,examples]"

exec fulmen train examples/toy/config.yaml --set "run_dir=runs/toy-$(date +%Y%m%d-%H%M%S)" "$@"
