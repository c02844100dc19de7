"""``column IN (ids)`` for lists of any length, on SQLite and PostgreSQL.

A plain ``IN`` binds one parameter per id, and drivers cap parameters per statement (asyncpg:
32,767; SQLite: 32,766 by default). A long list — a trainer waiting on 40,000 rollouts, a
large batch of spans — is therefore sent as *one* parameter, a JSON array that the database
expands (``json_each`` on SQLite, ``json_array_elements_text`` on PostgreSQL). Short lists keep
the plain ``IN``, which both planners handle best.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import GenericFunction

from fulmen.store.sql.codec import dumps

__all__ = ["INLINE_MAX", "one_of"]

INLINE_MAX: Final = 500
"""Lists up to this length are bound one parameter per id."""


class _json_text_elements(GenericFunction[Any]):
    """The elements of a JSON array of strings, as a one-column table named ``value``."""

    name = "json_each"
    inherit_cache = True


@compiles(_json_text_elements, "postgresql")
def _json_text_elements_postgresql(element: _json_text_elements, compiler: Any, **kw: Any) -> str:
    return f"json_array_elements_text(CAST({compiler.process(element.clauses, **kw)} AS JSON))"


def one_of(column: sa.ColumnElement[str], values: Collection[str]) -> sa.ColumnElement[bool]:
    """Return ``column IN values``, bound as a single parameter when the list is long."""
    if len(values) <= INLINE_MAX:
        return column.in_(values)
    elements = _json_text_elements(dumps(list(values))).table_valued("value")
    return column.in_(sa.select(elements.c.value))
