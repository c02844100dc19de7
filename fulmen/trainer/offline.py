"""Off-policy GRPO on recorded traffic: ``algorithm: grpo`` with a source store and no agent.

``OfflineGRPOLoop`` is ``GRPOLoop`` with its rollouts replaced by a store's finished ones
(``source``, filled from ``data.from_store``): they are read once, turned into transitions by
the adapter (latest reward, credit, merging) and regrouped (``fulmen.algorithms.grpo.offline``);
each step is one ``GRPOEngine.train_step`` over all of them, whose importance ratio divides the
policy's probability of each recorded token by the behaviour probability the gateway recorded
when it was served, clipped to ``[1 - clip_low, 1 + clip_high]``. Saving, hot-loading and
checkpoints are the on-policy loop's, so a killed run resumes after its last step.
"""

from __future__ import annotations

import asyncio
import logging
import time

from fulmen.algorithms.grpo.offline import OfflineBatch, offline_batch
from fulmen.algorithms.rewards import reward_metrics
from fulmen.trainer.diagnose import no_update_reason
from fulmen.trainer.loop import GRPOLoop

__all__ = ["OfflineGRPOLoop"]

logger = logging.getLogger("fulmen.train")


class OfflineGRPOLoop(GRPOLoop):
    """Runs the offline GRPO steps of one stage (``config.source`` must be set)."""

    _batch: OfflineBatch | None = None

    async def _read(self) -> OfflineBatch:
        source = self.config.source
        if source is None:
            raise ValueError("the offline GRPO loop needs algorithm.source (data.from_store)")
        attempts = await self.context.read_source(source)
        batch = offline_batch([a.trajectory(options=self.options) for a in attempts])
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

    async def _step(self, step: int) -> dict[str, float]:
        context = self.context
        started = time.perf_counter()
        if self._batch is None:
            self._batch = await self._read()
        batch = self._batch
        read = time.perf_counter()
        train_metrics = await asyncio.to_thread(
            self._trainer.train_step, batch.transitions, policy_version=context.policy_version
        )
        trained = time.perf_counter()
        adapter_dir = context.run_dir / "adapters" / f"step-{step + 1:05d}"
        await asyncio.to_thread(self._trainer.save_adapter, adapter_dir)
        await context.serve_adapter(adapter_dir, step + 1)
        self._trainer.policy_version = context.policy_version
        await self._checkpoint(step + 1)
        rewards = [t.rollout_reward for t in {t.rollout_id: t for t in batch.transitions}.values()]
        metrics: dict[str, float] = {
            **reward_metrics("reward", rewards, context.success_threshold),
            **batch.metrics(),
            "transitions": float(len(batch.transitions)),
            **{
                f"train/{k}" if k in ("step", "time") else k: float(v)
                for k, v in train_metrics.items()
                if isinstance(v, int | float)
            },
            "time/read_s": read - started,
            "time/train_s": trained - read,
            "time/step_s": time.perf_counter() - started,
        }
        metrics["task/success"] = metrics.pop("reward/success")
        context.log(step + 1, metrics)
        if metrics.get("updated") == 0.0:
            logger.warning("step %d made no update: %s", step + 1, no_update_reason(metrics))
        return metrics
