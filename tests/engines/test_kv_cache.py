"""GrowableCache appends in place and holds exactly what DynamicCache would."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from fulmen.engines.builtin.kv_cache import GrowableCache


def test_appends_match_dynamic_cache_across_reallocations() -> None:
    torch.manual_seed(0)
    start = (torch.randn(2, 1, 5, 4), torch.randn(2, 1, 5, 4))
    grown, plain = GrowableCache([start]), DynamicCache(ddp_cache_data=[start])
    pointers = set()
    for _ in range(300):  # more than one buffer's headroom: at least one reallocation
        k, v = torch.randn(2, 1, 1, 4), torch.randn(2, 1, 1, 4)
        grown.update(k, v, 0)
        plain.update(k, v, 0)
        pointers.add(grown.layers[0].keys.data_ptr())
    assert torch.equal(grown.layers[0].keys, plain.layers[0].keys)
    assert torch.equal(grown.layers[0].values, plain.layers[0].values)
    assert grown.get_seq_length() == plain.get_seq_length() == 305
    assert 1 < len(pointers) < 10  # written in place between reallocations


def test_a_layer_replaced_from_outside_is_copied_not_overwritten() -> None:
    keys = torch.zeros(1, 1, 3, 4)
    cache = GrowableCache([(keys, keys.clone())])
    view = cache.layers[0].keys
    cache.layers[0].keys = view[:, :, 1:]  # as the batching loop trims padding columns
    cache.layers[0].values = cache.layers[0].values[:, :, 1:]
    cache.update(torch.ones(1, 1, 1, 4), torch.ones(1, 1, 1, 4), 0)
    assert cache.layers[0].keys.shape[2] == 3
    assert cache.layers[0].keys[0, 0, -1].tolist() == [1.0] * 4
