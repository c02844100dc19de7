"""Serving the dashboard with uvicorn inside the caller's event loop.

``DashboardServer`` serves it in the running event loop; ``serve_dashboard_while`` is what
``fulmen train`` wraps its run in; ``run_dashboard`` is ``fulmen dashboard``: open the store,
serve until SIGTERM/SIGINT, close the store. Like the
store service, it refuses to listen beyond loopback without a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from fulmen.asgi_task import AppTask
from fulmen.errors import ConfigError
from fulmen.store.service import is_loopback, service_url
from fulmen.store.urls import sqlite_file

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from fulmen.dashboard.debug_api import DebugTools
    from fulmen.store.base import Store
    from fulmen.transitions.trajectory import TransitionOptions

__all__ = ["DashboardServer", "run_dashboard", "serve_dashboard_while"]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_WATCH_S = 0.25  # how often serve_dashboard_while looks for the run's start


class DashboardServer:
    """The dashboard over ``store``, served on ``host``:``port`` until ``aclose``.

    Args:
        store: the store to show (not closed by the server).
        host: address to listen on; anything but loopback requires ``token``.
        port: TCP port, 0 for any free one (``url`` tells which).
        token: bearer token the API requires.
        engine_url: a running engine for the serve action and token texts.
        transition_options: how the trainer builds transitions.
        debug: the training config and reward function of the debugging actions.
    """

    def __init__(
        self,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        engine_url: str | None = None,
        transition_options: TransitionOptions | None = None,
        debug: DebugTools | None = None,
    ) -> None:
        if not token and not is_loopback(host):
            raise ConfigError(
                f"refusing to serve the dashboard on {host!r} without a token: anyone who can "
                "reach it could read the store. Pass --token (or set FULMEN_STORE_TOKEN), or "
                "bind 127.0.0.1."
            )
        self._store = store
        self._host = host
        self._port = port
        self._token = token
        self._engine_url = engine_url
        self._options = transition_options
        self._debug = debug
        self._app: Starlette | None = None
        self._serving: AppTask | None = None
        self.url = ""

    async def start(self) -> str:
        """Start serving; returns the URL once connections are accepted."""
        from fulmen.dashboard.app import create_app

        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self._host.strip("[]"), self._port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot serve the dashboard on {self._host}:{self._port}: {exc.strerror or exc}"
            ) from exc
        app = create_app(
            self._store,
            token=self._token,
            engine_url=self._engine_url,
            transition_options=self._options,
            debug=self._debug,
        )
        self._app = app
        self._serving = AppTask(app, name="fulmen-dashboard")
        port = await self._serving.start(sock)
        self.url = service_url(self._host, port) + "/"
        return self.url

    async def aclose(self) -> None:
        """Stop serving (running requests get a few seconds to finish; jobs are cancelled)."""
        if self._app is not None:
            await self._app.state.jobs.aclose()
            self._app = None
        if self._serving is not None:
            await self._serving.stop(10)
            self._serving = None


async def run_dashboard(
    store_url: str,
    *,
    store_options: dict[str, object],
    host: str = "127.0.0.1",
    port: int = 4780,
    token: str | None = None,
    engine_url: str | None = None,
    debug: DebugTools | None = None,
) -> None:
    """Serve the dashboard over the store at ``store_url`` until SIGTERM or SIGINT."""
    from fulmen.store import open_store

    async with open_store(store_url, **store_options) as store:
        server = DashboardServer(
            store, host=host, port=port, token=token, engine_url=engine_url, debug=debug
        )
        url = await server.start()
        logger.info(
            "fulmen dashboard of %s at %s (auth: %s)",
            store_url,
            url,
            "bearer token" if token else "none (loopback only)",
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await server.aclose()


async def serve_dashboard_while(
    work: Coroutine[Any, Any, _T],
    *,
    store_url: str,
    store_options: dict[str, object],
    announce: Callable[[str], None],
    port: int = 0,
    token: str | None = None,
    transition_options: TransitionOptions | None = None,
    debug: DebugTools | None = None,
) -> _T:
    """Await ``work`` (a training run) with the dashboard served on loopback once it started.

    The dashboard starts when the run shows in its store (a run record or a resources version
    appears or changes; a SQLite file is never created here), so a config error still stops
    ``fulmen train`` before anything starts. It opens its own connection to the store and links
    the engine the run's latest resources name (``engine_url="auto"``); ``announce`` gets its
    URL; ``debug`` (the run's config) enables replay and A/B on its pages. A dashboard that
    cannot start (the port is taken, say) is logged and the run goes on.
    """
    task = asyncio.ensure_future(work)
    options = {
        "port": port,
        "token": token,
        "transition_options": transition_options,
        "debug": debug,
    }
    watcher = asyncio.create_task(
        _serve_once_started(store_url, store_options, announce, options), name="fulmen-dashboard"
    )
    try:
        return await task
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _serve_once_started(
    store_url: str,
    store_options: dict[str, object],
    announce: Callable[[str], None],
    options: dict[str, Any],
) -> None:
    from fulmen.dashboard.app import AUTO_ENGINE
    from fulmen.store import open_store

    try:
        path = sqlite_file(store_url)
        while path is not None and not path.exists():
            await asyncio.sleep(_WATCH_S)
        async with open_store(store_url, **store_options) as store:
            before = await _progress(store)
            while await _progress(store) == before:
                await asyncio.sleep(_WATCH_S)
            server = DashboardServer(store, engine_url=AUTO_ENGINE, **options)
            announce(await server.start())
            try:
                await asyncio.Event().wait()  # until the run ends and cancels this task
            finally:
                await server.aclose()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the run matters more than its dashboard
        logger.warning("the dashboard did not start (%s); training goes on without it", exc)


async def _progress(store: Store) -> tuple[object, ...]:
    """Return what changes when a run starts: its run record, or the resources it publishes."""
    runs = (await store.list_runs(limit=20)).items
    latest = await store.latest_resources()
    return (
        tuple((r.run_id, r.status, r.updated_at) for r in runs),
        latest.version if latest is not None else 0,
    )
