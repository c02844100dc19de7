"""Reward functions for the rescore tests, written against ``RecordedRollout``."""

from __future__ import annotations

from fulmen.debugging import RecordedRollout

BUDGET = 8


def same_as_toy(rollout: RecordedRollout) -> float:
    """The toy agent's own reward, recomputed from the recorded final reply."""
    return min(1.0, rollout.final_text.count("a") / BUDGET)


def twice_as_generous(rollout: RecordedRollout) -> float:
    """Each ``a`` counts double: ``min(1, 2 * old)``; changes every reward strictly in (0, 1)."""
    return min(1.0, 2 * rollout.final_text.count("a") / BUDGET)


def fails_on_first_task(rollout: RecordedRollout) -> float:
    """Raises on task ``t0``, so the report lists one error and scores the rest."""
    if rollout.task_id == "t0":
        raise ValueError("no reward for t0")
    return 0.5
