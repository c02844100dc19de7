"""``StageRollouts``: the trainer's ``context.rollouts`` for one stage.

It publishes resources versions naming what the engine serves (``llm``, routed as the stage's
config says) plus the prompts the run carries, enqueues rollouts in the run's store with ids
that carry the run's id, its start and the stage (so runs sharing one store never reuse each
other's ids, and a restarted run never reuses its own) and sampling seeds derived from the
run's seed, waits for them, has the run's judge score them when ``reward:`` is configured, and
reads back their records, rewards and transitions, or another store's rollouts for offline
training (``fulmen.trainer.offline_source``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fulmen.trainer.training_run import TrainingRun
from fulmen.types import (
    LLMResource,
    Mode,
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

    from fulmen.algorithms.source import StoreSource
    from fulmen.transitions.credit import CreditFn
    from fulmen.transitions.trajectory import AttemptRecords, TransitionOptions
    from fulmen.types import LLMCallCreate, Trajectory
    from fulmen.types.limits import JsonData

__all__ = ["StageRollouts"]


class StageRollouts:
    """The rollouts of stage ``index`` (named ``name``) of a run.

    Args:
        training: the run's shared services and state.
        index: the stage's position in the config's plan.
        name: the stage's algorithm name (in each published version's metadata).
        prefix: the start of the stage's rollout ids (``fulmen.trainer.context.rollout_prefix``).
    """

    def __init__(self, training: TrainingRun, *, index: int, name: str, prefix: str) -> None:
        self._training = training
        self._index = index
        self._name = name
        self._prefix = prefix

    @property
    def resources(self) -> Mapping[str, Resource]:
        """The carried resources other than ``llm``."""
        return dict(self._training.state.resources)

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
        training = self._training
        settings = training.config.rollouts
        model, routes = self._served_models(self._index if route_as is None else route_as)
        llm = LLMResource(
            base_url=training.stack.engine_url,
            model=model,
            agent_models=routes,
            sampling={
                "train": settings.train_sampling,
                "val": settings.val_sampling,
                "test": settings.val_sampling,
            },
            behaviour_modes=(Mode.TRAIN,) if self._samples_behaviour() else (),
        )
        state = training.state
        if resources:
            state.resources = {**state.resources, **resources}
        carried: dict[str, Resource] = {**state.resources, "llm": llm}
        info: dict[str, JsonData] = {"stage": self._index, "algorithm": self._name}
        created = await training.stack.store.add_resources(
            ResourcesCreate(resources=carried, metadata={**info, **(metadata or {})})
        )
        if training.recorder is not None:
            training.recorder.resources_published(created)
        return created.version

    async def run(
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
        (``fulmen.trainer.judging``) before they are returned.
        """
        training = self._training
        seed = training.config.seed
        creates = [
            self._rollout_create(
                task,
                mode,
                task_id=training.tasks.task_id(index, task),
                rollout_id=(
                    f"{self._prefix}-{tag}-t{k}-r{j}"
                    if mode is Mode.TRAIN
                    else f"{self._prefix}-{tag}-t{index}"
                ),
                version=version,
                seed=rollout_seed(seed, self._index, mode.value, tag, k, index, j),
            )
            for k, (index, task) in enumerate(batch)
            for j in range(group_size)
        ]
        finished = await self._wait(creates)
        if training.scorer is not None:
            size = group_size
            groups = [
                [c.rollout_id for c in creates[k : k + size]] for k in range(0, len(creates), size)
            ]
            await training.scorer.score(finished, groups)
        return finished

    async def trajectories(
        self,
        rollouts: Sequence[Rollout],
        options: TransitionOptions,
        *,
        credit: CreditFn | None = None,
    ) -> list[Trajectory]:
        """Build the transitions of each succeeded rollout (``credit``: see the protocol)."""
        return [
            record.trajectory(options=options, credit=credit)
            for record in await self.attempts(rollouts)
        ]

    async def attempts(self, rollouts: Sequence[Rollout]) -> list[AttemptRecords]:
        """Read the records of each succeeded rollout's latest attempt."""
        from fulmen.transitions.trajectory import load_attempt

        store = self._training.stack.store
        return [
            await load_attempt(store, r.rollout_id)
            for r in rollouts
            if r.status is RolloutStatus.SUCCEEDED
        ]

    async def scored(self, rollouts: Sequence[Rollout]) -> list[float | None]:
        """Each rollout's final reward; ``None`` for one that failed or emitted none."""
        from fulmen.transitions.trajectory import load_attempt

        out: list[float | None] = []
        for rollout in rollouts:
            reward = None
            if rollout.status is RolloutStatus.SUCCEEDED:
                reward = (
                    await load_attempt(self._training.stack.store, rollout.rollout_id)
                ).final_reward
            out.append(reward)
        return out

    async def rewards(self, rollouts: Sequence[Rollout]) -> list[float]:
        """Each rollout's final reward (0.0 when it failed or emitted none)."""
        return [0.0 if r is None else r for r in await self.scored(rollouts)]

    async def succeeded(self, mode: Mode) -> list[Rollout]:
        """Every succeeded rollout of ``mode`` in the store, in enqueue order."""
        from fulmen.store.reading import iter_rollouts
        from fulmen.types import RolloutQuery

        query = RolloutQuery(statuses=[RolloutStatus.SUCCEEDED], mode=mode, limit=1000)
        return [r async for r in iter_rollouts(self._training.stack.store, query)]

    async def read_source(self, source: StoreSource) -> list[AttemptRecords]:
        """Read the latest attempt of each rollout of another store that ``source`` keeps."""
        from fulmen.trainer.offline_source import read_source

        return await read_source(source)

    async def behaviour_calls(
        self, source: StoreSource, attempts: Sequence[AttemptRecords], *, temperature: float
    ) -> tuple[list[AttemptRecords], Counter[str]]:
        """Drop the calls of ``attempts`` not sampled from the behaviour policy (offline GRPO)."""
        from fulmen.trainer.offline_source import behaviour_calls

        return await behaviour_calls(source.store, attempts, temperature=temperature)

    async def record_calls(self, calls: Sequence[LLMCallCreate]) -> None:
        """Store call records that belong to no rollout."""
        await self._training.stack.store.add_llm_calls(calls)

    # -- plumbing ---------------------------------------------------------------------------

    def _samples_behaviour(self) -> bool:
        """Whether this stage's update assumes its rollouts sampled one known distribution."""
        stage = self._training.config.plan()[self._index]
        return type(stage).behaviour_temperature is not None

    def _served_models(self, index: int) -> tuple[str, dict[str, str]]:
        """Return ``llm``'s ``model`` and ``agent_models`` for what the engine serves now.

        A stage whose config names the agents its policy serves (``policy_agents()``: PPO's
        and DPO's ``untrained_agents: base``) routes those agents to the policy and every
        other call, named or not, to the base model; otherwise ``model`` is the policy and
        the routes are the per-role adapters'. Read from the config of stage ``index``, so
        the end of the run (``fulmen.trainer.best``) routes a version it serves again as the
        stage that trained it did.
        """
        training = self._training
        models = training.policy.models
        agents = training.config.plan()[index].policy_agents()
        if agents is None:
            return models.model_name, models.routes()
        base = training.config.model
        if models.model_name == base:
            return base, {}
        return base, {pattern: models.model_name for pattern in agents}

    def _rollout_create(
        self, task: Any, mode: Mode, *, task_id: str, rollout_id: str, version: int, seed: int
    ) -> RolloutCreate:
        """Build one rollout to enqueue, with the run's rollout settings and its sampling seed."""
        settings = self._training.config.rollouts
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

    async def _wait(self, creates: list[RolloutCreate]) -> list[Rollout]:
        """Enqueue ``creates`` and wait for every one to end (checking the services meanwhile)."""
        store = self._training.stack.store
        await store.enqueue(creates)
        ids = [c.rollout_id for c in creates if c.rollout_id is not None]
        settings = self._training.config.rollouts
        limit = settings.timeout_s * settings.max_attempts + 120
        deadline = time.monotonic() + limit
        while True:
            done = await store.wait_for_rollouts(ids, timeout=5.0)
            if len(done) == len(ids):
                break
            self._training.stack.check_runner()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(ids) - len(done)} rollouts did not finish in {limit:.0f} s"
                )
        return done
