"""The rules for posted rewards and pruning that every backend shares.

A posted reward is idempotent by its key: the same key and content returns the stored reward,
the same key with other content is a ``Conflict``. Pruning counts a rollout as rewarded when it
has a posted reward or a reward span (``fulmen.reward``) recorded during its run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from fulmen.errors import Conflict, NotFound
from fulmen.store.clock import new_id, utc_now
from fulmen.types import Reward, RewardCreate, Rollout

__all__ = [
    "PRUNE_CHUNK",
    "REWARD_SPAN_NAME",
    "build_reward",
    "is_prunable",
    "missing_response",
    "replayed_reward",
]

REWARD_SPAN_NAME: Final = "fulmen.reward"  # fulmen.tracing.semconv.SPAN_REWARD (store stays below)
PRUNE_CHUNK: Final = 500  # rollouts deleted per transaction, so no transaction grows unbounded


def replayed_reward(stored: Reward, request: RewardCreate) -> Reward:
    """Return ``stored`` for a retried post of the same key, or raise ``Conflict``."""
    if not stored.same_request(request):
        raise Conflict(
            f"reward key {stored.key!r} was already used for other content",
            detail={"key": stored.key, "rollout_id": stored.rollout_id},
        )
    return stored


def build_reward(
    request: RewardCreate, *, rollout_id: str, attempt_id: str | None, sequence: int
) -> Reward:
    """Return the stored form of ``request`` once its rollout and sequence number are known."""
    return Reward(
        key=request.key or new_id("rw"),
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        response_id=request.response_id,
        session_id=request.session_id,
        values=request.values,
        primary=request.primary,
        metadata=request.metadata,
        sequence=sequence,
        created_at=utc_now(),
    )


def missing_response(response_id: str) -> NotFound:
    """Return the error for a reward naming a response id that no tracked LLM call has."""
    return NotFound(
        f"no LLM call of a rollout has response id {response_id!r}",
        detail={"response_id": response_id},
    )


def is_prunable(rollout: Rollout, ended_before: datetime) -> bool:
    """Tell whether a rollout is final and ended before ``ended_before``."""
    return rollout.is_terminal and rollout.ended_at is not None and rollout.ended_at < ended_before
