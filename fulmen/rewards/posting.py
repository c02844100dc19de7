"""Judging finished rollouts of a store and posting the results as rewards.

A scored rollout gets one posted reward: each criterion's score under its name and the
weighted mean under ``RewardConfig.name``, which is its primary, so it replaces a reward the
agent emitted. A rollout that could not be scored gets a reward that withdraws its reward
(``metadata.scoring_error`` says why, ``fulmen.types.rewards.SCORING_ERROR_KEY``): the
adapter then sees no reward for it and builds no transitions from it, and the dashboard and
``GET /v1/rollouts/{id}/rewards`` show the error. Posts carry an idempotency key made from
their content, so posting the same judgement twice stores it once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.rewards.content import JudgedRollout, judged_rollout
from fulmen.rewards.scoring import Judgement, RewardJudge
from fulmen.types import RewardCreate, Rollout, RolloutStatus
from fulmen.types.rewards import SCORING_ERROR_KEY

if TYPE_CHECKING:
    from fulmen.store.base import Store

__all__ = ["JUDGE_FAILED", "JUDGE_SOURCE", "judge_rollouts", "post_judgements", "reward_create"]

JUDGE_SOURCE = "fulmen judge"
"""``metadata.source`` of the rewards the judge posts."""

JUDGE_FAILED = "judge_failed"
"""The value name (1.0) of a posted reward that says the rollout could not be scored."""


def reward_create(judgement: Judgement, *, primary: str) -> RewardCreate:
    """Build the reward posted for ``judgement``: its scores, or a withdrawal naming the error."""
    if judgement.values is None:
        values = {JUDGE_FAILED: 1.0}
        metadata = {"source": JUDGE_SOURCE, SCORING_ERROR_KEY: judgement.error or "unknown"}
        chosen = None
    else:
        values = dict(judgement.values)
        metadata = {"source": JUDGE_SOURCE}
        chosen = primary
    content = json.dumps([judgement.rollout_id, values, metadata], sort_keys=True)
    key = "judge-" + hashlib.blake2b(content.encode(), digest_size=12).hexdigest()
    return RewardCreate(
        rollout_id=judgement.rollout_id,
        values=values,
        primary=chosen,
        key=key,
        metadata=dict(metadata),
    )


async def judge_rollouts(
    store: Store, judge: RewardJudge, groups: Sequence[Sequence[Rollout]]
) -> list[Judgement]:
    """Judge the succeeded rollouts of each group and post a reward for each.

    Failed rollouts are left out (of their group's ranking too). Returns the judgements in
    group order.
    """
    from fulmen.transitions.trajectory import load_attempt

    views: list[list[JudgedRollout]] = []
    for group in groups:
        views.append(
            [
                judged_rollout(r, await load_attempt(store, r.rollout_id))
                for r in group
                if r.status is RolloutStatus.SUCCEEDED
            ]
        )
    judgements = await judge.judge_groups([v for v in views if v])
    await post_judgements(store, judgements, primary=judge.config.name)
    return judgements


async def post_judgements(
    store: Store, judgements: Sequence[Judgement], *, primary: str, skip_failed: bool = False
) -> int:
    """Post ``reward_create``'s reward for each judgement; return how many were posted.

    ``skip_failed`` posts nothing for a rollout that could not be scored, so it keeps the
    reward it has (``fulmen rescore --judge``) instead of having it withdrawn.
    """
    posted = 0
    for judgement in judgements:
        if skip_failed and judgement.values is None:
            continue
        await store.add_reward(reward_create(judgement, primary=primary))
        posted += 1
    return posted
