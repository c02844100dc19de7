"""Attention for long sequences without an attention matrix: blockwise scaled-dot-product attention.

transformers builds a ``[B, 1, L, T]`` mask per layer type for a forward pass, and its eager
attention a ``[B, H, L, T]`` score matrix per layer: a 19.6k-token prompt on Gemma 3 270M asked
for 6.2 GB at once. Registered under :data:`BLOCKWISE`, the mask function here returns a
:class:`BlockwiseMask` (the recipe transformers passes: mask function, offsets, padding)
instead of the tensor, and :func:`blockwise_attention` computes the queries in blocks of
``query_block`` rows. Each block attends only to the key columns its mask can reach (up to its
last query in a causal layer, and no further back than the window in a sliding-window layer),
builds the mask of that block alone, and runs torch's ``scaled_dot_product_attention`` on it,
a fused kernel that holds no score matrix on CPU, in the forward and in the backward. So a
layer call holds ``O(query_block x T)`` booleans instead of ``O(L x T)`` floats, and a
sliding-window layer costs ``O(L x window)`` instead of ``O(L x T)``. A global causal layer over
a whole sequence without cached past (training, a prompt's first chunk) needs no mask at all:
torch's kernel gets its causal flag and skips the masked half itself. A single query (a decode
step) is attended with one matrix product per key-value head, its query heads folded together:
torch's CPU kernel is slow for that shape.

The key range is derived from the recipe only when it is transformers' plain causal mask or its
sliding-window causal mask; any other mask function (bidirectional image tokens, packed
sequences) is evaluated over every key column, which is always correct. Padding queries that
may see no key (left padding) attend to themselves, so no NaN reaches the values of masked
padding columns. This module is shared by the built-in engine and the updater, and is imported
only by code that already needs torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["BLOCKWISE", "BlockwiseMask", "blockwise_attention", "blockwise_mask", "register"]

#: The ``attn_implementation`` name :func:`register` adds to transformers.
BLOCKWISE = "fulmen_blockwise"

#: Query rows per block: each block holds a ``[B, 1, rows, keys]`` boolean mask.
QUERY_BLOCK = 512


@dataclass(frozen=True)
class BlockwiseMask:
    """What a layer's attention mask is made of, evaluated one block of queries at a time.

    Attributes:
        batch_size: rows of the batch.
        q_length / kv_length: query and key columns of this forward pass.
        q_offset / kv_offset: absolute index of the first query / key column.
        mask_function: transformers' ``(batch, head, q_idx, kv_idx) -> bool`` mask recipe,
            without the padding.
        padding: the 2D padding mask (``True``: a real token), ``None`` without padding.
        is_causal: no query sees a later key (the recipe is transformers' causal mask).
        window: a query sees only the last ``window`` keys up to itself (sliding-window
            causal recipe); ``None``: no window.
        use_vmap: evaluate ``mask_function`` with ``torch.vmap`` (custom recipes).
        right_padded: every row's padding (if any) follows its real tokens.
    """

    batch_size: int
    q_length: int
    kv_length: int
    q_offset: int
    kv_offset: int
    mask_function: Callable[..., Any]
    padding: Tensor | None
    is_causal: bool
    window: int | None
    use_vmap: bool
    right_padded: bool = True

    @property
    def is_plain_causal(self) -> bool:
        """Whether torch's own causal flag computes this mask for the real queries.

        That is a causal recipe without a window over queries and keys that are the same
        columns (no cached past), where padding can only follow a row's real tokens: a real
        query never sees a later column, so the padding changes nothing it sees. The fused
        kernel then skips the masked half itself, in the forward and the backward.
        """
        return (
            self.is_causal
            and self.window is None
            and self.right_padded
            and self.q_offset == self.kv_offset
            and self.q_length == self.kv_length
        )

    def key_range(self, q_start: int, q_end: int) -> tuple[int, int]:
        """Return the key columns ``[start, end)`` queries ``[q_start, q_end)`` may attend to."""
        start, end = 0, self.kv_length
        if self.is_causal:
            end = min(end, self.q_offset + q_end - self.kv_offset)
        if self.window is not None:
            start = max(start, self.q_offset + q_start - self.window + 1 - self.kv_offset)
        return start, max(start, end)

    def block(self, q_start: int, q_end: int, k_start: int, k_end: int, device: Any) -> Tensor:
        """Build the ``[B or 1, 1, q_end - q_start, k_end - k_start]`` boolean mask of a block.

        A query row that may see no key in the block (a padding query of a left-padded row)
        gets its own column when it is in the block, so no row of the softmax is empty.
        """
        queries = torch.arange(q_start, q_end, device=device) + self.q_offset
        keys = torch.arange(k_start, k_end, device=device) + self.kv_offset
        if self.is_causal:  # the recipe's own rule, computed directly
            mask = keys[None, :] <= queries[:, None]
            if self.window is not None:
                mask &= keys[None, :] > queries[:, None] - self.window
            mask = mask[None, None]
            if self.padding is None:
                return mask  # every query sees itself
            mask = mask & self.padding[:, None, None, keys]
        else:
            from transformers.masking_utils import sdpa_mask

            built = sdpa_mask(
                batch_size=self.batch_size,
                q_length=q_end - q_start,
                kv_length=k_end - k_start,
                q_offset=self.q_offset + q_start,
                kv_offset=self.kv_offset + k_start,
                mask_function=self.mask_function,
                attention_mask=self.padding,
                allow_is_causal_skip=False,
                use_vmap=self.use_vmap,
                device=device,
            )
            assert built is not None  # never skipped with allow_is_causal_skip=False
            mask = built
        own = queries[:, None] == keys[None, :]
        blind = ~mask.any(dim=-1, keepdim=True)
        return mask | (blind & own)


def _recipe(mask_function: Callable[..., Any], local_size: int | None) -> tuple[bool, int | None]:
    """Say whether ``mask_function`` is transformers' causal recipe, and its window."""
    from transformers.masking_utils import causal_mask_function

    if mask_function is causal_mask_function:
        return True, None
    # sliding_window_causal_mask_function(w) is and_masks(sliding_window_overlay(w), causal)
    parts: tuple[Any, ...] = ()
    if getattr(mask_function, "__qualname__", "") == "and_masks.<locals>.and_mask":
        cells = getattr(mask_function, "__closure__", None) or ()
        parts = next((c.cell_contents for c in cells if isinstance(c.cell_contents, tuple)), ())
    names = sorted(getattr(p, "__qualname__", "") for p in parts)
    if local_size is not None and names == [
        "causal_mask_function",
        "sliding_window_overlay.<locals>.inner_mask",
    ]:
        overlay = next(p for p in parts if p is not causal_mask_function)
        window = next(
            (
                c.cell_contents
                for c in overlay.__closure__ or ()
                if isinstance(c.cell_contents, int)
            ),
            None,
        )
        if window == local_size:
            return True, window
    return False, None


def blockwise_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int | Tensor = 0,
    kv_offset: int | Tensor = 0,
    mask_function: Callable[..., Any] | None = None,
    attention_mask: Tensor | None = None,
    local_size: int | None = None,
    use_vmap: bool = False,
    **kwargs: Any,
) -> BlockwiseMask:
    """Return the recipe of a mask, not the tensor (transformers' mask interface)."""
    from transformers.masking_utils import causal_mask_function, prepare_padding_mask

    del kwargs  # the dtype, device and skip flags of the tensor masks: nothing to build here
    function = mask_function if mask_function is not None else causal_mask_function
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
    # A mask on the meta device (the memory plan's dry run) has no values: no padding.
    if padding is not None and (padding.device.type == "meta" or bool(padding.all())):
        padding = None
    right_padded = padding is None or bool((padding[:, 1:] <= padding[:, :-1]).all())
    is_causal, window = (False, None) if use_vmap else _recipe(function, local_size)
    return BlockwiseMask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=function,
        padding=padding,
        is_causal=is_causal,
        window=window,
        use_vmap=use_vmap,
        right_padded=right_padded,
    )


def blockwise_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: BlockwiseMask | Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    query_block: int = QUERY_BLOCK,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """Attention of ``query`` [B, Hq, L, D] over ``key``/``value`` [B, Hkv, T, D], by blocks.

    Same contract as transformers' attention functions: returns ``[B, L, Hq, D]`` and no
    weights. ``attention_mask`` is a :class:`BlockwiseMask`; a tensor mask (a caller that built
    its own 4D mask) or ``None`` (no mask: causal when ``module.is_causal``) is accepted too.
    """
    del kwargs
    length, dim = query.shape[2], query.shape[3]
    scale = float(getattr(module, "head_dim", dim)) ** -0.5 if scaling is None else scaling
    p = dropout if module.training else 0.0
    mask = attention_mask
    if not isinstance(mask, BlockwiseMask):
        mask = _from_tensor(module, mask, query, key)
    if mask.is_plain_causal and softcap is None and length > 1:
        out = _sdpa(query, key, value, attn_mask=None, is_causal=True, dropout_p=p, scale=scale)
        return out.transpose(1, 2).contiguous(), None
    blocks: list[Tensor] = []
    step = max(1, query_block)
    for q_start in range(0, length, step):
        q_end = min(length, q_start + step)
        k_start, k_end = mask.key_range(q_start, q_end)
        block_mask = mask.block(q_start, q_end, k_start, k_end, query.device)
        q = query[:, :, q_start:q_end]
        k, v = key[:, :, k_start:k_end], value[:, :, k_start:k_end]
        if q_end - q_start == 1 or softcap is not None:
            blocks.append(_folded(q, k, v, block_mask, scale, softcap, p))
        else:
            blocks.append(
                _sdpa(q, k, v, attn_mask=block_mask, is_causal=False, dropout_p=p, scale=scale)
            )
    out = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=2)
    return out.transpose(1, 2).contiguous(), None


def _sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    attn_mask: Tensor | None,
    is_causal: bool,
    dropout_p: float,
    scale: float,
) -> Tensor:
    """Torch's fused attention (grouped-query heads as they are).

    On the meta device (the memory plan's dry run, ``fulmen.algorithms.update_memory``) torch
    would pick its unfused fallback, which holds the score matrix the CPU and GPU kernels never
    hold, so the fused CPU kernel's op is called there directly: it keeps what they keep (the
    output and one log-sum-exp per query).
    """
    if query.device.type == "meta" and dropout_p == 0.0:
        fused = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # pyright: ignore[reportAttributeAccessIssue]
        return fused(query, key, value, 0.0, is_causal, attn_mask=attn_mask, scale=scale)[0]
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        is_causal=is_causal,
        dropout_p=dropout_p,
        scale=scale,
        enable_gqa=True,
    )


def _from_tensor(
    module: torch.nn.Module, mask: Tensor | None, query: Tensor, key: Tensor
) -> BlockwiseMask:
    """Wrap a prebuilt 4D mask (boolean or additive), or none, as a :class:`BlockwiseMask`."""
    length, keys = query.shape[2], key.shape[2]
    if mask is None:
        causal = bool(getattr(module, "is_causal", True)) and length > 1
        return BlockwiseMask(
            batch_size=query.shape[0],
            q_length=length,
            kv_length=keys,
            q_offset=keys - length,
            kv_offset=0,
            mask_function=lambda b, h, q, k: k <= q if causal else q >= 0,  # type: ignore[misc]
            padding=None,
            is_causal=causal,
            window=None,
            use_vmap=False,
        )
    allowed = mask if mask.dtype == torch.bool else mask == 0
    allowed = allowed[:, :, :, :keys]
    return BlockwiseMask(
        batch_size=query.shape[0],
        q_length=length,
        kv_length=keys,
        q_offset=0,
        kv_offset=0,
        mask_function=lambda b, h, q, k: allowed[b, 0, q, k],  # type: ignore[misc]
        padding=None,
        is_causal=False,
        window=None,
        use_vmap=False,
    )


def _folded(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor,
    scale: float,
    softcap: float | None,
    dropout: float,
) -> Tensor:
    """Eager attention with the query heads of each key-value group folded into the rows.

    One matrix product per key-value head reads the keys in place (no copy per query head);
    used for single queries, where it beats torch's CPU kernel, and for soft-capped logits,
    which that kernel does not take. Returns ``[B, Hq, L, D]``.
    """
    batch, q_heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    group = q_heads // kv_heads
    folded = query.reshape(batch, kv_heads, group * length, dim)
    scores = torch.matmul(folded, key.transpose(2, 3)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.view(batch, kv_heads, group, length, keys)
    scores = scores.masked_fill(~mask[:, :, None], float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout:
        weights = F.dropout(weights, p=dropout)
    out = torch.matmul(weights.view(batch, kv_heads, group * length, keys), value)
    return out.view(batch, q_heads, length, dim)


def register() -> str:
    """Register :func:`blockwise_attention` and its mask with transformers; return the name.

    Idempotent; pass the name as ``attn_implementation`` when loading a model.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(BLOCKWISE, blockwise_attention)
    AttentionMaskInterface.register(BLOCKWISE, blockwise_mask)
    return BLOCKWISE
