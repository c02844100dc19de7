"""The gateway's upstream calls over ``httpx``, the maintained client, behind ``Http1Client``'s API.

``create_app(..., upstream_client=HttpxClient)`` injects it (``UpstreamClientFactory``). It
exists so the two can be measured against each other in one run
(``benchmarks/gateway_overhead.py --compare-clients``): the gateway keeps its own client only
while that measurement says it is worth its code. Errors are
mapped to ``fulmen.gateway.http1``'s, so the forwarder treats both alike; a proxy comes from
the same ``Origin`` (``HTTP(S)_PROXY`` as read at start), never from httpx's own environment
lookup.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from urllib.parse import quote

import httpx

from fulmen.gateway.http1 import BrokenReply, ConnectFailed, Origin, ReadTimeout

__all__ = ["HttpxClient", "HttpxReply"]

_PATH_SAFE = "/:@!$&'()*+,;=~"
_CLOSING: set[asyncio.Task[None]] = set()  # closes in flight (a task needs a reference)


class HttpxReply:
    """An httpx response with ``Http1Reply``'s surface: status, headers, body, release."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = [(k.lower(), v) for k, v in response.headers.multi_items()]
        self._content: bytes | None = None
        self._is_released = False

    def header(self, name: str) -> str | None:
        """Return the first value of header ``name`` (lower case), or ``None``."""
        return self._response.headers.get(name)

    async def read(self) -> bytes:
        """Return the whole body (raises ``ReadTimeout`` or ``BrokenReply``)."""
        if self._content is None:
            try:
                self._content = await self._response.aread()
            except httpx.TimeoutException as exc:
                raise ReadTimeout(str(exc)) from exc
            except httpx.HTTPError as exc:
                raise BrokenReply(str(exc)) from exc
        return self._content

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """Yield the body as it arrives (raises ``ReadTimeout`` or ``BrokenReply``)."""
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.TimeoutException as exc:
            raise ReadTimeout(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise BrokenReply(str(exc)) from exc

    def release(self) -> None:
        """Give the connection back (httpx closes one whose body was not read to its end)."""
        if not self._is_released:
            self._is_released = True
            # ``aclose`` is a coroutine and ``release`` is not (as ``Http1Reply.release``):
            # the close runs on the loop, kept referenced until it is done.
            task = asyncio.get_running_loop().create_task(self._response.aclose())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)


class HttpxClient:
    """Pooled keep-alive requests through one ``httpx.AsyncClient`` per proxy setting."""

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_s: float,
        connect_timeout_s: float,
        read_timeout_s: float,
        ssl_context: Callable[[], ssl.SSLContext],
    ) -> None:
        self._limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections if keepalive_s > 0 else 0,
            keepalive_expiry=keepalive_s,
        )
        self._timeout = httpx.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=None
        )
        self._ssl_context = ssl_context
        self._clients: dict[str | None, httpx.AsyncClient] = {}

    def _client(self, origin: Origin) -> httpx.AsyncClient:
        proxy = None
        if origin.proxy is not None:
            proxy = f"http://{origin.proxy.host}:{origin.proxy.port}"
        client = self._clients.get(proxy)
        if client is None:
            client = httpx.AsyncClient(
                limits=self._limits,
                timeout=self._timeout,
                verify=self._ssl_context(),
                proxy=proxy,
                trust_env=False,
            )
            self._clients[proxy] = client
        return client

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
    ) -> HttpxReply:
        """Send one request; return once the status line and headers are in (see Http1Client)."""
        host = f"[{origin.host}]" if ":" in origin.host else origin.host
        target = origin.base_path + quote(path, safe=_PATH_SAFE)
        url = f"{origin.scheme}://{host}:{origin.port}{target}"
        if query:
            url += "?" + query.decode("latin-1")
        sent = {**headers, "accept-encoding": "identity"}
        client = self._client(origin)
        try:
            request = client.build_request(method, url, headers=sent, content=body)
            response = await client.send(request, stream=True)
        except httpx.ConnectError as exc:
            raise ConnectFailed(str(exc)) from exc
        except httpx.ConnectTimeout as exc:
            raise ConnectFailed(str(exc)) from exc
        except httpx.TimeoutException as exc:
            raise ReadTimeout(str(exc)) from exc
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
            raise ValueError(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise BrokenReply(str(exc)) from exc
        return HttpxReply(response)

    async def aclose(self) -> None:
        """Close every pooled connection."""
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
