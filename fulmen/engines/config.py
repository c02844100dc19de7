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
        dtype: precision of the built-in engine's weights and KV cache (``fulmen serve
            --dtype``); ``bfloat16`` samples about twice as fast on CPU, and its logprobs differ
            from a float32 trainer's by a few hundredths on average (docs/engine.md).
        prefix_cache: the built-in engine reuses the KV of prompt prefixes it has seen.
        threads: torch threads of the built-in engine (``fulmen serve --threads``). 1 leaves
            the other cores to the update and the agents; a synchronous run, where the update
            waits while rollouts run, samples faster with more (docs/engine.md).
        max_lora_rank: largest adapter rank the engine accepts (vLLM needs it up front).
        startup_timeout_s: how long to wait for the engine to become healthy.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["builtin", "vllm", "endpoint"] = "builtin"
    url: str | None = None
    max_batch: int = Field(default=8, ge=1)
    dtype: Literal["float32", "bfloat16"] = "float32"
    prefix_cache: bool = True
    threads: int = Field(default=1, ge=1, le=1024)
    max_lora_rank: int = Field(default=64, ge=1)
    startup_timeout_s: float = Field(default=300.0, gt=0)

    @model_validator(mode="after")
    def _url_only_for_endpoint(self) -> EngineConfig:
        if self.kind == "endpoint" and not self.url:
            raise ValueError("engine.kind 'endpoint' needs engine.url")
        if self.kind != "endpoint" and self.url is not None:
            raise ValueError(f"engine.url has no effect with engine.kind {self.kind!r}")
        if self.kind != "builtin":
            for name in ("max_batch", "dtype", "prefix_cache", "threads"):
                if name in self.model_fields_set:
                    raise ValueError(f"engine.{name} has no effect with engine.kind {self.kind!r}")
        return self

    def builtin_serve_flags(self) -> list[str]:
        """Return the ``fulmen serve`` flags that set a built-in engine's dtype and prefix cache.

        ``max_batch`` is not among them: each launcher takes it as a number.
        """
        return [
            "--dtype",
            self.dtype,
            "--prefix-cache" if self.prefix_cache else "--no-prefix-cache",
        ]
