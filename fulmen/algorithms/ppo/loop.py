"""``algorithm: ppo``'s run function: roll out, credit each call, update policy and critic, serve.

Each step publishes a resources version naming the served policy, runs ``group_size``
rollouts of each of ``tasks_per_step`` tasks (``context.rollouts.run``), reads their
records and builds one transition per call with PPO's step rewards as the credit
(``rewards.step_rewards``: the adapter's options otherwise apply), takes one PPO update
(``PPOUpdater``: GAE with the value head, the clipped policy and value losses), saves the
adapter and hot-loads it into the engine (``serve_policy``), and checkpoints (the value head
with the adapter). A killed run resumes after its last checkpointed step; a stage that follows
another starts from the adapter that one published, with a fresh value head. The update runs
in this one process: under ``torchrun`` with several ranks the run is refused.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.parallel.config import torchrun_rank
from fulmen.algorithms.ppo.config import PPOAlgorithmConfig
from fulmen.algorithms.ppo.rewards import step_rewards
from fulmen.algorithms.update_steps import run_step_groups, run_update_steps, sampled_metrics
from fulmen.errors import ConfigError
from fulmen.types import Trajectory

__all__ = ["run_ppo"]

logger = logging.getLogger("fulmen.train")


async def run_ppo(config: PPOAlgorithmConfig, context: AlgorithmContext) -> list[dict[str, float]]:
    """Run ``config.steps`` PPO steps from the stage's saved progress.

    Returns the metrics of each step run now.

    Raises:
        ConfigError: the run is one of several ``torchrun`` ranks (PPO's update is
            single-process for now).
    """
    if torchrun_rank() is not None:
        raise ConfigError(
            "algorithm ppo updates in one process for now; run it without torchrun "
            "(grpo and sft train data-parallel: docs/data-parallel.md)"
        )
    updater = await asyncio.to_thread(_build_updater, config, context)

    async def sample(step: int) -> tuple[list[Any], dict[str, float]]:
        trajectories, metrics = await _sample(config, context, step)
        return [t for tr in trajectories for t in tr.transitions], metrics

    return await run_update_steps(
        context,
        updater,
        steps=config.steps,
        checkpoint_every=config.checkpoint_every,
        max_minutes=config.max_minutes,
        sample=sample,
        warn_if_idle=lambda step, _batch, metrics: _warn_if_idle(config, step, metrics),
    )


def _warn_if_idle(config: PPOAlgorithmConfig, step: int, metrics: dict[str, float]) -> None:
    if metrics.get("updated") == 0.0:
        logger.warning(
            "ppo step %d made no update: no rollout had a reward and a token-level call "
            "that fits algorithm.ppo.max_seq_len (%d rollouts finished)",
            step,
            int(metrics["rollouts/finished"]),
        )


def _build_updater(config: PPOAlgorithmConfig, context: AlgorithmContext) -> Any:
    from fulmen.algorithms.checkpoint import lora_updater_for_stage
    from fulmen.algorithms.ppo.updater import PPOUpdater

    return lora_updater_for_stage(PPOUpdater, config, context, name="ppo")


async def _sample(
    config: PPOAlgorithmConfig, context: AlgorithmContext, step: int
) -> tuple[list[Trajectory], dict[str, float]]:
    """Run one step's rollouts with the served policy and build their calls' transitions."""
    finished = await run_step_groups(
        context, step, tasks_per_step=config.tasks_per_step, group_size=config.group_size
    )
    options = config.transition_options()
    trajectories = [
        a.trajectory(options=options, credit=step_rewards)
        for a in await context.rollouts.attempts(finished)
    ]
    metrics = sampled_metrics(finished, trajectories, context.run.success_threshold)
    metrics["task/success"] = metrics.pop("reward/success")
    return trajectories, metrics
