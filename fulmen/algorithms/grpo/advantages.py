"""Group-relative advantages (GRPO), computed per rollout and broadcast to its transitions.

Rollouts of the same task form a group; a rollout's advantage is its reward minus the group's
mean, optionally divided by the group's standard deviation (Bessel-corrected). A group with a
single rollout has no baseline and gets advantage 0. Advantages are computed once per rollout
and then broadcast, so a rollout with more calls (more transitions) does not count more in its
group's statistics. Pure functions with keyword-only arguments and shape checks.

The arithmetic is float64 and exact where it can be: each group's values are scaled by a power
of two (exact, and no overflow for rewards up to float64's largest) and shifted by the group's
least value before any sum, so a group whose values are all equal gets advantages of exactly 0
whatever the number of calls of its rollouts (``docs/credit-and-advantages.md``). Non-finite
rewards raise ``ConfigError``.
"""

from __future__ import annotations

import math
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

#: Smallest group scale exponent: groups of tinier values are not scaled up further (a
#: factor of ``2 ** 1000`` at most, which float64 holds).
_MIN_EXPONENT = -1000


def _check_index(name: str, index: Tensor, size: int | None = None) -> None:
    if index.ndim != 1 or index.dtype not in (torch.int64, torch.int32):
        raise ConfigError(f"{name} must be a 1-D integer tensor; got {index.dtype} {index.shape}")
    if index.numel() and int(index.min()) < 0:
        raise ConfigError(f"{name} holds negative indices")
    if size is not None and index.numel() and int(index.max()) >= size:
        raise ConfigError(f"{name} points past {size} entries (max {int(index.max())})")


def _check_finite(name: str, values: Tensor) -> None:
    bad = (~torch.isfinite(values)).nonzero().flatten()
    if bad.numel():
        shown = [float(values[i]) for i in bad[:5]]
        raise ConfigError(
            f"{name} holds non-finite values at {bad[:5].tolist()}: {shown}; rewards must be "
            "finite numbers (a reward function returned inf or NaN?)"
        )


def _pow2(exponents: Tensor) -> Tensor:
    """``2 ** e`` for each integer ``e`` in ``[-1074, 1023]``, exactly."""
    return torch.tensor([math.ldexp(1.0, e) for e in exponents.tolist()], dtype=torch.float64)


def _relative(
    values: Tensor, owner: Tensor, owner_group: Tensor, *, normalize_std: bool, eps: float
) -> Tensor:
    """Deviation of each value from its group's mean, each owner (rollout) weighing the same.

    ``values[i]`` belongs to rollout ``owner[i]``, of group ``owner_group[owner[i]]``; a value of
    a rollout with ``n`` values weighs ``1 / n`` in the group's mean and variance. Groups of
    fewer than two rollouts (with values) get 0. Returns float64.
    """
    values = values.double()
    num_owners = owner_group.shape[0]
    num_groups = int(owner_group.max()) + 1
    group_of = owner_group[owner]
    per_owner = torch.bincount(owner, minlength=num_owners)
    present = per_owner > 0
    members = torch.bincount(owner_group[present], minlength=num_groups).double()
    # A power-of-two scale per group: |scaled| < 1, exact (bar subnormals), so neither the sums
    # nor the squares below overflow however large the rewards.
    absmax = torch.zeros(num_groups, dtype=torch.float64).scatter_reduce(
        0, group_of, values.abs(), "amax"
    )
    exponent = torch.frexp(absmax).exponent.long().clamp_min(_MIN_EXPONENT)
    down = _pow2(-exponent)
    scaled = values * down[group_of]
    # Shifted by the group's least value: equal values become exactly 0, and so their mean.
    low = torch.full((num_groups,), math.inf, dtype=torch.float64)
    shifted = scaled - low.scatter_reduce(0, group_of, scaled, "amin")[group_of]
    owner_mean = torch.zeros(num_owners, dtype=torch.float64).index_add_(0, owner, shifted)
    owner_mean = owner_mean / per_owner.clamp_min(1)
    group_mean = torch.zeros(num_groups, dtype=torch.float64).index_add_(
        0, owner_group[present], owner_mean[present]
    )
    group_mean = group_mean / members.clamp_min(1)
    deviation = shifted - group_mean[group_of]
    deviation = torch.where(members[group_of] > 1, deviation, torch.zeros_like(deviation))
    if not normalize_std:
        half = exponent // 2  # two factors: 2 ** 1024 itself is no float64
        return deviation * _pow2(half)[group_of] * _pow2(exponent - half)[group_of]
    weight = 1.0 / per_owner[owner].double()
    squares = torch.zeros(num_groups, dtype=torch.float64).index_add_(
        0, group_of, weight * deviation**2
    )
    std = (squares / (members - 1).clamp_min(1)).sqrt()
    # (deviation * 2**e) / (std * 2**e + eps), without leaving the scaled range; a group of
    # zero spread has deviations of exactly 0 and keeps them, even with eps 0
    scale = std[group_of] + eps * down[group_of]
    return torch.where(scale > 0, deviation / scale, torch.zeros_like(deviation))


def group_advantages(
    *, scores: Tensor, groups: Tensor, normalize_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """Advantage of each member: ``(score - group mean) / (group std + eps)``, float64.

    A group whose scores are all equal gets exactly 0.

    Args:
        scores: ``[R]`` finite float scores (one per rollout).
        groups: ``[R]`` group index of each rollout (0..G-1).
        normalize_std: divide by the group's sample standard deviation.
        eps: added to the std (a group of zero variance gives 0 whatever ``eps``).
    """
    if scores.ndim != 1 or groups.shape != scores.shape:
        raise ConfigError(f"scores {tuple(scores.shape)} and groups {tuple(groups.shape)} differ")
    _check_index("groups", groups)
    if scores.numel() == 0:
        return scores.double().clone()
    _check_finite("scores", scores)
    owners = torch.arange(scores.shape[0])
    return _relative(scores, owners, groups, normalize_std=normalize_std, eps=eps)


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
        rollout_rewards: ``[R]`` final reward of each rollout (finite).
        rollout_group: ``[R]`` group (task) index of each rollout.
        transition_rollout: ``[T]`` rollout index of each transition.
        transition_rewards: ``[T]`` credited rewards (unused here; same signature as
            ``transition_advantages``).
        normalize_std: divide by the group's sample standard deviation.
        eps: added to the std so zero-variance groups give 0.

    Returns:
        ``[T]`` float64 advantages.
    """
    del transition_rewards
    _check_index("transition_rollout", transition_rollout, rollout_rewards.shape[0])
    _check_finite("rollout_rewards", rollout_rewards)
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
    """Group-relative advantage of each transition's credited reward, float64.

    The group's mean and std weigh every *rollout* equally (a transition of a rollout with
    ``n`` transitions weighs ``1 / n``); rollouts without transitions are not members. A group
    with one rollout gets 0, and so does a group whose credited rewards are all equal (exactly,
    whatever the rollouts' numbers of transitions). When every transition of a rollout carries
    the rollout's reward this equals ``rollout_advantages``.
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
        return transition_rewards.double().clone()
    _check_finite("transition_rewards", transition_rewards)
    return _relative(
        transition_rewards,
        transition_rollout,
        rollout_group,
        normalize_std=normalize_std,
        eps=eps,
    )


ADVANTAGE_ESTIMATORS: Mapping[str, Callable[..., Tensor]] = {
    "rollout": rollout_advantages,
    "transition": transition_advantages,
}
