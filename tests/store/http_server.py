"""Serve a store over real HTTP (uvicorn on 127.0.0.1, a free port) for tests.

``aserve_store(store)`` runs the server on the *current* event loop, so a store opened in an
async test or fixture can be served as is (stores hold loop-bound locks and connections).
``serve_store(store_or_url)`` runs it in a background thread with its own loop: pass a URL (the
store is opened and closed in that thread), or a store that nothing else uses meanwhile.
Both yield the base URL and stop the server on exit. ``ServerProcess`` runs the real
``fulmen store serve`` command in a subprocess (crash and CLI tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from fulmen.store import Store, open_store
from fulmen.store.server import DEFAULT_MAX_BODY_BYTES, create_app

__all__ = ["ServerProcess", "aserve_app", "aserve_store", "serve_store"]


def _bound_socket() -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says so, and without it small responses wait ~40 ms for delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _server(app: Any, **options: Any) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        ws="none",
        access_log=False,
        timeout_graceful_shutdown=2,
        **options,
    )
    return uvicorn.Server(config)


@contextlib.asynccontextmanager
async def aserve_store(
    store: Store, *, token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> AsyncIterator[str]:
    """Serve ``store`` on this event loop; yields ``http://127.0.0.1:PORT``."""
    app = create_app(store, token=token, max_body_bytes=max_body_bytes)
    async with aserve_app(app) as url:
        yield url


@contextlib.asynccontextmanager
async def aserve_app(app: Any, **options: Any) -> AsyncIterator[str]:
    """Serve any ASGI app with uvicorn on this event loop; yields ``http://127.0.0.1:PORT``.

    ``options`` go to ``uvicorn.Config`` (e.g. ``timeout_keep_alive``).
    """
    sock = _bound_socket()
    port = sock.getsockname()[1]
    server = _server(app, **options)
    # capture_signals would swap the test process's signal handlers; not wanted here.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("store server stopped during startup")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


@contextlib.contextmanager
def serve_store(store: Store | str, *, token: str | None = None, **options: Any) -> Iterator[str]:
    """Serve a store (or the store at a URL) from a background thread; yields the base URL.

    ``options`` go to ``open_store`` when ``store`` is a URL (e.g. ``watchdog_interval``).
    """
    started = threading.Event()
    stop = threading.Event()
    holder: dict[str, Any] = {}

    async def run() -> None:
        async with contextlib.AsyncExitStack() as stack:
            served = (
                await stack.enter_async_context(open_store(store, **options))
                if isinstance(store, str)
                else store
            )
            holder["url"] = await stack.enter_async_context(aserve_store(served, token=token))
            started.set()
            while not stop.is_set():
                await asyncio.sleep(0.02)

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # surfaced to the caller below
            holder["error"] = exc
            started.set()

    thread = threading.Thread(target=main, name="store-server", daemon=True)
    thread.start()
    if not started.wait(20):
        raise RuntimeError("store server did not start within 20 s")
    if "error" in holder:
        raise RuntimeError("store server failed to start") from holder["error"]
    try:
        yield holder["url"]
    finally:
        stop.set()
        thread.join(20)


class ServerProcess:
    """``fulmen store serve`` in a subprocess on a free port; stderr goes to a file."""

    def __init__(self, db: str, log: Path, *, token: str | None = None) -> None:
        self.log = log
        self._log_file = log.open("ab")
        env = {k: v for k, v in os.environ.items() if k != "FULMEN_STORE_TOKEN"}
        if token is not None:
            env["FULMEN_STORE_TOKEN"] = token
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fulmen", "store", "serve", "--db", db, "--port", "0"],
            env=env,
            stdout=self._log_file,
            stderr=self._log_file,
        )
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 30
        seen = 0
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            match = re.search(r"at (http://127\.0\.0\.1:\d+)", text[seen:])
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"store server exited early:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"store server did not start:\n{self.log.read_text()}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log_file.close()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        finally:
            self._log_file.close()
