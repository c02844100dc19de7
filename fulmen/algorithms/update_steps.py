"""The step loop shared by the single-update algorithms (PPO, DPO): sample, update, serve, save.

Each step runs the algorithm's ``sample`` (rollouts with the served policy, or a store's
records, turned into the update's batch and the step's metrics), one ``updater.train_step`` on
the batch, ``serve_policy`` (the engine serves the new adapter from the next step on) and a
checkpoint on the ``checkpoint_every`` schedule. The loop stops after ``steps``, or once
``max_minutes`` of wall time have passed since it started (the step in progress finishes and
is checkpointed; the stage runner then validates as after the last step). GRPO's loops keep
their own (async sampling, roles, data-parallel groups) and share ``progress_bar``. A sampler
runs its step's groups with ``run_step_groups`` and reports them with ``sampled_metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from fulmen.adapter.named_rewards import named_reward_means
from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.rewards import reward_metrics
from fulmen.algorithms.rollout_concurrency import concurrency_metrics
from fulmen.algorithms.serving import PolicyWriter, keep_newest, serve_policy
from fulmen.types import Mode, Rollout, RolloutStatus, Trajectory

__all__ = [
    "StepUpdater",
    "progress_bar",
    "run_step_groups",
    "run_update_steps",
    "sampled_metrics",
    "step_postfix",
]


class StepUpdater(PolicyWriter, Protocol):
    """An updater the shared loop drives: one update per batch, and a resumable checkpoint."""

    def train_step(self, batch: Any, /) -> dict[str, float]:
        """Take one update on ``batch`` (the step's calls or pairs) and return its metrics."""
        ...

    def save_checkpoint(self, directory: Path, /) -> object:
        """Write everything a resumed run needs (adapter, optimizer, any extra heads)."""
        ...


@contextlib.contextmanager
def progress_bar(total: int, initial: int, *, budgeted: bool = False) -> Iterator[Any]:
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

    layout = "{desc}: {n_fmt}/{total_fmt} steps [{elapsed}{postfix}]" if budgeted else None
    with (
        logging_redirect_tqdm(),
        tqdm(
            total=total,
            initial=initial,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            bar_format=layout,
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


async def run_update_steps(
    context: AlgorithmContext,
    updater: StepUpdater,
    *,
    steps: int,
    checkpoint_every: int,
    max_minutes: float | None,
    sample: Callable[[int], Awaitable[tuple[Any, dict[str, float]]]],
    warn_if_idle: Callable[[int, Any, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Run steps ``context.progress.step .. steps - 1`` and return each one's metrics.

    ``sample(step)`` returns the update's batch and the step's metrics so far;
    ``warn_if_idle(step_number, batch, metrics)`` logs why a step made no update, if it did not.
    """
    deadline = time.monotonic() + max_minutes * 60 if max_minutes else float("inf")
    history: list[dict[str, float]] = []
    every = context.progress.validation_every
    first = context.progress.step
    with progress_bar(steps, first, budgeted=bool(max_minutes)) as bar:
        for step in range(first, steps):
            started = time.perf_counter()
            batch, metrics = await sample(step)
            sampled = time.perf_counter()
            metrics.update(await asyncio.to_thread(updater.train_step, batch))
            trained = time.perf_counter()
            completed = step + 1
            await serve_policy(updater, context, name=f"step-{completed:05d}", step=completed)
            metrics.update(
                {
                    "time/rollout_s": sampled - started,
                    "time/train_s": trained - sampled,
                    "time/step_s": time.perf_counter() - started,
                }
            )
            # The step's line first, then the checkpoint that marks it done: a run killed in
            # between runs the step again on resume, never loses its line.
            context.progress.log(completed, metrics)
            last = completed == steps or time.monotonic() >= deadline
            if last or completed % checkpoint_every == 0:
                directory = context.run.run_dir / "checkpoints" / f"step-{completed:05d}"
                await asyncio.to_thread(updater.save_checkpoint, directory)
                context.progress.save(completed, checkpoint=directory)
                keep_newest(context.run.run_dir / "checkpoints", pattern="step-*")
            if warn_if_idle is not None:
                warn_if_idle(completed, batch, metrics)
            history.append(metrics)
            bar.update(1)
            bar.set_postfix(step_postfix(metrics, deadline))
            if last:
                break  # the stage runner validates after the stage
            if every and completed % every == 0:
                await context.progress.validate(completed)
    return history


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


def sampled_metrics(
    finished: Sequence[Rollout], trajectories: Sequence[Trajectory], success_threshold: float
) -> dict[str, float]:
    """Return a step's metrics of its rollouts: rewards, named rewards, counts, concurrency."""
    rewards = [t.final_reward for t in trajectories if t.final_reward is not None]
    return {
        **reward_metrics("reward", rewards, success_threshold),
        **named_reward_means("train/reward", [t.secondary_rewards for t in trajectories]),
        "rollouts/finished": float(len(finished)),
        "rollouts/failed": float(sum(r.status is not RolloutStatus.SUCCEEDED for r in finished)),
        **concurrency_metrics(finished),
        "transitions": float(sum(len(t.transitions) for t in trajectories)),
    }
