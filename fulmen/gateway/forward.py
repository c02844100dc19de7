"""Sending a call upstream: engine choice with failover, connection pooling, error mapping.

Only failures where nothing reached an engine (connection refused, connect timeout) are
retried, on the next engine in the pool's order and then in capped, jittered rounds: a model
call is not idempotent, so one that an engine may have started is never sent twice. Replies are
opened as streams; the caller reads them whole or chunk by chunk and closes them.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping

import httpx

from fulmen.gateway.config import GatewayConfig
from fulmen.gateway.errors import UpstreamTimeout, UpstreamUnavailable
from fulmen.gateway.upstreams import Upstream, UpstreamPool

__all__ = ["Forwarder", "UpstreamReply"]

_log = logging.getLogger(__name__)

# Headers that describe one hop, or that httpx sets itself, never copied between hops.
HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "accept-encoding",
        "authorization",
        "date",
        "server",
    }
)


class UpstreamReply:
    """An opened upstream reply; ``aclose`` releases the connection and the in-flight count."""

    def __init__(self, upstream: Upstream, response: httpx.Response, pool: UpstreamPool) -> None:
        self.upstream = upstream
        self.response = response
        self._pool = pool
        self._is_closed = False

    @property
    def status_code(self) -> int:
        """The upstream's HTTP status."""
        return self.response.status_code

    def headers(self) -> dict[str, str]:
        """Response headers worth passing to the agent."""
        return {k: v for k, v in self.response.headers.items() if k.lower() not in HOP_HEADERS}

    async def read(self) -> bytes:
        """Read the whole body, mapping a stalled or broken upstream to 504/502."""
        try:
            return await self.response.aread()
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"upstream {self.upstream.base_url} stalled: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(
                f"upstream {self.upstream.base_url} broke the reply: {exc!r}"
            ) from exc

    def iter_bytes(self) -> AsyncIterator[bytes]:
        """Iterate over the body (errors are ``httpx`` errors; the caller maps them)."""
        return self.response.aiter_bytes()

    async def aclose(self) -> None:
        """Close the reply and count the call as finished (idempotent)."""
        if self._is_closed:
            return
        self._is_closed = True
        self._pool.release(self.upstream)
        await self.response.aclose()


class Forwarder:
    """Sends requests to the pool's engines over one pooled ``httpx.AsyncClient``.

    Args:
        pool: the engines and their state.
        config: timeouts, retries and pool size.
        transport: an ``httpx`` transport to use instead of the network (tests).
    """

    def __init__(
        self,
        pool: UpstreamPool,
        config: GatewayConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._pool = pool
        self._config = config
        timeout = httpx.Timeout(
            config.read_timeout_s, connect=config.connect_timeout_s, pool=config.read_timeout_s
        )
        limits = httpx.Limits(
            max_connections=config.max_connections,
            max_keepalive_connections=config.max_connections,
            keepalive_expiry=config.keepalive_s,
        )
        self._client = httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport)

    async def send(
        self,
        method: str,
        endpoint: str,
        *,
        rollout_id: str | None,
        headers: Mapping[str, str],
        agent_auth: str | None,
        body_for: Callable[[Upstream], bytes | None],
        params: Mapping[str, str] | None = None,
    ) -> UpstreamReply:
        """Open a reply from the first engine that accepts a connection.

        ``body_for`` builds the body for a given engine (token-level engines are asked for ids).
        Raises ``UpstreamUnavailable`` (502) or ``UpstreamTimeout`` (504).
        """
        failures: list[str] = []
        for round_ in range(self._config.connect_retries + 1):
            if round_:
                base = self._config.retry_backoff_s * 2 ** (round_ - 1)
                await asyncio.sleep(min(base, 2.0) * (0.5 + random.random()))
            for upstream in self._pool.ranked(rollout_id):
                request = self._client.build_request(
                    method,
                    upstream.url_for(endpoint),
                    headers=_auth_headers(headers, upstream, agent_auth),
                    content=body_for(upstream),
                    params=params,
                )
                reply = await self._open(upstream, request, failures)
                if reply is not None:
                    return reply
        raise UpstreamUnavailable(f"no upstream reachable for {endpoint}: {'; '.join(failures)}")

    async def _open(
        self, upstream: Upstream, request: httpx.Request, failures: list[str]
    ) -> UpstreamReply | None:
        self._pool.acquire(upstream)
        try:
            response = await self._send(request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            self._pool.release(upstream)
            self._pool.mark_down(upstream)
            failures.append(f"{upstream.base_url}: {exc!r}")
            return None
        except httpx.TimeoutException as exc:
            self._pool.release(upstream)
            raise UpstreamTimeout(
                f"upstream {upstream.base_url} did not answer within {self._config.read_timeout_s}s"
            ) from exc
        except httpx.HTTPError as exc:
            self._pool.release(upstream)
            raise UpstreamUnavailable(f"upstream {upstream.base_url} failed: {exc!r}") from exc
        except BaseException:
            self._pool.release(upstream)
            raise
        return UpstreamReply(upstream, response, self._pool)

    async def _send(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self._client.send(request, stream=True)
        except httpx.RemoteProtocolError as exc:
            # A pooled connection the engine closed while idle: the engine never read the
            # request (it answered nothing), so one resend on a fresh connection is safe.
            if "without sending a response" not in str(exc):
                raise
            _log.debug("upstream closed an idle connection; resending once: %r", exc)
            return await self._client.send(request, stream=True)

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._client.aclose()


def _auth_headers(
    headers: Mapping[str, str], upstream: Upstream, agent_auth: str | None
) -> dict[str, str]:
    out = dict(headers)
    if upstream.api_key is not None:
        out["authorization"] = f"Bearer {upstream.api_key}"
    elif agent_auth is not None:
        out["authorization"] = agent_auth
    return out
