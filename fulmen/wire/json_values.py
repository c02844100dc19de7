"""Reading parsed JSON without trusting its shape: an object, or an array, or nothing.

Every wire API reads bodies an agent or an engine wrote; a field of the wrong type reads as
absent here instead of raising deep inside a translation.
"""

from __future__ import annotations

from typing import Any, cast

__all__ = ["as_array", "as_object"]


def as_object(value: object) -> dict[str, Any] | None:
    """Return ``value`` as a JSON object, or ``None`` when it is not one."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def as_array(value: object) -> list[Any]:
    """Return ``value`` as a JSON array; anything else reads as an empty one."""
    return cast("list[Any]", value) if isinstance(value, list) else []
