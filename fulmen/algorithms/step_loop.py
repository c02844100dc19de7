"""The one step loop every weight-updating algorithm runs: sample, update, serve, log, save.

An algorithm subclasses ``StepLoop`` and writes what is its own: ``sample`` (a step's
rollouts with the served policy, or a store's records, as the update's batch and the step's
metrics) and, where its updater differs, ``update``, ``serve``, ``report`` and ``after_step``.
The loop writes the rest once for GRPO (sync, async, per role, offline), PPO, DPO and SFT's
rounds: the served policy after each update (saved and hot-loaded under the step's name), the
step's times (``time/rollout_s``, ``time/train_s``, ``time/sync_s``, ``time/step_s``), its
log line, the checkpoint on the ``checkpoint_every`` schedule and after the last step, the
progress bar, validation on ``validation.every`` and the wall-time budget (``max_minutes``:
the step in progress finishes and is checkpointed; the stage runner then validates as after
the last step).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.parallel.config import DataParallelConfig
from fulmen.algorithms.parallel.group import data_parallel
from fulmen.algorithms.rewards import reward_metrics
from fulmen.algorithms.rollout_concurrency import concurrency_metrics
from fulmen.algorithms.serving import PolicyWriter, keep_newest, serve_policy
from fulmen.settings import PYTHON_VARIABLE
from fulmen.transitions.named_rewards import named_reward_means
from fulmen.types import Mode, Rollout, RolloutStatus, Trajectory

if TYPE_CHECKING:
    from fulmen.transitions.credit import CreditFn
    from fulmen.transitions.trajectory import TransitionOptions

__all__ = [
    "Sample",
    "Schedule",
    "ScheduledSection",
    "StepLoop",
    "StepUpdater",
    "StageSection",
    "progress_bar",
    "stage_runner",
    "run_step_groups",
    "sample_step_groups",
    "sampled_metrics",
    "step_postfix",
    "update_metrics",
]


class StepUpdater(PolicyWriter, Protocol):
    """An updater the loop drives: one update per batch, and a resumable checkpoint."""

    def save_checkpoint(self, directory: Path, /) -> object:
        """Write everything a resumed run needs (adapter, optimizer, any extra heads)."""
        ...


class ScheduledSection(Protocol):
    """The fields of an algorithm's config that say how long its stage runs and saves."""

    @property
    def steps(self) -> int:
        """Steps the stage runs."""
        ...

    @property
    def checkpoint_every(self) -> int:
        """Steps between checkpoints (the last step is always saved)."""
        ...

    @property
    def max_minutes(self) -> float | None:
        """Wall-time budget of the stage, or ``None``."""
        ...


class StageSection(ScheduledSection, Protocol):
    """A section whose updates may be shared by data-parallel ranks (``stage_runner``)."""

    @property
    def data_parallel(self) -> DataParallelConfig | None:
        """The ranks' settings, or ``None``: this process alone (unless under ``torchrun``)."""
        ...


_Section = TypeVar("_Section")
_Stage = TypeVar("_Stage", bound=StageSection)


@dataclass(frozen=True)
class Schedule:
    """How many steps a stage runs, when it checkpoints, its time budget, its steps' names.

    ``unit`` and ``digits`` name each step's served policy and checkpoint (``step-00001``;
    SFT's rounds are ``round-001``).
    """

    steps: int
    checkpoint_every: int = 1
    max_minutes: float | None = None
    unit: str = "step"
    digits: int = 5

    @classmethod
    def of(cls, section: ScheduledSection) -> Schedule:
        """Return the schedule an algorithm's config sets (``steps``, ``checkpoint_every``...)."""
        return cls(section.steps, section.checkpoint_every, section.max_minutes)

    def name(self, completed: int) -> str:
        """Return the name of the policy and checkpoint after ``completed`` steps."""
        return f"{self.unit}-{completed:0{self.digits}d}"


@dataclass
class Sample:
    """What a step sampled: the update's batch, the step's metrics, its own times, and more.

    ``detail`` carries what the algorithm's own ``report`` or ``after_step`` reads again
    (GRPO: the finished rollouts and their trajectories).
    """

    batch: Any
    metrics: dict[str, float]
    times: dict[str, float] = field(default_factory=dict)
    detail: Any = None


class StepLoop(ABC, Generic[_Section]):
    """Runs one stage's steps for a weight-updating algorithm (module docstring).

    ``config`` is the algorithm's section (``Schedule.of(config)`` reads its schedule where it
    has ``steps``). A subclass writes ``sample``; the ``updater`` is given here or set before
    ``run_steps``.
    """

    #: the metric the time of ``sample`` is logged under
    sample_time = "time/rollout_s"

    def __init__(
        self,
        config: _Section,
        context: AlgorithmContext,
        *,
        schedule: Schedule,
        updater: Any = None,
    ) -> None:
        self.config = config
        self.context = context
        self.schedule = schedule
        self.updater = updater
        self.history: list[dict[str, float]] = []

    @abstractmethod
    async def sample(self, step: int) -> Sample:
        """Sample step ``step``'s batch (0-based) with the served policy, or read it."""

    async def update(self, step: int, batch: Any) -> dict[str, float]:
        """Take the step's update on ``batch``; return the updater's metrics."""
        return await asyncio.to_thread(self.updater.train_step, batch)

    async def serve(self, completed: int, updated: Mapping[str, float]) -> None:
        """Make the engine serve the updated policy from step ``completed`` on."""
        name = self.schedule.name(completed)
        await serve_policy(self.updater, self.context, name=name, step=completed)

    def report(self, sample: Sample, updated: Mapping[str, Any]) -> dict[str, float]:
        """Return the step's metrics: the sample's, then the update's (``update_metrics``)."""
        return {**sample.metrics, **update_metrics(updated)}

    def after_step(self, completed: int, sample: Sample, metrics: Mapping[str, float]) -> None:
        """Say why the step made no update, or stop a failing run; called once it is saved."""
        return None  # nothing to say by default

    async def run_on_ranks(self, parallel: DataParallelConfig | None) -> list[dict[str, float]]:
        """``run_steps``, the updater's steps shared with the data-parallel ranks.

        With ``parallel`` (the section's ``data_parallel``) or under ``torchrun`` the other
        ranks build the same updater from what the stage starts from and take a share of each
        update (``parallel.group.data_parallel``, ``docs/data-parallel.md``); this process
        still samples, serves and checkpoints. Otherwise it is ``run_steps``.
        """
        context = self.context
        async with data_parallel(
            self.updater,
            parallel,
            model_path=context.run.model_path,
            weights=context.policy.weights,
            adapter=context.policy.adapter,
            python=context.run.variable(PYTHON_VARIABLE),
        ):
            return await self.run_steps()

    async def run_steps(self) -> list[dict[str, float]]:
        """Run steps ``context.progress.step .. steps - 1``; return each one's metrics."""
        schedule, progress = self.schedule, self.context.progress
        budget = schedule.max_minutes
        deadline = time.monotonic() + budget * 60 if budget else float("inf")
        every = progress.validation_every
        first = progress.step
        with progress_bar(schedule.steps, first, budgeted=bool(budget), unit=schedule.unit) as bar:
            for step in range(first, schedule.steps):
                completed = step + 1
                started = time.perf_counter()
                sample = await self.sample(step)
                sampled = time.perf_counter()
                updated = await self.update(step, sample.batch)
                trained = time.perf_counter()
                await self.serve(completed, updated)
                synced = time.perf_counter()
                metrics = self.report(sample, updated)
                metrics.update(sample.times)
                metrics.update(
                    {
                        self.sample_time: sampled - started,
                        "time/train_s": trained - sampled,
                        "time/sync_s": synced - trained,
                        "time/step_s": time.perf_counter() - started,
                    }
                )
                # The step's line first, then the checkpoint that marks it done: a run killed
                # in between runs the step again on resume, never loses its line.
                progress.log(completed, metrics)
                last = completed == schedule.steps or time.monotonic() >= deadline
                if last or completed % schedule.checkpoint_every == 0:
                    await self._checkpoint(completed)
                self.history.append(metrics)
                self.after_step(completed, sample, metrics)
                bar.update(1)
                bar.set_postfix(step_postfix(metrics, deadline))
                if last:
                    break  # the stage runner validates after the stage
                if every and completed % every == 0:
                    await progress.validate(completed)
        return self.history

    async def _checkpoint(self, completed: int) -> None:
        """Save the updater after step ``completed``, mark it done, keep the newest two."""
        run_dir, pattern = self.context.run.run_dir, f"{self.schedule.unit}-*"
        directory = run_dir / "checkpoints" / self.schedule.name(completed)
        await asyncio.to_thread(self.updater.save_checkpoint, directory)
        self.context.progress.save(completed, checkpoint=directory)
        keep_newest(run_dir / "checkpoints", pattern=pattern)
        if self.updater.is_full:  # a model's size each; LoRA keeps every small adapter
            keep_newest(run_dir / "weights", pattern=pattern)


def stage_runner(
    loop: type[StepLoop[_Stage]], build_updater: Callable[[_Stage, AlgorithmContext], Any]
) -> Callable[[_Stage, AlgorithmContext], Awaitable[list[dict[str, float]]]]:
    """Return an algorithm's run function (its registry row's ``run``) for ``loop``'s steps.

    The function runs the stage from its saved progress and returns each step's metrics: the
    updater is built off the event loop (it loads the model), and the steps run on the
    data-parallel ranks where ``config.data_parallel`` (or ``torchrun``) asks for them.
    """

    async def run(config: _Stage, context: AlgorithmContext) -> list[dict[str, float]]:
        updater = await asyncio.to_thread(build_updater, config, context)
        steps = loop(config, context, schedule=Schedule.of(config), updater=updater)
        return await steps.run_on_ranks(config.data_parallel)

    return run


def update_metrics(updated: Mapping[str, Any]) -> dict[str, float]:
    """Return an updater's numeric metrics, its own ``step`` and ``time`` as ``train/...``.

    The log line's ``step`` is the run's; the updater's count of optimizer steps must not
    overwrite it.
    """
    return {
        f"train/{key}" if key in ("step", "time") else key: float(value)
        for key, value in updated.items()
        if isinstance(value, int | float)
    }


@contextlib.contextmanager
def progress_bar(
    total: int, initial: int, *, budgeted: bool = False, unit: str = "step"
) -> Iterator[Any]:
    """Show a tqdm bar for the steps on a terminal; log records go through ``tqdm.write``.

    Without the redirect, a log line printed mid-step lands on the bar's line (the bar is drawn
    without a newline), and the next redraw overwrites part of it. Output that is not a terminal
    (a file, CI, ``nohup``) gets no bar: its frames would be carriage-return garbage there, and
    each step's log line already says what the bar shows. With a time budget (``budgeted``) the
    bar leaves out its own estimate of the time to ``total`` steps, which is only an upper
    bound then (it read "12/1000, 29:40:53 left" under a 30-minute budget); the postfix shows
    the budget's minutes left instead (``step_postfix``).
    """
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    layout = "{desc}: {n_fmt}/{total_fmt} " + unit + "s [{elapsed}{postfix}]"
    with (
        logging_redirect_tqdm(),
        tqdm(
            total=total,
            initial=initial,
            desc="train",
            unit=unit,
            dynamic_ncols=True,
            bar_format=layout if budgeted else None,
            disable=None,  # None: off unless stderr is a terminal
        ) as bar,
    ):
        yield bar


def step_postfix(metrics: dict[str, float], deadline: float) -> dict[str, str]:
    """Return the progress bar's figures after a step: reward, step time, the budget left.

    With ``max_minutes`` the step count is only an upper bound (the bar's own estimate of the
    time to ``steps`` can read hours), so the minutes left of the budget are shown beside it.
    """
    figures = {
        "reward": f"{metrics.get('reward/mean', float('nan')):.3f}",
        "step_s": f"{metrics.get('time/step_s', float('nan')):.1f}",
    }
    if deadline != float("inf"):
        figures["budget_left"] = f"{max(0.0, deadline - time.monotonic()) / 60:.1f}min"
    return figures


async def run_step_groups(
    context: AlgorithmContext, step: int, *, tasks_per_step: int, group_size: int
) -> list[Rollout]:
    """Publish the served policy for ``step`` and run its training groups, waiting for them.

    ``tasks_per_step`` tasks of the step's draw, ``group_size`` rollouts each, tagged
    ``s{step}``; returns every rollout that ended (failed ones included).
    """
    version = await context.rollouts.publish(metadata={"step": step})
    return await context.rollouts.run(
        context.tasks.batch(step, tasks_per_step),
        mode=Mode.TRAIN,
        version=version,
        tag=f"s{step}",
        group_size=group_size,
    )


async def sample_step_groups(
    context: AlgorithmContext,
    step: int,
    *,
    tasks_per_step: int,
    group_size: int,
    options: TransitionOptions,
    credit: CreditFn | None = None,
) -> tuple[list[Trajectory], dict[str, float]]:
    """Run the step's groups (``run_step_groups``) and build their succeeded rollouts' transitions.

    ``options`` and ``credit`` (``None``: the options' own) make each attempt's trajectory;
    returns them with the step's ``sampled_metrics``.
    """
    finished = await run_step_groups(
        context, step, tasks_per_step=tasks_per_step, group_size=group_size
    )
    trajectories = await context.rollouts.trajectories(finished, options, credit=credit)
    return trajectories, sampled_metrics(finished, trajectories, context.run.success_threshold)


def sampled_metrics(
    finished: Sequence[Rollout], trajectories: Sequence[Trajectory], success_threshold: float
) -> dict[str, float]:
    """Return a step's metrics of its rollouts: rewards, named rewards, counts, concurrency.

    ``task/success`` is the fraction of rewards that reach ``success_threshold``.
    """
    rewards = [t.final_reward for t in trajectories if t.final_reward is not None]
    metrics = {
        **reward_metrics("reward", rewards, success_threshold),
        **named_reward_means("train/reward", [t.secondary_rewards for t in trajectories]),
        "rollouts/finished": float(len(finished)),
        "rollouts/failed": float(sum(r.status is not RolloutStatus.SUCCEEDED for r in finished)),
        "rollouts/rewarded": float(len(rewards)),
        **concurrency_metrics(finished),
        "transitions": float(sum(len(t.transitions) for t in trajectories)),
    }
    metrics["task/success"] = metrics.pop("reward/success")
    return metrics
