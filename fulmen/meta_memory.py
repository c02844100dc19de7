"""Memory counted without allocating it: models on the meta device, and the bytes ops hold.

The memory plan (``fulmen plan``) runs the update's and the engine's own code on meta tensors,
which carry shapes and dtypes but no storage, so planning a 32B model takes seconds and no
memory. :class:`LiveBytes` counts what that code would hold: the bytes of every tensor an op
returns, from the op until the tensor is freed, and the peak. Shared by the update's plan
(``fulmen.algorithms.update_memory``) and the engine's (``fulmen.engines.memory``); imported
only by code that already needs torch.
"""

from __future__ import annotations

import warnings
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

__all__ = ["LiveBytes", "meta_causal_lm"]


def meta_causal_lm(model_dir: str | Path, *, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Build the causal LM of ``model_dir``'s ``config.json`` on the meta device (no weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")  # transformers' notes on configs built without weights
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


class LiveBytes(TorchDispatchMode):
    """A dispatch mode that tracks the bytes of the tensors ops return while they are alive.

    Each output's storage is counted once, when an op first returns it, and uncounted when the
    storage is freed (a weak-reference finalizer), so views and in-place ops add nothing and
    :attr:`peak` is the most held at once. Tensors made before the mode (the parameters) are
    not counted. It works on real tensors too, which is how the plan is checked against a run.
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        """Run the op and count the storages of its outputs it made."""
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self._track, out)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = int(storage._cdata)  # the storage's identity, the same for every view of it
        if key in self._live:
            return
        size = int(storage.nbytes())
        self._live[key] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)
