"""The seam between fulmen and an inference engine.

An :class:`Engine` is an OpenAI-compatible endpoint plus the calls the trainer needs to push
new weights: :meth:`Engine.load_adapter` (vLLM's ``/v1/load_lora_adapter``),
:meth:`Engine.unload_adapter` and, where the engine supports it, a full weight reload.
:class:`Capabilities` says which optional features an engine has, so callers and tests branch
on capability, never on the engine's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["INSTANCE_HEADER", "Capabilities", "Engine"]

#: The header an engine's ``/health`` answer carries its start's instance id in (``fulmen serve
#: --instance``, vLLM's ``$FULMEN_VLLM_INSTANCE``): a launcher that picked a port tells its own
#: server from another one that took the port first by it.
INSTANCE_HEADER = "x-fulmen-instance"


@dataclass(frozen=True)
class Capabilities:
    """Optional features of an engine."""

    #: ``reload_weights`` replaces all base weights while serving.
    full_reload: bool = False
    #: responses carry ``policy_version`` (body) and ``x-fulmen-policy-version`` (header).
    policy_version: bool = False
    #: loading an adapter under a name that is already loaded replaces it.
    replace_adapter: bool = False


@runtime_checkable
class Engine(Protocol):
    """A running OpenAI-compatible inference server that accepts new weights."""

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What this engine supports beyond the common API."""
        ...

    async def health(self) -> bool:
        """Return True when the server answers its health check."""
        ...

    async def load_adapter(self, name: str, path: str) -> int | None:
        """Load a peft LoRA adapter from ``path``, served as model ``name``.

        Returns the new policy version when the engine reports one.
        """
        ...

    async def unload_adapter(self, name: str) -> int | None:
        """Stop serving adapter ``name``; returns the new policy version if reported."""
        ...

    async def reload_weights(self, path: str | None = None) -> int | None:
        """Replace the base weights from a model directory (``None``: the original weights)."""
        ...

    async def aclose(self) -> None:
        """Stop the server and release its resources."""
        ...
