"""``StageContext``: the trainer's implementation of ``fulmen.algorithms.context.AlgorithmContext``.

A ``StageContext`` is the view of the run's ``RunSession`` (``fulmen.trainer.session``) one
algorithm gets for one stage: rollout ids carry the run's id, its start and the stage (so runs
sharing one store never reuse each other's ids, and a restarted run never reuses its own),
metric steps are numbered in the run's stream, its files go to its own directory, and its
progress is saved in the run's ``state.json``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.algorithms.rewards import reward_metrics
from fulmen.errors import ConfigError
from fulmen.trainer.data import task_id_of
from fulmen.trainer.memory import release_freed_memory
from fulmen.trainer.session import RunSession, StageProgressView
from fulmen.types import (
    LLMResource,
    Mode,
    ModelKind,
    Resource,
    ResourcesCreate,
    Rollout,
    RolloutConfig,
    RolloutCreate,
    RolloutStatus,
)
from fulmen.types.sampling_seed import SAMPLING_SEED_KEY, rollout_seed

if TYPE_CHECKING:
    from collections import Counter

    from fulmen.adapter.transitions import AttemptRecords, TransitionOptions
    from fulmen.algorithms.source import StoreSource
    from fulmen.rewards.cache import JudgeCache
    from fulmen.rewards.scoring import RewardJudge
    from fulmen.types import LLMCallCreate, Trajectory
    from fulmen.types.limits import JsonData

__all__ = ["StageContext", "rollout_prefix"]

_log = logging.getLogger("fulmen.train")


class StageContext:
    """The ``AlgorithmContext`` of stage ``index`` (named ``name``) of a run.

    Args:
        session: the run's shared services and state.
        index: the stage's position in the config's plan.
        name: the stage's algorithm name (labels its metrics).
    """

    def __init__(self, session: RunSession, *, index: int, name: str) -> None:
        self.session = session
        self.index = index
        self.name = name
        config = session.config
        base = config.run_dir
        self._run_dir = base / "stages" / f"{index}-{name}" if session.uses_stages else base
        self._run_dir.mkdir(parents=True, exist_ok=True)
        state = session.state
        self._prefix = rollout_prefix(state.run_id, state.generation, index)
        self._progress = StageProgressView(state)
        self._judge_cache: JudgeCache | None = None

    # -- what the algorithm reads -------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        """Return the stage's directory (the run directory itself for a run without stages)."""
        return self._run_dir

    @property
    def model_path(self) -> Path:
        """The base model's local directory."""
        return self.session.model_path

    @property
    def seed(self) -> int:
        """The run's seed."""
        return self.session.config.seed

    @property
    def success_threshold(self) -> float:
        """The reward that counts as a task success."""
        return self.session.config.success_threshold

    @property
    def train_tasks(self) -> Sequence[Any]:
        """The training tasks."""
        return self.session.train_tasks

    @property
    def val_tasks(self) -> Sequence[Any]:
        """The validation tasks (empty without validation)."""
        return self.session.val_tasks

    @property
    def validation_every(self) -> int | None:
        """Validate between steps every this many steps (``None``: no validation)."""
        validation = self.session.config.validation
        if validation is None or not self.session.val_tasks:
            return None
        return validation.every

    @property
    def progress(self) -> StageProgressView:
        """Return the stage's saved progress."""
        return self._progress

    @property
    def resources(self) -> Mapping[str, Resource]:
        """The carried resources other than ``llm``."""
        return dict(self.session.state.resources)

    @property
    def policy_version(self) -> str | None:
        """The engine's version of the served adapter (``None``: the base model)."""
        return self.session.policy_version

    @property
    def engine_url(self) -> str:
        """The engine's ``.../v1`` URL."""
        return self.session.stack.engine_url

    @property
    def store_url(self) -> str:
        """The run's store, as ``fulmen rollouts --store`` takes it."""
        return self.session.stack.store_url

    @property
    def engine_model(self) -> str:
        """The model name the engine serves the policy under now."""
        return self.session.model_name

    def variable(self, name: str) -> str | None:
        """Return the environment variable ``name`` as the run's settings read it."""
        return self.session.settings.variable(name)

    async def record_calls(self, calls: Sequence[LLMCallCreate]) -> None:
        """Store call records that belong to no rollout."""
        await self.session.stack.store.add_llm_calls(calls)

    def task_id(self, index: int, task: Any) -> str:
        """Return the task's id (``data.task_id_key``) or ``task-<index>``."""
        return task_id_of(task, index, self.session.config.data.task_id_key)

    def task_batch(self, step: int, n: int) -> list[tuple[int, Any]]:
        """Return the ``n`` ``(index, task)`` training pairs of ``step`` (seeded, resumable)."""
        return self.session.sampler.batch(step, n)

    def refill_batch(
        self, step: int, draw: int, n: int, exclude: Collection[int] = ()
    ) -> list[tuple[int, Any]]:
        """Return up to ``n`` other training pairs for ``step``'s ``draw``-th extra draw."""
        return self.session.sampler.refill(step, draw, n, exclude)

    def global_step(self, step: int) -> int:
        """``step`` of this stage numbered in the run's metrics stream."""
        return self.session.state.step_offset + step

    # -- what the algorithm does ------------------------------------------------------------

    async def publish(
        self,
        resources: Mapping[str, Resource] | None = None,
        *,
        metadata: Mapping[str, JsonData] | None = None,
        route_as: int | None = None,
    ) -> int:
        """Store ``llm`` plus the carried resources updated with ``resources``.

        A ``grpo`` or ``ppo`` stage's training rollouts sample the behaviour policy its updates
        correct for, so its ``llm`` says so (``behaviour_modes``): the gateway then sends their
        calls with no field that reshapes the distribution and refuses those that constrain
        decoding (``fulmen.types.behaviour``). ``route_as`` routes the calls as stage
        ``route_as`` does (``_served_models``; ``None``: this stage), for a version that stage
        trained and the end of the run serves again (``fulmen.trainer.best``). Returns the new
        version.
        """
        settings = self.session.config.rollouts
        model, routes = self._served_models(self.index if route_as is None else route_as)
        llm = LLMResource(
            base_url=self.session.stack.engine_url,
            model=model,
            agent_models=routes,
            sampling={
                "train": settings.train_sampling,
                "val": settings.val_sampling,
                "test": settings.val_sampling,
            },
            behaviour_modes=(Mode.TRAIN,) if self._samples_behaviour() else (),
        )
        state = self.session.state
        if resources:
            state.resources = {**state.resources, **resources}
        carried: dict[str, Resource] = {**state.resources, "llm": llm}
        info: dict[str, JsonData] = {"stage": self.index, "algorithm": self.name}
        created = await self.session.stack.store.add_resources(
            ResourcesCreate(resources=carried, metadata={**info, **(metadata or {})})
        )
        if self.session.recorder is not None:
            self.session.recorder.resources_published(created)
        return created.version

    async def run_tasks(
        self,
        batch: Sequence[tuple[int, Any]],
        *,
        mode: Mode,
        version: int,
        tag: str,
        group_size: int = 1,
    ) -> list[Rollout]:
        """Run ``group_size`` rollouts per task with resources ``version``; wait for them.

        Each rollout's model calls are sampled with seeds derived from the run's seed and the
        rollout's place in the run (``fulmen.types.sampling_seed``): the same config and seed
        sample the same way in another run. With ``reward:`` configured, each task's group is
        judged once its rollouts finished and the scores are posted as their rewards
        (``fulmen.rewards``) before they are returned.
        """
        creates = [
            self._rollout_create(
                task,
                mode,
                task_id=self.task_id(index, task),
                rollout_id=(
                    f"{self._prefix}-{tag}-t{k}-r{j}"
                    if mode is Mode.TRAIN
                    else f"{self._prefix}-{tag}-t{index}"
                ),
                version=version,
                seed=rollout_seed(self.seed, self.index, mode.value, tag, k, index, j),
            )
            for k, (index, task) in enumerate(batch)
            for j in range(group_size)
        ]
        finished = await self._run(creates)
        if self.session.config.reward is not None:
            size = group_size
            groups = [
                [c.rollout_id for c in creates[k : k + size]] for k in range(0, len(creates), size)
            ]
            await self._judge(finished, groups)
        return finished

    async def trajectories(
        self, rollouts: Sequence[Rollout], options: TransitionOptions
    ) -> list[Trajectory]:
        """Build the transitions of each succeeded rollout."""
        return [record.trajectory(options=options) for record in await self.attempts(rollouts)]

    async def attempts(self, rollouts: Sequence[Rollout]) -> list[AttemptRecords]:
        """Read the records of each succeeded rollout's latest attempt."""
        from fulmen.adapter.transitions import load_attempt

        store = self.session.stack.store
        return [
            await load_attempt(store, r.rollout_id)
            for r in rollouts
            if r.status is RolloutStatus.SUCCEEDED
        ]

    async def succeeded_rollouts(self, mode: Mode) -> list[Rollout]:
        """Every succeeded rollout of ``mode`` in the store, in enqueue order."""
        from fulmen.store.reading import iter_rollouts
        from fulmen.types import RolloutQuery

        query = RolloutQuery(statuses=[RolloutStatus.SUCCEEDED], mode=mode, limit=1000)
        return [r async for r in iter_rollouts(self.session.stack.store, query)]

    async def read_source(self, source: StoreSource) -> list[AttemptRecords]:
        """Read the latest attempt of each rollout of another store that ``source`` keeps."""
        from fulmen.adapter.signals import read_signals
        from fulmen.adapter.transitions import load_attempt
        from fulmen.algorithms.source import keeps
        from fulmen.store import open_store
        from fulmen.store.reading import iter_rollouts

        wanted = source.filter
        attempts: list[AttemptRecords] = []
        # No watchdog: the store is only read, and its owner runs its own.
        async with open_store(source.store, watchdog_interval=None) as store:
            async for rollout in iter_rollouts(store, wanted.query()):
                if wanted.max_rollouts is not None and len(attempts) >= wanted.max_rollouts:
                    break
                records = await load_attempt(store, rollout.rollout_id)
                signals = read_signals(records.calls, records.spans, records.rewards)
                reward, agents = signals.final_reward, signals.agent_names
                if keeps(wanted, rollout, reward=reward, agents=agents):
                    attempts.append(records)
        return attempts

    async def behaviour_calls(
        self, source: StoreSource, attempts: Sequence[AttemptRecords], *, temperature: float
    ) -> tuple[list[AttemptRecords], Counter[str]]:
        """Drop the calls of ``attempts`` not sampled from the behaviour policy (offline GRPO)."""
        from fulmen.trainer.offline_source import behaviour_calls

        return await behaviour_calls(source.store, attempts, temperature=temperature)

    async def scored(self, rollouts: Sequence[Rollout]) -> list[float | None]:
        """Each rollout's final reward; ``None`` for one that failed or emitted none."""
        from fulmen.adapter.transitions import load_attempt

        out: list[float | None] = []
        for rollout in rollouts:
            reward = None
            if rollout.status is RolloutStatus.SUCCEEDED:
                reward = (
                    await load_attempt(self.session.stack.store, rollout.rollout_id)
                ).final_reward
            out.append(reward)
        return out

    async def rewards(self, rollouts: Sequence[Rollout]) -> list[float]:
        """Each rollout's final reward (0.0 when it failed or emitted none)."""
        return [0.0 if r is None else r for r in await self.scored(rollouts)]

    async def validate(self, step: int) -> dict[str, float] | None:
        """Validate the served policy with the carried resources; log at ``step``.

        What was validated (the served weights, adapter and prompts, with each task's
        reward) is added to ``RUN_DIR/validations.jsonl``, from which the end of the run
        picks the version it serves (``fulmen.trainer.best``).
        """
        from fulmen.trainer.best import record_validation, served_now

        session = self.session
        if not session.val_tasks or session.config.validation is None:
            return None
        started = time.perf_counter()
        version = await self.publish(metadata={"step": step})
        finished = await self.run_tasks(
            list(enumerate(session.val_tasks)), mode=Mode.VAL, version=version, tag=f"val{step}"
        )
        # In task order (the store answers in it); None: the rollout failed or gave no reward.
        rewards = await self.scored(finished)
        scored = [r for r in rewards if r is not None]
        metrics = reward_metrics("val/reward", scored, session.config.success_threshold)
        metrics["val/success"] = metrics.pop("val/reward/success")
        metrics["val/reward_mean"] = metrics.pop("val/reward/mean")
        metrics["val/failed"] = float(len(rewards) - len(scored))
        metrics = {**await self._named_reward_means(finished), **metrics}
        metrics["time/val_s"] = time.perf_counter() - started
        self.log(step, metrics)
        if len(scored) < len(rewards):
            _warn_failed_validation(step, finished, len(rewards) - len(scored), self.store_url)
        validated = served_now(
            session,
            step=self.global_step(step),
            stage=self.index,
            algorithm=self.name,
            scores=metrics,
            rewards=rewards,
        )
        record_validation(session.config.run_dir, validated)
        return metrics

    async def _named_reward_means(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        """``val/reward/<name>``: each named secondary reward's mean over the rollouts.

        The summary's own keys (``val/reward/std``) win over a reward with such a name.
        """
        from fulmen.adapter.named_rewards import named_reward_means, secondary_rewards

        attempts = await self.attempts(rollouts)
        values = [secondary_rewards(a.spans, a.rewards) for a in attempts]
        return named_reward_means("val/reward", values)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` at this stage's ``step`` in the run's metrics stream.

        Every algorithm's loop calls this once per step, after its update: the memory the step
        freed goes back to the system here (``release_freed_memory``), and the trainer's
        resident memory joins the step's metrics (``memory/rss_gb``, ``memory/released_gb``).
        """
        metrics = {**metrics, **release_freed_memory()}
        labels = {"stage": self.index, "algorithm": self.name} if self.session.uses_stages else {}
        self.session.metrics.log(self.global_step(step), metrics, labels=labels)

    async def serve_adapter(self, adapter_dir: Path, step: int, *, keep_loaded: int = 1) -> None:
        """Hot-load ``adapter_dir``; later ``publish`` calls name it."""
        name = f"policy-{self.global_step(step)}"
        await self.session.serve_adapter(adapter_dir, name, keep_loaded=keep_loaded)
        self._record_model(ModelKind.ADAPTER, adapter_dir, step)
        self.session.state.adapter = str(adapter_dir.relative_to(self.session.config.run_dir))

    def route_roles(self, adapters: Mapping[str, Sequence[str]]) -> None:
        """Route each role's calls to its own adapter from the next ``publish`` on.

        ``adapters`` maps adapter names to agent-name patterns in routing order; until a
        role's adapter is served its agents get the served policy (the base model).
        """
        self.session.role_patterns = {name: tuple(agents) for name, agents in adapters.items()}

    async def serve_role_adapter(self, role: str, adapter_dir: Path, step: int) -> str:
        """Hot-load ``adapter_dir`` as ``role``'s adapter; return the engine's version of it."""
        name = f"policy-{role}-{self.global_step(step)}"
        version = await self.session.serve_role_adapter(role, adapter_dir, name)
        self._record_model(ModelKind.ADAPTER, adapter_dir, step)
        relative = str(adapter_dir.relative_to(self.session.config.run_dir))
        self.session.state.role_adapters[role] = relative
        return version

    async def serve_weights(self, model_dir: Path, step: int) -> None:
        """Reload the engine's base weights from ``model_dir``; later ``publish`` calls name it."""
        await self.session.serve_weights(model_dir, f"weights-{self.global_step(step)}")
        self._record_model(ModelKind.FULL, model_dir, step)
        state = self.session.state
        state.weights = str(model_dir.relative_to(self.session.config.run_dir))
        state.adapter = None  # merged into the full weights

    def save_progress(self, step: int, *, checkpoint: Path | None = None) -> None:
        """Record ``step`` steps of this stage as done (and the served weights and adapter)."""
        state = self.session.state
        state.step = step
        if checkpoint is not None:
            state.checkpoint = str(checkpoint.relative_to(self.session.config.run_dir))
        state.save()

    def check_services(self) -> None:
        """Raise if the runner stopped on its own."""
        self.session.stack.check_runner()

    # -- plumbing ---------------------------------------------------------------------------

    def _samples_behaviour(self) -> bool:
        """Whether this stage's update assumes its rollouts sampled one known distribution."""
        return type(self.session.config.plan()[self.index]).behaviour_temperature is not None

    def _served_models(self, index: int) -> tuple[str, dict[str, str]]:
        """Return ``llm``'s ``model`` and ``agent_models`` for what the engine serves now.

        A stage whose config names the agents its policy serves (``policy_agents()``: PPO's
        and DPO's ``untrained_agents: base``) routes those agents to the policy and every
        other call, named or not, to the base model; otherwise ``model`` is the policy and
        the routes are the per-role adapters'. Read from the config of stage ``index``, so
        the end of the run (``fulmen.trainer.best``) routes a version it serves again as the
        stage that trained it did.
        """
        session = self.session
        stage = session.config.plan()[index]
        agents = stage.policy_agents()
        if agents is None:
            return session.model_name, session.agent_models()
        base = session.config.model
        if session.model_name == base:
            return base, {}
        return base, {pattern: session.model_name for pattern in agents}

    async def _judge(
        self, finished: Sequence[Rollout], groups: Sequence[Sequence[str | None]]
    ) -> None:
        """Score each task's group of ``finished`` on the rubric; post the rewards."""
        from fulmen.rewards.posting import judge_rollouts

        by_id = {r.rollout_id: r for r in finished}
        rollouts = [[by_id[i] for i in group if i in by_id] for group in groups]
        async with self._reward_judge() as judge:
            judgements = await judge_rollouts(self.session.stack.store, judge, rollouts)
        failed = [j for j in judgements if j.error is not None]
        if failed:
            _log.warning(
                "the judge could not score %d of %d rollouts; they get no reward (the first, "
                "%s: %s). `fulmen rollouts show ID --store %s` shows each error",
                len(failed),
                len(judgements),
                failed[0].rollout_id,
                failed[0].error,
                self.store_url,
            )

    def _reward_judge(self) -> RewardJudge:
        """Build a ``RewardJudge`` for the run's ``reward:``; its answers cached in the run dir."""
        from fulmen.rewards.cache import JudgeCache
        from fulmen.rewards.scoring import RewardJudge

        config = self.session.config.reward
        if config is None:
            raise ConfigError("this run has no reward section")
        judge = config.judge
        api_key = None
        if judge is not None and judge.api_key_env is not None:
            api_key = self.variable(judge.api_key_env)
            if not api_key:
                raise ConfigError(
                    f"reward.judge.api_key_env names ${judge.api_key_env}, which is not set"
                )
        if self._judge_cache is None:
            self._judge_cache = JudgeCache(self.session.config.run_dir / "judge-cache.jsonl")
        store = self.session.stack.store
        return RewardJudge(
            config, api_key=api_key, cache=self._judge_cache, record=store.add_llm_calls
        )

    def _record_model(self, kind: ModelKind, path: Path, step: int) -> None:
        """Tell the run's record in the store that the engine serves a new model."""
        if self.session.recorder is not None:
            self.session.recorder.model_served(kind, path, self.global_step(step))

    def _rollout_create(
        self, task: Any, mode: Mode, *, task_id: str, rollout_id: str, version: int, seed: int
    ) -> RolloutCreate:
        settings = self.session.config.rollouts
        return RolloutCreate(
            input=task,
            mode=mode,
            task_id=task_id,
            rollout_id=rollout_id,
            resources_version=version,
            metadata={SAMPLING_SEED_KEY: seed},
            config=RolloutConfig(
                timeout_s=settings.timeout_s,
                max_attempts=settings.max_attempts,
                heartbeat_timeout_s=settings.heartbeat_timeout_s,
            ),
        )

    async def _run(self, creates: list[RolloutCreate]) -> list[Rollout]:
        store = self.session.stack.store
        await store.enqueue(creates)
        ids = [c.rollout_id for c in creates if c.rollout_id is not None]
        settings = self.session.config.rollouts
        limit = settings.timeout_s * settings.max_attempts + 120
        deadline = time.monotonic() + limit
        while True:
            done = await store.wait_for_rollouts(ids, timeout=5.0)
            if len(done) == len(ids):
                break
            self.check_services()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(ids) - len(done)} rollouts did not finish in {limit:.0f} s"
                )
        return done


def _warn_failed_validation(
    step: int, finished: Sequence[Rollout], failed: int, store_url: str
) -> None:
    """Say that validation rollouts failed: they are left out of ``val/reward_mean``."""
    from fulmen.errors import error_summary

    first = next((r for r in finished if r.status is not RolloutStatus.SUCCEEDED), None)
    what = f"the first: {error_summary(first.error)}" if first and first.error else "no reward"
    # Rollouts that succeeded without a reward are not "failed": only --mode val lists them.
    listing = "--status failed --mode val" if first is not None else "--mode val"
    _log.warning(
        "validation at step %d: %d of %d rollouts failed or gave no reward (%s); they are "
        "counted in val/failed, not in val/reward_mean. `fulmen rollouts list %s --store %s` "
        "lists them (no reward shows as -)",
        step,
        failed,
        len(finished),
        what,
        listing,
        store_url,
    )


def rollout_prefix(run_id: str, generation: int, stage: int) -> str:
    """Return the start of the rollout ids of ``stage`` in start ``generation`` of run ``run_id``.

    Stage 0 leaves the stage out (``3f9a1c2e-g1``; stage 2: ``3f9a1c2e-g1-st2``).
    """
    return f"{run_id}-g{generation}" + (f"-st{stage}" if stage else "")
