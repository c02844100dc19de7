"""Transaction runners: run one synchronous store operation as one transaction, from async code.

Every store operation is a plain function ``op(conn, *args)`` over a SQLAlchemy ``Connection``
(written once for both databases). A runner opens the transaction, runs the function, commits
or rolls back, and translates driver errors into ``fulmen.errors``. Two runners exist:

* ``SqliteRunner`` (``sqlite_runner``): the standard ``sqlite3`` driver; small operations run
  right on the event loop thread, large ones on a store-owned thread.
* ``AsyncEngineRunner`` (``async_runner``): an asyncpg engine, the function under
  ``AsyncConnection.run_sync``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy import exc as sa_exc

from fulmen.errors import Conflict, FulmenError, StoreError, StoreUnavailable
from fulmen.store.sql.dialects import SqlDialect

__all__ = ["Runner", "translate_error"]

T = TypeVar("T")


class Runner(Protocol):
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


def translate_error(exc: BaseException, dialect: SqlDialect) -> FulmenError:
    """Return the ``fulmen.errors`` exception for a driver or SQLAlchemy error."""
    if isinstance(exc, sa_exc.IntegrityError):
        return Conflict(f"{dialect.name} refused a write as a duplicate: {exc}")
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | OSError) or (
        isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated
    ):
        return StoreUnavailable(f"{dialect.name} store unavailable: {exc}")
    return StoreError(f"{dialect.name} store error: {exc}")
