"""``PolicyServer`` (``context.policy``): what the engine serves, and serving a new policy.

The engine serves the base model, full weights a full fine-tune reloaded in its place, a LoRA
adapter hot-loaded on top, or one adapter per role. A stage starts its policy from what is
served (an earlier stage's work, or its own before a restart) and hands each new one to the
engine here; later ``publish`` calls name it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

__all__ = ["PolicyServer"]


class PolicyServer(Protocol):
    """The policy the engine serves (see the module docstring).

    Steps count from 0 within the stage, as ``context.progress`` counts them.
    """

    @property
    def version(self) -> str | None:
        """The version the engine reports for the served adapter, ``None`` for the base."""
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
