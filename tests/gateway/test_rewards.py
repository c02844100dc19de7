"""``POST /v1/rewards`` on the gateway stores a delayed reward in the gateway's store."""

from __future__ import annotations

import httpx

from fulmen.adapter.transitions import load_trajectory
from tests.gateway.conftest import Running, new_attempt

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
