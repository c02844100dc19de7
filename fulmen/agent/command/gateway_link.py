"""Outside a sandbox: a Unix socket whose every connection is joined to the gateway's address.

The sandbox's relay (``fulmen.agent.command.relay``) connects here; each connection is piped,
byte for byte, to the one TCP address the rollout may reach (its model URL's host and port).
Nothing in the byte stream is read, so HTTP keep-alive and streaming pass unchanged. At most
``max_connections`` connections are joined at once; one more is closed at once (an agent that
opens thousands would otherwise use up the runner's file descriptors and the gateway's, and
slow every other rollout).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

__all__ = ["GatewayLink"]

_CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until the end, then close the write side.

    Nothing of the bytes is read: HTTP keep-alive and streaming pass unchanged.
    """
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class GatewayLink:
    """A Unix socket at ``path`` leading to ``host:port``; ``async with`` serves it."""

    def __init__(
        self,
        path: Path,
        host: str,
        port: int,
        *,
        uid: int | None = None,
        max_connections: int = 32,
    ) -> None:
        self.path, self.host, self.port, self._uid = path, host, port, uid
        self.max_connections = max_connections
        self.refused = 0  # connections closed for being over ``max_connections``
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def _join(self, inner_r: asyncio.StreamReader, inner_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= self.max_connections:
            self.refused += 1
            inner_w.close()
            return
        self._tasks.add(task)
        try:
            try:
                outer_r, outer_w = await asyncio.open_connection(self.host, self.port)
            except OSError:
                inner_w.close()
                return
            await asyncio.gather(_pipe(inner_r, outer_w), _pipe(outer_r, inner_w))
        finally:
            self._tasks.discard(task)

    async def __aenter__(self) -> GatewayLink:
        self._server = await asyncio.start_unix_server(self._join, path=str(self.path))
        if self._uid is not None:  # the sandboxed command runs as this user and must connect
            os.chown(self.path, self._uid, -1)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
