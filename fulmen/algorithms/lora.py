"""LoRA: the adapter shape every weight-training algorithm sets, and adapter-only updaters' rest.

``LoraSettings`` is the shape (GRPO, SFT, PPO, DPO); ``LoraUpdateSettings`` what an updater that
trains only an adapter (PPO, DPO) is set with besides.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from fulmen.algorithms.compute import ComputeSettings

__all__ = ["LoraSettings", "LoraUpdateSettings"]


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


class LoraUpdateSettings(ComputeSettings):
    """What every updater that trains a LoRA adapter alone is set with (PPO's and DPO's).

    Each subclass documents these fields in its own docstring (the config reference reads
    it), with what differs in its meaning there (what ``max_seq_len`` drops, say).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    lora: LoraSettings = Field(default_factory=LoraSettings)
    dtype: Literal["float32", "bfloat16"] = "float32"
    learning_rate: float = Field(default=1e-5, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    micro_batch_tokens: int = Field(default=4096, ge=2)
    max_seq_len: int | None = Field(default=None, ge=2)
    logit_chunk_tokens: int = Field(default=256, ge=1)
    gradient_checkpointing: bool = False
    seed: int | None = None

    @property
    def finetune(self) -> Literal["lora", "full"]:
        """Always ``lora`` (``fulmen.algorithms.policy.PolicySettings``)."""
        return "lora"

    def for_run(self, seed: int) -> Self:
        """Return these settings with the run's ``seed``, unless they set their own."""
        return self if self.seed is not None else self.model_copy(update={"seed": seed})
