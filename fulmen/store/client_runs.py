"""The run, metrics, model-version and release methods of ``StoreClient``, over HTTP.

A mixin so ``fulmen.store.client`` stays about rollouts; ``StoreClient`` provides ``_send``.
Every write here is idempotent by a caller-chosen key (``run_id``; a metrics record's
``(run_id, step, time)``; a model version's ``(run_id, version)``; a release's name; a
decision's ``event_id``), so the session's retries never duplicate one. ``update_run`` sets a
value, which is the same when repeated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from fulmen.store.client_ops import OperationCalls
from fulmen.store.runs import (
    MAX_METRICS_LIMIT,
    MAX_RUNS_LIMIT,
    check_run_paging,
    check_run_update,
)
from fulmen.store.wire import RunMetricsRequest, RunUpdate
from fulmen.types import UNSET, ModelVersion, Page, Run, RunMetrics, RunStatus, Unset
from fulmen.types.releases import Release, ReleaseCreate, ReleaseDecision

__all__ = ["RunsOverHttp"]

_MODEL_VERSIONS = TypeAdapter(list[ModelVersion])


class RunsOverHttp(OperationCalls):
    """``Store``'s run methods as HTTP requests, each named by its operation."""

    async def start_run(self, run: Run) -> Run:
        """See ``Store.start_run``."""
        return await self._call("start_run", run)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | Unset = UNSET,
        ended_at: float | Unset | None = UNSET,
    ) -> Run:
        """See ``Store.update_run``."""
        status, ended_at = check_run_update(run_id, status, ended_at)
        fields: dict[str, Any] = {}
        if status is not UNSET:
            fields["status"] = status
        if ended_at is not UNSET:
            fields["ended_at"] = ended_at
        body: BaseModel = RunUpdate.model_construct(**fields)
        return await self._call("update_run", body, path={"run_id": run_id}, partial=True)

    async def add_run_metrics(self, metrics: Sequence[RunMetrics]) -> None:
        """See ``Store.add_run_metrics``."""
        if metrics:
            request = RunMetricsRequest.model_construct(metrics=list(metrics))
            await self._call("add_run_metrics", request)

    async def list_runs(self, *, limit: int = 100, offset: int = 0) -> Page[Run]:
        """See ``Store.list_runs``."""
        check_run_paging(limit=limit, maximum=MAX_RUNS_LIMIT, offset=offset)
        return await self._call("list_runs", params={"limit": limit, "offset": offset})

    async def get_run(self, run_id: str) -> Run:
        """See ``Store.get_run``."""
        return await self._call("get_run", path={"run_id": run_id})

    async def query_run_metrics(
        self, run_id: str, *, after_step: int | None = None, limit: int = 1000
    ) -> Page[RunMetrics]:
        """See ``Store.query_run_metrics``."""
        check_run_paging(limit=limit, maximum=MAX_METRICS_LIMIT, after_step=after_step)
        params: dict[str, Any] = {"limit": limit}
        if after_step is not None:
            params["after_step"] = after_step
        return await self._call("query_run_metrics", path={"run_id": run_id}, params=params)

    async def add_model_version(self, version: ModelVersion) -> ModelVersion:
        """See ``Store.add_model_version``."""
        return await self._call("add_model_version", version)

    async def list_model_versions(self, run_id: str | None = None) -> list[ModelVersion]:
        """See ``Store.list_model_versions``."""
        params = {"run_id": run_id} if run_id is not None else None
        return await self._call("list_model_versions", params=params)

    async def put_release(self, release: ReleaseCreate) -> Release:
        """See ``Store.put_release``."""
        return await self._call("put_release", release)

    async def get_release(self, name: str) -> Release:
        """See ``Store.get_release``."""
        return await self._call("get_release", path={"name": name})

    async def list_releases(self) -> list[Release]:
        """See ``Store.list_releases``."""
        return await self._call("list_releases")

    async def decide_release(self, name: str, decision: ReleaseDecision) -> Release:
        """See ``Store.decide_release``."""
        return await self._call("decide_release", decision, path={"name": name})


def _segment(value: str) -> str:
    return quote(value, safe="")
