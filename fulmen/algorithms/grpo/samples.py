"""From transitions to token samples: filtering, advantages, credit weights, normalization.

Everything that needs the whole step batch happens here, before any micro-batching: the
group-relative advantages (over every rollout in the batch) and the loss normalization weights
(over every trained token), so that gradient accumulation is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from fulmen.adapter.transition_types import Transition
from fulmen.algorithms.grpo.advantages import ADVANTAGE_ESTIMATORS
from fulmen.algorithms.grpo.batching import TokenSample
from fulmen.algorithms.grpo.config import GRPOConfig
from fulmen.algorithms.grpo.losses import LOSS_NORMALIZERS

__all__ = ["SampleStats", "build_samples"]


@dataclass
class SampleStats:
    """What ``build_samples`` kept and dropped, and the batch's reward statistics."""

    transitions: int = 0
    rollouts: int = 0
    groups: int = 0
    truncated: int = 0
    stale: int = 0
    dropped_truncated: int = 0
    dropped_overlong: int = 0
    dropped_untrained: int = 0
    skipped_zero_advantage: int = 0
    trained_tokens: int = 0
    reward_mean: float = 0.0
    reward_std: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    def as_metrics(self) -> dict[str, float]:
        """Flat float metrics for logging."""
        out = {k: float(v) for k, v in vars(self).items() if k != "extra"}
        out.update(self.extra)
        return out


def build_samples(
    transitions: Sequence[Transition],
    *,
    config: GRPOConfig,
    policy_version: str | None = None,
) -> tuple[list[TokenSample], SampleStats]:
    """Turn a step batch of transitions into token samples with advantages and norm weights.

    ``policy_version`` is the version of the weights being trained; transitions sampled by
    another version are counted as stale (they are still trained: the ratio corrects them).
    """
    stats = SampleStats(transitions=len(transitions))
    kept: list[Transition] = []
    for t in transitions:
        stats.truncated += t.is_truncated
        stats.stale += (
            policy_version is not None
            and t.policy_version is not None
            and t.policy_version != policy_version
        )
        if t.is_truncated and config.skip_truncated:
            stats.dropped_truncated += 1
        elif len(t.prompt_token_ids) + len(t.completion_token_ids) > config.max_seq_len:
            stats.dropped_overlong += 1
        elif not any(_positions(t)):
            stats.dropped_untrained += 1
        else:
            kept.append(t)
    rollout_ids = list(dict.fromkeys(t.rollout_id for t in kept))
    rollout_index = {r: i for i, r in enumerate(rollout_ids)}
    first = {t.rollout_id: t for t in reversed(kept)}
    group_ids = list(dict.fromkeys(first[r].group_id for r in rollout_ids))
    group_index = {g: i for i, g in enumerate(group_ids)}
    stats.rollouts, stats.groups = len(rollout_ids), len(group_ids)
    if not kept:
        return [], stats
    rollout_rewards = torch.tensor([first[r].rollout_reward for r in rollout_ids])
    stats.reward_mean = float(rollout_rewards.mean())
    stats.reward_std = float(rollout_rewards.std()) if len(rollout_ids) > 1 else 0.0
    advantages = ADVANTAGE_ESTIMATORS[config.advantage](
        rollout_rewards=rollout_rewards,
        rollout_group=torch.tensor([group_index[first[r].group_id] for r in rollout_ids]),
        transition_rollout=torch.tensor([rollout_index[t.rollout_id] for t in kept]),
        transition_rewards=torch.tensor([t.reward for t in kept]),
        normalize_std=config.normalize_std,
    ).tolist()
    positions = [_positions(t) for t in kept]
    token_rollout = torch.tensor(
        [rollout_index[t.rollout_id] for t, pos in zip(kept, positions, strict=True) for _ in pos]
    )
    norm = LOSS_NORMALIZERS[config.loss_normalization](
        token_rollout=token_rollout, num_rollouts=len(rollout_ids)
    ).tolist()
    stats.trained_tokens = len(norm)
    samples: list[TokenSample] = []
    offset = 0
    for t, advantage, pos in zip(kept, advantages, positions, strict=True):
        prompt_len = len(t.prompt_token_ids)
        token_adv = [advantage * t.credit_weights[p - prompt_len] for p in pos]
        sample = TokenSample(
            input_ids=[*t.prompt_token_ids, *t.completion_token_ids],
            positions=pos,
            old_logprobs=[t.logprobs[p - prompt_len] for p in pos],
            advantages=token_adv,
            norm=norm[offset : offset + len(pos)],
            rollout=rollout_index[t.rollout_id],
        )
        offset += len(pos)
        if config.skip_zero_advantage and config.kl_coef == 0 and not any(token_adv):
            stats.skipped_zero_advantage += 1
            continue
        samples.append(sample)
    return samples, stats


def _positions(t: Transition) -> list[int]:
    """List the indices in prompt+completion of the trained tokens (0 has no context)."""
    start = len(t.prompt_token_ids)
    return [start + j for j, m in enumerate(t.loss_mask) if m and start + j >= 1]
