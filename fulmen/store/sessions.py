"""The rules for recording a closed production session that every backend shares.

``Store.record_session`` stores a session as the rollout ``session-<id>`` of mode
``production``, final (``succeeded``), with one succeeded attempt per time the session was
recorded. These pure functions build that rollout and attempt and say when a request conflicts
with what is stored; each backend only reads and writes the rows.
"""

from __future__ import annotations

from datetime import datetime

from fulmen.errors import Conflict
from fulmen.types import Attempt, AttemptStatus, Claim, Mode, Rollout, RolloutConfig, RolloutStatus
from fulmen.types.sessions import SessionCreate

__all__ = [
    "new_session_attempt",
    "new_session_rollout",
    "next_session_rollout",
    "replayed_session",
]


def new_session_rollout(request: SessionCreate, *, position: int, now: datetime) -> Rollout:
    """Return the rollout of a session recorded for the first time, with its one attempt."""
    return Rollout(
        rollout_id=request.rollout_id,
        input=request.input,
        mode=Mode.PRODUCTION,
        status=RolloutStatus.SUCCEEDED,
        metadata=request.metadata,
        position=position,
        attempt_count=1,
        enqueued_at=now,
        started_at=now,
        ended_at=now,
        config=RolloutConfig(),
    )


def next_session_rollout(rollout: Rollout, request: SessionCreate, now: datetime) -> Rollout:
    """Return ``rollout`` with one more recorded attempt, or raise ``Conflict``.

    The id ``session-<id>`` may already name a rollout that is not a finished production
    session (enqueued by hand, say); the session is then refused rather than mixed into it.
    """
    if rollout.mode is not Mode.PRODUCTION or rollout.status is not RolloutStatus.SUCCEEDED:
        raise Conflict(
            f"rollout {rollout.rollout_id!r} exists and is not a finished production session "
            f"(mode {rollout.mode.value}, status {rollout.status.value})",
            detail={"rollout_id": rollout.rollout_id, "session_id": request.session_id},
        )
    return rollout.model_copy(update={"attempt_count": rollout.attempt_count + 1, "ended_at": now})


def new_session_attempt(rollout: Rollout, request: SessionCreate, now: datetime) -> Attempt:
    """Return the succeeded attempt numbered ``rollout.attempt_count`` (already counted)."""
    return Attempt(
        attempt_id=request.attempt_id,
        rollout_id=rollout.rollout_id,
        number=rollout.attempt_count,
        worker_id=request.worker_id,
        status=AttemptStatus.SUCCEEDED,
        started_at=now,
        ended_at=now,
        last_heartbeat_at=now,
    )


def replayed_session(rollout: Rollout, attempt: Attempt, request: SessionCreate) -> Claim:
    """Return what a retried request (same ``attempt_id``) stored, or raise ``Conflict``."""
    if attempt.rollout_id != request.rollout_id:
        raise Conflict(
            f"attempt {attempt.attempt_id!r} already belongs to rollout {attempt.rollout_id!r}",
            detail={"attempt_id": attempt.attempt_id, "session_id": request.session_id},
        )
    return Claim(rollout=rollout, attempt=attempt)
