"""What came of a release's sessions: each session's arm and its latest reward, from the store.

The gateway writes every kept production session as the rollout ``session-<id>`` of mode
``production``, its release and arm in the rollout's metadata. ``ReleaseOutcomes`` pages
through the production rollouts it has not seen yet (a cursor, so each is listed once) and
keeps the ones of its release; then it reads every one's rewards again, because a reward may
arrive hours after its session (one request per session per read: a window every few minutes
over thousands of sessions is a few thousand small reads). A session's reward is its latest
primary reward (``fulmen.transitions.signals.latest_reward``); a session without one counts as a
session, not as a reward.

Sessions that capture's sampling did not keep are not in the store, so they are not counted:
the two hashes are independent, so the sample keeps the same share of each arm.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from fulmen.store.base import Store
from fulmen.store.reading import iter_rollouts
from fulmen.transitions.signals import latest_reward
from fulmen.types import Mode, RolloutQuery
from fulmen.types.releases import ReleaseArm

__all__ = ["ReleaseOutcomes"]

_CONCURRENT_READS = 16


class ReleaseOutcomes:
    """Reads one release's sessions and rewards from ``store`` (see the module docstring).

    Args:
        store: the store the gateway writes sessions to.
        name: the release's name.
    """

    def __init__(self, store: Store, name: str) -> None:
        self._store = store
        self._name = name
        self._cursor: int | None = None
        self._arms: dict[str, ReleaseArm] = {}  # session rollout id -> arm

    async def read(self) -> dict[ReleaseArm, tuple[int, list[float]]]:
        """Return, per arm, its sessions so far and the rewards of those that have one."""
        query = RolloutQuery(mode=Mode.PRODUCTION, cursor=self._cursor, limit=1000)
        async for rollout in iter_rollouts(self._store, query):
            self._cursor = rollout.position
            arm = _arm_of(rollout.metadata, self._name)
            if arm is not None:
                self._arms[rollout.rollout_id] = arm
        limit = asyncio.Semaphore(_CONCURRENT_READS)

        async def reward_of(rollout_id: str) -> float | None:
            async with limit:
                return latest_reward([], await self._store.list_rewards(rollout_id))

        ids = list(self._arms)
        rewards = await asyncio.gather(*(reward_of(i) for i in ids))
        out: dict[ReleaseArm, tuple[int, list[float]]] = {arm: (0, []) for arm in ReleaseArm}
        for rollout_id, reward in zip(ids, rewards, strict=True):
            arm = self._arms[rollout_id]
            sessions, values = out[arm]
            if reward is not None:
                values.append(reward)
            out[arm] = (sessions + 1, values)
        return out


def _arm_of(metadata: Mapping[str, object], name: str) -> ReleaseArm | None:
    if metadata.get("release") != name:
        return None
    arm = metadata.get("arm")
    return ReleaseArm(arm) if arm in ("incumbent", "candidate") else None
