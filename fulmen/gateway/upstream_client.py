"""The HTTP client the forwarder sends upstream calls with: ``Http1Client``, or one injected.

``UpstreamClient`` is what the forwarder needs of a client (``fulmen.gateway.forward``): open a
reply to one request, close every connection. The gateway uses its own, ``Http1Client``
(``fulmen.gateway.http1``); ``create_app(..., upstream_client=...)`` takes any other factory of
the same shape, which is how ``benchmarks/gateway_overhead.py --compare-clients`` measures the
gateway over ``httpx`` (``benchmarks/httpx_upstream.py``) without a product setting for it. A
client reports failures with ``fulmen.gateway.http1``'s errors (``ConnectFailed``,
``ReadTimeout``, ``BrokenReply``, ``ClosedBeforeReply``), which the forwarder maps to 502/504.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

from fulmen.gateway.http1 import Origin

__all__ = ["UpstreamClient", "UpstreamClientFactory", "UpstreamHttpReply"]


class UpstreamHttpReply(Protocol):
    """A reply being received: status and headers at once, the body as it arrives."""

    status: int
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        """Return the first value of header ``name`` (lower case), or ``None``."""
        ...

    async def read(self) -> bytes:
        """Read the whole body."""
        ...

    def iter_bytes(self) -> AsyncIterator[bytes]:
        """Yield the body as it arrives."""
        ...

    def release(self) -> None:
        """Give the connection back (or close it when the body was not read to its end)."""
        ...


class UpstreamClient(Protocol):
    """Sends one request to an origin and opens its reply; closes its connections."""

    async def request(
        self,
        origin: Origin,
        method: str,
        path: str,
        *,
        query: bytes = b"",
        headers: Mapping[str, str],
        body: bytes | None,
        fresh: bool = False,
    ) -> UpstreamHttpReply:
        """Send one request; return once the status line and headers are in."""
        ...

    async def aclose(self) -> None:
        """Close every pooled connection."""
        ...


class UpstreamClientFactory(Protocol):
    """Builds an ``UpstreamClient`` from the gateway's connection settings (``GatewayConfig``)."""

    def __call__(
        self,
        *,
        max_connections: int,
        keepalive_s: float,
        connect_timeout_s: float,
        read_timeout_s: float,
        ssl_context: Callable[[], ssl.SSLContext],
    ) -> UpstreamClient:
        """Return a client with these limits."""
        ...
