"""``GroupPool``: groups carried over while running, too-stale groups dropped, oldest first.

The pool is driven through a small ``AlgorithmContext`` whose ``rollouts.run`` finishes a group
when the test says so, so the order in which groups end is chosen here, not by timing.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.grpo import group_pool
from fulmen.algorithms.grpo.group_pool import GroupPool
from fulmen.types import Mode, Rollout, RolloutConfig, RolloutStatus


class _Tasks:
    """Task draws numbered by step."""

    def batch(self, step: int, n: int) -> list[tuple[int, Any]]:
        return [(step * n + k, {"id": f"task{step}-{k}"}) for k in range(n)]


class _Rollouts:
    """Group runs that end on request."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}

    async def run(
        self, batch: Any, *, mode: Mode, version: int, tag: str, group_size: int = 1
    ) -> list[Rollout]:
        gate = self.gates.setdefault(tag, asyncio.Event())
        await gate.wait()
        return [_rollout(f"{tag}-r{j}", version) for j in range(group_size)]


class _Run:
    """Counts the checks that the services still run."""

    def __init__(self) -> None:
        self.checks = 0

    def check_services(self) -> None:
        self.checks += 1


class _Context:
    """Just what ``GroupPool`` uses: task draws, group runs that end on request, checks."""

    def __init__(self) -> None:
        self.tasks = _Tasks()
        self.rollouts = _Rollouts()
        self.run = _Run()

    def finish(self, tag: str) -> None:
        self.rollouts.gates.setdefault(tag, asyncio.Event()).set()


def _rollout(rollout_id: str, version: int) -> Rollout:
    return Rollout(
        rollout_id=rollout_id,
        input={},
        mode=Mode.TRAIN,
        resources_version=version,
        status=RolloutStatus.SUCCEEDED,
        config=RolloutConfig(),
        position=0,
        enqueued_at=datetime.now(UTC),
    )


def _pool(context: _Context, *, max_staleness: int = 1) -> GroupPool:
    return GroupPool(cast(AlgorithmContext, context), group_size=2, max_staleness=max_staleness)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_running_group_is_carried_to_the_next_step_instead_of_stalling_it() -> None:
    async def scenario() -> None:
        context = _Context()
        pool = _pool(context)
        pool.launch_round(2, version=10, policy=0)  # groups q0g0, q0g1
        context.finish("q0g1")
        first = await asyncio.wait_for(pool.take(1, policy=0), 5)
        assert [r.rollout_id for g in first.groups for r in g.rollouts] == ["q0g1-r0", "q0g1-r1"]
        assert pool.pending == 1  # q0g0 still running: carried, not waited for
        context.finish("q0g0")
        second = await asyncio.wait_for(pool.take(1, policy=1), 5)  # one update later
        assert [g.policy for g in second.groups] == [0] and not second.dropped
        assert second.groups[0].rollouts[0].rollout_id == "q0g0-r0"
        assert pool.pending == 0

    asyncio.run(scenario())


def test_groups_older_than_max_staleness_are_dropped_and_returned() -> None:
    async def scenario() -> None:
        context = _Context()
        pool = _pool(context, max_staleness=1)
        pool.launch_round(1, version=10, policy=0)  # q0g0
        pool.launch_round(1, version=11, policy=1)  # q1g0
        context.finish("q0g0")
        context.finish("q1g0")
        await _settle()
        harvest = await asyncio.wait_for(pool.take(2, policy=2), 5)
        assert [g.policy for g in harvest.dropped] == [0]  # 2 updates old > 1
        assert [g.policy for g in harvest.groups] == [1]  # fewer: nothing else is running
        assert pool.pending == 0

    asyncio.run(scenario())


def test_oldest_groups_are_handed_out_first() -> None:
    async def scenario() -> None:
        context = _Context()
        pool = _pool(context, max_staleness=3)
        pool.launch_round(1, version=11, policy=1)  # q0g0
        pool.launch_round(1, version=10, policy=0)  # q1g0, from an older policy
        context.finish("q0g0")
        context.finish("q1g0")
        await _settle()
        harvest = await asyncio.wait_for(pool.take(1, policy=1), 5)
        assert [g.policy for g in harvest.groups] == [0]
        assert pool.pending == 1

    asyncio.run(scenario())


class _Clock:
    """Stands in for ``time`` in ``group_pool``: ``perf_counter`` moves only on ``advance``.

    Steps are binary fractions, so the idle times the pool adds up are exact.
    """

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_idle_clock_counts_only_time_with_no_group_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fake clock: real time between two calls (a preemption, a GC pause) would add to idle.
    clock = _Clock()
    monkeypatch.setattr(group_pool, "time", clock)

    async def scenario() -> None:
        context = _Context()
        pool = _pool(context)
        clock.advance(1.0)
        assert pool.idle_seconds() == 0.0  # nothing launched yet: not waiting for weights
        pool.launch_round(1, version=10, policy=0)
        clock.advance(0.5)
        assert pool.idle_seconds() == 0.0  # running
        context.finish("q0g0")
        await _settle()
        clock.advance(0.5)
        assert pool.idle_seconds() == 0.5  # nothing running since the group finished
        clock.advance(0.25)
        pool.launch_round(1, version=11, policy=1)
        clock.advance(2.0)
        assert pool.idle_seconds() == 0.25  # the clock stopped at the launch
        await pool.aclose()

    asyncio.run(scenario())


def test_a_failed_group_surfaces_in_take() -> None:
    class _Broken(_Rollouts):
        async def run(self, batch: Any, **kwargs: Any) -> list[Rollout]:
            raise TimeoutError("3 rollouts did not finish")

    async def scenario() -> None:
        context = _Context()
        context.rollouts = _Broken()
        pool = _pool(context)
        pool.launch_round(1, version=10, policy=0)
        await _settle()
        with pytest.raises(TimeoutError, match="did not finish"):
            await asyncio.wait_for(pool.take(1, policy=0), 5)

    asyncio.run(scenario())
