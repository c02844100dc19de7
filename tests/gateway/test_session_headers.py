"""The gateway records the headers clients use to tell sessions and sub-agents apart."""

from __future__ import annotations

import httpx

from fulmen.transitions import TransitionOptions
from fulmen.transitions.trajectory import load_trajectory
from fulmen.types import RewardCreate

from .conftest import Running, new_attempt

MESSAGES = [{"role": "user", "content": "hi"}]


async def test_session_headers_are_recorded_and_select_the_calls_trained(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
    sent = [
        {"X-Claude-Code-Session-Id": "s-1"},
        {"session-id": "codex-1", "thread-id": "t" * 300, "x-unrelated": "no"},
        {},
    ]
    async with httpx.AsyncClient() as client:
        for headers in sent:
            r = await client.post(url, json={"model": "m", "messages": MESSAGES}, headers=headers)
            assert r.status_code == 200, r.text
    calls = await gw.calls(rollout_id)
    assert [c.client_headers for c in calls] == [
        {"x-claude-code-session-id": "s-1"},
        {"session-id": "codex-1", "thread-id": "t" * 256},  # cut to what a record holds
        {},
    ]
    await gw.store.add_reward(RewardCreate.scalar(1.0, rollout_id=rollout_id))
    options = TransitionOptions(calls={"headers": {"session-id": "codex-*"}})
    trajectory = await load_trajectory(gw.store, rollout_id, options=options)
    assert [t.call_ids for t in trajectory.transitions] == [[calls[1].call_id]]
    assert trajectory.diagnostics.skipped_selection == 2
