"""The optimizer every weight-training algorithm (GRPO, SFT) uses: AdamW and its clipped step.

``build_optimizer`` makes AdamW over the parameters the policy trains (the LoRA adapter, or
every weight); ``apply_gradients`` clips the accumulated gradients to a global norm, takes the
step and clears them. Torch is imported here, never by ``import fulmen``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from fulmen.errors import ConfigError

__all__ = ["OptimizerSettings", "apply_gradients", "build_optimizer"]


class OptimizerSettings(Protocol):
    """What ``build_optimizer`` reads from an algorithm's config (``GRPOConfig``, ``SFTConfig``)."""

    @property
    def learning_rate(self) -> float:
        """AdamW's learning rate."""
        ...

    @property
    def weight_decay(self) -> float:
        """AdamW's decoupled weight decay."""
        ...

    @property
    def betas(self) -> tuple[float, float]:
        """AdamW's moment coefficients."""
        ...


def build_optimizer(model: nn.Module, settings: OptimizerSettings) -> torch.optim.AdamW:
    """Return AdamW over the parameters of ``model`` that require grad.

    Raises:
        ConfigError: nothing in ``model`` requires grad.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ConfigError("the policy has no trainable parameters")
    return torch.optim.AdamW(
        trainable,
        lr=settings.learning_rate,
        betas=settings.betas,
        weight_decay=settings.weight_decay,
    )


def apply_gradients(optimizer: torch.optim.Optimizer, *, max_grad_norm: float | None) -> float:
    """Clip the gradients to ``max_grad_norm`` (``None``: no clip), step, and clear them.

    Returns the global gradient norm before clipping. A norm that is not finite (a NaN or an
    infinite loss term, an overflow) takes no step: the gradients are cleared and AdamW's state
    is left as it was, so one bad batch cannot turn the weights into NaN. The caller sees the
    non-finite norm and reports the skipped step.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    sharded = [p for p in params if isinstance(p, DTensor)]
    if sharded and len(sharded) < len(params):
        norm = _clip_mixed(
            sharded, [p for p in params if not isinstance(p, DTensor)], max_grad_norm
        )
    else:
        limit = max_grad_norm if max_grad_norm else math.inf
        total = torch.nn.utils.clip_grad_norm_(params, limit)
        if isinstance(total, DTensor):  # a sharded policy's (FSDP2): the norm over every shard
            total = total.full_tensor()
        norm = float(total)
    if math.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def _clip_mixed(
    sharded: Sequence[torch.Tensor], replicated: Sequence[torch.Tensor], max_grad_norm: float | None
) -> float:
    """Clip a sharded policy's gradients and a replicated module's together; return the norm.

    A sharded policy (FSDP2) beside a module every rank holds whole (PPO's value head): torch's
    clipping cannot stack the two kinds of norm, so each is taken on its own and combined.
    """
    parts: list[float] = []
    for group in (sharded, replicated):
        grads = [p.grad for p in group if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads)
            parts.append(float(norm.full_tensor() if isinstance(norm, DTensor) else norm))
    total = math.sqrt(sum(n * n for n in parts))
    if max_grad_norm and math.isfinite(total):
        coefficient = max_grad_norm / (total + 1e-6)  # torch's clip_grad_norm_ rule
        if coefficient < 1.0:
            for p in (*sharded, *replicated):
                if p.grad is not None:
                    p.grad.mul_(coefficient)
    return total
