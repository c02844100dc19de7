"""Finishing a rollout through the store's own lifecycle: enqueue, claim, record, succeed."""

from __future__ import annotations

import time
from typing import Any

from fulmen.store import Store
from fulmen.tracing import semconv
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    Mode,
    RewardCreate,
    Rollout,
    RolloutCreate,
    SpanCreate,
)


async def finish_rollout(
    store: Store,
    rollout_id: str,
    *,
    task: Any,
    reward: float | None,
    mode: Mode = Mode.TEST,
    reply: str | None = None,
    agent: str | None = None,
    command: dict[str, Any] | None = None,
) -> Rollout:
    """Run one rollout to ``succeeded`` as a worker would, with a reward and optionally a call.

    ``command``: attributes of a ``fulmen.command`` span (how a command agent ended).
    """
    await store.enqueue([RolloutCreate(rollout_id=rollout_id, input=task, mode=mode)])
    (claim,) = await store.claim(f"worker-{rollout_id}", modes=[mode])
    assert claim.rollout.rollout_id == rollout_id
    if reply is not None:
        await store.add_llm_calls(
            [
                LLMCallCreate(
                    call_id=f"call-{rollout_id}",
                    rollout_id=rollout_id,
                    attempt_id=claim.attempt.attempt_id,
                    request={"model": "m", "messages": [{"role": "user", "content": str(task)}]},
                    response={"choices": [{"message": {"role": "assistant", "content": reply}}]},
                    started_at=time.time(),
                    latency_s=0.01,
                    agent_name=agent,
                )
            ]
        )
    if command is not None:
        span = SpanCreate(
            rollout_id=rollout_id,
            attempt_id=claim.attempt.attempt_id,
            trace_id="c" * 32,
            span_id="c" * 16,
            name=semconv.SPAN_COMMAND,
            attributes=command,
            start_time=time.time(),
            end_time=time.time(),
        )
        await store.add_spans([span])
    if reward is not None:
        await store.add_reward(RewardCreate.scalar(reward, rollout_id=rollout_id))
    await store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
    return await store.get_rollout(rollout_id)
