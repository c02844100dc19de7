"""A training run's record in the store: ``RunRecorder`` on a real SQLite store, and real toy
runs of ``fulmen train`` (built-in engine, ``tiny`` model) recorded in a store served over HTTP
that a reader follows while they run."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fulmen.errors import StoreUnavailable
from fulmen.store import open_store
from fulmen.store.memory import MemoryStore
from fulmen.trainer.run_record import RunRecorder, metrics_record
from fulmen.types import (
    LLMResource,
    ModelKind,
    ResourcesCreate,
    Run,
    RunMetrics,
    RunStatus,
)
from tests.algorithms.sft.test_sft_train import example_imports_restored
from tests.store.http_server import serve_store

TOY = Path(__file__).resolve().parents[2] / "examples" / "toy" / "config.yaml"


def record(step: int, **values: Any) -> dict[str, Any]:
    """A metrics record as ``MetricsLogger`` writes it."""
    return {"step": step, "time": time.time(), **values}


async def publish(store: Any, model: str) -> Any:
    llm = LLMResource(base_url="http://127.0.0.1:1/v1", model=model)
    return await store.add_resources(ResourcesCreate(resources={"llm": llm}))


def test_a_metrics_line_keeps_its_numbers_and_labels() -> None:
    line = {"step": 3, "time": 12.5, "stage": 1, "algorithm": "sft", "loss": 0.25, "kl": None}
    converted = metrics_record("r", line | {"nan": math.nan, "flag": True})
    assert converted == RunMetrics(
        run_id="r",
        step=3,
        time=12.5,
        values={"stage": 1.0, "loss": 0.25},
        text={"algorithm": "sft"},
    )


async def test_a_served_model_is_recorded_with_its_resources_and_validation(
    tmp_path: Path,
) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'store.db'}", watchdog_interval=None) as store:
        recorder = RunRecorder(store, Run(run_id="r", name="r", started_at=1.0), flush_s=0.05)
        await recorder.start()
        recorder.metrics(record(1, **{"reward/mean": 0.1}))
        recorder.model_served(ModelKind.ADAPTER, tmp_path / "adapters" / "step-1", 1)
        served = await publish(store, "policy-1")
        recorder.resources_published(served)
        recorder.resources_published(await publish(store, "policy-1"))  # not the first: ignored
        recorder.metrics(
            record(1, **{"val/reward_mean": 0.75, "val/success": 0.5, "time/val_s": 2})
        )
        # A model with no validation at its step is closed by the next step's metrics.
        recorder.model_served(ModelKind.FULL, tmp_path / "weights" / "round-2", 2)
        later = await publish(store, "base")
        recorder.resources_published(later)
        recorder.metrics(record(3, **{"reward/mean": 0.3}))
        await recorder.finish(RunStatus.SUCCEEDED)

        run = await store.get_run("r")
        assert run.status is RunStatus.SUCCEEDED and run.ended_at is not None
        first, second = await store.list_model_versions("r")
        assert (first.version, first.kind, first.step) == (1, ModelKind.ADAPTER, 1)
        assert first.path == str((tmp_path / "adapters" / "step-1").resolve())
        assert (first.resources_version, first.resources_id) == (
            served.version,
            served.resources_id,
        )
        assert first.scores == {"val/reward_mean": 0.75, "val/success": 0.5}
        assert (second.version, second.kind, second.step) == (2, ModelKind.FULL, 2)
        assert (second.resources_version, second.scores) == (later.version, {})
        steps = [m.step for m in (await store.query_run_metrics("r")).items]
        assert steps == [1, 1, 3]

        # A restart resumes the run and numbers its models after the stored ones.
        again = RunRecorder(store, Run(run_id="r", name="r", started_at=50.0), flush_s=0.05)
        assert (await again.start()).status is RunStatus.RUNNING
        again.model_served(ModelKind.ADAPTER, tmp_path / "adapters" / "step-4", 4)
        await again.finish(RunStatus.STOPPED)
        assert [v.version for v in await store.list_model_versions("r")] == [1, 2, 3]
        resumed = await store.get_run("r")
        assert (resumed.status, resumed.started_at) == (RunStatus.STOPPED, 1.0)


async def test_finishing_right_after_a_model_is_served_records_it(tmp_path: Path) -> None:
    # finish() closes the open model (waking the writer) and stops the writer at once; the
    # model is still written, and finish() returns.
    store = MemoryStore()
    recorder = RunRecorder(store, Run(run_id="r", name="r", started_at=1.0), flush_s=0.05)
    await recorder.start()
    await asyncio.sleep(0.01)
    recorder.model_served(ModelKind.ADAPTER, tmp_path / "a", 1)
    await asyncio.wait_for(recorder.finish(RunStatus.SUCCEEDED), 10)
    assert [v.step for v in await store.list_model_versions("r")] == [1]
    assert (await store.get_run("r")).status is RunStatus.SUCCEEDED


class _GatedStore(MemoryStore):
    """A real memory store whose metrics writes wait for a gate, and fail while it says so."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.failures = 0

    async def add_run_metrics(self, metrics: Sequence[RunMetrics]) -> None:
        await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("store at http://127.0.0.1:1 unreachable")
        await super().add_run_metrics(metrics)


async def test_a_slow_or_failing_store_never_holds_up_training() -> None:
    store = _GatedStore()
    store.failures = 1
    recorder = RunRecorder(store, Run(run_id="r", name="r", started_at=1.0), flush_s=0.01)
    await recorder.start()
    started = time.perf_counter()
    for step in range(1, 2001):
        recorder.metrics(record(step, loss=1.0 / step))
    assert time.perf_counter() - started < 2.0  # queued, not written: the store is stalled
    await asyncio.sleep(0.1)
    assert (await store.query_run_metrics("r")).items == []
    store.gate.set()  # the store answers again: the first write fails, later ones land
    for _ in range(200):
        if len((await store.query_run_metrics("r", limit=10_000)).items) == 2000:
            break
        await asyncio.sleep(0.02)
    assert store.failures == 0
    await recorder.finish(RunStatus.SUCCEEDED)
    page = await store.query_run_metrics("r", limit=10_000)
    assert [m.step for m in page.items] == list(range(1, 2001))


async def test_finish_gives_up_on_an_unreachable_store_after_its_timeout() -> None:
    store = _GatedStore()  # the gate never opens
    recorder = RunRecorder(
        store, Run(run_id="r", name="r", started_at=1.0), flush_s=0.01, finish_timeout_s=0.2
    )
    await recorder.start()
    recorder.metrics(record(1, loss=1.0))
    started = time.perf_counter()
    await recorder.finish(RunStatus.FAILED)  # logs a warning, raises nothing
    assert time.perf_counter() - started < 2.0
    assert (await store.get_run("r")).status is RunStatus.RUNNING


# -- real toy runs ------------------------------------------------------------------------------


def _config(run_dir: Path, store_url: str, steps: int) -> Any:
    from fulmen.trainer.config import load_config

    return load_config(
        TOY,
        overrides=[
            f"run_dir={run_dir}",
            f"store_url={store_url}",
            f"algorithm.steps={steps}",
            "algorithm.tasks_per_step=2",
            "algorithm.group_size=2",
            "validation.every=1",
            "validation.max_tasks=2",
        ],
    )


@pytest.mark.slow
@pytest.mark.usefixtures(example_imports_restored.__name__)
async def test_toy_runs_are_recorded_and_followed_live_over_http(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    from fulmen.trainer.trainer import Trainer

    database = f"sqlite:///{tmp_path / 'shared.db'}"
    with serve_store(database, token="t", watchdog_interval=0.5) as url:
        good = Trainer(_config(tmp_path / "good", url, steps=2), store_token="t")
        training = asyncio.create_task(good.afit())
        seen_live: list[int] = []
        async with open_store(url, token="t") as reader:
            while not training.done():  # a reader on "another machine" follows the run
                runs = (await reader.list_runs()).items
                if runs and runs[0].status is RunStatus.RUNNING:
                    items = (await reader.query_run_metrics(runs[0].run_id)).items
                    steps = sorted({m.step for m in items if "reward/mean" in m.values})
                    if (await reader.get_run(runs[0].run_id)).status is RunStatus.RUNNING:
                        seen_live = steps  # read while the run was still running
                await asyncio.sleep(0.2)
            history = await training
            assert len(history) == 2
            for metrics in history:  # 4 rollouts a step, up to rollouts.concurrency (8) at once
                most = metrics["rollouts/concurrency_max"]
                assert 1 <= most <= 4 and 0 < metrics["rollouts/concurrency_mean"] <= most
            assert seen_live, "no training step was visible while the run was running"
            (done,) = (await reader.list_runs()).items
            assert done.status is RunStatus.SUCCEEDED and done.ended_at is not None

            # A second run on the same store fails at its first step: its tasks cannot be
            # stored (a NaN is no JSON number).
            bad = Trainer(_config(tmp_path / "bad", url, steps=2), store_token="t")
            with pytest.raises(Exception, match="finite"):
                await bad.afit(train_data=[{"id": "t0", "prompt": math.nan}])

            # The first run, started again for more steps, resumes its record; stopped (as
            # Ctrl-C stops it) after its third step, it is marked stopped. Far more steps than
            # it runs: the stop lags step 3 by up to a metrics flush and a poll (~1.2 s).
            more = Trainer(_config(tmp_path / "good", url, steps=20), store_token="t")
            training = asyncio.create_task(more.afit())
            while not training.done():
                items = (await reader.query_run_metrics(done.run_id, after_step=2)).items
                if any("reward/mean" in m.values for m in items):
                    training.cancel()
                    break
                await asyncio.sleep(0.2)
            with pytest.raises(asyncio.CancelledError):
                await training

    async with open_store(database, watchdog_interval=None) as store:  # the SQLite file itself
        listed = (await store.list_runs()).items
        assert [r.name for r in listed] == ["bad", "good"]  # latest started first
        failed, good = listed
        assert failed.status is RunStatus.FAILED and failed.ended_at is not None
        assert good.run_id == done.run_id and good.started_at == done.started_at
        assert good.status is RunStatus.STOPPED and good.ended_at is not None
        assert good.config["algorithm"]["steps"] == 20
        assert good.host
        metrics = (await store.query_run_metrics(good.run_id)).items
        train_steps = [m.step for m in metrics if "reward/mean" in m.values]
        assert train_steps[:3] == [1, 2, 3]
        val_steps = [m.step for m in metrics if "val/reward_mean" in m.values]
        assert val_steps[:3] == [0, 1, 2]
        assert seen_live[0] in (1, 2)
        versions = await store.list_model_versions(good.run_id)
        assert [(v.version, v.step, v.kind) for v in versions][:3] == [
            (1, 1, ModelKind.ADAPTER),
            (2, 2, ModelKind.ADAPTER),
            (3, 3, ModelKind.ADAPTER),
        ]
        for version in versions[:2]:  # the third was stopped before its validation
            assert Path(version.path).is_dir()
            assert "val/reward_mean" in version.scores
            assert version.resources_version is not None
            served = await store.get_resources(version.resources_version)
            assert served.resources["llm"].model == f"policy-{version.step}"  # type: ignore[union-attr]
        bad_metrics = (await store.query_run_metrics(failed.run_id)).items
        assert [m.step for m in bad_metrics] == [0]  # its validation before the first step
        assert await store.list_model_versions(failed.run_id) == []
