"""The recorder: batched, off the request path, retried, and nothing lost at close."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fulmen.errors import GatewayError, StoreUnavailable
from fulmen.gateway import CallRecorder, GatewayConfig
from fulmen.types import LLMCallCreate
from tests.gateway.conftest import SpyStore, gateway_over, new_attempt
from tests.gateway.scripted_upstream import Script

CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}


def call(i: int, rollout: tuple[str, str] | None = None) -> LLMCallCreate:
    r_id, a_id = rollout if rollout else (None, None)
    return LLMCallCreate(call_id=f"c{i}", rollout_id=r_id, attempt_id=a_id, started_at=time.time())


class FlakyStore(SpyStore):
    """Fails ``failures`` writes with StoreUnavailable, and each write takes ``delay_s``."""

    def __init__(self, inner: Any, *, failures: int = 0, delay_s: float = 0.0) -> None:
        super().__init__(inner)
        self.failures = failures
        self.delay_s = delay_s
        self.gate = asyncio.Event()
        self.gate.set()

    async def add_llm_calls(self, calls: Any) -> Any:
        await self.gate.wait()
        await asyncio.sleep(self.delay_s)
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("store down (scripted)")
        return await super().add_llm_calls(calls)


async def test_close_writes_everything_in_batches(store: SpyStore) -> None:
    slow = FlakyStore(store._inner, delay_s=0.01)
    recorder = CallRecorder(slow, batch_size=50, flush_interval_s=1.0)
    recorder.start()
    for i in range(1000):
        recorder.record(call(i))
    await recorder.aclose()
    assert [c.call_id for c in slow.added] == [f"c{i}" for i in range(1000)]
    assert max(slow.write_batches) <= 50
    assert len(slow.write_batches) < 100  # batched, not one write per record
    assert (recorder.recorded, recorder.stored, recorder.dropped) == (1000, 1000, 0)


async def test_unreachable_store_is_retried(store: SpyStore) -> None:
    flaky = FlakyStore(store._inner, failures=3)
    recorder = CallRecorder(flaky, flush_interval_s=0.01, jitter=lambda: 0.0)
    recorder.start()
    for i in range(10):
        recorder.record(call(i))
    await asyncio.wait_for(recorder.flush(), timeout=10)
    assert len(flaky.added) == 10 and recorder.dropped == 0
    await recorder.aclose()


async def test_a_refused_record_does_not_take_its_batch_along(store: SpyStore) -> None:
    rollout = await new_attempt(store)
    recorder = CallRecorder(store, flush_interval_s=0.01)
    recorder.start()
    recorder.record(call(0, rollout))
    recorder.record(call(1, (rollout[0], "attempt-of-nobody")))  # the store refuses it
    recorder.record(call(2, rollout))
    await recorder.aclose()
    stored = (await store.query_llm_calls(rollout[0])).items
    assert [c.call_id for c in stored] == ["c0", "c2"]
    assert (recorder.stored, recorder.dropped) == (2, 1)


async def test_a_refusal_the_writer_met_before_the_flush_is_still_reported(
    store: SpyStore,
) -> None:
    rollout = await new_attempt(store)
    recorder = CallRecorder(store, flush_interval_s=0.01)
    recorder.start()
    recorder.record(call(0, (rollout[0], "attempt-of-nobody")))  # the store refuses it
    for _ in range(500):  # the background writer gets to it before anyone flushes
        if recorder.dropped:
            break
        await asyncio.sleep(0.01)
    assert recorder.dropped == 1
    first = await recorder.flush(timeout=5)
    assert (first.refused, first.pending, first.is_complete) == (1, 0, False)
    assert first.error is not None and "refused" in first.error
    recorder.record(call(1, rollout))
    second = await recorder.flush(timeout=5)  # each refusal is reported once
    assert (second.refused, second.pending, second.is_complete) == (0, 0, True)
    await recorder.aclose()


async def test_close_gives_up_on_a_dead_store_after_its_timeout(store: SpyStore) -> None:
    dead = FlakyStore(store._inner, failures=10**9)
    recorder = CallRecorder(dead, flush_interval_s=0.01, close_timeout_s=0.3)
    recorder.start()
    recorder.record(call(0))
    started = time.monotonic()
    await asyncio.wait_for(recorder.aclose(), timeout=10)
    assert time.monotonic() - started < 5
    assert recorder.dropped == 1


async def test_store_writes_are_off_the_request_path(
    store: SpyStore, config: GatewayConfig
) -> None:
    blocked = FlakyStore(store._inner)
    blocked.gate.clear()  # every store write waits until the gate opens
    async with gateway_over(blocked, Script(), config) as gw:
        rollout_id, attempt_id = await new_attempt(blocked)
        url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
        async with httpx.AsyncClient() as client:
            for _ in range(5):
                # The store blocks until the gate opens: a request waiting on it would never be
                # answered, so this bound only has to be finite.
                r = await asyncio.wait_for(client.post(url, json=CHAT), timeout=30)
                assert r.status_code == 200
        assert blocked.added == []
        blocked.gate.set()
        assert len(await gw.calls(rollout_id)) == 5


async def test_gateway_shutdown_flushes_pending_records(store: SpyStore) -> None:
    lazy = GatewayConfig(flush_interval_s=30.0, batch_size=10_000, connect_retries=0)
    async with gateway_over(store, Script(), lazy) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
        async with httpx.AsyncClient() as client:
            for _ in range(20):
                assert (await client.post(url, json=CHAT)).status_code == 200
        assert store.added == []  # nothing written yet: the interval is 30 s
    # Leaving the block shut the gateway down (lifespan): everything was written.
    assert len((await store.query_llm_calls(rollout_id)).items) == 20


async def test_flush_endpoint_returns_after_records_are_stored(
    store: SpyStore,
) -> None:
    lazy = GatewayConfig(flush_interval_s=30.0, batch_size=10_000, connect_retries=0)
    async with gateway_over(store, Script(), lazy) as gw, httpx.AsyncClient() as client:
        rollout_id, attempt_id = await new_attempt(store)
        url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
        assert (await client.post(url, json=CHAT)).status_code == 200
        r = await client.post(f"{gw.url}/gateway/flush")
        assert r.json() == {"status": "flushed"}
        assert len((await store.query_llm_calls(rollout_id)).items) == 1
        health = (await client.get(f"{gw.url}/healthz")).json()
    assert health["recorder"] == {"recorded": 1, "stored": 1, "dropped": 0}


async def test_a_closed_recorder_refuses_reuse(store: SpyStore) -> None:
    recorder = CallRecorder(store)
    recorder.start()
    await recorder.aclose()
    with pytest.raises(GatewayError, match="cannot be reused"):
        recorder.start()
    recorder.record(call(0))  # after close: counted as dropped, never silently lost
    assert recorder.dropped == 1


class AwayStore(SpyStore):
    """A real store whose writes fail as unreachable while ``is_away``."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.is_away = True

    async def add_llm_calls(self, calls: Any) -> Any:
        if self.is_away:
            raise StoreUnavailable("store down (scripted)")
        return await super().add_llm_calls(calls)


async def test_a_long_outage_spills_to_disk_and_loses_nothing(
    store: SpyStore, tmp_path: Path
) -> None:
    away = AwayStore(store._inner)
    recorder = CallRecorder(
        away, batch_size=50, flush_interval_s=0.01, max_pending=200, spill_dir=tmp_path,
        jitter=lambda: 0.0,
    )  # fmt: skip
    recorder.start()
    peak = 0
    for i in range(2_000):
        recorder.record(call(i))
        peak = max(peak, recorder.queue.in_memory)
        if i % 250 == 0:
            await asyncio.sleep(0.02)
    assert peak <= 200 + 64  # the memory bound plus one spill batch
    waited = await recorder.flush(timeout=0.3)  # the store is still away
    assert waited.pending > 0 and not waited.is_complete
    assert len(list(tmp_path.iterdir())) == 1
    away.is_away = False
    outcome = await asyncio.wait_for(recorder.flush(), 30)
    assert outcome.is_complete
    assert [c.call_id for c in away.added] == [f"c{i}" for i in range(2_000)]  # once, in order
    assert (recorder.stored, recorder.dropped) == (2_000, 0)
    assert list(tmp_path.iterdir()) == []  # replayed and deleted
    await recorder.aclose()


async def test_records_unsent_at_close_are_replayed_by_the_next_recorder(
    store: SpyStore, tmp_path: Path
) -> None:
    away = AwayStore(store._inner)
    first = CallRecorder(
        away, flush_interval_s=0.01, max_pending=5, close_timeout_s=0.3, spill_dir=tmp_path
    )
    first.start()
    for i in range(20):
        first.record(call(i))
    await asyncio.wait_for(first.aclose(), 10)  # the store stayed away until the deadline
    assert first.dropped == 0  # kept, not dropped: a spill directory was given
    (kept,) = tmp_path.iterdir()
    assert len(kept.read_bytes().splitlines()) == 20
    second = CallRecorder(store, flush_interval_s=0.01, spill_dir=tmp_path)  # store is back
    second.start()
    second.record(call(20))
    assert (await asyncio.wait_for(second.flush(), 10)).is_complete
    await second.aclose()
    assert [c.call_id for c in store.added] == [f"c{i}" for i in range(21)]  # once, in order
    assert list(tmp_path.iterdir()) == []
