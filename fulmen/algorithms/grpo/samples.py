"""From transitions to token samples: filtering, advantages, credit weights, normalization.

Everything that needs the whole step batch happens here, before any micro-batching: the
group-relative advantages (over every rollout in the batch) and the loss normalization weights
(over every trained token), so that gradient accumulation is exact.

Credit is applied exactly once (``docs/credit-and-advantages.md`` has the table). With the
``rollout`` estimator a token's advantage is the rollout's advantage times its call's credit
weight. With ``transition`` the credited reward already carries the credit (``discounted``
gives ``R * gamma ** k``), so the weights are not applied again: a token gets its transition's
advantage times its call's weight *relative to the transition's last call* (the call whose
reward the transition carries; 1 for a single call, the extra ``gamma`` steps of earlier calls
in a merged chain). A transition whose last call has weight 0 has no credit: it is not
trained and stays out of the group statistics.

A token whose advantage is at most ``min_abs_advantage`` in magnitude gets exactly 0, and a
batch in which no token's advantage is left takes no step at all (no samples), whatever
``kl_coef``: a step without signal would only move the weights through the optimizer's state
(and, with KL, pull the policy towards the reference). Non-finite rewards or credit weights,
and advantages too large for the loss's float32, raise ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fulmen.algorithms.batching import TokenSample
from fulmen.algorithms.grpo.advantages import ADVANTAGE_ESTIMATORS
from fulmen.algorithms.grpo.anchors import anchor_advantages
from fulmen.algorithms.grpo.config import GRPOConfig
from fulmen.algorithms.losses import LOSS_NORMALIZERS
from fulmen.errors import ConfigError
from fulmen.types.transitions import Transition

__all__ = ["SampleStats", "build_samples"]

_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


@dataclass
class SampleStats:
    """What ``build_samples`` kept and dropped, and the batch's reward statistics.

    ``skipped_zero_advantage`` counts the samples left out for want of advantage (each of them
    when the whole batch has none); ``zeroed_advantage_tokens`` the tokens whose advantage was
    nonzero but at most ``min_abs_advantage`` in magnitude, trained (or skipped) as 0.
    """

    transitions: int = 0
    rollouts: int = 0
    groups: int = 0
    truncated: int = 0
    stale: int = 0
    dropped_truncated: int = 0
    dropped_overlong: int = 0
    dropped_untrained: int = 0
    skipped_zero_advantage: int = 0
    zeroed_advantage_tokens: int = 0
    anchor_calls: int = 0  # calls with an anchor group (``anchor_weight`` > 0)
    anchor_groups: int = 0
    # The tokens the step's loss is normalized over (0 when the batch takes no step).
    trained_tokens: int = 0
    # Over the rollouts whose transitions were kept for training (``reward/mean`` and
    # ``reward/std`` of a step are over all its rollouts).
    trained_reward_mean: float = 0.0
    trained_reward_std: float = 0.0

    def as_metrics(self) -> dict[str, float]:
        """Flat float metrics for logging."""
        return {k: float(v) for k, v in vars(self).items()}


@dataclass(frozen=True)
class _Index:
    """Rollouts and groups of the kept transitions, numbered in order of appearance."""

    rollout_of: list[int]  # per transition
    group_of_rollout: list[int]
    rollout_rewards: list[float]

    @classmethod
    def of(cls, kept: Sequence[Transition]) -> _Index:
        rollouts: dict[str, int] = {}
        groups: dict[str, int] = {}
        group_of_rollout: list[int] = []
        rewards: list[float] = []
        for t in kept:
            if t.rollout_id not in rollouts:
                rollouts[t.rollout_id] = len(rollouts)
                group_of_rollout.append(groups.setdefault(t.group_id, len(groups)))
                rewards.append(t.rollout_reward)
        return cls([rollouts[t.rollout_id] for t in kept], group_of_rollout, rewards)


def build_samples(
    transitions: Sequence[Transition],
    *,
    config: GRPOConfig,
    policy_version: str | None = None,
) -> tuple[list[TokenSample], SampleStats]:
    """Turn a step batch of transitions into token samples with advantages and norm weights.

    ``policy_version`` is the version of the weights being trained; transitions sampled by
    another version are counted as stale (they are still trained: the ratio corrects them).
    No samples come back when no token's advantage exceeds ``config.min_abs_advantage``.

    Raises:
        ConfigError: a kept transition's reward, rollout reward or credit weight is not
            finite, or a token's advantage does not fit float32.
    """
    stats = SampleStats(transitions=len(transitions))
    kept = _keep(transitions, config, policy_version, stats)
    for t in kept:
        _check_finite(t)
    index = _Index.of(kept)
    stats.rollouts, stats.groups = len(index.rollout_rewards), len(set(index.group_of_rollout))
    if not kept:
        return [], stats
    rollout_rewards = torch.tensor(index.rollout_rewards, dtype=torch.float64)
    stats.trained_reward_mean, stats.trained_reward_std = _mean_std(rollout_rewards)
    positions = [_positions(t) for t in kept]
    if config.advantage == "transition":
        weights = [_relative_weights(t, pos) for t, pos in zip(kept, positions, strict=True)]
        advantages = _credited_advantages(kept, weights, config)
    else:
        weights = [[_weight(t, p) for p in pos] for t, pos in zip(kept, positions, strict=True)]
        advantages = ADVANTAGE_ESTIMATORS[config.advantage](
            rollout_rewards=rollout_rewards,
            rollout_group=torch.tensor(index.group_of_rollout),
            transition_rollout=torch.tensor(index.rollout_of),
            transition_rewards=torch.tensor([t.reward for t in kept], dtype=torch.float64),
            normalize_std=config.normalize_std,
        ).tolist()
    if config.anchor_weight > 0:
        steps, anchors = anchor_advantages(kept, normalize_std=config.normalize_std)
        stats.anchor_calls, stats.anchor_groups = anchors.anchor_calls, anchors.anchor_groups
        advantages = [a + config.anchor_weight * s for a, s in zip(advantages, steps, strict=True)]
    token_rollout = torch.tensor(
        [r for r, pos in zip(index.rollout_of, positions, strict=True) for _ in pos]
    )
    norm = LOSS_NORMALIZERS[config.loss_normalization](
        token_rollout=token_rollout, num_rollouts=len(index.rollout_rewards)
    ).tolist()
    stats.trained_tokens = len(norm)
    built: list[TokenSample] = []
    offset = 0
    for t, rollout, advantage, pos, weight in zip(
        kept, index.rollout_of, advantages, positions, weights, strict=True
    ):
        token_advantages = _token_advantages(t, advantage, weight, config, stats)
        sample = _sample(t, rollout, pos, token_advantages, norm[offset : offset + len(pos)])
        if _is_stale(t, policy_version):
            sample = dataclasses.replace(sample, is_stale=True)
        offset += len(pos)
        built.append(sample)
    if not any(any(s.advantages) for s in built):
        # no signal anywhere: no step, not even a KL-only one (module docstring)
        stats.skipped_zero_advantage = len(built)
        stats.trained_tokens = 0  # nothing is trained
        return [], stats
    samples: list[TokenSample] = []
    for sample in built:
        if config.skip_zero_advantage and config.kl_coef == 0 and not any(sample.advantages):
            stats.skipped_zero_advantage += 1
        else:
            samples.append(sample)
    return samples, stats


def _check_finite(t: Transition) -> None:
    bad = [
        name
        for name, finite in (
            ("reward", math.isfinite(t.reward)),
            ("rollout_reward", math.isfinite(t.rollout_reward)),
            ("credit_weights", all(math.isfinite(w) for w in t.credit_weights)),
        )
        if not finite
    ]
    if bad:
        raise ConfigError(
            f"transition of rollout {t.rollout_id!r} (call {t.call_index}) has a non-finite "
            f"{' and '.join(bad)} (reward {t.reward!r}, rollout_reward {t.rollout_reward!r}); "
            "rewards and credit weights must be finite numbers",
            detail={"rollout_id": t.rollout_id, "call_index": t.call_index, "fields": bad},
        )


def _mean_std(rewards: torch.Tensor) -> tuple[float, float]:
    """Mean and sample std of the rollout rewards, scaled so huge rewards do not overflow."""
    scale = float(rewards.abs().max()) or 1.0
    scaled = rewards / scale
    std = float(scaled.std()) * scale if len(rewards) > 1 else 0.0
    return float(scaled.mean()) * scale, std


def _token_advantages(
    t: Transition, advantage: float, weights: list[float], config: GRPOConfig, stats: SampleStats
) -> list[float]:
    """``advantage * w`` per token, 0 where at most ``min_abs_advantage`` in magnitude."""
    out: list[float] = []
    for w in weights:
        value = advantage * w
        if not abs(value) <= _FLOAT32_MAX:
            raise ConfigError(
                f"advantage {value!r} of rollout {t.rollout_id!r} (call {t.call_index}) does not "
                "fit float32, the loss's precision: rewards this large need grpo.normalize_std "
                "true, or scale them down",
                detail={"rollout_id": t.rollout_id, "call_index": t.call_index},
            )
        if value and abs(value) <= config.min_abs_advantage:
            stats.zeroed_advantage_tokens += 1
            value = 0.0
        out.append(value)
    return out


def _keep(
    transitions: Sequence[Transition],
    config: GRPOConfig,
    policy_version: str | None,
    stats: SampleStats,
) -> list[Transition]:
    kept: list[Transition] = []
    for t in transitions:
        stats.truncated += t.is_truncated
        stats.stale += _is_stale(t, policy_version)
        if t.is_truncated and config.skip_truncated:
            stats.dropped_truncated += 1
        elif (
            config.max_seq_len is not None
            and len(t.prompt_token_ids) + len(t.completion_token_ids) > config.max_seq_len
        ):
            stats.dropped_overlong += 1
        elif not _positions(t):
            stats.dropped_untrained += 1
        else:
            kept.append(t)
    return kept


def _credited_advantages(
    kept: Sequence[Transition], weights: Sequence[list[float]], config: GRPOConfig
) -> list[float]:
    """Transition advantages over the credited transitions only (the rest get 0)."""
    credited = [i for i, w in enumerate(weights) if any(w)]
    sub = _Index.of([kept[i] for i in credited])
    advantages = [0.0] * len(kept)
    if not credited:
        return advantages
    values = ADVANTAGE_ESTIMATORS["transition"](
        rollout_rewards=torch.tensor(sub.rollout_rewards, dtype=torch.float64),
        rollout_group=torch.tensor(sub.group_of_rollout),
        transition_rollout=torch.tensor(sub.rollout_of),
        transition_rewards=torch.tensor([kept[i].reward for i in credited], dtype=torch.float64),
        normalize_std=config.normalize_std,
    ).tolist()
    for i, value in zip(credited, values, strict=True):
        advantages[i] = value
    return advantages


def _is_stale(t: Transition, policy_version: str | None) -> bool:
    """Whether another policy than ``policy_version`` sampled ``t`` (unknown: not stale)."""
    return (
        policy_version is not None
        and t.policy_version is not None
        and t.policy_version != policy_version
    )


def _weight(t: Transition, position: int) -> float:
    return t.credit_weights[position - len(t.prompt_token_ids)]


def _relative_weights(t: Transition, positions: list[int]) -> list[float]:
    """Credit weights of the trained tokens over the last call's (all 0 if that one is 0)."""
    last = _weight(t, positions[-1])
    return [_weight(t, p) / last if last else 0.0 for p in positions]


def _sample(
    t: Transition, rollout: int, positions: list[int], advantages: list[float], norm: list[float]
) -> TokenSample:
    offset = len(t.prompt_token_ids)
    return TokenSample(
        input_ids=[*t.prompt_token_ids, *t.completion_token_ids],
        positions=positions,
        old_logprobs=[t.logprobs[p - offset] for p in positions],
        advantages=advantages,
        norm=norm,
        rollout=rollout,
    )


def _positions(t: Transition) -> list[int]:
    """List the indices in prompt+completion of the trained tokens (0 has no context)."""
    start = len(t.prompt_token_ids)
    return [start + j for j, m in enumerate(t.loss_mask) if m and start + j >= 1]
