"""Named secondary rewards: the values a rollout's reward carries besides its primary one.

A reward may have several named values (``{"correct": 1, "format": 0.5}``, the primary one
being the rollout's reward); the primary value is averaged into ``reward/mean``, and the others
into ``train/reward/<name>`` (and ``val/reward/<name>``) by ``named_reward_means``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from fulmen.tracing import semconv
from fulmen.types import Reward, Span

__all__ = ["named_reward_means", "secondary_rewards"]


def secondary_rewards(spans: Sequence[Span], posted: Sequence[Reward] = ()) -> dict[str, float]:
    """Return an attempt's named reward values other than its primary one.

    Values merge by name in store sequence order over the reward spans and the posted rewards,
    as ``fulmen.transitions.signals.latest_reward`` merges them, so a later value of a name wins;
    the primary name is the latest one a reward names.
    """
    events: list[tuple[int, Mapping[str, float], str | None]] = [
        (e.sequence, e.values, e.primary) for e in semconv.reward_events(spans)
    ]
    events.extend((r.sequence, r.values, r.primary) for r in posted)
    merged: dict[str, float] = {}
    primary: str | None = None
    for _, values, name in sorted(events, key=lambda e: e[0]):
        merged.update(values)
        if name is not None:
            primary = name
    return {k: v for k, v in merged.items() if k != primary}


def named_reward_means(prefix: str, rewards: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Average each name over the rollouts that have it: ``{f"{prefix}/{name}": mean}``.

    ``rewards`` holds one rollout's ``secondary_rewards`` each; a name is averaged over the
    rollouts that carry it, and sorted by name so the records list them in a steady order.
    """
    by_name: dict[str, list[float]] = {}
    for values in rewards:
        for name, value in values.items():
            by_name.setdefault(name, []).append(value)
    return {f"{prefix}/{name}": statistics.fmean(by_name[name]) for name in sorted(by_name)}
