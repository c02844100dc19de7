"""``algorithm: ppo``'s run function: roll out, credit each call, update policy and critic, serve.

Each step publishes a resources version naming the served policy, runs ``group_size``
rollouts of each of ``tasks_per_step`` tasks (``context.rollouts.run``), reads their
records and builds one transition per call with PPO's step rewards as the credit
(``rewards.step_rewards``: the ``transitions`` options otherwise apply), takes one PPO update
(``PPOUpdater``: GAE with the value head, the clipped policy and value losses), saves the
adapter and hot-loads it into the engine (``serve_policy``), and checkpoints (the value head
with the adapter). A killed run resumes after its last checkpointed step; a stage that follows
another starts from the adapter that one published, with a fresh value head. With
``data_parallel`` (or under ``torchrun``) every update is shared by the ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.ppo.config import PPOAlgorithmConfig
from fulmen.algorithms.ppo.rewards import step_rewards
from fulmen.algorithms.step_loop import Sample, StepLoop, sample_step_groups, stage_runner

__all__ = ["PPOLoop", "run_ppo"]

logger = logging.getLogger("fulmen.train")


class PPOLoop(StepLoop[PPOAlgorithmConfig]):
    """PPO's steps: its calls' transitions with step rewards as the credit (module docstring)."""

    async def sample(self, step: int) -> Sample:
        """Run one step's rollouts with the served policy and build their calls' transitions."""
        config = self.config
        trajectories, metrics = await sample_step_groups(
            self.context,
            step,
            tasks_per_step=config.tasks_per_step,
            group_size=config.group_size,
            options=config.transition_options(),
            credit=step_rewards,
        )
        return Sample([t for tr in trajectories for t in tr.transitions], metrics)

    def after_step(self, completed: int, sample: Sample, metrics: Mapping[str, float]) -> None:
        """Say why the step made no update."""
        if metrics.get("updated") == 0.0:
            logger.warning(
                "ppo step %d made no update: no rollout had a reward and a token-level call "
                "that fits algorithm.ppo.max_seq_len (%d rollouts finished)",
                completed,
                int(metrics["rollouts/finished"]),
            )


def _build_updater(config: PPOAlgorithmConfig, context: AlgorithmContext) -> Any:
    from fulmen.algorithms.checkpoint import lora_updater_for_stage
    from fulmen.algorithms.ppo.updater import PPOUpdater

    return lora_updater_for_stage(PPOUpdater, config, context, name="ppo")


#: ``algorithm: ppo``'s run function (its registry row): ``config.steps`` PPO steps from the
#: stage's saved progress, each update shared with the data-parallel ranks where asked for.
run_ppo = stage_runner(PPOLoop, _build_updater)
