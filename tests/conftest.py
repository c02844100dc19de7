"""Fixtures every test directory shares: the tiny model's real engines and test weights.

They live here, not in ``tests/engines``, so that one fixture definition serves every module:
a fixture imported into a test module is a separate definition, and each one started its own
vLLM engine (20-30 s of CI a start). Imports stay inside the fixtures: the integration lanes
collect the same tree without torch.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fulmen.engines.launcher import EngineProcess


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    """The tiny model's directory (resolved once)."""
    from fulmen.engines.models import resolve_model

    return resolve_model("tiny")


@pytest.fixture(scope="session")
def tool_adapter(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter trained to answer ``tests.engines.adapters.MESSAGES`` with a tool call."""
    from tests.engines.adapters import train_tool_call_adapter

    return train_tool_call_adapter(tiny_dir, tmp_path_factory.mktemp("tool-adapter"))


@pytest.fixture(scope="session")
def perturbed_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny model with perturbed weights (its greedy output differs)."""
    from tests.engines.adapters import perturbed_copy

    return perturbed_copy(tiny_dir, tmp_path_factory.mktemp("perturbed"))


# Where the modules that stay imported between tests live: the interpreter's and the installed
# packages (a virtual environment's, or those a .pth file adds), fulmen and the test suite. An
# agent's own module (an example's ``agent.py``, a file a test wrote) is imported by its
# top-level name, and a later test whose agent has the same name must import its own file, not
# find the earlier one in ``sys.modules`` or through a folder the earlier test left on
# ``sys.path`` (the commands put a config's ``python_path`` there for the life of the process).
_KEPT_ROOTS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {
        sys.prefix,
        sys.base_prefix,
        *(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))),
        Path(__file__).parent,
        Path(__file__).parents[1] / "fulmen",
    }
)


@pytest.fixture(autouse=True)
def _forget_agent_modules() -> Iterator[None]:
    """After each test, forget the modules it imported from outside the kept roots above.

    ``sys.path`` goes back to what it was before the test, too.
    """
    before, path = set(sys.modules), list(sys.path)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - before:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and not str(Path(file).resolve()).startswith(_KEPT_ROOTS):
            del sys.modules[name]


# One engine of each kind for the whole session (each module used to start its own: vLLM's
# start-up alone took 20-30 s a module). Tests that load adapters or weights put them back.
@pytest.fixture(scope="session", params=["builtin", "vllm"])
def engine(
    request: pytest.FixtureRequest, tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineProcess]:
    """The tiny model served by the built-in engine, then by vLLM (served name ``tiny``)."""
    from fulmen.engines.launcher import BuiltinLauncher
    from fulmen.engines.vllm import VLLMLauncher, find_vllm_python
    from tests.prefork import python as prefork_python

    log = tmp_path_factory.mktemp("engine-log") / f"{request.param}.log"
    launcher: EngineProcess
    if request.param == "vllm":
        if find_vllm_python() is None:
            missing = "no vLLM environment: set FULMEN_VLLM_PYTHON (scripts/test.sh creates one)"
            # CI (scripts/test.sh under CI=true) sets FULMEN_REQUIRE_VLLM: a skip there would
            # let the vLLM half of the engine suite vanish without anyone noticing.
            if os.environ.get("FULMEN_REQUIRE_VLLM", "") not in ("", "0"):
                pytest.fail(f"FULMEN_REQUIRE_VLLM is set but there is {missing}")
            pytest.skip(missing)
        launcher = VLLMLauncher(
            str(tiny_dir), served_model_name="tiny", max_lora_rank=16, log_path=log
        )
    else:
        launcher = BuiltinLauncher(
            str(tiny_dir),
            max_batch=8,
            max_lora_rank=16,
            log_path=log,
            extra_args=["--served-model-name", "tiny"],
            python=prefork_python(),
        )
    try:
        launcher.start()
    except Exception:
        print(log.read_text() if log.exists() else "(no log)")
        raise
    yield launcher
    launcher.stop()


# Under pytest-xdist (scripts/test.sh runs `-n 3 --dist loadfile`), the files that start the most
# processes and run longest go first, so that no worker is handed a long file at the very end.
_FIRST = ("tests/cluster/", "tests/multihost/", "tests/benchmarks/", "tests/trainer/")
# The parametrize ids of the session's shared engines (the ``engine`` fixture above).
_ENGINE_IDS = frozenset({"builtin", "vllm"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, put the tests of the shared engines first, then the long files.

    Every worker collects and sorts alike (xdist checks that they agree); the scheduler below
    keeps this order. Without xdist nothing changes.
    """
    if hasattr(config, "workerinput"):
        items.sort(key=_start_rank)


def _start_rank(item: pytest.Item) -> int:
    if _uses_shared_engines(item.nodeid):  # the scheduler's test, so sort and scopes agree
        return 0  # vLLM's start is the longest setup of the suite
    return 1 if item.nodeid.startswith(_FIRST) else 2


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with every file that uses the shared engines on one worker.

    Each worker would otherwise start its own vLLM engine (about 50 s of CPU) for its share of
    those files. xdist's own ``loadgroup`` would do this with marks, but with pytest 9.2 it
    silently stops grouping (pytest-xdist issue 1386), so the files are found from the test ids.
    Scopes keep the collection order above instead of xdist's order by size.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedEngineFiles(LoadScopeScheduling):
        engine_files: frozenset[str] = frozenset()

        def schedule(self) -> None:
            if self.collection is None and self.collection_is_completed:
                ids = next(iter(self.registered_collections.values()), [])
                self.engine_files = frozenset(
                    _file_of(nodeid) for nodeid in ids if _uses_shared_engines(nodeid)
                )
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            file = _file_of(nodeid)
            return "shared-engines" if file in self.engine_files else file

    config.option.loadscopereorder = False
    return SharedEngineFiles(config, log)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _uses_shared_engines(nodeid: str) -> bool:
    params = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    return bool(_ENGINE_IDS.intersection(params.split("-")))


_PREFORK = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    """Start the prefork server (``tests/prefork.py``) the session's fulmen processes fork from.

    One for the whole run: under xdist the controller starts it before its workers, which
    inherit its variables. ``FULMEN_TEST_PREFORK=0`` (or an environment without torch) runs
    without one.
    """
    import importlib.util

    from tests.prefork import Launched

    if hasattr(config, "workerinput"):  # the controller's server serves this worker
        return
    if os.environ.get("FULMEN_TEST_PREFORK", "1") == "0" or not importlib.util.find_spec("torch"):
        return
    config.stash[_PREFORK] = Launched.start(log_copy=os.environ.get("FULMEN_TEST_PREFORK_LOG"))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the prefork server this process started."""
    launched = config.stash.get(_PREFORK, None)
    if launched is not None:
        launched.stop()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        metavar="FILE",
        default=None,
        help="append each test's CPU seconds (its process and the child processes it waited "
        "for) and wall seconds to FILE as JSON lines; `python -m tests.cpu_report FILE` sums "
        "them by file (write --cpu-report=FILE: with a space and no test paths, pytest takes "
        "FILE for a test path before it knows this option)",
    )


def _cpu_seconds() -> float:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``--cpu-report FILE``, record what each test (setup and teardown included) cost.

    CI time is CPU-bound on two cores, and wall times under xdist mostly say what ran beside a
    test; CPU seconds say what the test itself costs. A child process counts once it has been
    waited for, so a shared engine counts for the test whose teardown stopped it.
    """
    report = item.config.getoption("cpu_report")
    if not report:
        yield
        return
    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    record = {
        "id": item.nodeid,
        "cpu_s": round(_cpu_seconds() - cpu, 2),
        "wall_s": round(time.monotonic() - wall, 2),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
    }
    with open(report, "a", encoding="utf-8") as f:  # one short line per write: atomic
        f.write(json.dumps(record) + "\n")
