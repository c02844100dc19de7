"""A reward posted long after a rollout finished reaches the transitions and exports.

Runs on every backend (``conftest.py``). The store's clock is moved an hour ahead for the
reward's post only: transition building must pick the posted reward by its sequence number,
not by any timestamp.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from fulmen.store import Store
from fulmen.store import rewards as store_rewards
from fulmen.tracing import semconv
from fulmen.transitions.export import sft_rows
from fulmen.transitions.signals import latest_reward
from fulmen.transitions.trajectory import load_attempt, load_trajectory
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    LLMChoice,
    Reward,
    RewardCreate,
    RolloutCreate,
    Span,
    SpanCreate,
)

HOUR = timedelta(hours=1)


def _reward_span(rollout_id: str, attempt_id: str, value: float) -> SpanCreate:
    return SpanCreate(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id="ab" * 16,
        span_id="cd" * 8,
        name=semconv.SPAN_REWARD,
        attributes={
            semconv.REWARD_NAMES: [semconv.DEFAULT_REWARD_NAME],
            semconv.REWARD_VALUES: [value],
            semconv.REWARD_PRIMARY: semconv.DEFAULT_REWARD_NAME,
            semconv.REWARD_SOURCE: "return",
        },
        start_time=1.0,
        end_time=1.0,
    )


async def _finished_run(store: Store) -> tuple[str, str]:
    """One rollout whose agent made a token-level call and returned reward 0."""
    await store.enqueue([RolloutCreate(input="q", rollout_id="r-late", task_id="t1")])
    (claim,) = await store.claim("w")
    rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
    await store.add_llm_calls(
        [
            LLMCallCreate(
                call_id="c1",
                rollout_id=rid,
                attempt_id=aid,
                request={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                response={"id": "chatcmpl-9", "choices": [{"message": {"content": "yo"}}]},
                prompt_token_ids=[1, 2, 3],
                choices=[LLMChoice(text="yo", token_ids=[7, 8], logprobs=[-0.5, -0.25])],
                is_token_level=True,
                response_id="chatcmpl-9",
                started_at=100.0,
            )
        ]
    )
    await store.add_spans([_reward_span(rid, aid, 0.0)])
    await store.update_attempt(aid, status=AttemptStatus.SUCCEEDED)
    return rid, aid


async def test_a_reward_posted_an_hour_later_reaches_the_transitions(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid, aid = await _finished_run(store)
    before = await load_trajectory(store, rid)
    assert before.final_reward == 0.0

    real_now = store_rewards.utc_now
    monkeypatch.setattr(store_rewards, "utc_now", lambda: real_now() + HOUR)
    reward = await store.add_reward(
        RewardCreate.scalar(1.0, response_id="chatcmpl-9", key="thumbs-up-1")
    )
    ended_at = (await store.get_rollout(rid)).ended_at
    assert ended_at is not None
    assert reward.created_at - ended_at >= HOUR
    assert reward.attempt_id == aid

    after = await load_trajectory(store, rid)
    assert after.final_reward == 1.0
    assert [t.reward for t in after.transitions] == [1.0]
    assert [t.rollout_reward for t in after.transitions] == [1.0]
    records = await load_attempt(store, rid)
    assert [row["reward"] for row in sft_rows([records], min_reward=0.5)] == [1.0]


def _posted(sequence: int, values: dict[str, float], primary: str | None) -> Reward:
    return Reward(
        key=f"k{sequence}",
        rollout_id="r",
        values=values,
        primary=primary,
        sequence=sequence,
        created_at=datetime(2026, 1, 1).astimezone(),
    )


def test_the_latest_reward_by_sequence_wins_span_or_posted() -> None:
    span_at_5 = Span(**_reward_span("r", "a", 0.25).model_dump(), sequence=5)
    assert latest_reward([span_at_5], [_posted(3, {"reward": 1.0}, "reward")]) == 0.25
    assert latest_reward([span_at_5], [_posted(7, {"reward": 1.0}, "reward")]) == 1.0
    # Named values without a primary merge in but leave the primary name as it was.
    assert latest_reward([span_at_5], [_posted(7, {"style": 0.5}, None)]) == 0.25
    # A later reward that names another primary switches to it.
    assert latest_reward([span_at_5], [_posted(7, {"style": 0.5}, "style")]) == 0.5
    assert latest_reward([], [_posted(1, {"a": 1.0, "b": 2.0}, None)]) is None
