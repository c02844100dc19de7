"""SFT's engine: autocast (float32 master weights, bfloat16 math), dropout and checkpointing."""

from __future__ import annotations

import torch

from fulmen.algorithms.lora import LoraSettings
from fulmen.algorithms.sft.config import SFTConfig
from fulmen.algorithms.sft.dataset import SFTExample
from fulmen.algorithms.sft.updater import SFTUpdater, _sample

from ..models import tiny_llama


def test_autocast_sft_keeps_float32_adapter_and_raises_the_likelihood() -> None:
    examples = [
        SFTExample(
            input_ids=[1, 5, 6, 7, 8, 9, 10], positions=[4, 5, 6], rollout_id=f"r{i}", call_ids=[]
        )
        for i in range(4)
    ]
    engine = SFTUpdater(
        tiny_llama(hidden=64),
        config=SFTConfig(autocast="bfloat16", learning_rate=5e-2, batch_size=4, seed=0),
    )
    trained = {n: p for n, p in engine.model.named_parameters() if p.requires_grad}
    assert trained and all(p.dtype == torch.float32 for p in trained.values())
    before = engine.mean_logprob(examples)
    for round_index in range(3):
        engine.train(examples, round_index=round_index)
    assert engine.mean_logprob(examples) > before + 0.1


def _examples() -> list[SFTExample]:
    return [
        SFTExample(
            input_ids=[1, 5, 6, 7, 8, 9, 10], positions=[4, 5, 6], rollout_id=f"r{i}", call_ids=[]
        )
        for i in range(4)
    ]


def test_checkpointing_with_lora_dropout_trains() -> None:
    # The recompute in backward ran in eval mode while the forward ran with dropout:
    # torch refused it (CheckpointError).
    engine = SFTUpdater(
        tiny_llama(),
        config=SFTConfig(
            gradient_checkpointing=True, lora=LoraSettings(dropout=0.3), batch_size=4, seed=0
        ),
    )
    metrics = engine.train(_examples())
    assert metrics["sft/steps"] == 1.0 and metrics["sft/skipped_nonfinite"] == 0.0
    assert not engine.model.training


def test_lora_dropout_is_not_ignored() -> None:
    # The model stayed in eval mode, so lora.dropout did nothing: two passes over the same
    # examples gave the same gradient.
    engine = SFTUpdater(
        tiny_llama(), config=SFTConfig(lora=LoraSettings(dropout=0.5), batch_size=4, seed=0)
    )
    samples = [_sample(e) for e in _examples()]
    grads = []
    for _ in range(2):
        engine._accumulate(samples, tokens=12)
        grads.append(
            torch.cat([p.grad.flatten() for p in engine.model.parameters() if p.grad is not None])
        )
        engine.optimizer.zero_grad()
    assert not torch.equal(grads[0], grads[1])


def test_unset_max_seq_len_is_the_models_context() -> None:
    engine = SFTUpdater(tiny_llama(), config=SFTConfig(seed=0))  # 128 positions
    assert engine.config.max_seq_len is None and engine.max_seq_len == 128
    assert SFTUpdater(tiny_llama(), config=SFTConfig(seed=0, max_seq_len=64)).max_seq_len == 64
