"""The store facade against 0.x's documented store contract, on fulmen's memory and SQLite stores.

From 0.x's store guide: the queue is FIFO and a claim makes a ``preparing`` attempt numbered
after the earlier ones; the first span makes attempt and rollout ``running``; a runner-set
outcome ends them; a failure listed in ``retry_condition`` while attempts remain ``requeuing``
the rollout; ``timeout_seconds`` is enforced by the watchdog; resources are versioned snapshots
the latest of which new rollouts get; spans come back in sequence order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import fulmen.compat.agentlightning as agl


@pytest.fixture(params=["memory", "sqlite"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[agl.LightningStore]:
    if request.param == "memory":
        facade: agl.LightningStore = agl.InMemoryLightningStore(watchdog_interval=None)
    else:
        facade = await agl.LightningStore.open(
            f"sqlite:///{tmp_path / 'store.db'}", watchdog_interval=None
        )
    yield facade
    await facade.close()


def _span(rollout: agl.AttemptedRollout, n: int, name: str = "step") -> agl.Span:
    return agl.Span(
        rollout_id=rollout.rollout_id,
        attempt_id=rollout.attempt.attempt_id,
        sequence_id=0,  # the store numbers it
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        name=name,
        attributes={"n": n},
        start_time=time.time(),
        end_time=time.time(),
    )


async def test_queue_is_fifo_and_a_claim_prepares_the_first_attempt(
    store: agl.LightningStore,
) -> None:
    first = await store.enqueue_rollout({"q": 1}, mode="train")
    second = await store.enqueue_rollout({"q": 2}, mode="val", metadata={"tag": "x"})
    assert (first.status, second.status) == ("queuing", "queuing")
    assert second.mode == "val" and second.metadata == {"tag": "x"}
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == first.rollout_id
    assert claimed.status == "preparing"
    assert (claimed.attempt.sequence_id, claimed.attempt.status) == (1, "preparing")
    assert (await store.get_rollout_by_id(first.rollout_id)).status == "preparing"  # type: ignore[union-attr]
    assert (await store.dequeue_rollout()).rollout_id == second.rollout_id  # type: ignore[union-attr]
    assert await store.dequeue_rollout() is None
    assert await store.get_rollout_by_id("no-such-rollout") is None


async def test_first_span_runs_the_attempt_and_success_ends_the_rollout(
    store: agl.LightningStore,
) -> None:
    queued = await store.enqueue_rollout({"q": 1})
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    stored = [await store.add_span(_span(claimed, n)) for n in (1, 2, 3)]
    assert [s.sequence_id for s in stored] == sorted(s.sequence_id for s in stored)
    assert (await store.get_latest_attempt(queued.rollout_id)).status == "running"  # type: ignore[union-attr]
    assert [r.rollout_id for r in await store.query_rollouts(status=["running"])] == [
        queued.rollout_id
    ]
    assert await store.query_rollouts(status=["preparing"]) == []
    attempt = await store.update_attempt(queued.rollout_id, "latest", status="succeeded")
    assert attempt.status == "succeeded" and attempt.end_time is not None
    (done,) = await store.wait_for_rollouts(rollout_ids=[queued.rollout_id], timeout=5)
    assert done.status == "succeeded" and done.end_time is not None
    spans = await store.query_spans(queued.rollout_id)
    assert [s.attributes["n"] for s in spans] == [1, 2, 3]
    assert await store.query_spans(queued.rollout_id, attempt_id="latest") == spans


async def test_failure_in_retry_condition_requeues_until_attempts_run_out(
    store: agl.LightningStore,
) -> None:
    config = agl.RolloutConfig(max_attempts=2, retry_condition=["failed"])
    queued = await store.enqueue_rollout({"q": 1}, config=config)
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_attempt(first.rollout_id, first.attempt.attempt_id, status="failed")
    assert (await store.get_rollout_by_id(queued.rollout_id)).status == "requeuing"  # type: ignore[union-attr]
    assert [r.rollout_id for r in await store.query_rollouts(status=["requeuing"])] == [
        queued.rollout_id
    ]
    assert await store.query_rollouts(status=["queuing"]) == []
    second = await store.dequeue_rollout()
    assert second is not None and second.attempt.sequence_id == 2
    await store.update_attempt(second.rollout_id, "latest", status="failed")
    final = await store.get_rollout_by_id(queued.rollout_id)
    assert final is not None and final.status == "failed"
    attempts = await store.query_attempts(queued.rollout_id)
    assert [(a.sequence_id, a.status) for a in attempts] == [(1, "failed"), (2, "failed")]


async def test_no_retry_condition_means_one_attempt(store: agl.LightningStore) -> None:
    queued = await store.enqueue_rollout({"q": 1}, config=agl.RolloutConfig(max_attempts=3))
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    await store.update_attempt(queued.rollout_id, "latest", status="failed")
    assert (await store.get_rollout_by_id(queued.rollout_id)).status == "failed"  # type: ignore[union-attr]


async def test_watchdog_times_out_an_attempt_and_retries_it(store: agl.LightningStore) -> None:
    config = agl.RolloutConfig(timeout_seconds=0.05, max_attempts=2, retry_condition=["timeout"])
    queued = await store.enqueue_rollout({"q": 1}, config=config)
    assert (await store.dequeue_rollout()) is not None
    await asyncio.sleep(0.1)
    await store.store.reconcile()
    attempts = await store.query_attempts(queued.rollout_id)
    assert attempts[0].status == "timeout"
    assert (await store.get_rollout_by_id(queued.rollout_id)).status == "requeuing"  # type: ignore[union-attr]
    with pytest.raises(agl.NotSupported, match="watchdog"):
        await store.update_attempt(queued.rollout_id, "latest", status="timeout")


async def test_cancel_is_final_and_other_rollout_changes_are_refused(
    store: agl.LightningStore,
) -> None:
    queued = await store.enqueue_rollout({"q": 1})
    with pytest.raises(agl.NotSupported, match="fixed once"):
        await store.update_rollout(queued.rollout_id, input={"q": 2})
    with pytest.raises(agl.NotSupported, match="only cancel"):
        await store.update_rollout(queued.rollout_id, status="succeeded")
    tagged = await store.update_rollout(queued.rollout_id, metadata={"k": "v"})
    assert tagged.metadata == {"k": "v"}
    cancelled = await store.update_rollout(queued.rollout_id, status="cancelled")
    assert cancelled.status == "cancelled"
    assert await store.dequeue_rollout() is None


async def test_resources_are_versioned_snapshots(store: agl.LightningStore) -> None:
    assert await store.get_latest_resources() is None
    llm = agl.LLM(endpoint="http://127.0.0.1:1/v1", model="m", sampling_parameters={"t": 1})
    prompt = agl.PromptTemplate(template="Q: {q}", engine="f-string")
    v1 = await store.add_resources({"main_llm": llm, "prompt": prompt})
    v2 = await store.add_resources({"main_llm": llm})
    assert v1.resources_id != v2.resources_id
    assert (await store.get_latest_resources()).resources_id == v2.resources_id  # type: ignore[union-attr]
    again = await store.get_resources_by_id(v1.resources_id)
    assert again is not None and again.resources["prompt"].format(q=3) == "Q: 3"
    assert again.resources["main_llm"].endpoint == llm.endpoint
    assert await store.get_resources_by_id("999") is None
    latest = await store.enqueue_rollout({"q": 1})
    pinned = await store.enqueue_rollout({"q": 1}, resources_id=v1.resources_id)
    assert (latest.resources_id, pinned.resources_id) == (v2.resources_id, v1.resources_id)
    with pytest.raises(agl.NotSupported, match="immutable"):
        await store.update_resources(v1.resources_id, {"main_llm": llm})


async def test_query_by_ids_and_the_calls_fulmen_refuses(store: agl.LightningStore) -> None:
    a = await store.enqueue_rollout({"q": 1})
    await store.enqueue_rollout({"q": 2})
    assert [r.rollout_id for r in await store.query_rollouts(rollout_ids=[a.rollout_id])] == [
        a.rollout_id
    ]
    assert len(await store.query_rollouts()) == 2
    with pytest.raises(ValueError, match="does not exist"):
        await store.query_attempts("nope")
    with pytest.raises(agl.NotSupported, match="dequeue_rollout"):
        await store.start_rollout({"q": 3})
    with pytest.raises(agl.NotSupported, match="retry"):
        await store.start_attempt(a.rollout_id)
    with pytest.raises(agl.NotSupported, match="retry_condition"):
        await store.enqueue_rollout({"q": 4}, config=agl.RolloutConfig(retry_condition=["running"]))
