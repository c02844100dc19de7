"""The GQA-aware eager attention computes what transformers' eager attention computes."""

from __future__ import annotations

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import eager_attention_forward

from fulmen.engines.builtin.attention import gqa_eager_attention


class _Module(torch.nn.Module):
    def __init__(self, groups: int, head_dim: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.head_dim = head_dim


@pytest.mark.parametrize(("q_heads", "kv_heads", "length"), [(4, 1, 1), (4, 2, 5), (2, 2, 3)])
def test_matches_eager_attention_with_a_padding_mask(
    q_heads: int, kv_heads: int, length: int
) -> None:
    torch.manual_seed(0)
    batch, keys, dim = 3, 9, 16
    query = torch.randn(batch, q_heads, length, dim)
    key = torch.randn(batch, kv_heads, keys, dim)
    value = torch.randn(batch, kv_heads, keys, dim)
    mask = torch.zeros(batch, 1, length, keys + 2)  # wider than the keys, as eager allows
    mask[0, :, :, :4] = torch.finfo(torch.float32).min  # a left-padded row
    module = _Module(q_heads // kv_heads, dim).eval()
    expected, expected_w = eager_attention_forward(
        module, query, key, value, mask[:, :, :, :keys], scaling=0.25, softcap=None
    )
    out, weights = gqa_eager_attention(module, query, key, value, mask, scaling=0.25)
    assert out.shape == expected.shape == (batch, length, q_heads, dim)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weights, expected_w, rtol=1e-5, atol=1e-6)
    assert float(weights[0, :, :, :4].abs().max()) == 0.0  # padding gets no weight
