"""The figures of a release's arms: sessions, mean reward with its interval, and their test.

Each arm's mean reward comes with a 95% interval (Student's t over its sessions' rewards); the
arms are compared by Welch's t-test (independent sessions, variances not assumed equal):
the difference candidate - incumbent with its 95% interval, the improvement ratio candidate /
incumbent (undefined when the incumbent's mean is not positive) and the two-sided p value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fulmen.debugging.stats import UnpairedComparison, compare_unpaired, mean_interval
from fulmen.types.releases import ReleaseArm

__all__ = ["ArmFigures", "ReleaseFigures", "p_text", "release_figures"]


@dataclass(frozen=True)
class ArmFigures:
    """One arm's sessions and rewards.

    Attributes:
        sessions: sessions of the arm in the store.
        rewarded: those with a reward.
        mean / ci_low / ci_high: the mean reward and its 95% interval (``None`` without
            rewards).
    """

    sessions: int
    rewarded: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class ReleaseFigures:
    """Both arms' figures and, when each has two rewards, their comparison."""

    incumbent: ArmFigures
    candidate: ArmFigures
    comparison: UnpairedComparison | None

    def as_json(self) -> dict[str, Any]:
        """Return the figures as JSON-able data (the gate's events carry them)."""
        return {
            "incumbent": asdict(self.incumbent),
            "candidate": asdict(self.candidate),
            "comparison": asdict(self.comparison) if self.comparison is not None else None,
        }


def p_text(p: float) -> str:
    """Return a p value for people: ``p=0.0123``, or ``p<1e-16`` where a double holds no more."""
    return f"p={p:.3g}" if p >= 1e-16 else "p<1e-16"


def _arm(sessions: int, rewards: list[float]) -> ArmFigures:
    if not rewards:
        return ArmFigures(sessions, 0, None, None, None)
    mean, low, high = mean_interval(rewards)
    return ArmFigures(sessions, len(rewards), mean, low, high)


def release_figures(outcomes: dict[ReleaseArm, tuple[int, list[float]]]) -> ReleaseFigures:
    """Return the figures of ``outcomes`` (``ReleaseOutcomes.read``'s result)."""
    inc_sessions, inc = outcomes[ReleaseArm.INCUMBENT]
    cand_sessions, cand = outcomes[ReleaseArm.CANDIDATE]
    comparison = compare_unpaired(inc, cand) if len(inc) >= 2 and len(cand) >= 2 else None
    return ReleaseFigures(_arm(inc_sessions, inc), _arm(cand_sessions, cand), comparison)
