"""How many of a step's rollouts ran at once, from their start and end times.

``concurrency`` is the pure part: the most intervals open at one instant and the time-weighted
mean over their span (first start to last end). ``concurrency_metrics`` applies it to a step's
finished rollouts (``Rollout.started_at``/``ended_at``) as ``rollouts/concurrency_max`` and
``rollouts/concurrency_mean``; the end-of-run diagnosis compares the first with the rollouts a
step had, to say when they ran in waves (``fulmen.trainer.diagnosis``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fulmen.types import Rollout

__all__ = ["concurrency", "concurrency_metrics"]


def concurrency(spans: Iterable[tuple[float, float]]) -> tuple[int, float]:
    """Return the most ``spans`` open at once and their time-weighted mean number open.

    Each span is ``(start, end)`` in seconds. One that ends when another starts does not
    overlap it; a span of zero length counts as open at its instant. The mean is the summed
    length of the spans over their union's extent (first start to last end); with no extent
    (every span of zero length) it is the most at once. No spans: ``(0, 0.0)``.

    >>> concurrency([(0.0, 2.0), (1.0, 3.0), (3.0, 4.0)])
    (2, 1.25)
    """
    events: list[tuple[float, int]] = []  # (time, order): ends, then starts, then instants end
    busy = 0.0
    for start, end in spans:
        if end < start:
            raise ValueError(f"a span ends before it starts: ({start}, {end})")
        events += [(start, 1), (end, 2 if end == start else 0)]
        busy += end - start
    if not events:
        return 0, 0.0
    events.sort()
    open_now = peak = 0
    for _, order in events:
        open_now += 1 if order == 1 else -1
        peak = max(peak, open_now)
    extent = events[-1][0] - events[0][0]
    return peak, busy / extent if extent > 0 else float(peak)


def concurrency_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Return ``rollouts/concurrency_max`` and ``_mean`` of ``rollouts`` (empty: none ran).

    Rollouts that never started, or have no end, are left out.
    """
    spans = [
        (r.started_at.timestamp(), r.ended_at.timestamp())
        for r in rollouts
        if r.started_at is not None and r.ended_at is not None and r.ended_at >= r.started_at
    ]
    if not spans:
        return {}
    peak, mean = concurrency(spans)
    return {"rollouts/concurrency_max": float(peak), "rollouts/concurrency_mean": mean}
