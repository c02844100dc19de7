"""``Store``: the face every backend wears, in-process or over HTTP.

All methods are async. Writes that a client may retry are idempotent by a caller-chosen id:
``RolloutCreate.rollout_id``, ``claim_id``, ``SpanCreate.(attempt_id, span_id)``,
``LLMCallCreate.call_id``, ``ResourcesCreate.resources_id``, ``Run.run_id``, ``RunMetrics``'s
``(run_id, step, time)`` and ``ModelVersion``'s ``(run_id, version)``. Status changes follow
``fulmen.store.lifecycle``, which every backend shares.

The face is written once: a ``Store`` is the four roles of ``fulmen.store.roles`` (the
rollout queue, the record log, the run log, the release book) plus what concerns the whole
store (its capabilities, statistics, pruning, closing). Each public method checks its
arguments, takes the backend's lock where it has one and refuses writes to a closed store;
a backend (``MemoryStore``, ``SqlStore``, ``StoreClient``) subclasses ``Store`` and
implements only the work, in the ``_``-prefixed methods. A consumer that needs one role types
its argument with that role.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from fulmen.store.roles.core import Capabilities, ReconcileReport
from fulmen.store.roles.queue import RolloutQueue
from fulmen.store.roles.records import RecordLog
from fulmen.store.roles.releases import ReleaseBook
from fulmen.store.roles.runs import RunLog
from fulmen.store.watchdog import Watchdog

if TYPE_CHECKING:
    from fulmen.types import PruneReport, PruneRequest, StoreStats

__all__ = ["Capabilities", "ReconcileReport", "Store"]


class Store(RolloutQueue, RecordLog, RunLog, ReleaseBook):
    """Durable state of rollouts, attempts, spans, LLM calls, resources, workers and runs."""

    _watchdog: Watchdog | None = None

    @property
    @abstractmethod
    def capabilities(self) -> Capabilities:
        """What this backend can do."""

    async def prune(self, request: PruneRequest) -> PruneReport:
        """Delete finished rollouts that ended before a time, with all their records.

        Queued and running rollouts are never touched. Attempts, spans, LLM calls and rewards
        of each deleted rollout go with it; ``keep_rewarded`` keeps rollouts that have a reward
        and ``dry_run`` only counts.
        """
        async with self._writing:
            return await self._prune(request)

    async def stats(self) -> StoreStats:
        """Count rollouts, attempts, spans, calls, resources and workers."""
        async with self._reading:
            return await self._stats()

    async def aclose(self) -> None:
        """Release connections and background tasks; the store may not be used afterwards.

        Closing twice is a no-op.
        """
        if self.closed:
            return
        self.closed = True
        if self._watchdog is not None:
            await self._watchdog.stop()
        await self._aclose()

    def _watch(self, interval: float | None) -> None:
        """Start a watchdog over this store, stopped when it closes; ``None``: run none.

        A backend that owns its data calls this when it opens (another process's store
        service, reached over HTTP, runs its own).
        """
        if interval is not None:
            self._watchdog = Watchdog(self, interval=interval)
            self._watchdog.start()

    # -- the backend's work ----------------------------------------------------------------------

    @abstractmethod
    async def _prune(self, request: PruneRequest) -> PruneReport: ...

    @abstractmethod
    async def _stats(self) -> StoreStats: ...

    @abstractmethod
    async def _aclose(self) -> None: ...
