"""Fixtures: a scripted vLLM-like upstream, a memory store and the gateway, all real servers."""

from __future__ import annotations

import faulthandler
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from fulmen.gateway import GatewayConfig, Upstream, create_app
from fulmen.gateway.http1 import Http1Client
from fulmen.gateway.proxy import Gateway
from fulmen.gateway.upstream_client import UpstreamClientFactory
from fulmen.store import open_store
from fulmen.types import LLMCall, LLMCallCreate, Mode, ResourcesCreate, RolloutCreate
from tests.gateway.scripted_upstream import Script, create_upstream_app, serve_app

TIME_LIMIT_S = 120


class SpyStore:
    """A real MemoryStore that also keeps every record passed to ``add_llm_calls``.

    Untracked calls have no rollout to query them by, so tests read them here.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.added: list[LLMCallCreate] = []
        self.write_batches: list[int] = []

    async def add_llm_calls(self, calls: Any) -> list[LLMCall]:
        out = await self._inner.add_llm_calls(calls)
        self.added.extend(calls)
        self.write_batches.append(len(calls))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class Running:
    """A gateway being served, with its parts."""

    url: str
    gateway: Gateway
    store: Any
    script: Script

    def base_url(self, rollout_id: str, attempt_id: str) -> str:
        return f"{self.url}/rollout/{rollout_id}/attempt/{attempt_id}/v1"

    async def calls(self, rollout_id: str) -> list[LLMCall]:
        await self.gateway.flush()
        return (await self.store.query_llm_calls(rollout_id)).items


async def new_attempt(
    store: Any, *, mode: Mode = Mode.TRAIN, resources_version: int | None = None
) -> tuple[str, str]:
    """Enqueue one rollout and claim it; returns (rollout_id, attempt_id)."""
    (rollout,) = await store.enqueue(
        [RolloutCreate(input={"q": 1}, mode=mode, resources_version=resources_version)]
    )
    claims = await store.claim("worker-1", limit=100)
    (claim,) = [c for c in claims if c.rollout.rollout_id == rollout.rollout_id]
    return rollout.rollout_id, claim.attempt.attempt_id


@pytest.fixture(autouse=True)
def time_limit() -> Iterator[None]:
    """Bound every test: a hung one dumps its stacks and ends the run instead of hanging CI."""
    faulthandler.dump_traceback_later(TIME_LIMIT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
async def upstream_url(script: Script) -> AsyncIterator[str]:
    async with serve_app(create_upstream_app(script)) as url:
        yield f"{url}/v1"


@pytest.fixture
async def store() -> AsyncIterator[SpyStore]:
    inner = await open_store("memory://", watchdog_interval=None)
    yield SpyStore(inner)
    await inner.aclose()


@pytest.fixture
def config() -> GatewayConfig:
    return GatewayConfig(flush_interval_s=0.01, connect_retries=0, read_timeout_s=5.0)


@pytest.fixture
def upstream_client() -> UpstreamClientFactory:
    """The gateway's HTTP client of upstream calls (a test module may inject another)."""
    return Http1Client


@pytest.fixture
async def gw(
    store: SpyStore,
    upstream_url: str,
    config: GatewayConfig,
    script: Script,
    upstream_client: UpstreamClientFactory,
) -> AsyncIterator[Running]:
    app = create_app(store, [upstream_url], config=config, upstream_client=upstream_client)
    async with serve_app(app) as url:
        yield Running(url, app.state.gateway, store, script)


async def add_sampling(store: Any, sampling: dict[str, dict[str, Any]]) -> int:
    """Publish resources with one LLM whose sampling is ``sampling``; returns the version."""
    resources = await store.add_resources(
        ResourcesCreate(
            resources={
                "llm": {
                    "kind": "llm",
                    "base_url": "http://unused/v1",
                    "model": "tiny-model",
                    "sampling": sampling,
                }
            }
        )
    )
    return resources.version


@asynccontextmanager
async def gateway_over(
    store: Any, script: Script, config: GatewayConfig, **upstream: Any
) -> AsyncIterator[Running]:
    """A scripted upstream with ``script`` and a gateway in front of it (``upstream`` options)."""
    async with serve_app(create_upstream_app(script)) as upstream_root:
        engine = Upstream(base_url=f"{upstream_root}/v1", **upstream)
        app = create_app(store, [engine], config=config)
        async with serve_app(app) as url:
            yield Running(url, app.state.gateway, store, script)
