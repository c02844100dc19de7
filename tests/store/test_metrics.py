"""The store service's ``GET /metrics``: every metric appears and moves when its cause happens.

A real memory store served over HTTP on 127.0.0.1, driven through ``StoreClient`` as runners
drive it; the page is parsed with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fulmen.store.client import StoreClient
from fulmen.store.memory import MemoryStore
from fulmen.types import RolloutConfig, RolloutCreate, SpanCreate
from tests.store.http_server import aserve_store

TOKEN = "s3cret"


@pytest.fixture
async def served() -> AsyncIterator[tuple[MemoryStore, str]]:
    store = await MemoryStore.connect(watchdog_interval=None)
    async with aserve_store(store, token=TOKEN) as url:
        yield store, url
    await store.aclose()


async def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the page by name and labels."""
    async with httpx.AsyncClient() as client:
        page = await client.get(f"{url}/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(page.text)
        for s in family.samples
    }


async def test_every_metric_moves_with_its_cause(served: tuple[MemoryStore, str]) -> None:
    store, url = served
    client = await StoreClient.connect(url, token=TOKEN)
    try:
        quick = RolloutConfig(timeout_s=0.01, max_attempts=1)
        await client.enqueue([RolloutCreate(input={"i": i}, config=quick) for i in range(3)])
        before = await scrape(url)
        assert before[("fulmen_store_rollouts", (("status", "queuing"),))] == 3
        assert before[("fulmen_store_claimed_rollouts_total", ())] == 0

        claims = await client.claim("w1", limit=2)
        spans = [
            SpanCreate(
                rollout_id=c.rollout.rollout_id,
                attempt_id=c.attempt.attempt_id,
                trace_id="ab" * 16,
                span_id=f"s{i}",
                name="step",
                start_time=1.0,
            )
            for i, c in enumerate(claims)
        ]
        await client.add_spans(spans)
        await asyncio.sleep(0.05)
        await store.reconcile()  # the watchdog's pass: both attempts are past their timeout
        after = await scrape(url)
    finally:
        await client.aclose()
    assert after[("fulmen_store_claimed_rollouts_total", ())] == 2
    assert after[("fulmen_store_rollouts", (("status", "queuing"),))] == 1
    assert after[("fulmen_store_attempts", (("status", "timeout"),))] == 2  # expiries
    assert after[("fulmen_store_workers", ())] == 1
    assert after[("fulmen_store_write_batch_size_count", (("kind", "spans"),))] == 1
    assert after[("fulmen_store_write_batch_size_sum", (("kind", "spans"),))] == 2
    claim_count = (
        "fulmen_store_request_seconds_count",
        (("operation", "claim"), ("status", "2xx")),
    )
    assert after[claim_count] == 1


async def test_metrics_need_the_token(served: tuple[MemoryStore, str]) -> None:
    _, url = served
    async with httpx.AsyncClient() as client:
        refused = await client.get(f"{url}/metrics")
        bad = await client.get(
            f"{url}/v1/rollouts/nope", headers={"authorization": f"Bearer {TOKEN}"}
        )
    assert refused.status_code == 401 and bad.status_code == 404
    page = await scrape(url)
    key = ("fulmen_store_request_seconds_count", (("operation", "get_rollout"), ("status", "4xx")))
    assert page[key] == 1
