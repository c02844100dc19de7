"""``fulmen models list|show|serve`` over a real SQLite store and a real built-in engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.types import ModelKind, ModelVersion, Run
from tests.cli.run_folders import KEPT, record_run
from tests.prefork import python


def record(url: str, weights: Path) -> None:
    """A run with two model versions: an adapter elsewhere, and full weights on this machine."""

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await store.start_run(Run(run_id="r1", name="r1", started_at=1.0))
            await store.add_model_version(
                ModelVersion(
                    run_id="r1",
                    version=1,
                    step=1,
                    kind=ModelKind.ADAPTER,
                    path="/nowhere/adapters/step-00001",
                    scores={"val/reward_mean": 0.25},
                )
            )
            await store.add_model_version(
                ModelVersion(run_id="r1", version=2, step=2, kind=ModelKind.FULL, path=str(weights))
            )

    asyncio.run(fill())


def test_list_show_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    record(url, tmp_path)
    assert main(["models", "list", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "val/reward_mean=0.25" in out and "/nowhere/adapters/step-00001" in out
    assert main(["models", "list", "--store", url, "--run", "r1", "--json"]) == 0
    assert [v["version"] for v in json.loads(capsys.readouterr().out)] == [1, 2]
    assert main(["models", "show", "r1", "1", "--store", url]) == 0
    assert "(not on this machine)" in capsys.readouterr().out
    assert main(["models", "show", "r1", "7", "--store", url]) == 1
    assert "no model version 7 (its versions: 1, 2)" in capsys.readouterr().err
    assert main(["models", "list", "--store", url, "--run", "nope"]) == 1
    assert "nope" in capsys.readouterr().err
    engine = "http://127.0.0.1:9/v1"
    assert main(["models", "serve", "r1", "1", "--store", url, "--engine", engine]) == 1
    assert "this machine does not have" in capsys.readouterr().err


def test_list_marks_the_served_and_the_best_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    record(url, tmp_path)  # r1: no end of run recorded; v1 validated 0.25, v2 not at all
    record_run(url, "ra", **KEPT)  # ra ended serving v1 (step 2), its best, not the final v2
    assert main(["models", "list", "--store", url]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["RUN", "VERSION", "MARK", "STEP"]
    marks = {(row.split()[0], row.split()[1]): row.split()[2:4] for row in rows}
    assert marks[("r1", "1")] == ["best", "1"]
    assert marks[("r1", "2")] == ["served", "2"]  # a running run serves its latest
    assert marks[("ra", "1")] == ["served", "best"]
    assert marks[("ra", "2")] == ["-", "4"]
    assert main(["models", "list", "--store", url, "--run", "ra", "--json"]) == 0
    assert [v["marks"] for v in json.loads(capsys.readouterr().out)] == [["served", "best"], []]
    # The run folder as a SOURCE reads the same store.
    assert main(["models", "list", str(tmp_path), "--run", "ra"]) == 0
    assert "served best" in capsys.readouterr().out


@pytest.mark.slow
def test_serve_reloads_a_versions_weights_into_a_running_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    from fulmen.engines.launcher import BuiltinLauncher
    from fulmen.engines.models import resolve_model

    url = f"sqlite:///{tmp_path / 'store.db'}"
    record(url, resolve_model("tiny"))
    engine = BuiltinLauncher("tiny", log_path=tmp_path / "engine.log", python=python())
    engine.start()
    try:
        args = ["models", "serve", "r1", "2", "--store", url, "--engine", f"{engine.root_url}/v1"]
        assert main([*args, "--json"]) == 0
        served = json.loads(capsys.readouterr().out)
        assert served["model"] == "base weights" and served["path"] == str(resolve_model("tiny"))
        models = httpx.get(f"{engine.root_url}/v1/models", timeout=10).json()["data"]
        assert models  # it still answers, on the reloaded weights
        # The engine reloaded: its policy version moved on.
        assert served["policy_version"] is not None and served["policy_version"] >= 1
    finally:
        engine.stop()


@pytest.mark.slow
def test_compare_runs_an_adapter_against_base_on_the_same_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The toy agent with a LoRA adapter of the tiny model against the model before training."""
    pytest.importorskip("torch")
    from fulmen.algorithms.grpo.config import GRPOConfig
    from fulmen.algorithms.grpo.updater import GRPOUpdater
    from fulmen.algorithms.policy import load_causal_lm
    from fulmen.engines.models import resolve_model

    adapter = tmp_path / "adapters" / "step-00001"
    updater = GRPOUpdater(load_causal_lm(resolve_model("tiny")), config=GRPOConfig())
    updater.save_adapter(adapter)
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await store.start_run(Run(run_id="r1", name="r1", started_at=1.0))
            await store.add_model_version(
                ModelVersion(run_id="r1", version=1, step=1, kind=ModelKind.ADAPTER,
                             path=str(adapter))
            )  # fmt: skip

    asyncio.run(fill())
    toy = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"
    args = ["models", "compare", "r1", "base", "1", "--store", url, "--config", str(toy)]
    overrides = ["--set", f"run_dir={tmp_path / 'run'}", "-n", "4", "--json"]
    assert main([*args, *overrides]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["labels"] == ["version base", "version 1"]
    assert len(result["rewards_a"]) == len(result["rewards_b"]) == 4
    assert result["failed_a"] == result["failed_b"] == 0
    assert result["comparison"]["n"] == 4
    # Side B asked for model "r1-v1", which the engine serves only once the adapter is loaded
    # (an unknown model name is a 404, a failed rollout): no failures means it was served.
    # An unknown version is refused before anything starts.
    assert main(["models", "compare", "r1", "base", "9", "--store", url, "--config", str(toy)]) == 1
    assert "no model version 9" in capsys.readouterr().err
