#!/usr/bin/env bash
# Install fulmen (CPU) into .venv and train the toy example agent end to end: the validation
# reward printed at the end goes from about 0.2 to about 1.0 in a few minutes on 2 CPU cores.
# Extra arguments go to `fulmen train` (e.g. --set algorithm.steps=10).
#
# torch: on Linux, PyPI's torch is the multi-GB CUDA build. For the CPU build, point
# TORCH_INDEX_URL at PyTorch's CPU wheel index (the README says which), e.g.
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/train-example.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# The release fulmen is tested with; installed first so the extras below keep it.
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  python -m pip install -q "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
else
  python -m pip install -q "torch==2.13.0"
fi
python -m pip install -q -e ".[train,examples]"

status=0
fulmen train examples/toy/config.yaml --set "run_dir=runs/toy-$(date +%Y%m%d-%H%M%S)" "$@" \
  || status=$?
cat <<'NEXT'

fulmen is installed in .venv. To use the `fulmen` command:
  source .venv/bin/activate      # then: fulmen --help, fulmen doctor
  .venv/bin/fulmen --help        # or call it by its path, without activating
NEXT
exit "$status"
