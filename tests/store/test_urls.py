"""Store URLs are read in one place: the scheme, a store service, a SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fulmen.store.urls import is_service_url, sqlite_file, store_scheme


@pytest.mark.parametrize(
    ("url", "scheme", "service", "file"),
    [
        ("runs/a/store.db", "sqlite", False, Path("runs/a/store.db")),
        ("sqlite:////tmp/s.db", "sqlite", False, Path("/tmp/s.db")),
        ("SQLite:///rel.db", "sqlite", False, Path("rel.db")),
        ("sqlite:///:memory:", "sqlite", False, None),
        ("postgresql+psycopg://u@h/db", "postgresql", False, None),
        ("HTTPS://store.example:8443", "https", True, None),
        ("http://127.0.0.1:8000", "http", True, None),
        ("memory://", "memory", False, None),
    ],
)
def test_a_url_says_its_scheme_service_and_file(
    url: str, scheme: str, service: bool, file: Path | None
) -> None:
    assert (store_scheme(url), is_service_url(url), sqlite_file(url)) == (scheme, service, file)


def test_a_home_relative_path_is_expanded() -> None:
    assert sqlite_file("~/store.db") == Path.home() / "store.db"
