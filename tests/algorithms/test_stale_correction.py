"""Truncated importance sampling of stale tokens (asynchronous GRPO): fresh tokens untouched.

The pure function is checked on values; the engine is checked on gradients of the tiny model:
with ``is_cap`` a batch of fresh tokens gives exactly the gradient it gives without, and a
stale token's gradient is scaled by ``min(exp(current - behaviour), cap)``.
"""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.algorithms.losses import correct_stale_tokens
from fulmen.errors import ConfigError
from fulmen.types import Transition

from .builders import gradient, transition
from .models import tiny_llama

CURRENT = "policy-3"


def test_fresh_weight_is_exactly_one_and_stale_weight_is_truncated() -> None:
    current = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    behaviour = torch.tensor([-3.0, -1.5, -0.5, -9.0])
    fix = correct_stale_tokens(
        current_logprobs=current,
        behaviour_logprobs=behaviour,
        is_stale=torch.tensor([False, True, True, True]),
        cap=2.0,
    )
    # fresh: weight exactly 1 even though exp(current - behaviour) = e^2 there; ratio vs behaviour
    assert fix.weights[0].item() == 1.0 and fix.old_logprobs[0].item() == -3.0
    assert fix.weights[1:].tolist() == pytest.approx([math.exp(0.5), math.exp(-0.5), 2.0])
    # stale: the ratio is taken against the current policy before the update
    assert fix.old_logprobs[1:].tolist() == [-1.0, -1.0, -1.0]


def test_correction_checks_its_arguments() -> None:
    with pytest.raises(ConfigError, match="cap"):
        correct_stale_tokens(
            current_logprobs=torch.zeros(2),
            behaviour_logprobs=torch.zeros(2),
            is_stale=torch.ones(2, dtype=torch.bool),
            cap=0.0,
        )
    with pytest.raises(ConfigError, match="one shape"):
        correct_stale_tokens(
            current_logprobs=torch.zeros(2),
            behaviour_logprobs=torch.zeros(3),
            is_stale=torch.ones(2, dtype=torch.bool),
            cap=2.0,
        )


def _batch(model: torch.nn.Module, *, stale_gap: float, fresh_gap: float) -> list[Transition]:
    """Two groups: a fresh one and a stale one; behaviour logprobs sit ``gap`` below the model's."""
    gen = torch.Generator().manual_seed(7)
    out: list[Transition] = []
    for group, version, gap in (("f", CURRENT, fresh_gap), ("s", "policy-2", stale_gap)):
        for i, reward in enumerate((1.0, 0.0, 0.5)):
            prompt = [1, *torch.randint(3, 64, (3,), generator=gen).tolist()]
            completion = torch.randint(3, 64, (4,), generator=gen).tolist()
            t = transition(model, f"{group}{i}", prompt, completion, reward, task=group)
            shifted = [lp - gap for lp in t.logprobs]
            out.append(t.model_copy(update={"logprobs": shifted, "policy_version": version}))
    return out


def _gradient(
    is_cap: float | None, *, stale_gap: float, fresh_gap: float, fresh_only: bool = False
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss gradient of one pass, behaviour logprobs taken from the engine's own policy."""
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(is_cap=is_cap, clip_high=0.2))
    # a LoRA adapter starts at zero (B = 0): move it so the gradients reach every matrix
    with torch.no_grad():
        for name, p in engine.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    batch = _batch(engine.model, stale_gap=stale_gap, fresh_gap=fresh_gap)
    if fresh_only:
        batch = [t for t in batch if t.policy_version == CURRENT]
    metrics = engine.compute_gradients(batch, policy_version=CURRENT)
    return gradient(engine.model).clone(), metrics


def test_fresh_tokens_get_the_same_gradient_with_and_without_correction() -> None:
    with_cap, metrics = _gradient(2.0, stale_gap=0.0, fresh_gap=0.1, fresh_only=True)
    without, _ = _gradient(None, stale_gap=0.0, fresh_gap=0.1, fresh_only=True)
    assert torch.equal(with_cap, without)
    assert "stale_tokens" not in metrics and metrics["stale"] == 0


def test_stale_tokens_are_weighted_by_the_truncated_ratio() -> None:
    def grad(stale_gap: float, is_cap: float | None = 2.0) -> torch.Tensor:
        return _gradient(is_cap, stale_gap=stale_gap, fresh_gap=0.0)[0]

    g0 = grad(0.0)  # weight 1 everywhere: same as no correction when nothing is off-policy
    assert torch.allclose(g0, grad(0.0, is_cap=None), atol=1e-7)
    # the stale group's share of the gradient scales with its weight e^gap, the fresh one's not
    stale_share = grad(math.log(1.5)) - g0  # 0.5 x stale part
    assert float(stale_share.abs().sum()) > 0
    assert torch.allclose(grad(math.log(1.75)) - g0, 1.5 * stale_share, atol=1e-6)
    # truncated at the cap: e^gap = 3 and 5 both weigh 2
    assert torch.allclose(grad(math.log(3.0)), grad(math.log(2.0)), atol=1e-7)
    assert torch.allclose(grad(math.log(5.0)), grad(math.log(2.0)), atol=1e-7)
    _, metrics = _gradient(2.0, stale_gap=math.log(1.5), fresh_gap=0.0)
    # reward 0.5 is its group's mean: advantage 0, not run; the other two have 4 tokens each
    assert metrics["stale"] == 3 and metrics["stale_tokens"] == 8
    assert metrics["is_weight_mean"] == pytest.approx(1.5, rel=1e-4)
    assert metrics["is_truncated_fraction"] == 0.0


def test_async_settings_are_validated() -> None:
    config = GRPOAlgorithmConfig.model_validate({"async": {"max_staleness": 2, "is_cap": 3.0}})
    assert config.async_ is not None and config.async_.max_staleness == 2
    assert config.update_config(seed=0).is_cap == 3.0
    assert config.model_dump()["async"]["is_cap"] == 3.0
    assert GRPOAlgorithmConfig().update_config(seed=0).is_cap is None
    for bad, match in (
        ({"async": {"max_staleness": 0}}, "max_staleness"),
        ({"async": {"is_cap": 0}}, "is_cap"),
        ({"async": {"max_staleness": 1, "prefetch_steps": 2}}, "prefetch_steps"),
        ({"async": {"stale": 1}}, "stale"),
        ({"async": {}, "grpo": {"epochs": 2}}, "epochs"),
        ({"async": {}, "grpo": {"finetune": "full"}}, "lora"),
        ({"grpo": {"is_cap": 2.0}}, "algorithm.async.is_cap"),
    ):
        with pytest.raises(ValidationError, match=match):
            GRPOAlgorithmConfig.model_validate(bad)
