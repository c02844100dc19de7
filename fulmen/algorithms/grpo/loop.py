"""The synchronous on-policy GRPO loop: roll out, build transitions, update, push weights.

``GRPOLoop`` is the loop ``run_grpo`` (``fulmen.algorithms.grpo.run``) runs by default. Each
step publishes a resources version naming the current policy, runs ``group_size`` rollouts for
each of ``tasks_per_step`` tasks, turns their records into transitions (``fulmen.adapter``),
takes one policy update (``GRPOUpdater``), saves the LoRA adapter and hot-loads it into the
engine under a new name (``finetune: full``: saves the model and has the engine reload it as its
weights), and checkpoints. Validation runs on its schedule between steps (the stage runner
validates before and after the stage). A stage that already has a checkpoint resumes after its
last completed step; a stage that starts after another one that published an adapter or full
weights starts from them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fulmen.adapter.attribution import AttributionCheck
from fulmen.adapter.named_rewards import named_reward_means
from fulmen.algorithms.context import AlgorithmContext
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig, GRPOConfig
from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.algorithms.grpo.dynamic_sampling import FlatTasks, SampledStep, sample_step
from fulmen.algorithms.parallel.group import data_parallel
from fulmen.algorithms.rewards import reward_metrics
from fulmen.algorithms.rollout_concurrency import concurrency_metrics
from fulmen.algorithms.serving import keep_newest, serve_policy
from fulmen.algorithms.update_steps import progress_bar, step_postfix
from fulmen.errors import AgentFailed, error_summary
from fulmen.types import Mode, Rollout, RolloutStatus

__all__ = ["GRPOLoop"]

logger = logging.getLogger("fulmen.train")


class GRPOLoop:
    """Runs the GRPO steps of one stage through an ``AlgorithmContext``."""

    def __init__(self, config: GRPOAlgorithmConfig, context: AlgorithmContext) -> None:
        self.config = config
        self.context = context
        self.options = config.transition_options()
        self._attribution = AttributionCheck(self.options)
        self.history: list[dict[str, float]] = []
        self._updater: Any = None
        self._failed_steps = 0  # steps in a row in which no rollout produced a reward
        self._all_failed = True  # whether every rollout of those steps failed
        self._first_failure: str | None = None
        self._step_failure: str | None = None  # the step's first error, or why it had no reward
        self._step_example: str | None = None  # a rollout of the step that shows it
        self._first_example: str | None = None
        sampling = config.dynamic_sampling
        self._flat_tasks = FlatTasks(sampling.skip_flat_for if sampling is not None else 0)

    async def run(self) -> list[dict[str, float]]:
        """Train to the configured number of steps; returns the metrics of each step run.

        With ``algorithm.data_parallel`` (or under ``torchrun``) every update is shared with
        the other ranks (``docs/data-parallel.md``); this process still checkpoints and serves.
        """
        await asyncio.to_thread(self._build_updater)
        policy = self.context.policy
        async with data_parallel(
            self._updater,
            self.config.data_parallel,
            model_path=self.context.run.model_path,
            weights=policy.weights,
            adapter=policy.adapter,
        ):
            return await self._run_steps()

    async def _run_steps(self) -> list[dict[str, float]]:
        total = self.config.steps
        budget = self.config.max_minutes
        deadline = time.monotonic() + budget * 60 if budget else float("inf")
        every = self.context.progress.validation_every
        # The saved progress moves only at checkpoints (a restart resumes from the newest one),
        # so with checkpoint_every > 1 the steps are counted here.
        first = self.context.progress.step
        with progress_bar(total, first, budgeted=bool(budget)) as progress:
            for step in range(first, total):
                metrics = await self._step(step)
                self.history.append(metrics)
                self._stop_if_failing(step + 1, metrics)
                progress.update(1)
                progress.set_postfix(step_postfix(metrics, deadline))
                if step + 1 == total or time.monotonic() >= deadline:
                    break  # the stage runner validates after the stage
                if every and (step + 1) % every == 0:
                    await self.context.progress.validate(step + 1)
        return self.history

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
        model = self._stage_model(config, adapter=policy.adapter)
        self._updater = GRPOUpdater(model, config=config)
        if progress.checkpoint is not None:
            logger.info("resuming after step %d from %s", progress.step, progress.checkpoint)
            self._updater.load_checkpoint(progress.checkpoint)
        elif policy.adapter is not None and not self._updater.is_full:
            logger.info("starting from the adapter %s", policy.adapter)
            load_adapter_weights(self._updater.model, policy.adapter)
        self._updater.policy_version = self.context.policy.version

    # -- one step ---------------------------------------------------------------------------

    async def _step(self, step: int) -> dict[str, float]:
        context = self.context
        started = time.perf_counter()
        version = await context.rollouts.publish(metadata={"step": step})
        sampled = await self._sample(step, version)
        finished, trajectories = sampled.finished, sampled.trajectories
        await self._note_failures(finished, trajectories)
        self._attribution.check(step + 1, [tr.diagnostics for tr in trajectories])
        rolled = time.perf_counter()
        transitions = [t for tr in sampled.trained for t in tr.transitions]
        train_metrics = await self._train(transitions)
        trained = time.perf_counter()
        await self._serve(step + 1, train_metrics)
        synced = time.perf_counter()
        metrics = self._metrics(finished, trajectories, transitions, train_metrics)
        metrics.update(sampled.metrics)
        times = {
            "time/rollout_s": rolled - started,
            "time/train_s": trained - rolled,
            "time/sync_s": synced - trained,
        }
        # The step's metrics first, then the checkpoint that marks it done: a run killed in
        # between runs the step again on resume (twice in the metrics), never loses its line.
        logged = self._log_step(step, metrics, times, started)
        await self._checkpoint(step + 1)
        return logged

    async def _sample(self, step: int, version: int) -> SampledStep:
        """Run the step's rollouts: its task draw, or dynamic sampling's groups with signal."""
        context, config = self.context, self.config
        if config.dynamic_sampling is not None:
            return await sample_step(
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
        return SampledStep(finished, trajectories, trajectories)

    def _log_step(
        self, step: int, metrics: dict[str, float], times: Mapping[str, float], started: float
    ) -> dict[str, float]:
        """Add the step's times to ``metrics``, log them, say why a step made no update."""
        metrics.update(times)
        metrics["time/step_s"] = time.perf_counter() - started
        self.context.progress.log(step + 1, metrics)
        # One line per step about its failures, never one per rollout.
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
            logger.warning("step %d made no update: %s", step + 1, reason)
        elif failed:
            logger.warning(
                "step %d: %d of %d rollouts failed; the first: %s",
                step + 1,
                failed,
                finished,
                self._step_failure or "no error recorded",
            )
        return metrics

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

    async def _train(self, transitions: Sequence[Any]) -> dict[str, float]:
        """Take the step's policy update; return its metrics."""
        return await asyncio.to_thread(
            self._updater.train_step, transitions, policy_version=self.context.policy.version
        )

    async def _serve(self, completed: int, train_metrics: Mapping[str, float]) -> None:
        """Make the engine serve the updated policy from step ``completed`` on."""
        name = f"step-{completed:05d}"
        await serve_policy(self._updater, self.context, name=name, step=completed)
        self._updater.policy_version = self.context.policy.version

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
        train_metrics: dict[str, Any],
    ) -> dict[str, float]:
        rewards = [tr.final_reward for tr in trajectories if tr.final_reward is not None]
        metrics: dict[str, float] = {
            **reward_metrics("reward", rewards, self.context.run.success_threshold),
            **named_reward_means("train/reward", [tr.secondary_rewards for tr in trajectories]),
            "rollouts/finished": float(len(finished)),
            "rollouts/failed": float(
                sum(r.status is not RolloutStatus.SUCCEEDED for r in finished)
            ),
            "rollouts/rewarded": float(len(rewards)),
            **concurrency_metrics(finished),
            "transitions": float(len(transitions)),
            **_diagnostics(trajectories),
            **{
                f"train/{k}" if k in ("step", "time") else k: float(v)
                for k, v in train_metrics.items()
                if isinstance(v, int | float)
            },
        }
        metrics["task/success"] = metrics.pop("reward/success")
        return metrics

    async def _checkpoint(self, completed: int) -> None:
        every = self.config.checkpoint_every
        budget = self.config.max_minutes
        if completed % every and completed != self.config.steps and budget is None:
            return
        checkpoints = self.context.run.run_dir / "checkpoints"
        directory = checkpoints / f"step-{completed:05d}"
        await asyncio.to_thread(self._updater.save_checkpoint, directory)
        self.context.progress.save(completed, checkpoint=directory)
        keep_newest(checkpoints, pattern="step-*")
        if self._updater.is_full:  # a model's size each; LoRA keeps every small adapter
            keep_newest(self.context.run.run_dir / "weights", pattern="step-*")


def _rewarded(metrics: Mapping[str, float]) -> int:
    """Return how many of the step's rollouts produced a reward (``rollouts/rewarded``)."""
    count = metrics.get("rollouts/rewarded", 0.0)
    return int(count) if count == count else 0  # NaN counts as 0


def _diagnostics(trajectories: Sequence[Any]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for trajectory in trajectories:
        for key, value in trajectory.diagnostics.model_dump().items():
            totals[f"adapter/{key}"] = totals.get(f"adapter/{key}", 0.0) + float(value)
    return totals
