"""Blockwise attention computes what transformers' eager attention computes.

Small Gemma 3 (a sliding-window and a global layer, one key-value head for two query heads)
and Llama models run the same inputs with ``attn_implementation="eager"`` and with
:data:`fulmen.attention.BLOCKWISE`, split into blocks of 5 queries: left-padded rows with a
cache (a prefill, then decode steps), right-padded rows with gradients, and a mask recipe the
blockwise path does not recognize (evaluated over every key) all agree.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

import fulmen.attention as attention
from fulmen.engines.builtin.kv_cache import GrowableCache


def _gemma() -> Any:
    return Gemma3TextConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=256,
    )


def _llama() -> Any:
    return LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
    )


@pytest.fixture(params=["gemma3", "llama"])
def pair(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    monkeypatch.setattr(attention, "QUERY_BLOCK", 5)  # many blocks for 40 tokens
    config = _gemma() if request.param == "gemma3" else _llama()
    cls = Gemma3ForCausalLM if request.param == "gemma3" else LlamaForCausalLM
    torch.manual_seed(0)
    reference = cls._from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    blockwise = cls._from_config(copy.deepcopy(config), attn_implementation=attention.register())
    blockwise.load_state_dict(reference.state_dict())
    return reference, blockwise.eval()


def _left_padded() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 97, (3, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[1, :7] = 0
    mask[2, :30] = 0
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def test_left_padded_prefill_and_decode_with_a_cache_match_eager(pair: tuple[Any, Any]) -> None:
    reference, blockwise = pair
    ids, mask, positions = _left_padded()
    caches = [GrowableCache(), GrowableCache()]
    outputs: list[list[torch.Tensor]] = [[], []]
    with torch.no_grad():
        for model, cache, out in zip(pair, caches, outputs, strict=True):
            for start, end in [(0, 30), *((t, t + 1) for t in range(30, 40))]:
                logits = model(
                    input_ids=ids[:, start:end],
                    attention_mask=mask[:, :end],
                    position_ids=positions[:, start:end],
                    cache=cache,
                    use_cache=True,
                ).logits
                out.append(logits[:, -1])
    ends = [30, *range(31, 41)]
    for end, expected, got in zip(ends, *outputs, strict=True):
        assert torch.isfinite(got).all()  # padding queries too: no NaN reaches the cache
        real = mask[:, end - 1].bool()  # a padding position's logits mean nothing
        torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)
    del reference, blockwise


def test_right_padded_training_forward_and_gradients_match_eager(pair: tuple[Any, Any]) -> None:
    ids = torch.randint(0, 97, (3, 40), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[1, 33:] = 0
    real = mask.bool()
    grads = []
    for model in pair:
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits[real].logsumexp(-1).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        model.zero_grad()
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)


def test_an_unrecognized_mask_recipe_is_evaluated_over_every_key() -> None:
    from transformers.masking_utils import and_masks, causal_mask_function

    def odd_keys_only(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return kv % 2 == 1

    recipe = and_masks(causal_mask_function, odd_keys_only)
    mask = attention.blockwise_mask(batch_size=1, q_length=6, kv_length=6, mask_function=recipe)
    assert not mask.is_causal and mask.key_range(0, 3) == (0, 6)
    block = mask.block(0, 6, 0, 6, "cpu")[0, 0]
    # Query 0 sees no odd key at or before it: it sees itself rather than nothing.
    assert block.tolist()[0] == [True, False, False, False, False, False]
    assert block.tolist()[5] == [False, True, False, True, False, True]
