"""Which training tasks score candidates and which show a prompt's failures, per round.

Candidates are scored on ``score_tasks`` training tasks drawn with the seed and held apart:
they never appear in a minibatch, and the run's own validation set (``data.val``) stays
untouched, so the validation before and after the stage measures the winner on tasks the
search never saw. Minibatches are drawn from the other training tasks, reproducibly per round,
so a resumed round runs the same tasks.

>>> split_tasks(6, score=2, seed=0)
([4, 0], [5, 1, 3, 2])
>>> minibatch([5, 1, 3, 2], round_index=1, size=2, seed=0)
[3, 1]
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from fulmen.errors import ConfigError

__all__ = ["minibatch", "split_tasks"]


def split_tasks(count: int, *, score: int, seed: int) -> tuple[list[int], list[int]]:
    """Split ``count`` training task indices into (scoring tasks, minibatch tasks).

    Raises ``ConfigError`` when fewer than 2 tasks leave nothing for one of the two roles.
    """
    if count < 2:
        raise ConfigError(
            f"algorithm apo needs at least 2 training tasks (some score, some show failures); "
            f"got {count}"
        )
    order = list(range(count))
    random.Random(f"apo-tasks:{seed}").shuffle(order)
    size = min(score, count - 1)
    return order[:size], order[size:]


def minibatch(pool: Sequence[int], *, round_index: int, size: int, seed: int) -> list[int]:
    """Draw the round's ``size`` task indices from ``pool`` (all of it when it is smaller)."""
    rng = random.Random(f"apo-minibatch:{seed}:{round_index}")
    return rng.sample(list(pool), min(size, len(pool)))
