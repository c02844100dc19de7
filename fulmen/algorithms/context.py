"""``AlgorithmContext``: what the trainer offers an algorithm's run function, as a Protocol.

An algorithm (``grpo``, ``sft``, ``dpo``, ``ppo``, ``apo``, ``demos``) is a config model plus
one coroutine, ``run(config, context) -> list[dict[str, float]]``. The context is the only way
it reaches the running services: it publishes resources (the current policy endpoint plus any
prompt templates), runs tasks through the normal store -> runner -> gateway path and reads back
their rewards and transitions, validates, logs metrics, serves a new adapter or new full
weights, and records progress so a killed run resumes where it stopped. The trainer implements it
(``fulmen.trainer.context``); algorithms import only this Protocol, so they never touch the
store, engine or gateway directly.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections import Counter

    from fulmen.adapter.transitions import AttemptRecords, TransitionOptions
    from fulmen.algorithms.source import StoreSource
    from fulmen.types import LLMCallCreate, Mode, Resource, Rollout, Trajectory
    from fulmen.types.limits import JsonData

__all__ = ["AlgorithmContext", "StageProgress"]


class StageProgress(Protocol):
    """Where the current stage stands, as saved in the run directory."""

    @property
    def step(self) -> int:
        """Steps (rounds) of this stage completed and checkpointed; a resumed stage starts here."""
        ...

    @property
    def checkpoint(self) -> Path | None:
        """The algorithm's last checkpoint directory, ``None`` before the first."""
        ...

    @property
    def adapter(self) -> Path | None:
        """The adapter the engine serves now (from this stage or an earlier one).

        ``None`` while it serves no adapter.
        """
        ...

    @property
    def role_adapters(self) -> Mapping[str, Path]:
        """With one adapter per role: the adapter the engine serves for each role now."""
        ...

    @property
    def weights(self) -> Path | None:
        """The full-weight model directory the engine serves as its base now.

        Set by a full fine-tune (this stage's or an earlier one's); ``None`` while the engine
        serves the original base model. A stage's policy starts from it.
        """
        ...


class AlgorithmContext(Protocol):
    """The services of one stage of a training run (see the module docstring).

    Steps passed to ``validate``, ``log`` and ``save_progress`` count from 0 within the stage;
    the context numbers them in the run's metrics stream (stages follow each other).
    """

    @property
    def run_dir(self) -> Path:
        """Return the stage's directory for checkpoints, adapters and other files it writes."""
        ...

    @property
    def model_path(self) -> Path:
        """The base model's local Hugging Face directory."""
        ...

    @property
    def seed(self) -> int:
        """The run's seed."""
        ...

    @property
    def success_threshold(self) -> float:
        """A rollout whose reward reaches this counts as a task success."""
        ...

    @property
    def train_tasks(self) -> Sequence[Any]:
        """The training tasks."""
        ...

    @property
    def val_tasks(self) -> Sequence[Any]:
        """The validation tasks (empty when validation is off)."""
        ...

    @property
    def validation_every(self) -> int | None:
        """Validate between steps every this many steps (``None``: validation is off).

        The trainer itself validates before and after each stage.
        """
        ...

    @property
    def progress(self) -> StageProgress:
        """Return the stage's saved progress (read it to resume)."""
        ...

    @property
    def resources(self) -> Mapping[str, Resource]:
        """The resources other than ``llm`` that the latest ``publish`` carried (prompts)."""
        ...

    @property
    def policy_version(self) -> str | None:
        """The version the engine reports for the served adapter, ``None`` for the base."""
        ...

    @property
    def engine_url(self) -> str:
        """The OpenAI-compatible ``.../v1`` URL of the engine serving the policy."""
        ...

    @property
    def store_url(self) -> str:
        """The run's store, as ``fulmen rollouts --store`` takes it (for the hints printed)."""
        ...

    @property
    def engine_model(self) -> str:
        """The model name the engine serves the policy under now."""
        ...

    def variable(self, name: str) -> str | None:
        """Return the environment variable ``name`` as the run read it once (``None``: unset).

        API keys a config names by variable come from here: algorithms never read the
        environment themselves.
        """
        ...

    async def record_calls(self, calls: Sequence[LLMCallCreate]) -> None:
        """Store LLM call records that belong to no rollout (an optimizer's own model calls)."""
        ...

    def task_id(self, index: int, task: Any) -> str:
        """Return the id of ``task`` (its ``data.task_id_key`` or ``task-<index>``)."""
        ...

    def task_batch(self, step: int, n: int) -> list[tuple[int, Any]]:
        """Return the ``n`` ``(index, task)`` training pairs of ``step``.

        They are drawn without replacement, epoch after epoch, from the run's seed, so a resumed
        stage draws the same ones.
        """
        ...

    def refill_batch(
        self, step: int, draw: int, n: int, exclude: Collection[int] = ()
    ) -> list[tuple[int, Any]]:
        """Return up to ``n`` more training pairs for ``step``'s ``draw``-th extra draw.

        For dynamic sampling: seeded by the run's seed, the step and the draw (a resumed stage
        draws the same), never one of ``exclude``, and without moving ``task_batch``'s order.
        """
        ...

    async def publish(
        self,
        resources: Mapping[str, Resource] | None = None,
        *,
        metadata: Mapping[str, JsonData] | None = None,
    ) -> int:
        """Store a new resources version and return its number.

        It holds ``llm`` (the served policy) plus the carried resources updated with
        ``resources``; later stages start from it.
        """
        ...

    async def run_tasks(
        self,
        batch: Sequence[tuple[int, Any]],
        *,
        mode: Mode,
        version: int,
        tag: str,
        group_size: int = 1,
    ) -> list[Rollout]:
        """Run ``group_size`` rollouts of each ``(index, task)`` and wait for them.

        They get resources ``version``; ``tag`` names them (unique within the stage: ``s3``,
        ``round2``).
        """
        ...

    async def trajectories(
        self, rollouts: Sequence[Rollout], options: TransitionOptions
    ) -> list[Trajectory]:
        """Build the transitions of each succeeded rollout (failed ones are left out)."""
        ...

    async def attempts(self, rollouts: Sequence[Rollout]) -> list[AttemptRecords]:
        """Read the records (calls and spans) of each succeeded rollout's latest attempt."""
        ...

    async def succeeded_rollouts(self, mode: Mode) -> list[Rollout]:
        """Read every succeeded rollout of ``mode`` in the run's store (enqueue order).

        Earlier runs and stages are included: an algorithm may learn from them without running
        new ones.
        """
        ...

    async def read_source(self, source: StoreSource) -> list[AttemptRecords]:
        """Read the latest attempt of each rollout of another store that ``source`` keeps.

        The store (kept production traffic, an earlier run, a teacher's) is only read; its
        filter picks succeeded rollouts by mode, task, version, end time, agent and reward,
        at most ``max_rollouts`` of them, in enqueue order.
        """
        ...

    async def behaviour_calls(
        self, source: StoreSource, attempts: Sequence[AttemptRecords], *, temperature: float
    ) -> tuple[list[AttemptRecords], Counter[str]]:
        """Drop the token-level calls of ``attempts`` not sampled from the behaviour policy.

        Each call (of ``source``'s store) is judged on the request its engine got: the
        recorded request with its rollout's sampling fields applied, sampled at
        ``temperature`` with nothing that reshapes the distribution
        (``fulmen.types.behaviour``). Returns the attempts with only the other calls, and how
        many calls were dropped for each reason.
        """
        ...

    async def rewards(self, rollouts: Sequence[Rollout]) -> list[float]:
        """Read the final reward of each rollout (0.0 for a failed one or one without reward)."""
        ...

    async def validate(self, step: int) -> dict[str, float] | None:
        """Validate the currently published resources and log the result at ``step``."""
        ...

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` of ``step`` in the run's metrics stream."""
        ...

    async def serve_adapter(self, adapter_dir: Path, step: int, *, keep_loaded: int = 1) -> None:
        """Hot-load ``adapter_dir`` into the engine; later ``publish`` calls name it.

        The newest ``keep_loaded`` adapters served stay loaded (older policies that running
        rollouts still use); the rest are retired.
        """
        ...

    def route_roles(self, adapters: Mapping[str, Sequence[str]]) -> None:
        """Route each role's calls to its own adapter from the next ``publish`` on.

        ``adapters`` maps adapter names to agent-name patterns in routing order
        (``LLMResource.agent_models``); a role not served yet gets the served policy.
        """
        ...

    async def serve_role_adapter(self, role: str, adapter_dir: Path, step: int) -> str:
        """Hot-load ``adapter_dir`` as ``role``'s adapter (retiring its previous one).

        Returns the engine's version of it (for counting that role's stale transitions).
        """
        ...

    async def serve_weights(self, model_dir: Path, step: int) -> None:
        """Reload the engine's base weights from the model directory ``model_dir``.

        For a full fine-tune: the engine serves them under the base model's name from now on,
        a previously served adapter is retired, and later ``publish`` calls name them.
        """
        ...

    def save_progress(self, step: int, *, checkpoint: Path | None = None) -> None:
        """Record that ``step`` steps of this stage are done; a killed run resumes after it.

        The served weights, adapter and ``checkpoint`` (when given) are saved with it.
        """
        ...

    def check_services(self) -> None:
        """Raise if the runner stopped on its own (call while waiting on something long)."""
        ...
