"""Loading task lists for training and validation, and sampling them step by step."""

from __future__ import annotations

import importlib
import json
import random
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fulmen.errors import ConfigError
from fulmen.importing import put_first_on_sys_path
from fulmen.trainer.preflight import PYTHON_PATH_HINT

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainConfig

__all__ = ["TaskSampler", "config_tasks", "load_tasks", "task_id_of"]


def config_tasks(
    config: TrainConfig, source: str | Sequence[Any], split: Literal["train", "val"]
) -> list[Any]:
    """Load the tasks a config's ``source`` names, as training does, for any command.

    ``environment`` (what an ``environment:`` section sets ``data.train``/``data.val`` to) is
    that section's ``split``, built by its library; anything else is ``load_tasks`` with the
    config's ``python_path``. ``fulmen train``, ``dev``, ``ab`` and ``models compare`` (and the
    dashboard's A/B jobs) all read tasks through here, so none of them misses a task source.
    """
    from fulmen.environments.config import ENVIRONMENT_SOURCE

    if source == ENVIRONMENT_SOURCE and config.environment is not None:
        from fulmen.environments.tasks import environment_tasks

        return environment_tasks(config.environment, split)
    return load_tasks(source, python_path=config.python_path)


def load_tasks(source: str | Sequence[Any], *, python_path: Sequence[Path] = ()) -> list[Any]:
    """Tasks from a list, a ``.jsonl`` file, or ``"module:callable"`` (called with no arguments).

    Raises ``ConfigError`` naming the source when it cannot be read or is empty.
    """
    if not isinstance(source, str):
        tasks = list(source)
    elif source.endswith(".jsonl"):
        tasks = _read_jsonl(source)
    elif ":" in source:
        put_first_on_sys_path(python_path)
        module_name, _, attr = source.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except ModuleNotFoundError as exc:
            hint = f"; {PYTHON_PATH_HINT}" if exc.name == module_name else ""
            raise ConfigError(f"cannot import tasks {source!r}: {exc}{hint}") from exc
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot import tasks {source!r}: {exc}") from exc
        tasks = list(factory())
    else:
        raise ConfigError(f"tasks must be a .jsonl path or 'module:callable', got {source!r}")
    if not tasks:
        raise ConfigError(f"no tasks in {source!r}")
    return tasks


def _read_jsonl(source: str) -> list[Any]:
    """Read one JSON task per line of ``source``; blank lines are skipped.

    Each line is parsed on its own, so an error names the line of the file (``json`` would
    count the lines of the one line it was given) and its column.
    """
    try:
        lines = Path(source).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(
            f"cannot read tasks from {source}: {exc.strerror or exc} (a relative data path "
            "in a config is relative to the config file)"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read tasks from {source}: it is not UTF-8 text ({exc})") from exc
    tasks: list[Any] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            tasks.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"cannot read tasks from {source}: line {number} is not JSON ({exc.msg} at "
                f"column {exc.colno}: {_excerpt(line)}); the file needs one JSON task per line"
            ) from exc
    return tasks


def _excerpt(line: str, width: int = 60) -> str:
    """Quote the start of a bad line for the error that names it."""
    text = line.strip()
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def task_id_of(task: Any, index: int, key: str = "id") -> str:
    """Return the task's own id (``task[key]``) or ``task-<index>``."""
    if isinstance(task, dict) and key in task:
        return str(task[key])
    return f"task-{index}"


class TaskSampler:
    """Draws tasks without replacement, epoch after epoch, reproducibly from a seed.

    ``batch(step, n)`` depends only on the seed, the step and ``n``, so a resumed run draws the
    same tasks it would have drawn without the crash. An empty task list (offline training,
    which runs no tasks) is refused when a batch is asked of it.
    """

    def __init__(self, tasks: Sequence[Any], *, seed: int) -> None:
        self._tasks = list(tasks)
        self._seed = seed

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self._tasks)))
        random.Random(f"{self._seed}:{epoch}").shuffle(order)
        return order

    def batch(self, step: int, n: int) -> list[tuple[int, Any]]:
        """Return the ``n`` (index, task) pairs of ``step``."""
        if not self._tasks:
            raise ConfigError("cannot sample from an empty task list")
        out: list[tuple[int, Any]] = []
        for position in range(step * n, step * n + n):
            epoch, offset = divmod(position, len(self._tasks))
            index = self._epoch_order(epoch)[offset]
            out.append((index, self._tasks[index]))
        return out

    def refill(
        self, step: int, draw: int, n: int, exclude: Collection[int] = ()
    ) -> list[tuple[int, Any]]:
        """Return up to ``n`` other (index, task) pairs for ``step``'s ``draw``-th extra draw.

        The tasks of a step's groups that had no signal are replaced from this stream (dynamic
        sampling); it depends only on the seed, the step and the draw, so a resumed run draws
        the same, and it leaves the epoch order of ``batch`` untouched. Indices in ``exclude``
        (the step's tasks so far) are not drawn; fewer than ``n`` come back when the list runs
        out.
        """
        if not self._tasks:
            raise ConfigError("cannot sample from an empty task list")
        order = list(range(len(self._tasks)))
        random.Random(f"{self._seed}:refill:{step}:{draw}").shuffle(order)
        skip = set(exclude)
        return [(i, self._tasks[i]) for i in order if i not in skip][:n]
