"""Store backends for the conformance suite: every test runs against each of them.

``memory``, ``sqlite`` and ``postgresql`` are used in-process; ``http`` and ``http-postgresql``
are the store service (``fulmen.store.server.create_app`` over SQLite, or over PostgreSQL,
served by uvicorn on 127.0.0.1 in a thread by ``tests.store.http_server.serve_store``) reached
through ``StoreClient``. Tests skip by capability, never by backend name. Without PostgreSQL
binaries the PostgreSQL backends skip, except under ``FULMEN_REQUIRE_POSTGRES=1`` (CI), where
they fail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from fulmen.store import Store, open_store
from tests.pg_server import (
    PostgresUnavailable,
    fresh_pg_database,
    is_postgres_required,
    postgres_server,
)
from tests.store.http_server import serve_store

WATCHDOG_INTERVAL = 0.05
HTTP_TOKEN = "test-token"


@dataclass
class Backend:
    """How to open one store under test; ``open()`` may be called again to reopen it."""

    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)

    def open(self, **extra: Any) -> Any:
        return open_store(self.url, **{**self.options, **extra})


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str | None]:
    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable as exc:
        if is_postgres_required():
            pytest.fail(f"FULMEN_REQUIRE_POSTGRES is set but {exc}")
        yield None


@pytest.fixture(params=["memory", "sqlite", "postgresql", "http", "http-postgresql"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Any, pg_url: str | None
) -> AsyncIterator[Backend]:
    name = request.param
    local = {"watchdog_interval": WATCHDOG_INTERVAL}
    if name == "memory":
        yield Backend(name, "memory://", local)
    elif name == "sqlite":
        yield Backend(name, f"sqlite:///{tmp_path / 'store.db'}", local)
    elif name == "postgresql":
        if pg_url is None:
            pytest.skip("PostgreSQL binaries are not installed")
        yield Backend(name, await fresh_pg_database(pg_url), local)
    else:
        served = f"sqlite:///{tmp_path / 'served.db'}"
        if name == "http-postgresql":
            if pg_url is None:
                pytest.skip("PostgreSQL binaries are not installed")
            served = await fresh_pg_database(pg_url)
        with serve_store(served, token=HTTP_TOKEN, watchdog_interval=WATCHDOG_INTERVAL) as url:
            yield Backend(name, url, {"token": HTTP_TOKEN})


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    async with backend.open() as opened:
        yield opened
