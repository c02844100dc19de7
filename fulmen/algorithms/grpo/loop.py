"""The synchronous on-policy GRPO loop: roll out, build transitions, update, push weights.

``GRPOLoop`` is the loop ``run_grpo`` (``fulmen.algorithms.grpo.run``) runs by default. Each
step publishes a resources version naming the current policy, runs ``group_size`` rollouts for
each of ``tasks_per_step`` tasks, turns their records into transitions (``fulmen.transitions``),
takes one policy update (``GRPOUpdater``), saves the LoRA adapter and hot-loads it into the
engine under a new name (``finetune: full``: saves the model and has the engine reload it as its
weights), and checkpoints. ``GRPOLoop`` writes the step's sampling, update and failure
tracking; the step loop every weight-updating algorithm shares (``fulmen.algorithms.step_loop``)
writes the rest: serving, times, log line, checkpoints, validation on its schedule between
steps (the stage runner validates before and after the stage) and the time budget. A stage
that already has a checkpoint resumes after its last completed step; a stage that starts after
another one that published an adapter or full weights starts from them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.grpo import dynamic_sampling
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig, GRPOConfig
from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.algorithms.step_loop import Sample, Schedule, StepLoop, sampled_metrics
from fulmen.errors import AgentFailed, error_summary
from fulmen.transitions.attribution import AttributionCheck
from fulmen.types import Mode, Rollout, RolloutStatus

__all__ = ["GRPOLoop", "log_correction"]

logger = logging.getLogger("fulmen.train")


class GRPOLoop(StepLoop[GRPOAlgorithmConfig]):
    """Runs the GRPO steps of one stage through an ``AlgorithmContext`` (``StepLoop``)."""

    def __init__(self, config: GRPOAlgorithmConfig, context: AlgorithmContext) -> None:
        super().__init__(config, context, schedule=Schedule.of(config))
        self.options = config.transition_options()
        self._attribution = AttributionCheck(self.options)
        self._failed_steps = 0  # steps in a row in which no rollout produced a reward
        self._all_failed = True  # whether every rollout of those steps failed
        self._first_failure: str | None = None
        self._step_failure: str | None = None  # the step's first error, or why it had no reward
        self._step_example: str | None = None  # a rollout of the step that shows it
        self._first_example: str | None = None
        sampling = config.dynamic_sampling
        self._flat_tasks = dynamic_sampling.FlatTasks(
            sampling.skip_flat_for if sampling is not None else 0
        )
        self._note_filter_reach()

    async def run(self) -> list[dict[str, float]]:
        """Train to the configured number of steps; returns the metrics of each step run.

        With ``algorithm.data_parallel`` (or under ``torchrun``) every update is shared with
        the other ranks (``docs/data-parallel.md``); this process still checkpoints and serves.
        """
        await asyncio.to_thread(self._build_updater)
        return await self.run_on_ranks(self.config.data_parallel)

    def _note_filter_reach(self) -> None:
        """Log from which step the difficulty filter can act; warn where the run ends before."""
        config = self.config
        if config.dynamic_sampling is None:
            return
        reach = dynamic_sampling.filter_reach(
            config.dynamic_sampling,
            train_tasks=len(self.context.tasks.train),
            tasks_per_step=config.tasks_per_step,
            steps=config.steps,
        )
        if reach is not None:
            acts, message = reach
            logger.log(logging.INFO if acts else logging.WARNING, message)

    # -- setup ------------------------------------------------------------------------------

    def _stage_model(self, config: GRPOConfig, *, adapter: Path | None) -> Any:
        """Load the causal LM the stage trains: the base, or the full weights served before.

        ``adapter`` is merged in for a full fine-tune that follows a LoRA stage.
        """
        from fulmen.algorithms.policy import load_stage_policy

        return load_stage_policy(
            self.context.run.model_path,
            dtype=config.dtype,
            finetune=config.finetune,
            weights=self.context.policy.weights,
            adapter=adapter,
        )

    def _build_updater(self) -> None:
        from fulmen.algorithms.grpo.updater import GRPOUpdater
        from fulmen.algorithms.policy import load_adapter_weights

        progress, policy = self.context.progress, self.context.policy
        config = self.config.update_config(seed=self.context.run.seed)
        config = config.for_engine(self.context.run.engine_dtype)  # mismatch.correction: auto
        log_correction(config)
        model = self._stage_model(config, adapter=policy.adapter)
        self.updater = GRPOUpdater(model, config=config)
        if progress.checkpoint is not None:
            logger.info("resuming after step %d from %s", progress.step, progress.checkpoint)
            self.updater.load_checkpoint(progress.checkpoint)
        elif policy.adapter is not None and not self.updater.is_full:
            logger.info("starting from the adapter %s", policy.adapter)
            load_adapter_weights(self.updater.model, policy.adapter)
        self.updater.policy_version = self.context.policy.version

    # -- one step ---------------------------------------------------------------------------

    async def sample(self, step: int) -> Sample:
        """Publish the served policy and run the step's rollouts; build their transitions."""
        context = self.context
        version = await context.rollouts.publish(metadata={"step": step})
        sampled = await self._sample(step, version)
        finished, trajectories = sampled.finished, sampled.trajectories
        await self._note_failures(finished, trajectories)
        self._attribution.check(step + 1, [tr.diagnostics for tr in trajectories])
        transitions = [t for tr in sampled.trained for t in tr.transitions]
        metrics = self._metrics(finished, trajectories, transitions)
        metrics.update(sampled.metrics)
        return Sample(transitions, metrics)

    async def _sample(self, step: int, version: int) -> dynamic_sampling.SampledStep:
        """Run the step's rollouts: its task draw, or dynamic sampling's groups with signal."""
        context, config = self.context, self.config
        if config.dynamic_sampling is not None:
            return await dynamic_sampling.sample_step(
                context,
                config.dynamic_sampling,
                self._flat_tasks,
                step=step,
                version=version,
                tasks_per_step=config.tasks_per_step,
                group_size=config.group_size,
                options=self.options,
            )
        finished = await context.rollouts.run(
            context.tasks.batch(step, config.tasks_per_step),
            mode=Mode.TRAIN,
            version=version,
            tag=f"s{step}",
            group_size=config.group_size,
        )
        trajectories = await context.rollouts.trajectories(finished, self.options)
        return dynamic_sampling.SampledStep(finished, trajectories, trajectories)

    async def update(self, step: int, batch: Any) -> dict[str, float]:
        """Take the step's policy update on its transitions; return its metrics."""
        return await asyncio.to_thread(
            self.updater.train_step, batch, policy_version=self.context.policy.version
        )

    async def serve(self, completed: int, updated: Mapping[str, float]) -> None:
        """Make the engine serve the updated policy from step ``completed`` on."""
        await super().serve(completed, updated)
        self.updater.policy_version = self.context.policy.version

    def after_step(self, completed: int, sample: Sample, metrics: Mapping[str, float]) -> None:
        """Say why the step made no update or which rollouts failed; stop a failing run."""
        self._warn(completed, metrics)
        self._stop_if_failing(completed, metrics)

    def _warn(self, completed: int, metrics: Mapping[str, float]) -> None:
        """One line per step about its failures, never one per rollout."""
        finished = int(metrics.get("rollouts/finished", 0.0))
        failed = int(metrics.get("rollouts/failed", 0.0))
        if metrics.get("updated") == 0.0:
            if _rewarded(metrics) == 0 and finished and self._step_failure is not None:
                reason = (
                    f"all {finished} rollouts failed; the first: {self._step_failure}"
                    if failed == finished
                    else f"no rollout produced a reward; the first: {self._step_failure}"
                )
                reason += f" (`fulmen rollouts show {self._step_example} --store "
                reason += f"{self.context.run.store_url}`)"
            else:
                reason = no_update_reason(metrics, store_url=self.context.run.store_url)
            logger.warning("step %d made no update: %s", completed, reason)
        elif failed:
            logger.warning(
                "step %d: %d of %d rollouts failed; the first: %s",
                completed,
                failed,
                finished,
                self._step_failure or "no error recorded",
            )

    async def _note_failures(
        self, finished: Sequence[Rollout], trajectories: Sequence[Any]
    ) -> None:
        """Keep the step's first failure, or when no rollout produced a reward, why not.

        A crashed command agent or a Python agent that returned ``None`` leaves a rollout that
        succeeded without a reward; its records (read only then) say which it was, with the
        command's exit status and last stderr line.
        """
        from fulmen.tracing.outcome import no_reward_reason

        failed = [r for r in finished if r.status is not RolloutStatus.SUCCEEDED]
        self._step_failure = error_summary(failed[0].error) if failed else None
        self._step_example = failed[0].rollout_id if failed else None
        if failed and not self._step_failure:
            self._step_failure = f"{failed[0].status.value}, no error recorded"
        if not finished or any(tr.final_reward is not None for tr in trajectories):
            return
        if len(failed) < len(finished):
            unrewarded = [r for r in finished if r.status is RolloutStatus.SUCCEEDED]
            for records in await self.context.rollouts.attempts(unrewarded[:1]):
                self._step_failure = no_reward_reason(records.spans, calls=len(records.calls))
                self._step_example = records.rollout_id

    def _stop_if_failing(self, completed: int, metrics: Mapping[str, float]) -> None:
        """Raise ``AgentFailed`` once ``max_failed_steps`` steps in a row produced no reward.

        A step produces none when every rollout failed, or when those that succeeded gave no
        reward (a command agent that crashed, a Python agent that returned ``None``). Such a
        run learns nothing and would otherwise end looking finished; the error names the
        first failure (or missing reward) of the first of those steps and a listing that
        shows those rollouts.
        """
        finished = metrics.get("rollouts/finished", 0.0)
        if not finished or _rewarded(metrics):
            self._failed_steps, self._first_failure, self._all_failed = 0, None, True
            return
        self._failed_steps += 1
        self._all_failed = self._all_failed and metrics.get("rollouts/failed") == finished
        if self._first_failure is None:
            self._first_failure, self._first_example = self._step_failure, self._step_example
        limit = self.config.max_failed_steps
        if limit is None or self._failed_steps < limit:
            return
        store = self.context.run.store_url
        steps = f"the last {self._failed_steps} steps (to step {completed})"
        first = self._first_failure or "none recorded"
        if self._all_failed:
            raise AgentFailed(
                f"every rollout of {steps} failed; the first error: {first}. Each traceback: "
                f"`fulmen rollouts list --status failed --store {store}` then `fulmen rollouts "
                "show ID`; `fulmen dev CONFIG` runs the agent without training "
                "(algorithm.max_failed_steps sets how many such steps stop the run)"
            )
        raise AgentFailed(
            f"no rollout of {steps} produced a reward; the first: {first}. The rollouts: "
            f"`fulmen rollouts list --mode train --store {store}` (no reward shows as -), one "
            f"of them: `fulmen rollouts show {self._first_example} --store {store}`; `fulmen dev "
            "CONFIG` runs the agent without training and says why each gave none "
            "(algorithm.max_failed_steps sets how many such steps stop the run)"
        )

    def _metrics(
        self,
        finished: Sequence[Rollout],
        trajectories: Sequence[Any],
        transitions: Sequence[Any],
    ) -> dict[str, float]:
        """Return the step's rollout metrics, its trained transitions, the transition counts."""
        metrics = sampled_metrics(finished, trajectories, self.context.run.success_threshold)
        metrics["transitions"] = float(len(transitions))
        metrics.update(_diagnostics(trajectories))
        return metrics


def _rewarded(metrics: Mapping[str, float]) -> int:
    """Return how many of the step's rollouts produced a reward (``rollouts/rewarded``)."""
    count = metrics.get("rollouts/rewarded", 0.0)
    return int(count) if count == count else 0  # NaN counts as 0


def _diagnostics(trajectories: Sequence[Any]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for trajectory in trajectories:
        for key, value in trajectory.diagnostics.model_dump().items():
            totals[f"transitions/{key}"] = totals.get(f"transitions/{key}", 0.0) + float(value)
    return totals


def log_correction(config: GRPOConfig) -> None:
    """Say which engine-trainer correction the update applies, when it applies one."""
    mismatch = config.mismatch
    if mismatch.applied == "none":
        return
    cap = f" (cap {mismatch.truncation:g})" if mismatch.applied == "tis" else ""
    logger.info(
        "engine-trainer gap: the update corrects it with %s%s (algorithm.grpo.mismatch; "
        "docs/engine-mismatch.md)",
        mismatch.applied,
        cap,
    )
