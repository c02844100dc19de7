"""Prefill planning: which prompt tokens to compute and how to lay out a prefill batch.

With a prefix cache, row ``i`` of a prefill has ``L_i`` prompt tokens of which the first ``c_i``
have cached KV. Rows stay left-padded with their real tokens contiguous at the right end (the
batching loop's invariant; Gemma 3's sliding-window mask counts columns, so a gap inside a row
would shift its window). So one forward pass computes the last ``S = max(L_i - c_i)`` columns
for every row, and row ``i`` takes ``u_i = max(0, L_i - S)`` tokens from the cache as past
keys and values (``u_i <= c_i`` always holds). A row that matched nothing makes ``S`` its whole
prompt, so :func:`plan_groups` splits new rows into groups that are prefilled separately when
that computes fewer padded tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any

import torch

from fulmen.engines.builtin.kv_cache import GrowableCache, KVShape
from fulmen.engines.builtin.prefix_cache import PrefixMatch
from fulmen.engines.builtin.sequence import Sequence

__all__ = ["PrefillBatch", "PrefillRow", "build_batch", "plan_groups", "row_kv"]

#: Cost of one extra forward pass, in padded tokens, when splitting a prefill into groups.
_GROUP_OVERHEAD_TOKENS = 32


@dataclass
class PrefillRow:
    """A new sequence, its namespace in the prefix cache and the cached prefix it matched."""

    seq: Sequence
    namespace: Any
    match: PrefixMatch | None

    @property
    def length(self) -> int:
        """Prompt tokens."""
        return len(self.seq.job.prompt_ids)

    @property
    def uncached(self) -> int:
        """Prompt tokens without cached KV (at least one: the last token's logits are needed)."""
        cached = self.match.tokens if self.match is not None else 0
        return max(1, self.length - cached)


@dataclass
class PrefillBatch:
    """Inputs of one prefill forward pass and how many cached tokens each row used."""

    ids: torch.Tensor
    mask: torch.Tensor  # over past + new columns
    positions: torch.Tensor
    cache: Any
    used: list[int]


def plan_groups(rows: Seq[PrefillRow]) -> list[list[PrefillRow]]:
    """Split rows into prefill groups with the fewest padded computed tokens.

    Sorted by uncached length, a group costs ``len(group) * max(uncached)`` plus a fixed
    overhead per forward pass; contiguous groups are optimal for that cost, found by dynamic
    programming (batches are small).
    """
    order = sorted(rows, key=lambda r: r.uncached)
    n = len(order)
    best = [0] + [0x7FFFFFFF] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        for start in range(end):
            cost = best[start] + (end - start) * order[end - 1].uncached + _GROUP_OVERHEAD_TOKENS
            if cost < best[end]:
                best[end], cut[end] = cost, start
    groups: list[list[PrefillRow]] = []
    end = n
    while end > 0:
        groups.append(order[cut[end] : end])
        end = cut[end]
    return groups[::-1]


def build_batch(
    rows: Seq[PrefillRow], pad_token_id: int, shape: KVShape, *, headroom: int = 0
) -> PrefillBatch:
    """Lay out one prefill group: cached past KV plus the token columns to compute.

    The group's KV cache is allocated once with room for every column of the prefill plus
    ``headroom`` decode steps; the matched prefixes are copied into it block by block.
    """
    width = max(r.uncached for r in rows)
    used = [max(0, r.length - width) for r in rows]
    past = max(used)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), past + width), dtype=torch.long)
    for i, (row, u) in enumerate(zip(rows, used, strict=True)):
        new = row.seq.job.prompt_ids[u:]
        ids[i, width - len(new) :] = torch.tensor(new, dtype=torch.long)
        mask[i, past - u : past] = 1
        mask[i, past + width - len(new) :] = 1
    positions = ((mask.cumsum(1) - 1).clamp(min=0))[:, past:]
    cache = GrowableCache.allocate(
        shape, batch=len(rows), filled=past, capacity=past + width + headroom
    )
    layers = cache.pairs()
    for i, (row, u) in enumerate(zip(rows, used, strict=True)):
        if u and row.match is not None:
            for start, block in row.match.blocks(u):
                column = past - u + start
                end = column + block.shape[3]
                for index, (keys, values) in enumerate(layers):
                    keys[i, :, column:end] = block[index, 0]
                    values[i, :, column:end] = block[index, 1]
    return PrefillBatch(ids, mask, positions, cache, used)


def row_kv(cache: Any, row: int, length: int, skip: int = 0) -> Callable[[int, int], torch.Tensor]:
    """KV of the last ``length`` columns of batch row ``row``, minus the first ``skip``.

    Returns a function of ``(start, end)``, columns relative to the first kept one, giving
    ``[layers, 2, kv_heads, end - start, head_dim]`` (the layout the prefix cache stores): a
    block at a time, so a long prompt's KV is never gathered whole.
    """
    if length - skip <= 0:
        raise ValueError(f"no columns left: length {length}, skip {skip}")
    first = -length + skip
    layers = list(cache.layers)

    def columns(start: int, end: int) -> torch.Tensor:
        lo, hi = first + start, first + end
        parts = [
            torch.stack(
                [layer.keys[row, :, lo : hi or None], layer.values[row, :, lo : hi or None]]
            )
            for layer in layers
        ]
        return torch.stack(parts)

    return columns
