"""The DPO loss against its closed form on hand-computed sequence logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from fulmen.algorithms.dpo.loss import dpo_loss
from fulmen.errors import ConfigError

# Two pairs. Pair 0: Δ = (-1.0 + 1.5) - (-3.0 + 2.5) = 1.0; pair 1: Δ = 0.0 - (-0.5) = 0.5.
CHOSEN = [-1.0, -2.0]
REJECTED = [-3.0, -1.5]
REF_CHOSEN = [-1.5, -2.0]
REF_REJECTED = [-2.5, -1.0]
BETA = 0.5


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _terms(label_smoothing: float = 0.0, *, grad: bool = False) -> tuple:
    chosen = torch.tensor(CHOSEN, dtype=torch.float64, requires_grad=grad)
    rejected = torch.tensor(REJECTED, dtype=torch.float64, requires_grad=grad)
    terms = dpo_loss(
        chosen_logps=chosen,
        rejected_logps=rejected,
        ref_chosen_logps=torch.tensor(REF_CHOSEN, dtype=torch.float64),
        ref_rejected_logps=torch.tensor(REF_REJECTED, dtype=torch.float64),
        beta=BETA,
        label_smoothing=label_smoothing,
    )
    return terms, chosen, rejected


def test_loss_is_minus_log_sigmoid_of_beta_times_the_logratio_difference() -> None:
    terms, _, _ = _terms()
    # -log sigmoid(x) = log(1 + e^-x), at βΔ = 0.5 and 0.25
    assert terms.loss.tolist() == pytest.approx([_softplus(-0.5), _softplus(-0.25)], abs=1e-12)
    assert terms.loss.tolist() == pytest.approx([0.474077, 0.575939], abs=1e-6)
    assert terms.margins.tolist() == pytest.approx([0.5, 0.25])
    assert terms.chosen_rewards.tolist() == pytest.approx([0.25, 0.0])
    assert terms.rejected_rewards.tolist() == pytest.approx([-0.25, -0.25])


def test_label_smoothing_mixes_in_the_swapped_preference() -> None:
    eps = 0.1
    terms, _, _ = _terms(eps)
    expected = [(1 - eps) * _softplus(-x) + eps * _softplus(x) for x in (0.5, 0.25)]
    assert terms.loss.tolist() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_gradient_matches_the_closed_form(eps: float) -> None:
    terms, chosen, rejected = _terms(eps, grad=True)
    terms.loss.sum().backward()
    sigmoid = [1 / (1 + math.exp(-x)) for x in (0.5, 0.25)]
    # d loss / d log π(y_w) = -β [(1 - ε) sigmoid(-βΔ) - ε sigmoid(βΔ)]; the rejected side has
    # the opposite sign
    expected = [-BETA * ((1 - eps) * (1 - s) - eps * s) for s in sigmoid]
    assert chosen.grad is not None and rejected.grad is not None
    assert chosen.grad.tolist() == pytest.approx(expected, abs=1e-12)
    assert rejected.grad.tolist() == pytest.approx([-g for g in expected], abs=1e-12)


def test_the_policy_equal_to_the_reference_costs_log_two() -> None:
    same = torch.tensor([-4.0, -7.0])
    terms = dpo_loss(
        chosen_logps=same,
        rejected_logps=same - 1,
        ref_chosen_logps=same,
        ref_rejected_logps=same - 1,
        beta=0.1,
    )
    assert terms.loss.tolist() == pytest.approx([math.log(2)] * 2)
    assert terms.margins.tolist() == [0.0, 0.0]


def test_bad_shapes_and_settings_are_refused() -> None:
    a, b = torch.zeros(2), torch.zeros(3)
    with pytest.raises(ConfigError, match="four"):
        dpo_loss(chosen_logps=a, rejected_logps=b, ref_chosen_logps=a, ref_rejected_logps=a, beta=1)
    with pytest.raises(ConfigError, match="beta"):
        dpo_loss(chosen_logps=a, rejected_logps=a, ref_chosen_logps=a, ref_rejected_logps=a, beta=0)
    with pytest.raises(ConfigError, match="label_smoothing"):
        dpo_loss(
            chosen_logps=a,
            rejected_logps=a,
            ref_chosen_logps=a,
            ref_rejected_logps=a,
            beta=1,
            label_smoothing=0.5,
        )
