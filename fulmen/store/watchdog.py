"""The watchdog: a background reconcile loop that ends timed-out and lost attempts.

Timeouts must fire even when nobody calls the store, so every process that owns a backend
(the embedded store, ``fulmen store serve``) runs one. Running several against one PostgreSQL
database is safe: ``Store.reconcile`` locks the rows it changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fulmen.store.roles.queue import RolloutQueue

__all__ = ["Watchdog"]

logger = logging.getLogger(__name__)


class Watchdog:
    """Calls ``store.reconcile()`` every ``interval`` seconds until stopped.

    Use it as an async context manager, or call ``start()`` and ``await stop()``. A watchdog
    cannot be restarted once stopped.
    """

    def __init__(self, store: RolloutQueue, *, interval: float = 1.0) -> None:
        if interval <= 0:
            raise ValueError(f"watchdog interval must be positive, got {interval}")
        self._store = store
        self._interval = interval
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop on the running event loop."""
        if self._task is not None or self._stop.is_set():
            raise RuntimeError("a Watchdog can be started only once")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="fulmen-watchdog")

    async def stop(self) -> None:
        """Stop the loop and wait for the current pass to finish."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> Watchdog:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                report = await self._store.reconcile()
            except Exception:  # a failed pass must not end the loop; the next one retries
                logger.exception("watchdog pass failed")
            else:
                if report.timed_out or report.lost:
                    logger.info(
                        "watchdog: %d timed out, %d lost, %d re-queued, %d failed",
                        len(report.timed_out),
                        len(report.lost),
                        len(report.requeued),
                        len(report.failed),
                    )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval)
