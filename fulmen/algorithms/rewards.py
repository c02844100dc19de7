"""Reward summaries every algorithm logs: mean, spread and success rate of a list of rewards."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["reward_metrics"]


def reward_metrics(prefix: str, rewards: Sequence[float], threshold: float) -> dict[str, float]:
    """Summarize ``rewards`` as ``{prefix}/mean``, ``{prefix}/std`` and ``{prefix}/success``.

    ``success`` is the share of rewards at or above ``threshold``; each is NaN without rewards.
    """
    if not rewards:
        return {
            f"{prefix}/mean": float("nan"),
            f"{prefix}/std": float("nan"),
            f"{prefix}/success": float("nan"),
        }
    return {
        f"{prefix}/mean": statistics.fmean(rewards),
        f"{prefix}/std": statistics.pstdev(rewards),
        f"{prefix}/success": sum(r >= threshold for r in rewards) / len(rewards),
    }
