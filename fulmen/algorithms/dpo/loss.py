"""The DPO loss on sequence logprobs: a pure function of four ``[P]`` tensors.

For pair ``p`` with chosen completion ``y_w`` and rejected ``y_l`` of prompt ``x``, each
``log π(y|x)`` is the sum of the completion's trained-token logprobs, and

    Δ_p = (log π(y_w|x) - log π_ref(y_w|x)) - (log π(y_l|x) - log π_ref(y_l|x))
    loss_p = -(1 - ε) log sigmoid(β Δ_p) - ε log sigmoid(-β Δ_p)

(Rafailov et al. 2023; ε > 0 is the label-smoothed "conservative" variant). ``β Δ_p`` is the
pair's implicit reward margin: the chosen completion's implicit reward
``β (log π(y_w|x) - log π_ref(y_w|x))`` minus the rejected one's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.functional import logsigmoid

from fulmen.errors import ConfigError

__all__ = ["DPOTerms", "dpo_loss"]


@dataclass(frozen=True)
class DPOTerms:
    """Per-pair terms of the DPO loss (``[P]`` each; only ``loss`` carries a graph).

    Attributes:
        loss: the pair's loss.
        chosen_rewards / rejected_rewards: implicit rewards ``β (log π - log π_ref)``.
        margins: ``chosen_rewards - rejected_rewards`` (``β Δ``).
    """

    loss: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor
    margins: Tensor


def dpo_loss(
    *,
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float,
    label_smoothing: float = 0.0,
) -> DPOTerms:
    """Return the DPO loss of each pair from its sequence logprobs (module docstring).

    Raises:
        ConfigError: the four tensors are not 1-D of one shape, ``beta`` is not > 0, or
            ``label_smoothing`` is outside ``[0, 0.5)``.
    """
    shape = chosen_logps.shape
    others = (rejected_logps, ref_chosen_logps, ref_rejected_logps)
    if chosen_logps.ndim != 1 or any(t.shape != shape for t in others):
        raise ConfigError(
            "dpo_loss takes four [P] tensors; got "
            f"{[tuple(t.shape) for t in (chosen_logps, *others)]}"
        )
    if not beta > 0:
        raise ConfigError(f"beta must be > 0; got {beta}")
    if not 0 <= label_smoothing < 0.5:
        raise ConfigError(f"label_smoothing must lie in [0, 0.5); got {label_smoothing}")
    chosen_ratio = chosen_logps - ref_chosen_logps
    rejected_ratio = rejected_logps - ref_rejected_logps
    logits = beta * (chosen_ratio - rejected_ratio)
    loss = -(1 - label_smoothing) * logsigmoid(logits) - label_smoothing * logsigmoid(-logits)
    with torch.no_grad():
        chosen_rewards = beta * chosen_ratio.detach()
        rejected_rewards = beta * rejected_ratio.detach()
    return DPOTerms(
        loss=loss,
        chosen_rewards=chosen_rewards,
        rejected_rewards=rejected_rewards,
        margins=chosen_rewards - rejected_rewards,
    )
