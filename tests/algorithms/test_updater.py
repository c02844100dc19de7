from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.grpo.samples import build_samples
from fulmen.algorithms.grpo.updater import GRPOUpdater
from fulmen.algorithms.lora import LoraSettings
from fulmen.errors import ConfigError

from .builders import transition
from .models import tiny_llama


def _batch(model, *, rewards=(1.0, 0.0, 0.5, 0.0), prefix: str = "r", **fields):
    gen = torch.Generator().manual_seed(len(prefix))
    out = []
    for i, reward in enumerate(rewards):
        prompt = [1, *torch.randint(3, 64, (3,), generator=gen).tolist()]
        completion = torch.randint(3, 64, (4,), generator=gen).tolist()
        out.append(transition(model, f"{prefix}{i}", prompt, completion, reward, **fields))
    return out


def _params(engine: GRPOUpdater) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in engine.model.parameters()]).clone()


def test_lora_step_changes_only_the_adapter_and_reports_metrics() -> None:
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(learning_rate=1e-2, kl_coef=0.1))
    frozen = {n: p.detach().clone() for n, p in engine.model.named_parameters() if "lora" not in n}
    batch = _batch(engine.model)
    first = engine.train_step(batch)
    # At the start the adapter is zero, so the policy equals the reference: KL is exactly 0,
    # and the behaviour logprobs came from the same model: every ratio is 1.
    assert first["kl"] == 0.0 and first["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert first["logprob_gap"] < 1e-5 and first["clip_fraction"] == 0.0
    assert first["updated"] == 1.0 and first["trained_tokens"] == 16
    assert first["entropy"] > 0 and first["tokens_per_s"] > 0 and first["grad_norm"] > 0
    assert (first["rollouts"], first["groups"]) == (4.0, 1.0)
    assert first["trained_reward_mean"] == pytest.approx(0.375)
    second = engine.train_step(batch)
    assert second["kl"] > 0 and second["logprob_gap"] > 0 and engine.step == 2
    for name, p in engine.model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name


def test_full_finetune_keeps_a_frozen_reference() -> None:
    engine = GRPOUpdater(
        tiny_llama(), config=GRPOConfig(finetune="full", kl_coef=0.5, learning_rate=1e-3)
    )
    batch = _batch(engine.model)
    engine.train_step(batch)
    metrics = engine.train_step(batch)
    assert metrics["kl"] > 0


def test_batch_without_signal_takes_no_step() -> None:
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(learning_rate=1e-2))
    before = _params(engine)
    metrics = engine.train_step(_batch(engine.model, rewards=(1.0, 1.0, 1.0)))
    assert metrics["updated"] == 0.0 and metrics["skipped_zero_advantage"] == 3
    assert torch.equal(before, _params(engine)) and engine.step == 0


def test_stale_truncated_and_overlong_are_counted() -> None:
    model = tiny_llama()
    batch = [
        *_batch(model, rewards=(1.0, 0.0), policy_version="v1"),
        *_batch(model, rewards=(1.0, 0.0), prefix="s", policy_version="v2", is_truncated=True),
    ]
    engine = GRPOUpdater(model, config=GRPOConfig(skip_truncated=True, max_seq_len=100))
    metrics = engine.train_step(batch, policy_version="v2")
    assert (metrics["stale"], metrics["truncated"], metrics["dropped_truncated"]) == (2, 2, 2)
    assert metrics["trained_tokens"] == 8
    short = GRPOUpdater(tiny_llama(), config=GRPOConfig(max_seq_len=7))
    assert short.train_step(batch)["dropped_overlong"] == 4


def test_checkpoint_resume_reproduces_the_next_step(tmp_path: Path) -> None:
    config = GRPOConfig(learning_rate=1e-2)
    engine = GRPOUpdater(tiny_llama(), config=config)
    batch_a = _batch(engine.model)
    batch_b = _batch(engine.model, prefix="other", rewards=(0.0, 1.0, 1.0, 0.2))
    engine.train_step(batch_a)
    engine.policy_version = "v1"
    engine.save_checkpoint(tmp_path / "ckpt")
    engine.train_step(batch_b)
    continued = _params(engine)

    resumed = GRPOUpdater(tiny_llama(), config=config)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert (resumed.step, resumed.policy_version) == (1, "v1")
    resumed.train_step(batch_b)
    torch.testing.assert_close(_params(resumed), continued, atol=0, rtol=0)
    assert not (tmp_path / "ckpt.partial").exists()


def test_a_checkpoint_written_before_the_state_file_was_renamed_still_resumes(
    tmp_path: Path,
) -> None:
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(learning_rate=1e-2))
    engine.train_step(_batch(engine.model))
    engine.policy_version = "v1"
    engine.save_checkpoint(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "updater.json").is_file()
    (tmp_path / "ckpt" / "updater.json").rename(tmp_path / "ckpt" / "engine.json")
    resumed = GRPOUpdater(tiny_llama(), config=GRPOConfig(learning_rate=1e-2))
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert (resumed.step, resumed.policy_version) == (1, "v1")
    torch.testing.assert_close(_params(resumed), _params(engine), atol=0, rtol=0)


def test_checkpoint_of_another_policy_is_refused(tmp_path: Path) -> None:
    GRPOUpdater(tiny_llama(), config=GRPOConfig(finetune="full")).save_checkpoint(tmp_path / "c")
    with pytest.raises(ConfigError, match="does not fit"):
        GRPOUpdater(tiny_llama()).load_checkpoint(tmp_path / "c")
    with pytest.raises(ConfigError, match="not a checkpoint"):
        GRPOUpdater(tiny_llama()).load_checkpoint(tmp_path / "nothing")


def test_saved_adapter_loads_into_the_base_model_with_the_same_outputs(tmp_path: Path) -> None:
    from peft import PeftModel

    engine = GRPOUpdater(tiny_llama(seed=4), config=GRPOConfig(learning_rate=5e-2))
    engine.train_step(_batch(engine.model))
    out = engine.save_adapter(tmp_path / "adapter")
    assert (out / "adapter_config.json").is_file()
    assert (out / "adapter_model.safetensors").is_file()
    with warnings.catch_warnings():  # peft reads an attribute transformers 5 deprecated
        warnings.simplefilter("ignore", FutureWarning)
        served = PeftModel.from_pretrained(tiny_llama(seed=4), str(out)).eval()
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.no_grad():
        torch.testing.assert_close(served(input_ids=ids).logits, engine.model(input_ids=ids).logits)
        base = tiny_llama(seed=4)(input_ids=ids).logits
    assert not torch.allclose(base, served(input_ids=ids).logits)


def test_save_model_merges_lora_and_full_mode_has_no_adapter(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    engine = GRPOUpdater(tiny_llama(seed=4), config=GRPOConfig(learning_rate=5e-2))
    engine.train_step(_batch(engine.model))
    merged = AutoModelForCausalLM.from_pretrained(str(engine.save_model(tmp_path / "m"))).eval()
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.no_grad():
        torch.testing.assert_close(
            merged(input_ids=ids).logits, engine.model(input_ids=ids).logits, atol=1e-5, rtol=1e-4
        )
    full = GRPOUpdater(tiny_llama(), config=GRPOConfig(finetune="full"))
    with pytest.raises(ConfigError, match="finetune='lora'"):
        full.save_adapter(tmp_path / "x")


def test_config_rejects_unknown_names() -> None:
    with pytest.raises(ValidationError, match="policy_loss"):
        GRPOConfig(policy_loss="nope")
    with pytest.raises(ValidationError, match="kl_estimator"):
        GRPOConfig(kl_estimator="k9")


def test_gradient_checkpointing_gives_the_same_gradient() -> None:
    from .builders import gradient

    batch = _batch(tiny_llama())
    grads, layer_calls = [], []
    for checkpointing in (False, True):
        engine = GRPOUpdater(
            tiny_llama(), config=GRPOConfig(finetune="full", gradient_checkpointing=checkpointing)
        )
        modes: list[bool] = []
        layer = engine.model.model.layers[0]
        layer.register_forward_hook(lambda module, *_, seen=modes: seen.append(module.training))
        engine.compute_gradients(batch)
        grads.append(gradient(engine.model))
        layer_calls.append((layer.gradient_checkpointing, modes))
        assert not engine.model.training
    # HF checkpoints a layer only when it is flagged and in train mode during the forward
    assert layer_calls == [(False, [False]), (True, [True])]
    torch.testing.assert_close(grads[0], grads[1], atol=1e-7, rtol=1e-5)


def test_two_epochs_move_the_ratio_away_from_one() -> None:
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(learning_rate=5e-2, epochs=2))
    metrics = engine.train_step(_batch(engine.model))
    assert metrics["ratio_mean"] != pytest.approx(1.0, abs=1e-6)
    assert engine.step == 1


def test_bfloat16_policy_trains_with_float32_adapter_and_logits() -> None:
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(dtype="bfloat16", learning_rate=1e-2))
    dtypes = {n: p.dtype for n, p in engine.model.named_parameters()}
    assert all(d == torch.float32 for n, d in dtypes.items() if "lora_" in n)
    assert dtypes["base_model.model.lm_head.weight"] == torch.bfloat16
    metrics = engine.train_step(_batch(engine.model))
    assert metrics["updated"] == 1.0
    assert all(v == v and abs(v) != float("inf") for v in metrics.values())


def test_autocast_runs_bfloat16_math_on_float32_weights() -> None:
    """Autocast: float32 parameters (the master weights), bfloat16 matmuls, a close gradient."""
    from .builders import gradient

    batch = _batch(tiny_llama(hidden=64))
    grads, gaps = [], []
    for autocast in (None, "bfloat16"):
        engine = GRPOUpdater(
            tiny_llama(hidden=64), config=GRPOConfig(finetune="full", autocast=autocast)
        )
        metrics = engine.compute_gradients(batch)
        assert all(p.dtype == torch.float32 for p in engine.model.parameters())
        grads.append(gradient(engine.model))
        gaps.append(metrics["logprob_gap"])
    # float32 reproduces the behaviour logprobs; bfloat16 math moves them a little, so the
    # autocast really ran, and the gradient still points the same way.
    assert gaps[0] < 1e-5 < gaps[1] < 0.05
    cosine = torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)
    assert cosine > 0.99


def test_autocast_with_bfloat16_weights_and_unknown_devices_are_refused() -> None:
    with pytest.raises(ValidationError, match="autocast 'bfloat16' has no effect"):
        GRPOConfig(dtype="bfloat16", autocast="bfloat16")
    with pytest.raises(ValidationError, match="device"):
        GRPOConfig(device="gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where there is no GPU")
def test_cuda_device_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="torch sees 0 CUDA device"):
        GRPOUpdater(tiny_llama(), config=GRPOConfig(device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_step_matches_the_cpu_step() -> None:
    """The same batch on the GPU gives the CPU's update (float32, TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    batch = _batch(tiny_llama())
    params = []
    for device in ("cpu", "cuda"):
        engine = GRPOUpdater(
            tiny_llama(), config=GRPOConfig(finetune="full", learning_rate=1e-2, device=device)
        )
        metrics = engine.train_step(batch)
        assert metrics["updated"] == 1.0
        assert next(engine.model.parameters()).device.type == device
        params.append(_params(engine).cpu())
    # one AdamW step of lr 1e-2 moves each weight ~1e-2; GPU summation order moves it ~1e-5
    torch.testing.assert_close(params[0], params[1], atol=1e-4, rtol=1e-3)


def _dropout_llama(p: float = 0.3):
    """The tiny model with attention dropout, as some base models ship."""
    model = tiny_llama()
    model.config.attention_dropout = p
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = p
    return model


@pytest.mark.parametrize(
    "config",
    [
        GRPOConfig(gradient_checkpointing=True, lora=LoraSettings(dropout=0.3)),
        GRPOConfig(finetune="full", gradient_checkpointing=True),
    ],
    ids=["lora-dropout", "model-dropout"],
)
def test_gradient_checkpointing_with_dropout_trains(config: GRPOConfig) -> None:
    # The recompute in backward must run in the forward's mode (it ran in eval: CheckpointError).
    engine = GRPOUpdater(_dropout_llama(), config=config)
    before = _params(engine)
    metrics = engine.train_step(_batch(engine.model))
    assert metrics["updated"] == 1.0
    assert not torch.equal(before, _params(engine))
    assert not engine.model.training


def test_checkpointing_leaves_the_models_own_dropout_off() -> None:
    # Train mode for checkpointing must not switch on the base model's attention dropout: the
    # trainer's logprobs would no longer be the sampler's (ratio != 1 on-policy).
    engine = GRPOUpdater(_dropout_llama(0.5), config=GRPOConfig(gradient_checkpointing=True))
    metrics = engine.compute_gradients(_batch(engine.model))
    assert metrics["logprob_gap"] < 1e-5


def test_lora_dropout_applies_in_the_update() -> None:
    # lora.dropout is a setting the update honours: two passes over the same batch draw
    # different masks, so the gradients differ (with dropout 0 they are equal).
    from .builders import gradient

    for dropout, same in ((0.0, True), (0.5, False)):
        engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(lora=LoraSettings(dropout=dropout)))
        batch = _batch(engine.model)
        grads = []
        for _ in range(2):
            engine.compute_gradients(batch)
            grads.append(gradient(engine.model))
            engine.optimizer.zero_grad()
        assert torch.equal(grads[0], grads[1]) is same


def test_a_non_finite_gradient_takes_no_step() -> None:
    engine = GRPOUpdater(tiny_llama(), config=GRPOConfig(learning_rate=1e-2))
    samples, _ = build_samples(_batch(engine.model), config=engine.config)
    poisoned = [
        dataclasses.replace(s, advantages=[float("inf")] * len(s.advantages)) for s in samples
    ]
    before = _params(engine)
    _, norm = engine.train_samples(poisoned)
    assert not math.isfinite(norm)
    assert engine.skipped_nonfinite == 1
    assert torch.equal(before, _params(engine))
    assert not engine.optimizer.state  # AdamW's moments untouched
    assert all(p.grad is None for p in engine.model.parameters())
    # the next, healthy batch trains as on a fresh engine
    metrics = engine.train_step(_batch(engine.model))
    assert metrics["updated"] == 1.0 and metrics["skipped_nonfinite"] == 0.0
    assert all(bool(torch.isfinite(p).all()) for p in engine.model.parameters())


def test_a_nan_adapter_is_never_saved_for_serving(tmp_path: Path) -> None:
    from fulmen.errors import FulmenError

    engine = GRPOUpdater(tiny_llama())
    with torch.no_grad():
        next(p for p in engine.model.parameters() if p.requires_grad).fill_(float("nan"))
    with pytest.raises(FulmenError, match="NaN or inf"):
        engine.save_adapter(tmp_path / "adapter")
    with pytest.raises(FulmenError, match="NaN or inf"):
        engine.save_model(tmp_path / "model")
    assert not (tmp_path / "adapter").exists()
