"""The gateway uses only the Store protocol: the same flow on SQLite and on the HTTP store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fulmen.gateway import GatewayConfig
from fulmen.store import open_store
from fulmen.types import AttemptStatus
from tests.gateway.conftest import gateway_over, new_attempt
from tests.gateway.scripted_upstream import Reply, Script, encode

MESSAGES = [{"role": "user", "content": "hi"}]


@contextlib.asynccontextmanager
async def backend(kind: str, tmp_path: Path) -> AsyncIterator[Any]:
    if kind == "sqlite":
        async with open_store(f"sqlite:///{tmp_path / 'runs.db'}", watchdog_interval=None) as s:
            yield s
        return
    http_server = pytest.importorskip("tests.store.http_server")
    async with (
        open_store("memory://", watchdog_interval=None) as served,
        http_server.aserve_store(served) as url,
        open_store(url) as client,
    ):
        yield client


@pytest.mark.parametrize("kind", ["sqlite", "http"])
async def test_calls_are_recorded_on_any_backend(kind: str, tmp_path: Path) -> None:
    config = GatewayConfig(flush_interval_s=0.01, connect_retries=0, attempt_ttl_s=0.0)
    script = Script()
    script.replies.extend([Reply(content="first"), Reply(content="second, streamed")])
    async with backend(kind, tmp_path) as store, gateway_over(store, script, config) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        client = openai.AsyncOpenAI(base_url=gw.base_url(rollout_id, attempt_id), api_key="x")
        async with client:
            await client.chat.completions.create(model="tiny-model", messages=MESSAGES)
            stream = await client.chat.completions.create(
                model="tiny-model", messages=MESSAGES, stream=True
            )
            assert "".join([c.choices[0].delta.content or "" async for c in stream]) == (
                "second, streamed"
            )
        calls = await gw.calls(rollout_id)
        assert [c.choices[0].token_ids for c in calls] == [
            encode("first"),
            encode("second, streamed"),
        ]
        assert all(c.is_token_level and c.attempt_id == attempt_id for c in calls)
        assert calls[0].sequence < calls[1].sequence
        await store.update_attempt(attempt_id, status=AttemptStatus.FAILED, error="boom")
        async with httpx.AsyncClient() as http:
            r = await http.post(
                f"{gw.base_url(rollout_id, attempt_id)}/chat/completions",
                json={"model": "tiny-model", "messages": MESSAGES},
            )
        assert r.status_code == 409
