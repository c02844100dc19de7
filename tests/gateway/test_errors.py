"""Failures reach the agent as OpenAI-shaped errors with the right status, and are recorded."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import openai
import pytest

from fulmen.gateway import GatewayConfig, create_app
from fulmen.types import AttemptStatus
from tests.gateway.conftest import Running, SpyStore, gateway_over, new_attempt
from tests.gateway.scripted_upstream import (
    Reply,
    Script,
    create_upstream_app,
    encode,
    free_socket,
    serve_app,
)

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "tiny-model", "messages": MESSAGES}


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert "Traceback" not in response.text
    return error


async def test_upstream_down_is_502_and_recorded(store: SpyStore, config: GatewayConfig) -> None:
    closed = free_socket()  # bound, never listening: connections are refused
    port = closed.getsockname()[1]
    app = create_app(store, [f"http://127.0.0.1:{port}/v1"], config=config)
    try:
        async with serve_app(app) as url:
            rollout_id, attempt_id = await new_attempt(store)
            client = openai.AsyncOpenAI(
                base_url=f"{url}/rollout/{rollout_id}/attempt/{attempt_id}/v1",
                api_key="x",
                max_retries=0,
            )
            async with client:
                with pytest.raises(openai.APIStatusError) as info:
                    await client.chat.completions.create(**CHAT)
            await app.state.gateway.flush()
    finally:
        closed.close()
    assert info.value.status_code == 502
    (call,) = (await store.query_llm_calls(rollout_id)).items
    assert call.error is not None and call.error["code"] == "upstream_unavailable"
    assert call.response is None and not call.is_token_level
    assert call.attempt_id == attempt_id


async def test_slow_upstream_is_504_and_recorded(store: SpyStore, config: GatewayConfig) -> None:
    slow = config.model_copy(update={"read_timeout_s": 0.3})
    async with gateway_over(store, Script(delay_s=1.5), slow) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        async with httpx.AsyncClient() as client:
            r = await client.post(
                f"{gw.base_url(rollout_id, attempt_id)}/chat/completions", json=CHAT
            )
        assert_openai_error(r, 504, "upstream_timeout")
        (call,) = await gw.calls(rollout_id)
    assert call.error is not None and call.error["code"] == "upstream_timeout"


async def test_unknown_rollout_and_attempt_are_404(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    other_rollout, other_attempt = await new_attempt(gw.store)
    async with httpx.AsyncClient() as client:
        for r_id, a_id, needle in (
            ("nope", attempt_id, "unknown rollout 'nope'"),
            (rollout_id, "nope", "unknown attempt 'nope'"),
            (rollout_id, other_attempt, f"belongs to rollout {other_rollout!r}"),
        ):
            r = await client.post(f"{gw.base_url(r_id, a_id)}/chat/completions", json=CHAT)
            error = assert_openai_error(r, 404, "not_found")
            assert needle in error["message"]
    assert gw.script.requests == []


async def test_finished_attempt_is_409(store: SpyStore, config: GatewayConfig) -> None:
    quick = config.model_copy(update={"attempt_ttl_s": 0.0})
    async with gateway_over(store, Script(), quick) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
        async with httpx.AsyncClient() as client:
            assert (await client.post(url, json=CHAT)).status_code == 200
            await store.update_attempt(attempt_id, status=AttemptStatus.SUCCEEDED)
            r = await client.post(url, json=CHAT)
        error = assert_openai_error(r, 409, "attempt_finished")
        assert "succeeded" in error["message"]
        assert len(await gw.calls(rollout_id)) == 1


async def test_malformed_json_is_400(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
    async with httpx.AsyncClient() as client:
        r = await client.post(
            url, content=b"{not json", headers={"content-type": "application/json"}
        )
        assert_openai_error(r, 400, "invalid_request")
        r = await client.post(url, json=[1, 2])
        assert "JSON object" in assert_openai_error(r, 400, "invalid_request")["message"]
    assert gw.script.requests == []


async def test_body_too_large_is_413(store: SpyStore, config: GatewayConfig) -> None:
    small = config.model_copy(update={"max_body_bytes": 2048})
    async with gateway_over(store, Script(), small) as gw, httpx.AsyncClient() as client:
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
        r = await client.post(f"{gw.url}/v1/chat/completions", json=big)
    assert_openai_error(r, 413, "payload_too_large")


async def test_a_chunked_body_too_large_is_refused_before_it_is_all_read(
    store: SpyStore, config: GatewayConfig
) -> None:
    """Without Content-Length the gateway counts the body as it arrives: an agent streaming
    chunks to a 2 KiB limit gets its 413 while still sending (it never has to finish), on a
    recorded endpoint and on a passed-through one, and nothing reaches the engine."""
    small = config.model_copy(update={"max_body_bytes": 2048})
    async with gateway_over(store, Script(), small) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        for endpoint in ("chat/completions", "embeddings"):
            reader, writer = await asyncio.open_connection(host, int(port))
            head = f"POST /v1/{endpoint} HTTP/1.1\r\nhost: {host}\r\n"
            writer.write(f"{head}transfer-encoding: chunked\r\n\r\n".encode())
            # One 64 KiB chunk, past the limit, and never the end of the body: an answer can
            # only come before the body was all read (the old gateway read it all first, so it
            # never answered), and a loaded machine only makes it come later.
            writer.write(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
            await writer.drain()
            answer = b""
            with contextlib.suppress(TimeoutError):
                answer = await asyncio.wait_for(reader.readline(), 30)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 413 "), (endpoint, answer[:80])
    assert gw.script.requests == []


async def test_upstream_error_passes_through_and_is_recorded(gw: Running) -> None:
    rollout_id, attempt_id = await new_attempt(gw.store)
    async with httpx.AsyncClient() as client:
        r = await client.post(
            f"{gw.base_url(rollout_id, attempt_id)}/chat/completions",
            json={"model": "tiny-model", "messages": []},
        )
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "messages must be a non-empty list"
    (call,) = await gw.calls(rollout_id)
    assert call.error == r.json()["error"]


async def test_token_is_required_and_not_sent_upstream(
    store: SpyStore, config: GatewayConfig
) -> None:
    script = Script()
    async with serve_app(create_upstream_app(script)) as upstream:
        app = create_app(store, [f"{upstream}/v1"], token="s3cret", config=config)
        async with serve_app(app) as url:
            async with httpx.AsyncClient() as client:
                r = await client.post(f"{url}/v1/chat/completions", json=CHAT)
                assert_openai_error(r, 401, "unauthorized")
                r = await client.post(
                    f"{url}/v1/chat/completions",
                    json=CHAT,
                    headers={"authorization": "Bearer wrong"},
                )
                assert r.status_code == 401
                assert (await client.get(f"{url}/healthz")).status_code == 200
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="s3cret")
            async with client:
                out = await client.chat.completions.create(**CHAT)
    assert out.choices[0].message.content == "ok"
    assert len(script.requests) == 1
    assert "authorization" not in script.headers[0]


async def test_stream_broken_by_upstream_ends_with_error_event_and_is_recorded(
    store: SpyStore, config: GatewayConfig
) -> None:
    script = Script(break_stream_after=2)
    script.replies.append(Reply(content="a fairly long answer that will not arrive"))
    async with gateway_over(store, script, config) as gw:
        rollout_id, attempt_id = await new_attempt(store)
        url = f"{gw.base_url(rollout_id, attempt_id)}/chat/completions"
        async with httpx.AsyncClient() as client:
            r = await client.post(url, json={**CHAT, "stream": True})
        events = [e for e in r.text.split("\n\n") if e]
        assert r.status_code == 200
        last = json.loads(events[-1].removeprefix("data: "))
        assert last["error"]["code"] == "upstream_unavailable"
        (call,) = await gw.calls(rollout_id)
    assert call.error is not None and call.error["code"] == "upstream_unavailable"
    assert call.is_stream and not call.is_token_level
    assert call.choices[0].token_ids == encode("a fairly")  # what did arrive is kept


async def test_unknown_path_and_method_are_openai_shaped(gw: Running) -> None:
    async with httpx.AsyncClient() as client:
        r = await client.get(f"{gw.url}/nothing/here")
        assert_openai_error(r, 404, "not_found")
        r = await client.request("OPTIONS", f"{gw.url}/v1/chat/completions")
        assert_openai_error(r, 405, "invalid_request")
