"""Off-policy GRPO batches from recorded traffic: groups for the baseline, token-level share.

Recorded production sessions rarely share a task, so the group-relative advantage of
``build_samples`` would be zero for each of them alone. :func:`offline_batch` keeps the task
groups that hold at least two rewarded rollouts with token-level calls and puts every other
rollout into one group, whose mean reward is then the baseline (the batch's). It also counts
how many of the rewarded rollouts' calls carry token ids and behaviour logprobs (trained, with
importance ratios against those logprobs) and how many hold text only (skipped: there is
nothing to weight them with).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fulmen.types.transitions import Trajectory, Transition

__all__ = ["BATCH_GROUP", "OfflineBatch", "offline_batch"]

#: The group of rollouts whose task no other kept rollout shares: the batch is their baseline.
BATCH_GROUP = "offline:batch"


@dataclass(frozen=True)
class OfflineBatch:
    """The transitions of one offline update and what the records held.

    Attributes:
        transitions: every transition of the rewarded rollouts, regrouped (see module doc).
        rollouts: rollouts read; rewarded: of those, rollouts with a reward.
        task_groups: tasks with at least two trained rollouts, kept as GRPO groups.
        batch_grouped: trained rollouts (rewarded, with a token-level call) put in the batch
            group instead.
        calls: calls of the rewarded rollouts; token_level_calls: of those, calls with token
            ids and behaviour logprobs (the others, text only, are skipped).
    """

    transitions: list[Transition]
    rollouts: int
    rewarded: int
    task_groups: int
    batch_grouped: int
    calls: int
    token_level_calls: int

    def metrics(self) -> dict[str, float]:
        """Flat ``offline/...`` metrics, with the fraction of token-level calls."""
        return {
            "offline/rollouts": float(self.rollouts),
            "offline/rewarded_rollouts": float(self.rewarded),
            "offline/task_groups": float(self.task_groups),
            "offline/batch_grouped_rollouts": float(self.batch_grouped),
            "offline/calls": float(self.calls),
            "offline/token_level_calls": float(self.token_level_calls),
            "offline/text_only_calls_skipped": float(self.calls - self.token_level_calls),
            "offline/token_level_fraction": (
                self.token_level_calls / self.calls if self.calls else 0.0
            ),
        }


def offline_batch(trajectories: Sequence[Trajectory]) -> OfflineBatch:
    """Regroup the transitions of recorded rollouts for GRPO and count their calls.

    A rollout without a reward contributes nothing (no transitions are built for it).
    """
    rewarded = [tr for tr in trajectories if tr.final_reward is not None]
    # Only rollouts with transitions (a token-level call) form groups: text only trains nothing.
    trained = [tr for tr in rewarded if tr.transitions]
    per_task = Counter(tr.task_id for tr in trained if tr.task_id is not None)
    grouped = {task for task, count in per_task.items() if count >= 2}
    transitions: list[Transition] = []
    batch_grouped = 0
    for trajectory in trained:
        in_task = trajectory.task_id in grouped
        batch_grouped += not in_task
        for t in trajectory.transitions:
            transitions.append(t if in_task else t.model_copy(update={"task_id": BATCH_GROUP}))
    calls = sum(tr.diagnostics.calls for tr in rewarded)
    text_only = sum(tr.diagnostics.skipped_not_token_level for tr in rewarded)
    return OfflineBatch(
        transitions=transitions,
        rollouts=len(trajectories),
        rewarded=len(rewarded),
        task_groups=len(grouped),
        batch_grouped=batch_grouped,
        calls=calls,
        token_level_calls=calls - text_only,
    )
