"""The synchronous on-policy GRPO loop: roll out, build transitions, update, push weights.

Each step publishes a resources version naming the current policy, enqueues ``group_size``
rollouts for each of ``tasks_per_step`` tasks, waits for them, turns their records into
transitions (``fulmen.adapter``), takes one policy update (``GRPOEngine``), saves the LoRA
adapter, hot-loads it into the engine under a new name, and checkpoints. Validation runs
before the first step, on its schedule, and after the last step. A run directory that already
holds a checkpoint resumes after its last completed step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from fulmen.adapter.attribution import AttributionCheck
from fulmen.trainer.config import TrainConfig
from fulmen.trainer.data import TaskSampler, task_id_of
from fulmen.trainer.diagnose import no_update_reason
from fulmen.trainer.metrics import MetricsLogger
from fulmen.trainer.stack import TrainingStack
from fulmen.types import (
    LLMResource,
    Mode,
    ResourcesCreate,
    Rollout,
    RolloutConfig,
    RolloutCreate,
    RolloutStatus,
)

__all__ = ["GRPOLoop", "RunState", "progress_bar"]

logger = logging.getLogger("fulmen.train")

_STATE_FILE = "state.json"
_KEEP_CHECKPOINTS = 2


class RunState:
    """What a run directory says about progress: completed steps, adapter, restarts.

    Written atomically (temporary file + rename) after each checkpoint, so a crash leaves
    either the previous state or the new one.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / _STATE_FILE
        data: dict[str, Any] = {}
        if self.path.exists():
            data = json.loads(self.path.read_text(encoding="utf-8"))
        self.step: int = int(data.get("step", 0))
        self.generation: int = int(data.get("generation", 0))
        self.checkpoint: str | None = data.get("checkpoint")
        self.adapter: str | None = data.get("adapter")

    def save(self) -> None:
        """Write the state atomically."""
        tmp = self.path.with_suffix(".tmp")
        payload = {
            "step": self.step,
            "generation": self.generation,
            "checkpoint": self.checkpoint,
            "adapter": self.adapter,
        }
        tmp.write_text(json.dumps(payload, indent=2), encoding="utf-8")
        os.replace(tmp, self.path)


class GRPOLoop:
    """Runs ``config.algorithm.steps`` GRPO steps against a started ``TrainingStack``."""

    def __init__(
        self,
        config: TrainConfig,
        stack: TrainingStack,
        *,
        train_tasks: Sequence[Any],
        val_tasks: Sequence[Any] | None,
        metrics: MetricsLogger,
        model_path: Path,
    ) -> None:
        self.config = config
        self.stack = stack
        self.train_sampler = TaskSampler(train_tasks, seed=config.seed)
        self.val_tasks = list(val_tasks or [])
        if config.validation and config.validation.max_tasks:
            self.val_tasks = self.val_tasks[: config.validation.max_tasks]
        self.metrics = metrics
        self.model_path = model_path
        self.options = config.transition_options()
        self._attribution = AttributionCheck(self.options)
        self.run_dir = config.run_dir
        self.state = RunState(self.run_dir)
        self.model_name = self.config.model
        self.policy_version: str | None = None
        self.history: list[dict[str, float]] = []
        self._trainer: Any = None

    async def run(self) -> list[dict[str, float]]:
        """Train to the configured number of steps; returns the metrics of each step run."""
        await asyncio.to_thread(self._build_trainer)
        await self._resume()
        total = self.config.algorithm.steps
        budget = self.config.algorithm.max_minutes
        deadline = time.monotonic() + budget * 60 if budget else float("inf")
        with progress_bar(total, self.state.step) as progress:
            if self.state.step == 0:
                await self._validate(0)
            while self.state.step < total:
                step = self.state.step
                metrics = await self._step(step)
                self.history.append(metrics)
                progress.update(1)
                progress.set_postfix(
                    reward=f"{metrics['reward/mean']:.3f}", step_s=f"{metrics['time/step_s']:.1f}"
                )
                is_last = step + 1 == total or time.monotonic() >= deadline
                every = self.config.validation.every if self.config.validation else 0
                if is_last or (every and (step + 1) % every == 0):
                    await self._validate(step + 1)
                if is_last:
                    break
        return self.history

    # -- setup and resume -------------------------------------------------------------------

    def _build_trainer(self) -> None:
        from fulmen.algorithms.grpo.engine import GRPOEngine

        self._trainer = GRPOEngine.from_pretrained(
            self.model_path, config=self.config.grpo_config()
        )

    async def _resume(self) -> None:
        self.state.generation += 1
        if self.state.checkpoint:
            checkpoint = self.run_dir / self.state.checkpoint
            logger.info("resuming after step %d from %s", self.state.step, checkpoint)
            await asyncio.to_thread(self._trainer.load_checkpoint, checkpoint)
            if self.state.adapter:
                await self._push_adapter(self.run_dir / self.state.adapter, self.state.step)
        await self._cancel_leftovers()
        self.state.save()

    async def _cancel_leftovers(self) -> None:
        """Cancel rollouts a crashed run left unfinished: their step is run again."""
        from fulmen.store.reading import iter_rollouts
        from fulmen.types import RolloutQuery

        unfinished = RolloutQuery(statuses=[RolloutStatus.QUEUING, RolloutStatus.RUNNING])
        store = self.stack.store
        # Collected first: cancelling while paging would shift the pages under the cursor.
        leftovers = [r.rollout_id async for r in iter_rollouts(store, unfinished)]
        for rollout_id in leftovers:
            await store.update_rollout(rollout_id, status=RolloutStatus.CANCELLED)

    # -- one step ---------------------------------------------------------------------------

    async def _step(self, step: int) -> dict[str, float]:
        started = time.perf_counter()
        version = await self._publish_resources(step)
        batch = self.train_sampler.batch(step, self.config.algorithm.tasks_per_step)
        key = self.config.data.task_id_key
        creates = [
            self._rollout_create(
                task,
                Mode.TRAIN,
                task_id=task_id_of(task, index, key),
                rollout_id=f"g{self.state.generation}-s{step}-t{k}-r{j}",
                version=version,
            )
            for k, (index, task) in enumerate(batch)
            for j in range(self.config.algorithm.group_size)
        ]
        finished = await self._run_rollouts(creates)
        trajectories = await self._trajectories(finished)
        self._attribution.check(step + 1, [tr.diagnostics for tr in trajectories])
        rolled = time.perf_counter()
        transitions = [t for tr in trajectories for t in tr.transitions]
        train_metrics = await asyncio.to_thread(
            self._trainer.train_step, transitions, policy_version=self.policy_version
        )
        trained = time.perf_counter()
        adapter_dir = self.run_dir / "adapters" / f"step-{step + 1:05d}"
        await asyncio.to_thread(self._trainer.save_adapter, adapter_dir)
        await self._push_adapter(adapter_dir, step + 1)
        synced = time.perf_counter()
        await self._checkpoint(step + 1, adapter_dir)
        rewards = [tr.final_reward for tr in trajectories if tr.final_reward is not None]
        metrics: dict[str, float] = {
            **_reward_metrics("reward", rewards, self._threshold()),
            "rollouts/finished": float(len(finished)),
            "rollouts/failed": float(
                sum(r.status is not RolloutStatus.SUCCEEDED for r in finished)
            ),
            "transitions": float(len(transitions)),
            **_diagnostics(trajectories),
            **{
                f"train/{k}" if k in ("step", "time") else k: float(v)
                for k, v in train_metrics.items()
                if isinstance(v, int | float)
            },
            "time/rollout_s": rolled - started,
            "time/train_s": trained - rolled,
            "time/sync_s": synced - trained,
            "time/step_s": time.perf_counter() - started,
        }
        metrics["task/success"] = metrics.pop("reward/success")
        self.metrics.log(step + 1, metrics)
        if metrics.get("updated") == 0.0:
            logger.warning("step %d made no update: %s", step + 1, no_update_reason(metrics))
        return metrics

    def _threshold(self) -> float:
        return self.config.success_threshold

    def _rollout_create(
        self, task: Any, mode: Mode, *, task_id: str, rollout_id: str, version: int
    ) -> RolloutCreate:
        settings = self.config.rollouts
        return RolloutCreate(
            input=task,
            mode=mode,
            task_id=task_id,
            rollout_id=rollout_id,
            resources_version=version,
            config=RolloutConfig(
                timeout_s=settings.timeout_s,
                max_attempts=settings.max_attempts,
                heartbeat_timeout_s=30.0,
            ),
        )

    async def _publish_resources(self, step: int) -> int:
        settings = self.config.rollouts
        llm = LLMResource(
            base_url=self.stack.engine_url,
            model=self.model_name,
            sampling={
                "train": settings.train_sampling,
                "val": settings.val_sampling,
                "test": settings.val_sampling,
            },
        )
        resources = await self.stack.store.add_resources(
            ResourcesCreate(resources={"llm": llm}, metadata={"step": step})
        )
        return resources.version

    async def _run_rollouts(self, creates: list[RolloutCreate]) -> list[Rollout]:
        store = self.stack.store
        await store.enqueue(creates)
        ids = [c.rollout_id for c in creates if c.rollout_id is not None]
        limit = self.config.rollouts.timeout_s * self.config.rollouts.max_attempts + 120
        deadline = time.monotonic() + limit
        while True:
            done = await store.wait_for_rollouts(ids, timeout=5.0)
            if len(done) == len(ids):
                break
            self.stack.check_runner()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(ids) - len(done)} rollouts did not finish in {limit:.0f} s"
                )
        return done

    async def _trajectories(self, rollouts: Sequence[Rollout]) -> list[Any]:
        from fulmen.adapter.transitions import load_trajectory

        out = []
        for rollout in rollouts:
            if rollout.status is RolloutStatus.SUCCEEDED:
                out.append(
                    await load_trajectory(
                        self.stack.store, rollout.rollout_id, options=self.options
                    )
                )
        return out

    async def _push_adapter(self, adapter_dir: Path, step: int) -> None:
        name = f"policy-{step}"
        version = await self.stack.engine.load_adapter(name, str(adapter_dir))
        previous = self.model_name
        self.model_name = name
        self.policy_version = str(version) if version is not None else name
        self._trainer.policy_version = self.policy_version
        if previous.startswith("policy-") and previous != name:
            await self.stack.engine.unload_adapter(previous)

    async def _checkpoint(self, completed: int, adapter_dir: Path) -> None:
        every = self.config.algorithm.checkpoint_every
        budget = self.config.algorithm.max_minutes
        if completed % every and completed != self.config.algorithm.steps and budget is None:
            return
        directory = self.run_dir / "checkpoints" / f"step-{completed:05d}"
        await asyncio.to_thread(self._trainer.save_checkpoint, directory)
        self.state.step = completed
        self.state.checkpoint = str(directory.relative_to(self.run_dir))
        self.state.adapter = str(adapter_dir.relative_to(self.run_dir))
        self.state.save()
        for old in sorted((self.run_dir / "checkpoints").glob("step-*"))[:-_KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)

    # -- validation -------------------------------------------------------------------------

    async def _validate(self, step: int) -> dict[str, float] | None:
        if not self.val_tasks or self.config.validation is None:
            return None
        started = time.perf_counter()
        version = await self._publish_resources(step)
        key = self.config.data.task_id_key
        creates = [
            self._rollout_create(
                task,
                Mode.VAL,
                task_id=task_id_of(task, index, key),
                rollout_id=f"g{self.state.generation}-val{step}-t{index}",
                version=version,
            )
            for index, task in enumerate(self.val_tasks)
        ]
        finished = await self._run_rollouts(creates)
        rewards = [
            await self._final_reward(r) if r.status is RolloutStatus.SUCCEEDED else 0.0
            for r in finished
        ]
        metrics = _reward_metrics("val/reward", rewards, self._threshold())
        metrics["val/success"] = metrics.pop("val/reward/success")
        metrics["val/reward_mean"] = metrics.pop("val/reward/mean")
        metrics["time/val_s"] = time.perf_counter() - started
        self.metrics.log(step, metrics)
        return metrics

    async def _final_reward(self, rollout: Rollout) -> float:
        from fulmen.adapter.transitions import load_attempt

        records = await load_attempt(self.stack.store, rollout.rollout_id)
        reward = records.final_reward
        return 0.0 if reward is None else reward


def _reward_metrics(prefix: str, rewards: Sequence[float], threshold: float) -> dict[str, float]:
    if not rewards:
        return {
            f"{prefix}/mean": float("nan"),
            f"{prefix}/std": float("nan"),
            f"{prefix}/success": float("nan"),
        }
    return {
        f"{prefix}/mean": statistics.fmean(rewards),
        f"{prefix}/std": statistics.pstdev(rewards),
        f"{prefix}/success": sum(r >= threshold for r in rewards) / len(rewards),
    }


def _diagnostics(trajectories: Sequence[Any]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for trajectory in trajectories:
        for key, value in trajectory.diagnostics.model_dump().items():
            totals[f"adapter/{key}"] = totals.get(f"adapter/{key}", 0.0) + float(value)
    return totals


@contextlib.contextmanager
def progress_bar(total: int, initial: int) -> Iterator[Any]:
    """Show a tqdm bar for the steps; log records go through ``tqdm.write`` while it is shown.

    Without the redirect, a log line printed mid-step lands on the bar's line (the bar is drawn
    without a newline), and the next redraw overwrites part of it.
    """
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    with (
        logging_redirect_tqdm(),
        tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True) as bar,
    ):
        yield bar
