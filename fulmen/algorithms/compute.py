"""Where a policy trains and in which precision its forward runs, shared by GRPO and SFT.

Kept free of torch so that parsing a training config stays light; ``fulmen.algorithms.policy``
turns these settings into a device and an autocast context.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

__all__ = ["ComputeSettings"]


class ComputeSettings(BaseModel):
    """The updater's device and autocast (a base of ``GRPOConfig`` and ``SFTConfig``).

    Attributes:
        device: ``cpu`` (default), ``cuda`` or ``cuda:N``; a GPU torch cannot see is an error
            when the engine is built, not a silent fall back to the CPU.
        autocast: ``bfloat16`` runs the policy's forward (and backward) matmuls in bfloat16
            under ``torch.autocast`` while the parameters, LoRA's master weights included,
            stay in ``dtype``; logits are still taken in float32. On CPUs with AMX or
            AVX512-BF16 a GRPO step of Gemma 3 270M took 0.65-0.68x the float32 time
            (``benchmarks/trainer_step.py``); ``None`` (default) keeps float32 math, whose
            logprobs match the float32 engines' to ~1e-6 (``docs/engine.md``).
    """

    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    autocast: Literal["bfloat16"] | None = None

    @model_validator(mode="after")
    def _autocast_has_effect(self) -> ComputeSettings:
        if self.autocast is not None and getattr(self, "dtype", "float32") == self.autocast:
            raise ValueError(
                f"autocast {self.autocast!r} has no effect with dtype {self.autocast!r}: the "
                "weights already are; use dtype float32 with autocast, or drop autocast"
            )
        return self
