"""``fulmen.gateway.reward_client.post_reward``: delayed rewards to a real gateway from Python."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from fulmen.cli.main import main
from fulmen.errors import Conflict, NotFound, StoreUnavailable
from fulmen.gateway import GatewayConfig, create_app
from fulmen.gateway.capture_config import CaptureConfig, SessionKeyConfig
from fulmen.gateway.reward_client import post_reward
from fulmen.gateway.sessions import HeldReward
from fulmen.transitions.trajectory import load_trajectory
from fulmen.types import Reward, RewardCreate
from tests.gateway.conftest import Running, new_attempt
from tests.gateway.scripted_upstream import serve_app

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_scalar_and_named_rewards_by_response_and_rollout_id_are_stored_once(
    gw: Running,
) -> None:
    rid, aid = await new_attempt(gw.store)
    async with httpx.AsyncClient(trust_env=False) as client:
        reply = await client.post(f"{gw.base_url(rid, aid)}/chat/completions", json=CHAT)
    response_id = reply.json()["id"]
    first = await post_reward(gw.url, RewardCreate.scalar(0.5, response_id=response_id))
    assert isinstance(first, Reward) and first.key.startswith("rw-")  # a key was filled in
    assert (first.rollout_id, first.attempt_id) == (rid, aid)
    named = RewardCreate(
        rollout_id=rid, values={"thumbs": 1.0, "resolved": 0.25}, primary="resolved", key="t-1"
    )
    stored = await post_reward(gw.url, named)
    again = await post_reward(gw.url, named)  # a retry with the same key stores nothing new
    assert isinstance(stored, Reward) and isinstance(again, Reward)
    assert again.sequence == stored.sequence
    assert [r.key for r in await gw.store.list_rewards(rid)] == [first.key, "t-1"]
    assert (await load_trajectory(gw.store, rid)).final_reward == 0.25
    with pytest.raises(Conflict, match="409"):
        await post_reward(gw.url, named.model_copy(update={"values": {"resolved": 1.0}}))
    with pytest.raises(NotFound, match="404"):
        await post_reward(gw.url, RewardCreate.scalar(1.0, rollout_id="no-such-rollout"))


async def test_a_reward_for_a_session_still_open_in_the_gateway_is_held(
    store: Any, upstream_url: str
) -> None:
    capture = CaptureConfig(session=SessionKeyConfig(header="x-session-id", idle_timeout_s=60))
    config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, capture=capture)
    app = create_app(store, [upstream_url], config=config)
    async with serve_app(app) as url, httpx.AsyncClient(trust_env=False) as client:
        reply = await client.post(
            f"{url}/v1/chat/completions", json=CHAT, headers={"x-session-id": "user-9"}
        )
        assert reply.status_code == 200
        held = await post_reward(url, RewardCreate.scalar(1.0, session_id="user-9"))
    assert held == HeldReward(status="held", session_id="user-9")


async def test_no_gateway_is_reported_after_the_retries() -> None:
    with pytest.raises(StoreUnavailable, match="after 2 tries"):
        await post_reward("http://127.0.0.1:9", RewardCreate.scalar(1.0, rollout_id="r"), retries=1)


async def test_fulmen_rewards_add_posts_through_the_gateway_with_its_token(
    store: Any, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = GatewayConfig(flush_interval_s=0.01, connect_retries=0)
    app = create_app(store, [upstream_url], token="gw-secret", config=config)
    rid, _ = await new_attempt(store)
    async with serve_app(app) as url:
        command = ["rewards", "add", "--gateway", url, "--rollout", rid, "--value", "0.75"]
        assert await asyncio.to_thread(main, [*command, "--gateway-token", "gw-secret"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert await asyncio.to_thread(main, command) == 1  # no token: refused, named
    assert "401" in capsys.readouterr().err
    assert printed["rollout_id"] == rid and printed["values"] == {"reward": 0.75}
    assert [r.values for r in await store.list_rewards(rid)] == [{"reward": 0.75}]
