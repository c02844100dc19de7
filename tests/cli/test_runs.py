"""``fulmen runs list|show`` against a real SQLite store file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.types import ModelKind, ModelVersion, Run, RunMetrics, RunStatus


def _record(url: str) -> None:
    """Two runs: ``r-old`` finished after 5 minutes with metrics and a model; ``r-new`` runs."""

    async def fill() -> None:
        async with open_store(url, watchdog_interval=None) as store:
            await store.start_run(Run(run_id="r-old", name="toy", host="box", started_at=1000.0))
            await store.add_run_metrics(
                [
                    RunMetrics(
                        run_id="r-old",
                        step=step,
                        time=1000.0 + step,
                        values={"reward/mean": step / 10, "loss": 1.0 / step},
                        text={"algorithm": "grpo"},
                    )
                    for step in (1, 2, 3)
                ]
            )
            await store.add_model_version(
                ModelVersion(
                    run_id="r-old",
                    version=1,
                    step=2,
                    kind=ModelKind.ADAPTER,
                    path="/runs/toy/adapters/step-00002",
                    scores={"val/reward_mean": 0.625},
                    resources_version=7,
                )
            )
            await store.update_run("r-old", status=RunStatus.SUCCEEDED, ended_at=1300.0)
            await store.start_run(Run(run_id="r-new", name="second", started_at=2000.0))

    asyncio.run(fill())


def test_runs_list_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _record(url)
    assert main(["runs", "list", "--store", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "NAME", "STATUS", "HOST", "STARTED", "(UTC)", "TOOK"]
    assert lines[1].split()[:3] == ["r-new", "second", "running"]
    assert lines[2].split()[:3] == ["r-old", "toy", "succeeded"]
    assert lines[2].endswith("5m00s")

    assert main(["runs", "list", "--store", url, "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "r-old" not in out and "fulmen runs list --offset 1 --limit 1" in out

    assert main(["runs", "show", "r-old", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "metrics: 3 records, steps 1-3" in out
    reward = next(line for line in out.splitlines() if line.startswith("reward/mean"))
    assert reward.split() == ["reward/mean", "3", "1-3", "0.1", "0.3", "0.1", "0.3"]
    model = next(line for line in out.splitlines() if "step-00002" in line)
    assert model.split() == [
        "1", "2", "adapter", "v7", "val/reward_mean=0.625", "/runs/toy/adapters/step-00002"
    ]  # fmt: skip

    assert main(["runs", "show", "r-old", "--store", url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["status"] == "succeeded"
    assert [m["step"] for m in data["metrics"]] == [1, 2, 3]
    assert data["model_versions"][0]["resources_version"] == 7


def test_runs_show_of_an_unknown_run_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _record(url)
    assert main(["runs", "show", "nope", "--store", url]) == 1
    assert "run 'nope' does not exist" in capsys.readouterr().err
