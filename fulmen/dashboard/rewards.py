"""The reward of a rollout as the dashboard shows it, read through the ``Store`` interface.

A rollout's reward is the primary reward of its latest attempt, span or posted, exactly as the
training computes it (``fulmen.transitions.signals.latest_reward``). Reading it costs two store
queries (spans, posted rewards), three for a retried rollout (its attempts first), so the
rewards of final rollouts are kept for a short time: a reward posted to a finished rollout
shows up within ``ttl_s``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.store.reading import read_spans
from fulmen.transitions.signals import latest_reward

if TYPE_CHECKING:
    from fulmen.store.base import Store
    from fulmen.types import Rollout

__all__ = ["RewardReader", "read_rollout_reward"]


async def read_rollout_reward(store: Store, rollout: Rollout) -> float | None:
    """Return the primary reward of the rollout's latest attempt; ``None`` when it has none."""
    if rollout.attempt_count == 0:
        return None
    if rollout.attempt_count == 1:
        # Everything recorded for the rollout belongs to its only attempt: two queries, not three.
        spans, posted = await asyncio.gather(
            read_spans(store, rollout.rollout_id), store.list_rewards(rollout.rollout_id)
        )
        return latest_reward(spans, posted)
    attempts, posted = await asyncio.gather(
        store.list_attempts(rollout.rollout_id), store.list_rewards(rollout.rollout_id)
    )
    attempt_id = attempts[-1].attempt_id
    spans = await read_spans(store, rollout.rollout_id, attempt_id=attempt_id)
    return latest_reward(spans, [r for r in posted if r.attempt_id in (None, attempt_id)])


class RewardReader:
    """Reads rollout rewards, keeping those of final rollouts for ``ttl_s`` seconds.

    Args:
        store: where rewards are read.
        ttl_s: how long a final rollout's reward is reused before it is read again.
        capacity: how many rewards are kept at most (least recently used go first).
    """

    def __init__(self, store: Store, *, ttl_s: float = 30.0, capacity: int = 20_000) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._capacity = capacity
        self._kept: OrderedDict[str, tuple[float, float | None]] = OrderedDict()

    async def rewards(self, rollouts: Sequence[Rollout]) -> list[float | None]:
        """Return the reward of each rollout, reading the ones not kept concurrently."""
        now = time.monotonic()
        found: dict[str, float | None] = {}
        missing: list[Rollout] = []
        for rollout in rollouts:
            kept = self._kept.get(rollout.rollout_id)
            if kept is not None and now - kept[0] < self._ttl_s:
                found[rollout.rollout_id] = kept[1]
                self._kept.move_to_end(rollout.rollout_id)
            else:
                missing.append(rollout)
        read = await asyncio.gather(*(read_rollout_reward(self._store, r) for r in missing))
        for rollout, value in zip(missing, read, strict=True):
            found[rollout.rollout_id] = value
            if rollout.is_terminal:  # a running rollout's reward may still change
                self._kept[rollout.rollout_id] = (now, value)
                self._kept.move_to_end(rollout.rollout_id)
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)
        return [found[r.rollout_id] for r in rollouts]
