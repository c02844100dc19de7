"""Off-policy GRPO on recorded traffic: ``algorithm: grpo`` with a source store and no agent.

``OfflineGRPOLoop`` is ``GRPOLoop`` with its rollouts replaced by a store's finished ones
(``source``, filled from ``data.from_store``): they are read once, turned into transitions
(``fulmen.transitions``: latest reward, credit, merging) and regrouped
(``fulmen.algorithms.grpo.offline``);
each step is one ``GRPOUpdater.train_step`` over all of them, whose importance ratio divides the
policy's probability of each recorded token by the behaviour probability the gateway recorded
when it was served, clipped to ``[1 - clip_low, 1 + clip_high]``. Saving, hot-loading and
checkpoints are the on-policy loop's, so a killed run resumes after its last step.

That ratio is right only for tokens sampled from ``softmax(logits / temperature)`` at the
trainer's temperature. ``context.rollouts.behaviour_calls`` finds every token-level call whose
request (as the engine got it: the agent's body with its rollout's sampling fields applied,
``LLMResource.request_fields``) was sampled otherwise: another temperature, ``top_p`` < 1,
``top_k``, penalties, structured output (``fulmen.types.behaviour.off_behaviour_reason``).
Such calls are not trained: they are counted as ``offline/off_behaviour_calls_skipped``, their
reasons logged, and transition building is told to leave them out (``build_trajectory``'s
``exclude``), so they keep their place among the rollout's calls and a reward emitted for one
of them stays its own instead of landing on the call before it. In a merged chain a dropped
call's tokens become part of the next call's observation, masked out like a tool result.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.algorithms.grpo.loop import GRPOLoop
from fulmen.algorithms.grpo.offline import OfflineBatch, offline_batch
from fulmen.algorithms.rewards import reward_metrics
from fulmen.algorithms.step_loop import Sample

if TYPE_CHECKING:
    from fulmen.transitions.trajectory import AttemptRecords

__all__ = ["OfflineGRPOLoop"]

logger = logging.getLogger("fulmen.train")


class OfflineGRPOLoop(GRPOLoop):
    """Runs the offline GRPO steps of one stage (``config.source`` must be set)."""

    _batch: OfflineBatch | None = None
    _off_behaviour = 0
    sample_time = "time/read_s"  # there are no rollouts: the first step reads the store

    async def _read(self) -> OfflineBatch:
        source = self.config.source
        if source is None:
            raise ValueError("the offline GRPO loop needs algorithm.source (data.from_store)")
        attempts = await self.context.rollouts.read_source(source)
        temperature = self.config.grpo.temperature
        behaviour, reasons = await self.context.rollouts.behaviour_calls(
            source, attempts, temperature=temperature
        )
        self._off_behaviour = sum(reasons.values())
        if reasons:
            logger.warning(
                "offline grpo: %d token-level calls skipped, not sampled from the policy at "
                "temperature %g (their logprobs cannot be corrected for): %s",
                self._off_behaviour,
                temperature,
                "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common(5)),
            )
        # Built from every recorded call, so each per-call reward finds its own call; the
        # calls the behaviour check dropped are named and left out of training.
        trajectories = [
            attempt.trajectory(options=self.options, exclude=_dropped(attempt, kept))
            for attempt, kept in zip(attempts, behaviour, strict=True)
        ]
        batch = offline_batch(trajectories)
        logger.info(
            "offline grpo: %d rollouts read, %d rewarded; %d of %d calls token-level "
            "(%d text-only calls skipped)",
            batch.rollouts,
            batch.rewarded,
            batch.token_level_calls,
            batch.calls,
            batch.calls - batch.token_level_calls,
        )
        return batch

    async def sample(self, step: int) -> Sample:
        """Read the source once; every step trains on all of its transitions."""
        if self._batch is None:
            self._batch = await self._read()
        batch = self._batch
        transitions = batch.transitions
        rewards = [t.rollout_reward for t in {t.rollout_id: t for t in transitions}.values()]
        metrics: dict[str, float] = {
            **reward_metrics("reward", rewards, self.context.run.success_threshold),
            **batch.metrics(),
            "offline/off_behaviour_calls_skipped": float(self._off_behaviour),
            "transitions": float(len(transitions)),
        }
        metrics["task/success"] = metrics.pop("reward/success")
        return Sample(transitions, metrics)

    def after_step(self, completed: int, sample: Sample, metrics: Mapping[str, float]) -> None:
        """Say why the step made no update (there are no rollouts to track failures of)."""
        if metrics.get("updated") == 0.0:
            reason = no_update_reason(metrics, store_url=self.context.run.store_url)
            logger.warning("step %d made no update: %s", completed, reason)


def _dropped(attempt: AttemptRecords, kept: AttemptRecords) -> set[str]:
    """Return the ids of ``attempt``'s calls that the behaviour check left out of ``kept``."""
    if kept.rollout_id != attempt.rollout_id:
        raise ValueError(
            f"behaviour_calls answered for rollout {kept.rollout_id!r} in place of "
            f"{attempt.rollout_id!r}: it must keep the attempts' order"
        )
    return {c.call_id for c in attempt.calls} - {c.call_id for c in kept.calls}
