"""FastHTTPTransport: the store client's keep-alive HTTP/1.1 transport, against real uvicorn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fulmen.store.transport import FastHTTPTransport
from tests.store.http_server import aserve_app

peers: list[Any] = []


async def echo(request: Request) -> Response:
    peers.append(request.scope["client"])
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "raw_path": request.scope["raw_path"].decode(),
            "query": request.scope["query_string"].decode(),
            "body": body.decode(),
            "auth": request.headers.get("authorization"),
        }
    )


async def slow(request: Request) -> Response:
    await asyncio.sleep(2)
    return Response(b"late")


async def streamed(request: Request) -> Response:
    async def parts() -> AsyncIterator[bytes]:
        for i in range(5):
            yield f"part{i};".encode()

    return StreamingResponse(parts())  # sent chunked


APP = Starlette(
    routes=[
        Route("/echo/{rest:path}", echo, methods=["GET", "POST", "PATCH"]),
        Route("/slow", slow),
        Route("/stream", streamed),
    ]
)


@pytest.fixture
async def url() -> AsyncIterator[str]:
    peers.clear()
    async with aserve_app(APP, timeout_keep_alive=1) as base:
        yield base


@pytest.fixture
async def lasting_url() -> AsyncIterator[str]:
    """Like ``url``, but idle connections stay open 30 s.

    The server runs on the test's event loop: with a 1 s keep-alive, a stall of the loaded
    machine between two requests would close the connection and make the client reconnect.
    """
    peers.clear()
    async with aserve_app(APP, timeout_keep_alive=30) as base:
        yield base


async def test_requests_round_trip_on_one_connection(lasting_url: str) -> None:
    async with httpx.AsyncClient(base_url=lasting_url, transport=FastHTTPTransport()) as client:
        for i in range(5):
            response = await client.post(
                "/echo/a%2Fb", params={"q": f"x y{i}"}, content=f"body{i}".encode(),
                headers={"authorization": "Bearer t"},
            )  # fmt: skip
            assert response.status_code == 200
            assert response.json() == {
                "method": "POST",
                "raw_path": "/echo/a%2Fb",
                "query": f"q=x+y{i}",
                "body": f"body{i}",
                "auth": "Bearer t",
            }
        assert (await client.get("/echo/x")).json()["body"] == ""
    assert len(set(peers)) == 1  # keep-alive: every request on the same connection


async def test_reconnects_after_the_server_closed_an_idle_connection(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, transport=FastHTTPTransport()) as client:
        assert (await client.get("/echo/1")).status_code == 200
        await asyncio.sleep(1.6)  # past uvicorn's keep-alive timeout: it closes the socket
        assert (await client.get("/echo/2")).status_code == 200
    assert len(set(peers)) == 2


async def test_chunked_response_is_decoded(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, transport=FastHTTPTransport()) as client:
        response = await client.get("/stream")
    assert response.content == b"part0;part1;part2;part3;part4;"


async def test_streamed_request_body_is_sent_with_a_length(url: str) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cd"

    async with httpx.AsyncClient(base_url=url, transport=FastHTTPTransport()) as client:
        response = await client.post("/echo/x", content=parts())
    assert response.json()["body"] == "abcd"


async def test_read_timeout(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, transport=FastHTTPTransport()) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/slow", timeout=0.3)
        assert (await client.get("/echo/after")).status_code == 200  # a fresh connection


async def test_connect_error_and_https_refusal() -> None:
    async with aserve_app(APP) as base:
        pass  # the port is free again now
    async with httpx.AsyncClient(base_url=base, transport=FastHTTPTransport()) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/echo/x")
        with pytest.raises(httpx.UnsupportedProtocol):
            await client.get("https://127.0.0.1:1/")
