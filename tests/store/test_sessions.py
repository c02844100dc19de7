"""``Store.record_session``: a closed production session becomes a finished rollout.

Runs on every backend (``conftest.py``).
"""

from __future__ import annotations

import pytest

from fulmen.errors import Conflict
from fulmen.store import Store
from fulmen.transitions.trajectory import load_attempt
from fulmen.types import (
    AttemptStatus,
    LLMCallCreate,
    LLMChoice,
    Mode,
    RewardCreate,
    RolloutCreate,
    RolloutQuery,
    RolloutStatus,
)
from fulmen.types.sessions import SessionCreate


def _call(call_id: str, rollout_id: str, attempt_id: str) -> LLMCallCreate:
    return LLMCallCreate(
        call_id=call_id,
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        endpoint="chat/completions",
        request={"messages": [{"role": "user", "content": "hi"}]},
        response={"id": f"chatcmpl-{call_id}"},
        response_id=f"chatcmpl-{call_id}",
        prompt_token_ids=[1, 2],
        choices=[LLMChoice(text="ok", token_ids=[3], logprobs=[-0.5])],
        is_token_level=True,
        started_at=1.0,
    )


async def test_session_is_a_finished_production_rollout_with_its_calls(store: Store) -> None:
    request = SessionCreate(
        session_id="user-42", attempt_id="at-s1", input={"first": "hi"}, metadata={"calls": 2}
    )
    claim = await store.record_session(request)
    assert claim.rollout.rollout_id == "session-user-42"
    assert claim.rollout.mode is Mode.PRODUCTION
    assert claim.rollout.status is RolloutStatus.SUCCEEDED
    assert claim.attempt.status is AttemptStatus.SUCCEEDED
    assert claim.attempt.number == 1
    await store.add_llm_calls([_call("c1", "session-user-42", "at-s1")])
    await store.add_llm_calls([_call("c2", "session-user-42", "at-s1")])

    stored = await store.get_rollout("session-user-42")
    assert stored.status is RolloutStatus.SUCCEEDED and stored.input == {"first": "hi"}
    page = await store.query_rollouts(RolloutQuery(mode=Mode.PRODUCTION))
    assert [r.rollout_id for r in page.items] == ["session-user-42"]
    # A runner claiming every mode never gets a recorded session.
    await store.enqueue([RolloutCreate(input="task", rollout_id="r-train")])
    claims = await store.claim("runner", limit=10)
    assert [c.rollout.rollout_id for c in claims] == ["r-train"]

    await store.add_reward(RewardCreate.scalar(0.75, session_id="user-42"))
    read = await load_attempt(store, "session-user-42")
    assert [c.call_id for c in read.calls] == ["c1", "c2"]
    assert read.final_reward == 0.75


async def test_retry_stores_once_and_a_returning_session_gets_a_new_attempt(store: Store) -> None:
    first = SessionCreate(session_id="s", attempt_id="at-a")
    stored = await store.record_session(first)
    again = await store.record_session(first)
    assert again.attempt.attempt_id == "at-a" and again.rollout.attempt_count == 1
    later = await store.record_session(SessionCreate(session_id="s", attempt_id="at-b"))
    assert later.attempt.number == 2 and later.rollout.attempt_count == 2
    attempts = await store.list_attempts("session-s")
    assert [a.attempt_id for a in attempts] == ["at-a", "at-b"]
    assert stored.rollout.position == later.rollout.position


async def test_a_rollout_that_is_not_a_session_is_not_mixed_in(store: Store) -> None:
    await store.enqueue([RolloutCreate(input="x", rollout_id="session-taken")])
    with pytest.raises(Conflict, match="not a finished production session"):
        await store.record_session(SessionCreate(session_id="taken", attempt_id="at-x"))
    await store.record_session(SessionCreate(session_id="other", attempt_id="at-y"))
    with pytest.raises(Conflict, match="already belongs"):
        await store.record_session(SessionCreate(session_id="third", attempt_id="at-y"))
