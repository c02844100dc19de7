"""What goes over the wire to an engine: the agent's request unchanged, redirects passed back,
and the environment's HTTP proxy honoured (as the gateway's earlier ``httpx`` client did)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import orjson
import pytest

from fulmen.gateway import GatewayConfig, create_app
from tests.gateway.conftest import SpyStore
from tests.gateway.scripted_upstream import serve_app

CHAT = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}
REPLY = orjson.dumps(
    {"id": "x", "object": "chat.completion", "model": "m",
     "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                  "finish_reason": "stop"}]}
)  # fmt: skip


class RawServer:
    """A one-answer-fits-all HTTP/1.1 server that keeps every request exactly as it arrived."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                body = await reader.readexactly(int(match.group(1)) if match else 0)
                self.requests.append((head, body))
                writer.write(self.answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def header(self, index: int, name: bytes) -> bytes | None:
        for line in self.requests[index][0].split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name:
                return value.strip()
        return None


@asynccontextmanager
async def raw_server(answer: bytes) -> AsyncIterator[tuple[RawServer, int]]:
    raw = RawServer(answer)
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    try:
        yield raw, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def json_answer(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + body


async def test_engine_gets_the_agents_request_as_sent_and_redirects_come_back(
    store: SpyStore, config: GatewayConfig
) -> None:
    """A pass-through call keeps its body bytes, query and headers, gets no Content-Type the
    agent did not send, and a redirect goes back to the agent instead of being followed."""
    redirect = (
        b"HTTP/1.1 307 Temporary Redirect\r\nlocation: /v2/embeddings\r\ncontent-length: 0\r\n\r\n"
    )
    async with raw_server(redirect) as (engine, port):
        app = create_app(store, [f"http://127.0.0.1:{port}/v1"], config=config)
        body = b'{"input": "caf\xc3\xa9",  "model": "e"}'  # odd spacing: bytes, not re-encoded
        async with serve_app(app) as url, httpx.AsyncClient() as client:
            r = await client.post(
                f"{url}/v1/embeddings?dimensions=8", content=body, headers={"x-trace": "t-1"}
            )
    assert r.status_code == 307
    assert r.headers["location"] == "/v2/embeddings"
    assert len(engine.requests) == 1  # not followed
    head, sent = engine.requests[0]
    assert head.startswith(b"POST /v1/embeddings?dimensions=8 HTTP/1.1\r\n")
    assert sent == body
    assert engine.header(0, b"x-trace") == b"t-1"
    assert engine.header(0, b"content-type") is None


async def test_engine_is_reached_through_the_environments_proxy(
    store: SpyStore, config: GatewayConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``HTTP_PROXY`` set the call goes to the proxy in absolute form; a host listed in
    ``NO_PROXY`` is connected to directly (here: a name that does not resolve, so 502)."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with raw_server(json_answer(REPLY)) as (proxy, port):
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        proxied = create_app(store, ["http://engine.invalid:8000/v1"], config=config)
        monkeypatch.setenv("NO_PROXY", "engine.invalid")
        direct = create_app(store, ["http://engine.invalid:8000/v1"], config=config)
        async with httpx.AsyncClient(trust_env=False) as client:
            async with serve_app(proxied) as url:
                r = await client.post(f"{url}/v1/chat/completions", json=CHAT)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "ok"
            async with serve_app(direct) as url:
                r = await client.post(f"{url}/v1/chat/completions", json=CHAT)
            assert r.status_code == 502, r.text
    assert len(proxy.requests) == 1
    head = proxy.requests[0][0]
    assert head.startswith(b"POST http://engine.invalid:8000/v1/chat/completions HTTP/1.1\r\n")


async def test_an_engines_cookie_goes_to_its_agent_and_never_to_another(
    store: SpyStore, config: GatewayConfig
) -> None:
    """The gateway keeps no cookie jar: an engine's ``Set-Cookie`` reaches the agent that
    called, the next agent's call carries no cookie, and an agent's own cookie is forwarded."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nset-cookie: session=agent-a\r\n"
    answer = head + b"content-length: %d\r\n\r\n" % len(REPLY) + REPLY
    async with raw_server(answer) as (engine, port):
        # By name: a client's cookie jar keeps cookies of named hosts (aiohttp's skipped IPs).
        app = create_app(store, [f"http://localhost:{port}/v1"], config=config)
        async with serve_app(app) as url:
            replies = []
            for cookie in (None, None, "mine=1"):  # three agents, each with its own client
                async with httpx.AsyncClient() as client:
                    headers = {"cookie": cookie} if cookie else None
                    replies.append(
                        await client.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers)
                    )
    first, second, third = replies
    assert first.headers["set-cookie"] == "session=agent-a"
    assert second.status_code == third.status_code == 200
    assert [engine.header(i, b"cookie") for i in range(3)] == [None, None, b"mine=1"]
