"""SFT's engine under autocast: float32 master weights, bfloat16 math, and it still learns."""

from __future__ import annotations

import torch

from fulmen.algorithms.sft.config import SFTConfig
from fulmen.algorithms.sft.dataset import SFTExample
from fulmen.algorithms.sft.engine import SFTEngine

from ..models import tiny_llama


def test_autocast_sft_keeps_float32_adapter_and_raises_the_likelihood() -> None:
    examples = [
        SFTExample(
            input_ids=[1, 5, 6, 7, 8, 9, 10], positions=[4, 5, 6], rollout_id=f"r{i}", call_ids=[]
        )
        for i in range(4)
    ]
    engine = SFTEngine(
        tiny_llama(hidden=64),
        config=SFTConfig(autocast="bfloat16", learning_rate=5e-2, batch_size=4, seed=0),
    )
    trained = {n: p for n, p in engine.model.named_parameters() if p.requires_grad}
    assert trained and all(p.dtype == torch.float32 for p in trained.values())
    before = engine.mean_logprob(examples)
    for round_index in range(3):
        engine.train(examples, round_index=round_index)
    assert engine.mean_logprob(examples) > before + 0.1
