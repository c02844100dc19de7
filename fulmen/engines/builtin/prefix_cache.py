"""A block-level prefix cache: the KV of token prefixes the engine has already computed.

Prompts are cut into blocks of ``block_size`` tokens. Each cached block is a node of a trie
keyed by ``(parent node, the block's tokens)``, so a node stands for the whole prefix up to and
including its block, and one lookup walks the prompt block by block. The trie roots are
*namespaces*: the adapter a request runs on (``None`` for the base weights) and the policy
version that loaded it, so KV computed under one set of weights is never served to another.
A node holds the block's keys and values for every layer in one tensor of shape
``[layers, 2, kv_heads, block_size, head_dim]``.

Reference counts: a node is referenced by each of its children and by each pending prefill
that matched it (:meth:`PrefixCache.match` pins, :meth:`PrefixMatch.release` unpins). Only
unreferenced nodes (unpinned leaves) can be evicted, least recently used first, when the
cached bytes exceed ``max_bytes``. Only the batching thread calls the mutating methods; the
counters may be read from any thread.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["PrefixCache", "PrefixCacheStats", "PrefixMatch"]


class _Node:
    __slots__ = ("children", "key", "kv", "namespace", "parent", "pins", "tick", "uid")

    def __init__(
        self,
        uid: int,
        key: tuple[int, tuple[int, ...]],
        parent: _Node | None,
        kv: torch.Tensor | None,
        namespace: Hashable,
    ) -> None:
        self.uid = uid  # children are keyed by it
        self.key = key
        self.parent = parent
        self.kv = kv  # None only for a namespace root
        self.children = 0
        self.pins = 0
        self.tick = 0
        self.namespace = namespace

    @property
    def referenced(self) -> bool:
        return self.children > 0 or self.pins > 0


@dataclass
class PrefixCacheStats:
    """Counters of a :class:`PrefixCache` (tokens and blocks since it was created)."""

    hit_tokens: int = 0
    miss_tokens: int = 0
    inserted_blocks: int = 0
    evicted_blocks: int = 0
    invalidated_blocks: int = 0


@dataclass
class PrefixMatch:
    """The cached blocks that start a prompt, pinned until :meth:`release` is called."""

    nodes: list[_Node] = field(default_factory=lambda: [])
    block_size: int = 1

    @property
    def tokens(self) -> int:
        """Number of prompt tokens whose KV is cached (a multiple of the block size)."""
        return len(self.nodes) * self.block_size

    def kv(self, length: int) -> torch.Tensor:
        """KV of the first ``length`` matched tokens: ``[layers, 2, kv_heads, length, dim]``."""
        return torch.cat([block for _, block in self.blocks(length)], dim=3)

    def blocks(self, length: int) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield the first ``length`` matched tokens' KV by block: ``(first token, kv)`` pairs.

        Each ``kv`` is ``[layers, 2, kv_heads, n, dim]`` (``n`` is the block size, less in the
        last block), a view of the cached block: a long prefix is copied once, where it goes.
        """
        if length > self.tokens:
            raise ValueError(f"{length} tokens asked of a {self.tokens}-token match")
        size = self.block_size
        for index, node in enumerate(self.nodes[: -(-length // size)]):
            if node.kv is not None:
                start = index * size
                yield start, node.kv[:, :, :, : min(size, length - start)]

    def release(self) -> None:
        """Unpin the matched blocks (they become evictable again); idempotent."""
        for node in self.nodes:
            node.pins -= 1
        self.nodes = []


class PrefixCache:
    """Block-level prefix cache with reference counts and LRU eviction under a byte bound.

    Args:
        max_bytes: most bytes of cached KV; least recently used unreferenced blocks are
            evicted beyond it.
        block_size: tokens per block; only whole blocks are cached.
    """

    def __init__(self, *, max_bytes: int, block_size: int = 16) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.block_size = block_size
        self.stats = PrefixCacheStats()
        self.bytes = 0
        self._nodes: dict[tuple[int, tuple[int, ...]], _Node] = {}
        self._roots: dict[Hashable, _Node] = {}
        self._ids = itertools.count(1)
        self._clock = itertools.count(1)

    @property
    def blocks(self) -> int:
        """Number of cached blocks."""
        return len(self._nodes)

    def _root(self, namespace: Hashable) -> _Node:
        root = self._roots.get(namespace)
        if root is None:
            root = _Node(next(self._ids), (0, ()), None, None, namespace)
            self._roots[namespace] = root
        return root

    def _blocks(self, tokens: Sequence[int], limit: int) -> list[tuple[int, ...]]:
        size = self.block_size
        return [tuple(tokens[i : i + size]) for i in range(0, limit - size + 1, size)]

    def match(self, namespace: Hashable, tokens: Sequence[int], *, limit: int) -> PrefixMatch:
        """Pin and return the longest cached prefix of ``tokens[:limit]`` in ``namespace``."""
        found = PrefixMatch(block_size=self.block_size)
        root = self._roots.get(namespace)
        if root is None:
            return found
        parent = root
        tick = next(self._clock)
        for block in self._blocks(tokens, min(limit, len(tokens))):
            node = self._nodes.get((parent.uid, block))
            if node is None:
                break
            node.pins += 1
            node.tick = tick  # a parent never has a later tick than its children
            found.nodes.append(node)
            parent = node
        return found

    def insert(
        self,
        namespace: Hashable,
        tokens: Sequence[int],
        kv: torch.Tensor | Callable[[int, int], torch.Tensor],
        *,
        offset: int = 0,
    ) -> int:
        """Cache the whole blocks of ``tokens``; ``kv[:, :, :, j]`` is token ``offset + j``.

        ``kv`` has shape ``[layers, 2, kv_heads, len(tokens) - offset, head_dim]``, or is a
        function of ``(start, end)`` returning that slice (columns relative to ``offset``), so
        a long prompt's KV is gathered a block at a time rather than copied whole. Blocks
        starting before ``offset`` are not in ``kv``: they are only walked if already cached
        (the walk stops at the first one that is not). Blocks already cached are kept and
        marked as used. No more blocks are walked than the bound holds (a prefix longer than
        the whole cache keeps its start). Returns how many blocks were added; evicts least
        recently used blocks if the bound is exceeded afterwards.
        """
        if isinstance(kv, torch.Tensor) and kv.shape[3] != len(tokens) - offset:
            raise ValueError(f"KV for {kv.shape[3]} tokens given for {len(tokens) - offset}")
        kv_of = _slicer(kv) if isinstance(kv, torch.Tensor) else kv
        if self.max_bytes == 0:
            return 0
        parent = self._root(namespace)
        tick = next(self._clock)
        added = 0
        size = self.block_size
        room: int | None = None  # blocks the bound holds, known once one block's size is
        for index, block in enumerate(self._blocks(tokens, len(tokens))):
            if room is not None and index >= room:
                break
            key = (parent.uid, block)
            node = self._nodes.get(key)
            start = index * size - offset
            if node is None:
                if start < 0:
                    break
                block_kv = kv_of(start, start + size).clone()
                node = _Node(next(self._ids), key, parent, block_kv, namespace)
                self._nodes[key] = node
                parent.children += 1
                self.bytes += _nbytes(node)
                added += 1
            if room is None and node.kv is not None:
                room = max(1, self.max_bytes // max(1, _nbytes(node)))
            node.tick = tick
            parent = node
        self.stats.inserted_blocks += added
        if self.bytes > self.max_bytes:
            self._evict(self.bytes - self.max_bytes)
        return added

    def _evict(self, amount: int) -> None:
        """Free at least ``amount`` bytes from unreferenced blocks, oldest first."""
        heap = [(n.tick, id(n), n) for n in self._nodes.values() if not n.referenced]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < amount:
            _, _, node = heapq.heappop(heap)
            if node.referenced or self._nodes.get(node.key) is not node:
                continue
            freed += self._remove(node)
            self.stats.evicted_blocks += 1
            parent = node.parent
            if parent is not None and parent.kv is not None and not parent.referenced:
                heapq.heappush(heap, (parent.tick, id(parent), parent))

    def _remove(self, node: _Node) -> int:
        del self._nodes[node.key]
        if node.parent is not None:
            node.parent.children -= 1
        size = _nbytes(node)
        self.bytes -= size
        return size

    def invalidate(self, predicate: Callable[[Hashable], bool] | None = None) -> int:
        """Drop every block of the namespaces ``predicate`` selects (all when ``None``).

        Pinned blocks are dropped too: their pins only keep the tensors alive for the
        prefill that holds them. Returns the number of blocks dropped.
        """
        doomed = {ns for ns in self._roots if predicate is None or predicate(ns)}
        dropped = [n for n in self._nodes.values() if n.namespace in doomed]
        for node in dropped:
            self._nodes.pop(node.key, None)
            self.bytes -= _nbytes(node)
        for ns in doomed:
            del self._roots[ns]
        self.stats.invalidated_blocks += len(dropped)
        return len(dropped)


def _slicer(kv: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    """Return a function of ``(start, end)`` slicing ``kv``'s token columns."""

    def columns(start: int, end: int) -> torch.Tensor:
        return kv[:, :, :, start:end]

    return columns


def _nbytes(node: _Node) -> int:
    return 0 if node.kv is None else node.kv.numel() * node.kv.element_size()
