"""The LM head applied only at the trained positions gives the full forward's logprobs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fulmen.algorithms.grpo import GRPOConfig
from fulmen.algorithms.policy import (
    load_stage_policy,
    merge_adapter,
    prepare_policy,
    token_logprobs,
)
from fulmen.errors import ConfigError

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


def test_the_head_runs_in_float32_under_autocast() -> None:
    # bfloat16 logits biased some tokens' logprobs (calc's policy then degenerated); the
    # decoder may run in bfloat16, the head and its log-softmax must not.
    model = tiny_llama(hidden=64, init=0.5)
    ids, mask, rows, positions = _batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = token_logprobs(
            model, input_ids=ids, attention_mask=mask, rows=rows, positions=positions
        )
        hidden = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    with torch.no_grad():
        logits = model.get_output_embeddings()(hidden[rows, positions - 1].float())
    expected = torch.log_softmax(logits, -1).gather(-1, ids[rows, positions].unsqueeze(-1))
    torch.testing.assert_close(got, expected.squeeze(-1), atol=1e-5, rtol=0)


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


def test_a_full_stage_after_a_lora_stage_starts_from_base_plus_adapter(tmp_path: Path) -> None:
    lora = prepare_policy(tiny_llama(), GRPOConfig(finetune="lora"))
    with torch.no_grad():  # a trained adapter: peft initializes B to zero, a no-op
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    lora.save_pretrained(str(tmp_path / "adapter"))
    tiny_llama().save_pretrained(str(tmp_path / "base"))
    ids, mask, rows, positions = _batch()
    with torch.no_grad():
        served = _full_forward(lora, ids, mask, rows, positions)
        base = _full_forward(tiny_llama(), ids, mask, rows, positions)
    assert (served - base).abs().max() > 1e-2  # the adapter matters

    full = load_stage_policy(
        tmp_path / "base",
        dtype="float32",
        finetune="full",
        weights=None,
        adapter=tmp_path / "adapter",
    )
    assert not any("lora_" in name for name, _ in full.named_parameters())
    with torch.no_grad():
        merged = _full_forward(
            prepare_policy(full, GRPOConfig(finetune="full")), ids, mask, rows, positions
        )
    torch.testing.assert_close(merged, served, atol=1e-5, rtol=1e-5)
    # a LoRA stage loads the adapter after wrapping instead: its start is the base weights
    kept = load_stage_policy(
        tmp_path / "base",
        dtype="float32",
        finetune="lora",
        weights=None,
        adapter=tmp_path / "adapter",
    )
    with torch.no_grad():
        torch.testing.assert_close(_full_forward(kept, ids, mask, rows, positions), base)


def test_merging_a_folder_without_an_adapter_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot merge adapter .*no adapter_config.json"):
        merge_adapter(tiny_llama(), tmp_path)


def test_a_bfloat16_policy_takes_its_logits_in_float32() -> None:
    # dtype bfloat16 (no autocast): the decoder runs in bfloat16, the head and log-softmax in
    # float32 on the same hidden states (it ran in bfloat16: up to 0.064 off on Gemma 3).
    model = tiny_llama(hidden=64, init=0.5).to(torch.bfloat16)
    ids, mask, rows, positions = _batch()
    with torch.no_grad():
        got, _ = token_logprobs(
            model, input_ids=ids, attention_mask=mask, rows=rows, positions=positions
        )
        hidden = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        logits = torch.nn.functional.linear(
            hidden[rows, positions - 1].float(), model.get_output_embeddings().weight.float()
        )
    expected = torch.log_softmax(logits, -1).gather(-1, ids[rows, positions].unsqueeze(-1))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected.squeeze(-1), atol=1e-5, rtol=0)


def test_a_trained_bfloat16_head_still_gets_its_gradient() -> None:
    model = tiny_llama(hidden=64).to(torch.bfloat16)
    ids, mask, rows, positions = _batch()
    lp, _ = token_logprobs(
        model, input_ids=ids, attention_mask=mask, rows=rows, positions=positions
    )
    lp.sum().backward()
    grad = model.get_output_embeddings().weight.grad
    assert grad is not None and grad.dtype == torch.bfloat16 and bool(grad.abs().sum() > 0)
