"""Training runs for the dashboard: the list, one run's metrics, and which rollouts are a run's.

A rollout names a resources version, not a run. ``fulmen train`` names its rollouts
``RUN_ID-g...`` (the table's ``run`` filter matches that prefix); rollouts enqueued otherwise
belong to a run when their resources version is one the run published: one of the run's model
versions names it, or the snapshot's metadata carries the run's id (``run_id``). Snapshots
never change, so each is read once and remembered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fulmen.store.base import Store

__all__ = ["RunVersions", "list_runs", "run_metrics"]


async def list_runs(store: Store, *, limit: int = 100, offset: int = 0) -> dict[str, Any]:
    """Return a page of runs, latest started first."""
    page = await store.list_runs(limit=limit, offset=offset)
    return {
        "items": [r.model_dump(mode="json") for r in page.items],
        "next_cursor": page.next_cursor,
    }


async def run_metrics(
    store: Store, run_id: str, *, after_step: int | None = None, limit: int = 1000
) -> dict[str, Any]:
    """Return a run and its metrics records with ``step > after_step`` (all when ``None``)."""
    run = await store.get_run(run_id)
    page = await store.query_run_metrics(run_id, after_step=after_step, limit=limit)
    return {
        "run": run.model_dump(mode="json"),
        "metrics": [m.model_dump(mode="json") for m in page.items],
        "next_cursor": page.next_cursor,
    }


class RunVersions:
    """Which resources versions each run published, read incrementally from the store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._read_up_to = 0
        self._by_metadata: dict[str, set[int]] = {}

    async def of(self, run_id: str) -> frozenset[int]:
        """Return the resources versions of ``run_id`` (empty when it published none)."""
        latest = await self._store.latest_resources()
        if latest is not None:
            for version in range(self._read_up_to + 1, latest.version + 1):
                snapshot = latest if version == latest.version else None
                if snapshot is None:
                    snapshot = await self._store.get_resources(version)
                owner = snapshot.metadata.get("run_id")
                if isinstance(owner, str):
                    self._by_metadata.setdefault(owner, set()).add(version)
            self._read_up_to = latest.version
        published = {
            v.resources_version
            for v in await self._store.list_model_versions(run_id)
            if v.resources_version is not None
        }
        return frozenset(published | self._by_metadata.get(run_id, set()))
