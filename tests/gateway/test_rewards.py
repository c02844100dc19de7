"""``POST /v1/rewards`` on the gateway stores a delayed reward in the gateway's store."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from fulmen.gateway import GatewayConfig, create_app
from fulmen.store import rewards as rewards_module
from fulmen.transitions.trajectory import load_trajectory
from fulmen.types import AttemptStatus, Mode, Reward, RolloutCreate
from fulmen.types.rewards import session_rollout_id
from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import serve_app

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_a_reward_named_by_response_id_right_after_the_call_is_stored(
    gw: Running,
) -> None:
    rid, aid = await new_attempt(gw.store)
    async with httpx.AsyncClient(trust_env=False) as client:
        reply = await client.post(f"{gw.base_url(rid, aid)}/chat/completions", json=CHAT)
        assert reply.status_code == 200
        response_id = reply.json()["id"]
        # No flush by the test: the route itself waits for the call's record to be stored.
        posted = await client.post(
            f"{gw.url}/v1/rewards",
            json={"response_id": response_id, "values": {"reward": 0.5}, "key": "fb-1"},
        )
        assert posted.status_code == 200, posted.text
        assert (posted.json()["rollout_id"], posted.json()["attempt_id"]) == (rid, aid)
        again = await client.post(
            f"{gw.url}/v1/rewards",
            json={"response_id": response_id, "values": {"reward": 0.9}, "key": "fb-1"},
        )
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "conflict"
        bad = await client.post(f"{gw.url}/v1/rewards", json={"values": {"reward": 1}})
        assert bad.status_code == 422
        assert "exactly one" in bad.json()["error"]["message"]
    trajectory = await load_trajectory(gw.store, rid)
    assert trajectory.final_reward == 0.5
    assert len(gw.script.requests) == 1  # the rewards never reached the upstream


async def test_a_reward_posted_an_hour_after_a_production_session_ended_reaches_its_transitions(
    gw: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A finished production session as the gateway stores it: rollout ``session-<id>``, mode
    # production, its calls recorded with token ids and logprobs, no reward at the end.
    rollout_id = session_rollout_id("user-7")
    await gw.store.enqueue([RolloutCreate(input={}, mode=Mode.PRODUCTION, rollout_id=rollout_id)])
    (claim,) = await gw.store.claim("gateway")
    async with httpx.AsyncClient(trust_env=False) as client:
        reply = await client.post(
            f"{gw.base_url(rollout_id, claim.attempt.attempt_id)}/chat/completions", json=CHAT
        )
        assert reply.status_code == 200
        await gw.gateway.flush()
        await gw.store.update_attempt(claim.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)
        ended = (await gw.store.get_rollout(rollout_id)).ended_at
        assert ended is not None
        before = await load_trajectory(gw.store, rollout_id)
        assert before.final_reward is None and before.transitions == []
        # The store's clock, an hour later and then a day later: nothing sleeps.
        for delay, value in ((timedelta(hours=1), 0.25), (timedelta(days=1), 1.0)):
            monkeypatch.setattr(rewards_module, "utc_now", lambda d=delay: ended + d)
            posted = await client.post(
                f"{gw.url}/v1/rewards",
                json={"session_id": "user-7", "values": {"thumbs": value}, "key": f"fb-{delay}"},
            )
            assert posted.status_code == 200, posted.text
            stored = Reward.model_validate(posted.json())
            assert stored.created_at - ended == delay
            after = await load_trajectory(gw.store, rollout_id)
            # The latest reward is the rollout's: every transition carries it.
            assert after.final_reward == value
            assert len(after.transitions) == 1
            assert [t.rollout_reward for t in after.transitions] == [value]
            assert after.transitions[0].completion_token_ids  # a token-level call, trainable


async def test_a_reward_body_above_the_gateway_limit_is_refused_with_413(
    store: Any, upstream_url: str
) -> None:
    config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, max_body_bytes=1024)
    app = create_app(store, [upstream_url], config=config)
    async with serve_app(app) as url, httpx.AsyncClient(trust_env=False) as client:
        big = {"rollout_id": "r", "values": {"reward": 1.0}, "metadata": {"note": "x" * 2048}}
        reply = await client.post(f"{url}/v1/rewards", json=big)
    assert reply.status_code == 413
    assert reply.json()["error"]["code"] == "payload_too_large"
