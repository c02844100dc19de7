"""A KV cache that appends a decode step's keys and values in place.

transformers' ``DynamicCache`` concatenates each layer's whole cache with the new token at
every step, so a step copies the entire KV cache once (in bfloat16 on this CPU that copy cost
more than the step's matrix products). :class:`GrowableCache` keeps each layer in a buffer with
spare room and exposes views of the filled part as ``layer.keys`` / ``layer.values``, so a
step writes one column; the buffer is reallocated only when it is full.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["GrowableCache", "GrowableLayer"]

#: Columns of spare room a reallocated buffer gets (amortizes reallocation over many steps).
_HEADROOM = 128


class GrowableLayer(DynamicLayer):
    """One layer's keys and values in a buffer that grows by ``_HEADROOM`` columns at a time."""

    def __init__(self) -> None:
        super().__init__()
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

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
            and keys.numel() > 0
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
        pairs: per layer, the keys and values [B, H, T, D] to start from.
    """

    def __init__(self, pairs: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
        layers: list[GrowableLayer] = []
        for keys, values in pairs or ():
            layer = GrowableLayer()
            layer.update(keys, values)
            layers.append(layer)
        if layers:
            Cache.__init__(self, layers=list(layers))
        else:
            Cache.__init__(self, layer_class_to_replicate=GrowableLayer)
