"""The run, metrics, model-version and release methods of ``SqlStore``.

A mixin so ``fulmen.store.sql.store`` stays about rollouts; ``SqlStore`` provides ``_runner``
and ``_dialect``. Each method is one transaction of ``fulmen.store.sql.runs``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fulmen.store.releases import check_release_name
from fulmen.store.runs import (
    MAX_METRICS_LIMIT,
    MAX_RUNS_LIMIT,
    check_run_id,
    check_run_paging,
    check_run_update,
)
from fulmen.store.sql import releases, runs
from fulmen.store.sql.dialects import SqlDialect
from fulmen.store.sql.transactions import TransactionRunner
from fulmen.types import UNSET, ModelVersion, Page, Run, RunMetrics, RunStatus, Unset
from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision

__all__ = ["SqlRunMethods"]

_SMALL_BATCH = 128  # metrics records written on the event loop thread (SQLite)


class SqlRunMethods:
    """``Store``'s run methods over ``self._runner`` (see the module docstring)."""

    _runner: TransactionRunner
    _dialect: SqlDialect

    async def start_run(self, run: Run) -> Run:
        """See ``Store.start_run``."""
        return await self._runner.write(runs.start_run, self._dialect, run, small=True)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | Unset = UNSET,
        ended_at: float | Unset | None = UNSET,
    ) -> Run:
        """See ``Store.update_run``."""
        status, ended_at = check_run_update(run_id, status, ended_at)
        return await self._runner.write(
            runs.update_run, self._dialect, run_id, status, ended_at, small=True
        )

    async def add_run_metrics(self, metrics: Sequence[RunMetrics]) -> None:
        """See ``Store.add_run_metrics``; the batch is all-or-nothing."""
        if metrics:
            batch = list(metrics)
            await self._runner.write(
                runs.add_run_metrics, self._dialect, batch, small=len(batch) <= _SMALL_BATCH
            )

    async def list_runs(self, *, limit: int = 100, offset: int = 0) -> Page[Run]:
        """See ``Store.list_runs``."""
        check_run_paging(limit=limit, maximum=MAX_RUNS_LIMIT, offset=offset)
        return await self._runner.read(runs.list_runs, limit, offset, small=limit <= 100)

    async def get_run(self, run_id: str) -> Run:
        """See ``Store.get_run``."""
        check_run_id(run_id)
        return await self._runner.read(runs.get_run, run_id, small=True)

    async def query_run_metrics(
        self, run_id: str, *, after_step: int | None = None, limit: int = 1000
    ) -> Page[RunMetrics]:
        """See ``Store.query_run_metrics``."""
        check_run_id(run_id)
        check_run_paging(limit=limit, maximum=MAX_METRICS_LIMIT, after_step=after_step)
        return await self._runner.read(
            runs.query_run_metrics, run_id, after_step, limit, small=limit <= 100
        )

    async def add_model_version(self, version: ModelVersion) -> ModelVersion:
        """See ``Store.add_model_version``."""
        return await self._runner.write(runs.add_model_version, self._dialect, version, small=True)

    async def list_model_versions(self, run_id: str | None = None) -> list[ModelVersion]:
        """See ``Store.list_model_versions``."""
        check_run_id(run_id)
        return await self._runner.read(runs.list_model_versions, run_id)

    # -- releases ----------------------------------------------------------------------------

    async def put_release(self, release: ReleaseCreate) -> Release:
        """See ``Store.put_release``."""
        return await self._runner.write(releases.put_release, self._dialect, release, small=True)

    async def get_release(self, name: str) -> Release:
        """See ``Store.get_release``."""
        check_release_name(name)
        return await self._runner.read(releases.get_release, name, small=True)

    async def list_releases(self) -> list[Release]:
        """See ``Store.list_releases``."""
        return await self._runner.read(releases.list_releases)

    async def decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        """See ``Store.decide_release``."""
        check_release_name(name)
        return await self._runner.write(
            releases.decide_release, self._dialect, name, decision, small=True
        )
