"""Group commit: concurrent appends are merged, yet behave like separate calls."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from fulmen.errors import InvalidRequest, StoreUnavailable
from fulmen.store.client import StoreClient
from fulmen.store.coalescer import WriteCoalescer
from fulmen.store.memory import MemoryStore
from fulmen.types import RolloutCreate, Span, SpanCreate
from tests.store.http_server import aserve_store


class Recorder:
    def __init__(self, delay: float = 0.01) -> None:
        self.calls: list[list[int]] = []
        self.delay = delay

    async def write(self, items: Sequence[int]) -> list[int]:
        self.calls.append(list(items))
        await asyncio.sleep(self.delay)
        if any(i < 0 for i in items):
            raise InvalidRequest(f"negative item in {list(items)}")
        return [i * 10 for i in items]


async def test_concurrent_submits_are_merged_in_order() -> None:
    recorder = Recorder()
    coalescer = WriteCoalescer(recorder.write)
    results = await asyncio.gather(*(coalescer.submit([i, i + 100]) for i in range(10)))
    assert results == [[i * 10, (i + 100) * 10] for i in range(10)]
    # The flusher starts on the next loop turn, by which time all ten are waiting.
    assert recorder.calls == [[x for i in range(10) for x in (i, i + 100)]]
    assert await coalescer.submit([7]) == [70]  # and an idle coalescer writes at once


async def test_a_bad_request_fails_alone() -> None:
    recorder = Recorder()
    coalescer = WriteCoalescer(recorder.write)
    outcomes = await asyncio.gather(
        coalescer.submit([1]), coalescer.submit([2]), coalescer.submit([-3]),
        coalescer.submit([4]), return_exceptions=True,
    )  # fmt: skip
    assert outcomes[:2] == [[10], [20]]
    assert isinstance(outcomes[2], InvalidRequest)
    assert outcomes[3] == [40]
    # The merged call failed (writing nothing), then each request was run on its own.
    assert recorder.calls == [[1, 2, -3, 4], [1], [2], [-3], [4]]


async def test_max_items_bounds_a_merged_call() -> None:
    recorder = Recorder()
    coalescer = WriteCoalescer(recorder.write, max_items=4)
    await asyncio.gather(*(coalescer.submit([i, i]) for i in range(7)))
    assert [len(c) for c in recorder.calls] == [4, 4, 4, 2]


async def test_stopping_fails_the_waiting_requests() -> None:
    coalescer = WriteCoalescer(Recorder(delay=10).write)
    waiting = [asyncio.create_task(coalescer.submit([i])) for i in range(3)]
    await asyncio.sleep(0.05)
    assert coalescer._flusher is not None
    coalescer._flusher.cancel()
    for task in waiting:
        with pytest.raises(StoreUnavailable):
            await task


async def test_concurrent_http_appends_share_store_calls() -> None:
    class Counting(MemoryStore):
        calls = 0

        async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
            Counting.calls += 1
            await asyncio.sleep(0.005)  # a write takes a while, as on a real database
            return await super().add_spans(spans)

    store = Counting()
    async with aserve_store(store) as url:
        client = await StoreClient.connect(url)
        await client.enqueue([RolloutCreate(input=i) for i in range(8)])
        claims = await client.claim("w", limit=8)

        async def append(i: int) -> list[Span]:
            c = claims[i % 8]
            span = SpanCreate(
                rollout_id=c.rollout.rollout_id,
                attempt_id=c.attempt.attempt_id,
                trace_id="t",
                span_id=f"s{i}",
                name=f"n{i}",
                start_time=i,
            )
            return await client.add_spans([span])

        Counting.calls = 0
        results = await asyncio.gather(*(append(i) for i in range(40)))
        await client.aclose()
    assert [r[0].span_id for r in results] == [f"s{i}" for i in range(40)]
    assert Counting.calls < 40  # merged
    for c in claims:
        stored = (await store.query_spans(c.rollout.rollout_id)).items
        assert [s.sequence for s in stored] == [1, 2, 3, 4, 5]
