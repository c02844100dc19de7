"""``Progress`` (``context.progress``): the stage's saved progress, validation and metrics.

What the run directory says about the stage (steps completed and checkpointed, its last
checkpoint), recording a finished step so a killed run resumes after it, validating on the
run's schedule, and the run's metrics stream. Steps count from 0 within the stage; the trainer
numbers them in the run's stream (stages follow each other).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

__all__ = ["Progress"]


class Progress(Protocol):
    """Where a stage stands and what it records (see the module docstring)."""

    @property
    def step(self) -> int:
        """Steps (rounds) of this stage completed and checkpointed; a resumed stage starts here."""
        ...

    @property
    def checkpoint(self) -> Path | None:
        """The algorithm's last checkpoint directory, ``None`` before the first."""
        ...

    @property
    def validation_every(self) -> int | None:
        """Validate between steps every this many steps (``None``: validation is off).

        The trainer itself validates before and after each stage.
        """
        ...

    def save(self, step: int, *, checkpoint: Path | None = None) -> None:
        """Record that ``step`` steps of this stage are done; a killed run resumes after it.

        What the engine serves now (``context.policy``) and ``checkpoint`` (when given) are
        saved with it.
        """
        ...

    async def validate(self, step: int) -> dict[str, float] | None:
        """Validate the currently published resources and log the result at ``step``."""
        ...

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` of ``step`` in the run's metrics stream."""
        ...
