from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch

from fulmen.algorithms.grpo.advantages import (
    group_advantages,
    rollout_advantages,
    transition_advantages,
)
from fulmen.errors import ConfigError


def _t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values)


def _i(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def test_group_of_four_with_and_without_std() -> None:
    scores, groups = _t([1.0, 2.0, 3.0, 6.0]), _i([0, 0, 0, 0])
    # mean 3; deviations -2, -1, 0, 3; sample variance (4 + 1 + 0 + 9) / 3
    std = math.sqrt(14 / 3)
    got = group_advantages(scores=scores, groups=groups, normalize_std=True)
    assert got.tolist() == pytest.approx([-2 / std, -1 / std, 0.0, 3 / std], abs=1e-6)
    raw = group_advantages(scores=scores, groups=groups, normalize_std=False)
    assert raw.tolist() == pytest.approx([-2.0, -1.0, 0.0, 3.0])


def test_binary_rewards_group() -> None:
    got = group_advantages(scores=_t([1, 0, 0, 1]), groups=_i([0, 0, 0, 0]))
    expected = 0.5 / math.sqrt(1 / 3)  # 0.866...
    assert got.tolist() == pytest.approx([expected, -expected, -expected, expected], abs=1e-5)


def test_interleaved_groups_and_a_zero_variance_group() -> None:
    got = group_advantages(scores=_t([1, 5, 3, 5]), groups=_i([0, 1, 0, 1]))
    assert got.tolist() == pytest.approx([-1 / math.sqrt(2), 0.0, 1 / math.sqrt(2), 0.0], abs=1e-5)


@pytest.mark.parametrize("normalize_std", [True, False])
def test_single_rollout_group_gets_zero(normalize_std: bool) -> None:
    got = group_advantages(
        scores=_t([0.7, 1.0, 0.0]), groups=_i([0, 1, 1]), normalize_std=normalize_std
    )
    assert got[0].item() == 0.0
    assert got[1].item() > 0 > got[2].item()


def test_rollout_advantage_is_broadcast_to_every_transition() -> None:
    got = rollout_advantages(
        rollout_rewards=_t([1.0, 0.0]),
        rollout_group=_i([0, 0]),
        transition_rollout=_i([0, 0, 0, 1]),
        transition_rewards=_t([1.0, 1.0, 1.0, 0.0]),
        normalize_std=False,
    )
    assert got.tolist() == [0.5, 0.5, 0.5, -0.5]


def test_a_rollout_with_more_calls_does_not_shift_the_baseline() -> None:
    # rollout 0 has three transitions, rollout 1 one: the baseline stays the rollout mean 0.5
    kwargs: dict[str, Any] = {
        "rollout_rewards": _t([1.0, 0.0]),
        "rollout_group": _i([0, 0]),
        "transition_rollout": _i([0, 0, 0, 1]),
        "transition_rewards": _t([1.0, 1.0, 1.0, 0.0]),
    }
    for normalize_std in (True, False):
        by_rollout = rollout_advantages(**kwargs, normalize_std=normalize_std)
        by_transition = transition_advantages(**kwargs, normalize_std=normalize_std)
        assert by_transition.tolist() == pytest.approx(by_rollout.tolist(), abs=1e-6)


def test_transition_advantages_hand_computed() -> None:
    # rollout 0: calls rewarded 1 and 0 (mean 0.5); rollout 1: one call rewarded 0.
    # baseline = mean of rollout means = 0.25; deviations 0.75, -0.25, -0.25
    kwargs: dict[str, Any] = {
        "rollout_rewards": _t([1.0, 0.0]),
        "rollout_group": _i([0, 0]),
        "transition_rollout": _i([0, 0, 1]),
        "transition_rewards": _t([1.0, 0.0, 0.0]),
    }
    raw = transition_advantages(**kwargs, normalize_std=False)
    assert raw.tolist() == pytest.approx([0.75, -0.25, -0.25])
    # rollout-weighted squares: 0.5*0.5625 + 0.5*0.0625 + 0.0625 = 0.375, / (2 - 1)
    std = math.sqrt(0.375)
    normed = transition_advantages(**kwargs, normalize_std=True)
    assert normed.tolist() == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std], abs=1e-5)


def test_shape_errors_name_the_shapes() -> None:
    with pytest.raises(ConfigError, match=r"\(3,\)"):
        group_advantages(scores=_t([1, 2, 3]), groups=_i([0, 0]))
    with pytest.raises(ConfigError, match="points past 1"):
        rollout_advantages(
            rollout_rewards=_t([1.0]),
            rollout_group=_i([0]),
            transition_rollout=_i([0, 1]),
            transition_rewards=_t([1.0, 1.0]),
        )


def _groups_of_four_with_every_call_count(counts: range) -> dict[str, torch.Tensor]:
    """One group of four rollouts for each call-count pattern (n0, n1, n2, n3) in ``counts``."""
    patterns = list(itertools.product(counts, repeat=4))
    rollout_group = torch.arange(len(patterns)).repeat_interleave(4)
    calls = torch.tensor([n for pattern in patterns for n in pattern])
    transition_rollout = torch.arange(len(calls)).repeat_interleave(calls)
    return {
        "rollout_group": rollout_group,
        "transition_rollout": transition_rollout,
        "rollout_count": torch.tensor(len(calls)),
    }


@pytest.mark.parametrize("normalize_std", [True, False])
@pytest.mark.parametrize("reward", [1.0, 0.1, 0.7, 1 / 3, -2.5e-3, 1e300])
def test_equal_rewards_give_exact_zeros_whatever_the_call_counts(
    normalize_std: bool, reward: float
) -> None:
    """Issue 27: groups of four rollouts of 1..8 calls, all rewarded alike, got residues of
    about 1e-10 under ``transition`` (2,281 of the 4,096 patterns for reward 1.0)."""
    index = _groups_of_four_with_every_call_count(range(1, 9))
    num_rollouts = int(index["rollout_count"])
    transition_rollout = index["transition_rollout"]
    kwargs: dict[str, Any] = {
        "rollout_rewards": torch.full((num_rollouts,), reward, dtype=torch.float64),
        "rollout_group": index["rollout_group"],
        "transition_rollout": transition_rollout,
        "transition_rewards": torch.full(transition_rollout.shape, reward, dtype=torch.float64),
        "normalize_std": normalize_std,
    }
    for estimator in (transition_advantages, rollout_advantages):
        got = estimator(**kwargs)
        assert got.shape == transition_rollout.shape
        assert int(torch.count_nonzero(got)) == 0, estimator.__name__


def test_transition_advantages_of_a_group_equal_within_but_not_across_rollouts() -> None:
    # rollout 0: credited rewards 0.1, 0.1, 0.1 (3 calls); rollout 1: 0.1 (1 call); exact 0
    # rollout 2: 0.3 twice against rollout 3 and 4 at 0.1: mean 0.14, exact sign pattern
    got = transition_advantages(
        rollout_rewards=_t([0.0] * 5),
        rollout_group=_i([0, 0, 1, 1, 1]),
        transition_rollout=_i([0, 0, 0, 1, 2, 2, 3, 4]),
        transition_rewards=torch.tensor([0.1] * 4 + [0.3, 0.3, 0.1, 0.1], dtype=torch.float64),
        normalize_std=False,
    )
    assert got[:4].tolist() == [0.0] * 4
    assert got[4:].tolist() == pytest.approx([0.3 - 0.5 / 3] * 2 + [0.1 - 0.5 / 3] * 2)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_rewards_are_config_errors(bad: float) -> None:
    kwargs: dict[str, Any] = {
        "rollout_rewards": _t([1.0, bad]),
        "rollout_group": _i([0, 0]),
        "transition_rollout": _i([0, 1]),
        "transition_rewards": _t([1.0, bad]),
    }
    with pytest.raises(ConfigError, match=r"rollout_rewards holds non-finite values at \[1\]"):
        rollout_advantages(**kwargs)
    with pytest.raises(ConfigError, match=r"transition_rewards holds non-finite values at \[1\]"):
        transition_advantages(**kwargs)
    with pytest.raises(ConfigError, match="scores holds non-finite"):
        group_advantages(scores=_t([bad, 0.0]), groups=_i([0, 0]))


def test_huge_and_tiny_rewards_give_finite_exact_advantages() -> None:
    groups = _i([0, 0, 0, 0, 1, 1])
    scores = torch.tensor([1e300, -1e300, 1e300, -1e300, 1e-300, 3e-300], dtype=torch.float64)
    normed = group_advantages(scores=scores, groups=groups, normalize_std=True)
    expected = 1 / math.sqrt(4 / 3)  # deviations +-1e300, sample variance 4/3 * 1e600
    assert normed[:4].tolist() == pytest.approx([expected, -expected] * 2, rel=1e-12)
    # a tiny spread is as good as no spread next to eps: finite and negligible
    assert torch.isfinite(normed).all() and normed[4:].abs().max() < 1e-280
    raw = group_advantages(scores=scores, groups=groups, normalize_std=False)
    assert raw.tolist() == pytest.approx([1e300, -1e300, 1e300, -1e300, -1e-300, 1e-300])
    assert raw.dtype == torch.float64


def test_rollouts_without_transitions_are_not_group_members() -> None:
    # rollout 2 (group 0) has no transition: the baseline is the mean of rollouts 0 and 1
    got = transition_advantages(
        rollout_rewards=_t([0.0] * 3),
        rollout_group=_i([0, 0, 0]),
        transition_rollout=_i([0, 1]),
        transition_rewards=_t([1.0, 0.0]),
        normalize_std=False,
    )
    assert got.tolist() == [0.5, -0.5]
