"""The gateway's ``GET /metrics``, in the Prometheus text format, for alerting.

One registry per app (no process-wide state). Model calls are timed as they are answered
(until the reply starts: a stream's length is the agent's); everything else is read from the
gateway's own state when scraped, so the hot path pays one histogram observation per call:
records waiting to be written and the spill file's backlog while the store is away, records
stored, dropped and shed, calls in flight per upstream, requests refused at the trust boundary
by reason, the production sessions held, and a
canary release's calls and sessions per arm and its state.
``docs/production.md`` lists them with example alert rules.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fulmen.types.releases import ReleaseArm, ReleaseState

if TYPE_CHECKING:
    from fulmen.gateway.proxy import Gateway
    from fulmen.gateway.release import ReleaseRouter
    from fulmen.gateway.sessions import CaptureCounters

__all__ = ["CONTENT_TYPE", "GatewayMetrics"]

#: The Prometheus text exposition format's content type.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Endpoints named in the latency label; any other path below ``/v1`` is ``other``.
_ENDPOINTS = frozenset(
    {"chat/completions", "completions", "responses", "messages", "models", "embeddings"}
)


class GatewayMetrics:
    """The metrics of one gateway (see the module docstring)."""

    def __init__(self, gateway: Gateway) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Histogram(
            "fulmen_gateway_call_seconds",
            "Time until a model call's reply starts, by endpoint and status class",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(gateway))

    def observe_call(self, endpoint: str, status: int, started: float) -> None:
        """Count one answered call to ``endpoint`` (below ``/v1``) begun at ``started``."""
        label = endpoint if endpoint in _ENDPOINTS else "other"
        self.calls.labels(label, f"{status // 100}xx").observe(time.perf_counter() - started)

    def render(self) -> bytes:
        """Return the whole page."""
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """Reads the recorder, the upstream pool and production capture at each scrape."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def collect(self) -> Iterator[Metric]:
        gateway = self._gateway
        recorder = gateway.recorder
        queue = recorder.queue
        yield _gauge(
            "fulmen_gateway_records_pending",
            "Call records not yet written to the store",
            len(queue),
        )
        yield _gauge(
            "fulmen_gateway_spill_backlog_records",
            "Call records waiting in the spill file (the store is away or slow)",
            len(queue) - queue.in_memory,
        )
        for name, value, text in (
            ("records", recorder.recorded, "Call records queued for the store"),
            ("records_stored", recorder.stored, "Call records the store took"),
            ("records_dropped", recorder.dropped, "Call records lost (refused or unencodable)"),
            ("records_spilled", queue.spilled, "Call records written to the spill file"),
        ):
            yield CounterMetricFamily(f"fulmen_gateway_{name}", text, value=value)
        in_flight = GaugeMetricFamily(
            "fulmen_gateway_upstream_in_flight", "Calls in flight per upstream", labels=["upstream"]
        )
        for upstream in gateway.pool.upstreams:
            in_flight.add_metric([upstream.base_url], gateway.pool.in_flight(upstream))
        yield in_flight
        refused = CounterMetricFamily(
            "fulmen_gateway_refused",
            "Requests refused at the trust boundary, by reason (an attempt's key used outside "
            "its attempt, a wrong key, a path that is not a model API path)",
            labels=["reason"],
        )
        for reason, count in sorted(gateway.refusals.items()):
            refused.add_metric([reason], count)
        yield refused
        if gateway.capture is not None:
            yield from _capture_metrics(gateway.capture.status())
            if gateway.release is not None:
                yield from _release_metrics(gateway.release, gateway.capture.counters)


def _capture_metrics(status: dict[str, int]) -> Iterator[Metric]:
    sessions = GaugeMetricFamily(
        "fulmen_gateway_sessions",
        "Production sessions open (taking calls) and held (closed, kept for a late reward)",
        labels=["state"],
    )
    sessions.add_metric(["open"], status["sessions_open"])
    sessions.add_metric(["held"], status["sessions_held"])
    yield sessions
    ended = CounterMetricFamily(
        "fulmen_gateway_sessions_ended",
        "Production sessions closed, by what became of them",
        labels=["outcome"],
    )
    for outcome in ("kept", "sampled_out", "rescued", "dropped_from_buffer", "failed"):
        ended.add_metric([outcome], status[f"sessions_{outcome}"])
    yield ended
    yield CounterMetricFamily(
        "fulmen_gateway_calls_shed",
        "Calls whose record was shed by the rate limits (the calls were answered)",
        value=status["calls_shed"],
    )
    yield _gauge(
        "fulmen_gateway_buffered_bytes",
        "Bytes of unsampled sessions held for a possible reward",
        status["buffered_bytes"],
    )


def _release_metrics(release: ReleaseRouter, counters: CaptureCounters) -> Iterator[Metric]:
    calls = CounterMetricFamily(
        "fulmen_gateway_release_calls",
        "Production calls routed to each arm of the canary release",
        labels=["release", "arm"],
    )
    sessions = CounterMetricFamily(
        "fulmen_gateway_release_sessions",
        "Production sessions opened on each arm of the canary release",
        labels=["release", "arm"],
    )
    for arm in ReleaseArm:
        calls.add_metric([release.name, arm.value], release.calls[arm])
        sessions.add_metric([release.name, arm.value], counters.sessions_by_arm[arm.value])
    yield calls
    yield sessions
    state = GaugeMetricFamily(
        "fulmen_gateway_release_state",
        "1 for the state the canary release is in (canary, promoted, rolled_back), else 0",
        labels=["release", "state"],
    )
    for value in ReleaseState:
        state.add_metric([release.name, value.value], float(release.state is value))
    yield state


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)
