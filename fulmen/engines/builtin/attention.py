"""Eager attention for grouped-query models without copying keys and values per query head.

transformers' eager attention expands each key/value head to every query head of its group
(``repeat_kv``) and then reshapes, which copies the whole KV cache once per layer and step:
for Gemma 3 270M (4 query heads per KV head) at batch 16 and 300 tokens that was about a third
of a decode step on this CPU. Here the query heads of a group are folded into the query length
instead, so one matmul per KV head reads the cache in place; the arithmetic is the same.

:func:`register` adds it to transformers' attention and mask registries under
:data:`GQA_EAGER` (with eager's mask); registering is idempotent. It holds a whole
``[queries x keys]`` score matrix per layer, so it is no longer the engine's default
(``fulmen serve --attn-implementation eager``): :mod:`fulmen.attention`'s blockwise attention
serves long prompts and decodes a single query the same way, folded per key-value head.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["GQA_EAGER", "gqa_eager_attention", "register"]

#: The ``attn_implementation`` name this module registers.
GQA_EAGER = "fulmen_gqa_eager"


def gqa_eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``query`` [B, Hq, L, D] over ``key``/``value`` [B, Hkv, T, D].

    Same contract as transformers' ``eager_attention_forward``: returns the output as
    [B, L, Hq, D] and the attention weights; the softmax runs in float32.
    """
    batch, q_heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    group = q_heads // kv_heads
    scale = float(getattr(module, "head_dim", dim)) ** -0.5 if scaling is None else scaling
    folded = query.reshape(batch, kv_heads, group * length, dim)
    scores = torch.matmul(folded, key.transpose(2, 3)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.view(batch, kv_heads, group, length, keys)
    if attention_mask is not None:  # [B, 1, L, >=T]: the same for every head
        scores = scores + attention_mask[:, :, None, :, :keys]
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout and module.training:
        weights = torch.nn.functional.dropout(weights, p=dropout)
    out = torch.matmul(weights.view(batch, kv_heads, group * length, keys), value)
    out = out.view(batch, q_heads, length, dim).transpose(1, 2).contiguous()
    return out, weights.view(batch, q_heads, length, keys)


def register() -> str:
    """Register :func:`gqa_eager_attention` with transformers; return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(GQA_EAGER, gqa_eager_attention)
    AttentionMaskInterface.register(GQA_EAGER, eager_mask)
    return GQA_EAGER
