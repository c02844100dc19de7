"""Reading parsed JSON without trusting its shape: an object, or an array, or nothing.

Every wire API reads bodies an agent or an engine wrote; a field of the wrong type reads as
absent here instead of raising deep inside a translation.
"""

from __future__ import annotations

from typing import Any, cast

__all__ = ["as_array", "as_object", "nests_deeper_than"]


def as_object(value: object) -> dict[str, Any] | None:
    """Return ``value`` as a JSON object, or ``None`` when it is not one."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def as_array(value: object) -> list[Any]:
    """Return ``value`` as a JSON array; anything else reads as an empty one."""
    return cast("list[Any]", value) if isinstance(value, list) else []


def nests_deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` holds arrays or objects more than ``limit`` levels deep.

    Iterative, so a hostile value cannot exhaust the stack. A parser takes JSON nested far
    deeper than its encoder writes back (orjson: 1,024 levels read, 254 written), so a body
    is checked before anything has to write it again.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[Any] = list(cast("dict[str, Any]", item).values())
        elif isinstance(item, list):
            children = cast("list[Any]", item)
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
