"""The run, metrics, model-version and release work of ``StoreClient``, over HTTP.

A mixin so ``fulmen.store.client`` stays about rollouts; ``StoreClient`` provides ``_send``.
Every write here is idempotent by a caller-chosen key (``run_id``; a metrics record's
``(run_id, step, time)``; a model version's ``(run_id, version)``; a release's name; a
decision's ``event_id``), so the session's retries never duplicate one. ``update_run`` sets a
value, which is the same when repeated.
"""

from __future__ import annotations

from typing import Any

from fulmen.store.client_ops import OperationCalls, given_fields
from fulmen.store.wire import RunMetricsRequest, RunUpdate
from fulmen.types import ModelVersion, Page, Run, RunMetrics, RunStatus, Unset
from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision

__all__ = ["RunsOverHttp"]


class RunsOverHttp(OperationCalls):
    """The run log's and the release book's work as HTTP requests, each named by its operation."""

    async def _start_run(self, run: Run) -> Run:
        return await self._call("start_run", run)

    async def _update_run(
        self, run_id: str, status: RunStatus | Unset, ended_at: float | Unset | None
    ) -> Run:
        body = RunUpdate.model_construct(**given_fields(status=status, ended_at=ended_at))
        return await self._call("update_run", body, path={"run_id": run_id}, partial=True)

    async def _add_run_metrics(self, metrics: list[RunMetrics]) -> None:
        await self._call("add_run_metrics", RunMetricsRequest.model_construct(metrics=metrics))

    async def _list_runs(self, limit: int, offset: int) -> Page[Run]:
        return await self._call("list_runs", params={"limit": limit, "offset": offset})

    async def _get_run(self, run_id: str) -> Run:
        return await self._call("get_run", path={"run_id": run_id})

    async def _query_run_metrics(
        self, run_id: str, after_step: int | None, limit: int
    ) -> Page[RunMetrics]:
        params: dict[str, Any] = {"limit": limit}
        if after_step is not None:
            params["after_step"] = after_step
        return await self._call("query_run_metrics", path={"run_id": run_id}, params=params)

    async def _add_model_version(self, version: ModelVersion) -> ModelVersion:
        return await self._call("add_model_version", version)

    async def _list_model_versions(self, run_id: str | None) -> list[ModelVersion]:
        params = {"run_id": run_id} if run_id is not None else None
        return await self._call("list_model_versions", params=params)

    async def _put_release(self, release: ReleaseCreate) -> Release:
        return await self._call("put_release", release)

    async def _get_release(self, name: str) -> Release:
        return await self._call("get_release", path={"name": name})

    async def _list_releases(self) -> list[Release]:
        return await self._call("list_releases")

    async def _decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        return await self._call("decide_release", decision, path={"name": name})
