"""The served model: weights, tokenizer, LoRA adapters and the policy version.

Only the batching thread calls the mutating methods (:meth:`ServedModel.load_adapter`,
:meth:`ServedModel.unload_adapter`, :meth:`ServedModel.reload_weights`), between two forward
passes, so a forward pass never sees half-updated weights. Adapters are served side by side
with peft's mixed-batch LoRA (``adapter_names=`` per row), so requests for different adapters
share one forward pass. ``version`` counts weight changes: it starts at 0 and every successful
adapter load, unload or full reload increments it.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fulmen.attention import register as register_blockwise
from fulmen.engines.builtin.attention import register as register_gqa_eager
from fulmen.engines.builtin.errors import APIError, bad_request, not_found
from fulmen.engines.builtin.kv_cache import KVShape

__all__ = ["AdapterInfo", "ServedModel"]

_BASE = "__base__"  # peft's name for "no adapter" in a mixed batch


@dataclass(frozen=True)
class AdapterInfo:
    """A loaded LoRA adapter: where it came from, its rank and the version that loaded it."""

    name: str
    path: str
    rank: int
    version: int


class ServedModel:
    """A causal LM and its tokenizer loaded from a local Hugging Face directory.

    Args:
        path: the model directory (see :func:`fulmen.engines.models.resolve_model`).
        served_name: the name clients pass as ``model`` for the base weights.
        max_lora_rank: adapters with a larger rank are refused.
        max_model_len: context limit (prompt + completion); defaults to the config's
            ``max_position_embeddings``.
        dtype: torch dtype name for the weights (``float32`` or ``bfloat16``).
        attn_implementation: ``blockwise`` (default), ``eager`` or ``sdpa``. ``blockwise``
            runs :func:`fulmen.attention.blockwise_attention`: prompts attend by blocks of
            queries with torch's fused kernel, never building a mask or a score matrix over the
            whole prompt (a 32k-token prompt fits), sliding-window layers only over their
            window, and a decode step's single query as one matrix product per key-value head.
            ``eager`` runs :func:`~fulmen.engines.builtin.attention.gqa_eager_attention`, a
            whole ``[queries x keys]`` score matrix per layer (the engine before long prompts:
            a 19.6k-token prompt on Gemma 3 270M needed 6.2 GB at once); ``sdpa`` is
            transformers' own (its CPU kernel is slow for one grouped-query decode step).
    """

    def __init__(
        self,
        path: Path,
        *,
        served_name: str,
        max_lora_rank: int = 64,
        max_model_len: int | None = None,
        dtype: str = "float32",
        attn_implementation: str = "blockwise",
    ) -> None:
        self.path = path
        self.served_name = served_name
        self.max_lora_rank = max_lora_rank
        self.dtype_name = dtype
        self.dtype = getattr(torch, dtype)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(path))
        if attn_implementation == "eager":
            attn_implementation = register_gqa_eager()
        elif attn_implementation == "blockwise":
            attn_implementation = register_blockwise()
        self.base: Any = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=self.dtype, attn_implementation=attn_implementation
        ).eval()
        # The last position's hidden state reaches the LM head as a strided [B, 1, H] view. Once
        # peft wraps the model, torch multiplies such a bfloat16 view by the 262k x H weight
        # expanded per row (a copy of several GB per forward: a 16 x 300-token prefill took 36 s
        # instead of 4 s); a contiguous input folds into one matrix product.
        self.base.get_output_embeddings().register_forward_pre_hook(_contiguous_input)
        # transformers 5.24 renamed forward's ``past_key_values`` to ``cache`` (the old name warns,
        # and goes in 5.40); the name this model's forward takes is looked up once.
        parameters = inspect.signature(self.base.forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self._peft: Any = None
        self.adapters: dict[str, AdapterInfo] = {}
        self.version = 0
        #: the version at which the base weights were last replaced (0: as loaded)
        self.weights_version = 0
        self._lock = threading.Lock()  # guards adapters/version for readers on other threads
        config = self.base.config.get_text_config()
        limit = int(getattr(config, "max_position_embeddings", 4096))
        self.max_model_len = min(limit, max_model_len) if max_model_len else limit
        self.eos_token_ids = self._eos_ids()
        self.pad_token_id = int(
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else min(self.eos_token_ids)
        )

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (self.base.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source is not None:
                ids.update(int(t) for t in source)
        return frozenset(ids)

    @property
    def num_layers(self) -> int:
        """Number of decoder layers (one KV cache entry each)."""
        return int(self.base.config.get_text_config().num_hidden_layers)

    @property
    def kv_shape(self) -> KVShape:
        """The per-token layout of this model's KV cache."""
        return KVShape.of(self.base.config.get_text_config(), self.dtype)

    def model_names(self) -> list[str]:
        """List the served base name followed by every loaded adapter name."""
        with self._lock:
            return [self.served_name, *self.adapters]

    def adapter_for(self, model: str) -> str | None:
        """Return the adapter ``model`` selects (``None`` for base); 404 if unknown."""
        if model == self.served_name:
            return None
        with self._lock:
            if model in self.adapters:
                return model
        raise not_found(f"The model `{model}` does not exist.", param="model")

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any,
        adapters: list[str | None],
    ) -> torch.Tensor:
        """Run one forward pass and return float32 logits of the last position, shape [B, V]."""
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            self._cache_kwarg: cache,
            "use_cache": True,
            "logits_to_keep": 1,
        }
        if self._peft is not None:
            out = self._peft(**kwargs, adapter_names=[a or _BASE for a in adapters])
        else:
            out = self.base(**kwargs)
        return out.logits[:, -1, :].float()

    def load_adapter(self, name: str, path: str) -> int:
        """Load (or replace) LoRA adapter ``name`` from a peft directory; return the new version."""
        from peft import PeftConfig, PeftModel

        if not name or name == self.served_name or name == _BASE:
            raise bad_request(f"invalid lora_name {name!r}", param="lora_name")
        try:
            config = PeftConfig.from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise bad_request(
                f"cannot read a LoRA adapter at {path!r}: {exc}", "lora_path"
            ) from exc
        rank = int(getattr(config, "r", 0))
        if getattr(config, "peft_type", None) != "LORA" or rank <= 0:
            raise bad_request(f"adapter at {path!r} is not a LoRA adapter", param="lora_path")
        if rank > self.max_lora_rank:
            raise bad_request(
                f"LoRA rank {rank} of {path!r} exceeds --max-lora-rank {self.max_lora_rank}",
                param="lora_path",
            )
        if name in self.adapters:
            self._drop(name)
        try:
            # peft probes a transformers attribute deprecated in v5; the warning is noise here
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                if self._peft is None:
                    self._peft = PeftModel.from_pretrained(self.base, path, adapter_name=name)
                    self._peft.eval()
                else:
                    self._peft.load_adapter(path, adapter_name=name, is_trainable=False)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise APIError(
                f"loading LoRA adapter {path!r} failed: {exc}", param="lora_path"
            ) from exc
        with self._lock:
            self.version += 1
            self.adapters[name] = AdapterInfo(name, path, rank, self.version)
            return self.version

    def unload_adapter(self, name: str) -> int:
        """Remove adapter ``name``; returns the new version. 404 if it is not loaded."""
        if name not in self.adapters:
            raise not_found(f"The lora adapter `{name}` is not loaded.", param="lora_name")
        self._drop(name)
        with self._lock:
            self.version += 1
            return self.version

    def served_version(self, adapter: str | None) -> int:
        """Return the policy version of calls served with ``adapter`` (``None``: the base).

        It is the version at which those weights last changed (the adapter's load or the base
        weights' reload, whichever came later), not the engine's counter, which also moves
        when an unrelated adapter is loaded or unloaded: a trainer that retires the previous
        adapter after loading a new one must not see its own policy's calls as stale.
        """
        with self._lock:
            info = self.adapters.get(adapter) if adapter is not None else None
            if info is None:
                return self.weights_version
            return max(info.version, self.weights_version)

    def _drop(self, name: str) -> None:
        with self._lock:
            del self.adapters[name]
        if self.adapters:
            self._peft.delete_adapter(name)
        else:  # last adapter: restore the plain modules so base requests skip peft entirely
            self._peft.unload()
            self._peft = None

    def reload_weights(self, path: str | None) -> int:
        """Copy all base weights from the model directory ``path`` (default: the original one).

        Loaded adapters are kept. Raises a 400 error naming the first missing or mis-shaped
        parameter; nothing is copied in that case.
        """
        source_dir = path or str(self.path)
        try:
            source = AutoModelForCausalLM.from_pretrained(source_dir, dtype=self.dtype)
        except (OSError, ValueError) as exc:
            raise bad_request(f"cannot load weights from {source_dir!r}: {exc}", "path") from exc
        new = dict(source.named_parameters())
        pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        for name, param in self.base.named_parameters():
            if "lora_" in name:
                continue
            key = name.replace(".base_layer", "")
            tensor = new.get(key)
            if tensor is None or tensor.shape != param.shape:
                raise bad_request(
                    f"{source_dir!r} has no parameter {key!r} of shape {tuple(param.shape)}",
                    param="path",
                )
            pairs.append((param, tensor))
        with torch.no_grad():
            for param, tensor in pairs:
                param.copy_(tensor)
        with self._lock:
            self.version += 1
            self.weights_version = self.version
            return self.version


def _contiguous_input(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Forward pre-hook: hand ``module`` a contiguous first argument."""
    del module
    return (args[0].contiguous(), *args[1:])
