"""Transaction runners: one synchronous store operation run as one transaction, from async code.

Every store operation is a plain function ``op(conn, *args)`` over a SQLAlchemy ``Connection``
(written once for both databases). A runner opens the transaction, runs the function, commits
or rolls back, and translates driver errors into ``fulmen.errors``: messages name the kind of
failure, never the SQL or its parameters (those stay on the exception's ``__cause__``, which the
store service logs). Two runners exist:

* ``SqliteRunner`` (``sqlite_runner``): the standard ``sqlite3`` driver; small operations run
  right on the event loop thread, large ones on a store-owned thread.
* ``AsyncEngineRunner`` (``async_runner``): an asyncpg engine, the function under
  ``AsyncConnection.run_sync``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

from sqlalchemy import exc as sa_exc

from fulmen.errors import (
    Conflict,
    FulmenError,
    InvalidRequest,
    NotFound,
    StoreError,
    StoreUnavailable,
)
from fulmen.store.sql.dialects import SqlDialect

__all__ = ["TransactionRunner", "translate_error"]

T = TypeVar("T")


class TransactionRunner(Protocol):
    """Runs store operations as transactions.

    ``small=True`` promises the operation touches a handful of rows, so a runner may run it
    without leaving the event loop thread when that is cheaper (SQLite).
    """

    async def write(self, op: Callable[..., T], *args: Any, small: bool = False) -> T:
        """Run ``op(conn, *args)`` in a write transaction and commit it."""
        ...

    async def read(self, op: Callable[..., T], *args: Any, small: bool = False) -> T:
        """Run ``op(conn, *args)`` in a read transaction."""
        ...

    async def aclose(self) -> None:
        """Close every connection; the runner refuses work afterwards."""
        ...


# Integrity errors by kind: PostgreSQL SQLSTATEs and SQLite extended result codes.
_UNIQUE: Final = frozenset({"23505", 1555, 2067})  # unique violation, primary key, unique
_FOREIGN_KEY: Final = frozenset({"23503", 787})
_NOT_NULL: Final = frozenset({"23502", 1299})


def _driver_code(exc: sa_exc.DBAPIError) -> str | int | None:
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate
    errorcode = getattr(orig, "sqlite_errorcode", None)
    return errorcode if isinstance(errorcode, int) else None


def _integrity_error(exc: sa_exc.IntegrityError, dialect: SqlDialect) -> StoreError:
    code = _driver_code(exc)
    if code in _UNIQUE:
        return Conflict(f"{dialect.name} refused a write: a record with the same key exists")
    if code in _FOREIGN_KEY:
        return NotFound(f"{dialect.name} refused a write: it refers to a missing record")
    if code in _NOT_NULL:
        return InvalidRequest(f"{dialect.name} refused a write: a required value is missing")
    return InvalidRequest(f"{dialect.name} refused a write: a constraint was violated ({code})")


def translate_error(exc: BaseException, dialect: SqlDialect) -> FulmenError:
    """Return the ``fulmen.errors`` exception for a driver or SQLAlchemy error.

    Unique violations are ``Conflict`` (409), a missing referenced record ``NotFound``, other
    constraint and value errors ``InvalidRequest``; lost connections ``StoreUnavailable``.
    The wire types keep invalid values from reaching the database, so the last two are a
    second line of defence, not the way bad input is normally refused.
    """
    if isinstance(exc, sa_exc.IntegrityError):
        return _integrity_error(exc, dialect)
    is_data_error = isinstance(exc, sa_exc.DBAPIError) and str(_driver_code(exc)).startswith("22")
    if is_data_error or isinstance(exc, sa_exc.DataError | OverflowError):
        return InvalidRequest(f"{dialect.name} cannot hold a value of the request")
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return StoreUnavailable(f"{dialect.name} store unavailable: {exc}")
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | OSError):
        return StoreUnavailable(f"{dialect.name} store unavailable: {exc}")
    return StoreError(f"{dialect.name} store error: {exc}")
