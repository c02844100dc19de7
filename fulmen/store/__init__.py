"""The store: durable state of rollouts, attempts, spans, LLM calls, resources and workers.

``open_store(url)`` picks a backend by URL scheme and imports it only then:

=========================  ==========================================================
``memory://``              ``MemoryStore`` (tests, dry runs)
``sqlite:///path.db``      ``SqlStore`` on SQLite (embedded default; a bare path works too)
``postgresql://...``       ``SqlStore`` on PostgreSQL (many machines)
``http://host:port``       ``StoreClient`` talking to ``fulmen store serve``
=========================  ==========================================================

It can be awaited (``store = await open_store(url)``; close with ``await store.aclose()``) or
used as ``async with open_store(url) as store:``. Local backends get a watchdog that ends
timed-out and lost attempts in the background; the HTTP client relies on the server's.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Generator
from typing import Any, cast

from fulmen.errors import ConfigError
from fulmen.store.base import Capabilities, ReconcileReport, Store
from fulmen.store.urls import store_scheme
from fulmen.store.watchdog import Watchdog

__all__ = ["Capabilities", "OpenStore", "ReconcileReport", "Store", "Watchdog", "open_store"]

# scheme → "module:callable"; the callable is ``async (url, **options) -> Store``.
_BACKENDS: dict[str, str] = {
    "memory": "fulmen.store.memory:MemoryStore.connect",
    "sqlite": "fulmen.store.sql.store:SqlStore.connect",
    "postgresql": "fulmen.store.sql.store:SqlStore.connect",
    "postgres": "fulmen.store.sql.store:SqlStore.connect",
    "http": "fulmen.store.client:StoreClient.connect",
    "https": "fulmen.store.client:StoreClient.connect",
}


def _load_connector(url: str) -> Callable[..., Awaitable[Store]]:
    scheme = store_scheme(url)
    target = _BACKENDS.get(scheme)
    if target is None:
        known = ", ".join(sorted(_BACKENDS))
        raise ConfigError(f"no store backend for {url!r}; known schemes: {known}")
    module_name, attr_path = target.split(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    return cast("Callable[..., Awaitable[Store]]", obj)


class OpenStore:
    """The result of ``open_store``: await it for a store, or use it as an async context."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._store: Store | None = None

    async def _open(self) -> Store:
        self._store = await _load_connector(self._url)(self._url, **self._options)
        return self._store

    def __await__(self) -> Generator[Any, None, Store]:
        return self._open().__await__()

    async def __aenter__(self) -> Store:
        return await self._open()

    async def __aexit__(self, *exc_info: object) -> None:
        if self._store is not None:
            await self._store.aclose()


def open_store(url: str, **options: Any) -> OpenStore:
    """Open the store at ``url`` (see the module docstring for schemes).

    Args:
        url: where the store lives.
        **options: passed to the backend: ``watchdog_interval`` (seconds between watchdog
            passes of a local backend, default 1.0; ``None`` runs none because another process
            does), ``token`` for the HTTP client.
    """
    return OpenStore(url, options)
