"""Fixtures of the contract tests: the session PostgreSQL server of the store tests."""

from __future__ import annotations

from tests.store.conftest import pg_url

__all__ = ["pg_url"]
