"""Step-level credit from the group itself: calls that acted from the same state (anchor states).

The rollouts of one task (a GRPO group) often pass through the same state: the same prompt,
token for token, after the same first turns. The calls made from one such *anchor state* form
a step group, and comparing their returns says which action was better *there*, a signal the
rollout-level advantage cannot give when every rollout of the group ends with the same reward.
This is the idea of GiGPO (group-in-group policy optimisation, Feng et al. 2025), written from
the paper's description:

    A(call) = A_rollout(call) + ω · A_step(call)
    A_step(call) = (G(call) - mean_S G) / (std_S G + ε)    (or without ``/ std`` when
                                                            ``normalize_std`` is off)

where ``S`` is the call's step group (same GRPO group, same prompt token ids), ``G`` the call's
return as the credit strategy gives it (the transition's credited reward: ``R`` with ``final``,
``gamma^(n-1-k) R`` with ``discounted``, the call's emitted reward with ``per_call``), and
mean and std are over the calls of ``S``. A step group needs calls of at least two rollouts;
otherwise ``A_step`` is 0 (no comparison, no signal). ``ω = 0`` (the default) is GRPO unchanged.

A step group never mixes tasks. Offline GRPO's batch group (``offline.BATCH_GROUP``) is not a
task: it pools rollouts whose task no other kept rollout shares, one rollout per task, for a
common baseline, so a state named alike (or prompted alike) in two of them is two tasks'
states, and its calls get no step group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fulmen.algorithms.grpo.advantages import group_advantages
from fulmen.algorithms.grpo.offline import BATCH_GROUP
from fulmen.types.transitions import Transition

__all__ = ["AnchorStats", "anchor_advantages"]


@dataclass
class AnchorStats:
    """How many calls found an anchor group in a batch, and how many such groups there were.

    Attributes:
        anchor_calls: transitions whose state another rollout of their group also acted from.
        anchor_groups: step groups with calls of at least two rollouts.
    """

    anchor_calls: int = 0
    anchor_groups: int = 0


def _step_key(t: Transition) -> tuple[str, object]:
    """Return the step group of ``t``: its task group and its state (named, or its tokens)."""
    state = ("named", t.state_key) if t.state_key is not None else tuple(t.prompt_token_ids)
    if t.group_id == BATCH_GROUP:
        # one rollout per task in that group: its states are its own (see the module doc)
        return t.group_id, (t.rollout_id, state)
    return t.group_id, state


def anchor_advantages(
    transitions: Sequence[Transition], *, normalize_std: bool = True, eps: float = 1e-6
) -> tuple[list[float], AnchorStats]:
    """Return each transition's step-level advantage ``A_step`` (0 without an anchor group).

    Transitions are grouped by their GRPO group (``group_id``) and their state: the key the
    agent named (``state_key``, the ``x-fulmen-state`` header), else their prompt token ids;
    in offline GRPO's batch group, by their rollout too (see the module docstring).
    """
    keys: dict[tuple[str, object], int] = {}
    step_group = [keys.setdefault(_step_key(t), len(keys)) for t in transitions]
    rollouts_in: dict[int, set[str]] = {}
    for t, group in zip(transitions, step_group, strict=True):
        rollouts_in.setdefault(group, set()).add(t.rollout_id)
    anchored = [len(rollouts_in[g]) > 1 for g in step_group]
    stats = AnchorStats(
        anchor_calls=sum(anchored),
        anchor_groups=sum(1 for members in rollouts_in.values() if len(members) > 1),
    )
    if not stats.anchor_calls:
        return [0.0] * len(transitions), stats
    values = group_advantages(
        scores=torch.tensor([t.reward for t in transitions], dtype=torch.float64),
        groups=torch.tensor(step_group),
        normalize_std=normalize_std,
        eps=eps,
    ).tolist()
    return [v if a else 0.0 for v, a in zip(values, anchored, strict=True)], stats
