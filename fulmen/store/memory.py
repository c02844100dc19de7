"""MemoryStore: the reference backend, holding everything in Python objects.

It defines the semantics the SQL backends and the HTTP service must match (the conformance suite
runs against all of them). It is not durable and lives in one process; use it for tests and dry
runs.

The face (``fulmen.store.base.Store``) checks arguments, refuses writes to a closed store and
takes this backend's one asyncio lock, which serialises every operation; each work method here
hands the operation to the part that holds its data: ``MemoryQueue`` (rollouts, attempts,
workers and their lifecycle), ``MemoryRecords`` (spans, LLM calls, rewards),
``MemoryResources`` and ``MemoryRuns``. The lifecycle decisions themselves come from
``fulmen.store.lifecycle``, shared with the SQL backends.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from fulmen.store.base import Capabilities, ReconcileReport, Store
from fulmen.store.memory_queue import MemoryQueue
from fulmen.store.memory_records import MemoryRecords
from fulmen.store.memory_resources import MemoryResources
from fulmen.store.memory_runs import MemoryRuns
from fulmen.store.releases import decided_release, missing_release, new_release
from fulmen.store.rewards import is_prunable
from fulmen.store.runs import store_time
from fulmen.types import AttemptStatus, PruneReport, RolloutStatus, StoreStats

if TYPE_CHECKING:
    from pydantic import JsonValue

    from fulmen.types import (
        Attempt,
        Claim,
        LLMCall,
        LLMCallCreate,
        Mode,
        ModelVersion,
        Page,
        PruneRequest,
        Resources,
        ResourcesCreate,
        Reward,
        RewardCreate,
        Rollout,
        RolloutCreate,
        RolloutQuery,
        Run,
        RunMetrics,
        RunStatus,
        Span,
        SpanCreate,
        Unset,
        Worker,
    )
    from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision
    from fulmen.types.sessions import SessionCreate

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """A ``Store`` held in memory; one asyncio lock serialises every operation."""

    def __init__(self) -> None:
        lock = asyncio.Lock()
        super().__init__(lock=lock)
        self._changed = asyncio.Condition(lock)
        self._queue = MemoryQueue(self._changed.notify_all)
        self._records = MemoryRecords(self._queue)
        self._resources = MemoryResources()
        self._runs = MemoryRuns()
        self._releases: dict[str, Release] = {}

    @classmethod
    async def connect(
        cls, url: str = "memory://", *, watchdog_interval: float | None = 1.0
    ) -> MemoryStore:
        """Open a new, empty store with its watchdog; every call gives a separate store."""
        del url
        store = cls()
        store._watch(watchdog_interval)
        return store

    @property
    def capabilities(self) -> Capabilities:
        """Not durable, not shared between processes."""
        return Capabilities(is_durable=False, is_shared=False)

    # -- the queue ------------------------------------------------------------------------------

    async def _enqueue(self, rollouts: list[RolloutCreate]) -> list[Rollout]:
        return self._queue.enqueue(rollouts, self._resources.latest_version)

    async def _claim(
        self, worker_id: str, limit: int, modes: list[Mode] | None, claim_id: str | None
    ) -> list[Claim]:
        return self._queue.claim(worker_id, limit, modes, claim_id)

    async def _heartbeat(
        self, worker_id: str, attempt_ids: list[str], metadata: dict[str, JsonValue] | None
    ) -> Worker:
        return self._queue.heartbeat(worker_id, attempt_ids, metadata)

    async def _update_attempt(
        self, attempt_id: str, status: AttemptStatus | Unset, error: str | Unset | None
    ) -> Attempt:
        return self._queue.update_attempt(attempt_id, status, error)

    async def _update_rollout(
        self,
        rollout_id: str,
        status: RolloutStatus | Unset,
        metadata: dict[str, JsonValue] | Unset,
    ) -> Rollout:
        return self._queue.update_rollout(rollout_id, status, metadata)

    async def _record_session(self, session: SessionCreate) -> Claim:
        return self._queue.record_session(session)

    async def _get_rollout(self, rollout_id: str) -> Rollout:
        return self._queue.get_rollout(rollout_id)

    async def _get_attempt(self, attempt_id: str) -> Attempt:
        return self._queue.get_attempt(attempt_id)

    async def _list_attempts(self, rollout_id: str) -> list[Attempt]:
        return self._queue.list_attempts(rollout_id)

    async def _query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        return self._queue.query_rollouts(query)

    async def _list_workers(self) -> list[Worker]:
        return self._queue.list_workers()

    async def _wait_for_rollouts(self, rollout_ids: list[str], timeout: float) -> list[Rollout]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._changed:
            while True:
                rollouts = [self._queue.get_rollout(r) for r in rollout_ids]
                remaining = deadline - loop.time()
                if all(r.is_terminal for r in rollouts) or remaining <= 0:
                    return [r for r in rollouts if r.is_terminal]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    async def _reconcile(self) -> ReconcileReport:
        return self._queue.expire()

    async def _add_resources(self, resources: ResourcesCreate) -> Resources:
        return self._resources.add(resources)

    async def _get_resources(self, version: int) -> Resources:
        return self._resources.get(version)

    async def _latest_resources(self) -> Resources | None:
        return self._resources.latest()

    # -- the record log -------------------------------------------------------------------------

    async def _add_spans(self, spans: list[SpanCreate]) -> list[Span]:
        return self._records.add_spans(spans)

    async def _add_llm_calls(self, calls: list[LLMCallCreate]) -> list[LLMCall]:
        return self._records.add_llm_calls(calls)

    async def _query_spans(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[Span]:
        return self._records.query_spans(rollout_id, attempt_id, after_sequence, limit)

    async def _query_llm_calls(
        self, rollout_id: str, attempt_id: str | None, after_sequence: int, limit: int
    ) -> Page[LLMCall]:
        return self._records.query_llm_calls(rollout_id, attempt_id, after_sequence, limit)

    async def _add_reward(self, reward: RewardCreate) -> Reward:
        return self._records.add_reward(reward)

    async def _list_rewards(self, rollout_id: str) -> list[Reward]:
        return self._records.list_rewards(rollout_id)

    # -- the run log ----------------------------------------------------------------------------

    async def _start_run(self, run: Run) -> Run:
        return self._runs.start(run)

    async def _update_run(
        self, run_id: str, status: RunStatus | Unset, ended_at: float | Unset | None
    ) -> Run:
        return self._runs.update(run_id, status, ended_at)

    async def _add_run_metrics(self, metrics: list[RunMetrics]) -> None:
        self._runs.add_metrics(metrics)

    async def _list_runs(self, limit: int, offset: int) -> Page[Run]:
        return self._runs.list(limit, offset)

    async def _get_run(self, run_id: str) -> Run:
        return self._runs.get(run_id)

    async def _query_run_metrics(
        self, run_id: str, after_step: int | None, limit: int
    ) -> Page[RunMetrics]:
        return self._runs.query_metrics(run_id, after_step, limit)

    async def _add_model_version(self, version: ModelVersion) -> ModelVersion:
        return self._runs.add_version(version)

    async def _list_model_versions(self, run_id: str | None) -> list[ModelVersion]:
        return self._runs.list_versions(run_id)

    # -- the release book -----------------------------------------------------------------------

    async def _put_release(self, release: ReleaseCreate) -> Release:
        stored = self._releases.get(release.name)
        self._releases[release.name] = put = new_release(release, stored, store_time())
        return put

    async def _get_release(self, name: str) -> Release:
        try:
            return self._releases[name]
        except KeyError:
            raise missing_release(name) from None

    async def _list_releases(self) -> list[Release]:
        return sorted(self._releases.values(), key=lambda r: (-r.created_at, r.name))

    async def _decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        stored = self._releases.get(name)
        if stored is None:
            raise missing_release(name)
        self._releases[name] = decided = decided_release(stored, decision, store_time())
        return decided

    # -- the whole store ------------------------------------------------------------------------

    async def _prune(self, request: PruneRequest) -> PruneReport:
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

    async def _stats(self) -> StoreStats:
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

    async def _aclose(self) -> None:
        pass  # nothing to release beyond the watchdog, which the face stops
