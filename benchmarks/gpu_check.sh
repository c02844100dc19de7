#!/usr/bin/env bash
# The GPU check for a lent device (benchmarks/gpu_check.py): update steps on the GPU per model
# shape, their peak memory against fulmen's memory plan, and the CPU-vs-GPU logprob gap, as one
# JSON line on stdout. At most 8 minutes, no network. Nothing in CI or the README runs it.
#   bash benchmarks/gpu_check.sh [--device cuda:N]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] && python=.venv/bin/python
exec timeout 480 "$python" benchmarks/gpu_check.py "$@"
