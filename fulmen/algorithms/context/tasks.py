"""``Tasks`` (``context.tasks``): the run's tasks and the seeded draw of each step.

Draws depend only on the run's seed and the step (and, for refills, the draw), so a resumed
stage draws the same tasks it would have drawn without the crash.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

__all__ = ["Tasks"]


class Tasks(Protocol):
    """The training and validation tasks of a run (see the module docstring)."""

    @property
    def train(self) -> Sequence[Any]:
        """The training tasks."""
        ...

    @property
    def val(self) -> Sequence[Any]:
        """The validation tasks (empty when validation is off)."""
        ...

    def task_id(self, index: int, task: Any) -> str:
        """Return the id of ``task`` (its ``data.task_id_key`` or ``task-<index>``)."""
        ...

    def batch(self, step: int, n: int) -> list[tuple[int, Any]]:
        """Return the ``n`` ``(index, task)`` training pairs of ``step``.

        They are drawn without replacement, epoch after epoch, from the run's seed, so a resumed
        stage draws the same ones.
        """
        ...

    def refill(
        self, step: int, draw: int, n: int, exclude: Collection[int] = ()
    ) -> list[tuple[int, Any]]:
        """Return up to ``n`` more training pairs for ``step``'s ``draw``-th extra draw.

        For dynamic sampling: seeded by the run's seed, the step and the draw (a resumed stage
        draws the same), never one of ``exclude``, and without moving ``batch``'s order.
        """
        ...
