"""How many rollouts ran at once, from hand-made start and end times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fulmen.algorithms.rollout_concurrency import concurrency, concurrency_metrics
from fulmen.types import Mode, Rollout, RolloutConfig, RolloutStatus


def test_two_waves_of_two() -> None:
    # 0-2 and 0-2, then 2-4 and 2-4: an end and a start at the same instant do not overlap.
    assert concurrency([(0, 2), (0, 2), (2, 4), (2, 4)]) == (2, 2.0)


def test_the_mean_is_weighted_by_time_over_the_span() -> None:
    # one alone for 3 s, three together for 1 s: 6 rollout-seconds over 4 s
    assert concurrency([(0, 4), (3, 4), (3, 4)]) == (3, 1.5)
    assert concurrency([(0.0, 2.0), (1.0, 3.0), (3.0, 4.0)]) == (2, 1.25)


def test_nothing_zero_length_and_backwards_spans() -> None:
    assert concurrency([]) == (0, 0.0)
    assert concurrency([(5, 5), (5, 5)]) == (2, 2.0)  # instants count as open
    assert concurrency([(0, 2), (1, 1)]) == (2, 1.0)
    with pytest.raises(ValueError, match=r"ends before it starts: \(2, 1\)"):
        concurrency([(2, 1)])


def _rollout(i: int, start: float | None, end: float | None) -> Rollout:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    at = lambda s: None if s is None else base + timedelta(seconds=s)  # noqa: E731
    return Rollout(
        rollout_id=f"r{i}", input={}, mode=Mode.TRAIN, status=RolloutStatus.SUCCEEDED,
        config=RolloutConfig(), position=i, enqueued_at=base, started_at=at(start),
        ended_at=at(end),
    )  # fmt: skip


def test_rollouts_that_never_started_are_left_out() -> None:
    rollouts = [_rollout(0, 0, 4), _rollout(1, 1, 3), _rollout(2, None, None)]
    rollouts.append(_rollout(3, None, 9))  # cancelled before a runner claimed it
    assert concurrency_metrics(rollouts) == {
        "rollouts/concurrency_max": 2.0,
        "rollouts/concurrency_mean": 1.5,
    }
    assert concurrency_metrics([_rollout(0, None, None)]) == {}
