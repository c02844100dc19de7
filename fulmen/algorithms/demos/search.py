"""Which demonstrations each candidate prompt shows: seeded random subsets and orders of a pool.

Pure functions of the pool size, the settings and the seed, so a resumed search draws exactly
the candidates it drew before the crash and can skip the ones already scored.
"""

from __future__ import annotations

import math
import random

from fulmen.errors import ConfigError

__all__ = ["draw_candidates", "split_tasks"]

_TRIES_PER_CANDIDATE = 50


def draw_candidates(pool_size: int, *, demos: int, count: int, seed: int) -> list[tuple[int, ...]]:
    """Draw up to ``count`` distinct ordered choices of ``demos`` indices into a pool.

    Each candidate is a random sample without replacement (so its order is random too) from
    ``range(pool_size)``; a draw equal to an earlier one is drawn again. Fewer than ``count``
    come back when the pool has fewer distinct ordered subsets. With ``pool_size`` < ``demos``
    each candidate uses the whole pool, in a random order.

    >>> draw_candidates(3, demos=2, count=2, seed=0)
    [(1, 0), (2, 1)]
    """
    if pool_size < 1:
        raise ConfigError(f"cannot draw demonstrations from an empty pool (pool_size={pool_size})")
    if demos < 1 or count < 0:
        raise ConfigError(f"demos must be >= 1 and count >= 0, got demos={demos}, count={count}")
    size = min(demos, pool_size)
    possible = math.perm(pool_size, size)
    rng = random.Random(f"demos:{seed}")
    drawn: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    tries = 0
    while len(drawn) < min(count, possible) and tries < _TRIES_PER_CANDIDATE * max(count, 1):
        tries += 1
        choice = tuple(rng.sample(range(pool_size), size))
        if choice not in seen:
            seen.add(choice)
            drawn.append(choice)
    return drawn


def split_tasks(count: int, *, search: int, seed: int) -> tuple[list[int], list[int]]:
    """Split ``count`` training task indices into (search tasks, demonstration sources).

    ``search`` tasks (at most ``count - 1``, so one source remains) are drawn with the seed;
    the rest, in a seeded order, are where demonstrations may come from. A task is never both.

    >>> split_tasks(5, search=2, seed=0)
    ([4, 2], [0, 3, 1])
    """
    if count < 2:
        raise ConfigError(
            f"algorithm demos needs at least 2 training tasks (some score, some teach); got {count}"
        )
    order = list(range(count))
    random.Random(f"demos-tasks:{seed}").shuffle(order)
    size = min(search, count - 1)
    return order[:size], order[size:]
