"""The LM head applied only at the trained positions gives the full forward's logprobs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.policy import prepare_policy, token_logprobs

from .models import tiny_gemma3, tiny_llama


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    lengths = [9, 5, 12]
    ids = torch.zeros((3, 12), dtype=torch.long)
    mask = torch.zeros((3, 12), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(3, 64, (n,), generator=gen)
        mask[row, :n] = 1
    rows = torch.tensor([0, 0, 0, 1, 2, 2, 2, 2])
    positions = torch.tensor([4, 5, 8, 4, 1, 6, 7, 11])
    return ids, mask, rows, positions


def _full_forward(model: nn.Module, ids, mask, rows, positions, temperature=1.0):
    logits = model(input_ids=ids, attention_mask=mask).logits.float() / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    return logprobs[rows, positions - 1].gather(-1, ids[rows, positions].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma3], ids=["llama", "gemma3-softcap"])
@pytest.mark.parametrize("chunk", [3, 1024])
def test_head_only_at_targets_matches_full_forward(build, chunk: int) -> None:
    model = build()
    ids, mask, rows, positions = _batch()
    with torch.no_grad():
        expected = _full_forward(model, ids, mask, rows, positions)
        got, entropy = token_logprobs(
            model,
            input_ids=ids,
            attention_mask=mask,
            rows=rows,
            positions=positions,
            chunk_tokens=chunk,
            with_entropy=True,
        )
    assert got.shape == (8,)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert entropy is not None and bool((entropy > 0).all())


@pytest.mark.parametrize("chunk", [3, 1024], ids=["recomputed-chunks", "one-chunk"])
def test_gradients_match_full_forward(chunk: int) -> None:
    ids, mask, rows, positions = _batch()
    weights = torch.linspace(-1.0, 1.0, 8)
    grads = []
    for use_head_only in (True, False):
        model = tiny_llama()
        if use_head_only:
            lp, _ = token_logprobs(
                model,
                input_ids=ids,
                attention_mask=mask,
                rows=rows,
                positions=positions,
                chunk_tokens=chunk,
            )
        else:
            lp = _full_forward(model, ids, mask, rows, positions)
        (weights * lp).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_temperature_and_lora_wrapped_model() -> None:
    model = prepare_policy(tiny_llama(), GRPOConfig(finetune="lora"))
    ids, mask, rows, positions = _batch()
    with torch.no_grad():
        expected = _full_forward(model, ids, mask, rows, positions, temperature=0.7)
        got, _ = token_logprobs(
            model,
            input_ids=ids,
            attention_mask=mask,
            rows=rows,
            positions=positions,
            temperature=0.7,
        )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_position_zero_is_refused() -> None:
    ids, mask, rows, _ = _batch()
    with pytest.raises(Exception, match="position"):
        token_logprobs(
            tiny_llama(),
            input_ids=ids,
            attention_mask=mask,
            rows=rows[:1],
            positions=torch.tensor([0]),
        )
