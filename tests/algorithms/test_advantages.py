from __future__ import annotations

import math

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
    kwargs = {
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
    kwargs = {
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
