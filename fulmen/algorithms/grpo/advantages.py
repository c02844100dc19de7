"""Group-relative advantages (GRPO), computed per rollout and broadcast to its transitions.

Rollouts of the same task form a group; a rollout's advantage is its reward minus the group's
mean, optionally divided by the group's standard deviation (Bessel-corrected). A group with a
single rollout has no baseline and gets advantage 0. Advantages are computed once per rollout
and then broadcast, so a rollout with more calls (more transitions) does not count more in its
group's statistics. Pure functions with keyword-only arguments and shape checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from fulmen.errors import ConfigError

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "group_advantages",
    "rollout_advantages",
    "transition_advantages",
]


def _check_index(name: str, index: Tensor, size: int | None = None) -> None:
    if index.ndim != 1 or index.dtype not in (torch.int64, torch.int32):
        raise ConfigError(f"{name} must be a 1-D integer tensor; got {index.dtype} {index.shape}")
    if index.numel() and int(index.min()) < 0:
        raise ConfigError(f"{name} holds negative indices")
    if size is not None and index.numel() and int(index.max()) >= size:
        raise ConfigError(f"{name} points past {size} entries (max {int(index.max())})")


def group_advantages(
    *, scores: Tensor, groups: Tensor, normalize_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """Advantage of each member: ``(score - group mean) / (group std + eps)``.

    Args:
        scores: ``[R]`` float scores (one per rollout).
        groups: ``[R]`` group index of each rollout (0..G-1).
        normalize_std: divide by the group's sample standard deviation.
        eps: added to the std so zero-variance groups give 0, not NaN.
    """
    if scores.ndim != 1 or groups.shape != scores.shape:
        raise ConfigError(f"scores {tuple(scores.shape)} and groups {tuple(groups.shape)} differ")
    _check_index("groups", groups)
    if scores.numel() == 0:
        return scores.clone()
    num_groups = int(groups.max()) + 1
    scores = scores.double()
    count = torch.bincount(groups, minlength=num_groups).double()
    mean = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, groups, scores) / count
    deviation = scores - mean[groups]
    if not normalize_std:
        return deviation.float()
    squares = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, groups, deviation**2)
    std = (squares / (count - 1).clamp_min(1)).sqrt()
    return (deviation / (std[groups] + eps)).float()


def rollout_advantages(
    *,
    rollout_rewards: Tensor,
    rollout_group: Tensor,
    transition_rollout: Tensor,
    transition_rewards: Tensor,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Group-relative advantage of each rollout's final reward, broadcast to its transitions.

    Args:
        rollout_rewards: ``[R]`` final reward of each rollout.
        rollout_group: ``[R]`` group (task) index of each rollout.
        transition_rollout: ``[T]`` rollout index of each transition.
        transition_rewards: ``[T]`` credited rewards (unused here; same signature as
            ``transition_advantages``).
        normalize_std: divide by the group's sample standard deviation.
        eps: added to the std so zero-variance groups give 0.
    """
    del transition_rewards
    _check_index("transition_rollout", transition_rollout, rollout_rewards.shape[0])
    per_rollout = group_advantages(
        scores=rollout_rewards, groups=rollout_group, normalize_std=normalize_std, eps=eps
    )
    return per_rollout[transition_rollout]


def transition_advantages(
    *,
    rollout_rewards: Tensor,
    rollout_group: Tensor,
    transition_rollout: Tensor,
    transition_rewards: Tensor,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """Group-relative advantage of each transition's credited reward.

    The group's mean and std weigh every *rollout* equally (a transition of a rollout with
    ``n`` transitions weighs ``1 / n``). A group with one rollout gets 0. When every transition
    of a rollout carries the rollout's reward this equals ``rollout_advantages``.
    """
    del rollout_rewards
    num_rollouts = rollout_group.shape[0]
    _check_index("transition_rollout", transition_rollout, num_rollouts)
    _check_index("rollout_group", rollout_group)
    if transition_rewards.shape != transition_rollout.shape:
        raise ConfigError(
            f"transition_rewards {tuple(transition_rewards.shape)} and transition_rollout "
            f"{tuple(transition_rollout.shape)} differ"
        )
    if transition_rewards.numel() == 0:
        return transition_rewards.float().clone()
    rewards = transition_rewards.double()
    num_groups = int(rollout_group.max()) + 1
    per_rollout = torch.bincount(transition_rollout, minlength=num_rollouts).double()
    weight = 1.0 / per_rollout[transition_rollout]
    group_of = rollout_group[transition_rollout]
    members = torch.bincount(rollout_group, minlength=num_groups).double()
    zeros = torch.zeros(num_groups, dtype=torch.float64)
    mean = zeros.clone().index_add_(0, group_of, weight * rewards) / members
    deviation = rewards - mean[group_of]
    deviation = torch.where(members[group_of] > 1, deviation, torch.zeros_like(deviation))
    if not normalize_std:
        return deviation.float()
    squares = zeros.clone().index_add_(0, group_of, weight * deviation**2)
    std = (squares / (members - 1).clamp_min(1)).sqrt()
    return (deviation / (std[group_of] + eps)).float()


ADVANTAGE_ESTIMATORS: Mapping[str, Callable[..., Tensor]] = {
    "rollout": rollout_advantages,
    "transition": transition_advantages,
}
