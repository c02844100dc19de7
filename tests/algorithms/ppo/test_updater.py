"""A PPO step on a tiny model: values, GAE targets, the policy's move, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.ppo import PPOConfig
from fulmen.algorithms.ppo.updater import PPOUpdater
from fulmen.types.transitions import Transition

from ..builders import model_logprobs, transition
from ..models import tiny_llama

pytest.importorskip("peft")


def _updater(**settings: object) -> PPOUpdater:
    fields: dict[str, object] = {"learning_rate": 1e-2, "value_learning_rate": 5e-2, "seed": 0}
    fields.update(settings)
    config = PPOConfig(lora=LoraSettings(r=4, alpha=8), **fields)  # type: ignore[arg-type]
    return PPOUpdater(tiny_llama(seed=0), config=config)


def _batch(updater: PPOUpdater) -> list[Transition]:
    """Three rollouts, one task each (group size 1): two calls, one call, one call."""
    model = updater.model
    return [
        transition(model, "a", [1, 10, 11], [7, 7, 7], 0.0, task="ta", call_index=0),
        transition(model, "a", [1, 10, 11, 7, 7, 7, 12], [7, 7], 1.0, task="ta", call_index=1),
        transition(model, "b", [1, 13], [20, 21, 22], 0.0, task="tb"),
        transition(model, "c", [1, 14, 15], [7, 7, 7, 7], 1.0, task="tc"),
    ]


def test_the_first_step_scores_zero_values_and_returns_the_rewards() -> None:
    updater = _updater(gamma=1.0, gae_lambda=1.0)
    batch = _batch(updater)
    assert updater.values(batch) == [0.0, 0.0, 0.0, 0.0]  # the head starts at zero
    metrics = updater.train_step(batch)
    assert metrics["updated"] == 1.0
    assert (metrics["ppo/calls"], metrics["ppo/rollouts"]) == (4.0, 3.0)
    # returns with V = 0, gamma = λ = 1: a: 1, 1; b: 0; c: 1
    assert metrics["ppo/return_mean"] == pytest.approx(0.75)
    assert metrics["ppo/advantage_mean"] == pytest.approx(0.75)
    assert metrics["ppo/value_mean"] == 0.0
    assert metrics["ppo/explained_variance"] == 0.0
    # ½ (0 - G)² averaged over calls: ½ · 3/4, the value loss of the step's first epoch
    assert metrics["ppo/value_loss"] < 0.375
    assert all(v != 0.0 for v in updater.values(batch))


def test_repeated_steps_fit_the_values_to_the_returns() -> None:
    updater = _updater(value_coef=1.0, epochs=4)
    batch = _batch(updater)
    first = updater.train_step(batch)
    for _ in range(7):
        last = updater.train_step(batch)
    assert last["ppo/value_loss"] < first["ppo/value_loss"] / 4
    assert last["ppo/explained_variance"] > 0.5
    values = updater.values(batch)
    assert values[1] > values[2] and values[3] > values[2]  # rewarded calls are worth more


def test_a_positive_advantage_makes_its_completion_more_likely() -> None:
    updater = _updater(normalize_advantages=True, value_coef=0.0)
    batch = _batch(updater)
    good, bad = batch[3], batch[2]  # c earned 1, b earned 0: advantages +, -
    before = (
        sum(model_logprobs(updater.model, good.prompt_token_ids, good.completion_token_ids)),
        sum(model_logprobs(updater.model, bad.prompt_token_ids, bad.completion_token_ids)),
    )
    metrics = updater.train_step(batch)
    after = (
        sum(model_logprobs(updater.model, good.prompt_token_ids, good.completion_token_ids)),
        sum(model_logprobs(updater.model, bad.prompt_token_ids, bad.completion_token_ids)),
    )
    assert after[0] > before[0] and after[1] < before[1]
    assert metrics["ratio_mean"] != 1.0  # the second epoch saw the moved policy
    # the engine-trainer gap is measured in the first epoch only, before the policy moved
    assert metrics["mismatch/gap_mean"] < 1e-5 and metrics["mismatch/outside_fraction"] == 0.0


def test_the_first_epoch_is_on_policy() -> None:
    updater = _updater(epochs=1)
    metrics = updater.train_step(_batch(updater))
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["clip_fraction"] == 0.0
    assert metrics["ppo/value_clip_fraction"] == 0.0


def test_a_rollout_with_an_overlong_call_is_dropped_whole() -> None:
    updater = _updater(max_seq_len=8)
    batch = _batch(updater)  # a's second call has 9 tokens
    metrics = updater.train_step(batch)
    assert metrics["ppo/dropped_rollouts"] == 1.0
    assert (metrics["ppo/calls"], metrics["ppo/rollouts"]) == (2.0, 2.0)
    assert updater.train_step([])["updated"] == 0.0


def test_the_micro_batch_split_does_not_change_the_step() -> None:
    whole = _updater(micro_batch_tokens=4096, epochs=1)
    split = _updater(micro_batch_tokens=2, epochs=1)  # one call per micro-batch
    batch = _batch(whole)
    a, b = whole.train_step(batch), split.train_step(batch)
    for key in ("loss", "policy_loss", "ppo/value_loss", "grad_norm"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
    assert whole.values(batch) == pytest.approx(split.values(batch), abs=1e-6)


def test_the_value_head_is_saved_and_restored_with_the_adapter(tmp_path: Path) -> None:
    updater = _updater()
    batch = _batch(updater)
    updater.train_step(batch)
    saved = updater.save_checkpoint(tmp_path / "ckpt")
    values = updater.values(batch)
    assert any(v != 0.0 for v in values)

    restored = _updater()
    assert restored.values(batch) == [0.0] * 4
    restored.load_checkpoint(saved)
    assert restored.step == 1
    assert restored.values(batch) == pytest.approx(values, abs=1e-7)
    torch.testing.assert_close(
        restored.value_head.linear.weight, updater.value_head.linear.weight, atol=0, rtol=0
    )
    # the optimizer's state came back too: the next steps match
    assert restored.train_step(batch)["loss"] == pytest.approx(
        updater.train_step(batch)["loss"], abs=1e-6
    )
    # the served adapter holds the LoRA weights only
    adapter = updater.save_adapter(tmp_path / "adapter")
    from safetensors.torch import load_file

    assert not any("value" in key for key in load_file(str(adapter / "adapter_model.safetensors")))


def test_a_step_skipped_for_a_non_finite_gradient_trained_no_tokens() -> None:
    """Issue 46, item 7: no optimizer step, so ``trained_tokens`` is 0, not the batch's 12."""
    updater = _updater()
    batch = _batch(updater)
    with torch.no_grad():
        norm = next(m for n, m in updater.model.named_modules() if n.endswith("norm"))
        norm.weight.fill_(float("nan"))  # type: ignore[union-attr]
    metrics = updater.train_step(batch)
    assert (metrics["updated"], metrics["skipped_nonfinite"]) == (0.0, 1.0)
    assert metrics["trained_tokens"] == 0.0


def test_unset_max_seq_len_is_the_models_context() -> None:
    updater = _updater()  # tiny_llama: 128 positions
    assert updater.config.max_seq_len is None and updater.max_seq_len == 128
    model = updater.model
    long = transition(model, "a", [1, *[10] * 124], [7, 7, 7, 7], 1.0, task="ta", call_index=0)
    fits = transition(model, "b", [1, *[10] * 123], [7, 7, 7, 7], 0.0, task="tb", call_index=0)
    metrics = updater.train_step([long, fits])  # 129 tokens and 128
    assert metrics["ppo/dropped_rollouts"] == 1.0 and metrics["ppo/rollouts"] == 1.0
