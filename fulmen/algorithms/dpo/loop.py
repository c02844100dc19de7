"""``algorithm: dpo``'s run function: sample groups (or read a store), pair, update, serve.

Each online step publishes a resources version naming the served policy, runs
``group_size`` rollouts of each of ``tasks_per_step`` tasks (``context.rollouts.run``),
turns their records into transitions (``sample_step_groups``, the ``transitions``
options), pairs each group's best rollout against its worst (``pairs``), takes one DPO step
(``DPOUpdater``), saves the adapter and hot-loads it into the engine (``serve_policy``), and
checkpoints. With ``source`` the pairs are built once from the store's finished rollouts and
each step trains on all of them. A killed run resumes after its last checkpointed step; a
stage that follows another starts from the adapter that one published (the reference stays
the base model: the adapter disabled).
"""

from __future__ import annotations

import logging
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.dpo.config import DPOAlgorithmConfig
from fulmen.algorithms.dpo.pairs import PairStats, PreferencePair, build_pairs
from fulmen.algorithms.rewards import reward_metrics
from fulmen.algorithms.source import StoreSource
from fulmen.algorithms.step_loop import Sample, StepLoop, sample_step_groups, stage_runner
from fulmen.types import Trajectory

__all__ = ["DPOLoop", "run_dpo"]

logger = logging.getLogger("fulmen.train")


class DPOLoop(StepLoop[DPOAlgorithmConfig]):
    """DPO's steps: each group's best rollout paired against its worst (module docstring)."""

    _offline: tuple[list[PreferencePair], PairStats, list[float]] | None = None  # read once

    async def sample(self, step: int) -> Sample:
        """Pair the step's groups, or (with ``source``) the store's rollouts read once."""
        config, context = self.config, self.context
        if config.source is not None:
            self._offline = self._offline or await _read_pairs(config, config.source, context)
            pairs, stats, rewards = self._offline
            metrics = reward_metrics("reward", rewards, context.run.success_threshold)
            metrics["task/success"] = metrics.pop("reward/success")
        else:
            pairs, stats, metrics = await _sample_pairs(config, context, step)
        metrics.update(stats.as_metrics())
        if not pairs:
            logger.warning("dpo step %d makes no update: %s", step + 1, _no_pair_reason(stats))
        return Sample(pairs, metrics)


def _build_updater(config: DPOAlgorithmConfig, context: AlgorithmContext) -> Any:
    from fulmen.algorithms.checkpoint import lora_updater_for_stage
    from fulmen.algorithms.dpo.updater import DPOUpdater

    return lora_updater_for_stage(DPOUpdater, config, context, name="dpo")


async def _sample_pairs(
    config: DPOAlgorithmConfig, context: AlgorithmContext, step: int
) -> tuple[list[PreferencePair], PairStats, dict[str, float]]:
    """Run one step's groups with the served policy and pair them."""
    trajectories, metrics = await sample_step_groups(
        context,
        step,
        tasks_per_step=config.tasks_per_step,
        group_size=config.group_size,
        options=config.transition_options(),
    )
    pairs, stats = build_pairs(trajectories, min_margin=config.min_margin)
    return pairs, stats, metrics


async def _read_pairs(
    config: DPOAlgorithmConfig, source: StoreSource, context: AlgorithmContext
) -> tuple[list[PreferencePair], PairStats, list[float]]:
    """Pair the rollouts of the source store once (grouped by task)."""
    attempts = await context.rollouts.read_source(source)
    options = config.transition_options()
    trajectories = [a.trajectory(options=options) for a in attempts]
    pairs, stats = build_pairs(trajectories, min_margin=config.min_margin)
    logger.info(
        "offline dpo: %d rollouts read, %d pairs from %d of %d task groups",
        len(attempts),
        stats.pairs,
        stats.groups_with_pair,
        stats.groups,
    )
    return pairs, stats, _rewards(trajectories)


def _rewards(trajectories: list[Trajectory]) -> list[float]:
    return [t.final_reward for t in trajectories if t.final_reward is not None]


def _no_pair_reason(stats: PairStats) -> str:
    """Say why a step had no pair to train on, from its counts."""
    if not stats.groups:
        return "no rollout had a reward and a token-level call"
    return (
        f"none of its {stats.groups} groups gave a pair ({stats.groups_equal_reward} with equal "
        f"rewards, {stats.groups_below_margin} below algorithm.min_margin, "
        f"{stats.groups_single} with one rollout; call positions: {stats.prompt_mismatch} with "
        f"different prompts, {stats.identical_completions} with identical completions)"
    )


#: ``algorithm: dpo``'s run function (its registry row): ``config.steps`` DPO steps from the
#: stage's saved progress, each update shared with the data-parallel ranks where asked for.
run_dpo = stage_runner(DPOLoop, _build_updater)
