"""``EngineConfig``: which inference engine serves the policy, as a training config's ``engine:``.

The engine's own settings, kept with the engines; ``TrainConfig`` composes them, and the
launchers (the trainer's stack, the cluster's replicas, deployments) read them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["EngineConfig"]


class EngineConfig(BaseModel):
    """Which inference engine serves the policy.

    Attributes:
        kind: ``builtin`` (fulmen's transformers server, started as a child process),
            ``vllm`` (vLLM's OpenAI server, started as a child process) or ``endpoint`` (an
            OpenAI-compatible server that is already running, a hosted model say; it cannot
            take new weights, so only ``dev`` and prompt-only algorithms such as ``demos`` use it).
        url: base URL of the ``endpoint`` engine (``.../v1``).
        max_batch: sequences the built-in engine decodes together.
        dtype: precision of the engine's weights and KV cache (``fulmen serve --dtype``; vLLM's
            ``--dtype``); ``bfloat16`` samples about twice as fast on CPU, and its logprobs
            differ from a float32 trainer's by a few hundredths on average (docs/engine.md,
            docs/engine-mismatch.md).
        prefix_cache: the built-in engine reuses the KV of prompt prefixes it has seen.
        prefix_cache_mb: most MiB of prompt-prefix KV the built-in engine keeps (``fulmen
            serve --prefix-cache-mb``); ``None``: 512, or one whole context's KV if larger (a
            32k-token prefix on Gemma 3 270M in float32 is 1.2 GB), so a long shared prefix
            (a coding agent's tools and system prompt) stays cached whole.
        kv_cache_mb: most MiB of KV the built-in engine's running batch may hold (``fulmen
            serve --kv-cache-mb``): rows x the widest row, each sequence counted at its prompt
            plus ``max_tokens``; a request that would pass it waits for room. ``None``:
            ``max_batch`` whole contexts (docs/engine.md, *Long prompts*).
        prefill_chunk_tokens: most prompt tokens one prefill pass of the built-in engine
            computes (``fulmen serve --prefill-chunk-tokens``); a longer prompt takes several
            passes, so its activations stay the size of one chunk.
        threads: torch threads of the built-in engine (``fulmen serve --threads``). 1 leaves
            the other cores to the update and the agents; a synchronous run, where the update
            waits while rollouts run, samples faster with more (docs/engine.md).
        max_lora_rank: largest adapter rank the engine accepts (vLLM needs it up front).
        startup_timeout_s: how long to wait for the engine (each replica on Ray) to become
            healthy: loading the model, and on a first start building it (Gemma from its GGUF
            package takes minutes of CPU).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["builtin", "vllm", "endpoint"] = "builtin"
    url: str | None = None
    max_batch: int = Field(default=8, ge=1)
    dtype: Literal["float32", "bfloat16"] = "float32"
    prefix_cache: bool = True
    prefix_cache_mb: int | None = Field(default=None, ge=1)
    kv_cache_mb: int | None = Field(default=None, ge=1)
    prefill_chunk_tokens: int = Field(default=2048, ge=1)
    threads: int = Field(default=1, ge=1, le=1024)
    max_lora_rank: int = Field(default=64, ge=1)
    startup_timeout_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _url_only_for_endpoint(self) -> EngineConfig:
        if self.kind == "endpoint" and not self.url:
            raise ValueError("engine.kind 'endpoint' needs engine.url")
        if self.kind != "endpoint" and self.url is not None:
            raise ValueError(f"engine.url has no effect with engine.kind {self.kind!r}")
        if self.kind != "builtin":
            builtin_only = (
                "max_batch",
                "prefix_cache",
                "prefix_cache_mb",
                "kv_cache_mb",
                "prefill_chunk_tokens",
                "threads",
            )
            for name in builtin_only:
                if name in self.model_fields_set:
                    raise ValueError(f"engine.{name} has no effect with engine.kind {self.kind!r}")
        if not self.prefix_cache and self.prefix_cache_mb is not None:
            raise ValueError("engine.prefix_cache_mb has no effect with engine.prefix_cache false")
        return self

    def builtin_serve_flags(self) -> list[str]:
        """Return the ``fulmen serve`` flags that set a built-in engine's dtype, caches and chunks.

        ``max_batch`` is not among them: each launcher takes it as a number.
        """
        flags = [
            "--dtype",
            self.dtype,
            "--prefix-cache" if self.prefix_cache else "--no-prefix-cache",
            "--prefill-chunk-tokens",
            str(self.prefill_chunk_tokens),
        ]
        if self.prefix_cache_mb is not None:
            flags += ["--prefix-cache-mb", str(self.prefix_cache_mb)]
        if self.kv_cache_mb is not None:
            flags += ["--kv-cache-mb", str(self.kv_cache_mb)]
        return flags
