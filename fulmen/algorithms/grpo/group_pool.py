"""The rollout groups an asynchronous GRPO loop has running or waiting, with their policies.

A ``GroupPool`` launches GRPO groups (``group_size`` rollouts of one task, one
``context.rollouts.run`` call each) as asyncio tasks that run while the trainer updates,
remembers which policy (update count) sampled each group, hands out finished groups oldest
first and drops those whose policy is more than ``max_staleness`` updates behind the current
one. A group still running when a step takes its batch stays in the pool for a later step (it
is *carried*), so a slow group never stalls a step. It also keeps two clocks: how long the
trainer waited for finished groups, and how long no group was running (the engine had nothing
to sample and waited for the next weights).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.types import Mode, Rollout

__all__ = ["FinishedGroup", "GroupPool", "Harvest", "group_rollouts"]

# How often a wait for groups wakes to check that the runner is still alive.
_CHECK_EVERY_S = 5.0


@dataclass(frozen=True)
class FinishedGroup:
    """A finished group: its rollouts and the policy (update count) that sampled them."""

    policy: int
    rollouts: list[Rollout]


@dataclass(frozen=True)
class Harvest:
    """What ``GroupPool.take`` returns: the batch's groups and what was dropped on the way."""

    groups: list[FinishedGroup]
    dropped: list[FinishedGroup]
    waited_s: float


class GroupPool:
    """Launches, tracks and hands out GRPO groups for ``AsyncGRPOLoop`` (module docstring).

    Args:
        context: the stage's services (``rollouts.run`` starts and waits for rollouts).
        group_size: rollouts per task.
        max_staleness: finished groups more than this many updates old are dropped.
        first_round: number of the first launch round (a resumed stage starts past the rounds
            it already drew, so task draws and rollout ids stay unique).
    """

    def __init__(
        self,
        context: AlgorithmContext,
        *,
        group_size: int,
        max_staleness: int,
        first_round: int = 0,
    ) -> None:
        self._context = context
        self._group_size = group_size
        self._max_staleness = max_staleness
        self._round = first_round
        self._running: set[asyncio.Task[FinishedGroup]] = set()
        self._finished: list[FinishedGroup] = []
        self._failed: BaseException | None = None
        self._idle_since: float | None = None  # counted from the first launch on
        self._idle_s = 0.0

    @property
    def pending(self) -> int:
        """Groups running or finished and not yet handed out."""
        return len(self._running) + len(self._finished)

    def launch_round(self, tasks_per_round: int, *, version: int, policy: int) -> None:
        """Start one group per task of the next task draw, sampled with resources ``version``.

        ``policy`` is the update count of the weights that ``version`` names.
        """
        batch = self._context.tasks.batch(self._round, tasks_per_round)
        for k, pair in enumerate(batch):
            tag = f"q{self._round}g{k}"
            task = asyncio.create_task(self._run_group(pair, version, policy, tag))
            task.add_done_callback(self._on_done)
            self._running.add(task)
        self._round += 1
        if self._running and self._idle_since is not None:
            self._idle_s += time.perf_counter() - self._idle_since
            self._idle_since = None

    async def take(self, n: int, *, policy: int) -> Harvest:
        """Wait for ``n`` finished groups at most ``max_staleness`` updates behind ``policy``.

        Oldest first (they are the closest to being dropped). Too-stale groups met on the way
        are dropped and returned in ``Harvest.dropped``. Returns early with fewer groups only
        when nothing is left running.
        """
        started = time.perf_counter()
        dropped: list[FinishedGroup] = []
        while True:
            if self._failed is not None:
                raise self._failed
            self._finished.sort(key=lambda g: g.policy)  # stable: launch order within a policy
            dropped += [g for g in self._finished if policy - g.policy > self._max_staleness]
            self._finished = [g for g in self._finished if g not in dropped]
            if len(self._finished) >= n or not self._running:
                groups, self._finished = self._finished[:n], self._finished[n:]
                return Harvest(groups, dropped, time.perf_counter() - started)
            await asyncio.wait(
                self._running, timeout=_CHECK_EVERY_S, return_when=asyncio.FIRST_COMPLETED
            )
            self._context.run.check_services()

    def idle_seconds(self) -> float:
        """Seconds no group was running since the last call (the engine waited for weights)."""
        now = time.perf_counter()
        idle = self._idle_s + (now - self._idle_since if self._idle_since is not None else 0.0)
        self._idle_s = 0.0
        if self._idle_since is not None:
            self._idle_since = now
        return idle

    async def drain(self) -> None:
        """Wait for the running groups to finish (their rollouts end in the store), keep none."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._finished.clear()

    async def aclose(self) -> None:
        """Stop waiting for the running groups (the next start cancels their rollouts)."""
        running = list(self._running)
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _on_done(self, task: asyncio.Task[FinishedGroup]) -> None:
        """Move a group that ended out of the running set (the clock starts when none runs)."""
        self._running.discard(task)
        if not self._running and self._idle_since is None:
            self._idle_since = time.perf_counter()
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._failed = self._failed or error  # raised by the next ``take``
        else:
            self._finished.append(task.result())

    async def _run_group(
        self, pair: tuple[int, Any], version: int, policy: int, tag: str
    ) -> FinishedGroup:
        finished = await self._context.rollouts.run(
            [pair], mode=Mode.TRAIN, version=version, tag=tag, group_size=self._group_size
        )
        return FinishedGroup(policy, finished)


def group_rollouts(groups: Sequence[FinishedGroup]) -> list[Rollout]:
    """Every rollout of ``groups``, in order."""
    return [r for g in groups for r in g.rollouts]
