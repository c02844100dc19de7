"""The LoRA adapter shape every weight-training algorithm (GRPO, SFT) configures the same way."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LoraSettings"]


class LoraSettings(BaseModel):
    """LoRA adapter shape (used when ``finetune`` is ``"lora"``).

    Attributes:
        r: adapter rank.
        alpha: scaling numerator (the update is scaled by ``alpha / r``).
        dropout: dropout on the adapter input; 0 keeps training logprobs deterministic.
        target_modules: module names to adapt, or ``"all-linear"`` (every linear but the head).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    r: int = Field(default=16, ge=1)
    alpha: float = Field(default=32.0, gt=0)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    target_modules: str | tuple[str, ...] = "all-linear"
