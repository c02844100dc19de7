"""A throwaway PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temporary directory.

``FULMEN_TEST_PG_URL`` points tests at an existing server instead. When the binaries are missing
the context manager raises ``PostgresUnavailable`` and the tests that need it are skipped,
unless ``FULMEN_REQUIRE_POSTGRES=1`` (``scripts/test.sh`` sets it under ``CI=true``): then they
fail, so CI cannot go green without running a PostgreSQL test.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PostgresUnavailable", "fresh_pg_database", "is_postgres_required", "postgres_server"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries to start a server with."""


def is_postgres_required() -> bool:
    """True when a missing PostgreSQL must fail the tests instead of skipping them (CI)."""
    return os.environ.get("FULMEN_REQUIRE_POSTGRES", "") not in ("", "0")


def _find_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (base / name).exists():
            return str(base / name)
    raise PostgresUnavailable(f"{name} not found; install PostgreSQL (apt-get install postgresql)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root; drop to the postgres user when we are root.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _start(pg_ctl: str, data: Path, root: Path, *, tries: int = 5) -> int:
    """Start the server on a free port and return it; a port taken meanwhile is tried again.

    The port is free when picked, but another process of a busy test run can bind it before
    the server does (seen in CI: "could not bind IPv4 address ... Address already in use").
    """
    log = root / "log"
    for attempt in range(1, tries + 1):
        port = _free_port()
        seen = log.stat().st_size if log.exists() else 0
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        started = subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if started.returncode == 0:
            return port
        written = log.read_bytes()[seen:].decode(errors="replace") if log.exists() else ""
        if "Address already in use" not in written or attempt == tries:
            raise subprocess.CalledProcessError(
                started.returncode, started.args, stderr=started.stderr + written.encode()
            )
    raise AssertionError("unreachable")


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a PostgreSQL server on 127.0.0.1 and yield its ``postgresql://`` URL."""
    existing = os.environ.get("FULMEN_TEST_PG_URL")
    if existing:
        yield existing
        return
    initdb, pg_ctl = _find_bin("initdb"), _find_bin("pg_ctl")
    root = Path(tempfile.mkdtemp(prefix="fulmen-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    run = {"check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    subprocess.run(
        _as_postgres([initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"]),
        **run,  # type: ignore[arg-type]
    )
    port = _start(pg_ctl, data, root)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        shutil.rmtree(root, ignore_errors=True)


_database_names = itertools.count()


async def fresh_pg_database(server_url: str) -> str:
    """Create an empty database on the server at ``server_url`` and return its URL."""
    import asyncpg

    name = f"fulmen_test_{os.getpid()}_{next(_database_names)}"
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return server_url.rsplit("/", 1)[0] + f"/{name}"
