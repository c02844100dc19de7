"""Serving an ASGI app with uvicorn as a task of the running event loop.

The trainer's gateway, the dashboard and the replay upstream all run next to other work in one
loop: uvicorn must not install signal handlers there (the owner of the loop handles signals), must
report a failed start instead of leaving a dead task, and must stop when asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import uvicorn

__all__ = ["AppTask", "loopback_socket"]


def loopback_socket() -> socket.socket:
    """Return a TCP socket bound to a free port of 127.0.0.1 (the port is not lost to a race)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class AppTask:
    """An ASGI app served by uvicorn on a socket it owns, as a task of the running loop.

    ``start`` returns once connections are accepted (or raises what stopped the server during
    startup); ``stop`` asks uvicorn to finish running requests and waits up to a timeout. The
    socket is closed by ``stop`` or by a failed ``start``.
    """

    def __init__(self, app: Any, *, name: str, lifespan: Literal["on", "off"] = "off") -> None:
        self._app = app
        self._name = name
        self._lifespan: Literal["on", "off"] = lifespan
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    async def start(self, sock: socket.socket) -> int:
        """Serve on ``sock`` (already bound); return its port once the server accepts."""
        import uvicorn

        config = uvicorn.Config(
            self._app,
            lifespan=self._lifespan,
            ws="none",
            log_config=None,
            access_log=False,
            log_level="warning",
        )
        server = uvicorn.Server(config)
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._server, self._sock = server, sock
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name=self._name)
        while not server.started:
            if self._task.done():
                sock.close()
                self._task.result()  # raises the startup error
                raise RuntimeError(f"{self._name} stopped during startup")
            await asyncio.sleep(0.01)
        return int(sock.getsockname()[1])

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop serving; running requests get up to ``timeout`` seconds to finish."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout):
                    await self._task
        if self._sock is not None:
            self._sock.close()
        self._server = self._task = self._sock = None
