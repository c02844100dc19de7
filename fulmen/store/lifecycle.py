"""The lifecycle rules of rollouts and attempts: data plus pure functions, shared by every backend.

::

    rollout:  queuing ──claim──► running ──► succeeded | failed | cancelled
                 ▲                  │
                 └── retry/release ─┘
    attempt:  running ──► succeeded | failed | timeout | lost | cancelled | released

Terminal states are final. Backends call these functions inside their own transactions; nothing
here does I/O, reads a clock or draws an id: the caller passes ``now`` and fresh ids in, and
stores what comes back. Where a SQL backend must say a rule in SQL (which rows a claim takes, in
what order; which attempts a heartbeat touches), the predicate here is the rule and the SQL
names it in a comment.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

from fulmen.errors import Conflict, InvalidRequest, InvalidTransition, NotFound
from fulmen.types import (
    UNSET,
    Attempt,
    AttemptStatus,
    Claim,
    Mode,
    Rollout,
    RolloutConfig,
    RolloutCreate,
    RolloutStatus,
    Unset,
    Worker,
)

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = [
    "ATTEMPT_TERMINAL",
    "REPORTABLE_ATTEMPT_STATUSES",
    "ROLLOUT_TERMINAL",
    "ROLLOUT_TRANSITIONS",
    "UNCOUNTED_ATTEMPT_STATUSES",
    "attempts_used",
    "cancelled",
    "check_caller_status",
    "check_reported_status",
    "check_rollout_transition",
    "claim_order",
    "claimed",
    "expired_attempt",
    "expired_error",
    "expired_status",
    "is_claimable",
    "is_running_on",
    "new_rollout",
    "repeated_rollout",
    "reported_attempt",
    "rollout_after_attempt",
    "rollout_status_after_attempt",
    "same_rollout_request",
    "seen_worker",
]

ROLLOUT_TRANSITIONS: Final[dict[RolloutStatus, frozenset[RolloutStatus]]] = {
    RolloutStatus.QUEUING: frozenset(
        {RolloutStatus.RUNNING, RolloutStatus.CANCELLED, RolloutStatus.FAILED}
    ),
    RolloutStatus.RUNNING: frozenset(
        {
            RolloutStatus.QUEUING,
            RolloutStatus.SUCCEEDED,
            RolloutStatus.FAILED,
            RolloutStatus.CANCELLED,
        }
    ),
    RolloutStatus.SUCCEEDED: frozenset(),
    RolloutStatus.FAILED: frozenset(),
    RolloutStatus.CANCELLED: frozenset(),
}

ROLLOUT_TERMINAL: Final = frozenset(s for s, nxt in ROLLOUT_TRANSITIONS.items() if not nxt)
ATTEMPT_TERMINAL: Final = frozenset(AttemptStatus) - {AttemptStatus.RUNNING}

# What a worker may report; timeout/lost are the watchdog's, cancelled follows the rollout.
REPORTABLE_ATTEMPT_STATUSES: Final = frozenset(
    {AttemptStatus.SUCCEEDED, AttemptStatus.FAILED, AttemptStatus.RELEASED}
)

# Attempts that do not use up one of ``RolloutConfig.max_attempts``: a released attempt handed
# its rollout back without trying it (a runner shutting down, say).
UNCOUNTED_ATTEMPT_STATUSES: Final = frozenset({AttemptStatus.RELEASED})


def check_rollout_transition(rollout_id: str, old: RolloutStatus, new: RolloutStatus) -> None:
    """Raise ``InvalidTransition`` unless ``old → new`` is allowed (``old == new`` is a no-op)."""
    if old == new and old not in ROLLOUT_TERMINAL:
        return
    if new not in ROLLOUT_TRANSITIONS[old]:
        raise InvalidTransition(
            f"rollout {rollout_id} cannot go from {old.value} to {new.value}"
            + (" (it is final)" if old in ROLLOUT_TERMINAL else ""),
            detail={"rollout_id": rollout_id, "from": old.value, "to": new.value},
        )


def check_reported_status(attempt_id: str, status: AttemptStatus) -> None:
    """Raise ``InvalidRequest`` when a worker reports a status only the store may set."""
    if status not in REPORTABLE_ATTEMPT_STATUSES:
        allowed = sorted(s.value for s in REPORTABLE_ATTEMPT_STATUSES)
        raise InvalidRequest(
            f"attempt {attempt_id}: a worker may report only {allowed}, not {status.value!r}",
            detail={"attempt_id": attempt_id, "status": status.value, "allowed": allowed},
        )


def rollout_status_after_attempt(
    config: RolloutConfig, outcome: AttemptStatus, attempts_used: int
) -> RolloutStatus:
    """Return the rollout's next status once its current attempt ended with ``outcome``.

    ``attempts_used`` counts the rollout's attempts that were not released, the ended one
    included.
    """
    if outcome is AttemptStatus.SUCCEEDED:
        return RolloutStatus.SUCCEEDED
    if outcome is AttemptStatus.CANCELLED:
        return RolloutStatus.CANCELLED
    if outcome is AttemptStatus.RELEASED:
        return RolloutStatus.QUEUING
    if outcome in config.retry_on and attempts_used < config.max_attempts:
        return RolloutStatus.QUEUING
    return RolloutStatus.FAILED


def expired_status(
    config: RolloutConfig, *, started_at: datetime, last_heartbeat_at: datetime, now: datetime
) -> AttemptStatus | None:
    """``timeout`` or ``lost`` when a running attempt is past a deadline at ``now``, else None.

    The timeout wins when both deadlines passed: it is the more specific cause.
    """
    if config.timeout_s is not None and (now - started_at).total_seconds() >= config.timeout_s:
        return AttemptStatus.TIMEOUT
    if (now - last_heartbeat_at).total_seconds() >= config.heartbeat_timeout_s:
        return AttemptStatus.LOST
    return None


def expired_error(config: RolloutConfig, outcome: AttemptStatus) -> str:
    """Return the error message recorded on an attempt the watchdog ended with ``outcome``."""
    if outcome is AttemptStatus.TIMEOUT:
        return f"attempt timed out after {config.timeout_s:g} s"
    return f"attempt lost: no heartbeat for {config.heartbeat_timeout_s:g} s"


def same_rollout_request(existing: Rollout, request: RolloutCreate) -> bool:
    """Whether re-enqueuing ``request`` under ``existing``'s id is a harmless repeat."""
    return (
        existing.input == request.input
        and existing.mode == request.mode
        and existing.task_id == request.task_id
        and existing.config == request.config
        and existing.metadata == request.metadata
        and (
            request.resources_version is None
            or request.resources_version == existing.resources_version
        )
    )


# -- enqueue ----------------------------------------------------------------------------------


def repeated_rollout(existing: Rollout, request: RolloutCreate) -> Rollout:
    """Return ``existing`` for a request that repeats it, or raise ``Conflict``.

    An enqueue that names a stored rollout id is a retry when its content is the same (see
    ``same_rollout_request``) and gets the stored rollout back, in whatever state it is now;
    other content under that id is refused.
    """
    if not same_rollout_request(existing, request):
        raise Conflict(
            f"rollout {existing.rollout_id} already exists with other content",
            detail={"rollout_id": existing.rollout_id},
        )
    return existing


def new_rollout(
    request: RolloutCreate, *, fresh_id: str, position: int, latest_resources: int, now: datetime
) -> Rollout:
    """Return the queuing rollout an enqueue ``request`` creates, or raise ``NotFound``.

    ``fresh_id`` is used when the request names no id; ``position`` is the rollout's place in
    the queue (one past the last given out); ``latest_resources`` is the newest resources
    version, 0 when there is none. A rollout runs with the version it names, which must exist,
    or else with the newest one at enqueue time (none while no resources were added).
    """
    version = request.resources_version
    if version is not None and not 1 <= version <= latest_resources:
        raise NotFound(f"resources version {version} does not exist")
    return Rollout(
        rollout_id=request.rollout_id or fresh_id,
        input=request.input,
        mode=request.mode,
        task_id=request.task_id,
        resources_version=version if version is not None else (latest_resources or None),
        status=RolloutStatus.QUEUING,
        config=request.config,
        metadata=request.metadata,
        position=position,
        enqueued_at=now,
    )


# -- claim ------------------------------------------------------------------------------------


def is_claimable(rollout: Rollout, modes: Sequence[Mode] | None) -> bool:
    """Whether a claim asking for ``modes`` (None: any) may take ``rollout`` now.

    Only a queuing rollout is claimed. The SQL backends say this as the ``WHERE`` of their
    claim query.
    """
    return rollout.status is RolloutStatus.QUEUING and (modes is None or rollout.mode in modes)


def claim_order(rollout: Rollout) -> int:
    """Return the key claims take claimable rollouts by, smallest first: the queue position.

    A rollout keeps the position it got at enqueue when a retry or a release puts it back in
    the queue, so it goes ahead of rollouts enqueued after it. The SQL backends say this as
    ``ORDER BY position``.
    """
    return rollout.position


def claimed(rollout: Rollout, *, worker_id: str, attempt_id: str, now: datetime) -> Claim:
    """Return the claim of a claimable ``rollout`` by ``worker_id`` at ``now``.

    The claim starts attempt ``attempt_id``, numbered one past the rollout's attempts so far,
    and leaves the rollout running; ``started_at`` stays the first claim's time.
    """
    attempt = Attempt(
        attempt_id=attempt_id,
        rollout_id=rollout.rollout_id,
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
    return Claim(rollout=rollout, attempt=attempt)


# -- workers and heartbeats -------------------------------------------------------------------


def is_running_on(attempt: Attempt, worker_id: str) -> bool:
    """Whether ``attempt`` is running on ``worker_id``: what a heartbeat may keep alive.

    A heartbeat for another worker's attempt or for a final one changes nothing, and a
    worker's list of running attempts holds only these. The SQL backends say this as
    ``worker_id = :worker AND status = 'running'``.
    """
    return attempt.worker_id == worker_id and attempt.status is AttemptStatus.RUNNING


def seen_worker(
    previous: Worker | None,
    worker_id: str,
    *,
    now: datetime,
    running: list[str],
    metadata: dict[str, JsonValue] | None = None,
) -> Worker:
    """Return the worker record after it was heard from at ``now`` (a heartbeat or a claim).

    ``running`` is its running attempts (checked with ``is_running_on``); ``metadata`` None
    keeps what the worker reported before.
    """
    if metadata is None:
        metadata = previous.metadata if previous is not None else {}
    return Worker(
        worker_id=worker_id, last_heartbeat_at=now, running_attempt_ids=running, metadata=metadata
    )


# -- reports, expiry and the rollout's next state ---------------------------------------------


def reported_attempt(
    attempt: Attempt,
    *,
    status: AttemptStatus | Unset,
    error: str | Unset | None,
    now: datetime,
) -> Attempt | None:
    """Return ``attempt`` after a worker's report at ``now``, or None when nothing changes.

    A report on a running attempt sets its error and, with a final ``status``, ends it (the
    caller then moves the rollout with ``rollout_after_attempt``). A report on an attempt that
    is already final changes nothing it says: it is kept aside as ``late_status`` and
    ``late_error``, so a worker that outlived its timeout is still heard. Raises
    ``InvalidRequest`` for a status only the store may set.
    """
    if status is not UNSET and status is not AttemptStatus.RUNNING:
        check_reported_status(attempt.attempt_id, status)
    if attempt.is_terminal:
        if status is UNSET and error is UNSET:
            return None
        return attempt.model_copy(
            update={
                "late_status": status if status is not UNSET else attempt.late_status,
                "late_error": error if error is not UNSET else attempt.late_error,
            }
        )
    update: dict[str, object] = {}
    if error is not UNSET:
        update["error"] = error
    if status is not UNSET and status is not AttemptStatus.RUNNING:
        update.update(status=status, ended_at=now)
    return attempt.model_copy(update=update)


def expired_attempt(attempt: Attempt, config: RolloutConfig, now: datetime) -> Attempt | None:
    """Return running ``attempt`` ended as ``timeout`` or ``lost`` at ``now``, or None.

    None means it is within both deadlines (see ``expired_status``); the ended attempt carries
    the error ``expired_error`` writes.
    """
    outcome = expired_status(
        config, started_at=attempt.started_at, last_heartbeat_at=attempt.last_heartbeat_at, now=now
    )
    if outcome is None:
        return None
    return attempt.model_copy(
        update={"status": outcome, "ended_at": now, "error": expired_error(config, outcome)}
    )


def attempts_used(statuses: Iterable[AttemptStatus]) -> int:
    """Count the attempts, given by status, that use up one of the rollout's ``max_attempts``.

    The SQL backends count the same with ``status NOT IN UNCOUNTED_ATTEMPT_STATUSES``.
    """
    return sum(1 for s in statuses if s not in UNCOUNTED_ATTEMPT_STATUSES)


def rollout_after_attempt(rollout: Rollout, ended: Attempt, used: int) -> Rollout | None:
    """Return ``rollout`` moved on after its attempt ``ended`` ended, or None if it stays.

    A rollout that is no longer running (cancelled while the attempt ran) stays as it is.
    Otherwise its next status comes from ``rollout_status_after_attempt`` (``used`` counts its
    attempts per ``attempts_used``, ``ended`` included); back in the queue it keeps its
    position, and a final rollout takes the attempt's end time and error.
    """
    if rollout.status is not RolloutStatus.RUNNING:
        return None
    after = rollout_status_after_attempt(rollout.config, ended.status, used)
    check_rollout_transition(rollout.rollout_id, rollout.status, after)
    update: dict[str, object] = {"status": after}
    if after is not RolloutStatus.QUEUING:
        update.update(ended_at=ended.ended_at, error=ended.error)
    return rollout.model_copy(update=update)


# -- cancel -----------------------------------------------------------------------------------


def check_caller_status(rollout_id: str, old: RolloutStatus, new: RolloutStatus) -> None:
    """Raise unless a caller may move a rollout from ``old`` to ``new``.

    A caller may only cancel (``InvalidRequest`` otherwise), and only a rollout that is not
    final yet (``InvalidTransition``); the other moves are the store's.
    """
    if new is not RolloutStatus.CANCELLED:
        raise InvalidRequest(
            f"rollout {rollout_id}: only 'cancelled' may be set by a caller, not {new.value!r}"
        )
    check_rollout_transition(rollout_id, old, new)


def cancelled(
    rollout: Rollout, current: Attempt | None, now: datetime
) -> tuple[Rollout, Attempt | None]:
    """Return ``rollout`` cancelled at ``now``, and its ``current`` attempt if that stops.

    ``current`` is the rollout's latest attempt (None before the first claim); a running one is
    cancelled with it, a final one is left as it is (the second item is then None). Check the
    move with ``check_caller_status`` first.
    """
    stopped = None
    if current is not None and current.status is AttemptStatus.RUNNING:
        stopped = current.model_copy(update={"status": AttemptStatus.CANCELLED, "ended_at": now})
    return rollout.model_copy(update={"status": RolloutStatus.CANCELLED, "ended_at": now}), stopped
