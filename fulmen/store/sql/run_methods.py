"""The run, metrics, model-version and release work of ``SqlStore``.

A mixin so ``fulmen.store.sql.store`` stays about rollouts; ``SqlStore`` provides ``_runner``
and ``_dialect``. Each method is one transaction of ``fulmen.store.sql.runs`` or
``fulmen.store.sql.releases``; the face (``fulmen.store.roles.runs``, ``.releases``) has
checked the arguments.
"""

from __future__ import annotations

from fulmen.store.sql import releases, runs
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.transactions import TransactionRunner
from fulmen.types import ModelVersion, Page, Run, RunMetrics, RunStatus, Unset
from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision

__all__ = ["SqlRunMethods"]

_SMALL_BATCH = 128  # metrics records written on the event loop thread (SQLite)


class SqlRunMethods:
    """The run log's and the release book's work over ``self._runner``."""

    _runner: TransactionRunner
    _dialect: SqlDialect

    async def _start_run(self, run: Run) -> Run:
        return await self._runner.write(runs.start_run, self._dialect, run, small=True)

    async def _update_run(
        self, run_id: str, status: RunStatus | Unset, ended_at: float | Unset | None
    ) -> Run:
        return await self._runner.write(
            runs.update_run, self._dialect, run_id, status, ended_at, small=True
        )

    async def _add_run_metrics(self, metrics: list[RunMetrics]) -> None:
        await self._runner.write(
            runs.add_run_metrics, self._dialect, metrics, small=len(metrics) <= _SMALL_BATCH
        )

    async def _list_runs(self, limit: int, offset: int) -> Page[Run]:
        return await self._runner.read(runs.list_runs, limit, offset, small=limit <= 100)

    async def _get_run(self, run_id: str) -> Run:
        return await self._runner.read(runs.get_run, run_id, small=True)

    async def _query_run_metrics(
        self, run_id: str, after_step: int | None, limit: int
    ) -> Page[RunMetrics]:
        return await self._runner.read(
            runs.query_run_metrics, run_id, after_step, limit, small=limit <= 100
        )

    async def _add_model_version(self, version: ModelVersion) -> ModelVersion:
        return await self._runner.write(runs.add_model_version, self._dialect, version, small=True)

    async def _list_model_versions(self, run_id: str | None) -> list[ModelVersion]:
        return await self._runner.read(runs.list_model_versions, run_id)

    # -- releases ----------------------------------------------------------------------------

    async def _put_release(self, release: ReleaseCreate) -> Release:
        return await self._runner.write(releases.put_release, self._dialect, release, small=True)

    async def _get_release(self, name: str) -> Release:
        return await self._runner.read(releases.get_release, name, small=True)

    async def _list_releases(self) -> list[Release]:
        return await self._runner.read(releases.list_releases)

    async def _decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        return await self._runner.write(
            releases.decide_release, self._dialect, name, decision, small=True
        )
