"""Writes call records to the store in batches, off the request path.

``record`` only appends to a queue (no ``await``, safe in ``finally`` blocks). It takes a
finished ``LLMCallCreate`` or the raw ``Exchange``, which the background task turns into a
record (validation included), so even that work stays off the request path. The task writes up
to ``batch_size`` records per ``add_llm_calls``. A store that is unreachable or answers 5xx is
retried with capped, jittered backoff (writes are idempotent by ``call_id``); meanwhile the
queue (a ``SpillQueue``) keeps ``max_pending`` records in memory and spills the rest to a local
file that is replayed, in order, when the store is back. A batch the store refuses is split so
one bad record does not take its neighbours with it. ``flush`` waits until everything recorded
so far is written and says what failed; ``aclose`` flushes, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fulmen.errors import FulmenError, GatewayError
from fulmen.gateway.capture import Exchange, build_call
from fulmen.store.roles import RecordLog
from fulmen.store.spill import SpillQueue
from fulmen.types import LLMCallCreate

__all__ = ["CallRecorder", "FlushOutcome"]

_log = logging.getLogger(__name__)
_MAX_BACKOFF_S = 2.0


@dataclass(frozen=True)
class FlushOutcome:
    """What happened to the records queued before a ``flush``.

    Attributes:
        refused: how many records the store refused (or could not be built) since the
            previous flush that reported refusals; lost.
        pending: how many were still not written when the flush gave up waiting.
        error: the last error the store gave, if any.
    """

    refused: int = 0
    pending: int = 0
    error: str | None = None

    @property
    def is_complete(self) -> bool:
        """Whether every record queued before the flush is now in the store."""
        return self.refused == 0 and self.pending == 0


class CallRecorder:
    """Batching writer of ``LLMCallCreate`` records to a ``Store``.

    Args:
        store: where the records go (any backend).
        batch_size: most records per write.
        flush_interval_s: longest time a record waits for its batch to fill.
        max_pending: records held in memory; while the store is away, more are spilled to a
            file in ``spill_dir`` and replayed when it is back.
        close_timeout_s: how long ``aclose`` keeps retrying an unreachable store; then what
            is unsent stays in ``spill_dir`` (replayed by the next recorder started on it) or,
            without one, is dropped and counted.
        spill_dir: where the spill file goes (default: a new temporary directory).
        redact: applied to every record built here, before it is written or spilled (see
            ``fulmen.gateway.redaction``); records replayed from a spill file were redacted
            before they were spilled.
    """

    def __init__(
        self,
        store: RecordLog,
        *,
        batch_size: int = 256,
        flush_interval_s: float = 0.05,
        max_pending: int = 100_000,
        close_timeout_s: float = 10.0,
        spill_dir: Path | None = None,
        jitter: Callable[[], float] = random.random,
        redact: Callable[[LLMCallCreate], LLMCallCreate] | None = None,
    ) -> None:
        self._store = store
        self._batch_size = batch_size
        self._interval = flush_interval_s
        self._close_timeout_s = close_timeout_s
        self._jitter = jitter
        self._redact = redact
        self._queue: SpillQueue[LLMCallCreate | Exchange, LLMCallCreate] = SpillQueue(
            encode=self._encode,
            decode=LLMCallCreate.model_validate_json,
            max_in_memory=max_pending,
            directory=spill_dir,
            name="llm-calls",
        )
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._gave_up = False
        self._keeps_unsent = spill_dir is not None
        self._last_error: str | None = None
        self._counted_unencodable = 0
        self._dropped_reported = 0  # refusals a flush has already reported
        self.recorded = 0
        self.stored = 0
        self.dropped = 0

    @property
    def queue(self) -> SpillQueue[LLMCallCreate | Exchange, LLMCallCreate]:
        """The records not yet written (its counters show what was spilled)."""
        return self._queue

    def start(self) -> None:
        """Start the background writer (call from inside the event loop that serves requests)."""
        if self._closed or self._task is not None:
            raise GatewayError("a CallRecorder starts once and cannot be reused after aclose()")
        # Records a gateway that died (or closed while the store was away) left go out first.
        self._queue.adopt_orphans()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="call-recorder")

    def record(self, call: LLMCallCreate | Exchange) -> None:
        """Queue ``call`` for writing; never blocks and never raises on a full queue."""
        if self._closed:
            _log.error("call %s recorded after the recorder closed; dropped", call.call_id)
            self.dropped += 1
            self._last_error = "recorded after the gateway's recorder closed"
            return
        self._queue.append([call])
        self.recorded += 1
        if len(self._queue) >= self._batch_size:
            self._wakeup.set()

    async def flush(self, timeout: float | None = None) -> FlushOutcome:
        """Wait until every record queued before this call is written or refused.

        Returns how many records were refused since the previous flush reported refusals
        (a record the writer refused before this call counts too: the writer may get to it
        first) and how many were still pending when ``timeout`` seconds passed (the store
        unreachable); both zero means every record so far is stored. Each refusal is reported
        by one flush.
        """
        target = self.recorded
        self._wakeup.set()
        pending = 0
        async with self._progress:
            try:
                await asyncio.wait_for(
                    self._progress.wait_for(lambda: self.stored + self.dropped >= target),
                    timeout,
                )
            except TimeoutError:
                pending = target - self.stored - self.dropped
        refused = self.dropped - self._dropped_reported
        self._dropped_reported = self.dropped
        error = self._last_error if refused or pending else None
        return FlushOutcome(refused=refused, pending=max(pending, 0), error=error)

    async def aclose(self) -> None:
        """Write everything still queued, then stop the writer; the recorder is done after."""
        if self._closed:
            return
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        elif len(self._queue):
            await self._drain()
        self._queue.close()
        self._closed = True

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=self._interval)
            self._wakeup.clear()
            self._queue.persist()
            await self._drain()
            if self._closing and (self._gave_up or not len(self._queue)):
                return

    async def _drain(self) -> None:
        deadline: float | None = None
        while True:
            if self._closing and deadline is None:
                deadline = asyncio.get_running_loop().time() + self._close_timeout_s
            unencodable = self._queue.unencodable - self._counted_unencodable
            if unencodable:  # spilled records that could not be built: lost, and counted
                self._counted_unencodable += unencodable
                self._last_error = f"{unencodable} call records could not be built"
                await self._advance(stored=0, dropped=unencodable)
            taken = self._queue.take(self._batch_size)
            if not len(taken):
                return
            built = [call for call in map(self._built, taken.memory) if call is not None]
            unbuilt = len(taken.memory) - len(built)
            batch = built + taken.records
            try:
                refused = await self._write_with_retries(batch, deadline) if batch else 0
            except _KeptForLater:
                self._queue.requeue(taken)
                self._gave_up = True  # aclose leaves the rest in the spill file
                _log.error(
                    "store unreachable at close: %d call records kept in %s for the next gateway",
                    len(self._queue),
                    self._queue.path or "the spill directory",
                )
                return
            except BaseException:
                self._queue.requeue(taken)
                raise
            self._queue.ack(taken)
            if unbuilt:
                self._last_error = f"{unbuilt} call records could not be built"
            await self._advance(stored=len(batch) - refused, dropped=refused + unbuilt)

    async def _write_with_retries(self, batch: list[LLMCallCreate], deadline: float | None) -> int:
        """Write ``batch``; returns how many records were dropped."""
        delay = 0.05
        while True:
            try:
                return await self._write(batch)
            except Exception as exc:
                if not _is_outage(exc):
                    # A bug, not an outage: retrying would loop forever, so drop and say so.
                    _log.exception("store write raised; dropped %d call records", len(batch))
                    self._last_error = f"{type(exc).__name__}: {exc}"
                    return len(batch)
                self._last_error = f"store unreachable: {exc}"
                loop = asyncio.get_running_loop()
                if deadline is not None and loop.time() + delay > deadline:
                    if self._keeps_unsent:
                        raise _KeptForLater from exc
                    _log.error("store unreachable at close: dropped %d call records", len(batch))
                    return len(batch)
                _log.warning("store write failed (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay * (0.5 + self._jitter()))
                delay = min(delay * 2, _MAX_BACKOFF_S)

    async def _write(self, batch: list[LLMCallCreate]) -> int:
        try:
            await self._store.add_llm_calls(batch)
            return 0
        except FulmenError as exc:
            if _is_outage(exc):
                raise
            if len(batch) == 1:
                _log.error("store refused call %s: %s", batch[0].call_id, exc)
                self._last_error = f"store refused call {batch[0].call_id}: {exc.message}"
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

    def _encode(self, item: LLMCallCreate | Exchange) -> bytes | None:
        call = self._built(item)
        return call.model_dump_json().encode() if call is not None else None

    def _built(self, item: LLMCallCreate | Exchange) -> LLMCallCreate | None:
        try:
            call = item if isinstance(item, LLMCallCreate) else build_call(item)
            return self._redact(call) if self._redact is not None else call
        except Exception:
            _log.exception("could not build the record of call %s; dropped", item.call_id)
            return None


class _KeptForLater(Exception):
    """The store stayed away until the close deadline; unsent records stay in the spill file."""


def _is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the store is away (unreachable or 5xx), not that it refused."""
    if isinstance(exc, FulmenError):
        return exc.http_status >= 500
    return isinstance(exc, (OSError, TimeoutError))
