"""GAE, the clipped value loss and explained variance: pure functions of flat tensors.

The calls of a batch are laid out flat, each rollout's calls together and in order
(``call_index``), with ``is_last`` marking a rollout's last call. For call ``k`` of a rollout
with step rewards ``r``, values ``V`` (``V`` after the last call is 0: the episode ended),
discount ``gamma`` and GAE's ``λ``:

    δ_k = r_k + gamma V_{k+1} - V_k
    A_k = δ_k + gamma λ A_{k+1}            (A after the last call is 0)
    G_k = A_k + V_k                    (the value target: the λ-return)

``λ = 0`` gives the one-step TD error, ``λ = 1`` the discounted return minus the value
(``G_k = Σ_j gamma^j r_{k+j}``). The value loss of PPO2 (``value_clip = ε_v``) is

    V_clip = V_old + clip(V - V_old, -ε_v, ε_v)
    L_V    = ½ max((V - G)², (V_clip - G)²)

and the critic's explained variance ``1 - Var(G - V) / Var(G)`` (1: perfect, 0: no better
than the mean, NaN when the returns do not vary). Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fulmen.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["GAEResult", "ValueLossTerms", "clipped_value_loss", "explained_variance", "gae"]


@dataclass(frozen=True)
class GAEResult:
    """Per-call advantages and returns (``[C]`` each, the layout of the inputs)."""

    advantages: Tensor
    returns: Tensor


def _check_calls(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 1 for s in shapes.values()):
        raise ConfigError(f"expected 1-D tensors of one shape; got {shapes}")


def gae(*, rewards: Tensor, values: Tensor, is_last: Tensor, gamma: float, lam: float) -> GAEResult:
    """Return GAE advantages and λ-returns of the calls of several rollouts (module docstring).

    Args:
        rewards: ``[C]`` each call's step reward.
        values: ``[C]`` each call's value (no gradient is taken through it).
        is_last: ``[C]`` bool, true on each rollout's last call; the batch's last call must
            be one (a rollout cut in two would bootstrap from the next rollout's value).
        gamma: discount between consecutive calls, in ``[0, 1]``.
        lam: GAE's λ, in ``[0, 1]``.

    Raises:
        ConfigError: the tensors are not 1-D of one shape, the last call does not end a
            rollout, or ``gamma`` / ``lam`` lie outside ``[0, 1]``.
    """
    _check_calls(rewards=rewards, values=values, is_last=is_last)
    for name, value in (("gamma", gamma), ("lam", lam)):
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{name} must lie in [0, 1]; got {value!r}")
    count = int(rewards.shape[0])
    if count and not bool(is_last[-1]):
        raise ConfigError("the last call of the batch must end its rollout (is_last[-1])")
    rewards = rewards.detach().double()
    values = values.detach().double()
    advantages = rewards.new_zeros(count)
    next_value, next_advantage = 0.0, 0.0
    for k in range(count - 1, -1, -1):  # backwards: each call needs the next one's terms
        if bool(is_last[k]):
            next_value, next_advantage = 0.0, 0.0
        delta = float(rewards[k]) + gamma * next_value - float(values[k])
        next_advantage = delta + gamma * lam * next_advantage
        next_value = float(values[k])
        advantages[k] = next_advantage
    return GAEResult(advantages=advantages, returns=advantages + values)


@dataclass(frozen=True)
class ValueLossTerms:
    """Per-call value loss and whether its clipped term was the one taken (``[C]`` each)."""

    loss: Tensor
    is_clipped: Tensor


def clipped_value_loss(
    *, values: Tensor, old_values: Tensor, returns: Tensor, clip: float | None
) -> ValueLossTerms:
    """Return ``½ max((V - G)², (V_clip - G)²)`` per call (module docstring).

    ``clip`` ``None`` is the plain ``½ (V - G)²``. A call counts as clipped when the clipped
    term is strictly the larger one (its gradient is then 0: the value moved too far).

    Raises:
        ConfigError: the tensors are not 1-D of one shape, or ``clip`` is not > 0.
    """
    _check_calls(values=values, old_values=old_values, returns=returns)
    unclipped = (values - returns).square()
    if clip is None:
        never = unclipped.detach() != unclipped.detach()  # all False, right shape and device
        return ValueLossTerms(loss=0.5 * unclipped, is_clipped=never)
    if not clip > 0:
        raise ConfigError(f"value clip must be > 0; got {clip!r}")
    moved = (values - old_values).clamp(-clip, clip)
    clipped = (old_values + moved - returns).square()
    return ValueLossTerms(
        loss=0.5 * unclipped.maximum(clipped), is_clipped=(clipped > unclipped).detach()
    )


def explained_variance(*, values: Tensor, returns: Tensor) -> float:
    """Return ``1 - Var(G - V) / Var(G)`` (population variances); NaN when ``Var(G)`` is 0.

    Raises:
        ConfigError: the tensors are not 1-D of one shape.
    """
    _check_calls(values=values, returns=returns)
    returns = returns.detach().double()
    spread = float(returns.var(unbiased=False)) if returns.numel() else 0.0
    if spread == 0.0:
        return float("nan")
    residual = float((returns - values.detach().double()).var(unbiased=False))
    return 1.0 - residual / spread
