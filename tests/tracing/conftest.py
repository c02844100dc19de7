from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from fulmen.store import Store, open_store
from fulmen.tracing.exporter import StoreSpanExporter
from fulmen.tracing.provider import create_provider, provider_tracer
from fulmen.types import Claim, RolloutCreate


@dataclass
class Tracing:
    store: Store
    exporter: StoreSpanExporter
    tracer: object


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with open_store("memory://", watchdog_interval=None) as s:
        yield s


@pytest.fixture
async def tracing(store: Store) -> AsyncIterator[Tracing]:
    exporter = StoreSpanExporter(store, batch_size=50, interval=0.05)
    exporter.start()
    provider = create_provider(exporter)
    yield Tracing(store, exporter, provider_tracer(provider))
    await exporter.aclose()
    provider.shutdown()


async def claim_many(store: Store, n: int) -> list[Claim]:
    await store.enqueue([RolloutCreate(input={"i": i}) for i in range(n)])
    return await store.claim("w", limit=n)
