"""Running the store service: open a backend, serve it with uvicorn, stop cleanly on a signal.

``run_service`` is what ``fulmen store serve`` does. It refuses to listen on anything but a
loopback address without a bearer token, runs the backend's watchdog (timeouts are enforced
even when no client calls), logs one startup line with the URL, and on SIGTERM/SIGINT stops
accepting requests, lets running ones finish, and closes the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import ipaddress
import logging
import signal
import socket
from collections.abc import Iterator

import uvicorn

from fulmen.errors import ConfigError
from fulmen.store import open_store
from fulmen.store.server import DEFAULT_MAX_BODY_BYTES, create_app

__all__ = ["is_loopback", "run_service", "service_url"]

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name could resolve anywhere


def service_url(host: str, port: int) -> str:
    """Return the base URL clients use for a server bound to ``host``:``port``."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve host {host!r}: {exc}") from exc
    # IPPROTO_TCP explicitly, so asyncio turns on TCP_NODELAY for accepted connections.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, minus re-raising the caught signal after shutdown.

    uvicorn re-sends SIGTERM/SIGINT to the process once it stopped, which would kill it before
    the store is closed; here the signal only asks for a graceful stop.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        handled = (signal.SIGINT, signal.SIGTERM)
        for sig in handled:
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)


async def run_service(
    db: str,
    *,
    host: str = "127.0.0.1",
    port: int = 4747,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    watchdog_interval: float = 1.0,
    access_log: bool = False,
) -> None:
    """Serve the store at ``db`` until SIGTERM/SIGINT.

    Args:
        db: store URL or SQLite path (``sqlite:///runs.db``, ``postgresql://...``, ``memory://``).
        host: address to listen on; anything but loopback requires ``token``.
        port: TCP port; 0 picks a free one (the startup line tells which).
        token: bearer token clients must send.
        max_body_bytes: largest accepted request body.
        watchdog_interval: seconds between watchdog passes over the backend.
        access_log: log every request (off by default: it costs throughput).
    """
    if not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without a token: anyone who can reach it could "
            "read and change the store. Pass --token (or set FULMEN_STORE_TOKEN), or bind "
            "127.0.0.1."
        )
    sock = _bind(host, port)
    try:
        async with open_store(db, watchdog_interval=watchdog_interval) as store:
            config = uvicorn.Config(
                create_app(store, token=token or None, max_body_bytes=max_body_bytes),
                lifespan="off",
                ws="none",
                access_log=access_log,
                log_config=None,
                timeout_graceful_shutdown=5,
            )
            server = _Server(config)
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started and not serving.done():
                await asyncio.sleep(0.01)
            if server.started:  # announce only once connections are accepted
                url = service_url(host, sock.getsockname()[1])
                auth = "bearer token" if token else "none (loopback only)"
                loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
                logger.info(
                    "fulmen store serving %s at %s (auth: %s; %s loop, %s parser)",
                    db,
                    url,
                    auth,
                    loop,
                    "httptools" if importlib.util.find_spec("httptools") else "h11",
                )
            await serving
        logger.info("fulmen store stopped; %s closed", db)
    finally:
        sock.close()
