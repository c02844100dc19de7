"""``PolicyServer``: the trainer's ``context.policy``, the one owner of what the engine serves.

It holds what the engine serves: the names and version it serves the policy under
(``ServedModels``) and, as files, what training left it serving (``ServedFiles``: full weights,
an adapter, each role's adapter), which is saved in ``state.json`` with the step it belongs to,
so a restarted run serves exactly that again (``restore``). A stage serves each new policy
through it: the engine loads it under a name numbered by the run's step (``policy-12``,
``policy-solver-12``, ``weights-12``), the run's record in the store notes the new model, and
the files it serves are recorded. One ``PolicyServer`` lives as long as the run: stages hand the
served policy on to each other through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.trainer.served_models import ADAPTER_PREFIX, ServedModels
from fulmen.trainer.state import RunState, ServedFiles
from fulmen.types import ModelKind

if TYPE_CHECKING:
    from fulmen.trainer.run_record import RunRecorder

__all__ = ["PolicyServer"]


class PolicyServer:
    """What the engine serves, and serving a new policy (see the module docstring).

    Args:
        models: the engine's side: the names it serves the policy under.
        state: the run's saved state; its ``served`` record is written here only.
        run_dir: the run directory (served files are recorded relative to it).
        recorder: the run's record in the store; ``None``: none.
    """

    def __init__(
        self,
        models: ServedModels,
        state: RunState,
        *,
        run_dir: Path,
        recorder: RunRecorder | None = None,
    ) -> None:
        self.models = models
        self._state = state
        self._run_dir = run_dir
        self._recorder = recorder

    @property
    def served(self) -> ServedFiles:
        """What training left the engine serving, relative to the run directory."""
        return self._state.served

    @property
    def version(self) -> str | None:
        """The engine's version of the served weights (``None``: the base model)."""
        return self.models.version

    @property
    def adapter(self) -> Path | None:
        """The adapter directory the engine serves."""
        return self._absolute(self.served.adapter)

    @property
    def role_adapters(self) -> dict[str, Path]:
        """The adapter directory the engine serves for each role (one adapter per role)."""
        return {role: self._run_dir / path for role, path in self.served.role_adapters.items()}

    @property
    def weights(self) -> Path | None:
        """The full-weight model directory the engine serves as its base."""
        return self._absolute(self.served.weights)

    async def serve_adapter(self, adapter_dir: Path, step: int, *, keep_loaded: int = 1) -> None:
        """Hot-load ``adapter_dir``; later ``publish`` calls name it."""
        name = f"{ADAPTER_PREFIX}{self._state.run_step(step)}"
        await self.models.load_adapter(adapter_dir, name, keep_loaded=keep_loaded)
        self._record(ModelKind.ADAPTER, adapter_dir, step)
        self._state.served = replace(self.served, adapter=self._relative(adapter_dir))

    def route_roles(self, adapters: Mapping[str, Sequence[str]]) -> None:
        """Route each role's calls to its own adapter from the next ``publish`` on.

        ``adapters`` maps adapter names to agent-name patterns in routing order; until a
        role's adapter is served its agents get the served policy (the base model).
        """
        self.models.route_roles(adapters)

    async def serve_role_adapter(self, role: str, adapter_dir: Path, step: int) -> str:
        """Hot-load ``adapter_dir`` as ``role``'s adapter; return the engine's version of it."""
        name = f"{ADAPTER_PREFIX}{role}-{self._state.run_step(step)}"
        version = await self.models.load_role_adapter(role, adapter_dir, name)
        self._record(ModelKind.ADAPTER, adapter_dir, step)
        roles = {**self.served.role_adapters, role: self._relative(adapter_dir)}
        self._state.served = replace(self.served, role_adapters=roles)
        return version

    async def serve_weights(self, model_dir: Path, step: int) -> None:
        """Reload the engine's base weights from ``model_dir``; later ``publish`` calls name it."""
        await self.models.reload_weights(model_dir, f"weights-{self._state.run_step(step)}")
        self._record(ModelKind.FULL, model_dir, step)
        # the adapter served before is merged into the full weights
        self._state.served = replace(self.served, weights=self._relative(model_dir), adapter=None)

    async def restore(self) -> None:
        """Serve what the saved state says the engine served when the run stopped.

        Full weights first (they are the base), then the adapter on top, then each role's; a
        fresh run serves the base model and does nothing here.
        """
        served, step = self.served, self._state.run_step(self._state.step)
        if served.weights:
            await self.models.reload_weights(self._run_dir / served.weights, f"weights-{step}")
        if served.adapter:
            await self.models.load_adapter(
                self._run_dir / served.adapter, f"{ADAPTER_PREFIX}{step}"
            )
        for role, adapter in served.role_adapters.items():
            await self.models.load_role_adapter(
                role, self._run_dir / adapter, f"{ADAPTER_PREFIX}{role}-{step}"
            )

    def _record(self, kind: ModelKind, path: Path, step: int) -> None:
        """Tell the run's record in the store that the engine serves a new model."""
        if self._recorder is not None:
            self._recorder.model_served(kind, path, self._state.run_step(step))

    def _relative(self, path: Path) -> str:
        return str(path.relative_to(self._run_dir))

    def _absolute(self, value: str | None) -> Path | None:
        return None if value is None else self._run_dir / value
