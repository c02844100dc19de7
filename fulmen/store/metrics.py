"""The store service's ``GET /metrics``, in the Prometheus text format, for alerting.

Each app has its own registry (no process-wide state): request latency by operation and
status class, rollouts handed out by claims, the sizes of the batched span and call writes,
and, read from the store when scraped, rollouts and attempts by status (``timeout`` and
``lost`` attempts are the watchdog's expiries) and the workers it knows. Every service over
one PostgreSQL database reports the same store-wide gauges; the counters are the service's.
``docs/store-api.md`` lists them with example alert rules.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from fulmen.store.base import Store

__all__ = ["CONTENT_TYPE", "StoreMetrics"]

#: The Prometheus text exposition format's content type.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_T = TypeVar("_T")
_R = TypeVar("_R")

_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)


class StoreMetrics:
    """The metrics of one store service (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram(
            "fulmen_store_request_seconds",
            "Time to answer a request, by store operation and status class (2xx, 4xx, 5xx)",
            ["operation", "status"],
            registry=self.registry,
        )
        self.claimed = Counter(
            "fulmen_store_claimed_rollouts",
            "Rollouts handed to workers by claims",
            registry=self.registry,
        )
        self.write_batches = Histogram(
            "fulmen_store_write_batch_size",
            "Records per batched write to the backend (concurrent requests coalesced)",
            ["kind"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.rollouts = Gauge(
            "fulmen_store_rollouts",
            "Rollouts in the store by status (queuing: the queue length)",
            ["status"],
            registry=self.registry,
        )
        self.attempts = Gauge(
            "fulmen_store_attempts",
            "Attempts in the store by status (timeout and lost: the watchdog's expiries)",
            ["status"],
            registry=self.registry,
        )
        self.workers = Gauge(
            "fulmen_store_workers", "Workers the store has heard from", registry=self.registry
        )

    def observe_request(self, operation: str, status: int, started: float) -> None:
        """Count one answered request of ``operation`` begun at ``started`` (perf counter)."""
        elapsed = time.perf_counter() - started
        self.requests.labels(operation, f"{status // 100}xx").observe(elapsed)

    def observe_result(self, operation: str, result: Any) -> None:
        """Count what an operation's result says (the rollouts a claim handed out)."""
        if operation == "claim" and isinstance(result, list):
            self.claimed.inc(len(result))

    def observed_writes(
        self, kind: str, write: Callable[[Sequence[_T]], Awaitable[_R]]
    ) -> Callable[[Sequence[_T]], Awaitable[_R]]:
        """Wrap a backend write so the size of every batch it gets is observed."""

        async def observed(items: Sequence[_T]) -> _R:
            self.write_batches.labels(kind).observe(len(items))
            return await write(items)

        return observed

    async def render(self) -> bytes:
        """Read the store's counts into the gauges and return the whole page."""
        stats = await self._store.stats()
        for status, count in stats.rollouts.items():
            self.rollouts.labels(status.value).set(count)
        for status, count in stats.attempts.items():
            self.attempts.labels(status.value).set(count)
        self.workers.set(stats.workers)
        return generate_latest(self.registry)
