"""Dynamic sampling's choices over a step's groups (``fulmen.algorithms.grpo.dynamic_sampling``).

The context here stands in for the trainer's only in what ``sample_step`` asks of it (task
draws, group runs, their trajectories); each task's rewards are scripted, so which groups are
flat is known. The whole path on the real stack and the tiny model is in
``tests/trainer/test_dynamic_sampling_run.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from fulmen.algorithms.grpo.config import DynamicSampling, GRPOAlgorithmConfig
from fulmen.algorithms.grpo.dynamic_sampling import (
    FlatTasks,
    filter_reach,
    has_signal,
    sample_step,
)
from fulmen.trainer.data import TaskSampler
from fulmen.transitions.trajectory import TransitionOptions
from fulmen.types import Mode, Rollout, RolloutStatus, Trajectory
from fulmen.types.rollout import RolloutConfig


class _Tasks:
    """Task draws from a real ``TaskSampler``."""

    def __init__(self, tasks: list[str]) -> None:
        self.sampler = TaskSampler(tasks, seed=0)

    def batch(self, step: int, n: int) -> list[tuple[int, Any]]:
        return self.sampler.batch(step, n)

    def refill(
        self, step: int, draw: int, n: int, exclude: Collection[int] = ()
    ) -> list[tuple[int, Any]]:
        return self.sampler.refill(step, draw, n, exclude)

    def task_id(self, index: int, task: Any) -> str:
        return f"{task}-{index}"


class _Rollouts:
    """Group runs that end at once; each rollout's reward from its task's script."""

    def __init__(self, tasks: _Tasks) -> None:
        self._tasks = tasks
        self.scripts: dict[str, Any] = {}
        self.tags: list[str] = []

    async def run(
        self, batch: Sequence[tuple[int, Any]], *, mode: Mode, version: int, tag: str,
        group_size: int = 1,
    ) -> list[Rollout]:  # fmt: skip
        self.tags.append(tag)
        return [
            _rollout(f"{tag}-t{k}-r{j}", self._tasks.task_id(index, task))
            for k, (index, task) in enumerate(batch)
            for j in range(group_size)
        ]

    async def trajectories(
        self, rollouts: Sequence[Rollout], options: TransitionOptions
    ) -> list[Trajectory]:
        out = []
        for rollout in rollouts:
            assert rollout.task_id is not None
            kind = rollout.task_id.split("-")[0]
            script = self.scripts.setdefault(rollout.task_id, _script(kind))
            reward = next(script)
            trajectory = Trajectory(
                rollout_id=rollout.rollout_id, task_id=rollout.task_id, final_reward=reward
            )
            out.append(trajectory)
        return out


class _Context:
    """Just the ``tasks`` and ``rollouts`` that ``sample_step`` uses."""

    def __init__(self, tasks: list[str]) -> None:
        self.tasks = _Tasks(tasks)
        self.rollouts = _Rollouts(self.tasks)


def _script(kind: str) -> Any:
    """Rewards in turn: "flat" always 1.0, "mixed" alternating, "late" flat for 4 first."""
    return {
        "flat": itertools.repeat(1.0),
        "mixed": itertools.cycle([0.0, 1.0]),
        "late": itertools.chain([0.0] * 4, itertools.cycle([1.0, 0.0])),
    }[kind]


def _rollout(rollout_id: str, task_id: str) -> Rollout:
    return Rollout(
        rollout_id=rollout_id, input={}, mode=Mode.TRAIN, task_id=task_id,
        status=RolloutStatus.SUCCEEDED, config=RolloutConfig(), position=0,
        enqueued_at=datetime.now(UTC),
    )  # fmt: skip


async def _sample(context: _Context, settings: DynamicSampling, step: int = 0, **kw: Any) -> Any:
    flat = kw.pop("flat_tasks", FlatTasks(settings.skip_flat_for))
    return await sample_step(
        context,  # type: ignore[arg-type]  # only what sample_step uses
        settings,
        flat,
        step=step,
        version=1,
        tasks_per_step=kw.get("per_step", 2),
        group_size=4,
        options=TransitionOptions(),
    )


def test_a_group_has_signal_only_when_two_rewards_differ() -> None:
    assert has_signal([0.0, 1.0])
    assert not has_signal([1.0, 1.0, 1.0])
    assert not has_signal([1.0, None, None])
    assert not has_signal([])
    assert has_signal([None, 0.5, 0.25])


async def test_flat_groups_are_replaced_by_other_tasks_until_the_step_has_signal() -> None:
    context = _Context(["flat"] * 6 + ["mixed"] * 6)
    sampled = await _sample(context, DynamicSampling(redraw=True, max_redraws=8))
    metrics = sampled.metrics
    assert metrics["sampling/trained_groups"] == 2 == metrics["sampling/signal_groups"]
    trained_tasks = {tr.task_id for tr in sampled.trained}
    assert all(t.startswith("mixed") for t in trained_tasks) and len(trained_tasks) == 2
    # everything run is reported (the cost), flat groups included
    assert metrics["sampling/rollouts"] == len(sampled.finished) == 4 * metrics["sampling/groups"]
    assert metrics["sampling/flat_groups"] == metrics["sampling/groups"] - 2
    assert metrics["sampling/cost"] == metrics["sampling/groups"] / 2
    assert len(sampled.trajectories) == len(sampled.finished)
    tags = context.rollouts.tags
    assert tags[0] == "s0" and all(t.startswith("s0d") for t in tags[1:])
    # no task ran twice in a step
    assert len({r.task_id for r in sampled.finished}) == metrics["sampling/groups"]


async def test_redraws_stop_at_max_redraws() -> None:
    context = _Context(["flat"] * 12)
    sampled = await _sample(context, DynamicSampling(redraw=True, max_redraws=2))
    assert sampled.trained == []
    assert sampled.metrics["sampling/draws"] == 2
    assert sampled.metrics["sampling/groups"] == 6  # 2 drawn, then 2 redraws of 2
    assert sampled.metrics["sampling/cost"] == 3.0


async def test_without_redraw_flat_groups_are_kept() -> None:
    context = _Context(["flat"] * 4)
    sampled = await _sample(context, DynamicSampling(redraw=False, extra_samples=2))
    assert sampled.metrics["sampling/trained_groups"] == 2
    assert sampled.metrics["sampling/signal_groups"] == 0
    assert len(sampled.trained) == 2 * (4 + 2)


async def test_extra_samples_join_a_flat_group_and_can_give_it_signal() -> None:
    context = _Context(["late"] * 4)
    sampled = await _sample(context, DynamicSampling(extra_samples=2, redraw=False))
    assert sampled.metrics["sampling/extra_rollouts"] == 4
    assert sampled.metrics["sampling/signal_groups"] == 2
    by_task: dict[str | None, list[float | None]] = {}
    for tr in sampled.trained:
        by_task.setdefault(tr.task_id, []).append(tr.final_reward)
    assert sorted(len(v) for v in by_task.values()) == [6, 6]
    assert all(has_signal(v) for v in by_task.values())
    assert context.rollouts.tags == ["s0", "s0x0"]


async def test_a_task_that_was_flat_is_skipped_when_it_comes_up_within_skip_flat_for() -> None:
    tasks = ["flat"] * 2 + ["mixed"] * 8
    settings = DynamicSampling(redraw=False, skip_flat_for=3)
    flat_tasks = FlatTasks(3)
    context = _Context(tasks)
    first = await _sample(context, settings, step=0, per_step=10, flat_tasks=flat_tasks)
    assert first.metrics["sampling/flat_groups"] == 2
    # the next epoch draws every task again: the two flat ones are not among them
    later = _Context(tasks)
    later.tasks.sampler = context.tasks.sampler
    sampled = await _sample(later, settings, step=1, per_step=8, flat_tasks=flat_tasks)
    assert not any(r.task_id and r.task_id.startswith("flat") for r in sampled.finished)
    # past skip_flat_for steps they come back
    assert not flat_tasks.skips("flat-0", 4) and flat_tasks.skips("flat-0", 3)


@pytest.mark.parametrize(("train_tasks", "per_step"), [(10, 4), (8, 4), (2000, 4)])
def test_the_filter_says_from_which_step_a_task_can_come_again(
    train_tasks: int, per_step: int
) -> None:
    settings = DynamicSampling(redraw=False, skip_flat_for=10)
    reach = filter_reach(settings, train_tasks=train_tasks, tasks_per_step=per_step, steps=10**6)
    assert reach is not None and reach[0]
    first = train_tasks // per_step + 1
    assert f"before step {first} ({train_tasks} training tasks" in reach[1]
    # a filter shorter than an epoch is told it acts only at an epoch's turn
    epoch = train_tasks // per_step
    assert (f"about once every {epoch} steps" in reach[1]) == (epoch > 10)
    long = DynamicSampling(redraw=False, skip_flat_for=epoch)
    wide = filter_reach(long, train_tasks=train_tasks, tasks_per_step=per_step, steps=10**6)
    assert wide is not None and "once every" not in wide[1]
    # what it says is what the sampler draws: steps 1 .. first-1 repeat no task, step first does
    sampler = TaskSampler(list(range(train_tasks)), seed=3)
    before = [i for step in range(first - 1) for i, _ in sampler.batch(step, per_step)]
    assert len(before) == len(set(before))
    assert {i for i, _ in sampler.batch(first - 1, per_step)} & set(before)
    # a run that ends before that step is told the filter cannot act in it
    short = filter_reach(
        settings, train_tasks=train_tasks, tasks_per_step=per_step, steps=first - 1
    )
    assert short is not None and not short[0] and "cannot act in this run" in short[1]
    assert filter_reach(settings, train_tasks=train_tasks, tasks_per_step=per_step, steps=first)[0]
    # redraws draw from every task, so the filter can act at any step; off, nothing to say
    redraw = DynamicSampling(redraw=True, skip_flat_for=10)
    assert filter_reach(redraw, train_tasks=train_tasks, tasks_per_step=per_step, steps=1) is None
    off = DynamicSampling(extra_samples=4, redraw=False)
    assert filter_reach(off, train_tasks=train_tasks, tasks_per_step=per_step, steps=1) is None


def test_settings_that_would_do_nothing_are_refused() -> None:
    with pytest.raises(ValidationError, match="does nothing"):
        DynamicSampling(redraw=False)
    with pytest.raises(ValidationError, match="max_redraws has no effect"):
        DynamicSampling(redraw=False, extra_samples=1, max_redraws=3)
    with pytest.raises(ValidationError, match="async"):
        GRPOAlgorithmConfig.model_validate({"dynamic_sampling": {}, "async": {}})
