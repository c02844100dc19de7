"""Spans queued while the store is away: bounded in memory, spilled to a file, replayed once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fulmen.errors import InvalidRequest, StoreError, StoreUnavailable
from fulmen.store import Store
from fulmen.store.spill import SpillQueue
from fulmen.tracing import operation, rollout_scope
from fulmen.tracing.backoff import Backoff, is_transient, retry_call
from fulmen.tracing.exporter import StoreSpanExporter
from fulmen.tracing.provider import create_provider, provider_tracer
from tests.tracing.conftest import claim_many


class AwayStore:
    """A real store whose ``add_spans`` fails as unreachable while ``is_away``."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.is_away = True
        self.failed_writes = 0

    async def add_spans(self, spans: Any) -> Any:
        if self.is_away:
            self.failed_writes += 1
            raise StoreUnavailable("store down (scripted)")
        return await self._inner.add_spans(spans)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_spans_beyond_the_memory_bound_are_spilled_and_replayed_once(
    store: Store, tmp_path: Path
) -> None:
    (claim,) = await claim_many(store, 1)
    away = AwayStore(store)
    exporter = StoreSpanExporter(
        away,  # type: ignore[arg-type]
        batch_size=50,
        interval=0.01,
        backoff=Backoff(initial=0.01, maximum=0.05, deadline=None),
        max_in_memory=100,
        spill_dir=tmp_path,
    )
    exporter.start()
    tracer = provider_tracer(create_provider(exporter))
    peak = 0
    with rollout_scope(tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):
        for i in range(1_000):
            with operation(f"step-{i}"):
                pass
            peak = max(peak, exporter.queue.in_memory)
            if i % 100 == 0:
                await asyncio.sleep(0.02)  # the sender keeps failing meanwhile
    assert away.failed_writes > 3
    # memory holds the bound plus at most one spill batch waiting to be written
    assert peak <= 100 + 64
    assert exporter.queue.spilled >= 800
    (spill_file,) = tmp_path.iterdir()
    assert spill_file.stat().st_size > 0
    away.is_away = False
    await asyncio.wait_for(exporter.flush(), 30)
    await exporter.aclose()
    stored = (await store.query_spans(claim.rollout.rollout_id, limit=10_000)).items
    names = [s.name for s in stored]
    assert len(names) == len(set(s.span_id for s in stored)) == 1_001  # + the rollout span
    assert names[:1_000] == [f"step-{i}" for i in range(1_000)]  # in order
    assert list(tmp_path.iterdir()) == []  # replayed, acknowledged, deleted


def test_spill_queue_puts_back_a_batch_that_was_not_stored(tmp_path: Path) -> None:
    queue: SpillQueue[int, int] = SpillQueue(
        encode=lambda n: str(n).encode(),
        decode=lambda line: int(line),
        max_in_memory=3,
        directory=tmp_path,
        spill_batch=2,
    )
    queue.append(range(10))
    assert queue.in_memory <= 3 + 2 and len(queue) == 10
    first = queue.take(5)
    assert first.memory == [0, 1, 2] and first.records == []
    queue.requeue(first)  # the write failed
    seen: list[int] = []
    while len(batch := queue.take(4)):
        if batch.records == [3, 4, 5, 6] and not seen.count(-1):
            queue.requeue(batch)  # a batch from the file fails once, then comes back first
            seen.append(-1)
            continue
        seen += batch.memory + batch.records
        queue.ack(batch)
    assert seen == [0, 1, 2, -1, *range(3, 10)]  # -1: where the file batch was put back
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (StoreUnavailable("down"), True),
        (StoreError("internal server error"), True),  # a 5xx body from the service
        (InvalidRequest("bad field"), False),  # the caller's own fault: fails loudly
        (ConnectionResetError(), True),
    ],
)
def test_transient_errors_are_5xx_and_network_errors(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


async def test_retry_call_gives_up_after_its_deadline() -> None:
    calls = 0

    async def failing() -> None:
        nonlocal calls
        calls += 1
        raise StoreError("internal server error")

    with pytest.raises(StoreError):
        await retry_call(
            failing, backoff=Backoff(initial=0.01, maximum=0.02, deadline=0.3), what="test"
        )
    assert calls > 3


def test_a_temporary_spill_directory_is_removed_after_replay() -> None:
    queue: SpillQueue[int, int] = SpillQueue(
        encode=lambda n: str(n).encode(), decode=int, max_in_memory=1, spill_batch=1
    )
    queue.append([1, 2])
    path = queue.path
    assert path is not None and path.exists()
    for expected in ([1], [2]):
        batch = queue.take(10)
        assert batch.memory + batch.records == expected
        queue.ack(batch)
    assert queue.path is None and not path.parent.exists()


async def test_spans_left_at_exit_are_replayed_by_the_next_exporter(
    store: Store, tmp_path: Path
) -> None:
    (claim,) = await claim_many(store, 1)
    away = AwayStore(store)
    first = StoreSpanExporter(away, interval=0.01, max_in_memory=4, spill_dir=tmp_path)  # type: ignore[arg-type]
    first.start()
    tracer = provider_tracer(create_provider(first))
    with rollout_scope(tracer, claim.rollout.rollout_id, claim.attempt.attempt_id):
        for i in range(10):
            with operation(f"step-{i}"):
                pass
    await asyncio.sleep(0.2)  # the sender takes a batch and keeps failing to store it
    assert away.failed_writes > 0
    await first.abandon()  # the runner's exit deadline passed with the store away
    assert first.queue.path is not None and first.queue.path.exists()
    second = StoreSpanExporter(store, interval=0.01, spill_dir=tmp_path)
    second.start()  # adopts the file nobody holds any more
    await asyncio.wait_for(second.flush(), 10)
    await second.aclose()
    stored = (await store.query_spans(claim.rollout.rollout_id, limit=100)).items
    assert [s.name for s in stored][:10] == [f"step-{i}" for i in range(10)]
    assert len(stored) == 11 and list(tmp_path.iterdir()) == []
