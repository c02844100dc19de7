"""The run log: training runs, their metrics and the model versions they published.

``RunLog`` is the face the trainer's progress, the dashboard and ``fulmen runs`` depend on;
``ReleaseBook`` (``fulmen.store.roles.releases``) holds the canary releases. The argument
rules are ``fulmen.store.runs``'s, shared with the backends' decisions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fulmen.store.roles.core import StoreCore
from fulmen.store.runs import (
    MAX_METRICS_LIMIT,
    MAX_RUNS_LIMIT,
    check_run_id,
    check_run_paging,
    check_run_update,
)
from fulmen.types._unset import UNSET

if TYPE_CHECKING:
    from fulmen.types import ModelVersion, Page, Run, RunMetrics, RunStatus, Unset

__all__ = ["RunLog"]


class RunLog(StoreCore, ABC):
    """Record runs, their metrics by step and their model versions; read them back."""

    async def start_run(self, run: Run) -> Run:
        """Record a training run as ``running``, or resume the stored run with its id.

        A resumed run keeps its ``started_at``; its name, config and host are replaced and its
        ``ended_at`` cleared. ``updated_at`` is the store's clock.
        """
        async with self._writing:
            return await self._start_run(run)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | Unset = UNSET,
        ended_at: float | Unset | None = UNSET,
    ) -> Run:
        """Change a run's status or end time; ``NotFound`` for an unknown run.

        Moving to a final status without an ``ended_at`` stamps the store's clock; moving back
        to ``running`` clears it.
        """
        status, ended_at = check_run_update(run_id, status, ended_at)
        async with self._writing:
            return await self._update_run(run_id, status, ended_at)

    async def add_run_metrics(self, metrics: Sequence[RunMetrics]) -> None:
        """Store metrics records, all or none; idempotent by ``(run_id, step, time)``.

        A record whose run does not exist raises ``NotFound``; a stored key with other values
        raises ``Conflict``.
        """
        if not metrics:
            return
        async with self._writing:
            await self._add_run_metrics(list(metrics))

    async def list_runs(self, *, limit: int = 100, offset: int = 0) -> Page[Run]:
        """List runs, latest started first; ``next_cursor`` is the next page's offset."""
        check_run_paging(limit=limit, maximum=MAX_RUNS_LIMIT, offset=offset)
        async with self._reading:
            return await self._list_runs(limit, offset)

    async def get_run(self, run_id: str) -> Run:
        """One run, or ``NotFound``."""
        check_run_id(run_id)
        async with self._reading:
            return await self._get_run(run_id)

    async def query_run_metrics(
        self, run_id: str, *, after_step: int | None = None, limit: int = 1000
    ) -> Page[RunMetrics]:
        """Return a run's metrics with ``step > after_step``, by step then time.

        A page never splits a step (it may exceed ``limit`` to finish one); ``next_cursor`` is
        the last step of the page when more follow. A live run's last step may still get
        records (its validation comes after its training metrics): a reader that follows it
        asks again from the step before. ``NotFound`` for an unknown run.
        """
        check_run_id(run_id)
        check_run_paging(limit=limit, maximum=MAX_METRICS_LIMIT, after_step=after_step)
        async with self._reading:
            return await self._query_run_metrics(run_id, after_step, limit)

    async def add_model_version(self, version: ModelVersion) -> ModelVersion:
        """Record a published model version; idempotent by ``(run_id, version)``.

        The same content again returns the stored version; other content raises ``Conflict``.
        An unknown run raises ``NotFound``. ``created_at`` is the store's clock.
        """
        async with self._writing:
            return await self._add_model_version(version)

    async def list_model_versions(self, run_id: str | None = None) -> list[ModelVersion]:
        """Model versions of one run (or of every run), by run id then version."""
        check_run_id(run_id)
        async with self._reading:
            return await self._list_model_versions(run_id)

    # -- the backend's work ----------------------------------------------------------------------

    @abstractmethod
    async def _start_run(self, run: Run) -> Run: ...

    @abstractmethod
    async def _update_run(
        self, run_id: str, status: RunStatus | Unset, ended_at: float | Unset | None
    ) -> Run: ...

    @abstractmethod
    async def _add_run_metrics(self, metrics: list[RunMetrics]) -> None: ...

    @abstractmethod
    async def _list_runs(self, limit: int, offset: int) -> Page[Run]: ...

    @abstractmethod
    async def _get_run(self, run_id: str) -> Run: ...

    @abstractmethod
    async def _query_run_metrics(
        self, run_id: str, after_step: int | None, limit: int
    ) -> Page[RunMetrics]: ...

    @abstractmethod
    async def _add_model_version(self, version: ModelVersion) -> ModelVersion: ...

    @abstractmethod
    async def _list_model_versions(self, run_id: str | None) -> list[ModelVersion]: ...
