"""``RunFacts`` (``context.run``): where a stage writes, what it trains, and the services' state.

Fixed facts of the run and the stage (its directory, the base model, the seed, the success
threshold), the addresses an algorithm that calls the engine itself needs (``engine_url``,
``engine_model``) or prints in hints (``store_url``), the environment variables as the run read
them once, and a check that the services still run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

__all__ = ["RunFacts"]


class RunFacts(Protocol):
    """The facts of a run one stage reads (see the module docstring)."""

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
    def engine_url(self) -> str:
        """The OpenAI-compatible ``.../v1`` URL of the engine serving the policy."""
        ...

    @property
    def engine_model(self) -> str:
        """The model name the engine serves the policy under now."""
        ...

    @property
    def engine_dtype(self) -> str:
        """The precision the engine samples in (``engine.dtype``: ``float32``, ``bfloat16``)."""
        ...

    @property
    def store_url(self) -> str:
        """The run's store, as ``fulmen rollouts --store`` takes it (for the hints printed)."""
        ...

    def variable(self, name: str) -> str | None:
        """Return the environment variable ``name`` as the run read it once (``None``: unset).

        API keys a config names by variable come from here: algorithms never read the
        environment themselves.
        """
        ...

    def check_services(self) -> None:
        """Raise if the runner stopped on its own (call while waiting on something long)."""
        ...
