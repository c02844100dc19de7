"""PPO's step rewards: what each call of a rollout earned, and the rollouts as episodes.

``step_rewards`` is a credit function (``fulmen.transitions.credit``'s extension point) that the
loop hands ``build_trajectory`` in place of ``transitions.credit``: call ``k`` of ``n`` gets
the reward
the agent emitted for it while running (``emit_reward`` joined to that call; 0 when none),
and the last call gets the rollout's final reward instead of its own emitted one. The last
call's emitted reward is not added to the final reward because an agent that reports its
outcome with ``emit_reward`` (rather than returning it) emits it for its last call: it would
count twice. GAE then carries every reward back to the calls before it; the credit weights are
all 1 and unused (GAE is the credit).

>>> from fulmen.transitions.credit import CreditInput
>>> [c.reward for c in step_rewards(CreditInput(1.0, (None, 0.25, None)))]
[0.0, 0.25, 1.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fulmen.transitions.credit import CallCredit, CreditInput
from fulmen.types.transitions import Transition

__all__ = ["Episode", "episodes", "step_rewards"]


def step_rewards(rollout: CreditInput) -> list[CallCredit]:
    """Give each call its emitted reward, and the last call the final reward (module docstring)."""
    n = rollout.num_calls
    return [
        CallCredit(rollout.final_reward if k == n - 1 else (r or 0.0), 1.0)
        for k, r in enumerate(rollout.call_rewards)
    ]


@dataclass(frozen=True)
class Episode:
    """One rollout's calls in call order: the steps GAE runs over."""

    rollout_id: str
    calls: tuple[Transition, ...]


def episodes(transitions: Sequence[Transition]) -> list[Episode]:
    """Group ``transitions`` by rollout (in order of first appearance), each by ``call_index``."""
    by_rollout: dict[str, list[Transition]] = {}
    for t in transitions:
        by_rollout.setdefault(t.rollout_id, []).append(t)
    return [
        Episode(rollout_id, tuple(sorted(calls, key=lambda t: t.call_index)))
        for rollout_id, calls in by_rollout.items()
    ]
