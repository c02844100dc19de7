"""Dynamic sampling: a GRPO step that trains only groups with a signal, where it can.

A group whose rewards all came out equal gives every rollout an advantage of 0, so sparse
rewards (a base model that solves few problems, or a task it always solves) leave steps with
little or nothing to learn. ``sample_step`` runs a step's rollouts as the synchronous loop does,
then applies ``DynamicSampling``: extra rollouts for each flat group (they join its group),
then, while fewer than ``tasks_per_step`` groups have a signal, up to ``max_redraws`` draws of
other tasks in place of the flat ones (which are dropped). ``FlatTasks`` remembers which tasks
were flat, so that a task coming up again within ``skip_flat_for`` steps is replaced before it
runs (an online difficulty filter). Everything it ran is returned, with ``sampling/*`` metrics
that state the cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.grpo.config import DynamicSampling
from fulmen.transitions.trajectory import TransitionOptions
from fulmen.types import Mode, Rollout, Trajectory

__all__ = ["FlatTasks", "SampledStep", "filter_reach", "has_signal", "sample_step"]

# Rewards closer than this are equal: a group of them has no advantage (advantages.py zeroes it).
_EQUAL = 1e-9


def has_signal(rewards: Sequence[float | None]) -> bool:
    """Say whether a group's rewards differ: at least two rewards, not all equal."""
    scored = [r for r in rewards if r is not None]
    return len(scored) >= 2 and max(scored) - min(scored) > _EQUAL


class FlatTasks:
    """The step at which each task last had a group without signal (the difficulty filter)."""

    def __init__(self, skip_for: int) -> None:
        self._skip_for = skip_for
        self._flat_at: dict[str, int] = {}

    def note(self, task_id: str, step: int, *, flat: bool) -> None:
        """Record how ``task_id``'s group at ``step`` came out."""
        if flat:
            self._flat_at[task_id] = step
        else:
            self._flat_at.pop(task_id, None)

    def skips(self, task_id: str, step: int) -> bool:
        """Say whether ``task_id`` is to be replaced at ``step``."""
        flat_at = self._flat_at.get(task_id)
        return flat_at is not None and step - flat_at <= self._skip_for


def filter_reach(
    settings: DynamicSampling, *, train_tasks: int, tasks_per_step: int, steps: int
) -> tuple[bool, str] | None:
    """Say from which step ``skip_flat_for`` can act, and whether that is within ``steps``.

    The filter replaces a task that comes up again; a step's first draw goes through the
    training tasks epoch after epoch, so no task comes twice before the step that starts the
    second epoch (a redraw draws from every task and can bring a flat one back sooner). With
    2,000 tasks and 4 a step that is step 501: a shorter run never filters anything. After
    that a task comes up about once an epoch, so a ``skip_flat_for`` shorter than an epoch's
    steps catches only the tasks drawn near an epoch's turn; the message says so. Returns
    ``(acts, message)``, or ``None`` where the filter is off or redraws can reach it.
    """
    if not settings.skip_flat_for or settings.redraw:
        return None
    epoch_steps = train_tasks // tasks_per_step  # whole steps of the first epoch
    first = epoch_steps + 1  # the first step (1-based) a task can come again
    reach = (
        f"no task is drawn twice before step {first} ({train_tasks} training tasks, "
        f"{tasks_per_step} a step)"
    )
    if steps < first:
        return False, (
            f"algorithm.dynamic_sampling.skip_flat_for cannot act in this run of {steps} "
            f"steps: {reach}; give fewer training tasks, or leave it out"
        )
    message = f"algorithm.dynamic_sampling.skip_flat_for: {reach}"
    if settings.skip_flat_for < epoch_steps:
        message += (
            f"; then a task comes up about once every {epoch_steps} steps (an epoch), so "
            f"skip_flat_for: {settings.skip_flat_for} catches only tasks drawn near an epoch's "
            f"turn (at least {epoch_steps} skips a flat task for its next epoch)"
        )
    return True, message


@dataclass
class SampledStep:
    """What a step ran: every rollout and trajectory, those it trains, ``sampling/*`` figures.

    The step's reward figures are over every rollout it ran (``trajectories``); its update is
    over ``trained`` (the groups kept).
    """

    finished: list[Rollout] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    trained: list[Trajectory] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _Group:
    index: int
    task: Any
    task_id: str
    rollouts: list[Rollout] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def signal(self) -> bool:
        return has_signal([tr.final_reward for tr in self.trajectories])


async def sample_step(
    context: AlgorithmContext,
    settings: DynamicSampling,
    flat_tasks: FlatTasks,
    *,
    step: int,
    version: int,
    tasks_per_step: int,
    group_size: int,
    options: TransitionOptions,
) -> SampledStep:
    """Run ``step``'s groups under ``settings``; see the module docstring."""
    counts = {"skipped_tasks": 0, "extra_rollouts": 0, "redrawn_groups": 0, "draws": 0}
    first = context.tasks.batch(step, tasks_per_step)
    drawn = _filtered(context, flat_tasks, step, 0, first, counts)
    groups = await _run(context, drawn, version, f"s{step}", group_size, options)
    all_groups = list(groups)
    await _add_samples(context, settings, groups, f"s{step}x0", version, options, counts)
    kept = [g for g in groups if g.signal or not settings.redraw]
    draw = 0
    while settings.redraw and len(kept) < tasks_per_step and draw < settings.max_redraws:
        draw += 1
        seen = {g.index for g in all_groups}
        more = context.tasks.refill(step, draw, tasks_per_step - len(kept), seen)
        more = _filtered(context, flat_tasks, step, draw, more, counts, seen)
        if not more:
            break  # the task list ran out
        fresh = await _run(context, more, version, f"s{step}d{draw}", group_size, options)
        all_groups += fresh
        counts["redrawn_groups"] += len(fresh)
        await _add_samples(context, settings, fresh, f"s{step}x{draw}", version, options, counts)
        kept += [g for g in fresh if g.signal]
    counts["draws"] = draw
    for group in all_groups:
        flat_tasks.note(group.task_id, step, flat=not group.signal)
    finished = [r for g in all_groups for r in g.rollouts]
    metrics = {
        "sampling/groups": float(len(all_groups)),
        "sampling/flat_groups": float(sum(not g.signal for g in all_groups)),
        "sampling/trained_groups": float(len(kept)),
        "sampling/signal_groups": float(sum(g.signal for g in kept)),
        "sampling/rollouts": float(len(finished)),
        # the step's rollouts over what the step would run without dynamic sampling
        "sampling/cost": len(finished) / float(tasks_per_step * group_size),
        **{f"sampling/{k}": float(v) for k, v in counts.items()},
    }
    trajectories = [tr for g in all_groups for tr in g.trajectories]
    trained = [tr for g in kept for tr in g.trajectories]
    return SampledStep(finished, trajectories, trained, metrics)


def _filtered(
    context: AlgorithmContext,
    flat_tasks: FlatTasks,
    step: int,
    draw: int,
    batch: list[tuple[int, Any]],
    counts: dict[str, int],
    seen: set[int] | None = None,
) -> list[tuple[int, Any]]:
    """Replace the tasks of ``batch`` the difficulty filter skips (when others are left)."""
    skipped = {i for i, task in batch if flat_tasks.skips(context.tasks.task_id(i, task), step)}
    if not skipped:
        return batch
    exclude = {i for i, _ in batch} | (seen or set())
    # A draw of its own (numbered past any redraw's) so the replacements never repeat one.
    spare = iter(context.tasks.refill(step, 1000 + draw, 4 * len(batch), exclude))
    out: list[tuple[int, Any]] = []
    for pair in batch:
        if pair[0] in skipped:
            replacement = next(
                (p for p in spare if not flat_tasks.skips(context.tasks.task_id(*p), step)), None
            )
            if replacement is not None:
                counts["skipped_tasks"] += 1
                out.append(replacement)
                continue
        out.append(pair)
    return out


async def _run(
    context: AlgorithmContext,
    batch: Sequence[tuple[int, Any]],
    version: int,
    tag: str,
    group_size: int,
    options: TransitionOptions,
) -> list[_Group]:
    """Run ``group_size`` rollouts of each task of ``batch``; return them as groups."""
    finished = await context.rollouts.run(
        batch, mode=Mode.TRAIN, version=version, tag=tag, group_size=group_size
    )
    groups = [_Group(index, task, context.tasks.task_id(index, task)) for index, task in batch]
    _attach(groups, finished, await context.rollouts.trajectories(finished, options))
    return groups


async def _add_samples(
    context: AlgorithmContext,
    settings: DynamicSampling,
    groups: list[_Group],
    tag: str,
    version: int,
    options: TransitionOptions,
    counts: dict[str, int],
) -> None:
    """Give each flat group of ``groups`` ``extra_samples`` more rollouts of its task."""
    flat = [g for g in groups if not g.signal]
    if not settings.extra_samples or not flat:
        return
    batch = [(g.index, g.task) for g in flat]
    finished = await context.rollouts.run(
        batch,
        mode=Mode.TRAIN,
        version=version,
        tag=tag,
        group_size=settings.extra_samples,
    )
    counts["extra_rollouts"] += len(finished)
    _attach(flat, finished, await context.rollouts.trajectories(finished, options))


def _attach(
    groups: list[_Group], finished: Sequence[Rollout], trajectories: Sequence[Trajectory]
) -> None:
    """Add each rollout and trajectory to the group of its task."""
    by_task = {g.task_id: g for g in groups}
    for rollout in finished:
        group = by_task.get(rollout.task_id or "")
        if group is not None:
            group.rollouts.append(rollout)
    for trajectory in trajectories:
        group = by_task.get(trajectory.task_id or "")
        if group is not None:
            group.trajectories.append(trajectory)
