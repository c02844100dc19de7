"""GAE, the clipped value loss and explained variance against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from fulmen.algorithms.ppo.gae import clipped_value_loss, explained_variance, gae
from fulmen.errors import ConfigError


def _gae(
    rewards: list[float], values: list[float], last: list[bool], gamma: float, lam: float
) -> tuple[list[float], list[float]]:
    result = gae(
        rewards=torch.tensor(rewards, dtype=torch.float64),
        values=torch.tensor(values, dtype=torch.float64),
        is_last=torch.tensor(last),
        gamma=gamma,
        lam=lam,
    )
    return result.advantages.tolist(), result.returns.tolist()


# One rollout of three calls: rewards 0, 0.5, 1; values 0.2, 0.4, 0.6.
R3, V3, L3 = [0.0, 0.5, 1.0], [0.2, 0.4, 0.6], [False, False, True]


def test_three_calls_by_hand() -> None:
    # gamma 0.9, λ 0.8 (gamma λ = 0.72):
    # δ2 = 1 - 0.6 = 0.4                    A2 = 0.4
    # δ1 = 0.5 + 0.9 * 0.6 - 0.4 = 0.64     A1 = 0.64 + 0.72 * 0.4 = 0.928
    # δ0 = 0 + 0.9 * 0.4 - 0.2 = 0.16       A0 = 0.16 + 0.72 * 0.928 = 0.82816
    advantages, returns = _gae(R3, V3, L3, 0.9, 0.8)
    assert advantages == pytest.approx([0.82816, 0.928, 0.4], abs=1e-12)
    assert returns == pytest.approx([1.02816, 1.328, 1.0], abs=1e-12)


def test_gamma_zero_sees_only_the_calls_own_reward() -> None:
    for lam in (0.0, 0.5, 1.0):
        advantages, returns = _gae(R3, V3, L3, 0.0, lam)
        assert advantages == pytest.approx([-0.2, 0.1, 0.4], abs=1e-12)
        assert returns == pytest.approx(R3, abs=1e-12)


def test_lambda_zero_is_the_one_step_td_error() -> None:
    advantages, returns = _gae(R3, V3, L3, 0.9, 0.0)
    assert advantages == pytest.approx([0.16, 0.64, 0.4], abs=1e-12)
    # the one-step target r_k + gamma V_{k+1}
    assert returns == pytest.approx([0.36, 1.04, 1.0], abs=1e-12)


def test_lambda_one_is_the_monte_carlo_return_minus_the_value() -> None:
    advantages, returns = _gae(R3, V3, L3, 1.0, 1.0)
    assert returns == pytest.approx([1.5, 1.5, 1.0], abs=1e-12)
    assert advantages == pytest.approx([1.3, 1.1, 0.4], abs=1e-12)
    # with gamma 0.9: G0 = 0 + 0.9 * 0.5 + 0.81 * 1 = 1.26, G1 = 0.5 + 0.9 = 1.4
    advantages, returns = _gae(R3, V3, L3, 0.9, 1.0)
    assert returns == pytest.approx([1.26, 1.4, 1.0], abs=1e-12)
    assert advantages == pytest.approx([1.06, 1.0, 0.4], abs=1e-12)


def test_one_call_rollouts_are_reward_minus_value() -> None:
    for gamma, lam in ((1.0, 0.95), (0.0, 0.0), (0.5, 1.0)):
        advantages, returns = _gae([1.0, 0.0, 0.25], [0.5, 0.5, 0.0], [True] * 3, gamma, lam)
        assert advantages == pytest.approx([0.5, -0.5, 0.25], abs=1e-12)
        assert returns == pytest.approx([1.0, 0.0, 0.25], abs=1e-12)


def test_rollouts_of_different_lengths_do_not_leak_into_each_other() -> None:
    # a (three calls, above), b (one call: r 1, V 0.25), c (two calls: r 0, 0; V 0.1, 0.3)
    # c by hand, gamma 0.9, λ 0.8: δ1 = -0.3, A1 = -0.3; δ0 = 0.9 * 0.3 - 0.1 = 0.17,
    # A0 = 0.17 + 0.72 * -0.3 = -0.046
    rewards = [*R3, 1.0, 0.0, 0.0]
    values = [*V3, 0.25, 0.1, 0.3]
    last = [*L3, True, False, True]
    advantages, returns = _gae(rewards, values, last, 0.9, 0.8)
    assert advantages == pytest.approx([0.82816, 0.928, 0.4, 0.75, -0.046, -0.3], abs=1e-12)
    assert returns == pytest.approx([1.02816, 1.328, 1.0, 1.0, 0.054, 0.0], abs=1e-12)
    # the same numbers as each rollout alone, in any order of the rollouts
    alone = _gae([0.0, 0.0], [0.1, 0.3], [False, True], 0.9, 0.8)
    assert [*advantages[4:], *returns[4:]] == pytest.approx([*alone[0], *alone[1]], abs=1e-12)
    swapped, _ = _gae(
        [0.0, 0.0, 1.0, *R3], [0.1, 0.3, 0.25, *V3], [False, True, True, *L3], 0.9, 0.8
    )
    assert swapped == pytest.approx([-0.046, -0.3, 0.75, 0.82816, 0.928, 0.4], abs=1e-12)


def test_no_gradient_flows_through_gae() -> None:
    values = torch.tensor([0.2, 0.4], requires_grad=True)
    result = gae(
        rewards=torch.tensor([0.0, 1.0]),
        values=values,
        is_last=torch.tensor([False, True]),
        gamma=1.0,
        lam=1.0,
    )
    assert not result.advantages.requires_grad and not result.returns.requires_grad


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"is_last": [True, False]}, "must end its rollout"),
        ({"gamma": 1.5}, "gamma must lie in"),
        ({"lam": -0.1}, "lam must lie in"),
        ({"is_last": [True]}, "1-D tensors of one shape"),
    ],
)
def test_bad_inputs_are_refused(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {
        "rewards": [0.0, 1.0],
        "values": [0.0, 0.0],
        "is_last": [False, True],
        "gamma": 1.0,
        "lam": 1.0,
    }
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        gae(
            rewards=torch.tensor(args["rewards"]),
            values=torch.tensor(args["values"]),
            is_last=torch.tensor(args["is_last"]),
            gamma=float(args["gamma"]),  # type: ignore[arg-type]
            lam=float(args["lam"]),  # type: ignore[arg-type]
        )


def test_clipped_value_loss_by_hand() -> None:
    # ε_v = 0.2, old values 0.5 each:
    # call 0: V 1.0, G 2.0: (1 - 2)² = 1; V_clip = 0.7: (0.7 - 2)² = 1.69 -> ½ 1.69, clipped
    # call 1: V 0.0, G 0.4: (0 - 0.4)² = 0.16; V_clip = 0.3: 0.01 -> ½ 0.16, not clipped
    # call 2: V 0.5, G 0.0: both 0.25 -> ½ 0.25, not clipped (the clipped term is not larger)
    values = torch.tensor([1.0, 0.0, 0.5], requires_grad=True)
    terms = clipped_value_loss(
        values=values,
        old_values=torch.tensor([0.5, 0.5, 0.5]),
        returns=torch.tensor([2.0, 0.4, 0.0]),
        clip=0.2,
    )
    assert terms.loss.tolist() == pytest.approx([0.845, 0.08, 0.125], abs=1e-6)
    assert terms.is_clipped.tolist() == [True, False, False]
    terms.loss[:2].sum().backward()
    assert values.grad is not None
    # a clipped call sends no gradient (its value already moved ε_v); the other V - G
    assert values.grad.tolist() == pytest.approx([0.0, -0.4, 0.0], abs=1e-6)


def test_unclipped_value_loss_is_half_the_squared_error() -> None:
    terms = clipped_value_loss(
        values=torch.tensor([1.0, 0.0]),
        old_values=torch.tensor([-5.0, 5.0]),
        returns=torch.tensor([2.0, 0.4]),
        clip=None,
    )
    assert terms.loss.tolist() == pytest.approx([0.5, 0.08], abs=1e-6)
    assert terms.is_clipped.tolist() == [False, False]
    with pytest.raises(ConfigError, match="clip must be > 0"):
        clipped_value_loss(
            values=torch.zeros(1), old_values=torch.zeros(1), returns=torch.zeros(1), clip=0.0
        )


def test_explained_variance_by_hand() -> None:
    # G = 1, 2, 4: Var(G) = 14/9; G - V = 0, 0, 1: Var = 2/9; EV = 1 - 1/7 = 6/7
    ev = explained_variance(values=torch.tensor([1.0, 2.0, 3.0]), returns=torch.tensor([1.0, 2, 4]))
    assert ev == pytest.approx(6 / 7, abs=1e-12)
    returns = torch.tensor([0.0, 1.0, 0.5])
    assert explained_variance(values=returns.clone(), returns=returns) == 1.0
    assert explained_variance(values=torch.full((3,), 0.5), returns=returns) == 0.0
    # a constant offset explains nothing and costs nothing: variance ignores the mean
    assert explained_variance(values=torch.zeros(3), returns=returns) == 0.0
    assert explained_variance(values=returns - 3.0, returns=returns) == 1.0
    assert math.isnan(explained_variance(values=torch.zeros(2), returns=torch.ones(2)))
