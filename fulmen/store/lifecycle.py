"""The lifecycle rules of rollouts and attempts: data plus pure functions, shared by every backend.

::

    rollout:  queuing ──claim──► running ──► succeeded | failed | cancelled
                 ▲                  │
                 └── retry/release ─┘
    attempt:  running ──► succeeded | failed | timeout | lost | cancelled | released

Terminal states are final. Backends call these functions inside their own transactions; nothing
here does I/O or reads a clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from fulmen.errors import InvalidRequest, InvalidTransition
from fulmen.types import AttemptStatus, Rollout, RolloutConfig, RolloutCreate, RolloutStatus

__all__ = [
    "ATTEMPT_TERMINAL",
    "REPORTABLE_ATTEMPT_STATUSES",
    "ROLLOUT_TERMINAL",
    "ROLLOUT_TRANSITIONS",
    "check_rollout_transition",
    "check_reported_status",
    "expired_error",
    "expired_status",
    "rollout_status_after_attempt",
    "same_rollout_request",
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
