from __future__ import annotations

import math

import pytest
import torch

from fulmen.algorithms.losses import (
    clipped_policy_loss,
    k1_kl,
    k3_kl,
    rollout_normalizer,
    token_normalizer,
    unclipped_policy_loss,
)
from fulmen.errors import ConfigError

RATIOS = [0.5, 1.0, 1.5, 1.1, 0.5, 1.5]
ADVANTAGES = [1.0, 1.0, 1.0, -1.0, -1.0, -1.0]


def _terms():
    old = torch.zeros(6)
    logprobs = torch.tensor([math.log(r) for r in RATIOS], requires_grad=True)
    terms = clipped_policy_loss(
        logprobs=logprobs,
        old_logprobs=old,
        advantages=torch.tensor(ADVANTAGES),
        clip_low=0.2,
        clip_high=0.2,
    )
    return logprobs, terms


def test_clipped_loss_values_both_sides() -> None:
    _, terms = _terms()
    # A>0: r=0.5 keeps -0.5 (no clip below for gains); r=1.5 is capped at -1.2.
    # A<0: r=1.1 inside; r=0.5 is raised to 0.8 (clipped low); r=1.5 keeps 1.5.
    assert terms.loss.tolist() == pytest.approx([-0.5, -1.0, -1.2, 1.1, 0.8, 1.5], abs=1e-6)
    assert terms.is_clipped_high.tolist() == [False, False, True, False, False, False]
    assert terms.is_clipped_low.tolist() == [False, False, False, False, True, False]
    assert terms.ratio.tolist() == pytest.approx(RATIOS, abs=1e-6)


def test_clipped_tokens_get_no_gradient() -> None:
    logprobs, terms = _terms()
    terms.loss.sum().backward()
    assert logprobs.grad is not None
    # d(-A r)/d logp = -A r where unclipped, 0 where the clipped term was chosen
    assert logprobs.grad.tolist() == pytest.approx([-0.5, -1.0, 0.0, 1.1, 0.0, 1.5], abs=1e-6)


def test_unclipped_loss() -> None:
    terms = unclipped_policy_loss(
        logprobs=torch.tensor([math.log(2.0)]),
        old_logprobs=torch.zeros(1),
        advantages=torch.tensor([-1.0]),
        clip_low=0.2,
        clip_high=0.2,
    )
    assert terms.loss.tolist() == pytest.approx([2.0])
    assert not bool(terms.is_clipped_high.any())


def test_k3_kl_hand_values() -> None:
    logprobs = torch.zeros(3)
    ref = torch.tensor([0.0, math.log(2.0), -math.log(2.0)])
    got = k3_kl(logprobs=logprobs, ref_logprobs=ref)
    assert got.tolist() == pytest.approx(
        [0.0, 1.0 - math.log(2.0), 0.5 + math.log(2.0) - 1.0], abs=1e-6
    )


def test_normalizers_per_token_and_per_rollout() -> None:
    token_rollout = torch.tensor([0, 0, 0, 1])
    per_token = token_normalizer(token_rollout=token_rollout, num_rollouts=2)
    per_rollout = rollout_normalizer(token_rollout=token_rollout, num_rollouts=2)
    assert per_token.tolist() == [0.25] * 4
    assert per_rollout.tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])
    losses = torch.tensor([1.0, 1.0, 1.0, 4.0])
    assert float((per_token * losses).sum()) == pytest.approx(7 / 4)
    assert float((per_rollout * losses).sum()) == pytest.approx(0.5 * 1.0 + 0.5 * 4.0)


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ConfigError, match="one shape"):
        k3_kl(logprobs=torch.zeros(2), ref_logprobs=torch.zeros(3))


def test_the_k1_penalty_pulls_with_the_gradient_of_the_kl() -> None:
    # A categorical policy over 6 tokens and a fixed reference: the mean k1 loss over tokens
    # sampled from the policy must have KL(pi || ref)'s gradient. The plain log-ratio's
    # gradient has expectation zero on-policy, so the penalty did nothing while the logged
    # KL looked right.
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, generator=gen, dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.randn(6, generator=gen, dtype=torch.float64), -1)
    policy = torch.log_softmax(logits, -1)
    exact = torch.autograd.grad((policy.exp() * (policy - ref)).sum(), logits)[0]
    tokens = torch.multinomial(policy.detach().exp(), 200_000, replacement=True, generator=gen)
    logprobs = torch.log_softmax(logits, -1)[tokens]
    k1 = k1_kl(logprobs=logprobs, ref_logprobs=ref[tokens])
    estimated = torch.autograd.grad(k1.mean(), logits)[0]
    torch.testing.assert_close(estimated, exact, atol=0.01 * float(exact.norm().detach()), rtol=0)
    # its value is still the log-ratio, whose mean estimates the KL
    kl = float((policy.exp() * (policy - ref)).sum().detach())
    assert float(k1.detach().mean()) == pytest.approx(kl, abs=0.01)
