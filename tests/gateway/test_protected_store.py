"""``fulmen gateway`` in front of a store that requires a token (flag or environment).

The store is the real store service on 127.0.0.1 with a token; the gateway is the real
command in a subprocess; the engine is the scripted upstream.
"""

from __future__ import annotations

import os

import httpx

from fulmen.store import open_store
from tests.gateway.conftest import new_attempt
from tests.gateway.gateway_command import gateway_command
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app
from tests.store.http_server import aserve_store

CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}
TOKEN = "store-secret"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
    return {**env, **extra}


async def test_gateway_records_into_a_store_with_a_token_from_the_environment() -> None:
    async with (
        open_store("memory://", watchdog_interval=None) as store,
        aserve_store(store, token=TOKEN) as store_url,
        serve_app(create_upstream_app(Script())) as upstream,
        gateway_command(
            "--store", store_url, "--upstream", f"{upstream}/v1",
            env=_env(FULMEN_STORE_TOKEN=TOKEN),
        ) as command,
        httpx.AsyncClient() as client,
    ):  # fmt: skip
        gateway = command.url
        rollout_id, attempt_id = await new_attempt(store)
        tracked = f"{gateway}/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions"
        r = await client.post(tracked, json=CHAT)
        assert r.status_code == 200, r.text  # the gateway could read the attempt
        assert (await client.post(f"{gateway}/v1/chat/completions", json=CHAT)).status_code == 200
        flushed = await client.post(f"{gateway}/gateway/flush")
        assert (flushed.status_code, flushed.json()) == (200, {"status": "flushed"})
        (call,) = (await store.query_llm_calls(rollout_id)).items
        assert call.attempt_id == attempt_id and call.prompt_token_ids
        health = (await client.get(f"{gateway}/healthz")).json()
        assert health["recorder"] == {"recorded": 2, "stored": 2, "dropped": 0}


async def test_flush_reports_records_the_store_refused() -> None:
    async with (
        open_store("memory://", watchdog_interval=None) as store,
        aserve_store(store, token=TOKEN) as store_url,
        serve_app(create_upstream_app(Script())) as upstream,
        gateway_command(
            "--store", store_url, "--token", "not-the-token", "--upstream", f"{upstream}/v1",
            env=_env(FULMEN_STORE_TOKEN=TOKEN),  # the flag wins over the environment
        ) as command,
        httpx.AsyncClient() as client,
    ):  # fmt: skip
        gateway = command.url
        r = await client.post(f"{gateway}/v1/chat/completions", json=CHAT)
        assert r.status_code == 200  # the agent got its answer; its record cannot be stored
        flushed = await client.post(f"{gateway}/gateway/flush")
        assert flushed.status_code == 502
        body = flushed.json()
        assert (body["status"], body["refused"], body["pending"]) == ("failed", 1, 0)
        assert "bearer token" in body["error"]["message"]
