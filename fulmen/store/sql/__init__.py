"""The SQL store backends: SQLite (the embedded default) and PostgreSQL, one code path.

``SqlStore.connect(url)`` opens either; ``fulmen.store.open_store`` picks it for ``sqlite://``,
``postgresql://`` URLs and bare file paths. Importing this package imports SQLAlchemy, so
``fulmen.store`` imports it only when such a URL is opened.

Modules: ``schema`` (tables), ``dialects`` (what differs between the databases), ``runner``
(one operation = one transaction), ``queue``/``workers``/``records``/``reads``/``expiry`` (the
operations), ``codec`` (rows ↔ models), ``wakeups`` (waking waiters), ``store`` (``SqlStore``).
"""

from __future__ import annotations

from fulmen.store.sql.store import SqlStore

__all__ = ["SqlStore"]
