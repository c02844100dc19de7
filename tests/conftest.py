"""Fixtures every test directory shares: the tiny model's real engines and test weights.

They live here, not in ``tests/engines``, so that one fixture definition serves every module:
a fixture imported into a test module is a separate definition, and each one started its own
vLLM engine (20-30 s of CI a start). Imports stay inside the fixtures: the integration lanes
collect the same tree without torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

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


# One engine of each kind for the whole session (each module used to start its own: vLLM's
# start-up alone took 20-30 s a module). Tests that load adapters or weights put them back.
@pytest.fixture(scope="session", params=["builtin", "vllm"])
def engine(
    request: pytest.FixtureRequest, tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineProcess]:
    """The tiny model served by the built-in engine, then by vLLM (served name ``tiny``)."""
    from fulmen.engines.launcher import BuiltinLauncher
    from fulmen.engines.vllm import VLLMLauncher, find_vllm_python

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
        )
    try:
        launcher.start()
    except Exception:
        print(log.read_text() if log.exists() else "(no log)")
        raise
    yield launcher
    launcher.stop()


# Under pytest-xdist (scripts/test.sh), the files that start the most processes and run longest go
# first, so that no worker is handed an hour's tail at the end.
_FIRST = ("tests/cluster/", "tests/multihost/", "tests/benchmarks/", "tests/trainer/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), keep each file on one worker, the shared engines
    on one worker, and start the long files first.

    A file's module fixtures (a served store, a trained run several tests read) would otherwise be
    set up again on every worker that gets one of its tests, and each worker would start its own
    vLLM engine (about 50 s of CPU) for a share of the tests that use the session's engines.
    Without xdist the marks do nothing and the order stays pytest's.
    """
    for item in items:
        uses_engines = "engine" in getattr(item, "fixturenames", ())
        group = "shared-engines" if uses_engines else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike
        items.sort(key=_start_rank)


def _start_rank(item: pytest.Item) -> int:
    if "engine" in getattr(item, "fixturenames", ()):
        return 0  # vLLM's start is the longest setup of the suite
    return 1 if item.nodeid.startswith(_FIRST) else 2
