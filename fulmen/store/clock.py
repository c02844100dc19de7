"""The store's clock and id generator: every timestamp and id a store assigns comes from here."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

__all__ = ["new_id", "utc_now"]


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


def new_id(prefix: str) -> str:
    """Return a new random id such as ``ro-3f2a...`` (prefix, dash, 32 hex digits)."""
    return f"{prefix}-{uuid.uuid4().hex}"
