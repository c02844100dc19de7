"""Writes call records to the store in batches, off the request path.

``record`` only appends to an in-memory queue (no ``await``, safe in ``finally`` blocks). It
takes a finished ``LLMCallCreate`` or the raw ``Exchange``, which the background task turns
into a record (validation included), so even that work stays off the request path. The task
writes up to ``batch_size`` records per ``add_llm_calls``. A store that is unreachable is
retried with capped, jittered backoff (writes are idempotent by ``call_id``); a batch the store
refuses is split so one bad record does not take its neighbours with it. ``flush`` waits until
everything recorded so far is written; ``aclose`` flushes, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable

from fulmen.errors import FulmenError, GatewayError, StoreUnavailable
from fulmen.gateway.capture import Exchange, build_call
from fulmen.store.base import Store
from fulmen.types import LLMCallCreate

__all__ = ["CallRecorder"]

_log = logging.getLogger(__name__)
_MAX_BACKOFF_S = 2.0


class CallRecorder:
    """Batching writer of ``LLMCallCreate`` records to a ``Store``.

    Args:
        store: where the records go (any backend).
        batch_size: most records per write.
        flush_interval_s: longest time a record waits for its batch to fill.
        max_pending: records kept while the store is unreachable; the oldest are dropped beyond.
        close_timeout_s: how long ``aclose`` keeps retrying an unreachable store.
    """

    def __init__(
        self,
        store: Store,
        *,
        batch_size: int = 256,
        flush_interval_s: float = 0.05,
        max_pending: int = 100_000,
        close_timeout_s: float = 10.0,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._store = store
        self._batch_size = batch_size
        self._interval = flush_interval_s
        self._max_pending = max_pending
        self._close_timeout_s = close_timeout_s
        self._jitter = jitter
        self._pending: deque[LLMCallCreate | Exchange] = deque()
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self.recorded = 0
        self.stored = 0
        self.dropped = 0

    def start(self) -> None:
        """Start the background writer (call from inside the event loop that serves requests)."""
        if self._closed or self._task is not None:
            raise GatewayError("a CallRecorder starts once and cannot be reused after aclose()")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="call-recorder")

    def record(self, call: LLMCallCreate | Exchange) -> None:
        """Queue ``call`` for writing; never blocks and never raises on a full queue."""
        if self._closed:
            _log.error("call %s recorded after the recorder closed; dropped", call.call_id)
            self.dropped += 1
            return
        self._pending.append(call)
        self.recorded += 1
        if len(self._pending) > self._max_pending:
            lost = self._pending.popleft()
            self.dropped += 1
            _log.error("call queue full (%d): dropped call %s", self._max_pending, lost.call_id)
        if len(self._pending) >= self._batch_size:
            self._wakeup.set()

    async def flush(self) -> None:
        """Wait until every record queued before this call is written (or dropped)."""
        target = self.recorded
        self._wakeup.set()
        async with self._progress:
            await self._progress.wait_for(lambda: self.stored + self.dropped >= target)

    async def aclose(self) -> None:
        """Write everything still queued, then stop the writer; the recorder is done after."""
        if self._closed:
            return
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        elif self._pending:
            await self._drain()
        self._closed = True

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=self._interval)
            self._wakeup.clear()
            await self._drain()
            if self._closing and not self._pending:
                return

    async def _drain(self) -> None:
        deadline: float | None = None
        while self._pending:
            if self._closing and deadline is None:
                deadline = asyncio.get_running_loop().time() + self._close_timeout_s
            size = min(self._batch_size, len(self._pending))
            items = [self._pending.popleft() for _ in range(size)]
            batch = [call for call in map(_built, items) if call is not None]
            refused = await self._write_with_retries(batch, deadline) if batch else 0
            unbuilt = size - len(batch)
            await self._advance(stored=len(batch) - refused, dropped=refused + unbuilt)

    async def _write_with_retries(self, batch: list[LLMCallCreate], deadline: float | None) -> int:
        """Write ``batch``; returns how many records were dropped."""
        delay = 0.05
        while True:
            try:
                return await self._write(batch)
            except (StoreUnavailable, OSError, TimeoutError) as exc:
                loop = asyncio.get_running_loop()
                if deadline is not None and loop.time() + delay > deadline:
                    _log.error("store unreachable at close: dropped %d call records", len(batch))
                    return len(batch)
                _log.warning("store write failed (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay * (0.5 + self._jitter()))
                delay = min(delay * 2, _MAX_BACKOFF_S)
            except Exception:
                # A bug, not an outage: retrying would loop forever, so drop and say so.
                _log.exception("store write raised; dropped %d call records", len(batch))
                return len(batch)

    async def _write(self, batch: list[LLMCallCreate]) -> int:
        try:
            await self._store.add_llm_calls(batch)
            return 0
        except StoreUnavailable:
            raise
        except FulmenError as exc:
            if len(batch) == 1:
                _log.error("store refused call %s: %s", batch[0].call_id, exc)
                return 1
        refused = 0
        for call in batch:  # isolate the record(s) the store refuses
            refused += await self._write([call])
        return refused

    async def _advance(self, *, stored: int, dropped: int) -> None:
        async with self._progress:
            self.stored += stored
            self.dropped += dropped
            self._progress.notify_all()


def _built(item: LLMCallCreate | Exchange) -> LLMCallCreate | None:
    if isinstance(item, LLMCallCreate):
        return item
    try:
        return build_call(item)
    except Exception:
        _log.exception("could not build the record of call %s; dropped", item.call_id)
        return None
