"""MemoryStore: the reference backend, holding everything in Python objects.

It defines the semantics the SQL backends and the HTTP service must match (the conformance suite
runs against all of them). It is not durable and lives in one process; use it for tests and dry
runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.errors import Conflict, InvalidRequest, NotFound
from fulmen.store.arguments import check_arguments
from fulmen.store.base import Capabilities, ReconcileReport
from fulmen.store.clock import new_id, utc_now
from fulmen.store.lifecycle import (
    check_reported_status,
    check_rollout_transition,
    expired_error,
    expired_status,
    rollout_status_after_attempt,
    same_rollout_request,
)
from fulmen.store.memory_runs import MemoryRuns
from fulmen.store.rewards import (
    REWARD_SPAN_NAME,
    build_reward,
    is_prunable,
    missing_response,
    replayed_reward,
)
from fulmen.store.runs import (
    MAX_METRICS_LIMIT,
    MAX_RUNS_LIMIT,
    check_run_id,
    check_run_paging,
    check_run_update,
)
from fulmen.store.sessions import (
    new_session_attempt,
    new_session_rollout,
    next_session_rollout,
    replayed_session,
)
from fulmen.store.stored import stored_call, stored_span
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
from fulmen.types.queries import page_after_sequence
from fulmen.types.sessions import SessionCreate

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["MemoryStore"]


class MemoryStore:
    """A ``Store`` held in memory; one asyncio lock serialises every change."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition(self._lock)
        self._rollouts: dict[str, Rollout] = {}
        self._queue: list[tuple[int, str]] = []  # heap of (position, rollout_id); lazy deletion
        self._attempts: dict[str, Attempt] = {}
        self._attempts_by_rollout: dict[str, list[str]] = {}
        self._claims: dict[str, list[tuple[str, str]]] = {}
        self._spans: dict[tuple[str, str], Span] = {}
        self._spans_by_rollout: dict[str, list[Span]] = {}
        self._calls: dict[str, LLMCall] = {}
        self._calls_by_rollout: dict[str, list[LLMCall]] = {}
        self._tracked_by_response: dict[str, LLMCall] = {}
        self._rewards: dict[str, Reward] = {}
        self._rewards_by_rollout: dict[str, list[Reward]] = {}
        self._last_position = 0
        self._last_sequence: dict[str, int] = {}
        self._resources: list[Resources] = []
        self._resources_by_id: dict[str, Resources] = {}
        self._workers: dict[str, Worker] = {}
        self._runs = MemoryRuns()
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
            latest = self._resources[-1].version if self._resources else None
            out: list[Rollout] = []
            for request in rollouts:
                if request.rollout_id is not None and request.rollout_id in self._rollouts:
                    existing = self._rollouts[request.rollout_id]
                    if not same_rollout_request(existing, request):
                        raise Conflict(
                            f"rollout {request.rollout_id} already exists with other content",
                            detail={"rollout_id": request.rollout_id},
                        )
                    out.append(existing)
                    continue
                version = request.resources_version
                if version is not None and not 1 <= version <= len(self._resources):
                    raise NotFound(f"resources version {version} does not exist")
                rollout = Rollout(
                    rollout_id=request.rollout_id or new_id("ro"),
                    input=request.input,
                    mode=request.mode,
                    task_id=request.task_id,
                    resources_version=version if version is not None else latest,
                    status=RolloutStatus.QUEUING,
                    config=request.config,
                    metadata=request.metadata,
                    position=self._last_position + 1,
                    enqueued_at=utc_now(),
                )
                self._last_position = rollout.position
                self._rollouts[rollout.rollout_id] = rollout
                self._attempts_by_rollout[rollout.rollout_id] = []
                self._last_sequence[rollout.rollout_id] = 0
                heapq.heappush(self._queue, (rollout.position, rollout.rollout_id))
                out.append(rollout)
            return out

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
            if claim_id is not None and claim_id in self._claims:
                return [
                    Claim(rollout=self._rollouts[r], attempt=self._attempts[a])
                    for r, a in self._claims[claim_id]
                    if r in self._rollouts  # a pruned rollout went with its attempt
                ]
            now = utc_now()
            skipped: list[tuple[int, str]] = []
            claims: list[Claim] = []
            while self._queue and len(claims) < limit:
                position, rollout_id = heapq.heappop(self._queue)
                rollout = self._rollouts.get(rollout_id)
                if rollout is None or rollout.status is not RolloutStatus.QUEUING:
                    continue  # stale heap entry (of a rollout since finished or pruned)
                if modes is not None and rollout.mode not in modes:
                    skipped.append((position, rollout_id))
                    continue
                attempt = Attempt(
                    attempt_id=new_id("at"),
                    rollout_id=rollout_id,
                    number=rollout.attempt_count + 1,
                    worker_id=worker_id,
                    status=AttemptStatus.RUNNING,
                    started_at=now,
                    last_heartbeat_at=now,
                )
                rollout = rollout.model_copy(
                    update={
                        "status": RolloutStatus.RUNNING,
                        "attempt_count": attempt.number,
                        "started_at": rollout.started_at or now,
                    }
                )
                self._rollouts[rollout_id] = rollout
                self._attempts[attempt.attempt_id] = attempt
                self._attempts_by_rollout[rollout_id].append(attempt.attempt_id)
                claims.append(Claim(rollout=rollout, attempt=attempt))
            for entry in skipped:
                heapq.heappush(self._queue, entry)
            worker = self._workers.get(worker_id)
            running = list(worker.running_attempt_ids) if worker else []
            running += [c.attempt.attempt_id for c in claims]
            self._workers[worker_id] = Worker(
                worker_id=worker_id,
                last_heartbeat_at=now,
                running_attempt_ids=self._still_running(worker_id, running),
                metadata=worker.metadata if worker else {},
            )
            if claim_id is not None:
                self._claims[claim_id] = [
                    (c.rollout.rollout_id, c.attempt.attempt_id) for c in claims
                ]
            return claims

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
            rollout = self._get_rollout(rollout_id)
            update: dict[str, object] = {}
            if metadata is not UNSET:
                update["metadata"] = metadata
            if status is not UNSET:
                if status is not RolloutStatus.CANCELLED:
                    raise InvalidRequest(
                        f"rollout {rollout_id}: only 'cancelled' may be set by a caller, "
                        f"not {status.value!r}"
                    )
                check_rollout_transition(rollout_id, rollout.status, status)
                now = utc_now()
                current = self._current_attempt(rollout_id)
                if current is not None and current.status is AttemptStatus.RUNNING:
                    self._attempts[current.attempt_id] = current.model_copy(
                        update={"status": AttemptStatus.CANCELLED, "ended_at": now}
                    )
                update.update(status=status, ended_at=now)
            rollout = rollout.model_copy(update=update)
            self._rollouts[rollout_id] = rollout
            if status is not UNSET:
                self._changed.notify_all()
            return rollout

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
            attempt = self._get_attempt(attempt_id)
            if status is not UNSET and status is not AttemptStatus.RUNNING:
                check_reported_status(attempt_id, status)
            if attempt.is_terminal:
                if status is UNSET and error is UNSET:
                    return attempt
                late = attempt.model_copy(
                    update={
                        "late_status": status if status is not UNSET else attempt.late_status,
                        "late_error": error if error is not UNSET else attempt.late_error,
                    }
                )
                self._attempts[attempt_id] = late
                return late
            update: dict[str, object] = {}
            if error is not UNSET:
                update["error"] = error
            if status is not UNSET and status is not AttemptStatus.RUNNING:
                update.update(status=status, ended_at=utc_now())
            attempt = attempt.model_copy(update=update)
            self._attempts[attempt_id] = attempt
            if attempt.is_terminal:
                self._finish_rollout_attempt(attempt)
            return attempt

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
            now = utc_now()
            for attempt_id in attempt_ids:
                attempt = self._attempts.get(attempt_id)
                if attempt and attempt.worker_id == worker_id and not attempt.is_terminal:
                    self._attempts[attempt_id] = attempt.model_copy(
                        update={"last_heartbeat_at": now}
                    )
            previous = self._workers.get(worker_id)
            worker = Worker(
                worker_id=worker_id,
                last_heartbeat_at=now,
                running_attempt_ids=self._still_running(worker_id, attempt_ids),
                metadata=metadata
                if metadata is not None
                else (previous.metadata if previous else {}),
            )
            self._workers[worker_id] = worker
            return worker

    async def list_workers(self) -> list[Worker]:
        """See ``Store.list_workers``."""
        async with self._lock:
            return sorted(self._workers.values(), key=lambda w: w.worker_id)

    # -- spans and LLM calls --------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[SpanCreate]) -> list[Span]:
        """See ``Store.add_spans``."""
        async with self._lock:
            self._check_open()
            out: list[Span] = []
            for span in spans:
                key = (span.attempt_id, span.span_id)
                stored = self._spans.get(key)
                if stored is None:
                    self._check_attempt_of(span.rollout_id, span.attempt_id)
                    stored = stored_span(span, self._next_sequence(span.rollout_id))
                    self._spans[key] = stored
                    self._spans_by_rollout.setdefault(span.rollout_id, []).append(stored)
                out.append(stored)
            return out

    async def add_llm_calls(self, calls: Sequence[LLMCallCreate]) -> list[LLMCall]:
        """See ``Store.add_llm_calls``."""
        async with self._lock:
            self._check_open()
            out: list[LLMCall] = []
            for call in calls:
                stored = self._calls.get(call.call_id)
                if stored is None:
                    sequence = 0
                    if call.rollout_id is not None:
                        if call.attempt_id is None:
                            raise InvalidRequest(
                                f"call {call.call_id}: rollout_id without attempt_id"
                            )
                        self._check_attempt_of(call.rollout_id, call.attempt_id)
                        sequence = self._next_sequence(call.rollout_id)
                    elif call.attempt_id is not None:
                        raise InvalidRequest(f"call {call.call_id}: attempt_id without rollout_id")
                    stored = stored_call(call, sequence)
                    self._calls[call.call_id] = stored
                    if call.rollout_id is not None:
                        self._calls_by_rollout.setdefault(call.rollout_id, []).append(stored)
                        if call.response_id is not None:
                            self._index_response(stored)
                out.append(stored)
            return out

    async def query_spans(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[Span]:
        """See ``Store.query_spans``."""
        _check_limit(limit)
        async with self._lock:
            self._get_rollout(rollout_id)
            rows = self._spans_by_rollout.get(rollout_id, [])
            return page_after_sequence(rows, attempt_id, after_sequence, limit)

    async def query_llm_calls(
        self,
        rollout_id: str,
        *,
        attempt_id: str | None = None,
        after_sequence: int = 0,
        limit: int = 1000,
    ) -> Page[LLMCall]:
        """See ``Store.query_llm_calls``."""
        _check_limit(limit)
        async with self._lock:
            self._get_rollout(rollout_id)
            rows = self._calls_by_rollout.get(rollout_id, [])
            return page_after_sequence(rows, attempt_id, after_sequence, limit)

    # -- rewards and retention ------------------------------------------------------------------

    async def add_reward(self, reward: RewardCreate) -> Reward:
        """See ``Store.add_reward``."""
        async with self._lock:
            self._check_open()
            if reward.key is not None and reward.key in self._rewards:
                return replayed_reward(self._rewards[reward.key], reward)
            attempt_id: str | None = None
            rollout_id = reward.target_rollout_id()
            if rollout_id is None:
                assert reward.response_id is not None  # RewardCreate names exactly one target
                call = self._tracked_by_response.get(reward.response_id)
                if call is None or call.rollout_id is None:
                    raise missing_response(reward.response_id)
                rollout_id, attempt_id = call.rollout_id, call.attempt_id
            self._get_rollout(rollout_id)
            stored = build_reward(
                reward,
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                sequence=self._next_sequence(rollout_id),
            )
            self._rewards[stored.key] = stored
            self._rewards_by_rollout.setdefault(rollout_id, []).append(stored)
            return stored

    async def list_rewards(self, rollout_id: str) -> list[Reward]:
        """See ``Store.list_rewards``."""
        async with self._lock:
            self._get_rollout(rollout_id)
            return list(self._rewards_by_rollout.get(rollout_id, []))

    async def record_session(self, session: SessionCreate) -> Claim:
        """See ``Store.record_session``."""
        async with self._lock:
            self._check_open()
            stored = self._attempts.get(session.attempt_id)
            if stored is not None:
                return replayed_session(self._rollouts[stored.rollout_id], stored, session)
            now = utc_now()
            existing = self._rollouts.get(session.rollout_id)
            if existing is None:
                rollout = new_session_rollout(session, position=self._last_position + 1, now=now)
                self._last_position = rollout.position
                self._attempts_by_rollout[rollout.rollout_id] = []
                self._last_sequence[rollout.rollout_id] = 0
            else:
                rollout = next_session_rollout(existing, session, now)
            attempt = new_session_attempt(rollout, session, now)
            self._rollouts[rollout.rollout_id] = rollout
            self._attempts[attempt.attempt_id] = attempt
            self._attempts_by_rollout[rollout.rollout_id].append(attempt.attempt_id)
            self._changed.notify_all()
            return Claim(rollout=rollout, attempt=attempt)

    async def prune(self, request: PruneRequest) -> PruneReport:
        """See ``Store.prune``."""
        async with self._lock:
            self._check_open()
            doomed = [
                r.rollout_id
                for r in self._rollouts.values()
                if is_prunable(r, request.ended_before)
                and (request.modes is None or r.mode in request.modes)
                and not (request.keep_rewarded and self._is_rewarded(r.rollout_id))
            ]
            report = PruneReport(
                dry_run=request.dry_run,
                rollouts=len(doomed),
                attempts=sum(len(self._attempts_by_rollout[r]) for r in doomed),
                spans=sum(len(self._spans_by_rollout.get(r, [])) for r in doomed),
                llm_calls=sum(len(self._calls_by_rollout.get(r, [])) for r in doomed),
                rewards=sum(len(self._rewards_by_rollout.get(r, [])) for r in doomed),
            )
            if not request.dry_run:
                for rollout_id in doomed:
                    self._delete_rollout(rollout_id)
            return report

    # -- reads ----------------------------------------------------------------------------------

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """See ``Store.get_rollout``."""
        async with self._lock:
            return self._get_rollout(rollout_id)

    async def get_attempt(self, attempt_id: str) -> Attempt:
        """See ``Store.get_attempt``."""
        async with self._lock:
            return self._get_attempt(attempt_id)

    async def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """See ``Store.list_attempts``."""
        async with self._lock:
            self._get_rollout(rollout_id)
            return [self._attempts[a] for a in self._attempts_by_rollout[rollout_id]]

    async def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """See ``Store.query_rollouts``."""
        async with self._lock:
            items: list[Rollout] = []
            for rollout in self._rollouts.values():  # dict order is enqueue order
                if not query.matches(rollout):
                    continue
                if len(items) == query.limit:
                    return Page(items=items, next_cursor=items[-1].position)
                items.append(rollout)
            return Page(items=items, next_cursor=None)

    async def wait_for_rollouts(
        self, rollout_ids: Sequence[str], *, timeout: float
    ) -> list[Rollout]:
        """See ``Store.wait_for_rollouts``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        async with self._changed:
            while True:
                rollouts = [self._get_rollout(r) for r in rollout_ids]
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
            if (
                resources.resources_id is not None
                and resources.resources_id in self._resources_by_id
            ):
                existing = self._resources_by_id[resources.resources_id]
                if (
                    existing.resources != resources.resources
                    or existing.metadata != resources.metadata
                ):
                    raise Conflict(
                        f"resources {resources.resources_id} already exist with other content"
                    )
                return existing
            stored = Resources(
                version=len(self._resources) + 1,
                resources_id=resources.resources_id or new_id("res"),
                resources=resources.resources,
                metadata=resources.metadata,
                created_at=utc_now(),
            )
            self._resources.append(stored)
            self._resources_by_id[stored.resources_id] = stored
            return stored

    async def get_resources(self, version: int) -> Resources:
        """See ``Store.get_resources``."""
        async with self._lock:
            if not 1 <= version <= len(self._resources):
                raise NotFound(f"resources version {version} does not exist")
            return self._resources[version - 1]

    async def latest_resources(self) -> Resources | None:
        """See ``Store.latest_resources``."""
        async with self._lock:
            return self._resources[-1] if self._resources else None

    # -- watchdog and statistics ----------------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """See ``Store.reconcile``."""
        async with self._lock:
            now = utc_now()
            timed_out: list[str] = []
            lost: list[str] = []
            requeued: list[str] = []
            failed: list[str] = []
            for attempt in list(self._attempts.values()):
                if attempt.is_terminal:
                    continue
                rollout = self._rollouts[attempt.rollout_id]
                outcome = expired_status(
                    rollout.config,
                    started_at=attempt.started_at,
                    last_heartbeat_at=attempt.last_heartbeat_at,
                    now=now,
                )
                if outcome is None:
                    continue
                ended = attempt.model_copy(
                    update={
                        "status": outcome,
                        "ended_at": now,
                        "error": expired_error(rollout.config, outcome),
                    }
                )
                self._attempts[attempt.attempt_id] = ended
                (timed_out if outcome is AttemptStatus.TIMEOUT else lost).append(attempt.attempt_id)
                after = self._finish_rollout_attempt(ended)
                if after is RolloutStatus.QUEUING:
                    requeued.append(attempt.rollout_id)
                elif after is RolloutStatus.FAILED:
                    failed.append(attempt.rollout_id)
            return ReconcileReport(
                timed_out=tuple(timed_out),
                lost=tuple(lost),
                requeued=tuple(requeued),
                failed=tuple(failed),
            )

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

    async def stats(self) -> StoreStats:
        """See ``Store.stats``."""
        async with self._lock:
            rollouts = Counter(r.status for r in self._rollouts.values())
            attempts = Counter(a.status for a in self._attempts.values())
            return StoreStats(
                rollouts={s: rollouts.get(s, 0) for s in RolloutStatus},
                attempts={s: attempts.get(s, 0) for s in AttemptStatus},
                spans=len(self._spans),
                llm_calls=len(self._calls),
                resources_versions=len(self._resources),
                workers=len(self._workers),
            )

    async def aclose(self) -> None:
        """See ``Store.aclose``."""
        if self._watchdog is not None:
            await self._watchdog.stop()
        self._closed = True

    # -- internals (called with the lock held) --------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidRequest("the store is closed")

    def _get_rollout(self, rollout_id: str) -> Rollout:
        try:
            return self._rollouts[rollout_id]
        except KeyError:
            raise NotFound(f"rollout {rollout_id!r} does not exist") from None

    def _get_attempt(self, attempt_id: str) -> Attempt:
        try:
            return self._attempts[attempt_id]
        except KeyError:
            raise NotFound(f"attempt {attempt_id!r} does not exist") from None

    def _check_attempt_of(self, rollout_id: str, attempt_id: str) -> None:
        self._get_rollout(rollout_id)
        if self._get_attempt(attempt_id).rollout_id != rollout_id:
            raise InvalidRequest(f"attempt {attempt_id} does not belong to rollout {rollout_id}")

    def _index_response(self, call: LLMCall) -> None:
        """Let a response id name the call that started last (as the SQL backends choose)."""
        assert call.response_id is not None
        known = self._tracked_by_response.get(call.response_id)
        if known is None or (call.started_at, call.call_id) > (known.started_at, known.call_id):
            self._tracked_by_response[call.response_id] = call

    def _is_rewarded(self, rollout_id: str) -> bool:
        return bool(self._rewards_by_rollout.get(rollout_id)) or any(
            s.name == REWARD_SPAN_NAME for s in self._spans_by_rollout.get(rollout_id, [])
        )

    def _delete_rollout(self, rollout_id: str) -> None:
        """Forget a final rollout and everything recorded for it (it is in no queue)."""
        del self._rollouts[rollout_id]
        del self._last_sequence[rollout_id]
        for attempt_id in self._attempts_by_rollout.pop(rollout_id):
            del self._attempts[attempt_id]
        for span in self._spans_by_rollout.pop(rollout_id, []):
            del self._spans[(span.attempt_id, span.span_id)]
        for call in self._calls_by_rollout.pop(rollout_id, []):
            del self._calls[call.call_id]
            if call.response_id and self._tracked_by_response.get(call.response_id) is call:
                del self._tracked_by_response[call.response_id]
                for other in self._calls.values():  # another call with that id, if any
                    if other.rollout_id is not None and other.response_id == call.response_id:
                        self._index_response(other)
        for reward in self._rewards_by_rollout.pop(rollout_id, []):
            del self._rewards[reward.key]

    def _current_attempt(self, rollout_id: str) -> Attempt | None:
        ids = self._attempts_by_rollout[rollout_id]
        return self._attempts[ids[-1]] if ids else None

    def _next_sequence(self, rollout_id: str) -> int:
        self._last_sequence[rollout_id] += 1
        return self._last_sequence[rollout_id]

    def _still_running(self, worker_id: str, attempt_ids: Sequence[str]) -> list[str]:
        return [
            a
            for a in dict.fromkeys(attempt_ids)
            if a in self._attempts
            and self._attempts[a].worker_id == worker_id
            and not self._attempts[a].is_terminal
        ]

    def _finish_rollout_attempt(self, attempt: Attempt) -> RolloutStatus | None:
        """Move the rollout of a just-ended attempt; returns its new status (None: unchanged)."""
        rollout = self._rollouts[attempt.rollout_id]
        if rollout.status is not RolloutStatus.RUNNING:
            return None
        used = sum(
            1
            for a in self._attempts_by_rollout[rollout.rollout_id]
            if self._attempts[a].status is not AttemptStatus.RELEASED
        )
        after = rollout_status_after_attempt(rollout.config, attempt.status, used)
        check_rollout_transition(rollout.rollout_id, rollout.status, after)
        update: dict[str, object] = {"status": after}
        if after is RolloutStatus.QUEUING:
            heapq.heappush(self._queue, (rollout.position, rollout.rollout_id))
        else:
            update.update(ended_at=attempt.ended_at, error=attempt.error)
        self._rollouts[rollout.rollout_id] = rollout.model_copy(update=update)
        self._changed.notify_all()
        return after


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidRequest(f"limit must be at least 1, got {limit}")
