"""Attempt keys at the gateway: a key opens its own attempt's model paths and rewards, nothing else.

Real servers: a scripted upstream, a memory store and the gateway with a token; the keys are
minted as the runner mints them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from fulmen.gateway import GatewayConfig, create_app
from fulmen.types import AttemptStatus, Mode
from fulmen.types.attempt_keys import mint_attempt_key, read_attempt_key
from tests.gateway.conftest import Running, SpyStore, new_attempt
from tests.gateway.scripted_upstream import Script, serve_app

TOKEN = "the-gateway-token"
CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def guarded(
    store: SpyStore, upstream_url: str, config: GatewayConfig, script: Script
) -> AsyncIterator[Running]:
    # No cached status: an attempt that ended is seen at once.
    config = config.model_copy(update={"attempt_ttl_s": 0.0})
    app = create_app(store, [upstream_url], token=TOKEN, config=config)
    async with serve_app(app) as url:
        yield Running(url, app.state.gateway, store, script)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_key_names_its_attempt_and_cannot_be_forged() -> None:
    key = mint_attempt_key(TOKEN, "rollout-1", "attempt-1")
    assert read_attempt_key(TOKEN, key) == ("rollout-1", "attempt-1")
    assert read_attempt_key("another-token", key) is None
    # Another attempt's ids with this key's MAC; a bit flipped; another format.
    prefix, rollout, attempt, mac = key.split(".")
    other = mint_attempt_key(TOKEN, "rollout-2", "attempt-1").split(".")[1]
    assert read_attempt_key(TOKEN, f"{prefix}.{other}.{attempt}.{mac}") is None
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    assert read_attempt_key(TOKEN, f"{prefix}.{rollout}.{attempt}.{flipped}") is None
    for junk in ("", TOKEN, "fk1.", "fk1.a.b", "fk1.!!.!!.!!", "fk1.\u00e9.a.b"):
        assert read_attempt_key(TOKEN, junk) is None
    # Ids with dots, slashes and non-ASCII survive the round trip.
    odd = mint_attempt_key(TOKEN, "ro.1/ü", "at:2")
    assert read_attempt_key(TOKEN, odd) == ("ro.1/ü", "at:2")


async def test_a_key_calls_its_own_attempt_only(guarded: Running) -> None:
    mine = await new_attempt(guarded.store)
    theirs = await new_attempt(guarded.store)
    key = mint_attempt_key(TOKEN, *mine)
    async with httpx.AsyncClient(timeout=10) as client:
        own = await client.post(
            f"{guarded.base_url(*mine)}/chat/completions", json=CHAT, headers=auth(key)
        )
        other = await client.post(
            f"{guarded.base_url(*theirs)}/chat/completions", json=CHAT, headers=auth(key)
        )
        anthropic = await client.post(
            f"{guarded.base_url(*theirs)}/messages",
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
            headers={"x-api-key": key},
        )
        untracked = await client.post(
            f"{guarded.url}/v1/chat/completions", json=CHAT, headers=auth(key)
        )
        metrics = await client.get(f"{guarded.url}/metrics", headers=auth(key))
        flush = await client.post(f"{guarded.url}/gateway/flush", headers=auth(key))
        health = await client.get(f"{guarded.url}/healthz", headers=auth(key))
        full = await client.get(f"{guarded.url}/healthz", headers=auth(TOKEN))
        wrong = await client.post(
            f"{guarded.base_url(*mine)}/chat/completions", json=CHAT, headers=auth("nope")
        )
    assert own.status_code == 200
    assert other.status_code == 403 and other.json()["error"]["code"] == "key_refused"
    assert anthropic.status_code == 403 and anthropic.json()["type"] == "error"  # its shape
    assert untracked.status_code == metrics.status_code == flush.status_code == 403
    assert health.json() == {"status": "ok"}  # liveness only without the token
    assert "upstreams" in full.json()
    assert wrong.status_code == 401
    assert len(await guarded.calls(mine[0])) == 1
    assert await guarded.calls(theirs[0]) == []
    assert guarded.gateway.refusals == {
        "other_attempt": 2,
        "not_attempt_path": 3,
        "wrong_key": 1,
    }


async def test_a_key_expires_with_its_attempt(guarded: Running) -> None:
    rollout_id, attempt_id = await new_attempt(guarded.store)
    key = mint_attempt_key(TOKEN, rollout_id, attempt_id)
    await guarded.store.update_attempt(attempt_id, status=AttemptStatus.SUCCEEDED)
    async with httpx.AsyncClient(timeout=10) as client:
        call = await client.post(
            f"{guarded.base_url(rollout_id, attempt_id)}/chat/completions",
            json=CHAT,
            headers=auth(key),
        )
        reward = await client.post(
            f"{guarded.url}/v1/rewards",
            json={"rollout_id": rollout_id, "values": {"reward": 1.0}},
            headers=auth(key),
        )
        # The trainer's token still gets the finished attempt's usual answer.
        trusted = await client.post(
            f"{guarded.base_url(rollout_id, attempt_id)}/chat/completions",
            json=CHAT,
            headers=auth(TOKEN),
        )
    assert call.status_code == reward.status_code == 403
    assert "expired" in call.json()["error"]["message"]
    assert trusted.status_code == 409
    assert guarded.gateway.refusals["attempt_ended"] == 2


async def test_rewards_are_the_keys_own_and_in_range(guarded: Running) -> None:
    mine = await new_attempt(guarded.store)
    theirs = await new_attempt(guarded.store)
    key = mint_attempt_key(TOKEN, *mine)
    url = f"{guarded.url}/v1/rewards"

    async def post(body: dict[str, Any], key: str = key) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.post(url, json=body, headers=auth(key))

    assert (await post({"rollout_id": theirs[0], "values": {"reward": 1.0}})).status_code == 403
    by_response = await post({"response_id": "chatcmpl-1", "values": {"reward": 1.0}})
    assert by_response.status_code == 403
    huge = await post({"rollout_id": mine[0], "values": {"reward": 1e300}})
    assert huge.status_code == 422 and huge.json()["error"]["param"] == "values.reward"
    assert (await post({"rollout_id": mine[0], "values": {"reward": 0.5}})).status_code == 200
    # The trainer's token is bound by the range too, not by the rollout.
    assert (await post({"rollout_id": theirs[0], "values": {"r": 2e6}}, TOKEN)).status_code == 422
    assert (await post({"rollout_id": theirs[0], "values": {"r": 2.0}}, TOKEN)).status_code == 200
    assert [r.values for r in await guarded.store.list_rewards(mine[0])] == [{"reward": 0.5}]
    assert [r.values for r in await guarded.store.list_rewards(theirs[0])] == [{"r": 2.0}]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "load_lora_adapter"),
        ("POST", "unload_lora_adapter"),
        ("POST", "reload_weights"),
        ("POST", "chat/completions/%2e%2e/%2e%2e/load_lora_adapter"),
        ("GET", "models/%2e%2e/%2e%2e/health"),  # decoded by the server, not the client
        ("POST", "tokenize"),
        ("PUT", "chat/completions"),
    ],
)
async def test_only_model_paths_reach_the_engine(gw: Running, method: str, path: str) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    async with httpx.AsyncClient(timeout=10) as client:
        for base in (gw.base_url(rollout_id, attempt_id), f"{gw.url}/v1"):
            response = await client.request(method, f"{base}/{path}", json={})
            assert response.status_code == 404, (base, path, response.text)
            assert response.json()["error"]["code"] == "not_found"
        models = await client.get(f"{gw.base_url(rollout_id, attempt_id)}/models")
    assert models.status_code == 200
    assert gw.gateway.refusals["not_model_path"] == 2
    assert gw.script.requests == []  # nothing reached the upstream


async def test_a_rollouts_calls_in_flight_and_choices_are_capped(
    store: SpyStore, upstream_url: str, script: Script
) -> None:
    import asyncio

    script.delay_s = 1.0
    config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, max_calls_per_rollout=3)
    app = create_app(store, [upstream_url], config=config)
    async with serve_app(app) as url:
        gw = Running(url, app.state.gateway, store, script)
        mine = await new_attempt(store, mode=Mode.TRAIN)
        other = await new_attempt(store, mode=Mode.TRAIN)
        async with httpx.AsyncClient(timeout=10) as client:

            async def call(ids: tuple[str, str], body: dict[str, Any] = CHAT) -> int:
                response = await client.post(f"{gw.base_url(*ids)}/chat/completions", json=body)
                return response.status_code

            statuses = await asyncio.gather(*(call(mine) for _ in range(6)), call(other))
            many = await call(mine, {**CHAT, "n": 17})
    assert sorted(statuses[:6]) == [200, 200, 200, 429, 429, 429]
    assert statuses[6] == 200  # another rollout is not slowed by it
    assert many == 400
    assert gw.gateway.refusals["too_many_calls"] == 3
    assert gw.gateway.rollout_calls == {}  # every slot given back


async def test_the_key_in_the_url_opens_its_attempt_whatever_key_the_client_sends(
    guarded: Running,
) -> None:
    from fulmen.agent.context import rollout_base_url

    mine = await new_attempt(guarded.store)
    theirs = await new_attempt(guarded.store)
    key = mint_attempt_key(TOKEN, *mine)
    url = rollout_base_url(guarded.url, *mine, key)
    assert f"/attempt/{mine[1]}/key/" in url
    # The same key in another attempt's path, and a forged one, open nothing.
    stolen = url.replace(mine[0], theirs[0]).replace(mine[1], theirs[1])
    forged = url[: url.index("/key/") + 5] + "AAAA" + "/v1"
    async with httpx.AsyncClient(timeout=10) as client:
        placeholder = await client.post(
            f"{url}/chat/completions", json=CHAT, headers=auth("sk-placeholder")
        )
        bare = await client.post(f"{url}/chat/completions", json=CHAT)
        other = await client.post(f"{stolen}/chat/completions", json=CHAT)
        wrong = await client.post(f"{forged}/chat/completions", json=CHAT)
    assert placeholder.status_code == bare.status_code == 200
    assert other.status_code == wrong.status_code == 401
    assert len(await guarded.calls(mine[0])) == 2
    assert await guarded.calls(theirs[0]) == []
