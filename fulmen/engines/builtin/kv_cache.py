"""A KV cache that appends keys and values in place, in buffers allocated once for a prefill.

transformers' ``DynamicCache`` concatenates each layer's whole cache with the new token at
every step, so a step copies the entire KV cache once (in bfloat16 on this CPU that copy cost
more than the step's matrix products). :class:`GrowableCache` keeps each layer in a buffer with
spare room and exposes views of the filled part as ``layer.keys`` / ``layer.values``, so a
step writes one column; the buffer is reallocated only when it is full.

:meth:`GrowableCache.allocate` makes every layer's buffers at once, zeroed, with room for a
whole prefill: cached prefix KV is written straight into them and the prefill's chunks append
in place, so a 32k-token prompt's KV exists once, not once per copy on its way in. Zeros, not
uninitialized memory, fill the padding columns: masked keys get no weight, but a NaN in their
values would still poison the weighted sum.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["GrowableCache", "GrowableLayer", "KVShape"]

#: Columns of spare room a reallocated buffer gets (amortizes reallocation over many steps).
_HEADROOM = 128


@dataclass(frozen=True)
class KVShape:
    """The per-token layout of a model's KV cache.

    Attributes:
        layers: decoder layers (one key and one value tensor each).
        heads: key-value heads per layer.
        head_dim: size of one head's key (and value).
        dtype: the cache's element type (the weights' dtype).
    """

    layers: int
    heads: int
    head_dim: int
    dtype: torch.dtype

    @classmethod
    def of(cls, config: Any, dtype: torch.dtype) -> KVShape:
        """Return the layout of a transformers text config's KV cache in ``dtype``."""
        heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        head_dim = (
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        return cls(int(config.num_hidden_layers), heads, int(head_dim), dtype)

    @property
    def bytes_per_token(self) -> int:
        """Bytes of keys and values one token holds over every layer."""
        size = torch.empty((), dtype=self.dtype).element_size()
        return self.layers * 2 * self.heads * self.head_dim * size


class GrowableLayer(DynamicLayer):
    """One layer's keys and values in a buffer that grows by ``_HEADROOM`` columns at a time."""

    def __init__(self) -> None:
        super().__init__()
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    @classmethod
    def over(cls, keys: torch.Tensor, values: torch.Tensor, filled: int) -> GrowableLayer:
        """Make a layer on buffers [B, H, capacity, D] whose first ``filled`` columns are used."""
        layer = cls()
        layer.lazy_initialization(keys, values)
        layer._key_buffer, layer._value_buffer = keys, values
        layer.keys, layer.values = keys[:, :, :filled], values[:, :, :filled]
        return layer

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key_states``/``value_states`` [B, H, n, D]; return the whole layer (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = self.keys, self.values
        assert keys is not None and values is not None
        filled = keys.shape[-2] if keys.numel() else 0
        end = filled + key_states.shape[-2]
        buffer = self._key_buffer
        owned = (
            buffer is not None
            and (keys.numel() > 0 or filled == 0)
            and keys.data_ptr() == buffer.data_ptr()
            and keys.shape[:2] == buffer.shape[:2]
        )
        if not owned or buffer is None or end > buffer.shape[-2]:
            shape = (*key_states.shape[:2], end + _HEADROOM, key_states.shape[-1])
            self._key_buffer = key_states.new_empty(shape)
            self._value_buffer = value_states.new_empty(
                (*value_states.shape[:2], end + _HEADROOM, value_states.shape[-1])
            )
            if filled:
                self._key_buffer[:, :, :filled] = keys
                self._value_buffer[:, :, :filled] = values
        key_buffer, value_buffer = self._key_buffer, self._value_buffer
        assert key_buffer is not None and value_buffer is not None
        key_buffer[:, :, filled:end] = key_states
        value_buffer[:, :, filled:end] = value_states
        self.keys, self.values = key_buffer[:, :, :end], value_buffer[:, :, :end]
        return self.keys, self.values


class GrowableCache(DynamicCache):
    """A ``DynamicCache`` of :class:`GrowableLayer` layers, optionally filled with ``pairs``.

    Args:
        pairs: per layer, the keys and values [B, H, T, D] to start from (copied).
    """

    def __init__(self, pairs: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
        layers: list[GrowableLayer] = []
        for keys, values in pairs or ():
            layer = GrowableLayer()
            layer.update(keys, values)
            layers.append(layer)
        self._init_layers(layers)

    def _init_layers(self, layers: list[GrowableLayer]) -> None:
        if layers:
            Cache.__init__(self, layers=list(layers))
        else:
            Cache.__init__(self, layer_class_to_replicate=GrowableLayer)

    def pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Return each layer's keys and values (views of the filled columns)."""
        out: list[tuple[torch.Tensor, torch.Tensor]] = []
        for layer in self.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if keys is None or values is None:
                raise ValueError("a layer of the cache holds nothing yet")
            out.append((keys, values))
        return out

    @classmethod
    def allocate(
        cls,
        shape: KVShape,
        *,
        batch: int,
        filled: int,
        capacity: int,
        device: torch.device | str = "cpu",
    ) -> GrowableCache:
        """Make a cache of zeroed buffers: ``batch`` rows, ``capacity`` columns, ``filled`` used.

        The caller writes the first ``filled`` columns (``layer.keys`` / ``layer.values`` are
        views of them); later updates append in place until ``capacity`` is reached.
        """
        if not 0 <= filled <= capacity:
            raise ValueError(f"filled {filled} must lie in [0, capacity {capacity}]")
        store = torch.zeros(
            (shape.layers, 2, batch, shape.heads, capacity, shape.head_dim),
            dtype=shape.dtype,
            device=device,
        )
        cache = cls.__new__(cls)
        cache._init_layers(
            [GrowableLayer.over(store[i, 0], store[i, 1], filled) for i in range(shape.layers)]
        )
        return cache
