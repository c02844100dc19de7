"""``ServedModels``: the names and version the engine serves the policy under, and changing them.

The engine serves the base model under its own name; a LoRA adapter is hot-loaded under a new
name (``policy-...``) and becomes the policy's model name, older ones retired but for the newest
few that running rollouts may still use; full weights are reloaded in place of the base (the
base name serves them, an adapter served before is retired); with one adapter per role each
role's adapter is loaded under a name of its own, and the ``LLMResource.agent_models`` routes
send each role's agents to it. This is the engine's side of the trainer's ``PolicyServer``
(``fulmen.trainer.policy_server``), which decides what to serve and records it; the end of a
run serves an earlier version through it directly (``fulmen.trainer.best``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from fulmen.engines.base import Engine

__all__ = ["ADAPTER_PREFIX", "ServedModels"]

#: The start of every policy adapter's model name (``policy-12``, ``policy-solver-12``).
ADAPTER_PREFIX = "policy-"


class ServedModels:
    """What the engine serves the policy under (see the module docstring).

    Args:
        engine: the run's engine (``None``: an endpoint the run cannot load weights into).
        base: the base model's name, the policy's model name while no adapter is served.
        engine_kind: ``engine.kind`` of the config (for the error when weights cannot reload).
    """

    def __init__(self, engine: Engine | None, *, base: str, engine_kind: str) -> None:
        self._engine = engine
        self._base = base
        self._engine_kind = engine_kind
        self._model_name = base
        self._version: str | None = None
        self._reloaded = False  # whether the engine's base weights are a reloaded model
        self._loaded: list[str] = []  # the policy adapters the engine has loaded, oldest first
        self._role_patterns: dict[str, tuple[str, ...]] = {}  # adapter -> agent patterns
        self._role_models: dict[str, str] = {}  # adapter -> the model name it is served under

    @property
    def model_name(self) -> str:
        """The model name the engine serves the policy under now."""
        return self._model_name

    @property
    def version(self) -> str | None:
        """The engine's version of the served weights (``None``: the original base)."""
        return self._version

    def routes(self) -> dict[str, str]:
        """Return the ``LLMResource.agent_models`` routes: role patterns to served adapters.

        A role not trained yet is routed to the served policy (``model_name``), so its agents
        never fall through to a later role's pattern.
        """
        return {
            pattern: self._role_models.get(role, self._model_name)
            for role, patterns in self._role_patterns.items()
            for pattern in patterns
        }

    def route_roles(self, adapters: Mapping[str, Sequence[str]]) -> None:
        """Route each adapter's agent-name patterns (in routing order) to that adapter."""
        self._role_patterns = {name: tuple(agents) for name, agents in adapters.items()}

    async def load_adapter(self, adapter_dir: Path, name: str, *, keep_loaded: int = 1) -> None:
        """Hot-load ``adapter_dir`` as model ``name`` and retire the previously served ones.

        The newest ``keep_loaded`` policy adapters stay loaded (more than 1: rollouts still
        running with an older policy keep it, as asynchronous training needs).
        """
        engine = self._require_engine()
        version = await engine.load_adapter(name, str(adapter_dir))
        previous = self._model_name
        self._model_name = name
        self._version = str(version) if version is not None else name
        loaded = self._loaded
        if previous.startswith(ADAPTER_PREFIX) and previous not in loaded:
            loaded.append(previous)
        loaded[:] = [*(n for n in loaded if n != name), name]
        while len(loaded) > max(keep_loaded, 1):
            await engine.unload_adapter(loaded.pop(0))

    async def load_role_adapter(self, role: str, adapter_dir: Path, name: str) -> str:
        """Hot-load ``adapter_dir`` as model ``name`` for ``role``, retiring its previous one.

        Returns the engine's version of the loaded adapter (``name`` when it reports none).
        Other roles' adapters stay as they are.
        """
        engine = self._require_engine()
        version = await engine.load_adapter(name, str(adapter_dir))
        previous = self._role_models.get(role)
        self._role_models[role] = name
        if previous is not None and previous != name:
            await engine.unload_adapter(previous)
        return str(version) if version is not None else name

    async def reload_weights(self, model_dir: Path | None, name: str) -> None:
        """Reload the engine's base weights from ``model_dir`` (a full fine-tune's model).

        The engine then serves them under the base model's name; an adapter served before is
        retired (a full-weight policy has it merged in). ``name`` is the policy's version
        when the engine reports none. ``model_dir=None`` reloads the original base weights.

        Raises:
            ConfigError: the engine cannot reload full weights (vLLM outside its dev mode).
        """
        engine = self._engine
        if engine is None or not engine.capabilities.full_reload:
            raise ConfigError(
                f"engine.kind {self._engine_kind!r} cannot reload full weights; "
                "use finetune: lora, or engine.kind: builtin"
            )
        version = await engine.reload_weights(None if model_dir is None else str(model_dir))
        self._reloaded = model_dir is not None
        await self.retire_adapters()
        self._version = str(version) if version is not None else name

    async def retire_adapters(self) -> None:
        """Unload every policy adapter: the engine serves its base weights under the base name.

        ``version`` becomes ``None`` (the base) while no full weights were reloaded.
        """
        previous = self._model_name
        retired = {*self._loaded, previous}
        self._loaded.clear()
        self._model_name = self._base
        if not self._reloaded:
            self._version = None
        for adapter in sorted(n for n in retired if n.startswith(ADAPTER_PREFIX)):
            await self._require_engine().unload_adapter(adapter)

    async def retire_role_adapter(self, role: str) -> None:
        """Unload ``role``'s adapter: its agents get the served policy again."""
        name = self._role_models.pop(role, None)
        if name is not None:
            await self._require_engine().unload_adapter(name)

    def _require_engine(self) -> Engine:
        """Return the engine (config validation keeps weight-training stages off an endpoint)."""
        if self._engine is None:
            raise ConfigError(
                f"engine.kind {self._engine_kind!r} cannot load adapters; it serves a model "
                "that is already running"
            )
        return self._engine
