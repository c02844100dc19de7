"""``fulmen runs list|show`` against a real SQLite store file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fulmen.cli.main import main
from fulmen.store import open_store
from fulmen.types import ModelKind, ModelVersion, Run, RunMetrics, RunStatus
from tests.cli.run_folders import KEPT, record_run


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
    assert lines[0].split() == [
        "RUN", "NAME", "STATUS", "MODEL", "AGENT", "REWARD", "STARTED", "(UTC)", "TOOK"
    ]  # fmt: skip
    assert lines[1].split()[:6] == ["r-new", "second", "running", "-", "-", "-"]
    # No validation: the mean training reward (0.1, 0.2, 0.3).
    assert lines[2].split()[:7] == ["r-old", "toy", "succeeded", "-", "-", "0.200", "train"]
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
        "1", "served", "best", "2", "adapter", "v7", "val/reward_mean=0.625",
        "/runs/toy/adapters/step-00002",
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


def _folders(tmp_path: Path) -> Path:
    """``runs/a`` holds run ``ra`` (``KEPT``), ``runs/b`` run ``rb``: two stores, two configs."""
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        (runs / name).mkdir(parents=True)
    grpo = {"model": "tiny", "agent": "agent:toy_agent", "algorithm": {"lr": 1e-5}}
    record_run(f"sqlite:///{runs / 'a' / 'store.db'}", "ra", config=grpo, **KEPT)
    record_run(
        f"sqlite:///{runs / 'b' / 'store.db'}",
        "rb",
        config={**grpo, "algorithm": {"lr": 1e-4}},
        started_at=2000.0,
        val={0: [0.0, 0.0, 0.0, 0.0], 2: [1.0, 1.0, 1.0, 1.0]},
    )
    return runs


def test_runs_list_and_compare_read_several_run_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _folders(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FULMEN_STORE_URL", raising=False)
    assert main(["runs", "list"]) == 1  # no store here: the run folders are named
    assert "or name run folders as SOURCEs (here: runs/)" in capsys.readouterr().err
    a, b = str(runs / "a"), str(runs / "b")
    for sources in ([a, b], [str(runs)]):  # two run folders, or the folder holding them
        assert main(["runs", "list", *sources]) == 0
        header, *rows = capsys.readouterr().out.splitlines()
        assert header.split()[-1] == "FOLDER"
        assert [row.split()[0] for row in rows] == ["rb", "ra"]  # latest started first
        assert rows[0].endswith(b) and rows[1].endswith(a)
        assert "1.000 val" in rows[0] and "0.333 val" in rows[1]  # each last validation

    assert main(["runs", "list", str(runs), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["store"]) for r in data["items"]] == [
        ("rb", f"sqlite:///{runs / 'b' / 'store.db'}"),
        ("ra", f"sqlite:///{runs / 'a' / 'store.db'}"),
    ]

    # Runs named by their folders; by id in a folder of run folders: the same comparison.
    for args in ([a, b], ["ra", "rb", "--in", str(runs)]):
        assert main(["runs", "compare", *args]) == 0
        out = capsys.readouterr().out
        assert "algorithm.lr" in out  # the config key that differs
        # ra's final validation scored v0-v2 (v3 failed): 1, 0, 0 against rb's 1, 1, 1.
        assert "rb - ra on 3 shared validation tasks: +0.6667" in out

    # suggest reads the finished runs of every folder (the toy config's model and agent).
    toy = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"
    assert main(["runs", "suggest", str(toy), "--in", str(runs), "--json"]) == 0
    suggested = json.loads(capsys.readouterr().out)
    assert suggested["runs"] == 2 and suggested["varied"] == ["algorithm.lr"]

    assert main(["runs", "show", str(runs)]) == 1  # which of the two?
    assert "holds several run folders" in capsys.readouterr().err
    assert main(["runs", "compare", "ra", "nope", "--in", str(runs)]) == 1
    assert "run 'nope' does not exist in" in capsys.readouterr().err
    assert main(["runs", "list", str(tmp_path / "missing")]) == 1
    assert "neither a store URL nor an existing run folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["runs", "list", str(empty)]) == 1
    assert "no run folder in" in capsys.readouterr().err


def test_runs_show_opens_with_the_runs_story(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _folders(tmp_path)
    assert main(["runs", "show", str(runs / "a")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2] == "  model tiny  agent agent:toy_agent"
    assert lines[3:7] == [
        "  final validation 0.250 ± 0.250 SE over 4 tasks (1 failed) (step 4); "
        "before training 0.000",
        "  served: model version 1 (step 2, adapter), validation 0.750 ± 0.250 SE over 4 tasks "
        "(step 2)",
        "    why: step 2's version validated best (0.750 vs the final 0.250): kept "
        "(validation.keep_best)",
        "  steps with an update: 3 of 4 (none at step 3: `fulmen runs diagnose` says why)",
    ]
    # The metrics grouped by what they measure, not in recording order.
    titles = [
        "validation (val/):",
        "end of the run (end/):",
        "training reward (reward/):",
        "the update (loss, kl, entropy, grad_norm, ...):",
        "step time (time/):",
    ]
    at = [lines.index(title) for title in titles]
    assert at == sorted(at)
    names = [line.split()[0] for line in lines[at[3] + 1 : at[4]] if line]
    assert names == ["updated", "loss"]
    assert "end/served_step" in lines[at[1] + 1]

    assert main(["runs", "show", "ra", "--store", f"sqlite:///{runs / 'a' / 'store.db'}",
                 "--json"]) == 0  # fmt: skip
    story = json.loads(capsys.readouterr().out)["story"]
    assert story["served_version"] == "model version 1 (step 2, adapter)"
    assert story["final"]["se"] == pytest.approx(0.25) and story["idle_steps"] == [3]
