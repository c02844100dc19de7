"""Fixtures for the SQL backend tests: a fresh SQLite file or PostgreSQL database per test.

PostgreSQL comes from the session server of ``tests/store/conftest.py`` (``pg_url``); tests on
it are skipped when no PostgreSQL binaries are installed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.pg_server import fresh_pg_database


@pytest.fixture(params=["sqlite", "postgresql"])
async def sql_url(
    request: pytest.FixtureRequest, tmp_path: Path, pg_url: str | None
) -> AsyncIterator[str]:
    """A URL of an empty SQL store, one per dialect."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        if pg_url is None:
            pytest.skip("PostgreSQL binaries are not installed")
        yield await fresh_pg_database(pg_url)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """Where a SQLite store file may be created."""
    return tmp_path / "store.db"
