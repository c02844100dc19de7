"""MemoryStore: the reference backend, holding everything in Python objects.

It defines the semantics the SQL backends and the HTTP service must match (the conformance suite
runs against all of them). It is not durable and lives in one process; use it for tests and dry
runs.

The class is the ``Store`` face: it takes the one asyncio lock that serialises every change,
checks arguments and that the store is open, and hands each operation to the part that holds
its data: ``MemoryQueue`` (rollouts, attempts, workers and their lifecycle), ``MemoryRecords``
(spans, LLM calls, rewards), ``MemoryResources`` and ``MemoryRuns``. The lifecycle decisions
themselves come from ``fulmen.store.lifecycle``, shared with the SQL backends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.errors import InvalidRequest
from fulmen.store.arguments import check_arguments
from fulmen.store.base import Capabilities, ReconcileReport
from fulmen.store.memory_queue import MemoryQueue
from fulmen.store.memory_records import MemoryRecords
from fulmen.store.memory_resources import MemoryResources
from fulmen.store.memory_runs import MemoryRuns
from fulmen.store.releases import (
    check_release_name,
    decided_release,
    missing_release,
    new_release,
)
from fulmen.store.rewards import is_prunable
from fulmen.store.runs import (
    MAX_METRICS_LIMIT,
    MAX_RUNS_LIMIT,
    check_run_id,
    check_run_paging,
    check_run_update,
    store_time,
)
from fulmen.store.watchdog import Watchdog
from fulmen.types import (
    UNSET,
    Attempt,
    AttemptStatus,
    Claim,
    LLMCall,
    LLMCallCreate,
    Mode,
    ModelVersion,
    Page,
    PruneReport,
    PruneRequest,
    Resources,
    ResourcesCreate,
    Reward,
    RewardCreate,
    Rollout,
    RolloutCreate,
    RolloutQuery,
    RolloutStatus,
    Run,
    RunMetrics,
    RunStatus,
    Span,
    SpanCreate,
    StoreStats,
    Unset,
    Worker,
)
from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision
from fulmen.types.sessions import SessionCreate

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["MemoryStore"]


class MemoryStore:
    """A ``Store`` held in memory; one asyncio lock serialises every change."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition(self._lock)
        self._queue = MemoryQueue(self._changed.notify_all)
        self._records = MemoryRecords(self._queue)
        self._resources = MemoryResources()
        self._runs = MemoryRuns()
        self._releases: dict[str, Release] = {}
        self._closed = False
        self._watchdog: Watchdog | None = None

    @classmethod
    async def connect(
        cls, url: str = "memory://", *, watchdog_interval: float | None = 1.0
    ) -> MemoryStore:
        """Open a new, empty store with its watchdog; every call gives a separate store."""
        del url
        store = cls()
        if watchdog_interval is not None:
            store._watchdog = Watchdog(store, interval=watchdog_interval)
            store._watchdog.start()
        return store

    @property
    def capabilities(self) -> Capabilities:
        """Not durable, not shared between processes."""
        return Capabilities(is_durable=False, is_shared=False)

    # -- rollouts -------------------------------------------------------------------------------

    async def enqueue(self, rollouts: Sequence[RolloutCreate]) -> list[Rollout]:
        """See ``Store.enqueue``."""
        async with self._lock:
            self._check_open()
            return self._queue.enqueue(rollouts, self._resources.latest_version)

    async def claim(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        modes: Sequence[Mode] | None = None,
        claim_id: str | None = None,
    ) -> list[Claim]:
        """See ``Store.claim``."""
        if limit < 1:
            raise InvalidRequest(f"limit must be at least 1, got {limit}")
        check_arguments(worker_id=worker_id, claim_id=claim_id)
        async with self._lock:
            self._check_open()
            return self._queue.claim(worker_id, limit, modes, claim_id)

    async def update_rollout(
        self,
        rollout_id: str,
        *,
        status: RolloutStatus | Unset = UNSET,
        metadata: dict[str, JsonValue] | Unset = UNSET,
    ) -> Rollout:
        """See ``Store.update_rollout``."""
        if metadata is not UNSET:
            check_arguments(metadata=metadata)
        async with self._lock:
            self._check_open()
            return self._queue.update_rollout(rollout_id, status, metadata)

    # -- attempts and workers -------------------------------------------------------------------

    async def update_attempt(
        self,
        attempt_id: str,
        *,
        status: AttemptStatus | Unset = UNSET,
        error: str | Unset | None = UNSET,
    ) -> Attempt:
        """See ``Store.update_attempt``."""
        if error is not UNSET:
            check_arguments(error=error)
        async with self._lock:
            self._check_open()
            return self._queue.update_attempt(attempt_id, status, error)

    async def heartbeat(
        self,
        worker_id: str,
        *,
        attempt_ids: Sequence[str] = (),
        metadata: dict[str, JsonValue] | None = None,
    ) -> Worker:
        """See ``Store.heartbeat``."""
        check_arguments(worker_id=worker_id, attempt_ids=attempt_ids, metadata=metadata)
        async with self._lock:
            self._check_open()
            return self._queue.heartbeat(worker_id, attempt_ids, metadata)

    async def list_workers(self) -> list[Worker]:
        """See ``Store.list_workers``."""
        async with self._lock:
            return self._queue.list_workers()

    # -- spans and LLM calls --------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """See ``Store.add_spans``."""
        async with self._lock:
            self._check_open()
            return self._records.add_spans(spans)

    async def add_llm_calls(self, calls: Sequence[LLMCallCreate]) -> list[LLMCall]:
        """See ``Store.add_llm_calls``."""
        async with self._lock:
            self._check_open()
            return self._records.add_llm_calls(calls)

    async def query_spans(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[Span]:
        """See ``Store.query_spans``."""
        async with self._lock:
            return self._records.query_spans(rollout_id, attempt_id, after_sequence, limit)

    async def query_llm_calls(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[LLMCall]:
        """See ``Store.query_llm_calls``."""
        async with self._lock:
            return self._records.query_llm_calls(rollout_id, attempt_id, after_sequence, limit)

    # -- rewards, sessions and retention --------------------------------------------------------

    async def add_reward(self, reward: RewardCreate) -> Reward:
        """See ``Store.add_reward``."""
        async with self._lock:
            self._check_open()
            return self._records.add_reward(reward)

    async def list_rewards(self, rollout_id: str) -> list[Reward]:
        """See ``Store.list_rewards``."""
        async with self._lock:
            return self._records.list_rewards(rollout_id)

    async def record_session(self, session: SessionCreate) -> Claim:
        """See ``Store.record_session``."""
        async with self._lock:
            self._check_open()
            return self._queue.record_session(session)

    async def prune(self, request: PruneRequest) -> PruneReport:
        """See ``Store.prune``."""
        async with self._lock:
            self._check_open()
            doomed = [
                r.rollout_id
                for r in self._queue.rollouts()
                if is_prunable(r, request.ended_before)
                and (request.modes is None or r.mode in request.modes)
                and not (request.keep_rewarded and self._records.is_rewarded(r.rollout_id))
            ]
            counts = [self._records.counts(r) for r in doomed]
            report = PruneReport(
                dry_run=request.dry_run,
                rollouts=len(doomed),
                attempts=sum(self._queue.attempt_count(r) for r in doomed),
                spans=sum(spans for spans, _, _ in counts),
                llm_calls=sum(calls for _, calls, _ in counts),
                rewards=sum(rewards for _, _, rewards in counts),
            )
            if not request.dry_run:
                for rollout_id in doomed:
                    self._queue.delete(rollout_id)
                    self._records.delete(rollout_id)
            return report

    # -- reads ----------------------------------------------------------------------------------

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """See ``Store.get_rollout``."""
        async with self._lock:
            return self._queue.get_rollout(rollout_id)

    async def get_attempt(self, attempt_id: str) -> Attempt:
        """See ``Store.get_attempt``."""
        async with self._lock:
            return self._queue.get_attempt(attempt_id)

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """See ``Store.list_attempts``."""
        async with self._lock:
            return self._queue.list_attempts(rollout_id)

    async def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """See ``Store.query_rollouts``."""
        async with self._lock:
            return self._queue.query_rollouts(query)

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], *, timeout: float
    ) -> list[Rollout]:
        """See ``Store.wait_for_rollouts``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        async with self._changed:
            while True:
                rollouts = [self._queue.get_rollout(r) for r in rollout_ids]
                remaining = deadline - loop.time()
                if all(r.is_terminal for r in rollouts) or remaining <= 0:
                    return [r for r in rollouts if r.is_terminal]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    # -- resources ------------------------------------------------------------------------------

    async def add_resources(self, resources: ResourcesCreate) -> Resources:
        """See ``Store.add_resources``."""
        async with self._lock:
            self._check_open()
            return self._resources.add(resources)

    async def get_resources(self, version: int) -> Resources:
        """See ``Store.get_resources``."""
        async with self._lock:
            return self._resources.get(version)

    async def latest_resources(self) -> Resources | None:
        """See ``Store.latest_resources``."""
        async with self._lock:
            return self._resources.latest()

    # -- watchdog and statistics ----------------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """See ``Store.reconcile``."""
        async with self._lock:
            return self._queue.expire()

    # -- runs and model versions ----------------------------------------------------------------

    async def start_run(self, run: Run) -> Run:
        """See ``Store.start_run``."""
        async with self._lock:
            self._check_open()
            return self._runs.start(run)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | Unset = UNSET,
        ended_at: float | Unset | None = UNSET,
    ) -> Run:
        """See ``Store.update_run``."""
        status, ended_at = check_run_update(run_id, status, ended_at)
        async with self._lock:
            self._check_open()
            return self._runs.update(run_id, status, ended_at)

    async def add_run_metrics(self, metrics: Sequence[RunMetrics]) -> None:
        """See ``Store.add_run_metrics``."""
        async with self._lock:
            self._check_open()
            self._runs.add_metrics(metrics)

    async def list_runs(self, *, limit: int = 100, offset: int = 0) -> Page[Run]:
        """See ``Store.list_runs``."""
        check_run_paging(limit=limit, maximum=MAX_RUNS_LIMIT, offset=offset)
        async with self._lock:
            return self._runs.list(limit, offset)

    async def get_run(self, run_id: str) -> Run:
        """See ``Store.get_run``."""
        check_run_id(run_id)
        async with self._lock:
            return self._runs.get(run_id)

    async def query_run_metrics(
        self, run_id: str, *, after_step: int | None = None, limit: int = 1000
    ) -> Page[RunMetrics]:
        """See ``Store.query_run_metrics``."""
        check_run_id(run_id)
        check_run_paging(limit=limit, maximum=MAX_METRICS_LIMIT, after_step=after_step)
        async with self._lock:
            return self._runs.query_metrics(run_id, after_step, limit)

    async def add_model_version(self, version: ModelVersion) -> ModelVersion:
        """See ``Store.add_model_version``."""
        async with self._lock:
            self._check_open()
            return self._runs.add_version(version)

    async def list_model_versions(self, run_id: str | None = None) -> list[ModelVersion]:
        """See ``Store.list_model_versions``."""
        check_run_id(run_id)
        async with self._lock:
            return self._runs.list_versions(run_id)

    # -- releases --------------------------------------------------------------------------------

    async def put_release(self, release: ReleaseCreate) -> Release:
        """See ``Store.put_release``."""
        async with self._lock:
            self._check_open()
            stored = self._releases.get(release.name)
            self._releases[release.name] = put = new_release(release, stored, store_time())
            return put

    async def get_release(self, name: str) -> Release:
        """See ``Store.get_release``."""
        check_release_name(name)
        async with self._lock:
            try:
                return self._releases[name]
            except KeyError:
                raise missing_release(name) from None

    async def list_releases(self) -> list[Release]:
        """See ``Store.list_releases``."""
        async with self._lock:
            return sorted(self._releases.values(), key=lambda r: (-r.created_at, r.name))

    async def decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        """See ``Store.decide_release``."""
        check_release_name(name)
        async with self._lock:
            self._check_open()
            stored = self._releases.get(name)
            if stored is None:
                raise missing_release(name)
            self._releases[name] = decided = decided_release(stored, decision, store_time())
            return decided

    async def stats(self) -> StoreStats:
        """See ``Store.stats``."""
        async with self._lock:
            rollouts, attempts, workers = self._queue.status_counts()
            spans, llm_calls = self._records.totals()
            return StoreStats(
                rollouts={s: rollouts.get(s, 0) for s in RolloutStatus},
                attempts={s: attempts.get(s, 0) for s in AttemptStatus},
                spans=spans,
                llm_calls=llm_calls,
                resources_versions=self._resources.latest_version,
                workers=workers,
            )

    async def aclose(self) -> None:
        """See ``Store.aclose``."""
        if self._watchdog is not None:
            await self._watchdog.stop()
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidRequest("the store is closed")
