"""What storage can hold, as pydantic types: the store's one validation boundary.

Every wire type builds its fields from these, so a value the store acknowledges is one that
every backend (memory, SQLite, PostgreSQL) can write and read back unchanged:

* floats are finite (JSON allows ``1e400``, which parses to ``inf``; ``NaN``/``Infinity`` are not
  JSON at all, and the databases store them as ``NULL`` or refuse them);
* integers fit the column they go to (``INTEGER`` for resources versions, ``BIGINT`` for
  positions and sequence numbers);
* strings that become columns hold no NUL character (PostgreSQL's ``text`` cannot) and no more
  characters than their column;
* free-form JSON (task input, metadata, attributes, call bodies) holds only finite numbers.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Final, TypeAlias

from pydantic import AfterValidator, Field, JsonValue, StringConstraints

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_ID_LENGTH",
    "FiniteFloat",
    "Id",
    "Int32",
    "Int64",
    "JsonData",
    "Label",
    "TaskId",
    "Text",
    "TraceId",
    "WorkerId",
]

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
MAX_ID_LENGTH: Final = 128

# ECMA-262 and Python regex syntax alike, so the OpenAPI spec states the rule the server applies.
_NO_NUL = "^[^\\u0000]*$"

FiniteFloat: TypeAlias = Annotated[float, Field(allow_inf_nan=False)]
"""A float that is neither infinite nor NaN."""

Int32: TypeAlias = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
"""An integer that fits a 32-bit ``INTEGER`` column."""

Int64: TypeAlias = Annotated[int, Field(ge=-(2**63), le=INT64_MAX)]
"""An integer that fits a 64-bit ``BIGINT`` column."""


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(
            f"must not contain NUL characters (\\u0000); found at index {value.index(chr(0))}"
        )
    return value


# The check is a validator (for a message that names the rule); the pattern states it in the
# JSON schema, so the OpenAPI spec and property-based clients know it.
_REJECT_NUL = AfterValidator(_no_nul)
_NUL_PATTERN = Field(json_schema_extra={"pattern": _NO_NUL})

Text: TypeAlias = Annotated[str, _REJECT_NUL, _NUL_PATTERN]
"""A string without NUL characters (it goes to a text column)."""

Id: TypeAlias = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ID_LENGTH), _REJECT_NUL, _NUL_PATTERN
]
"""A rollout, attempt, call, claim or resources id: 1 to 128 characters, no NUL."""

WorkerId: TypeAlias = Annotated[
    str, StringConstraints(min_length=1, max_length=256), _REJECT_NUL, _NUL_PATTERN
]
"""A worker id: 1 to 256 characters, no NUL."""

TaskId: TypeAlias = Annotated[str, StringConstraints(max_length=256), _REJECT_NUL, _NUL_PATTERN]
"""A task id: at most 256 characters, no NUL."""

Label: TypeAlias = Annotated[
    str, StringConstraints(min_length=1, max_length=256), _REJECT_NUL, _NUL_PATTERN
]
"""A short name or value, such as a header a client sent: 1 to 256 characters, no NUL."""

TraceId: TypeAlias = Annotated[
    str, StringConstraints(min_length=1, max_length=64), _REJECT_NUL, _NUL_PATTERN
]
"""An OpenTelemetry trace or span id as sent (lowercase hex): 1 to 64 characters, no NUL."""
"""A worker id: 1 to 256 characters, no NUL."""


def _is_all_finite(value: Any) -> bool:
    """Whether every number in ``value`` is finite (the common case, so no paths are built)."""
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return False
        elif isinstance(node, dict):
            stack.extend(node.values())  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        elif isinstance(node, list):
            stack.extend(node)  # pyright: ignore[reportUnknownArgumentType]
    return True


def _first_non_finite(value: Any, path: str) -> str | None:
    """Return the JSON path of the first infinite or NaN number in ``value``, or ``None``."""
    if _is_all_finite(value):
        return None
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return where
        elif isinstance(node, dict):
            stack.extend((v, f"{where}.{k}") for k, v in node.items())  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType, reportUnknownArgumentType]
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return None


def _finite_json(value: JsonValue) -> JsonValue:
    where = _first_non_finite(value, "$")
    if where is not None:
        raise ValueError(f"JSON numbers must be finite; {where} is not")
    return value


JsonData: TypeAlias = Annotated[JsonValue, AfterValidator(_finite_json)]
"""Any JSON value whose numbers are all finite (what JSON text can carry and read back)."""
