"""``fulmen gateway`` in front of a store that requires a token (flag or environment).

The store is the real store service on 127.0.0.1 with a token; the gateway is the real
command in a subprocess; the engine is the scripted upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx

from fulmen.store import open_store
from tests.gateway.conftest import new_attempt
from tests.gateway.scripted_upstream import Script, create_upstream_app, free_socket, serve_app
from tests.store.http_server import aserve_store

CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}
TOKEN = "store-secret"


@contextlib.asynccontextmanager
async def gateway_process(*args: str, env: dict[str, str]) -> AsyncIterator[str]:
    """Run ``fulmen gateway ARGS`` on a free port until it answers; yields its URL."""
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fulmen", "gateway", *args, "--port", str(port),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(400):
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{url}/healthz")).is_success:
                        break
                await asyncio.sleep(0.05)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), timeout=20)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FULMEN_")}
    return {**env, **extra}


async def test_gateway_records_into_a_store_with_a_token_from_the_environment() -> None:
    async with (
        open_store("memory://", watchdog_interval=None) as store,
        aserve_store(store, token=TOKEN) as store_url,
        serve_app(create_upstream_app(Script())) as upstream,
        gateway_process(
            "--store", store_url, "--upstream", f"{upstream}/v1",
            env=_env(FULMEN_STORE_TOKEN=TOKEN),
        ) as gateway,
        httpx.AsyncClient() as client,
    ):  # fmt: skip
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
        gateway_process(
            "--store", store_url, "--token", "not-the-token", "--upstream", f"{upstream}/v1",
            env=_env(FULMEN_STORE_TOKEN=TOKEN),  # the flag wins over the environment
        ) as gateway,
        httpx.AsyncClient() as client,
    ):  # fmt: skip
        r = await client.post(f"{gateway}/v1/chat/completions", json=CHAT)
        assert r.status_code == 200  # the agent got its answer; its record cannot be stored
        flushed = await client.post(f"{gateway}/gateway/flush")
        assert flushed.status_code == 502
        body = flushed.json()
        assert (body["status"], body["refused"], body["pending"]) == ("failed", 1, 0)
        assert "bearer token" in body["error"]["message"]
