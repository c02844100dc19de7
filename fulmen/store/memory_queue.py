"""``MemoryQueue``: the rollouts, attempts and workers of a ``MemoryStore``, and their moves.

Plain dictionaries and a heap behind the memory store's lock (the store calls these methods
with it held). Every decision — what a claim takes, how a report or an expiry moves the
rollout, what a cancel stops — comes from ``fulmen.store.lifecycle``, which the SQL backends
share; this module only keeps the objects and its indexes up to date.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from fulmen.errors import InvalidRequest, NotFound
from fulmen.store.base import ReconcileReport
from fulmen.store.clock import new_id, utc_now
from fulmen.store.lifecycle import (
    attempts_used,
    cancelled,
    check_caller_status,
    claim_order,
    claimed,
    expired_attempt,
    is_claimable,
    is_running_on,
    new_rollout,
    repeated_rollout,
    reported_attempt,
    rollout_after_attempt,
    seen_worker,
)
from fulmen.store.sessions import (
    new_session_attempt,
    new_session_rollout,
    next_session_rollout,
    replayed_session,
)
from fulmen.types import (
    UNSET,
    Attempt,
    AttemptStatus,
    Claim,
    Mode,
    Page,
    Rollout,
    RolloutCreate,
    RolloutQuery,
    RolloutStatus,
    Unset,
    Worker,
)

if TYPE_CHECKING:
    from pydantic import JsonValue

    from fulmen.types.sessions import SessionCreate

__all__ = ["MemoryQueue"]


class MemoryQueue:
    """The rollouts in enqueue order, the queue of claimable ones, their attempts and workers.

    ``changed`` is called (with the store's lock held) whenever a rollout moves in a way a
    ``wait_for_rollouts`` caller may be waiting for.
    """

    def __init__(self, changed: Callable[[], None]) -> None:
        self._changed = changed
        self._rollouts: dict[str, Rollout] = {}  # dict order is enqueue order
        self._queue: list[tuple[int, str]] = []  # heap of (claim_order, rollout_id); lazy deletion
        self._attempts: dict[str, Attempt] = {}
        self._attempts_by_rollout: dict[str, list[str]] = {}
        self._claims: dict[str, list[tuple[str, str]]] = {}
        self._workers: dict[str, Worker] = {}
        self._last_position = 0

    # -- rollouts -------------------------------------------------------------------------------

    def enqueue(self, requests: Sequence[RolloutCreate], latest_resources: int) -> list[Rollout]:
        """See ``Store.enqueue``; ``latest_resources`` is the newest version (0: none)."""
        out: list[Rollout] = []
        for request in requests:
            if request.rollout_id is not None and request.rollout_id in self._rollouts:
                out.append(repeated_rollout(self._rollouts[request.rollout_id], request))
                continue
            rollout = new_rollout(
                request,
                fresh_id=new_id("ro"),
                position=self._last_position + 1,
                latest_resources=latest_resources,
                now=utc_now(),
            )
            self._add_rollout(rollout)
            heapq.heappush(self._queue, (claim_order(rollout), rollout.rollout_id))
            out.append(rollout)
        return out

    def claim(
        self, worker_id: str, limit: int, modes: Sequence[Mode] | None, claim_id: str | None
    ) -> list[Claim]:
        """See ``Store.claim`` (arguments already checked)."""
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
            entry = heapq.heappop(self._queue)
            rollout = self._rollouts.get(entry[1])
            if rollout is None or rollout.status is not RolloutStatus.QUEUING:
                continue  # stale heap entry (of a rollout since claimed, finished or pruned)
            if not is_claimable(rollout, modes):
                skipped.append(entry)  # another mode: stays queued for other claims
                continue
            claim = claimed(rollout, worker_id=worker_id, attempt_id=new_id("at"), now=now)
            self._rollouts[rollout.rollout_id] = claim.rollout
            self._attempts[claim.attempt.attempt_id] = claim.attempt
            self._attempts_by_rollout[rollout.rollout_id].append(claim.attempt.attempt_id)
            claims.append(claim)
        for entry in skipped:
            heapq.heappush(self._queue, entry)
        previous = self._workers.get(worker_id)
        running = list(previous.running_attempt_ids) if previous else []
        running += [c.attempt.attempt_id for c in claims]
        self._workers[worker_id] = seen_worker(
            previous, worker_id, now=now, running=self._still_running(worker_id, running)
        )
        if claim_id is not None:
            self._claims[claim_id] = [(c.rollout.rollout_id, c.attempt.attempt_id) for c in claims]
        return claims

    def update_rollout(
        self,
        rollout_id: str,
        status: RolloutStatus | Unset,
        metadata: dict[str, JsonValue] | Unset,
    ) -> Rollout:
        """See ``Store.update_rollout`` (arguments already checked)."""
        rollout = self.get_rollout(rollout_id)
        if metadata is not UNSET:
            rollout = rollout.model_copy(update={"metadata": metadata})
        if status is not UNSET:
            check_caller_status(rollout_id, rollout.status, status)
            rollout, stopped = cancelled(rollout, self._current_attempt(rollout_id), utc_now())
            if stopped is not None:
                self._attempts[stopped.attempt_id] = stopped
        self._rollouts[rollout_id] = rollout
        if status is not UNSET:
            self._changed()
        return rollout

    def record_session(self, session: SessionCreate) -> Claim:
        """See ``Store.record_session``."""
        stored = self._attempts.get(session.attempt_id)
        if stored is not None:
            return replayed_session(self._rollouts[stored.rollout_id], stored, session)
        now = utc_now()
        existing = self._rollouts.get(session.rollout_id)
        if existing is None:
            rollout = new_session_rollout(session, position=self._last_position + 1, now=now)
            self._add_rollout(rollout)
        else:
            rollout = next_session_rollout(existing, session, now)
        attempt = new_session_attempt(rollout, session, now)
        self._rollouts[rollout.rollout_id] = rollout
        self._attempts[attempt.attempt_id] = attempt
        self._attempts_by_rollout[rollout.rollout_id].append(attempt.attempt_id)
        self._changed()
        return Claim(rollout=rollout, attempt=attempt)

    # -- attempts and workers -------------------------------------------------------------------

    def update_attempt(
        self, attempt_id: str, status: AttemptStatus | Unset, error: str | Unset | None
    ) -> Attempt:
        """See ``Store.update_attempt`` (arguments already checked)."""
        attempt = self.get_attempt(attempt_id)
        reported = reported_attempt(attempt, status=status, error=error, now=utc_now())
        if reported is None:
            return attempt
        self._attempts[attempt_id] = reported
        # Only an attempt this report ended moves its rollout; a late report does not.
        if reported.is_terminal and not attempt.is_terminal:
            self._finish(reported)
        return reported

    def heartbeat(
        self, worker_id: str, attempt_ids: Sequence[str], metadata: dict[str, JsonValue] | None
    ) -> Worker:
        """See ``Store.heartbeat`` (arguments already checked)."""
        now = utc_now()
        for attempt_id in attempt_ids:
            attempt = self._attempts.get(attempt_id)
            if attempt is not None and is_running_on(attempt, worker_id):
                self._attempts[attempt_id] = attempt.model_copy(update={"last_heartbeat_at": now})
        worker = seen_worker(
            self._workers.get(worker_id),
            worker_id,
            now=now,
            running=self._still_running(worker_id, attempt_ids),
            metadata=metadata,
        )
        self._workers[worker_id] = worker
        return worker

    def list_workers(self) -> list[Worker]:
        """See ``Store.list_workers``."""
        return sorted(self._workers.values(), key=lambda w: w.worker_id)

    def expire(self) -> ReconcileReport:
        """See ``Store.reconcile``: end the running attempts past a deadline now."""
        now = utc_now()
        timed_out: list[str] = []
        lost: list[str] = []
        requeued: list[str] = []
        failed: list[str] = []
        for attempt in list(self._attempts.values()):
            if attempt.is_terminal:
                continue
            ended = expired_attempt(attempt, self._rollouts[attempt.rollout_id].config, now)
            if ended is None:
                continue
            self._attempts[attempt.attempt_id] = ended
            (timed_out if ended.status is AttemptStatus.TIMEOUT else lost).append(ended.attempt_id)
            after = self._finish(ended)
            if after is RolloutStatus.QUEUING:
                requeued.append(ended.rollout_id)
            elif after is RolloutStatus.FAILED:
                failed.append(ended.rollout_id)
        return ReconcileReport(
            timed_out=tuple(timed_out),
            lost=tuple(lost),
            requeued=tuple(requeued),
            failed=tuple(failed),
        )

    # -- reads ----------------------------------------------------------------------------------

    def get_rollout(self, rollout_id: str) -> Rollout:
        """Return the rollout, or raise ``NotFound``."""
        try:
            return self._rollouts[rollout_id]
        except KeyError:
            raise NotFound(f"rollout {rollout_id!r} does not exist") from None

    def get_attempt(self, attempt_id: str) -> Attempt:
        """Return the attempt, or raise ``NotFound``."""
        try:
            return self._attempts[attempt_id]
        except KeyError:
            raise NotFound(f"attempt {attempt_id!r} does not exist") from None

    def check_attempt_of(self, rollout_id: str, attempt_id: str) -> None:
        """Raise ``NotFound`` or ``InvalidRequest`` unless the attempt is one of the rollout's."""
        self.get_rollout(rollout_id)
        if self.get_attempt(attempt_id).rollout_id != rollout_id:
            raise InvalidRequest(f"attempt {attempt_id} does not belong to rollout {rollout_id}")

    def list_attempts(self, rollout_id: str) -> list[Attempt]:
        """See ``Store.list_attempts``."""
        self.get_rollout(rollout_id)
        return [self._attempts[a] for a in self._attempts_by_rollout[rollout_id]]

    def query_rollouts(self, query: RolloutQuery) -> Page[Rollout]:
        """See ``Store.query_rollouts``."""
        items: list[Rollout] = []
        for rollout in self._rollouts.values():
            if not query.matches(rollout):
                continue
            if len(items) == query.limit:
                return Page(items=items, next_cursor=items[-1].position)
            items.append(rollout)
        return Page(items=items, next_cursor=None)

    def rollouts(self) -> Iterator[Rollout]:
        """Every rollout, in enqueue order."""
        return iter(self._rollouts.values())

    def attempt_count(self, rollout_id: str) -> int:
        """Return how many attempts ``rollout_id`` has."""
        return len(self._attempts_by_rollout[rollout_id])

    def status_counts(self) -> tuple[Counter[RolloutStatus], Counter[AttemptStatus], int]:
        """Rollouts and attempts per status, and the number of workers (for ``Store.stats``)."""
        rollouts = Counter(r.status for r in self._rollouts.values())
        attempts = Counter(a.status for a in self._attempts.values())
        return rollouts, attempts, len(self._workers)

    def delete(self, rollout_id: str) -> None:
        """Forget a final rollout and its attempts (it is in no queue)."""
        del self._rollouts[rollout_id]
        for attempt_id in self._attempts_by_rollout.pop(rollout_id):
            del self._attempts[attempt_id]

    # -- internals ------------------------------------------------------------------------------

    def _add_rollout(self, rollout: Rollout) -> None:
        self._last_position = rollout.position
        self._rollouts[rollout.rollout_id] = rollout
        self._attempts_by_rollout[rollout.rollout_id] = []

    def _current_attempt(self, rollout_id: str) -> Attempt | None:
        ids = self._attempts_by_rollout[rollout_id]
        return self._attempts[ids[-1]] if ids else None

    def _still_running(self, worker_id: str, attempt_ids: Sequence[str]) -> list[str]:
        return [
            a
            for a in dict.fromkeys(attempt_ids)
            if a in self._attempts and is_running_on(self._attempts[a], worker_id)
        ]

    def _finish(self, ended: Attempt) -> RolloutStatus | None:
        """Move the rollout of a just-ended attempt; returns its new status (None: unchanged)."""
        rollout = self._rollouts[ended.rollout_id]
        used = attempts_used(
            self._attempts[a].status for a in self._attempts_by_rollout[rollout.rollout_id]
        )
        moved = rollout_after_attempt(rollout, ended, used)
        if moved is None:
            return None
        if moved.status is RolloutStatus.QUEUING:
            heapq.heappush(self._queue, (claim_order(moved), moved.rollout_id))
        self._rollouts[moved.rollout_id] = moved
        self._changed()
        return moved.status
