"""``RunSession``: what every stage of one training run shares, and the policy the engine serves.

A session holds what lives as long as the run (the started stack, the metrics logger, the
tasks, the saved ``RunState``) and the name and version the engine serves the policy under.
It pushes new weights to the engine — a LoRA adapter hot-loaded under a new name, or full
weights reloaded in place of the base — and puts them back when a killed run restarts.
``StageProgressView`` shows one stage its saved progress with absolute paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fulmen.errors import ConfigError
from fulmen.settings import Settings
from fulmen.trainer.data import TaskSampler
from fulmen.trainer.metrics import MetricsLogger
from fulmen.trainer.stack import TrainingStack
from fulmen.trainer.state import RunState

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainConfig
    from fulmen.trainer.run_record import RunRecorder

__all__ = ["RunSession", "StageProgressView"]

_ADAPTER_PREFIX = "policy-"


@dataclass
class RunSession:
    """What every stage of one run shares (see the module docstring).

    Attributes:
        config: the run's configuration.
        stack: the started store, engine, gateway and runner.
        metrics: the run's metrics stream.
        state: the run directory's saved progress.
        model_path: the base model's local directory.
        train_tasks / val_tasks: the tasks (``val_tasks`` already cut to
            ``validation.max_tasks``; empty without validation).
        model_name: the model name the engine serves the policy under now.
        policy_version: the engine's version of the served weights (``None``: the base).
        uses_stages: the config has ``stages:`` (each stage gets its own directory and its
            metrics are labelled).
        settings: the environment as the run read it once (API keys named in the config).
        recorder: the run's record in the store (metrics, model versions); ``None``: none.
        sampler: draws the training tasks of each step.
    """

    config: TrainConfig
    stack: TrainingStack
    metrics: MetricsLogger
    state: RunState
    model_path: Path
    train_tasks: Sequence[Any]
    val_tasks: Sequence[Any]
    model_name: str = ""
    policy_version: str | None = None
    uses_stages: bool = False
    settings: Settings = field(default_factory=Settings)
    recorder: RunRecorder | None = None
    sampler: TaskSampler = field(init=False)
    #: the policy adapters the engine has loaded, oldest first
    loaded_adapters: list[str] = field(default_factory=list[str], init=False)
    #: one adapter per role: adapter name -> its agent-name patterns, in routing order
    role_patterns: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False)
    #: one adapter per role: adapter name -> the model name the engine serves it under
    role_models: dict[str, str] = field(default_factory=dict[str, str], init=False)

    def __post_init__(self) -> None:
        self.sampler = TaskSampler(self.train_tasks, seed=self.config.seed)

    async def serve_adapter(self, adapter_dir: Path, name: str, *, keep_loaded: int = 1) -> None:
        """Hot-load ``adapter_dir`` as model ``name`` and retire the previously served ones.

        The newest ``keep_loaded`` policy adapters stay loaded (more than 1: rollouts still
        running with an older policy keep it, as asynchronous training needs).
        """
        version = await self.stack.engine.load_adapter(name, str(adapter_dir))
        previous = self.model_name
        self.model_name = name
        self.policy_version = str(version) if version is not None else name
        loaded = self.loaded_adapters
        if previous.startswith(_ADAPTER_PREFIX) and previous not in loaded:
            loaded.append(previous)
        loaded[:] = [*(n for n in loaded if n != name), name]
        while len(loaded) > max(keep_loaded, 1):
            await self.stack.engine.unload_adapter(loaded.pop(0))

    async def serve_role_adapter(self, role: str, adapter_dir: Path, name: str) -> str:
        """Hot-load ``adapter_dir`` as model ``name`` for ``role``, retiring its previous one.

        Returns the engine's version of the loaded adapter (``name`` when it reports none).
        Other roles' adapters stay as they are.
        """
        version = await self.stack.engine.load_adapter(name, str(adapter_dir))
        previous = self.role_models.get(role)
        self.role_models[role] = name
        if previous is not None and previous != name:
            await self.stack.engine.unload_adapter(previous)
        return str(version) if version is not None else name

    def agent_models(self) -> dict[str, str]:
        """Return the ``LLMResource.agent_models`` routes: role patterns to served adapters.

        A role not trained yet is routed to the served policy (``model_name``), so its agents
        never fall through to a later role's pattern.
        """
        return {
            pattern: self.role_models.get(role, self.model_name)
            for role, patterns in self.role_patterns.items()
            for pattern in patterns
        }

    async def serve_weights(self, model_dir: Path | None, name: str) -> None:
        """Reload the engine's base weights from ``model_dir`` (a full fine-tune's model).

        The engine then serves them under the base model's name; an adapter served before is
        retired (a full-weight policy has it merged in). ``name`` is the policy's version
        when the engine reports none. ``model_dir=None`` reloads the original base weights.

        Raises:
            ConfigError: the engine cannot reload full weights (vLLM outside its dev mode).
        """
        engine = self.stack.engine
        if engine is None or not engine.capabilities.full_reload:
            raise ConfigError(
                f"engine.kind {self.config.engine.kind!r} cannot reload full weights; "
                "use finetune: lora, or engine.kind: builtin"
            )
        version = await engine.reload_weights(None if model_dir is None else str(model_dir))
        await self.retire_adapters()
        self.policy_version = str(version) if version is not None else name

    async def retire_adapters(self) -> None:
        """Unload every policy adapter: the engine serves its base weights under the base name.

        ``policy_version`` becomes ``None`` (the base) while no full weights were reloaded.
        """
        previous = self.model_name
        retired = {*self.loaded_adapters, previous}
        self.loaded_adapters.clear()
        self.model_name = self.config.model
        if self.state.weights is None:
            self.policy_version = None
        for adapter in sorted(n for n in retired if n.startswith(_ADAPTER_PREFIX)):
            await self.stack.engine.unload_adapter(adapter)

    async def retire_role_adapter(self, role: str) -> None:
        """Unload ``role``'s adapter: its agents get the served policy again."""
        name = self.role_models.pop(role, None)
        if name is not None:
            await self.stack.engine.unload_adapter(name)

    async def restore_policy(self) -> None:
        """Serve what the saved state says the engine served when the run stopped.

        Full weights first (they are the base), then the adapter on top; a fresh run serves
        the base model and does nothing here.
        """
        state = self.state
        step = state.step_offset + state.step
        if state.weights:
            await self.serve_weights(self.config.run_dir / state.weights, f"weights-{step}")
        if state.adapter:
            await self.serve_adapter(
                self.config.run_dir / state.adapter, f"{_ADAPTER_PREFIX}{step}"
            )
        for role, adapter in state.role_adapters.items():
            await self.serve_role_adapter(
                role, self.config.run_dir / adapter, f"{_ADAPTER_PREFIX}{role}-{step}"
            )


class StageProgressView:
    """``StageProgress`` over the run's ``RunState`` (paths made absolute)."""

    def __init__(self, state: RunState) -> None:
        self._state = state

    @property
    def step(self) -> int:
        """Steps of the current stage completed and checkpointed."""
        return self._state.step

    @property
    def checkpoint(self) -> Path | None:
        """The stage's last checkpoint directory."""
        return self._absolute(self._state.checkpoint)

    @property
    def adapter(self) -> Path | None:
        """The adapter directory the engine serves."""
        return self._absolute(self._state.adapter)

    @property
    def role_adapters(self) -> dict[str, Path]:
        """The adapter directory the engine serves for each role (one adapter per role)."""
        state = self._state
        return {role: state.run_dir / path for role, path in state.role_adapters.items()}

    @property
    def weights(self) -> Path | None:
        """The full-weight model directory the engine serves as its base."""
        return self._absolute(self._state.weights)

    def _absolute(self, value: str | None) -> Path | None:
        return None if value is None else self._state.run_dir / value
