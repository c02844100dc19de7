"""Runs, their metrics and model versions: the conformance suite's part for experiment records.

Every test runs against memory, SQLite, PostgreSQL and the HTTP service over both (see
``conftest.py``).
"""

from __future__ import annotations

import math

import pytest

from fulmen.errors import Conflict, InvalidRequest, NotFound
from fulmen.store import Store
from fulmen.types import ModelKind, ModelVersion, Run, RunMetrics, RunStatus
from tests.store.conftest import Backend


def run(run_id: str, started_at: float = 100.0, **kw: object) -> Run:
    fields: dict[str, object] = {
        "name": f"name of {run_id}",
        "config": {"algorithm": "grpo", "lr": 1e-4, "nested": {"steps": [1, 2]}},
        "host": "trainer-1",
    }
    fields.update(kw)
    return Run(run_id=run_id, started_at=started_at, **fields)  # type: ignore[arg-type]


def metrics(run_id: str, step: int, time: float | None = None, **values: float) -> RunMetrics:
    return RunMetrics(
        run_id=run_id,
        step=step,
        time=float(step) if time is None else time,
        values=values or {"reward/mean": step / 10},
    )


def model(run_id: str, version: int, **kw: object) -> ModelVersion:
    fields: dict[str, object] = {
        "step": version * 2,
        "kind": ModelKind.ADAPTER,
        "path": f"/runs/{run_id}/adapters/step-{version * 2}",
        "scores": {"val/reward_mean": 0.5},
    }
    fields.update(kw)
    return ModelVersion(run_id=run_id, version=version, **fields)  # type: ignore[arg-type]


async def test_a_started_run_is_running_and_read_back_whole(store: Store) -> None:
    started = await store.start_run(run("r1", status=RunStatus.FAILED, ended_at=5.0))
    assert started.status is RunStatus.RUNNING  # whatever the caller sent
    assert started.ended_at is None
    assert started.updated_at > 0
    assert (started.name, started.host, started.started_at) == ("name of r1", "trainer-1", 100.0)
    assert started.config == {"algorithm": "grpo", "lr": 1e-4, "nested": {"steps": [1, 2]}}
    assert await store.get_run("r1") == started
    with pytest.raises(NotFound, match="r2"):
        await store.get_run("r2")


async def test_runs_are_listed_latest_first_in_pages(store: Store) -> None:
    for i in range(5):
        await store.start_run(run(f"r{i}", started_at=100.0 + i))
    first = await store.list_runs(limit=2)
    assert [r.run_id for r in first.items] == ["r4", "r3"]
    assert first.next_cursor == 2
    second = await store.list_runs(limit=2, offset=first.next_cursor)
    assert [r.run_id for r in second.items] == ["r2", "r1"]
    last = await store.list_runs(limit=2, offset=4)
    assert [r.run_id for r in last.items] == ["r0"]
    assert last.next_cursor is None
    assert len((await store.list_runs()).items) == 5


async def test_ending_a_run_stamps_its_end_and_a_restart_resumes_it(store: Store) -> None:
    await store.start_run(run("r"))
    ended = await store.update_run("r", status=RunStatus.SUCCEEDED)
    assert ended.status is RunStatus.SUCCEEDED and ended.is_final
    assert ended.ended_at is not None and ended.ended_at >= ended.started_at
    failed = await store.update_run("r", status=RunStatus.FAILED, ended_at=123.5)
    assert (failed.status, failed.ended_at) == (RunStatus.FAILED, 123.5)
    resumed = await store.start_run(run("r", started_at=999.0, name="again", config={"k": 2}))
    assert resumed.status is RunStatus.RUNNING
    assert resumed.ended_at is None
    assert resumed.started_at == 100.0  # the first start is kept
    assert (resumed.name, resumed.config) == ("again", {"k": 2})
    assert resumed.updated_at >= failed.updated_at
    assert await store.get_run("r") == resumed
    with pytest.raises(NotFound):
        await store.update_run("nope", status=RunStatus.STOPPED)


async def test_update_run_refuses_what_no_backend_can_store(store: Store) -> None:
    await store.start_run(run("r"))
    with pytest.raises(InvalidRequest, match="ended_at"):
        await store.update_run("r", ended_at=math.nan)
    with pytest.raises(InvalidRequest, match="status"):
        await store.update_run("r", status="paused")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await store.list_runs(limit=0)
    with pytest.raises(InvalidRequest):
        await store.query_run_metrics("r", limit=0)
    with pytest.raises(InvalidRequest):
        await store.query_run_metrics("r", after_step=2**63)
    assert (await store.get_run("r")).status is RunStatus.RUNNING


async def test_metrics_are_kept_in_step_order_and_posting_again_is_a_no_op(store: Store) -> None:
    await store.start_run(run("a"))
    await store.start_run(run("b"))
    batch = [metrics("a", 3), metrics("a", 1), metrics("b", 1, loss=0.5), metrics("a", 2)]
    await store.add_run_metrics(batch)
    await store.add_run_metrics(batch)  # a retried post
    await store.add_run_metrics([])
    page = await store.query_run_metrics("a")
    assert [m.step for m in page.items] == [1, 2, 3]
    assert page.items[0] == metrics("a", 1)
    assert page.next_cursor is None
    (only,) = (await store.query_run_metrics("b")).items
    assert only.values == {"loss": 0.5}
    later = await store.query_run_metrics("a", after_step=1)
    assert [m.step for m in later.items] == [2, 3]


async def test_a_metrics_page_never_splits_a_step(store: Store) -> None:
    await store.start_run(run("a"))
    records = [metrics("a", 1, 1.0), metrics("a", 2, 2.0), metrics("a", 2, 2.5)]
    records += [metrics("a", 2, 2.7), metrics("a", 3, 3.0), metrics("a", 4, 4.0)]
    await store.add_run_metrics(records)
    first = await store.query_run_metrics("a", limit=2)
    # The limit falls inside step 2: the page finishes it.
    assert [(m.step, m.time) for m in first.items] == [(1, 1.0), (2, 2.0), (2, 2.5), (2, 2.7)]
    assert first.next_cursor == 2
    second = await store.query_run_metrics("a", after_step=first.next_cursor, limit=2)
    assert [m.step for m in second.items] == [3, 4]
    assert second.next_cursor is None
    exact = await store.query_run_metrics("a", limit=1)
    assert [m.step for m in exact.items] == [1]
    assert exact.next_cursor == 1


async def test_metrics_batches_are_all_or_nothing(store: Store) -> None:
    await store.start_run(run("a"))
    await store.add_run_metrics([metrics("a", 1)])
    with pytest.raises(NotFound, match="ghost"):
        await store.add_run_metrics([metrics("a", 2), metrics("ghost", 1)])
    with pytest.raises(Conflict):
        await store.add_run_metrics([metrics("a", 3), metrics("a", 1, reward=9.0)])
    with pytest.raises(Conflict):
        await store.add_run_metrics([metrics("a", 4), metrics("a", 4, 4.0, other=1.0)])
    assert [m.step for m in (await store.query_run_metrics("a")).items] == [1]
    with pytest.raises(NotFound):
        await store.query_run_metrics("ghost")


async def test_model_versions_are_idempotent_by_run_and_version(store: Store) -> None:
    await store.start_run(run("a"))
    await store.start_run(run("b", started_at=200.0))
    first = await store.add_model_version(model("a", 1, resources_id="res-1", resources_version=3))
    assert first.created_at > 0
    assert (first.kind, first.resources_version, first.resources_id) == (
        ModelKind.ADAPTER,
        3,
        "res-1",
    )
    assert (
        await store.add_model_version(model("a", 1, resources_id="res-1", resources_version=3))
        == first
    )
    with pytest.raises(Conflict, match="version 1"):
        await store.add_model_version(model("a", 1, path="/elsewhere"))
    await store.add_model_version(model("a", 2, kind=ModelKind.FULL, scores={}))
    await store.add_model_version(model("b", 1))
    with pytest.raises(NotFound, match="ghost"):
        await store.add_model_version(model("ghost", 1))
    of_a = await store.list_model_versions("a")
    assert [(v.version, v.kind) for v in of_a] == [(1, ModelKind.ADAPTER), (2, ModelKind.FULL)]
    assert of_a[0] == first
    every = await store.list_model_versions()
    assert [(v.run_id, v.version) for v in every] == [("a", 1), ("a", 2), ("b", 1)]
    assert await store.list_model_versions("nobody") == []


async def test_runs_survive_reopening_a_durable_store(backend: Backend) -> None:
    async with backend.open() as store:
        if not store.capabilities.is_durable:
            pytest.skip("the backend keeps nothing across a reopen")
        started = await store.start_run(run("r"))
        await store.add_run_metrics([metrics("r", 1)])
        stored = await store.add_model_version(model("r", 1))
    async with backend.open() as store:
        assert await store.get_run("r") == started
        assert (await store.query_run_metrics("r")).items == [metrics("r", 1)]
        assert await store.list_model_versions("r") == [stored]
