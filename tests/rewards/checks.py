"""``check`` criteria the judge tests name as ``tests.rewards.checks:...``."""

from __future__ import annotations

from fulmen.rewards.content import JudgedRollout


def is_short(rollout: JudgedRollout) -> bool:
    return len(rollout.final_text) <= 5


def too_big(rollout: JudgedRollout) -> float:
    del rollout
    return 3.0
