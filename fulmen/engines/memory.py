"""What the inference engine needs in memory, planned before it starts (``fulmen plan``).

The built-in engine holds its weights (in ``engine.dtype``), a prompt-prefix cache up to its
budget, the running batch's KV cache up to its budget, and one prefill chunk's activations;
its KV layout is the model's (layers x key-value heads x head size, keys and values). The
weights are counted on a model made on the meta device, and the prefill's activations by
running the model's forward over one chunk there (``fulmen.meta_memory``), so nothing is
allocated. vLLM on CPU holds its weights and the KV space fulmen starts it with
(``VLLM_CPU_KVCACHE_SPACE``, 1 GiB). An ``endpoint`` engine runs elsewhere and needs nothing
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fulmen.engines.config import EngineConfig

__all__ = ["VLLM_CPU_KV_BYTES", "EngineMemory", "plan_engine"]

#: The KV space fulmen gives vLLM on CPU (``VLLM_CPU_KVCACHE_SPACE`` in ``fulmen.engines.vllm``).
VLLM_CPU_KV_BYTES = 1 << 30


@dataclass(frozen=True)
class EngineMemory:
    """What one engine process holds.

    Attributes:
        kind: ``builtin`` or ``vllm``.
        dtype: its weights' and KV cache's dtype.
        weights_bytes: the model's weights in the engine's dtype.
        prefix_cache_bytes: the most the prompt-prefix cache keeps (0: off, or vLLM).
        prefill_bytes: one prefill chunk's activations (built-in engine).
        kv_bytes: the most KV the running batch may hold (its budget: ``engine.kv_cache_mb``,
            or ``max_batch`` whole contexts); vLLM allocates its KV space at start.
        kv_bytes_per_token: one token's keys and values over every layer.
        context: the longest sequence the engine serves.
        kv_allocated_at_start: the KV space is taken at start (vLLM) rather than as requests
            need it (the built-in engine).
    """

    kind: str
    dtype: str
    weights_bytes: int
    prefix_cache_bytes: int
    prefill_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int
    context: int
    kv_allocated_at_start: bool

    @property
    def fixed_bytes(self) -> int:
        """What it holds whatever its requests: weights, a full prefix cache, one prefill."""
        start = self.kv_bytes if self.kv_allocated_at_start else 0
        return self.weights_bytes + self.prefix_cache_bytes + self.prefill_bytes + start

    @property
    def peak_bytes(self) -> int:
        """The most it may hold: the fixed part and a full KV budget."""
        return self.fixed_bytes + (0 if self.kv_allocated_at_start else self.kv_bytes)


def plan_engine(engine: EngineConfig, model_dir: str | Path) -> EngineMemory | None:
    """Plan the memory of the engine ``engine`` starts for ``model_dir``; ``None``: endpoint."""
    if engine.kind == "endpoint":
        return None
    import torch

    from fulmen.engines.builtin.kv_cache import KVShape
    from fulmen.meta_memory import meta_causal_lm

    dtype = engine.dtype
    model = meta_causal_lm(model_dir, dtype=getattr(torch, dtype))
    config: Any = model.config
    text: Any = config.get_text_config()
    params = {id(p): p for p in model.parameters()}.values()
    weights = sum(p.numel() * p.element_size() for p in params)
    per_token = KVShape.of(text, getattr(torch, dtype)).bytes_per_token
    if engine.kind == "vllm":
        context = 2048  # the --max-model-len VLLMLauncher passes when none is given
        return EngineMemory(
            kind="vllm",
            dtype=dtype,
            weights_bytes=weights,
            prefix_cache_bytes=0,
            prefill_bytes=0,
            kv_bytes=VLLM_CPU_KV_BYTES,
            kv_bytes_per_token=per_token,
            context=context,
            kv_allocated_at_start=True,
        )
    context = int(getattr(text, "max_position_embeddings", 4096))
    context_bytes = context * per_token
    prefix = 0
    if engine.prefix_cache:
        mb = engine.prefix_cache_mb
        prefix = (mb << 20) if mb else max(512 << 20, context_bytes)
    kv = (engine.kv_cache_mb << 20) if engine.kv_cache_mb else engine.max_batch * context_bytes
    return EngineMemory(
        kind="builtin",
        dtype=dtype,
        weights_bytes=weights,
        prefix_cache_bytes=prefix,
        prefill_bytes=_prefill_bytes(model, min(engine.prefill_chunk_tokens, context)),
        kv_bytes=kv,
        kv_bytes_per_token=per_token,
        context=context,
        kv_allocated_at_start=False,
    )


def _prefill_bytes(model: object, tokens: int) -> int:
    """Run the decoder over one prefill chunk on meta, without a cache; return its peak."""
    import torch

    from fulmen.attention import register
    from fulmen.meta_memory import LiveBytes

    causal_lm = model
    causal_lm.set_attn_implementation(register())  # type: ignore[attr-defined]
    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
    mask = torch.ones(1, tokens, dtype=torch.long, device="meta")
    with torch.no_grad(), LiveBytes() as live:
        hidden = causal_lm.get_decoder()(  # type: ignore[attr-defined]
            input_ids=ids, attention_mask=mask, use_cache=False
        ).last_hidden_state
        causal_lm.get_output_embeddings()(hidden[:, -1:])  # type: ignore[attr-defined]
    return live.peak
