"""Asynchronous GRPO with bounded staleness (``algorithm.async``, ``docs/async.md``).

``AsyncGRPOLoop`` is ``GRPOLoop`` with the rollouts decoupled from the update: before each
update it keeps ``tasks_per_step * (1 + prefetch_steps)`` groups running or waiting
(``GroupPool``), sampled with the newest published policy, so the engine samples the next
steps' rollouts while the trainer updates. A step trains on the oldest ``tasks_per_step``
finished groups; a group sampled by a policy more than ``max_staleness`` updates behind the
one being trained is dropped, and a group still running is carried to a later step. Policies
are numbered by update count (``policy-<n>`` labels each transition, replacing the engine's
counter, which also moves on every adapter load and unload): a transition from an older
policy is *stale*, and the engine corrects its tokens by truncated importance sampling
(``GRPOConfig.is_cap``). The older adapters stay loaded in the engine (``max_staleness + 2``
of them) so rollouts still running with them finish.

Beside the synchronous loop's metrics a step logs ``async/staleness/<s>`` (trained transitions
per staleness ``0..max_staleness``), ``async/dropped_transitions`` (and ``_rollouts``,
``_groups``), ``async/carried_groups`` (groups left running or waiting for later steps),
``time/wait_data_s`` (the trainer waited for finished groups) and ``time/wait_weights_s``
(no group was running: the engine waited for new weights).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.grpo.config import AsyncSettings, GRPOAlgorithmConfig
from fulmen.algorithms.grpo.group_pool import FinishedGroup, GroupPool, Harvest, group_rollouts
from fulmen.algorithms.grpo.loop import GRPOLoop
from fulmen.algorithms.serving import serve_policy
from fulmen.algorithms.step_loop import Sample
from fulmen.types import Transition

__all__ = ["AsyncGRPOLoop", "labelled_transitions", "policy_label", "staleness_metrics"]


def policy_label(policy: int) -> str:
    """Return the ``policy_version`` label of the weights after ``policy`` updates."""
    return f"policy-{policy}"


def staleness_metrics(stalenesses: Sequence[int], *, max_staleness: int) -> dict[str, float]:
    """Count trained transitions per staleness ``0..max_staleness`` (``async/staleness/<s>``).

    Raises:
        ValueError: a staleness is negative or above ``max_staleness`` (it should have been
            dropped).
    """
    counts = [0] * (max_staleness + 1)
    for s in stalenesses:
        if not 0 <= s <= max_staleness:
            raise ValueError(f"staleness {s} outside 0..{max_staleness}")
        counts[s] += 1
    metrics = {f"async/staleness/{s}": float(c) for s, c in enumerate(counts)}
    metrics["async/staleness_mean"] = sum(stalenesses) / len(stalenesses) if stalenesses else 0.0
    return metrics


class AsyncGRPOLoop(GRPOLoop):
    """Runs a stage's GRPO steps asynchronously with bounded staleness (module docstring)."""

    def __init__(self, config: GRPOAlgorithmConfig, context: AlgorithmContext) -> None:
        super().__init__(config, context)
        if config.async_ is None:
            raise ValueError("AsyncGRPOLoop needs algorithm.async")
        self.settings: AsyncSettings = config.async_
        start = context.progress.step
        self._policy = start  # updates applied to the weights the engine serves
        self._pool = GroupPool(
            context,
            group_size=config.group_size,
            max_staleness=self.settings.max_staleness,
            first_round=start * (1 + self.settings.prefetch_steps),
        )

    async def run(self) -> list[dict[str, float]]:
        """Train to the configured number of steps; returns the metrics of each step run."""
        try:
            history = await super().run()
            await self._pool.drain()  # carried groups: let their rollouts end before validation
            return history
        finally:
            await self._pool.aclose()

    async def sample(self, step: int) -> Sample:
        """Keep the pool topped up, then take the step's oldest finished groups."""
        context = self.context
        version = await context.rollouts.publish(metadata={"step": step})
        self._top_up(step, version)
        harvest = await self._harvest(version)
        finished = group_rollouts(harvest.groups)
        trajectories = await context.rollouts.trajectories(finished, self.options)
        await self._note_failures(finished, trajectories)
        self._attribution.check(step + 1, [tr.diagnostics for tr in trajectories])
        transitions = labelled_transitions(harvest.groups, trajectories)
        dropped = await context.rollouts.trajectories(group_rollouts(harvest.dropped), self.options)
        metrics = self._metrics(finished, trajectories, transitions)
        return Sample(
            transitions,
            metrics,
            times={"time/wait_data_s": harvest.waited_s},
            detail=(harvest, dropped),
        )

    async def update(self, step: int, batch: Any) -> dict[str, float]:
        """Take the update; stale transitions count against the update count (module doc)."""
        return await asyncio.to_thread(
            self.updater.train_step, batch, policy_version=policy_label(self._policy)
        )

    async def serve(self, completed: int, updated: Mapping[str, float]) -> None:
        """Serve the new policy; older adapters stay loaded for the groups still running."""
        await serve_policy(
            self.updater,
            self.context,
            name=self.schedule.name(completed),
            step=completed,
            keep_loaded=self.settings.max_staleness + 2,
        )
        self._policy += 1
        self.updater.policy_version = self.context.policy.version

    def report(self, sample: Sample, updated: Mapping[str, Any]) -> dict[str, float]:
        """Return the synchronous loop's metrics, then staleness, drops, carried groups, idle."""
        metrics = super().report(sample, updated)
        harvest, dropped = sample.detail
        metrics.update(self._async_metrics(harvest, dropped, sample.batch))
        metrics["time/wait_weights_s"] = self._pool.idle_seconds()
        return metrics

    async def _harvest(self, version: int) -> Harvest:
        """Take the step's groups; when drops left too few, sample more with this policy."""
        per_step = self.config.tasks_per_step
        harvest = await self._pool.take(per_step, policy=self._policy)
        if len(harvest.groups) < per_step:  # nothing is running any more
            self._pool.launch_round(per_step, version=version, policy=self._policy)
            more = await self._pool.take(per_step - len(harvest.groups), policy=self._policy)
            harvest = Harvest(
                [*harvest.groups, *more.groups],
                [*harvest.dropped, *more.dropped],
                harvest.waited_s + more.waited_s,
            )
        return harvest

    def _async_metrics(
        self, harvest: Harvest, dropped: Sequence[Any], transitions: Sequence[Transition]
    ) -> dict[str, float]:
        """Staleness histogram (against the policy just trained), drops and carried groups."""
        trained = self._policy - 1
        metrics = staleness_metrics(
            [trained - _policy_of(t) for t in transitions],
            max_staleness=self.settings.max_staleness,
        )
        metrics.update(
            {
                "async/dropped_groups": float(len(harvest.dropped)),
                "async/dropped_rollouts": float(len(group_rollouts(harvest.dropped))),
                "async/dropped_transitions": float(sum(len(tr.transitions) for tr in dropped)),
                "async/carried_groups": float(self._pool.pending),
            }
        )
        return metrics

    def _top_up(self, step: int, version: int) -> None:
        """Launch rounds until this step's and the next ``prefetch_steps`` steps' are pending.

        Never more than the steps left need, so the last step leaves nothing behind.
        """
        per_step = self.config.tasks_per_step
        ahead = min(self.settings.prefetch_steps, self.config.steps - step - 1)
        while self._pool.pending < per_step * (1 + ahead):
            self._pool.launch_round(per_step, version=version, policy=self._policy)


def labelled_transitions(
    groups: Sequence[FinishedGroup], trajectories: Sequence[Any]
) -> list[Transition]:
    """Return the groups' transitions, each labelled with the policy that sampled its group.

    The engine's own counter moves on every adapter load and unload, so it cannot say how many
    updates old a transition is; the resources version a group ran with (it names the adapter
    of one policy) can.
    """
    policy_of = {r.rollout_id: g.policy for g in groups for r in g.rollouts}
    return [
        t.model_copy(update={"policy_version": policy_label(policy_of[t.rollout_id])})
        for tr in trajectories
        for t in tr.transitions
    ]


def _policy_of(transition: Transition) -> int:
    """Return the update count in a transition's ``policy-<n>`` label."""
    return int(str(transition.policy_version).rsplit("-", 1)[1])
