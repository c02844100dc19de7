"""What a store URL names, read in one place: its scheme, a store service, a SQLite file.

A bare path is a SQLite file; ``sqlite:///PATH``, ``postgresql[+driver]://...``,
``http(s)://HOST:PORT`` (a ``fulmen store serve``) and ``memory://`` are the schemes
``open_store`` knows (``fulmen.store``).

>>> store_scheme("runs/x/store.db"), store_scheme("postgresql+psycopg://u@h/db")
('sqlite', 'postgresql')
>>> is_service_url("HTTP://127.0.0.1:8000"), sqlite_file("sqlite:///:memory:")
(True, None)
>>> is_in_memory("MEMORY://"), is_in_memory("runs/x/store.db")
(True, False)
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["is_in_memory", "is_service_url", "sqlite_file", "store_scheme"]


def store_scheme(url: str) -> str:
    """Return the scheme of ``url``, lower-cased and without a driver (``sqlite`` for a path)."""
    if "://" not in url:
        return "sqlite"
    return url.split("://", 1)[0].split("+", 1)[0].lower()


def is_service_url(url: str) -> bool:
    """Say whether ``url`` is a store service (``http://`` or ``https://``): it takes a token."""
    return store_scheme(url) in ("http", "https")


def is_in_memory(url: str) -> bool:
    """Say whether ``url`` is an in-memory store: one process's alone, never shared."""
    return store_scheme(url) == "memory"


def sqlite_file(url: str) -> Path | None:
    """Return the file of a SQLite store (a bare path included); ``None``: not a file."""
    if "://" not in url:
        return Path(url).expanduser()
    if store_scheme(url) != "sqlite":
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return Path(database).expanduser() if database and database != ":memory:" else None
