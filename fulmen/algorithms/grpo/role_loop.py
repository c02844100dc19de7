"""The GRPO loop with one LoRA adapter per role (``algorithm.adapters``).

The step is the synchronous loop's (``fulmen.algorithms.grpo.loop``): publish, roll out, build the
transitions of the agents some adapter names, update, serve, checkpoint. What differs: the
update is one ``GRPOUpdater`` step per adapter on its role's transitions
(``fulmen.algorithms.grpo.roles.RolePolicies``), each updated adapter is saved to
``RUN_DIR/adapters/ROLE/step-N`` and hot-loaded under its own name, and every publish routes
each role's calls to its adapter (``LLMResource.agent_models``); agents no adapter names run on
the base model, and so do calls that carried no agent name, which no adapter trains on
(``roles``). Metrics are per adapter (``ROLE/loss``, ``ROLE/transitions``, ...); ``updated``
is 1 when any adapter took a step; ``dropped_unrouted`` counts the transitions of no adapter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fulmen.algorithms.grpo.loop import GRPOLoop, log_correction
from fulmen.algorithms.serving import serve_policy

__all__ = ["RoleGRPOLoop"]

logger = logging.getLogger("fulmen.train")

_SUMMED = (
    "transitions",
    "groups",
    "stale",
    "dropped_truncated",
    "dropped_overlong",
    "dropped_untrained",
    "skipped_zero_advantage",
    "zeroed_advantage_tokens",
    "skipped_nonfinite",
    "trained_tokens",
)


class RoleGRPOLoop(GRPOLoop):
    """``GRPOLoop`` training one adapter per role (see the module docstring)."""

    async def run(self) -> list[dict[str, float]]:
        """Train to the configured number of steps; returns the metrics of each step run."""
        adapters = self.config.adapters or {}
        self.context.policy.route_roles(adapters)
        await asyncio.to_thread(self._build_updater)
        return await self.run_steps()

    def _build_updater(self) -> None:
        from fulmen.algorithms.grpo.role_policies import RolePolicies
        from fulmen.algorithms.policy import load_adapter_weights

        progress = self.context.progress
        config = self.config.update_config(seed=self.context.run.seed)
        config = config.for_engine(self.context.run.engine_dtype)  # mismatch.correction: auto
        log_correction(config)
        model = self._stage_model(config, adapter=None)  # adapters are loaded per role below
        policies = RolePolicies(model, config=config, adapters=self.config.adapters or {})
        if progress.checkpoint is not None:
            logger.info("resuming after step %d from %s", progress.step, progress.checkpoint)
            policies.load_checkpoint(progress.checkpoint)
        else:
            policy = self.context.policy
            served = policy.role_adapters
            for name, engine in policies.engines.items():
                start = served.get(name, policy.adapter)
                if start is not None:  # this role's adapter, or the one earlier stages shared
                    logger.info("adapter %s starts from %s", name, start)
                    load_adapter_weights(engine.model, start, adapter_name=name)
        self.updater = policies

    async def update(self, step: int, batch: Any) -> dict[str, float]:
        """One update per adapter on its role's transitions; metrics per role and summed."""
        transitions: Sequence[Any] = batch
        per_role: dict[str, dict[str, float]] = await asyncio.to_thread(
            self.updater.train_step, transitions
        )
        metrics: dict[str, float] = {
            "updated": max((m.get("updated", 0.0) for m in per_role.values()), default=0.0)
        }
        for role, values in per_role.items():
            metrics.update({f"{role}/{key}": value for key, value in values.items()})
        # the batch's counts (no_update_reason reads them) are the sums over the roles
        for key in _SUMMED:
            parts = [values[key] for values in per_role.values() if key in values]
            if parts:
                metrics[key] = float(sum(parts))
        routed = sum(values.get("transitions", 0.0) for values in per_role.values())
        metrics["dropped_unrouted"] = float(len(transitions)) - routed
        return metrics

    async def serve(self, completed: int, updated: Mapping[str, float]) -> None:
        """Serve each updated adapter for its role's calls."""
        name = self.schedule.name(completed)
        for role, engine in self.updater.engines.items():
            if not updated.get(f"{role}/updated"):
                continue  # its served adapter is still its newest
            engine.policy_version = await serve_policy(
                engine, self.context, name=name, step=completed, role=role
            )
