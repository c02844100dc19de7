"""StoreClient: retries that never duplicate writes, error mapping, limits, long polls.

The retry tests put a real ASGI wrapper in front of the real app, served by uvicorn: it lets
the store process a write and then fails the response (a 503, or a dropped connection), the
way a crashing proxy or a network cut would. The client must retry, and the store must hold
each write once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from fulmen.errors import (
    Conflict,
    InvalidRequest,
    InvalidTransition,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
    Unauthorized,
)
from fulmen.store import Store, open_store
from fulmen.store.client import StoreClient
from fulmen.store.memory import MemoryStore
from fulmen.store.server import create_app
from fulmen.types import (
    AttemptStatus,
    PromptTemplate,
    ResourcesCreate,
    RolloutCreate,
    RolloutQuery,
    RolloutStatus,
    SpanCreate,
)
from tests.store.http_server import aserve_app, aserve_store


class FailAfterProcessing:
    """Pass requests to ``app``, but after the app handled the first ``failures`` requests
    matching (method, path prefix), throw its answer away and fail instead."""

    def __init__(self, app: Any, method: str, prefix: str, *, mode: str, failures: int = 1) -> None:
        self.app, self.method, self.prefix, self.mode = app, method, prefix, mode
        self.remaining = failures
        self.seen: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        matches = (
            scope["type"] == "http"
            and scope["method"] == self.method
            and scope["path"].startswith(self.prefix)
        )
        if scope["type"] == "http":
            self.seen.append(f"{scope['method']} {scope['path']}")
        if not matches or self.remaining == 0:
            await self.app(scope, receive, send)
            return
        self.remaining -= 1
        captured: list[Any] = []

        async def capture(message: Any) -> None:
            captured.append(message)

        await self.app(scope, receive, capture)  # the store really processes the write
        assert captured[0]["status"] == 200
        if self.mode == "503":
            body = b'{"error": "proxy hiccup", "code": "store_unavailable", "detail": null}'
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif self.mode == "500":  # die before answering: uvicorn sends a plain-text 500
            raise RuntimeError("simulated crash before the answer")
        else:  # "drop": start the answer, then die; uvicorn closes the connection mid-response
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise ConnectionAbortedError("simulated crash after the write")


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    store = await MemoryStore.connect(watchdog_interval=None)
    yield store
    await store.aclose()


@pytest.mark.parametrize("mode", ["503", "500", "drop"])
async def test_retried_writes_are_not_duplicated(store: Store, mode: str) -> None:
    async def run(method: str, prefix: str, action: Any) -> tuple[Any, FailAfterProcessing]:
        proxy = FailAfterProcessing(create_app(store), method, prefix, mode=mode)
        async with aserve_app(proxy) as url:
            client = await StoreClient.connect(url, retries=3)
            try:
                result = await action(client)
            finally:
                await client.aclose()
        assert proxy.remaining == 0, "the failure was not injected"
        return result, proxy

    (rollout,), proxy = await run(
        "POST", "/v1/rollouts", lambda c: c.enqueue([RolloutCreate(input={"q": 1})])
    )
    assert proxy.seen.count("POST /v1/rollouts") == 2  # the write really was sent twice
    await store.enqueue([RolloutCreate(input={"q": 2})])
    page = await store.query_rollouts(RolloutQuery())
    assert [r.input for r in page.items] == [{"q": 1}, {"q": 2}]  # stored once
    assert page.items[0].rollout_id == rollout.rollout_id

    (claim,), _ = await run("POST", "/v1/rollouts/claim", lambda c: c.claim("w1"))
    assert claim.rollout.rollout_id == rollout.rollout_id
    assert (await store.get_rollout(page.items[1].rollout_id)).status is RolloutStatus.QUEUING

    res, _ = await run(
        "POST",
        "/v1/resources",
        lambda c: c.add_resources(ResourcesCreate(resources={"p": PromptTemplate(template="x")})),
    )
    assert (await store.stats()).resources_versions == 1
    assert res.version == 1

    rid, aid = rollout.rollout_id, claim.attempt.attempt_id
    spans = [
        SpanCreate(
            rollout_id=rid, attempt_id=aid, trace_id="t", span_id=f"s{i}", name="n", start_time=1
        )
        for i in range(3)
    ]
    stored, _ = await run("POST", "/v1/spans", lambda c: c.add_spans(spans))
    assert [s.sequence for s in stored] == [1, 2, 3]
    assert [s.sequence for s in (await store.query_spans(rid)).items] == [1, 2, 3]

    attempt, _ = await run(
        "PATCH",
        "/v1/attempts/",
        lambda c: c.update_attempt(aid, status=AttemptStatus.SUCCEEDED, error=None),
    )
    assert attempt.status is AttemptStatus.SUCCEEDED
    assert attempt.late_status is None  # the repeat was recognised, not recorded as late
    assert (await store.get_attempt(aid)).late_status is None

    queued = page.items[1].rollout_id
    cancelled, _ = await run(
        "PATCH",
        "/v1/rollouts/",
        lambda c: c.update_rollout(queued, status=RolloutStatus.CANCELLED),
    )
    assert cancelled.status is RolloutStatus.CANCELLED  # not InvalidTransition on the repeat


async def test_errors_map_to_the_same_classes(store: Store) -> None:
    transport = httpx.ASGITransport(app=create_app(store))
    client = await StoreClient.connect("http://store.test", transport=transport)
    try:
        with pytest.raises(NotFound, match="nope"):
            await client.get_rollout("nope")
        (r,) = await client.enqueue([RolloutCreate(input=1, rollout_id="r1")])
        with pytest.raises(Conflict):
            await client.enqueue([RolloutCreate(input=2, rollout_id="r1")])
        await client.update_rollout(r.rollout_id, status=RolloutStatus.CANCELLED)
        with pytest.raises(InvalidTransition):
            await client.update_rollout(r.rollout_id, status=RolloutStatus.CANCELLED)
        with pytest.raises(InvalidRequest, match="limit"):
            await client.claim("w", limit=0)
        assert client.capabilities.is_remote
        assert not client.capabilities.is_durable  # a memory store, even when served
        assert client.capabilities.is_shared  # but every client of the service shares it
    finally:
        await client.aclose()
    with pytest.raises(InvalidRequest, match="closed"):
        await client.stats()


async def test_auth_via_open_store(store: Store) -> None:
    async with aserve_store(store, token="tok") as url:
        async with open_store(url, token="tok") as client:
            assert (await client.stats()).spans == 0
        async with open_store(url) as anonymous:
            with pytest.raises(Unauthorized):
                await anonymous.stats()


async def test_unreachable_server_raises_store_unavailable() -> None:
    async with aserve_store(await MemoryStore.connect(watchdog_interval=None)) as url:
        client = await StoreClient.connect(url, retries=2, timeout=2)
    # The server is gone now; every try fails to connect.
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="3 tries"):
        await client.stats()
    assert time.monotonic() - started < 5
    await client.aclose()


async def test_payload_limit_is_checked_before_sending(store: Store) -> None:
    async with aserve_store(store, max_body_bytes=4096) as url:
        client = await StoreClient.connect(url)
        (r,) = await client.enqueue([RolloutCreate(input=1)])
        (c,) = await client.claim("w")
        big = SpanCreate(
            rollout_id=r.rollout_id,
            attempt_id=c.attempt.attempt_id,
            trace_id="t",
            span_id="s",
            name="n",
            start_time=1,
            attributes={"blob": "x" * 8000},
        )
        with pytest.raises(PayloadTooLarge, match="4096"):
            await client.add_spans([big])
        await client.aclose()
    assert (await store.stats()).spans == 0


async def test_wait_for_rollouts_long_polls_past_the_server_cap(store: Store) -> None:
    app = create_app(store, max_wait_s=0.2)
    async with aserve_app(app) as url:
        client = await StoreClient.connect(url)
        (r,) = await client.enqueue([RolloutCreate(input=1)])
        (c,) = await client.claim("w")

        async def finish_later() -> None:
            await asyncio.sleep(0.7)
            await store.update_attempt(c.attempt.attempt_id, status=AttemptStatus.SUCCEEDED)

        task = asyncio.create_task(finish_later())
        started = time.monotonic()
        done = await client.wait_for_rollouts([r.rollout_id], timeout=5)
        elapsed = time.monotonic() - started
        await task
        assert [x.status for x in done] == [RolloutStatus.SUCCEEDED]
        assert 0.6 < elapsed < 3  # woke on the change, not at the timeout
        assert await client.wait_for_rollouts([], timeout=0) == []
        await client.aclose()


@pytest.mark.parametrize("mode", ["503", "500", "drop"])
async def test_gives_up_after_the_retries(store: Store, mode: str) -> None:
    proxy = FailAfterProcessing(create_app(store), "GET", "/v1/stats", mode=mode, failures=10)
    async with aserve_app(proxy) as url:
        client = await StoreClient.connect(url, retries=2)
        with pytest.raises(StoreUnavailable):
            await client.stats()
        await client.aclose()
    assert proxy.seen.count("GET /v1/stats") == 3  # the first try and two retries
