"""The rollout view lists each call's automatic intermediate rewards (fulmen.transitions.air)."""

from __future__ import annotations

import time

from fulmen.dashboard.rollout_detail import rollout_detail
from fulmen.store import open_store
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    LLMChoice,
    RewardCreate,
    RolloutCreate,
)


async def test_each_calls_automatic_signals_are_in_the_reward_breakdown() -> None:
    async with open_store("memory://", watchdog_interval=None) as store:
        await store.enqueue([RolloutCreate(rollout_id="r1", input={"q": 1})])
        (claim,) = await store.claim("w")
        request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        calls = [
            LLMCallCreate(
                call_id=f"c{k}",
                rollout_id="r1",
                attempt_id=claim.attempt.attempt_id,
                request=request,  # the second call repeats the first verbatim
                choices=[LLMChoice(token_ids=[1], logprobs=[-0.1], finish_reason=reason)],
                started_at=time.time(),
            )
            for k, reason in enumerate(["length", "stop"])
        ]
        await store.add_llm_calls(calls)
        await store.add_reward(RewardCreate.scalar(1.0, rollout_id="r1"))
        await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
        view = await rollout_detail(store, "r1")
    assert view["rewards"]["air"] == [
        {"call_index": 0, "call_id": "c0", "signals": {"truncated": 1.0}},
        {"call_index": 1, "call_id": "c1", "signals": {"repeated": 1.0}},
    ]
