"""``RunTasks``: the trainer's ``context.tasks``, the run's tasks and the seeded draw of each step.

The tasks are loaded once for the run (``fulmen.trainer.data``); every stage draws from the
same ``TaskSampler``, so a step's draw depends only on the run's seed and the step.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from fulmen.trainer.data import TaskSampler, task_id_of

__all__ = ["RunTasks"]


class RunTasks:
    """The training and validation tasks of a run and their draws.

    Args:
        train: the training tasks.
        val: the validation tasks (already cut to ``validation.max_tasks``; empty without
            validation).
        seed: the run's seed (the draws').
        id_key: ``data.task_id_key``: the key of a task's own id.
    """

    def __init__(self, train: Sequence[Any], val: Sequence[Any], *, seed: int, id_key: str) -> None:
        self._train = train
        self._val = val
        self._id_key = id_key
        self._sampler = TaskSampler(train, seed=seed)

    @property
    def train(self) -> Sequence[Any]:
        """The training tasks."""
        return self._train

    @property
    def val(self) -> Sequence[Any]:
        """The validation tasks (empty without validation)."""
        return self._val

    def task_id(self, index: int, task: Any) -> str:
        """Return the task's id (``data.task_id_key``) or ``task-<index>``."""
        return task_id_of(task, index, self._id_key)

    def batch(self, step: int, n: int) -> list[tuple[int, Any]]:
        """Return the ``n`` ``(index, task)`` training pairs of ``step`` (seeded, resumable)."""
        return self._sampler.batch(step, n)

    def refill(
        self, step: int, draw: int, n: int, exclude: Collection[int] = ()
    ) -> list[tuple[int, Any]]:
        """Return up to ``n`` other training pairs for ``step``'s ``draw``-th extra draw."""
        return self._sampler.refill(step, draw, n, exclude)
