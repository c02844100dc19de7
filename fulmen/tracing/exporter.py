"""Sending spans to the store: conversion from OpenTelemetry spans and a batching exporter.

``StoreSpanExporter.export`` only appends the ended span to a buffer, so the agent's code
never waits for the store nor pays for the conversion. A sender task on the runner's event
loop converts and writes the buffer in batches (when it holds ``batch_size`` spans or every
``interval`` seconds) and retries through store outages; ``flush()`` at the end of a rollout
waits until everything emitted so far is stored, so no span is lost when an attempt is reported
finished. The queue is a ``SpillQueue``: while the store is away, spans beyond
``max_in_memory`` go to a local spill file and are replayed in order when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from fulmen.errors import FulmenError
from fulmen.store.spill import SpillQueue
from fulmen.tracing import semconv
from fulmen.tracing.backoff import Backoff, retry_call
from fulmen.tracing.tasks import cancel_and_wait
from fulmen.types import SpanCreate, SpanEvent, SpanStatus, SpanStatusCode

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from fulmen.store.roles import RecordLog

__all__ = ["StoreSpanExporter", "span_to_create"]

logger = logging.getLogger(__name__)

_STATUS = {
    StatusCode.UNSET: SpanStatusCode.UNSET,
    StatusCode.OK: SpanStatusCode.OK,
    StatusCode.ERROR: SpanStatusCode.ERROR,
}


_MAX_CLOSED_ATTEMPTS = 10_000


def _attempt_of(span: ReadableSpan | SpanCreate) -> str | None:
    if isinstance(span, SpanCreate):
        return span.attempt_id
    value = (span.attributes or {}).get(semconv.ATTEMPT_ID)
    return value if isinstance(value, str) else None


def _json_attributes(attributes: Any) -> dict[str, Any]:
    # OTel attribute values are primitives or tuples of them; JSON wants lists.
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (attributes or {}).items()}


def span_to_create(span: ReadableSpan) -> SpanCreate | None:
    """Convert an ended OTel span to a ``SpanCreate``; ``None`` if it belongs to no rollout."""
    attributes = _json_attributes(span.attributes)
    rollout_id = attributes.get(semconv.ROLLOUT_ID)
    attempt_id = attributes.get(semconv.ATTEMPT_ID)
    context = span.context
    if not isinstance(rollout_id, str) or not isinstance(attempt_id, str) or context is None:
        return None
    events = [
        SpanEvent(
            name=e.name, timestamp=e.timestamp / 1e9, attributes=_json_attributes(e.attributes)
        )
        for e in span.events
    ]
    return SpanCreate(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id=format(context.trace_id, "032x"),
        span_id=format(context.span_id, "016x"),
        parent_id=format(span.parent.span_id, "016x") if span.parent is not None else None,
        name=span.name,
        attributes=attributes,
        events=events,
        status=SpanStatus(code=_STATUS[span.status.status_code], message=span.status.description),
        start_time=(span.start_time or 0) / 1e9,
        end_time=span.end_time / 1e9 if span.end_time is not None else None,
    )


class StoreSpanExporter(SpanExporter):
    """An OTel ``SpanExporter`` that writes spans to a ``Store`` in batches, off the hot path.

    ``export`` may be called from any thread. Call ``start()`` on the event loop that owns the
    store before spans arrive, ``await flush()`` to wait until all spans so far are stored, and
    ``await aclose()`` at the end. Spans outside any rollout scope are counted in ``dropped``.

    Args:
        store: where spans go.
        batch_size: spans per ``add_spans``.
        interval: longest wait before a partial batch is written.
        backoff: retry policy through store outages (default: retry forever).
        max_in_memory: spans held in memory; more are spilled to a file in ``spill_dir``.
        spill_dir: where the spill file goes (default: a new temporary directory).
    """

    def __init__(
        self,
        store: RecordLog,
        *,
        batch_size: int = 256,
        interval: float = 0.2,
        backoff: Backoff | None = None,
        max_in_memory: int = 10_000,
        spill_dir: Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._store = store
        self._batch_size = batch_size
        self._interval = interval
        self._backoff = backoff or Backoff(deadline=None)
        # OTel spans are converted when sent (or when spilled), off the agent's hot path.
        self._queue: SpillQueue[ReadableSpan | SpanCreate, SpanCreate] = SpillQueue(
            encode=self._encode,
            decode=SpanCreate.model_validate_json,
            max_in_memory=max_in_memory,
            directory=spill_dir,
            name="spans",
        )
        self._send_lock: asyncio.Lock | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._dropped = 0
        # attempts whose agent was stopped: their later spans are ignored (bounded, oldest go)
        self._closed_attempts: dict[str, None] = {}
        self._closed_lock = threading.Lock()
        self.rejected = 0
        self.sent = 0

    # -- the OTel side (any thread) -------------------------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Queue ``spans`` for the store; never waits for the store."""
        self.submit(spans)
        return SpanExportResult.SUCCESS

    def submit(self, spans: Sequence[ReadableSpan | SpanCreate]) -> None:
        """Queue ended OTel spans or already converted ones (e.g. from a worker process)."""
        if not spans:
            return
        if self._closed_attempts:
            spans = [s for s in spans if _attempt_of(s) not in self._closed_attempts]
            if not spans:
                return
        before = len(self._queue)
        self._queue.append(spans)
        # wake the sender once per filled batch, not once per span
        crossed = before < self._batch_size <= before + len(spans)
        if crossed and self._loop is not None and self._wake is not None:
            if threading.get_ident() == self._loop_thread:
                self._wake.set()
            else:
                self._loop.call_soon_threadsafe(self._wake.set)

    def close_attempt(self, attempt_id: str) -> None:
        """Ignore every span of ``attempt_id`` submitted from now on (its agent was stopped)."""
        with self._closed_lock:
            self._closed_attempts[attempt_id] = None
            if len(self._closed_attempts) > _MAX_CLOSED_ATTEMPTS:
                del self._closed_attempts[next(iter(self._closed_attempts))]

    def shutdown(self) -> None:
        """Part of the OTel interface; the real shutdown is ``aclose()``."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Part of the OTel interface; it cannot block the event loop, so use ``flush()``."""
        del timeout_millis
        return True

    # -- the store side (the event loop) --------------------------------------------------------

    def start(self) -> None:
        """Start the sender task on the running event loop."""
        if self._task is not None or self._closed:
            raise RuntimeError("a StoreSpanExporter can be started only once")
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._send_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        # Spans a runner that died left in the spill directory go out first.
        self._queue.adopt_orphans()
        self._task = self._loop.create_task(self._run(), name="fulmen-span-sender")

    @property
    def pending(self) -> int:
        """How many spans are queued and not yet stored (in memory or spilled)."""
        return len(self._queue)

    @property
    def dropped(self) -> int:
        """Spans that belonged to no rollout and were not stored."""
        return self._dropped + self._queue.unencodable

    @property
    def queue(self) -> SpillQueue[ReadableSpan | SpanCreate, SpanCreate]:
        """The queue of spans not yet stored (its counters show what was spilled)."""
        return self._queue

    async def flush(self) -> None:
        """Store every span queued so far (waiting for a batch already in flight)."""
        if self._send_lock is None:
            raise RuntimeError("the exporter was not started")
        async with self._send_lock:
            while True:
                taken = self._queue.take(self._batch_size)
                if not len(taken):
                    return
                batch = self._convert(taken.memory) + taken.records
                try:
                    if batch:
                        await self._send(batch)
                except BaseException:
                    self._queue.requeue(taken)  # a later flush sends them, in order
                    raise
                self._queue.ack(taken)

    def _encode(self, item: ReadableSpan | SpanCreate) -> bytes | None:
        converted = item if isinstance(item, SpanCreate) else span_to_create(item)
        if converted is None:
            return None  # outside any rollout: counted by the queue, never stored
        return converted.model_dump_json().encode()

    def _convert(self, items: list[ReadableSpan | SpanCreate]) -> list[SpanCreate]:
        out: list[SpanCreate] = []
        for item in items:
            converted = item if isinstance(item, SpanCreate) else span_to_create(item)
            if converted is None:
                self._dropped += 1  # only the event loop touches ``_dropped``
            else:
                out.append(converted)
        return out

    async def abandon(self) -> None:
        """Give up sending because the store stayed away at exit.

        With a spill directory, what is queued stays in the spill file for the next exporter
        that uses the directory (``SpillQueue.adopt_orphans``).
        """
        self._closed = True
        if self._task is not None:
            await cancel_and_wait(self._task)  # a batch in flight goes back to the queue
        self._queue.close()

    async def aclose(self) -> None:
        """Stop the sender task and store what is still queued."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            await cancel_and_wait(self._task)
            await self.flush()
        self._queue.close()

    async def _run(self) -> None:
        wake = self._wake
        if wake is None:
            raise RuntimeError("the exporter was not started")
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self._interval)
            wake.clear()
            self._queue.persist()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the sender alive; the spans are re-queued by _send
                logger.exception("sending spans failed")

    async def _send(self, batch: list[SpanCreate]) -> None:
        try:
            await retry_call(
                lambda: self._store.add_spans(batch), backoff=self._backoff, what="add_spans"
            )
        except FulmenError as exc:
            # The store refused the batch (e.g. an unknown attempt): store the good spans one
            # by one so one bad span does not cost its neighbours.
            logger.warning("store refused a batch of %d spans: %s", len(batch), exc.message)
            for span in batch:
                try:
                    await retry_call(
                        lambda s=span: self._store.add_spans([s]),
                        backoff=self._backoff,
                        what="add_spans",
                    )
                except FulmenError as single:
                    self.rejected += 1
                    logger.warning("dropped span %s: %s", span.span_id, single.message)
                else:
                    self.sent += 1
        else:
            self.sent += len(batch)
