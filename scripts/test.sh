#!/usr/bin/env bash
# Install fulmen with its test dependencies into .venv and run the test suite.
# Used as-is by CI (.ci/run). Safe to re-run: installs are skipped when already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch first and pinned: this exact version is the CPU wheel on this machine's disk; an
# unpinned torch would pull a multi-GB CUDA build.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"

# PostgreSQL server binaries for the store tests (started per test session by tests/pg_server.py).
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "PostgreSQL server binaries missing: install the 'postgresql' package" >&2
  fi
fi

ruff check fulmen tests benchmarks examples
ruff format --check fulmen tests benchmarks examples
pyright fulmen
python -m pytest -q -p no:cacheprovider "$@"
