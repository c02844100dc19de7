from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fulmen.engines.launcher import BuiltinLauncher, EngineProcess
from fulmen.engines.models import resolve_model
from fulmen.engines.vllm import VLLMLauncher, find_vllm_python
from tests.engines.adapters import perturbed_copy, train_tool_call_adapter


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    return resolve_model("tiny")


@pytest.fixture(scope="session")
def tool_adapter(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tool_call_adapter(tiny_dir, tmp_path_factory.mktemp("tool-adapter"))


@pytest.fixture(scope="session")
def perturbed_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return perturbed_copy(tiny_dir, tmp_path_factory.mktemp("perturbed"))


# One engine of each kind for the whole session (each module used to start its own: vLLM's
# start-up alone took 20-30 s a module). Tests that load adapters or weights put them back.
@pytest.fixture(scope="session", params=["builtin", "vllm"])
def engine(
    request: pytest.FixtureRequest, tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineProcess]:
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
