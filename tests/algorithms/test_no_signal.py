"""Issue 27: no update without a learning signal, no NaN from non-finite rewards, and the credit
combinations the config must refuse.

Equal-reward groups trained under ``advantage: transition`` (float residues of the group mean),
a KL-only step on a batch without advantage, non-finite rewards reaching the sample builder,
and ``credit: per_call`` with ``merge: true``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import pytest
import torch

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.config import GRPOAlgorithmConfig
from fulmen.algorithms.grpo.samples import build_samples
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.errors import ConfigError
from fulmen.trainer.config import load_config
from fulmen.types.transitions import Transition

from .builders import transition
from .models import tiny_llama


def _rollouts(
    model: torch.nn.Module | None,
    rewards: dict[str, float],
    calls: dict[str, int],
    *,
    task: str = "t",
    **fields: object,
) -> list[Transition]:
    """``calls[r]`` one-call transitions of rollout ``r``, each carrying its reward."""
    gen = torch.Generator().manual_seed(7)
    out: list[Transition] = []
    for rollout, reward in rewards.items():
        for k in range(calls[rollout]):
            prompt = [1, *torch.randint(3, 64, (3,), generator=gen).tolist()]
            completion = torch.randint(3, 64, (3,), generator=gen).tolist()
            out.append(
                transition(
                    model, rollout, prompt, completion, reward, task=task, call_index=k, **fields
                )
            )
    return out


def _params(engine: GRPOUpdater) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in engine.model.parameters()]).clone()


Estimator = Literal["rollout", "transition"]

# Call counts of one of the 2,281 patterns whose equal rewards left residues of about 1e-10.
UNEVEN = {"a": 1, "b": 2, "c": 3, "d": 6}


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_equal_rewards_with_uneven_call_counts_take_no_step(kl_coef: float) -> None:
    engine = GRPOUpdater(
        tiny_llama(),
        config=GRPOConfig(advantage="transition", learning_rate=1e-2, kl_coef=kl_coef),
    )
    batch = _rollouts(engine.model, dict.fromkeys(UNEVEN, 1.0), UNEVEN)
    before = _params(engine)
    metrics = engine.train_step(batch)
    assert metrics["updated"] == 0.0 and engine.step == 0
    assert metrics["skipped_zero_advantage"] == len(batch)
    assert metrics["trained_tokens"] == 0.0  # issue 46, item 7: it said 36 (12 calls x 3)
    assert torch.equal(before, _params(engine))


@pytest.mark.parametrize("advantage", ["rollout", "transition"])
@pytest.mark.parametrize("reward", [1.0, 0.1, 0.7])
def test_equal_rewards_give_no_samples(advantage: Estimator, reward: float) -> None:
    batch = _rollouts(None, dict.fromkeys(UNEVEN, reward), UNEVEN)
    config = GRPOConfig(advantage=advantage, min_abs_advantage=0.0, skip_zero_advantage=False)
    samples, stats = build_samples(batch, config=config)
    assert samples == [] and stats.skipped_zero_advantage == len(batch)
    assert stats.zeroed_advantage_tokens == 0  # exact zeros, not residues under a tolerance


def test_advantages_under_the_tolerance_are_zero_and_skipped() -> None:
    rewards = {"a": 1.0, "b": 1.0 + 1e-8, "c": 0.0, "d": 1.0}
    calls = dict.fromkeys(rewards, 1)
    signal = _rollouts(None, {"c": 0.0, "d": 1.0}, calls, task="signal")
    tiny = _rollouts(None, {"a": 1.0, "b": 1.0 + 1e-8}, calls, task="tiny")
    config = GRPOConfig(normalize_std=False)
    samples, stats = build_samples(tiny, config=config)
    assert samples == [] and stats.skipped_zero_advantage == 2
    assert stats.zeroed_advantage_tokens == 6  # 3 tokens each, advantages of +-5e-9
    samples, stats = build_samples([*signal, *tiny], config=config)
    assert [s.advantages for s in samples] == [[-0.5] * 3, [0.5] * 3]
    assert (stats.skipped_zero_advantage, stats.zeroed_advantage_tokens) == (2, 6)
    assert stats.trained_tokens == 12  # the skipped ones still count in the normalization
    # with the guard at 0 the tiny differences are signal
    samples, stats = build_samples(
        tiny, config=GRPOConfig(normalize_std=False, min_abs_advantage=0)
    )
    assert [s.advantages[0] for s in samples] == pytest.approx([-5e-9, 5e-9], rel=1e-6)


def test_with_kl_zero_advantage_samples_still_train_when_the_batch_has_signal() -> None:
    batch = [
        *_rollouts(None, {"a": 1.0, "b": 0.0}, {"a": 1, "b": 1}, task="signal"),
        *_rollouts(None, {"c": 1.0, "d": 1.0}, {"c": 1, "d": 1}, task="flat"),
    ]
    samples, stats = build_samples(batch, config=GRPOConfig(kl_coef=0.1))
    assert len(samples) == 4 and stats.skipped_zero_advantage == 0
    samples, stats = build_samples(batch[2:], config=GRPOConfig(kl_coef=0.1))
    assert samples == [] and stats.skipped_zero_advantage == 2


@pytest.mark.parametrize("field", ["rollout_reward", "reward", "credit_weights"])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("advantage", ["rollout", "transition"])
def test_non_finite_rewards_are_an_error_naming_the_rollout(
    field: str, bad: float, advantage: Estimator
) -> None:
    batch = _rollouts(None, {"a": 1.0, "b": 0.0}, {"a": 1, "b": 1})
    values: dict[str, object] = {field: [1.0, bad, 1.0] if field == "credit_weights" else bad}
    batch[1] = batch[1].model_copy(update=values)
    with pytest.raises(ConfigError, match=rf"rollout 'b' \(call 0\) has a non-finite {field}"):
        build_samples(batch, config=GRPOConfig(advantage=advantage))


def test_advantages_beyond_float32_are_an_error_not_inf() -> None:
    batch = _rollouts(None, {"a": 1e300, "b": -1e300}, {"a": 1, "b": 1})
    with pytest.raises(ConfigError, match=r"does not fit float32.*normalize_std"):
        build_samples(batch, config=GRPOConfig(normalize_std=False))
    samples, stats = build_samples(batch, config=GRPOConfig())
    assert [s.advantages[0] for s in samples] == pytest.approx(
        [1 / math.sqrt(2), -1 / math.sqrt(2)]
    )
    assert math.isfinite(stats.trained_reward_mean) and math.isfinite(stats.trained_reward_std)


PER_CALL_MERGED = {"credit": "per_call", "merge": True}


def test_per_call_credit_with_merged_transitions_is_refused() -> None:
    grpo = {"advantage": "transition"}
    with pytest.raises(ValueError, match="'per_call' does not work with merge: true"):
        GRPOAlgorithmConfig.model_validate({"transitions": PER_CALL_MERGED, "grpo": grpo})
    GRPOAlgorithmConfig.model_validate({"transitions": {"credit": "per_call"}, "grpo": grpo})
    GRPOAlgorithmConfig.model_validate({"transitions": {"merge": True}, "grpo": grpo})


BASE = """
model: tiny
agent: agent:toy_agent
data:
  train: agent:train_tasks
"""
PER_CALL = "transitions: {credit: per_call, merge: true}, grpo: {advantage: transition}"


@pytest.mark.parametrize(
    "section",
    [
        f"algorithm: {{{PER_CALL}}}\n",
        f"stages: [grpo, {{name: grpo, {PER_CALL}}}]\n",
        f"algorithm: {{adapters: {{solver: ['*']}}, {PER_CALL}}}\n",
    ],
    ids=["algorithm", "second-stage", "per-role-adapters"],
)
def test_every_place_a_config_combines_them_refuses(tmp_path: Path, section: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BASE + section, encoding="utf-8")
    with pytest.raises(ConfigError, match="'per_call' does not work with merge: true"):
        load_config(path)


def test_discounted_transition_trains_on_equal_rewards_as_documented() -> None:
    """``docs/credit-and-advantages.md``: the one combination where equal outcomes still train.

    Both rollouts earn 1; gamma 0.5 credits b's three calls 0.25, 0.5, 1 (mean 7/12), a's one
    call 1: group mean 19/24.
    """
    a = _rollouts(None, {"a": 1.0}, {"a": 1})
    b = [
        t.model_copy(update={"reward": r, "credit_weights": [r] * len(t.credit_weights)})
        for t, r in zip(_rollouts(None, {"b": 1.0}, {"b": 3}), (0.25, 0.5, 1.0), strict=True)
    ]
    config = GRPOConfig(advantage="transition", normalize_std=False)
    samples, _ = build_samples([*a, *b], config=config)
    got = [s.advantages[0] for s in samples]
    assert got == pytest.approx([5 / 24, 0.25 - 19 / 24, 0.5 - 19 / 24, 5 / 24])
    rollout, _ = build_samples([*a, *b], config=GRPOConfig(normalize_std=False))
    assert rollout == []


def test_a_step_skipped_for_a_non_finite_gradient_trained_no_tokens() -> None:
    """Issue 46, item 7: a batch with signal whose gradient is NaN (a base weight poisoned
    here) takes no optimizer step, and reports ``trained_tokens`` 0, not the batch's 12."""
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(learning_rate=1e-2))
    batch = _rollouts(None, {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}, dict.fromkeys("abcd", 1))
    _, stats = build_samples(batch, config=engine.config)
    assert stats.trained_tokens == 12
    with torch.no_grad():
        norm = next(m for n, m in engine.model.named_modules() if n.endswith("norm"))
        norm.weight.fill_(float("nan"))  # type: ignore[union-attr]
    metrics = engine.train_step(batch)
    assert (metrics["updated"], metrics["skipped_nonfinite"]) == (0.0, 1.0)
    assert metrics["trained_tokens"] == 0.0
