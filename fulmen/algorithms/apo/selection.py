"""Which prompts survive a round: the mean-best beam, or a Pareto front over validation tasks.

Pure functions over scored candidates, so the rules are tested without a model.

>>> a = Scored(1, 0.75, {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0})
>>> b = Scored(2, 0.5, {"t1": 0.0, "t2": 0.5, "t3": 0.5, "t4": 1.0})
>>> [s.key for s in select_beam([a, b], width=1)]
[1]
>>> [s.key for s in select_pareto([a, b], limit=4)]
[1, 2]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Scored", "select_beam", "select_pareto"]


@dataclass(frozen=True)
class Scored:
    """A candidate's key (its resources version), mean score and score per validation task."""

    key: int
    score: float
    instances: Mapping[str, float]


def _rank(candidates: Sequence[Scored]) -> list[Scored]:
    """Best mean first; the older candidate (smaller key) first on a tie."""
    return sorted(candidates, key=lambda c: (-c.score, c.key))


def _dominates(a: Scored, b: Scored, tasks: Sequence[str]) -> bool:
    """Whether ``a`` scores at least ``b`` on every task and more on one."""
    pairs = [(a.instances.get(t, 0.0), b.instances.get(t, 0.0)) for t in tasks]
    return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)


def select_beam(candidates: Sequence[Scored], *, width: int) -> list[Scored]:
    """Keep the ``width`` candidates with the best mean score (older first on ties)."""
    if width < 1:
        raise ValueError(f"beam width must be at least 1, got {width}")
    return _rank(candidates)[:width]


def select_pareto(candidates: Sequence[Scored], *, limit: int) -> list[Scored]:
    """Keep every candidate that has the best score on at least one validation task.

    A task on which all candidates score the same tells them apart in no way and is skipped;
    a candidate that another survivor dominates (as good on every task, better on one) is
    dropped too.
    When more than ``limit`` survive, those best on the most tasks are kept (then by mean);
    when no task tells them apart, the best mean survives. The result is ordered by mean.
    """
    if limit < 1:
        raise ValueError(f"pareto limit must be at least 1, got {limit}")
    tasks = sorted({t for c in candidates for t in c.instances})
    wins = {c.key: 0 for c in candidates}
    for task in tasks:
        values = [c.instances.get(task, 0.0) for c in candidates]
        best = max(values)
        if all(v == best for v in values):
            continue
        for candidate, value in zip(candidates, values, strict=True):
            if value == best:
                wins[candidate.key] += 1
    front = [c for c in candidates if wins[c.key] > 0]
    front = [c for c in front if not any(_dominates(o, c, tasks) for o in front)]
    if not front:
        return _rank(candidates)[:1]
    kept = sorted(front, key=lambda c: (-wins[c.key], -c.score, c.key))[:limit]
    return _rank(kept)
