"""Preference pairs from groups of rollouts: the best rollout's calls against the worst one's.

A group is the rollouts of one task (``Transition.group_id``). Its best rollout (highest
``rollout_reward``; the first of equals) is preferred over its worst (lowest; the last of
equals) when their rewards differ by at least ``min_margin``. The two rollouts' transitions
(one per call, or per merged chain) are paired position by position: the k-th of the best
against the k-th of the worst, and a position gives a pair only when both saw the same prompt
token ids (the pair then differs only in what the policy wrote). Everything else is counted,
never dropped silently: groups with one rollout, equal rewards or too small a margin; positions
whose prompts differ; positions only one of the two reached; positions whose completions are
identical (no preference to learn). Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fulmen.types.transitions import Trajectory, Transition

__all__ = ["PairStats", "PreferencePair", "build_pairs"]


@dataclass(frozen=True)
class PreferencePair:
    """One prompt with a preferred and a dispreferred completion, as recorded token ids.

    Attributes:
        prompt: the prompt token ids both completions followed.
        chosen / rejected: the completions' token ids (a merged chain's observation tokens
            included, masked out by the loss mask).
        chosen_mask / rejected_mask: 1 where the policy generated the token (trained).
        chosen_reward / rejected_reward: the two rollouts' rewards.
        chosen_rollout / rejected_rollout: the two rollouts' ids.
        group: the group (task) both came from.
        position: the call position within the two rollouts.
    """

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]
    chosen_mask: list[int]
    rejected_mask: list[int]
    chosen_reward: float
    rejected_reward: float
    chosen_rollout: str
    rejected_rollout: str
    group: str
    position: int

    def sequences(self) -> tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]:
        """Return ``(ids, trained positions)`` of the chosen and of the rejected sequence."""
        return _sequence(self.prompt, self.chosen, self.chosen_mask), _sequence(
            self.prompt, self.rejected, self.rejected_mask
        )


def _sequence(
    prompt: list[int], completion: list[int], mask: list[int]
) -> tuple[list[int], list[int]]:
    start = len(prompt)
    positions = [start + j for j, m in enumerate(mask) if m and start + j >= 1]
    return [*prompt, *completion], positions


@dataclass
class PairStats:
    """What ``build_pairs`` found in the groups it was given.

    Attributes:
        groups: groups seen (tasks with at least one rollout that has transitions).
        groups_with_pair: groups that gave at least one pair.
        groups_single: groups with a single rollout.
        groups_equal_reward: groups whose best and worst rewards are equal.
        groups_below_margin: groups whose best and worst rewards differ by less than
            ``min_margin``.
        prompt_mismatch: call positions skipped because the two calls' prompts differ.
        unmatched_calls: call positions only one of the two rollouts reached.
        identical_completions: call positions skipped because both wrote the same tokens.
        pairs: pairs built.
    """

    groups: int = 0
    groups_with_pair: int = 0
    groups_single: int = 0
    groups_equal_reward: int = 0
    groups_below_margin: int = 0
    prompt_mismatch: int = 0
    unmatched_calls: int = 0
    identical_completions: int = 0
    pairs: int = 0

    @property
    def groups_without_pair(self) -> int:
        """Groups that gave no pair, for whatever reason."""
        return self.groups - self.groups_with_pair

    def as_metrics(self) -> dict[str, float]:
        """Flat ``dpo/...`` metrics."""
        metrics = {f"dpo/{k}": float(v) for k, v in vars(self).items()}
        metrics["dpo/groups_without_pair"] = float(self.groups_without_pair)
        return metrics


def build_pairs(
    trajectories: Iterable[Trajectory], *, min_margin: float
) -> tuple[list[PreferencePair], PairStats]:
    """Pair the best and the worst rollout of each task group (see the module docstring).

    Trajectories without transitions (no reward, or no token-level call selected) take no
    part; their reward is their transitions' ``rollout_reward``. A trajectory without a task
    is a group of its own, hence gives no pair.
    """
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        if trajectory.transitions:
            groups.setdefault(trajectory.transitions[0].group_id, []).append(trajectory)
    stats = PairStats(groups=len(groups))
    pairs: list[PreferencePair] = []
    for group, members in groups.items():
        found = _group_pairs(group, members, min_margin=min_margin, stats=stats)
        stats.groups_with_pair += bool(found)
        pairs.extend(found)
    stats.pairs = len(pairs)
    return pairs, stats


def _group_pairs(
    group: str, members: Sequence[Trajectory], *, min_margin: float, stats: PairStats
) -> list[PreferencePair]:
    if len(members) < 2:
        stats.groups_single += 1
        return []
    rewards = [_reward(m) for m in members]
    best = max(range(len(members)), key=lambda i: (rewards[i], -i))
    worst = min(range(len(members)), key=lambda i: (rewards[i], -i))
    margin = rewards[best] - rewards[worst]
    if margin == 0:
        stats.groups_equal_reward += 1
        return []
    if margin < min_margin:
        stats.groups_below_margin += 1
        return []
    chosen, rejected = members[best].transitions, members[worst].transitions
    stats.unmatched_calls += abs(len(chosen) - len(rejected))
    pairs: list[PreferencePair] = []
    for position, (win, lose) in enumerate(zip(chosen, rejected, strict=False)):
        if win.prompt_token_ids != lose.prompt_token_ids:
            stats.prompt_mismatch += 1
        elif win.completion_token_ids == lose.completion_token_ids:
            stats.identical_completions += 1
        else:
            pairs.append(_pair(win, lose, (rewards[best], rewards[worst]), group, position))
    return pairs


def _reward(trajectory: Trajectory) -> float:
    return trajectory.transitions[0].rollout_reward


def _pair(
    win: Transition, lose: Transition, rewards: tuple[float, float], group: str, position: int
) -> PreferencePair:
    return PreferencePair(
        prompt=list(win.prompt_token_ids),
        chosen=list(win.completion_token_ids),
        rejected=list(lose.completion_token_ids),
        chosen_mask=list(win.loss_mask),
        rejected_mask=list(lose.loss_mask),
        chosen_reward=rewards[0],
        rejected_reward=rewards[1],
        chosen_rollout=win.rollout_id,
        rejected_rollout=lose.rollout_id,
        group=group,
        position=position,
    )
