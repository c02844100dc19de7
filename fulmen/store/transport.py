"""A lean HTTP/1.1 transport for httpx: keep-alive connections on asyncio, parsed by httptools.

The store client sends many small requests to one server. httpx's default transport (httpcore
on anyio and h11) spends most of a small request's CPU time in its own layers, and writes the
headers and the body of a request in two system calls, which wakes the server twice. This
transport writes each request in one call, parses answers with httptools (uvicorn's parser),
and keeps idle connections per host for reuse. It speaks plain ``http`` only; ``StoreClient``
uses httpx's own transport for ``https`` or when httptools is missing.

Errors are httpx's: ``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``, ``WriteError``,
``RemoteProtocolError`` — all ``httpx.TransportError``, which the store client retries.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httptools
import httpx

__all__ = ["FastHTTPTransport"]


class _Connection(asyncio.Protocol):
    """One keep-alive connection; answers one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.is_closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._status = 0
        self._keep_alive = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_closed = True
        if not self._done:
            reason = f": {exc!r}" if exc else ""
            self._fail(httpx.RemoteProtocolError(f"server closed the connection{reason}"))

    def eof_received(self) -> bool | None:
        self.is_closed = True
        return None  # let the transport close

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        # Read here: llhttp no longer answers should_keep_alive() once the message is complete.
        self._status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._done = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        self.close()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    def close(self) -> None:
        """Close the socket; the connection is not reused."""
        self.is_closed = True
        if self.transport is not None:
            self.transport.close()

    async def exchange(self, raw: bytes, timeout: float | None) -> tuple[int, list[Any], bytes]:
        """Send one request (already serialized) and read its whole answer."""
        assert self.transport is not None  # set by connection_made before use
        self._reset()
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        try:
            async with asyncio.timeout(timeout):
                await self._waiter
        except TimeoutError:
            self.close()
            raise httpx.ReadTimeout(f"no complete answer within {timeout} s") from None
        except BaseException:
            self.close()  # cancelled mid-answer: the stream is out of step
            raise
        if not self._keep_alive:
            self.close()
        return self._status, self._headers, b"".join(self._body)


class FastHTTPTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` for plain ``http`` with per-host keep-alive pools.

    Args:
        max_connections: requests in flight at once (each holds one connection); more wait.
        max_idle_per_host: idle connections kept per host; more are closed after use.
    """

    def __init__(self, *, max_connections: int = 64, max_idle_per_host: int = 32) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_idle_per_host
        self._is_closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on an idle or new connection and return the buffered answer."""
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"FastHTTPTransport speaks http only: {request.url}")
        if self._is_closed:
            raise RuntimeError("the transport is closed")
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        key = (request.url.host, request.url.port or 80)
        raw = _serialize(request, await request.aread())
        async with self._slots:
            conn = self._take_idle(key) or await self._connect(key, timeouts.get("connect"))
            status, headers, content = await conn.exchange(raw, timeouts.get("read"))
            if not conn.is_closed:
                self._give_back(key, conn)
        return httpx.Response(
            status, headers=headers, content=content, extensions={"http_version": b"HTTP/1.1"}
        )

    def _take_idle(self, key: tuple[str, int]) -> _Connection | None:
        pool = self._idle.get(key)
        while pool:
            conn = pool.pop()
            if not conn.is_closed:
                return conn
        return None

    def _give_back(self, key: tuple[str, int], conn: _Connection) -> None:
        pool = self._idle.setdefault(key, [])
        if len(pool) < self._max_idle:
            pool.append(conn)
        else:
            conn.close()

    async def _connect(self, key: tuple[str, int], timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(_Connection, key[0], key[1])
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {key[0]}:{key[1]} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {key[0]}:{key[1]}: {exc}") from exc
        return conn

    async def aclose(self) -> None:
        """Close every idle connection."""
        self._is_closed = True
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)  # let the loop run the transports' close callbacks


def _serialize(request: httpx.Request, body: bytes) -> bytes:
    target = request.url.raw_path
    lines = [request.method.encode(), b" ", target, b" HTTP/1.1\r\n"]
    has_length = False
    for name, value in request.headers.raw:
        lower = name.lower()
        if lower == b"transfer-encoding":
            continue  # the body is buffered: it is sent with a content-length
        if lower == b"content-length":
            has_length = True
        lines += [name, b": ", value, b"\r\n"]
    if not has_length and (body or request.method in ("POST", "PUT", "PATCH")):
        lines += [b"content-length: ", str(len(body)).encode(), b"\r\n"]
    lines += [b"\r\n", body]
    return b"".join(lines)
