"""Store backends for the conformance suite: every test runs against each of them.

``memory``, ``sqlite`` and ``postgresql`` are used in-process; ``http`` is the store service
(``fulmen.store.server.create_app`` over SQLite, served by uvicorn on 127.0.0.1 in a thread)
reached through ``StoreClient``. Tests skip by capability, never by backend name.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from fulmen.store import Store, open_store
from tests.pg_server import PostgresUnavailable, postgres_server

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_store_in_thread(db_url: str, *, token: str | None) -> Iterator[str]:
    """Serve the store at ``db_url`` over HTTP on 127.0.0.1 from a background thread."""
    import uvicorn

    from fulmen.store.server import create_app

    port = _free_port()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def run() -> None:
        async with open_store(db_url, watchdog_interval=WATCHDOG_INTERVAL) as store:
            config = uvicorn.Config(
                create_app(store, token=token),
                host="127.0.0.1",
                port=port,
                log_level="warning",
                lifespan="off",
            )
            server = uvicorn.Server(config)
            holder["server"] = server
            task = asyncio.create_task(server.serve())
            while not server.started and not task.done():
                await asyncio.sleep(0.01)
            started.set()
            await task

    thread = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    thread.start()
    if not started.wait(20):
        raise RuntimeError("store server did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        holder["server"].should_exit = True
        thread.join(20)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str | None]:
    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable:
        yield None


_counter = iter(range(1_000_000))


async def _fresh_pg_database(server_url: str) -> str:
    import asyncpg

    name = f"fulmen_test_{next(_counter)}"
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["memory", "sqlite", "postgresql", "http"])
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
        yield Backend(name, await _fresh_pg_database(pg_url), local)
    else:
        with serve_store_in_thread(f"sqlite:///{tmp_path / 'served.db'}", token=HTTP_TOKEN) as url:
            yield Backend(name, url, {"token": HTTP_TOKEN})


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    async with backend.open() as opened:
        yield opened
