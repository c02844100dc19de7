"""The gateway's HTTP/1.1 client against real sockets: framing, reuse, limits, failures, proxies.

Each test runs a raw ``asyncio`` server on 127.0.0.1 that writes exactly the bytes under test,
so the client meets replies as servers really send them (split, chunked, cut, late, wrong).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import re
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from fulmen.gateway.http1 import (
    BrokenReply,
    ClosedBeforeReply,
    ConnectFailed,
    Http1Client,
    Origin,
    ReadTimeout,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A raw server that counts connections and keeps every request head it read."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.heads: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_now -= 1
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """Read one request (head and Content-Length body); keep its head."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        return await reader.readexactly(int(match.group(1)) if match else 0)


@contextlib.asynccontextmanager
async def serving(handler: Handler | None = None, **tls: ssl.SSLContext) -> AsyncIterator[Server]:
    server = Server(handler or answering(ok()))
    listener = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=tls.get("ssl"))
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        await listener.wait_closed()


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def answering(*replies: bytes, delay_s: float = 0.0) -> Handler:
    """Serve requests on a connection with ``replies`` in turn (the last one repeats)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server: Server = handle.server  # type: ignore[attr-defined]
        for n in range(10_000):
            await server.read_request(reader)
            await asyncio.sleep(delay_s)
            writer.write(replies[min(n, len(replies) - 1)])
            await writer.drain()

    return handle


def client(**kw: float) -> Http1Client:
    options = {"max_connections": 8, "keepalive_s": 5.0, "connect_timeout_s": 2.0}
    options |= {"read_timeout_s": 2.0} | kw
    return Http1Client(ssl_context=ssl.create_default_context, **options)  # type: ignore[arg-type]


def origin(server: Server, scheme: str = "http", proxy: str | None = None) -> Origin:
    return Origin.parse(f"{scheme}://127.0.0.1:{server.port}/v1", proxy)


@contextlib.asynccontextmanager
async def served(handler: Handler) -> AsyncIterator[Server]:
    handler.server = None  # type: ignore[attr-defined]
    async with serving(handler) as server:
        handler.server = server  # type: ignore[attr-defined]
        yield server


async def post(c: Http1Client, o: Origin, body: bytes = b"{}", path: str = "/chat") -> bytes:
    reply = await c.request(o, "POST", path, headers={"content-type": "x"}, body=body)
    try:
        return await reply.read()
    finally:
        reply.release()


async def test_keep_alive_reuses_one_connection_and_sends_one_head() -> None:
    async with served(answering(ok())) as server:
        # Long keep-alive and timeouts: a stalled machine must not let the idle connection
        # expire between two requests (nor a reply time out), which would open another.
        c = client(keepalive_s=30.0, read_timeout_s=30.0, connect_timeout_s=30.0)
        for _ in range(3):
            assert await post(c, origin(server)) == b'{"ok":true}'
        assert server.connections == 1 and c.open_connections == 1
        head = server.heads[0]
        assert head.startswith(b"POST /v1/chat HTTP/1.1\r\nhost: 127.0.0.1:")
        assert b"content-length: 2\r\n" in head and b"accept-encoding: identity\r\n" in head
        await c.aclose()
        assert c.open_connections == 0


async def test_idle_connections_expire_and_keepalive_zero_closes_each() -> None:
    async with served(answering(ok())) as server:
        c = client(keepalive_s=0.05)
        await post(c, origin(server))
        await asyncio.sleep(0.1)
        await post(c, origin(server))
        assert server.connections == 2
        c = client(keepalive_s=0)
        await post(c, origin(server))
        await post(c, origin(server))
        assert server.connections == 4
        assert b"connection: close\r\n" in server.heads[-1]


async def test_chunked_reply_streams_each_chunk_as_it_arrives() -> None:
    arrived = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handle.server.read_request(reader)  # type: ignore[attr-defined]
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await arrived.wait()  # the client must see "first" before the rest is sent
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with served(handle) as server:
        c = client()
        reply = await c.request(origin(server), "POST", "/x", headers={}, body=b"")
        chunks = []
        async for chunk in reply.iter_bytes():
            chunks.append(chunk)
            arrived.set()
        reply.release()
    assert chunks == [b"first", b"second"]
    assert c.open_connections == 1  # read to its end: kept


async def test_a_body_ended_by_closing_the_connection_is_whole() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handle.server.read_request(reader)  # type: ignore[attr-defined]
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of ")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"it")
        await writer.drain()

    async with served(handle) as server:
        c = client()
        assert await post(c, origin(server)) == b"all of it"
        assert c.open_connections == 0


async def test_interim_replies_are_skipped_and_gzip_is_decoded() -> None:
    packed = gzip.compress(b'{"big": "' + b"x" * 5000 + b'"}')
    replies = (
        b"HTTP/1.1 100 Continue\r\n\r\n" + ok(packed, b"content-encoding: gzip\r\n"),
        ok(b"??", b"content-encoding: br\r\n"),
    )
    async with served(answering(*replies)) as server:
        c = client()
        reply = await c.request(origin(server), "POST", "/x", headers={}, body=b"{}")
        assert reply.status == 200 and reply.header("content-encoding") == "gzip"
        assert await reply.read() == b'{"big": "' + b"x" * 5000 + b'"}'
        reply.release()
        with pytest.raises(BrokenReply, match="unsupported content-encoding"):
            await post(c, origin(server))


async def test_silence_is_a_read_timeout_before_and_during_the_body() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handle.server.read_request(reader)  # type: ignore[attr-defined]
        if len(handle.server.heads) == 2:  # type: ignore[attr-defined]
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
            await writer.drain()
        await asyncio.sleep(5)

    async with served(handle) as server:
        c = client(read_timeout_s=0.2)
        with pytest.raises(ReadTimeout):
            await post(c, origin(server))
        reply = await c.request(origin(server), "POST", "/x", headers={}, body=b"")
        with pytest.raises(ReadTimeout):
            await reply.read()
        reply.release()
        assert c.open_connections == 0  # neither connection is reused


async def test_a_reply_cut_short_or_malformed_is_broken_and_its_connection_closed() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handle.server.read_request(reader)  # type: ignore[attr-defined]
        if len(handle.server.heads) == 1:  # type: ignore[attr-defined]
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nnot 100 bytes")
        else:
            writer.write(b"SMTP ready\r\n\r\n")  # not HTTP at all
        await writer.drain()

    async with served(handle) as server:
        c = client()
        reply = await c.request(origin(server), "POST", "/x", headers={}, body=b"")
        with pytest.raises(BrokenReply):
            await reply.read()
        reply.release()
        assert c.open_connections == 0
        with pytest.raises(BrokenReply, match="malformed"):
            await post(c, origin(server))
        assert c.open_connections == 0


async def test_a_close_before_any_reply_says_whether_the_request_was_handled() -> None:
    """On a reused connection the server closing without a byte means it never handled the
    request (``ClosedBeforeReply``: safe to resend); on a fresh one it may have (broken)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server: Server = handle.server  # type: ignore[attr-defined]
        await server.read_request(reader)
        if server.connections == 1:  # first connection: answer once, then hang up on the next
            writer.write(ok())
            await writer.drain()
            await server.read_request(reader)

    async with served(handle) as server:
        c = client()
        await post(c, origin(server))
        with pytest.raises(ClosedBeforeReply):
            await post(c, origin(server))
        with pytest.raises(BrokenReply):
            await post(c, origin(server))


async def test_connections_stay_within_the_limit_and_waiters_get_freed_slots() -> None:
    async with served(answering(ok(), delay_s=0.1)) as server:
        c = client(max_connections=2)
        bodies = await asyncio.gather(*[post(c, origin(server)) for _ in range(5)])
        assert bodies == [b'{"ok":true}'] * 5
        assert server.most_open == 2 and c.open_connections <= 2
        slow = client(max_connections=1, read_timeout_s=0.05)
        results = await asyncio.gather(
            *[post(slow, origin(server)) for _ in range(2)], return_exceptions=True
        )
        assert sum(isinstance(r, ReadTimeout) for r in results) >= 1


async def test_refused_and_unresolvable_are_connect_failures() -> None:
    async with served(answering(ok())) as server:
        port = server.port
    c = client(connect_timeout_s=0.5)
    with pytest.raises(ConnectFailed):
        await post(c, Origin.parse(f"http://127.0.0.1:{port}/v1"))
    with pytest.raises(ConnectFailed):
        await post(c, Origin.parse("http://engine.invalid:8000/v1"))
    assert c.open_connections == 0


async def test_line_breaks_never_reach_the_request_head() -> None:
    async with served(answering(ok())) as server:
        c = client()
        with pytest.raises(ValueError, match="line break"):
            await c.request(origin(server), "POST", "/x", headers={"x": "a\r\nevil: 1"}, body=b"")
        # A decoded path is encoded again: %0D%0A stays inside the request line.
        await post(c, origin(server), path="/chat\r\nevil: 1/ completions%")
        assert server.heads[-1].startswith(
            b"POST /v1/chat%0D%0Aevil:%201/%20completions%25 HTTP/1.1\r\n"
        )
        assert b"\r\nevil" not in server.heads[-1]


async def test_a_slow_reader_pauses_the_connection_and_loses_nothing() -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB, far past the buffer's high-water mark

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handle.server.read_request(reader)  # type: ignore[attr-defined]
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(payload))
        writer.write(payload)
        await writer.drain()
        await reader.read()

    async with served(handle) as server:
        c = client()
        reply = await c.request(origin(server), "POST", "/x", headers={}, body=b"")
        received = bytearray()
        async for chunk in reply.iter_bytes():
            received += chunk
            await asyncio.sleep(0.001)
        reply.release()
    assert bytes(received) == payload


async def test_http_through_a_proxy_uses_the_absolute_form_and_its_credentials() -> None:
    async with served(answering(ok())) as proxy:
        c = client()
        engine = Origin.parse(
            "http://engine.internal:8000/v1", f"http://u%40x:p@127.0.0.1:{proxy.port}"
        )
        assert await post(c, engine) == b'{"ok":true}'
    head = proxy.heads[0]
    assert head.startswith(b"POST http://engine.internal:8000/v1/chat HTTP/1.1\r\n")
    assert b"host: engine.internal:8000\r\n" in head
    assert b"proxy-authorization: Basic dUB4OnA=\r\n" in head  # u@x:p


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (made by the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_directly_and_through_a_connect_tunnel(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    tunnels: list[bytes] = []

    async def tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        tunnels.append(head)
        target = re.match(rb"CONNECT ([^:]+):(\d+) ", head)
        assert target is not None
        up_reader, up_writer = await asyncio.open_connection(target[1].decode(), int(target[2]))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(a: asyncio.StreamReader, b: asyncio.StreamWriter) -> None:
            while data := await a.read(65536):
                b.write(data)
                await b.drain()
            b.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:  # also when the test's loop cancels this handler at its end
            up_writer.close()

    handler = answering(ok(b"secret"))
    handler.server = None  # type: ignore[attr-defined]
    async with serving(handler, ssl=server_side) as engine, serving(tunnel) as proxy:
        handler.server = engine  # type: ignore[attr-defined]
        trusting = ssl.create_default_context(cafile=str(cert))
        c = Http1Client(
            max_connections=4,
            keepalive_s=5,
            connect_timeout_s=5,
            read_timeout_s=5,
            ssl_context=lambda: trusting,
        )
        assert await post(c, origin(engine, "https")) == b"secret"
        via = origin(engine, "https", f"http://user:pw@127.0.0.1:{proxy.port}")
        assert await post(c, via) == b"secret"
        assert await post(c, via) == b"secret"  # the tunnel is kept alive and reused
        await c.aclose()
    assert len(tunnels) == 1
    assert tunnels[0].startswith(f"CONNECT 127.0.0.1:{engine.port} HTTP/1.1\r\n".encode())
    assert b"proxy-authorization: Basic dXNlcjpwdw==\r\n" in tunnels[0]
    # Inside the tunnel the request is in origin form, as to the engine itself.
    assert engine.heads[-1].startswith(b"POST /v1/chat HTTP/1.1\r\n")
